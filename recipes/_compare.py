"""Execution-mode comparison: one recipe's training step in every mode, side by side.

    python -m recipes compare mnist_mlp modes=eager,graph,xla steps=50

Each mode runs in a fresh process. The process runs the recipe itself (its
data pipeline, model, optimizer and loss, compiled as the recipe compiles
them) but takes over its `fit` call, so that every mode trains the very same
setup on the same input stream:

- `eager`, `graph`, `xla`: Keras' own `fit` in that execution mode;
- `graph_spe`: `fit` in graph mode with `steps_per_execution` > 1;
- `loop_eager`, `loop_function`: a hand-written `GradientTape` step, without
  and with `tf.function`: the low-level reference that shows what `fit` adds;
- `graph_ready` (asked for by name): `fit` in graph mode on one batch repeated,
  an input that is always ready. Its step time is the step without the input
  pipeline, and its input wait is the floor of that measurement (Keras'
  dispatch before the step asks for its batch).

The first step (tracing or compiling) and `WARMUP_STEPS` more are left out of
the steady-state figures. Keras counts neither FLOPs nor a device's
throughput, so this module does: the model's forward FLOPs are read from its
graph, and a square matmul measures what the device reaches in the same
process, at the run's precision.
"""

import datetime
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import recipes
from recipes import RUNS_DIR, UserError, _config
from recipes._tables import device_label, markdown_table, number_cell, write_csv

DEFAULT_MODES = ["eager", "graph", "xla", "graph_spe", "loop_eager", "loop_function"]
MODES = [*DEFAULT_MODES, "graph_ready"]
DEFAULT_STEPS = 30
WARMUP_STEPS = 3
SPE = 10  # steps per execution in graph_spe
COLUMNS = ["mode", "trace_s", "step_ms_median", "step_ms_p10", "step_ms_p90",
           "images_per_s", "speedup_vs_eager", "step_vs_loop_function", "input_wait_fraction",
           "peak_rss_mb", "peak_gpu_mb", "flops_per_step", "achieved_flops_per_s",
           "matmul_flops_per_s", "mfu"]
# Model sizes for `compare-sizes`, per recipe module: the key and its values.
SIZES = {
    "mnist_mlp": ("model.hidden_units", [[32, 32], [256, 256], [1024, 1024], [4096, 4096]]),
    "cifar10_cnn": ("model.filters", [[8, 16], [32, 64], [64, 128], [128, 256]]),
    "densenet_cifar100": ("model.depth", [10, 22, 40, 100]),
}


def split_options(items, allowed):
    """Separates `name=value` options in `allowed` from config overrides."""
    options, overrides = {}, []
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key in allowed:
            options[key] = value
        else:
            overrides.append(item)
    return options, overrides


def parse_modes(text):
    modes = [mode.strip() for mode in text.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise UserError(f"Unknown mode(s) {', '.join(unknown) or '(none)'} in modes=; "
                        f"known: {','.join(MODES)}.")
    return modes


def parse_count(option, text, minimum):
    """`option=text` as an integer of at least `minimum`, or a UserError."""
    if not text.isdigit() or int(text) < minimum:
        raise UserError(f"{option}= expects an integer of at least {minimum}, got '{text}'.")
    return int(text)


def compare(name, modes=DEFAULT_MODES, steps=DEFAULT_STEPS, config_files=(), overrides=(),
            out_dir=None, quiet=False, repeats=1):
    """Measures `modes` on recipe `name`, one process each; returns the rows.

    With `repeats` > 1, every mode runs that many times, in turns, so that a
    slow spell of a shared machine does not land on one mode alone; each
    mode's row is its run of median step time, and `step_ms_runs` lists all.

    Writes `results.json`, `results.csv`, `table.md` and `speedup.png` into
    `out_dir` (default `runs/compare/NAME/<timestamp>`).
    """
    # Random images unless asked otherwise: speed does not depend on pixels,
    # and the comparison then runs anywhere, offline.
    overrides = ["data.source=synthetic", *overrides]
    _config.resolve(name, config_files, overrides, announce=lambda line: None)  # fail early
    if out_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out_dir = RUNS_DIR / "compare" / name / stamp
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"comparing {', '.join(modes)} on {name}, {steps} steady steps each, "
          f"one process per mode{f', {repeats} times in turns' if repeats > 1 else ''}; "
          f"results in {out_dir}", flush=True)

    runs = {mode: [] for mode in modes}
    jobs = [(turn, mode) for turn in range(repeats) for mode in modes]
    for number, (turn, mode) in enumerate(jobs, 1):
        label = mode if turn == 0 else f"{mode}-{turn + 1}"
        job = {"name": name, "mode": mode, "steps": steps, "config_files": list(map(str, config_files)),
               "overrides": list(overrides), "out": str(out_dir / "modes" / f"{label}.json"),
               "run_dir": str(out_dir / "modes" / label)}
        result = subprocess.run([sys.executable, "-m", "recipes._compare", json.dumps(job)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise UserError(f"Mode {mode} failed (exit {result.returncode}):\n"
                            + result.stderr[-3000:])
        measured = json.loads(Path(job["out"]).read_text())
        runs[mode].append(measured["row"])
        context = {key: measured[key] for key in ("device", "versions", "config")}
        if not quiet:
            row = measured["row"]
            print(f"[{number}/{len(jobs)}] {label:<15} {row['step_ms_median']:9.2f} ms/step "
                  f"{row['images_per_s']:10.0f} images/s  trace {row['trace_s']:.2f} s", flush=True)

    rows = []
    for mode, measured_runs in runs.items():
        by_time = sorted(measured_runs, key=lambda row: row["step_ms_median"])
        row = by_time[(len(by_time) - 1) // 2]
        row["step_ms_runs"] = [run["step_ms_median"] for run in measured_runs]
        rows.append(row)

    def median_of(mode):
        return next((row["step_ms_median"] for row in rows if row["mode"] == mode), None)

    eager, loop = median_of("eager"), median_of("loop_function")
    for row in rows:
        row["speedup_vs_eager"] = eager / row["step_ms_median"] if eager else None
        # The framework's overhead over the hand-written graph step; 1.0 is none.
        row["step_vs_loop_function"] = row["step_ms_median"] / loop if loop else None
    results = {"recipe": name, "steps": steps, "warmup_steps": WARMUP_STEPS, "repeats": repeats,
               "params": measured["params"], "rows": rows, **context}
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_csv(out_dir / "results.csv", COLUMNS, rows)
    table = markdown_table(COLUMNS, rows, number_cell)
    (out_dir / "table.md").write_text(table + "\n")
    plot_modes(rows, f"{name} on {device_label(context['device'])}", out_dir / "speedup.png")
    if not quiet:
        print("\n" + table + f"\n\nresults: {out_dir}/results.json, table.md, speedup.png")
    return results


def compare_sizes(name, size_key=None, size_values=None, modes=DEFAULT_MODES, steps=DEFAULT_STEPS,
                  config_files=(), overrides=(), out_dir=None, repeats=1):
    """Runs `compare` at each model size; writes a CSV and a speedup-vs-parameters plot."""
    if size_key is None:
        module = recipes.module_of(name)
        if module not in SIZES:
            raise UserError(f"No default sizes for {name}; pass size=KEY=[V1,V2,...], "
                            "e.g. size=model.hidden_units=[[64],[256],[1024],[4096]].")
        size_key, size_values = SIZES[module]
    if out_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out_dir = RUNS_DIR / "compare-sizes" / name / stamp
    out_dir = Path(out_dir)
    rows = []
    for number, value in enumerate(size_values, 1):
        print(f"\n== size {number}/{len(size_values)}: {size_key}={json.dumps(value)}", flush=True)
        results = compare(name, modes, steps, config_files,
                          [*overrides, f"{size_key}={json.dumps(value)}"],
                          out_dir / f"size{number}", quiet=True, repeats=repeats)
        for row in results["rows"]:
            rows.append({"size": json.dumps(value), "params": results["params"], **row})
            print(f"  {row['mode']:<13} {row['step_ms_median']:9.2f} ms/step  "
                  f"speedup {number_cell(row['speedup_vs_eager'])}", flush=True)
    columns = ["size", "params", *COLUMNS]
    write_csv(out_dir / "results.csv", columns, rows)
    (out_dir / "table.md").write_text(markdown_table(columns, rows, number_cell) + "\n")
    plot_sizes(rows, f"{name}: {size_key}, on {device_label(results['device'])}",
               out_dir / "speedup_vs_params.png")
    print("\n" + markdown_table(columns, rows, number_cell))
    print(f"\nresults: {out_dir}/results.csv, table.md, speedup_vs_params.png")
    return rows


def plot_modes(rows, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 3.5))
    bars = axis.bar([row["mode"] for row in rows], [row["images_per_s"] for row in rows])
    for bar, row in zip(bars, rows):
        if row["speedup_vs_eager"] is not None:
            axis.annotate(f"{row['speedup_vs_eager']:.2f}x", (bar.get_x() + bar.get_width() / 2,
                          bar.get_height()), ha="center", va="bottom", fontsize=8)
    axis.set_ylabel("training images/s")
    axis.set_title(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_sizes(rows, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for mode in dict.fromkeys(row["mode"] for row in rows):
        points = sorted((row["params"], row["speedup_vs_eager"]) for row in rows
                        if row["mode"] == mode and row["speedup_vs_eager"] is not None)
        if points:
            axis.plot(*zip(*points), marker="o", label=mode)
    axis.set_xscale("log")
    sizes = sorted({row["params"] for row in rows})
    axis.set_xticks(sizes, [f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" for n in sizes])
    axis.xaxis.set_minor_locator(plt.NullLocator())
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_xlabel("parameters")
    axis.set_ylabel("speedup over eager (step time)")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ---- In the worker process --------------------------------------------------


def train_step(model, use_function):
    """A hand-written training step on `model`'s compiled loss and optimizer.

    What `fit`'s step does, minus its metrics: next batch, forward pass, loss
    plus the layers' regularization losses, gradients, optimizer update. Like
    `fit`, it takes the iterator, so a `tf.function` reads the batch in-graph.
    """
    import keras
    import tensorflow as tf

    loss_fn = keras.losses.get(model.loss)
    optimizer = model.optimizer
    # Augmentation that `fit` would run in its step (data.augment_on=device).
    augment = getattr(model.train_step, "augment", None)

    def step(batches):
        images, labels = next(batches)
        if augment:
            images, labels = augment(images, labels)
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = loss_fn(labels, predictions)
            if model.losses:
                loss = loss + tf.add_n(model.losses)
            scaled = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, model.trainable_weights)
        optimizer.apply_gradients(zip(gradients, model.trainable_weights))
        return loss

    return tf.function(step, jit_compile=False) if use_function else step


def _measure(job):
    """Runs the recipe in `job`, measuring its training steps in `job["mode"]`."""
    import keras
    import tensorflow as tf

    from callbacks import ExecutionModeCheck, Timing
    from recipes import _runner

    mode, steps = job["mode"], job["steps"]
    execution = {"eager": "eager", "xla": "xla"}.get(mode, "graph")
    overrides = [*job["overrides"], f"execution.mode={execution}", f"run.dir={job['run_dir']}",
                 "run.verbose=0", f"train.steps_per_epoch={1 + WARMUP_STEPS + steps}"]
    if mode == "graph_spe":
        # One execution of SPE steps to trace, then whole executions.
        overrides += [f"execution.steps_per_execution={SPE}",
                      f"train.steps_per_epoch={SPE * (1 + -(-steps // SPE))}"]
    config = _config.resolve(job["name"], job["config_files"], overrides,
                             announce=lambda line: None)
    model, x, fit_kwargs = _runner.until_fit(job["name"], config)
    timing = next(c for c in fit_kwargs["callbacks"] if isinstance(c, Timing))
    if mode == "graph_ready":
        x = timing.instrument(tf.data.Dataset.from_tensors(next(iter(x))).repeat())
    total = config["train"]["steps_per_epoch"]
    if mode.startswith("loop_"):
        step = train_step(model, use_function=mode == "loop_function")
        timing.set_model(model)
        timing.on_epoch_begin(0)
        batches = iter(x)
        for index in range(total):
            timing.on_train_batch_begin(index)
            loss = step(batches)
            timing.on_train_batch_end(index, {"loss": loss})
        timing.on_epoch_end(0)
    else:
        model.fit(x, epochs=1, steps_per_epoch=total, callbacks=[timing], verbose=0)

    # graph_spe times whole executions: its first one holds SPE steps.
    first_steps = SPE if mode == "graph_spe" else 1
    summary = timing.summary(warmup_steps=0 if mode == "graph_spe" else WARMUP_STEPS)
    trace_s = max(summary["first_step_s"] - first_steps * summary["step_ms_median"] / 1000, 0.0)
    batch = timing.batch_size
    flops_per_step = 3 * batch * forward_flops(model)
    matmul = matmul_flops_per_s(keras.mixed_precision.global_policy().compute_dtype)
    achieved = flops_per_step / (summary["step_ms_median"] / 1000)
    gpus = tf.config.list_physical_devices("GPU")
    row = {
        "mode": mode,
        "mode_used": ExecutionModeCheck.mode_of(model) if not mode.startswith("loop_") else mode,
        "trace_s": trace_s,
        "step_ms_median": summary["step_ms_median"],
        "step_ms_p10": summary["step_ms_p10"],
        "step_ms_p90": summary["step_ms_p90"],
        "images_per_s": summary["images_per_s"],
        "input_wait_fraction": summary["input_wait_fraction"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_gpu_mb": (tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
                        if gpus else None),
        "flops_per_step": flops_per_step,
        "achieved_flops_per_s": achieved,
        "matmul_flops_per_s": matmul,
        "mfu": achieved / matmul,
    }
    Path(job["out"]).write_text(json.dumps({
        "row": row, "params": model.count_params(), "device": _runner.device_info(),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__},
        "config": config}, indent=2))


def forward_flops(model):
    """Floating-point operations of one image's forward pass, read from the
    model's graph (a multiply-add counts 2)."""
    import tensorflow as tf

    spec = tf.TensorSpec([1, *model.input_shape[1:]], tf.float32)
    graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec).graph
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


def matmul_flops_per_s(dtype, size=2048, repeats=20):
    """FLOP/s of a `size`-square matmul in `dtype` on the default device."""
    import tensorflow as tf

    a = tf.random.normal([size, size], dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def chain(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1.0 / size, dtype)  # stays finite
        return tf.reduce_sum(tf.cast(x, tf.float32))

    chain(a).numpy()  # trace, warm up
    started = time.perf_counter()
    chain(a).numpy()
    return 2 * size**3 * repeats / (time.perf_counter() - started)


if __name__ == "__main__":
    _measure(json.loads(sys.argv[1]))
