"""Execution-mode comparison: one recipe's training step in every mode, side by side.

    python -m keras_course_recipes compare mnist_mlp modes=eager,graph,xla steps=50

Each TensorFlow mode runs in a fresh process (`keras_course_recipes/tools/measure.py`),
and each other backend's modes in one fresh process, one after the other,
which builds the recipe for each and trains what it builds, so every mode
trains the very same setup on the same input stream:

- `eager`, `graph`, `xla`: Keras' own `fit` in that execution mode;
- `graph_spe`: `fit` in graph mode with `steps_per_execution` > 1;
- `loop_eager`, `loop_function`: a hand-written `GradientTape` step, without
  and with `tf.function`: the low-level reference that shows what `fit` adds;
- `loop_epoch`: the whole epoch as one `tf.function` looping over the
  `tf.data.Dataset` inside the graph (`keras_course_recipes/tools/loops.py:train_epoch`);
- `graph_ready` (asked for by name): `fit` in graph mode on one batch repeated,
  an input that is always ready. Its step time is the step without the input
  pipeline, and its input wait is the floor of that measurement (Keras'
  dispatch before the step asks for its batch);
- `jax_eager`, `jax_jit`, `torch_eager`, `torch_compile` (asked for by
  name): the same `fit` on Keras' JAX and torch backends, op by op
  (`run_eagerly=True`) and compiled (`jit_compile=True`: one `jax.jit` step,
  or the step under `torch.compile`), fed by the same tf.data pipeline.

The first step (tracing or compiling) and `WARMUP_STEPS` more are left out of
the steady-state figures. `peak_rss_mb` is the process's peak resident
memory while the mode ran: a TensorFlow mode's, from its process's start;
another backend's second mode's, from the end of the first, counting what
the process still holds (`measure.py` restarts Linux's count between them),
and that mode's `peak_gpu_mb` is None, as JAX's GPU peak cannot restart.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, process, recipe_config, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.machine import device_label
from keras_course_recipes.tools import Command, Option, count, parse_choices, plots
from keras_course_recipes.tools.sweep import parse_grid
from keras_course_recipes.tools.tables import markdown_table, number_cell, write_csv

DEFAULT_MODES = ["eager", "graph", "xla", "graph_spe", "loop_eager", "loop_function",
                 "loop_epoch"]
# compare's modes on Keras' other backends: (the backend, the execution.mode it runs in).
BACKEND_MODES = {"jax_eager": ("jax", "eager"), "jax_jit": ("jax", "xla"),
                 "torch_eager": ("torch", "eager"), "torch_compile": ("torch", "xla")}
MODES = [*DEFAULT_MODES, "graph_ready", *BACKEND_MODES]
# Each backend's op-by-op mode, which its modes' speedup_vs_eager is against.
EAGER_MODES = {"tensorflow": "eager", **{backend: mode for mode, (backend, execution)
                                         in BACKEND_MODES.items() if execution == "eager"}}
DEFAULT_STEPS = 30
WARMUP_STEPS = 3  # after the first (tracing) step, left out of the statistics
SPE = 10  # steps per execution in graph_spe
COLUMNS = ["mode", "trace_s", "step_ms_median", "step_ms_p10", "step_ms_p90",
           "images_per_s", "speedup_vs_eager", "step_vs_loop_function", "input_wait_fraction",
           "peak_rss_mb", "peak_gpu_mb", "flops_per_step", "achieved_flops_per_s",
           "matmul_flops_per_s", "mfu"]
# Printed under the table: two of its columns are not what their names alone say.
NOTE = ("speedup_vs_eager: the median step of the same backend's eager mode (" +
        ", ".join(EAGER_MODES.values()) + ") over this mode's; images_per_s: the batch over the "
        "mean steady step, not the median, so a few slow steps lower it where step_ms_median "
        "does not move.")
# Model sizes for `compare-sizes`, per recipe module: the key and its values.
SIZES = {
    "mnist_mlp": ("model.hidden_units", [[32, 32], [256, 256], [1024, 1024], [4096, 4096]]),
    "cifar10_cnn": ("model.filters", [[8, 16], [32, 64], [64, 128], [128, 256]]),
    "densenet_cifar100": ("model.depth", [10, 22, 40, 100]),
}


def parse_modes(text):
    return parse_choices("modes", text, MODES, "mode")


def compare(name, modes=DEFAULT_MODES, steps=DEFAULT_STEPS, config_files=(), overrides=(),
            out_dir=None, quiet=False, repeats=1):
    """Measures `modes` on recipe `name`, each TensorFlow mode in a process of
    its own and each other backend's in one; returns the rows.

    With `repeats` > 1, every mode runs that many times, in turns, so that a
    slow spell of a shared machine does not land on one mode alone; each
    mode's row is its run of median step time, and `step_ms_runs` lists all.

    Writes `results.json`, `results.csv`, `table.md` and `speedup.png` into
    `out_dir` (default `runs/compare/NAME/<timestamp>`).
    """
    command = shown_command("compare", name, config_files, overrides, modes=",".join(modes),
                            steps=steps, repeats=repeats)
    # Random images unless asked otherwise: speed does not depend on pixels,
    # and the comparison then runs anywhere, offline.
    overrides = ["data.source=synthetic", *overrides]
    # Fail early, on each mode's backend as its process will resolve it (not KERAS_BACKEND's):
    # a typo, a backend not installed, or a recipe or setting it cannot run.
    for backend in dict.fromkeys(BACKEND_MODES.get(mode, ("tensorflow",))[0] for mode in modes):
        process.require_backend(backend)
        recipe_config.resolve(name, config_files, [*overrides, f"execution.backend={backend}"],
                        announce=lambda line: None)
    if out_dir is None:
        out_dir = rundir.timestamped(RUNS_DIR / "compare" / name)
    out_dir = Path(out_dir)
    try:  # before measuring: each mode's process writes here, then the table and plot
        out_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()  # writable, not only there
    except OSError as error:
        raise UserError(f"Cannot write compare's results in {out_dir}: {error.strerror}. It "
                        f"writes them under {RUNS_DIR}/ in the current folder: run it from a "
                        "folder you can write to.") from None
    print(f"comparing {', '.join(modes)} on {name}, {steps} steady steps each, "
          f"a process per TensorFlow mode and per other backend"
          f"{f', {repeats} times in turns' if repeats > 1 else ''}; results in {out_dir}",
          flush=True)

    by_mode, measured = _measure(name, modes, steps, config_files, overrides, out_dir, quiet,
                              repeats)
    rows = [median_run(measured_runs) for measured_runs in by_mode.values()]
    context = {key: measured[key] for key in ("device", "versions", "config")}
    add_speedups(rows)
    results = {"tool": "compare", "command": command, "recipe": name, "steps": steps,
               "warmup_steps": WARMUP_STEPS, "repeats": repeats, "params": measured["params"],
               "rows": rows, **context}
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_csv(out_dir / "results.csv", COLUMNS, rows)
    table = markdown_table(COLUMNS, rows, number_cell)
    (out_dir / "table.md").write_text(table + "\n")
    plots.modes(rows, f"{name} on {device_label(context['device'])}", out_dir / "speedup.png")
    if not quiet:
        print("\n" + table + f"\n\n{NOTE}\nresults: {out_dir}/results.json, table.md, "
              "speedup.png")
    return results


def shown_command(tool, name, config_files, overrides, **options):
    """The command line that measures this again, as results.json records it."""
    return shlex.join(["recipes", tool, name, *(f"{key}={value}" for key, value in
                                                options.items()),
                       *overrides, *(f"--config={path}" for path in config_files)])


def _measure(name, modes, steps, config_files, overrides, out_dir, quiet, repeats):
    """Runs every mode `repeats` times, in turns, one process each, but the
    modes of each backend other than TensorFlow, which share one (`process_groups`).

    Returns:
        {mode: [its rows, one per turn]}, and the last process' whole result
        (its device, versions, config and params are every process').
    """
    by_mode = {mode: [] for mode in modes}
    number, total = 0, repeats * len(modes)
    for turn in range(repeats):
        for group in process_groups(modes):
            labels = [mode if turn == 0 else f"{mode}-{turn + 1}" for mode in group]
            for mode, label, measured in zip(group, labels, measure_modes(
                    name, group, steps, config_files, overrides, out_dir / "modes", labels)):
                by_mode[mode].append(measured["row"])
                number += 1
                if not quiet:
                    print(f"[{number}/{total}] {label:<15} {step_line(measured['row'])}",
                          flush=True)
    return by_mode, measured


def process_groups(modes):
    """`modes` in the order their processes measure them, a list per
    process: each TensorFlow mode alone, as its peak memory is its process's
    (`loop_function`'s against a bigger model's in tests/test_compare.py),
    and the modes of each other backend together, which pay its start-up
    (TensorFlow, then JAX or PyTorch, imported) once."""
    groups = {}
    for mode in modes:
        backend = BACKEND_MODES.get(mode, ("tensorflow",))[0]
        groups.setdefault(mode if backend == "tensorflow" else backend, []).append(mode)
    return list(groups.values())


def measure_modes(name, modes, steps, config_files, overrides, folder, labels):
    """`modes`, all of one backend, measured one after the other in one
    process (`measure_mode` where there is one); returns their results, as
    `measure_mode` returns each."""
    if len(modes) == 1:
        return [measure_mode(name, modes[0], steps, config_files, overrides, folder, labels[0])]
    return _in_a_process([measurement_job(name, mode, steps, config_files, overrides, folder,
                                          label) for mode, label in zip(modes, labels)])


def measure_mode(name, mode, steps, config_files, overrides, folder, label):
    """Recipe `name`'s training step in `mode`, measured in a process of its own
    (`keras_course_recipes/tools/measure.py`); returns its result, also in `folder/LABEL.json`."""
    return _in_a_process([measurement_job(name, mode, steps, config_files, overrides, folder,
                                           label)])[0]


def _in_a_process(jobs):
    """Runs `measure.py` on `jobs`, whose modes are of one backend, in one
    process; returns what each wrote."""
    # Keras reads its backend once, on import: the worker's is set before it starts.
    backend = BACKEND_MODES.get(jobs[0]["mode"], ("tensorflow",))[0]
    result = subprocess.run([sys.executable, "-m", "keras_course_recipes.tools.measure",
                             json.dumps(jobs)], capture_output=True, text=True,
                            env={**os.environ, "KERAS_BACKEND": backend})
    if result.returncode != 0:
        modes = ", ".join(job["mode"] for job in jobs)
        raise UserError(f"Mode{'s' if len(jobs) > 1 else ''} {modes} failed (exit "
                        f"{result.returncode}):\n" + result.stderr[-3000:])
    return [json.loads(Path(job["out"]).read_text()) for job in jobs]


def measurement_job(name, mode, steps, config_files, overrides, folder, label):
    """What `keras_course_recipes/tools/measure.py` measures: the JSON its argument holds."""
    return {"name": name, "mode": mode, "steps": steps,
            "config_files": list(map(str, config_files)), "overrides": list(overrides),
            "out": str(folder / f"{label}.json"), "run_dir": str(folder / label)}


def step_line(row):
    """One measured row as a line of progress."""
    return (f"{row['step_ms_median']:9.2f} ms/step {row['images_per_s']:10.0f} images/s  "
            f"trace {row['trace_s']:.2f} s")


def median_run(measured_runs):
    """A mode's row: its run of median step time, with `step_ms_runs`, every run's."""
    by_time = sorted(measured_runs, key=lambda row: row["step_ms_median"])
    row = by_time[(len(by_time) - 1) // 2]
    row["step_ms_runs"] = [run["step_ms_median"] for run in measured_runs]
    return row


def add_speedups(rows):
    """Sets each row's `speedup_vs_eager` (against its own backend's eager
    mode: torch_compile's is against torch_eager) and `step_vs_loop_function`
    from the median step times; None where that mode was not measured."""

    def median_of(mode):
        return next((row["step_ms_median"] for row in rows if row["mode"] == mode), None)

    loop = median_of("loop_function")
    for row in rows:
        eager = median_of(EAGER_MODES[BACKEND_MODES.get(row["mode"], ("tensorflow",))[0]])
        row["speedup_vs_eager"] = eager / row["step_ms_median"] if eager else None
        # The framework's overhead over the hand-written graph step; 1.0 is none.
        row["step_vs_loop_function"] = row["step_ms_median"] / loop if loop else None


SCALING_COLUMNS = ["strategy", "replicas", "global_batch", "step_ms_median", "images_per_s",
                   "scaling_efficiency", "input_wait_fraction"]


def scaling(name, steps=DEFAULT_STEPS, config_files=(), overrides=(), repeats=1, out_dir=None):
    """Graph-mode `fit` with no strategy and with `mirrored`, at the same
    per-replica batch: images/s and the scaling efficiency, global images/s
    over (replicas x the single device's). Returns the rows."""
    if out_dir is None:
        out_dir = rundir.timestamped(RUNS_DIR / "scaling" / name)
    out_dir = Path(out_dir)
    rows = []
    for strategy in ("none", "mirrored"):
        print(f"\n== execution.strategy={strategy}", flush=True)
        results = compare(name, ["graph"], steps, config_files,
                          [*overrides, f"execution.strategy={strategy}"], out_dir / strategy,
                          repeats=repeats)
        rows.append({"strategy": strategy, **results["rows"][0]})
    single = rows[0]["images_per_s"]
    for row in rows:
        row["scaling_efficiency"] = row["images_per_s"] / (row["replicas"] * single)
    write_csv(out_dir / "results.csv", SCALING_COLUMNS, rows)
    table = markdown_table(SCALING_COLUMNS, rows, number_cell)
    (out_dir / "table.md").write_text(table + "\n")
    (out_dir / "results.json").write_text(json.dumps(
        {"tool": "scaling", "command": shown_command("scaling", name, config_files, overrides,
                                                     steps=steps, repeats=repeats),
         "recipe": name, "steps": steps, "repeats": repeats, "rows": rows,
         "device": results["device"], "versions": results["versions"]}, indent=2) + "\n")
    print(f"\n{table}\n\nresults: {out_dir}/results.json, table.md")
    return rows


def compare_sizes(name, size_key=None, size_values=None, modes=DEFAULT_MODES, steps=DEFAULT_STEPS,
                  config_files=(), overrides=(), out_dir=None, repeats=1):
    """Runs `compare` at each model size; writes a CSV and a speedup-vs-parameters plot."""
    if size_key is None:
        module = kit.module_of(name)
        if module not in SIZES:
            raise UserError(f"No default sizes for {name}; pass size=KEY=[V1,V2,...], "
                            "e.g. size=model.hidden_units=[[64],[256],[1024],[4096]].")
        size_key, size_values = SIZES[module]
    if out_dir is None:
        out_dir = rundir.timestamped(RUNS_DIR / "compare-sizes" / name)
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
    size_option = f"{size_key}={json.dumps(size_values, separators=(',', ':'))}"
    (out_dir / "results.json").write_text(json.dumps(
        {"tool": "compare-sizes", "size_key": size_key,
         "command": shown_command("compare-sizes", name, config_files, overrides,
                                  size=size_option, modes=",".join(modes), steps=steps,
                                  repeats=repeats),
         "recipe": name, "steps": steps, "repeats": repeats, "rows": rows,
         "device": results["device"], "versions": results["versions"]}, indent=2) + "\n")
    (out_dir / "table.md").write_text(markdown_table(columns, rows, number_cell) + "\n")
    plots.sizes(rows, f"{name}: {size_key}, on {device_label(results['device'])}",
                 out_dir / "speedup_vs_params.png")
    print("\n" + markdown_table(columns, rows, number_cell))
    print(f"\n{NOTE}\nresults: {out_dir}/results.json, results.csv, table.md, "
          "speedup_vs_params.png")
    return rows


def _compare_sizes(name, config_files, overrides, size, **options):
    """`compare-sizes`: its `size=KEY=[...]` option is `compare_sizes`'s key and values."""
    size_key, size_values = size or (None, None)
    return compare_sizes(name, size_key, size_values, config_files=config_files,
                         overrides=overrides, **options)


# compare chooses each mode's backend itself.
PER_MODE_BACKEND = ("each mode names its backend (modes=eager,graph,xla,jax_eager,jax_jit,"
                    "torch_eager,torch_compile)")
STEPS_OPTION = count("steps", DEFAULT_STEPS, minimum=2)
REPEATS_OPTION = count("repeats", 1, minimum=1)
MODES_OPTION = Option("modes", DEFAULT_MODES, parse_modes)
COMMANDS = (
    Command("compare", "time the training step in each execution mode "
                       "(options modes=..., steps=N, repeats=N)",
            compare, (MODES_OPTION, STEPS_OPTION, REPEATS_OPTION),
            tensorflow_only=PER_MODE_BACKEND, names_backends=True, draws=True),
    Command("compare-sizes", "compare the modes at four or more model sizes "
                             "(options size=KEY=[...], modes=, steps=, repeats=)",
            _compare_sizes, (Option("size", None, lambda text: parse_grid(text, "size=")),
                             MODES_OPTION, STEPS_OPTION, REPEATS_OPTION),
            tensorflow_only=PER_MODE_BACKEND, names_backends=True, draws=True),
    Command("scaling", "images/s with no strategy and with execution.strategy=mirrored, and "
                       "the scaling efficiency (options steps=, repeats=)",
            scaling, (STEPS_OPTION, REPEATS_OPTION),
            tensorflow_only="it runs tf.distribute's MirroredStrategy"),
)
