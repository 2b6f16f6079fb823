"""Grid sweeps: every combination of the `--grid` values, one run each, and a table.

    python -m keras_course_recipes sweep densenet_cifar100 --grid "model.growth_rate=[12,24]" \
        --grid "train.lr=[0.05,0.1]" train.epochs=30

With `--one-at-a-time`, each key's values are tried alone, the other keys
keeping the recipe's own settings (which run first, as the baseline): a
first look at which setting matters, for the cost of one run per value.

Each combination trains in its own run directory under the sweep's directory,
which is named after the command, so running the same command again skips the
combinations that finished and resumes the one that was interrupted. After
every combination the table is rewritten as `results.md` and `results.csv`.
With `execution.seed` in the grid, `seeds.md` and `seeds.csv` give each
setting's mean over the seeds, and their lowest and highest: a screen of
settings whose differences are near the seeds' spread.

It needs no TensorFlow: on a machine with JAX alone (a GPU's), a sweep
trains with `execution.backend=jax`.

A grid is `itertools.product`; KerasTuner's GridSearch would also work, but
it calls `fit` itself and keeps its own trial state next to ours, and the
recipes already own fitting, run directories and resuming.
"""

import hashlib
import itertools
import json
import re
import statistics
import tempfile
from pathlib import Path

import yaml

from keras_course_recipes import RUNS_DIR, harness, history_csv, recipe_config

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command
from keras_course_recipes.tools.tables import markdown_table, write_csv

COLUMNS = ["params", "best_val_accuracy", "test_accuracy", "s_per_epoch", "mode", "run_dir"]
SEED = "execution.seed"
SEED_COLUMNS = ["seeds", "mean_test_accuracy", "lowest", "highest", "s_per_epoch"]


def parse_grid(item, option="--grid"):
    """`"key=[v1,v2]"` -> `("key", [v1, v2])`; `option` names it in errors."""
    key, sep, text = item.partition("=")
    try:
        values = yaml.safe_load(text) if sep else None
    except yaml.YAMLError:
        values = None
    if not key or not isinstance(values, list) or not values:
        raise UserError(f"{option} expects key=[value,...], e.g. "
                        f"\"train.lr=[0.05,0.1]\"; got '{item}'.")
    # A value given twice would name one run directory twice: its second
    # combination would find the first's results and report them again.
    texts = [_text(value) for value in values]
    for number, text in enumerate(texts):
        if text in texts[:number]:
            raise UserError(f"{option} gives {key.strip()}={text} more than once; "
                            "give each value once.")
    return key.strip(), values


def sweep(name, grid_items, config_files=(), overrides=(), sweep_dir=None, one_at_a_time=False):
    """Runs every combination of `grid_items` on recipe `name` (or, with
    `one_at_a_time`, the recipe's settings and each value alone); returns the
    table rows."""
    grid = [parse_grid(item) for item in grid_items]
    keys = [key for key, _ in grid]
    if len(set(keys)) != len(keys):
        raise UserError(f"A key appears in more than one --grid: {', '.join(keys)}.")
    if sweep_dir is None:
        sweep_dir = RUNS_DIR / "sweeps" / name / _command_id(grid, config_files, overrides,
                                                             one_at_a_time)
    sweep_dir = Path(sweep_dir)

    if one_at_a_time:
        base = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
        baseline = {key: _lookup(base, key) for key in keys}
        all_settings = [baseline] + [{**baseline, key: value} for key, values in grid
                                     for value in values if value != baseline[key]]
    else:
        all_settings = [dict(zip(keys, values))
                        for values in itertools.product(*(values for _, values in grid))]

    # Resolve every combination first: a typo fails now, not after hours.
    combinations = []
    for settings in all_settings:
        label = ",".join(f"{key}={_text(value)}" for key, value in settings.items())
        run_dir = sweep_dir / re.sub(r"[^\w.,=-]+", "_", label)
        items = [*overrides, *(f"{key}={json.dumps(value)}" for key, value in settings.items()),
                 f"run.dir={run_dir}"]
        config = recipe_config.resolve(name, config_files, items, announce=lambda line: None)
        combinations.append((settings, run_dir, config))
    # Before training: else the first run fails, advising run.dir, which sweep sets itself.
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=sweep_dir).close()  # writable, not only there
    except OSError as error:
        raise UserError(f"Cannot write the sweep's folder {sweep_dir}: {error.strerror}. "
                        "Give a folder you can write to with --dir DIR.") from None
    print(f"sweep of {name}: {len(combinations)} combinations in {sweep_dir}", flush=True)
    others = [key for key in keys if key != SEED]
    by_seed = SEED in keys and not one_at_a_time  # one-at-a-time rows vary one key each

    rows = []
    for number, (settings, run_dir, config) in enumerate(combinations, 1):
        label = ", ".join(f"{key}={_text(value)}" for key, value in settings.items())
        metrics = harness.read_metrics(run_dir)
        if metrics is not None:
            print(f"[{number}/{len(combinations)}] {label}: finished before, skipped", flush=True)
        else:
            print(f"[{number}/{len(combinations)}] {label}", flush=True)
            metrics = harness.train(config)
        rows.append({**settings, **_row(metrics)})
        write_tables(sweep_dir, [*keys, *COLUMNS], rows)
        if by_seed:
            means = seed_means(others, rows)
            write_tables(sweep_dir, [*others, *SEED_COLUMNS], means, "seeds")

    print("\n" + markdown_table([*keys, *COLUMNS], rows, _cell))
    tables = ["results", *(["seeds"] if by_seed else [])]
    if by_seed:
        print("\nover the seeds:\n" + markdown_table([*others, *SEED_COLUMNS], means, _cell))
    print("\ntables: " + ", ".join(str(sweep_dir / f"{table}.{kind}")
                                    for table in tables for kind in ("md", "csv")))
    return rows


def seed_means(others, rows):
    """One row per setting of the `others` keys (every grid key but the
    seed): how many seeds finished, their test accuracies' mean, lowest and
    highest, and the median of their epochs' median time."""
    groups = {}
    for row in rows:
        groups.setdefault(tuple(_text(row[key]) for key in others), []).append(row)
    means = []
    for group in groups.values():
        accuracies = [row["test_accuracy"] for row in group]
        times = [row["s_per_epoch"] for row in group if row["s_per_epoch"] is not None]
        means.append({**{key: group[0][key] for key in others}, "seeds": len(group),
                      "mean_test_accuracy": round(statistics.mean(accuracies), 4),
                      "lowest": min(accuracies), "highest": max(accuracies),
                      "s_per_epoch": round(statistics.median(times), 2) if times else None})
    return means


def _text(value):
    return value if isinstance(value, str) else json.dumps(value)


def _lookup(config, key):
    """The value of dotted `key` in `config`, or a UserError naming it."""
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise UserError(f"Unknown config key '{key}' in --grid.")
        node = node[part]
    return node


def _command_id(grid, config_files, overrides, one_at_a_time):
    """A short name for the sweep command, ignoring `run.*` overrides."""
    kept = [item for item in overrides if not item.startswith("run.")]
    text = json.dumps([grid, [str(p) for p in config_files], kept]
                      + (["one at a time"] if one_at_a_time else []))
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def _row(metrics):
    epoch_s = metrics["timing"]["epoch_s"]
    # The best epoch's, whatever callbacks.monitor picked for best.keras.
    accuracies = [epoch["val_accuracy"] for epoch in
                  history_csv.read_history(Path(metrics["run_dir"]) / "history.csv")
                  if "val_accuracy" in epoch]
    best = max(accuracies, default=None)
    return {
        "params": metrics["trainable_params"],
        "best_val_accuracy": None if best is None else round(best, 4),
        "test_accuracy": round(metrics["test"]["accuracy"], 4),
        "s_per_epoch": round(statistics.median(epoch_s), 2) if epoch_s else None,
        "mode": metrics["mode_used"],
        "run_dir": metrics["run_dir"],
    }


def write_tables(sweep_dir, columns, rows, name="results"):
    """Writes `rows` as `NAME.csv` and `NAME.md` in `sweep_dir`."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_csv(sweep_dir / f"{name}.csv", columns, rows)
    (sweep_dir / f"{name}.md").write_text(markdown_table(columns, rows, _cell) + "\n")


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return _text(value)


def add_arguments(parser):
    """`sweep`'s own arguments, named as `sweep` takes them."""
    parser.add_argument("--grid", action="append", required=True, metavar="KEY=[V,...]",
                        dest="grid_items",
                        help='values to try, e.g. "train.lr=[0.05,0.1]" (repeatable)')
    parser.add_argument("--dir", metavar="DIR", dest="sweep_dir",
                        help="where the runs and tables go; default: "
                             "runs/sweeps/NAME/<id of the command>")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="vary one key at a time from the recipe's settings, instead "
                             "of every combination")


COMMANDS = (
    Command("sweep", "train every combination of --grid values; write a results table",
            sweep, arguments=add_arguments, without_tensorflow=True),
)
