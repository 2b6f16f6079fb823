"""`python -m keras_course_recipes augment-benchmark NAME`: what augmentation costs, and where it runs faster.

Two measurements, on random images of the recipe's shape and batch size:

- each operation alone, and the recipe's whole `data.augment` pipeline, in
  both engines: images/s as a tf.data map (host) and as a `tf.function` on a
  batch already on the default device (device: the GPU when there is one);
- the recipe's training step in graph mode with its pipeline on the host and
  on the device, measured by `compare` (fresh process each, same steps).

Keras has no augmentation benchmark, hence this module.
"""

import json
import time
from pathlib import Path

import numpy as np

from keras_course_recipes import RUNS_DIR, recipe_config, rundir

from keras_course_recipes.errors import UserError
from keras_course_recipes.machine import device_label
from keras_course_recipes.tools import Command, Option, compare, count, parse_choices
from keras_course_recipes.tools.tables import markdown_table, number_cell, write_csv

OPERATION_COLUMNS = ["engine", "operation", "host_images_per_s", "device_images_per_s"]
TRAINING_COLUMNS = ["augment_on", "images_per_s", "step_ms_median", "input_wait_fraction",
                    "speedup_vs_host"]


def benchmark(name, steps=compare.DEFAULT_STEPS, config_files=(), overrides=(), batches=20,
              operations=None, out_dir=None):
    """Measures recipe `name`'s augmentation; returns both tables' rows.

    `operations` (comma-separated text, default every one) are the
    operations timed alone; the whole pipeline is always timed. Writes
    `operations.csv`, `training.csv`, `table.md` and `results.json` (what
    `recipes record` reads) into `out_dir`
    (default `runs/augment-benchmark/NAME/<timestamp>`).
    """
    from keras_course_recipes import augment, data  # imports Keras

    alone = (list(augment.OPERATIONS) if operations is None else
             parse_choices("operations", operations, list(augment.OPERATIONS), "operation"))
    config = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
    pipeline = config["data"].get("augment")
    if not pipeline:
        raise UserError(f"{name} has no data.augment to benchmark; add some, e.g. "
                        "data.augment=[pad_crop,flip].")
    if out_dir is None:
        out_dir = rundir.timestamped(RUNS_DIR / "augment-benchmark" / name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    shape, classes = data.DATASETS[config["data"]["name"]]
    batch_size = config["data"]["batch_size"]
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(batch_size, *shape)).astype("float32")
    labels = np.eye(classes, dtype="float32")[rng.integers(0, classes, batch_size)]
    print(f"augmentation alone: {batches} batches of {batch_size} per operation and engine",
          flush=True)
    rows = []
    for engine in augment.ENGINES:
        for label, entries in [(op, [op]) for op in alone] + [("pipeline", pipeline)]:
            augmentation = augment.augmentation(entries, engine=engine, on="host")
            row = {"engine": engine, "operation": label,
                   "host_images_per_s": _host_rate(augmentation, images, labels, batches),
                   "device_images_per_s": _device_rate(augmentation, images, labels, batches)}
            rows.append(row)
            print(f"  {engine:<9} {label:<15} host {row['host_images_per_s']:9.0f}  "
                  f"device {row['device_images_per_s']:9.0f} images/s", flush=True)

    print(f"\ntraining with {pipeline} in graph mode, host against device:", flush=True)
    training = []
    for placement in ("host", "device"):
        result = compare.compare(name, ["graph"], steps, config_files,
                                  [*overrides, f"data.augment_on={placement}"],
                                  out_dir / f"training_{placement}", quiet=True)
        training.append({"augment_on": placement, **result["rows"][0]})
    host_ms = training[0]["step_ms_median"]
    for row in training:
        row["speedup_vs_host"] = host_ms / row["step_ms_median"]

    write_csv(out_dir / "operations.csv", OPERATION_COLUMNS, rows)
    write_csv(out_dir / "training.csv", TRAINING_COLUMNS, training)
    tables = (f"Augmentation alone, images/s ({name}: batch {batch_size}, {shape}):\n\n"
              + markdown_table(OPERATION_COLUMNS, rows, number_cell)
              + f"\n\nTraining {name} in graph mode with {pipeline} ({steps} steps, "
              + f"on {device_label(result['device'])}):\n\n"
              + markdown_table(TRAINING_COLUMNS, training, number_cell))
    (out_dir / "table.md").write_text(tables + "\n")
    # One row per operation (or the training step) and placement, as the store keeps them.
    measured = [{"variant": row["operation"], "mode": f"{row['engine']} {where}",
                 "images_per_s": row[f"{where}_images_per_s"]}
                for row in rows for where in ("host", "device")]
    measured += [{"variant": "training", "mode": row["augment_on"],
                  **{key: row[key] for key in TRAINING_COLUMNS[1:]}} for row in training]
    (out_dir / "results.json").write_text(json.dumps(
        {"tool": "augment-benchmark", "command": compare.shown_command(
            "augment-benchmark", name, config_files, overrides, steps=steps, batches=batches,
            **({"operations": operations} if operations else {})),
         "recipe": name, "batch": batch_size, "rows": measured, "device": result["device"],
         "versions": result["versions"]}, indent=2) + "\n")
    print("\n" + tables + f"\n\nresults: {out_dir}/table.md, operations.csv, training.csv, "
          "results.json")
    return rows, training


def _host_rate(augment, images, labels, batches):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().map(augment)
    iterator = iter(dataset.prefetch(tf.data.AUTOTUNE))
    next(iterator)  # trace and warm up
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * len(images) / (time.perf_counter() - started)


def _device_rate(augment, images, labels, batches):
    import tensorflow as tf

    function = tf.function(augment)
    images, labels = tf.constant(images), tf.constant(labels)
    function(images, labels)[0].numpy()  # trace and warm up
    started = time.perf_counter()
    for _ in range(batches):
        out = function(images, labels)
    out[0].numpy()  # waits for the queued calls
    return batches * len(images) / (time.perf_counter() - started)


COMMANDS = (
    Command("augment-benchmark", "time each augmentation, and training with it on host and "
                                 "device (options steps=N, batches=N, operations=a,b)",
            benchmark, (compare.STEPS_OPTION, count("batches", 20, minimum=1),
                        # Checked when the command runs: the names are Keras-side.
                        Option("operations", None, str)),
            tensorflow_only="it times augmentation in tf.data and in TensorFlow's training step"),
)
