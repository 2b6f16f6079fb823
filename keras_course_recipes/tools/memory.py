"""`python -m keras_course_recipes memory NAME`: what a training step costs in memory and time, per gradient and depth.

    python -m keras_course_recipes memory revnet_cifar10 backprop=standard,reversible,remat
    python -m keras_course_recipes memory revnet_cifar10 model.variant=revnet110 steps=8

For every variant of the recipe (or the one `model.variant` names) and every
`model.backprop` in `backprop=`, a fresh process builds the recipe on random
images (a process's peak memory never goes down, so each setting needs its
own) and trains `steps` steps through `fit`, after `WARMUP_STEPS` more. It
records the allocator's peak during a training step
(`tf.config.experimental.get_memory_info(...)["peak"]` after
`reset_memory_stats`, on the GPU when there is one, else the CPU), the
process's peak resident memory, and the median step time. Keras measures
none of these, hence this module. TensorFlow keeps the CPU's statistics only
with its BFC allocator (or with oneDNN on), so the workers run with
`TF_CPU_ALLOCATOR_USE_BFC=true`.

Writes `results.json`, `results.csv`, `table.md` and `memory_vs_depth.png`
into `runs/memory/NAME/<timestamp>/`.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.machine import device_label
from keras_course_recipes.tools import Command, Option, count, parse_choices, plots
from keras_course_recipes.tools.compare import shown_command
from keras_course_recipes.tools.tables import markdown_table, number_cell, write_csv

BACKPROPS = ["standard", "reversible", "remat"]
DEFAULT_STEPS = 5
WARMUP_STEPS = 2
# The CPU allocator's statistics exist only with the BFC allocator (or oneDNN).
WORKER_ENVIRONMENT = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true"}
COLUMNS = ["variant", "depth", "params", "backprop", "peak_step_mb", "peak_rss_mb", "step_ms",
           "memory_vs_standard", "time_vs_standard"]


def parse_backprops(text):
    return parse_choices("backprop", text, BACKPROPS, "backprop")


def measure_all(name, backprops=BACKPROPS, steps=DEFAULT_STEPS, config_files=(), overrides=(),
                out_dir=None):
    """Measures every variant and backprop of recipe `name`; returns the rows."""
    overrides = ["data.source=synthetic", *overrides]
    config = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
    if "backprop" not in config["model"]:
        raise UserError(f"{name} has no model.backprop to compare; "
                        "`memory` is for the RevNet recipes.")
    variants = ([config["model"]["variant"]] if any(o.startswith("model.variant=") for o in overrides)
                else recipe_config.recipe_schema(kit.module_of(name))["model.variant"])
    if out_dir is None:
        out_dir = rundir.timestamped(RUNS_DIR / "memory" / name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(variant, backprop) for variant in variants for backprop in backprops]
    print(f"memory of a training step of {name}: {len(jobs)} settings, one process each, "
          f"{steps} steps after {WARMUP_STEPS}; results in {out_dir}", flush=True)

    rows = []
    for number, (variant, backprop) in enumerate(jobs, 1):
        label = f"{variant}-{backprop}"
        job = {"name": name, "config_files": list(map(str, config_files)),
               "overrides": [*overrides, f"model.variant={variant}", f"model.backprop={backprop}"],
               "steps": steps, "out": str(out_dir / "settings" / f"{label}.json"),
               "run_dir": str(out_dir / "settings" / label)}
        result = subprocess.run([sys.executable, "-m", "keras_course_recipes.tools.memory", json.dumps(job)],
                                capture_output=True, text=True, env=WORKER_ENVIRONMENT)
        if result.returncode != 0:
            raise UserError(f"{label} failed (exit {result.returncode}):\n" + result.stderr[-3000:])
        measured = json.loads(Path(job["out"]).read_text())
        rows.append(measured["row"])
        row = measured["row"]
        print(f"[{number}/{len(jobs)}] {label:<22} peak step {row['peak_step_mb']:9.1f} MiB  "
              f"RSS {row['peak_rss_mb']:8.0f} MiB  {row['step_ms']:9.1f} ms/step", flush=True)

    for row in rows:
        standard = next((r for r in rows if r["variant"] == row["variant"]
                         and r["backprop"] == "standard"), None)
        row["memory_vs_standard"] = (row["peak_step_mb"] / standard["peak_step_mb"]
                                     if standard else None)
        row["time_vs_standard"] = row["step_ms"] / standard["step_ms"] if standard else None
    results = {"tool": "memory", "command": shown_command(
                   "memory", name, config_files, overrides[1:], backprop=",".join(backprops),
                   steps=steps),
               "recipe": name, "steps": steps, "warmup_steps": WARMUP_STEPS,
               "memory_of": measured["memory_of"], "rows": rows, "device": measured["device"],
               "versions": measured["versions"], "config": measured["config"]}
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_csv(out_dir / "results.csv", COLUMNS, rows)
    table = markdown_table(COLUMNS, rows, number_cell)
    (out_dir / "table.md").write_text(table + "\n")
    plots.memory_vs_depth(rows, f"{name}, batch {measured['config']['data']['batch_size']}, "
                                 f"on {device_label(measured['device'])}",
                           out_dir / "memory_vs_depth.png")
    print("\n" + table + f"\n\nresults: {out_dir}/results.json, table.md, memory_vs_depth.png")
    return rows


# ---- In the worker process --------------------------------------------------


def _measure(job):
    """Builds the recipe in `job`, trains it and writes its row to `job["out"]`."""
    import keras
    import tensorflow as tf

    from keras_course_recipes.models.revnet import depth, variant_spec
    from keras_course_recipes import machine
    from keras_course_recipes.augment import network_of

    config = recipe_config.resolve(job["name"], job["config_files"], [
        *job["overrides"], f"run.dir={job['run_dir']}", "run.verbose=0",
        f"train.steps_per_epoch={WARMUP_STEPS + job['steps']}"], announce=lambda line: None)
    experiment = kit.load(job["name"]).build(config)
    run_dir = Path(job["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_config(run_dir, config)  # says what this row measured
    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"

    class StepMemory(keras.callbacks.Callback):
        """The allocator's peak and the wall time of each step after the warm-up."""

        def __init__(self):
            super().__init__()
            self.peaks, self.seconds = [], []

        def on_train_batch_begin(self, batch, logs=None):
            if batch >= WARMUP_STEPS:
                tf.config.experimental.reset_memory_stats(device)
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # waits for the step
            if batch >= WARMUP_STEPS:
                self.seconds.append(time.perf_counter() - self.started)
                self.peaks.append(tf.config.experimental.get_memory_info(device)["peak"])

    probe = StepMemory()
    experiment.model.fit(experiment.data.train, epochs=1, steps_per_epoch=config["train"]["steps_per_epoch"],
                         callbacks=[probe], verbose=0)
    network = network_of(experiment.model)
    row = {
        "variant": config["model"]["variant"],
        "depth": depth(**variant_spec(config["model"]["variant"],
                                      init_filters=config["model"]["init_filters"],
                                      units=config["model"]["units"],
                                      filters=config["model"]["filters"])),
        "params": network.count_params(),
        "backprop": config["model"]["backprop"],
        "peak_step_mb": max(probe.peaks) / 2**20,
        "peak_rss_mb": machine.peak_rss_mb(),
        "step_ms": 1000 * statistics.median(probe.seconds),
    }
    Path(job["out"]).write_text(json.dumps({
        "row": row, "memory_of": device, "device": machine.device_info(),
        "versions": machine.versions(), "config": config}, indent=2))


def _measure_all(name, config_files, overrides, backprop, steps):
    """`memory`: its `backprop=` option is `measure_all`'s `backprops`."""
    return measure_all(name, backprop, steps, config_files, overrides)


COMMANDS = (
    Command("memory", "peak memory and time of a training step for each model.backprop and "
                      "variant (options backprop=, steps=)",
            _measure_all, (Option("backprop", BACKPROPS, parse_backprops),
                           count("steps", DEFAULT_STEPS, minimum=1)),
            tensorflow_only="it measures RevNet's tf.custom_gradient", draws=True),
)


if __name__ == "__main__":
    _measure(json.loads(sys.argv[1]))
