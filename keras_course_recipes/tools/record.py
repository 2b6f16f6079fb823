"""`python -m keras_course_recipes record RUN_DIR [RUN_DIR ...] [--group LABEL] [--machine CLASS]
[--store DIR]`: a finished run's result as a row of a results store, `DIR/accuracy.csv`
(`results/` by default), so that tables and plots are generated from rows a run
wrote, never re-typed. A folder that `compare`, `compare-sizes`, `scaling`,
`memory`, `augment-benchmark` or `python -m benchmarks backends` wrote (its
`results.json`) becomes rows of `DIR/speed.csv` instead: one per mode and figure.

A row holds what the figure needs to be read and reproduced: the recipe, the
command's overrides (the settings that differ from the recipe's own), the split
and the metric, the epochs, the training's wall time and images per second, the
seed, the machine class (docs/machines.md's names, from the CPU metrics.json
recorded), the versions, the commit and the date. The seeds of one configuration
share a `group`, which the tables average over.
"""

import csv
import datetime
import json
import re
from pathlib import Path

from keras_course_recipes import _config, rundir, settings
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command

COLUMNS = ("group", "recipe", "command", "split", "images_scored", "metric", "value", "epochs",
           "wall_s", "images_per_s", "seed", "machine", "tensorflow", "keras", "kit", "commit",
           "date", "source")
STORE = Path("results")
SPEED_COLUMNS = ("group", "recipe", "variant", "mode", "batch", "params", "metric", "value", "runs",
                 "command", "machine", "tensorflow", "keras", "kit", "commit", "date", "source")
# The figures of a measured mode that the store keeps; the rest (p10, p90, FLOPs) stay in
# the folder's results.json.
SPEED_METRICS = ("step_ms_median", "step_ms", "images_per_s", "speedup_vs_eager",
                 "speedup_vs_host", "step_vs_loop_function", "vs_first", "scaling_efficiency",
                 "input_wait_fraction", "trace_s", "first_step_s", "mfu", "peak_step_mb",
                 "peak_rss_mb", "memory_vs_standard", "time_vs_standard")
TOOLS = "compare, compare-sizes, scaling, memory, augment-benchmark or backends"


def machine_class(device):
    """docs/machines.md's class of the machine a metrics.json `device` describes, or None
    where its CPU is none of the classes named there."""
    if device.get("gpus"):
        return "GPU-" + device["gpus"][0].split()[-1]  # "NVIDIA H100 80GB HBM3" is not a class name
    cpu, features = device.get("cpu", ""), set(device.get("cpu_features") or ())
    generation = device.get("cpu_generation") or ""
    if "EPYC" in cpu:
        if generation.startswith("family 26"):
            return "EPYC-Zen5"
        return "EPYC-oneDNN" if "avx512_bf16" in features else (
            "EPYC-AVX2" if "avx2" in features else None)
    if "Xeon" in cpu:
        return "Xeon-AMX" if "amx_tile" in features else (
            "Xeon-AVX512" if "avx512_bf16" in features else None)
    return None


def row(run_dir, group=None, machine=None):
    """The store's row for the finished run in `run_dir` (its metrics.json and config.yaml)."""
    run_dir = Path(run_dir)
    metrics_file = run_dir / "metrics.json"
    if not metrics_file.is_file():
        raise UserError(f"{run_dir} holds no metrics.json: record a finished run's directory "
                        "(runs/NAME/<timestamp>), whose metrics.json the run writes last, or "
                        "the folder a compare wrote (runs/compare/NAME/<timestamp>).")
    try:
        metrics = json.loads(metrics_file.read_text())
    except ValueError:
        raise UserError(f"{metrics_file} is not valid JSON: run the same command again to "
                        "write it anew.") from None
    needed = ("device", "versions", "timing", "test", "evaluated_on", "epochs_completed")
    if not isinstance(metrics, dict) or any(key not in metrics for key in needed) or (
            "accuracy" not in metrics["test"]):
        raise UserError(f"{metrics_file} is not a metrics.json of this kit's with a test "
                        "accuracy: record the directory of a run that `recipes run` or a recipe "
                        "file finished.")
    config = rundir.read_config(run_dir)
    machine = machine or machine_class(metrics["device"])
    if machine is None:
        raise UserError(f"{run_dir} ran on a CPU that no class of docs/machines.md describes "
                        f"({metrics['device'].get('cpu')}): name one with --machine CLASS.")
    default = _config.resolve(config["recipe"], announce=lambda line: None)
    changed = [key for key in rundir.changed_keys(default, config)
               if not key.startswith("run.") and key != "execution.mode"]
    flat = settings.flatten(config)
    overrides = " ".join(f"{key}={_shown(flat[key])}" for key in changed)
    versions, epoch_s = metrics["versions"], metrics["timing"]["epoch_s"]
    return {
        "group": group or f"{config['recipe']} {machine}",
        "recipe": config["recipe"],
        "command": f"recipes run {config['recipe']} {overrides}".strip(),
        # A folder without test/ scores the held-out training images.
        "split": "test" if metrics["evaluated_on"] == "test" else "validation",
        "images_scored": "",
        "metric": "accuracy",
        "value": f"{metrics['test']['accuracy']:.4f}",
        "epochs": metrics["epochs_completed"],
        "wall_s": f"{sum(epoch_s):.0f}",  # the training's epochs, as history.csv times them
        "images_per_s": f"{metrics['timing']['images_per_s']:.0f}"
        if metrics["timing"].get("images_per_s") else "",
        "seed": config["execution"]["seed"],
        "machine": machine,
        "tensorflow": versions.get("tensorflow") or "",
        "keras": versions.get("keras") or "",
        "kit": versions.get("keras-course-recipes") or "",
        "commit": versions.get("commit") or "",
        "date": datetime.date.fromtimestamp(metrics_file.stat().st_mtime).isoformat(),
        "source": "recipes record",
    }


def speed_rows(folder, group=None, machine=None):
    """The store's rows for what a measuring tool wrote into `folder` (its results.json):
    one per measured mode (or variant, size, strategy) and figure."""
    results_file = Path(folder) / "results.json"
    try:
        results = json.loads(results_file.read_text())
    except ValueError:
        raise UserError(f"{results_file} is not valid JSON: run the measurement again.") from None
    if not _measurements(results):
        raise UserError(f"{results_file} is not what {TOOLS} writes, or was edited: record "
                        "the folder one of them wrote, or measure again.")
    machine = machine or machine_class(results["device"])
    if machine is None:
        raise UserError(f"{folder} was measured on a CPU that no class of docs/machines.md "
                        f"describes ({results['device'].get('cpu')}): name one with --machine "
                        "CLASS.")
    tool, versions = results.get("tool", "compare"), results.get("versions") or {}
    date = datetime.date.fromtimestamp(results_file.stat().st_mtime).isoformat()
    found = []
    for measured in results["rows"]:
        variant = measured.get("variant") or measured.get("strategy") or (
            f"{results['size_key']}={measured['size']}" if "size" in measured else "")
        common = {"group": group or f"{tool} {results['recipe']} {machine}",
                  "recipe": results["recipe"], "variant": variant,
                  "mode": measured.get("mode") or measured.get("backprop") or
                  measured.get("mode_used") or "",
                  "batch": measured.get("global_batch") or results.get("batch") or
                  (results.get("config") or {}).get("data", {}).get("batch_size", ""),
                  "params": measured.get("params") or results.get("params") or "",
                  "command": results.get("command", "unrecorded"), "machine": machine,
                  "tensorflow": versions.get("tensorflow") or "",
                  "keras": versions.get("keras") or "",
                  "kit": versions.get("keras-course-recipes") or "",
                  "commit": versions.get("commit") or "", "date": date,
                  "source": "recipes record"}
        for metric in SPEED_METRICS:
            if measured.get(metric) is None:
                continue
            runs = measured.get("step_ms_runs") if metric == "step_ms_median" else None
            found.append({**common, "metric": metric, "value": f"{measured[metric]:.6g}",
                          "runs": ";".join(f"{value:.6g}" for value in runs or ())})
    return found


def _measurements(results):
    """Whether a results.json holds what `speed_rows` reads: rows of numbers, a device."""
    def number(value):
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    return (isinstance(results, dict) and isinstance(results.get("device"), dict)
            and isinstance(results.get("recipe"), str) and isinstance(results.get("rows"), list)
            and all(isinstance(row, dict) and all(
                number(row[metric]) for metric in SPEED_METRICS if row.get(metric) is not None)
                and all(number(run) for run in row.get("step_ms_runs") or ())
                and ("size" not in row or "size_key" in results)
                for row in results["rows"]))


def _shown(value):
    """A value as `key=value` takes it on the command line (YAML)."""
    if isinstance(value, str) and re.fullmatch(r"[\w./:~-]+", value):
        return value
    return json.dumps(value)


def append(rows, store=STORE, name="accuracy", columns=COLUMNS):
    """Appends `rows` to `store/NAME.csv`, written with its header if new."""
    path = Path(store) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    if not new and next(csv.reader(path.open()), None) != list(columns):
        raise UserError(f"{path}'s header is not the store's columns ({','.join(columns)}): "
                        "give another --store.")
    with path.open("a", newline="") as file:
        writer = csv.DictWriter(file, columns, lineterminator="\n")  # the store's files are LF, as git keeps text
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return path


def record(run_dirs, group, machine, store):
    runs, measured = [], []  # every folder checked before anything is written
    for run_dir in run_dirs:
        if not (Path(run_dir) / "metrics.json").is_file() and (
                Path(run_dir) / "results.json").is_file():
            measured.append(speed_rows(run_dir, group, machine))
        else:
            runs.append(row(run_dir, group, machine))
    if runs:
        path = append(runs, store)
        for found in runs:
            print(f"recorded {found['recipe']} ({found['group']}): {found['split']} "
                  f"{found['metric']} {found['value']}, seed {found['seed']}, "
                  f"{found['machine']}")
        print(f"results: {path}")
    for rows in measured:
        path = append(rows, store, "speed", SPEED_COLUMNS)
        modes = dict.fromkeys(" ".join(filter(None, (found["variant"], found["mode"])))
                              for found in rows)
        print(f"recorded {rows[0]['recipe']} ({rows[0]['group']}): {len(rows)} figures of "
              f"{len(modes)} modes, {rows[0]['machine']}: {path}")


def add_arguments(parser):
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="finished runs' directories, or folders a compare wrote")
    parser.add_argument("--group", default=None,
                        help="the configuration's label, shared by its seeds; for a compare, "
                             "the measurement's (default: 'RECIPE MACHINE', 'TOOL RECIPE "
                             "MACHINE')")
    parser.add_argument("--machine", default=None,
                        help="the machine class (docs/machines.md), where the CPU does not say")
    parser.add_argument("--store", default=STORE, type=Path, help="the store's folder (results/)")


COMMANDS = (
    Command("record", "append finished runs' results to the results store (results/accuracy.csv; "
                      "a compare's to results/speed.csv)",
            lambda run_dirs, group, machine, store: record(run_dirs, group, machine, store),
            arguments=add_arguments, on_recipe=False, without_tensorflow=True),
)
