"""What a result was measured on, and what this machine can do: the packages
installed here and their versions, the checkout's commit, the backend Keras runs
on, its accelerators, the CPU's name, cores and features, the process's peak
memory, and whether bfloat16 trains faster than float32 on this CPU. Read as a run
finishes (metrics.json) and by the tools that time or record one; it sets nothing
up (process.py does)."""

import functools
import importlib.metadata
import importlib.util
import os
import platform
import time
from pathlib import Path

from keras_course_recipes import __version__
from keras_course_recipes.errors import checkout


# CPU features that decide TensorFlow's kernels: with AVX-512 VNNI, BF16 or
# AMX it runs oneDNN's (_Mkl*) instead of Eigen's.
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def installed(package):
    """Whether `package` can be imported here (without importing it)."""
    return importlib.util.find_spec(package) is not None


def has_tensorflow():
    """Whether TensorFlow is installed; Keras on JAX trains without it."""
    return installed("tensorflow")


def backend():
    """The backend Keras runs on: "tensorflow", "jax" or "torch"."""
    import keras

    return keras.backend.backend()


def gpus():
    """The names of the GPUs that Keras' backend computes on."""
    name = backend()
    if name == "jax":
        import jax

        return [device.device_kind for device in jax.devices() if device.platform == "gpu"]
    if name == "torch":
        import torch

        return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]
    import tensorflow as tf

    return [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]


def versions():
    """The versions of the packages a result depends on, and the commit of the
    checkout the kit runs from (None from a wheel)."""
    found = {"keras-course-recipes": __version__, "commit": commit(), "tensorflow": None}
    if has_tensorflow():
        import tensorflow as tf

        found["tensorflow"] = tf.__version__  # installed as tensorflow-cpu or tensorflow
    extra = {"jax": ("jax", "jaxlib"), "torch": ("torch",)}.get(backend(), ())
    for package in ("keras", "keras-cv", *extra):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def commit():
    """The commit the kit's checkout has checked out (12 hex digits), read from its
    .git without starting a process, as a run finishes; None outside a checkout.
    Edits not yet committed are not seen."""
    root = checkout()
    git = root / ".git" if root else None
    if git is None or not git.exists():
        return None
    try:
        if git.is_file():  # a worktree: "gitdir: PATH"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head[:12]
        ref = head[5:]
        common = Path((git / "commondir").read_text().strip()) if (git / "commondir").is_file() else None
        for base in filter(None, [git, common and (git / common).resolve()]):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()[:12]
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line[:12]
    except (OSError, IndexError):
        return None
    return None


def device_info():
    """The GPUs Keras' backend computes on, and the CPU's name, cores and features."""
    name, flags, generation = _cpu()
    return {"backend": backend(), "gpus": gpus(), "cpu": name,
            # Two CPUs named "AMD EPYC" with the same features can differ 1.8x in speed.
            "cpu_generation": generation,
            "cpu_cores": cpu_cores(),
            "cpu_features": [feature for feature in CPU_FEATURES if feature in flags],
            # Unset: TensorFlow's choice (oneDNN kernels with AVX-512 VNNI or newer).
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "platform": platform.platform()}


def cpu_cores():
    """The cores this process may run on (Linux's affinity; elsewhere every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def device_label(device):
    """The GPUs of a `device_info()` dict, or its CPU when there are none."""
    if device["gpus"]:
        return ", ".join(device["gpus"])
    features = device.get("cpu_features") or []
    newest = f", {features[-1]}" if features else ""  # with the generation, enough to tell machines apart
    generation = f"{device['cpu_generation']}, " if device.get("cpu_generation") else ""
    return f"{device['cpu']} ({generation}{device['cpu_cores']} cores{newest})"


def warn_if_bfloat16_is_slow():
    """Prints one line when mixed_bfloat16 is about to train slower than
    float32 on this CPU, which a user choosing bfloat16 for speed would not
    expect: where the CPU lacks bfloat16 instructions and TensorFlow emulates
    them (15x slower), and on an Intel Xeon with AVX512_BF16 but no AMX
    (0.62x). The CPU's features cannot tell the second from AMD's AVX512_BF16,
    which gains 1.64x, so a probe measures it."""
    if gpus():
        return
    speedup = bfloat16_speedup()
    if speedup < 0.9:  # the probe's noise is a few percent; about even is no reason to warn
        print(f"warning: execution.precision=mixed_bfloat16, but TensorFlow's bfloat16 "
              f"convolutions ran at {speedup:.2f}x float32's speed on this CPU just now; set "
              "execution.precision=float32 for speed (docs/machines.md says which CPUs gain).",
              flush=True)


@functools.cache
def bfloat16_speedup():
    """How many times as fast as in float32 a 3x3 convolution of 128 maps
    runs in bfloat16 on TensorFlow's CPU kernels: the best of 5 timings of
    each, after one to warm up. TensorFlow has no query for this; the probe
    takes about a third of a second where bfloat16 is not emulated."""
    import tensorflow as tf

    images, kernel = tf.random.uniform([16, 32, 32, 128]), tf.random.uniform([3, 3, 128, 128])
    best = {}
    for dtype in (tf.float32, tf.bfloat16):
        convolve = tf.function(lambda x, k: tf.nn.conv2d(x, k, strides=1, padding="SAME"))
        x, k = tf.cast(images, dtype), tf.cast(kernel, dtype)
        times = []
        for _ in range(6):
            start = time.perf_counter()
            convolve(x, k).numpy()
            times.append(time.perf_counter() - start)
        best[dtype] = min(times[1:])
    return best[tf.float32] / best[tf.bfloat16]


def peak_rss_mb():
    """This process's peak resident memory in MiB: Linux's VmHWM, which
    starts afresh when the process starts. Not `ru_maxrss`, which Linux
    carries over from the process that started this one: a worker started
    by a large process (a test run, say) would report that one's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass  # no /proc
    try:
        import resource  # POSIX only
    except ImportError:
        return None  # Windows: not measured
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu():
    """The CPU's model name, its feature flags and its generation ("family
    26, model 2"; None if unknown), from /proc/cpuinfo where there is one."""
    name, flags, numbers = platform.processor() or platform.machine(), set(), {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() in ("cpu family", "model"):
                numbers[key.strip()] = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    generation = (f"family {numbers['cpu family']}, model {numbers['model']}"
                  if len(numbers) == 2 else None)
    return name, flags, generation
