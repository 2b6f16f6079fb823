"""`compare`'s worker: execution modes of one recipe, measured in a process of their own.

    python -m keras_course_recipes.tools.measure '[{"name": ..., "mode": ..., "steps": ..., ...}, ...]'

Its argument is a list of jobs, each one mode (one object is one job), all
on the process's backend, measured one after the other (`measure_jobs`).

It builds the recipe (`build`), so every mode trains the very same model,
optimizer, loss, batch and input stream, and times its training steps with
the recipe's own `Timing` callback. Keras counts neither FLOPs nor what the
device reaches, so this module does: the model's forward FLOPs are read from
its graph (TensorFlow's profiler, XLA's cost analysis on JAX, PyTorch's
FlopCounterMode on torch), and a square matmul measures the device in the
same process, at the run's precision, for as long as the measured steps took
(at most 1 s). Keras' backend is the process's:
compare starts a `jax_*` or `torch_*` mode's with `KERAS_BACKEND` set.

A row's `peak_rss_mb` is the process's peak resident memory while its mode
ran: Linux's count restarts before each job after the first, at what the
process holds then, so that a second mode's peak counts what the first left
resident but not the first's own peak. Where it cannot restart (no /proc),
a later job's is None, as is its `peak_gpu_mb` always: JAX's peak of GPU
memory cannot be restarted.
"""

import json
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

import keras_course_recipes as kit
from keras_course_recipes.callbacks.timing import Timing, execution_mode
from keras_course_recipes import harness, machine, recipe_config, rundir
from keras_course_recipes.augment import network_of
from keras_course_recipes.tools import loops
from keras_course_recipes.tools.compare import BACKEND_MODES, SPE, WARMUP_STEPS

BACKEND = keras.backend.backend()
JAX = BACKEND == "jax"

# Modes that time whole calls of several steps: no per-step input wait.
MULTI_STEP_MODES = {"graph_spe", "loop_epoch"}


def measure_jobs(jobs):
    """`measure` for each of `jobs` in turn, each after the first with the
    peak resident memory counted afresh (`_restart_peak_rss`)."""
    for index, job in enumerate(jobs):
        measure(job, peak_rss=index == 0 or _restart_peak_rss(), peak_gpu=index == 0)


def _restart_peak_rss():
    """Restarts this process's peak resident memory (Linux's VmHWM, which
    `machine.peak_rss_mb` reads) at what it holds now; False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def measure(job, peak_rss=True, peak_gpu=True):
    """Runs the recipe in `job` and measures its training steps in `job["mode"]`;
    writes the row to `job["out"]`. `peak_rss`, `peak_gpu`: whether this
    process's peak resident memory, and its GPU's, are this job's (else the
    row's are None)."""
    mode, steps = job["mode"], job["steps"]
    backend, execution = BACKEND_MODES.get(mode, ("tensorflow", mode if mode in ("eager", "xla")
                                                               else "graph"))
    overrides = [*job["overrides"], f"execution.mode={execution}", f"run.dir={job['run_dir']}",
                 f"execution.backend={backend}",
                 "run.verbose=0", f"train.steps_per_epoch={1 + WARMUP_STEPS + steps}"]
    if mode == "graph_spe":
        # One execution of SPE steps to trace, then whole executions.
        overrides += [f"execution.steps_per_execution={SPE}",
                      f"train.steps_per_epoch={SPE * (1 + -(-steps // SPE))}"]
    config = recipe_config.resolve(job["name"], job["config_files"], overrides,
                             announce=lambda line: None)
    strategy = harness.prepare(config)
    with strategy.scope():
        experiment = kit.load(job["name"]).build(config)
    run_dir = Path(job["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_config(run_dir, config)  # says what this row measured
    model, data = experiment.model, experiment.data
    timing = Timing(batch_size=data.batch_size)
    _train(mode, experiment, timing, config["train"]["steps_per_epoch"], steps)

    first_steps = {"graph_spe": SPE, "loop_epoch": 1 + WARMUP_STEPS}.get(mode, 1)
    summary = timing.summary(warmup_steps=0 if mode in MULTI_STEP_MODES else WARMUP_STEPS)
    trace_s = max(summary["first_step_s"] - first_steps * summary["step_ms_median"] / 1000, 0.0)
    network = network_of(model)
    count_flops, matmul_rate = {"jax": (jax_forward_flops, jax_matmul_flops_per_s),
                                "torch": (torch_forward_flops, torch_matmul_flops_per_s)}.get(
        BACKEND, (forward_flops, matmul_flops_per_s))
    flops_per_step = 3 * timing.batch_size * count_flops(network, experiment.data.input_shape)
    # The peak is timed over the steps' own span (up to 1 s): a short run's
    # peak is as long a look at the device as its steps had.
    matmul = matmul_rate(keras.mixed_precision.global_policy().compute_dtype,
                         min_seconds=min(1.0, steps * summary["step_ms_median"] / 1000))
    achieved = flops_per_step / (summary["step_ms_median"] / 1000)
    row = {
        "mode": mode,
        "replicas": getattr(strategy, "num_replicas_in_sync", 1),
        "global_batch": experiment.data.batch_size,
        "mode_used": mode if mode.startswith("loop_") else execution_mode(model),
        "trace_s": trace_s,
        "step_ms_median": summary["step_ms_median"],
        "step_ms_p10": summary["step_ms_p10"],
        "step_ms_p90": summary["step_ms_p90"],
        "images_per_s": summary["images_per_s"],
        "input_wait_fraction": (None if mode in MULTI_STEP_MODES
                                else summary["input_wait_fraction"]),
        "peak_rss_mb": machine.peak_rss_mb() if peak_rss else None,
        "peak_gpu_mb": _peak_gpu_mb() if peak_gpu else None,
        "flops_per_step": flops_per_step,
        "achieved_flops_per_s": achieved,
        "matmul_flops_per_s": matmul,
        "mfu": achieved / matmul,
    }
    Path(job["out"]).write_text(json.dumps({
        "row": row, "params": model.count_params(), "device": machine.device_info(),
        "versions": machine.versions(), "config": config}, indent=2))


def _train(mode, experiment, timing, total, steps):
    """Trains `experiment`'s model `total` steps in `mode`, timed by `timing`
    (`steps` of them in one call for `loop_epoch`)."""
    model, data = experiment.model, experiment.data
    batches = timing.instrument(data.train)
    if mode == "graph_ready":
        # One batch, repeated: an input that is always ready.
        batches = timing.instrument(tf.data.Dataset.from_tensors(next(iter(data.train))).repeat())
    if mode in ("loop_eager", "loop_function"):
        _time_loop(model, timing, batches, total, use_function=mode == "loop_function")
    elif mode == "loop_epoch":
        _time_epoch_function(model, timing, batches, steps)
    else:
        model.fit(batches, epochs=1, steps_per_epoch=total, callbacks=[timing], verbose=0)


def _time_loop(model, timing, batches, total, use_function):
    """`total` hand-written steps, each timed by `timing` as `fit` would call it."""
    step = loops.train_step(model, use_function)
    timing.set_model(model)
    timing.on_epoch_begin(0)
    iterator = iter(batches)
    for index in range(total):
        timing.on_train_batch_begin(index)
        loss = step(iterator)
        timing.on_train_batch_end(index, {"loss": loss})
    timing.on_epoch_end(0)


def _time_epoch_function(model, timing, batches, steps):
    """Two calls of the whole-epoch function: one that traces and warms up,
    then `steps` timed steps in a single call."""
    epoch = loops.train_epoch(model)
    timing.set_model(model)
    timing.on_epoch_begin(0)
    iterator, done = iter(batches), 0
    for count in (1 + WARMUP_STEPS, steps):
        timing.on_train_batch_begin(done)
        # A tensor, not a Python int: a new int would trace the function again.
        loss = epoch(iterator, tf.constant(count))
        done += count
        timing.on_train_batch_end(done - 1, {"loss": loss})
    timing.on_epoch_end(0)


def forward_flops(model, input_shape):
    """Floating-point operations of one image's forward pass, read from the
    model's graph (a multiply-add counts 2)."""
    spec = tf.TensorSpec([1, *input_shape], tf.float32)
    graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec).graph
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


def jax_forward_flops(model, input_shape):
    """`forward_flops` on JAX: XLA's cost analysis of the forward pass, before
    XLA optimizes it (a multiply-add counts 2)."""
    import jax

    images = jax.numpy.zeros([1, *input_shape], "float32")
    lowered = jax.jit(lambda x: model(x, training=False)).lower(images)
    return int(lowered.cost_analysis()["flops"])


def torch_forward_flops(model, input_shape):
    """`forward_flops` on torch: PyTorch's FlopCounterMode over one forward pass."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros([1, *input_shape]), training=False)
    return counter.get_total_flops()


def torch_matmul_flops_per_s(dtype, size=2048, chain=4, min_seconds=1.0):
    """`matmul_flops_per_s` on torch: the same matmul chain, eager."""
    import torch

    dtype = getattr(torch, dtype)
    a = torch.randn(size, size).to(dtype)

    def run():
        x = a
        for _ in range(chain):
            x = (x @ a) * (1.0 / size)  # stays finite
        return float(x.float().sum())

    return _rate(run, 2 * size**3 * chain, min_seconds)


def _peak_gpu_mb():
    """Peak memory of the first GPU in MiB, or None on a CPU."""
    if not machine.gpus():
        return None
    if JAX:
        import jax

        return jax.devices()[0].memory_stats()["peak_bytes_in_use"] / 2**20
    return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


def jax_matmul_flops_per_s(dtype, size=2048, chain=4, min_seconds=1.0):
    """`matmul_flops_per_s` on JAX: the same matmul chain, under `jax.jit`."""
    import jax

    a = jax.numpy.asarray(np.random.default_rng(0).normal(size=(size, size)), dtype)

    @jax.jit
    def run(x):
        for _ in range(chain):
            x = (x @ a) * jax.numpy.asarray(1.0 / size, dtype)  # stays finite
        return x.astype("float32").sum()

    return _rate(lambda: run(a).block_until_ready(), 2 * size**3 * chain, min_seconds)


def _rate(call, flops_per_call, min_seconds):
    """FLOP/s of `call`, warmed up once, then repeated for at least `min_seconds`."""
    call()
    calls, started = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds:
            return flops_per_call * calls / elapsed


def matmul_flops_per_s(dtype, size=2048, chain=4, min_seconds=1.0):
    """FLOP/s of `size`-square matmuls in `dtype` on the default device:
    chains of `chain` matmuls, repeated for at least `min_seconds`."""
    a = tf.cast(tf.random.normal([size, size], dtype=tf.float32), dtype)

    @tf.function
    def run(x):
        for _ in range(chain):
            x = tf.matmul(x, a) * tf.cast(1.0 / size, dtype)  # stays finite
        return tf.reduce_sum(tf.cast(x, tf.float32))

    return _rate(lambda: run(a).numpy(), 2 * size**3 * chain, min_seconds)


if __name__ == "__main__":
    jobs = json.loads(sys.argv[1])
    measure_jobs(jobs if isinstance(jobs, list) else [jobs])
