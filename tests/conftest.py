"""Shared test helpers: tiny, offline configs and quiet TensorFlow."""

import functools
import gc
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Memory tests read the CPU allocator's peak, which TensorFlow keeps only with
# its BFC allocator (or with oneDNN on): before TensorFlow starts.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
# XLA compiles without LLVM's optimizations (--xla_backend_optimization_level=0):
# the same programs, with the same results, compiled in a third of the time; a
# test's few steps never pay back what the optimizations cost. A tiny DenseNet's
# first run on JAX took 32 s, 21 s of them compiling, and 13 s, 6 s compiling
# (EPYC-oneDNN, loaded). Set before TensorFlow starts, for this process's
# jit_compile=True and every process a test starts (they inherit the
# environment, as pytest-xdist's workers do); a user's own XLA_FLAGS are kept.
FAST_XLA = "--xla_backend_optimization_level=0"
if FAST_XLA not in os.environ.get("XLA_FLAGS", "").split():
    os.environ["XLA_FLAGS"] = " ".join([*os.environ.get("XLA_FLAGS", "").split(), FAST_XLA])
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Python's full garbage collections walk every live object: while TensorFlow
# and Keras import (their 400,000 objects live as long as the process), and
# then again and again as a session's runs leave their graphs behind, 15% of
# the tests' time in this process. What is loaded, and what each test leaves
# alive, is frozen: walked no more (`_freeze_what_outlives_a_test`).
gc.disable()
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

gc.freeze()
gc.enable()

import keras_course_recipes as kit  # noqa: E402
from keras_course_recipes import recipe_config as _config  # noqa: E402
from keras_course_recipes.tools import compare as _compare  # noqa: E402

# Two logical CPU devices, set before TensorFlow initializes its devices, so
# that MirroredStrategy tests (execution.devices=cpu:2) run in this process;
# everything else runs on the first, as it would with one.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)

_IN_A_FAST_TEST = []  # non-empty while a test runs under `make test-fast`


def pytest_configure(config):
    """`make test-fast` (-m "not slow") starts no process from a test, as its
    help line says: a test that tries fails there, and belongs among the slow
    ones. (pytest-xdist's own workers are processes, started outside tests.)

    The JAX processes the tests start share their compilations through JAX's
    own persistent cache, in a folder of this session's: a run and its
    resumed half, or one recipe in two tests, compile the same step once.
    The processes pytest-xdist starts inherit the folder; the first removes it."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        cache = tempfile.mkdtemp(prefix="recipes-tests-jax-cache-")
        os.environ.update(JAX_COMPILATION_CACHE_DIR=cache,
                          JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                          JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
    if config.getoption("markexpr") == "not slow":
        def refuse(event, args):
            if _IN_A_FAST_TEST and event in ("subprocess.Popen", "os.system", "os.posix_spawn"):
                raise RuntimeError(f"make test-fast starts no process: mark this test slow "
                                   f"({event} {args[:2]})")
        sys.addaudithook(refuse)


@pytest.fixture(autouse=True)
def _freeze_what_outlives_a_test():
    yield
    gc.collect()  # the test's own garbage: its models, its graphs
    gc.freeze()


@pytest.fixture(autouse=True)
def _no_process_under_test_fast(request):
    fast = request.config.getoption("markexpr") == "not slow"
    _IN_A_FAST_TEST[:] = [True] if fast else []
    if fast:
        sys.setprofile(_refuse_training(_training_calls()))
    yield
    sys.setprofile(None)
    _IN_A_FAST_TEST.clear()


def _training_calls():
    """{code object: name} of the calls that train: Keras' `fit`, and PyTorch's
    backward pass where a test has imported PyTorch."""
    # Unwrapped: Keras' traceback filter is one wrapper, one code object, around many calls.
    calls = {inspect.unwrap(keras.Model.fit).__code__: "keras.Model.fit"}
    if "torch.autograd" in sys.modules:
        backward = inspect.unwrap(sys.modules["torch.autograd"].backward)
        calls[backward.__code__] = "torch.autograd.backward"
    return calls


def _refuse_training(calls):
    """A profile function (sys.setprofile: it watches calls and replaces nothing)
    that fails a `make test-fast` test as it starts one of `calls`: the fast set
    trains nothing, as its help line says."""
    def profile(frame, event, argument):
        if event == "call" and any(frame.f_code is code for code in calls):
            raise RuntimeError(f"make test-fast trains nothing: mark this test slow "
                               f"({calls[frame.f_code]})")
    return profile


# A few steps on a handful of random examples: enough to exercise every stage.
TINY = [
    "data.source=synthetic",
    "data.synthetic_examples=64",
    "data.batch_size=16",
    "train.epochs=1",
    "train.steps_per_epoch=2",
    "run.verbose=0",
    # TensorFlow started with the test process: oneDNN's setting is whatever
    # it started with (the command line sets it; tests/test_environment.py).
    "execution.onednn=null",
    # The default seed, stated: a command shown once per seed runs once in tests/test_docs.py.
    "execution.seed=0",
]


# Per recipe module: the smallest model of its family, and what fits two epochs.
TINY_MODEL = {
    "densenet_cifar10_cpu": ["model.widths=[8,8,8]", "model.growth_rates=[4,4,4]",
                             "model.whitening_images=32",
                             # a YAML's own (cifar10_record's 8) would exceed the 1 epoch
                             "train.validation_freq=1"],
    "densenet_cifar100": ["model.depth=10", "model.growth_rate=4", "train.warmup_epochs=0"],
    "graph_lessons": ["model.units=8"],
    "revnet_cifar10": ["model.init_filters=8", "model.units=[2,2,2]", "model.filters=[8,8,16]"],
}


def shared_folder(tmp_path_factory, name):
    """The folder `name` of this session, which pytest-xdist's workers share."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


class SharedRuns:
    """What a process that ran several tests' runs gave (`results`: each run's
    result or its traceback, by label): `runs[label]` fails the test that
    asks where that run failed, or where the process ended before it
    (`ended`: its exit and the end of its stderr)."""

    def __init__(self, folder, results, ended):
        self.folder, self.results, self.ended = folder, results, ended

    def __getitem__(self, label):
        assert label in self.results, f"the shared process ended before {label!r}: {self.ended}"
        found = self.results[label]
        assert "driver_traceback" not in found, f"{label}: {found['driver_traceback']}"
        return found


def run_once(folder, name, driver, runs, env):
    """Runs the Python code `driver` on `runs` (its argv[1], as JSON) once per
    session, writing {label: result} to the file its argv[2] names,
    `folder/NAME.json`: the pytest-xdist worker that asks first runs it, and
    the other, asking meanwhile, waits for it (a lock) and reads what it
    wrote. Returns that as `SharedRuns`."""
    import fcntl
    import subprocess

    results, ended = folder / f"{name}.json", folder / f"{name}.ended"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ended.exists():
            try:
                process = subprocess.run(
                    [sys.executable, "-c", driver, json.dumps(runs), str(results)], cwd=ROOT,
                    env=env, capture_output=True, text=True, timeout=900)
                ended.write_text(f"exit {process.returncode}\n{process.stderr[-3000:]}")
            except subprocess.TimeoutExpired as error:
                ended.write_text(f"{error}\n{str(error.stderr or '')[-3000:]}")
    return SharedRuns(folder, json.loads(results.read_text()) if results.exists() else {},
                      ended.read_text())


@pytest.fixture
def tiny_config(tmp_path):
    """Returns a function: recipe name and overrides -> a tiny resolved config."""

    def make(name, *overrides):
        items = [*TINY, *TINY_MODEL.get(kit.module_of(name), []),
                 f"run.dir={tmp_path / 'run'}", *overrides]
        return _config.resolve(name, overrides=items, announce=lambda line: None)

    return make


@pytest.fixture(autouse=True)
def float32_policy():
    """Leaves the global dtype policy as it was: a run may set mixed precision."""
    yield
    if "keras" in sys.modules:
        sys.modules["keras"].mixed_precision.set_global_policy("float32")


def run_with(recipe, config, *more_callbacks):
    """Trains `config` through the harness, with `more_callbacks` after the
    harness's own; returns the run's metrics (`recipe` is its module, kept
    for the reader: the config names it)."""
    from keras_course_recipes import harness

    assert recipe.__name__ == f"keras_course_recipes.recipes.{kit.module_of(config['recipe'])}"
    return harness.train(config, extra_callbacks=more_callbacks)


def output_and_gradients(layer, x, variables=()):
    """`layer(x)` and the gradients of a loss through it for `x` and
    `variables`, in a graph; the loss, the sum of squared outputs, sends
    gradients other than ones upstream."""
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
        return y, *tape.gradient(loss, [x, *variables])
    return step(x)


def kit_source(folder):
    """What `pip install .` reads of the checkout, copied into `folder`: a build
    writes build/ and *.egg-info where it runs, so two at once in the
    checkout (pytest's two processes) would collide."""
    import shutil

    for name in ("pyproject.toml", "README.md", "LICENSE"):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, folder / name)
    for name in ("keras_course_recipes", "recipes", "models", "callbacks", "configs"):
        shutil.copytree(ROOT / name, folder / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return folder


class FreshPythons:
    """Two virtual environments that see the pinned stack (this one's
    site-packages, through a .pth line) but not this checkout, nor the kit
    installed editable here: `bare`, as a machine without the kit, and
    `kit`, with the wheel `pip wheel .` builds installed (`--no-deps`), as a
    student's who installed it. `kernel(python, style)` registers a Jupyter
    kernel on one, launched as Jupyter or VS Code launches kernels."""

    def __init__(self, folder, source=None):
        """`source`: a folder laid out as `kit_source` copies the checkout (its copy, else)."""
        import subprocess
        import sysconfig

        self.folder = folder
        stack = sysconfig.get_paths()["purelib"]
        wheels = folder / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        str(source or kit_source(folder / "source")), "-w", str(wheels)],
                       check=True, capture_output=True)
        self.wheel = next(wheels.glob("keras_course_recipes-*.whl"))
        for name in ("bare", "kit"):
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / name)],
                           check=True)
            python = folder / name / "bin" / "python"
            purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                      "get_paths()['purelib'])"], capture_output=True, text=True,
                                     check=True).stdout.strip()
            Path(purelib, "pinned_stack.pth").write_text(stack + "\n")
            setattr(self, name, python)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(self.kit), "install",
                        "--quiet", "--no-deps", str(self.wheel)], check=True, capture_output=True)

    def kernel(self, python, style="jupyter"):
        """The name of a kernelspec (in this object's JUPYTER_PATH) that runs `python`."""
        import json

        connection = {"jupyter": ["-f", "{connection_file}"],  # Jupyter, nbclient, Colab
                      "vscode": ["--ip=127.0.0.1", "--f={connection_file}"]}[style]
        name = f"{Path(python).parents[1].name}-{style}"
        spec = self.folder / "jupyter" / "kernels" / name
        spec.mkdir(parents=True, exist_ok=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [str(python), "-m", "ipykernel_launcher", *connection],
            "display_name": name, "language": "python"}))
        return name

    @property
    def jupyter_path(self):
        return str(self.folder / "jupyter")


@pytest.fixture(scope="session")
def fresh_pythons(tmp_path_factory, request):
    # A session fixture is made before `_no_process_under_test_fast` marks the test.
    if request.config.getoption("markexpr") == "not slow":
        pytest.fail("fresh_pythons starts processes (pip, venv): mark the test slow")
    return FreshPythons(tmp_path_factory.mktemp("fresh_pythons"))


MEASURE_IN_A_PROCESS = _compare.measure_mode
# The side of the square matmul chain that measures the device's peak for a
# row of compare's measured in this process: the worker's 2048 took 0.7 s of
# each mode (EPYC-oneDNN, idle), as long as a tiny recipe's whole measurement.
TINY_MATMUL = 256


def measure_tensorflow_modes_here(name, mode, steps, config_files, overrides, folder, label):
    """`compare`'s worker (`compare.measure_mode`) for a TensorFlow mode, in
    this process: the configuration trains as its worker would train it,
    without paying for a process that starts TensorFlow again
    (tests/test_compare.py starts the real ones, in every mode), and its
    matmul peak is measured on `TINY_MATMUL`-square matrices. Keras'
    other backends keep their process. (This process has the two logical
    CPUs that `execution.devices=cpu:2` asks for.)"""
    from keras_course_recipes.tools import measure

    if mode in _compare.BACKEND_MODES:
        return MEASURE_IN_A_PROCESS(name, mode, steps, config_files, overrides, folder, label)
    job = _compare.measurement_job(name, mode, steps, config_files, overrides, folder, label)
    full_size = measure.matmul_flops_per_s
    measure.matmul_flops_per_s = functools.partial(full_size, size=TINY_MATMUL)
    try:
        measure.measure(job)
    finally:
        measure.matmul_flops_per_s = full_size
    return json.loads(Path(job["out"]).read_text())
