"""`python -m keras_course_recipes record RUN_DIR [RUN_DIR ...] [--group LABEL] [--machine CLASS]
[--store DIR]`: a finished run's result as a row of a results store, `DIR/accuracy.csv`
(`results/` by default), so that tables and plots are generated from rows a run
wrote, never re-typed. A folder that `compare`, `compare-sizes`, `scaling`,
`memory`, `augment-benchmark` or `python -m benchmarks backends` wrote (its
`results.json`) becomes rows of `DIR/speed.csv` instead: one per mode and figure.

A row holds what the figure needs to be read and reproduced: the recipe, the
command that trains the run again (every training key that differs from the
recipe's own, `train.epochs` and `execution.mode` included; not `run.*`), the
dataset, the split and the metric, the epochs, the precision, the training's wall
time and images per second, the seed, the machine class (from the CPU metrics.json
recorded), the versions, the commit, the date, and what identifies the run (its
directory's digest, its weights'). The seeds of one configuration share a `group`,
which the tables average over.

`append` is the one path that adds rows to accuracy.csv (`python -m benchmarks
anchor --record` uses it too), and it refuses, in one line, a row that is not a
figure of a configuration: a run recorded already (its directory or its weights),
one trained on random images (data.source=synthetic), a figure that is not finite,
or a run whose recipe, dataset, split, epochs, precision or machine differ from
the rows of the group it would join (a blank cell, unknown, never differs).
`read_rows` reads a store's file as `make results` does: a damaged line is one line
naming the file and its number.
"""

import contextlib
import csv
import datetime
import hashlib
import json
import math
import os
import re
import shlex
from pathlib import Path

import yaml

from keras_course_recipes import recipe_config, errors, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command

COLUMNS = ("group", "recipe", "command", "dataset", "split", "images_scored", "metric", "value",
           "epochs", "precision", "wall_s", "images_per_s", "seed", "machine", "tensorflow",
           "keras", "kit", "commit", "date", "run_id", "weights", "source")
# What the rows of one group share, where both cells say it: a blank cell is unknown.
GROUP_COLUMNS = ("recipe", "dataset", "split", "epochs", "precision", "machine")
# What identifies a run: the same directory, or the same weights, is the same figure.
RUN_COLUMNS = {"run_id": "run directory", "weights": "weights"}
# The machine classes docs/machines.md describes (tests/test_results.py keeps them in step).
MACHINES = ("EPYC-oneDNN", "EPYC-AVX2", "EPYC-Zen5", "EPYC-Eigen", "Xeon-AMX", "Xeon-AVX512",
            "GPU-H100", "GPU-H200")
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
    """The class (`MACHINES`, docs/machines.md's) of the machine a metrics.json `device`
    describes, or None where its CPU is none of them."""
    if device.get("gpus"):
        # "NVIDIA H100 80GB HBM3" is GPU-H100: the model is the word after the maker's name
        words = device["gpus"][0].split()
        return "GPU-" + (words[1] if len(words) > 1 and words[0] == "NVIDIA" else words[-1])
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


def classes():
    """The machine classes, as a message names them: the page that describes them
    only where there is one (a checkout; a wheel has no docs/)."""
    where = " (docs/machines.md describes them)" if errors.checkout() else ""
    return f"{', '.join(MACHINES)}{where}"


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
    except (ValueError, OSError) as error:
        raise UserError(f"{metrics_file} cannot be read ({type(error).__name__}): run the same "
                        "command again to write it anew.") from None
    problem = _metrics_problem(metrics)
    if problem:
        raise UserError(f"{metrics_file} is not a metrics.json of this kit's with a test "
                        f"accuracy: {problem}. Record the directory of a run that `recipes run` "
                        "or a recipe file finished, as the run left it.")
    config = rundir.read_config(run_dir)
    if not isinstance(config, dict) or not isinstance(config.get("recipe"), str):
        raise UserError(f"{run_dir} holds no config.yaml of a run (the settings it trained "
                        "with, which a run writes first): record a run's directory as the run "
                        "left it.")
    machine = machine or machine_class(metrics["device"])
    if machine is None:
        raise UserError(f"{run_dir} ran on a CPU that no machine class describes "
                        f"({metrics['device'].get('cpu')}): name one with --machine CLASS, "
                        f"one of {classes()}.")
    overrides = [f"{key}={_shown(_value(config, key))}"
                 for key in training_keys(_defaults(config["recipe"]), config)]
    accuracy, timing = metrics["test"]["accuracy"], metrics["timing"]
    data = config.get("data") or {}
    weights = metrics.get("weights_sha256")
    return {
        "group": group or f"{config['recipe']} {machine}",
        "recipe": config["recipe"],
        "command": shlex.join(["recipes", "run", config["recipe"], *overrides]),
        # Random images are no dataset: `append` refuses the row.
        "dataset": "synthetic" if data.get("source") == "synthetic" else data.get("name") or "",
        # A folder without test/ scores the held-out training images.
        "split": "test" if metrics["evaluated_on"] == "test" else "validation",
        "images_scored": "",
        "metric": "accuracy",
        # null where the run's accuracy was NaN (metrics.json is strict JSON): refused.
        "value": "nan" if accuracy is None else f"{accuracy:.4f}",
        "epochs": metrics["epochs_completed"],
        "precision": (config.get("execution") or {}).get("precision") or "",
        # The training's epochs, as history.csv times them.
        "wall_s": f"{sum(timing['epoch_s']):.0f}",
        "images_per_s": f"{timing['images_per_s']:.0f}" if timing.get("images_per_s") else "",
        "seed": (config.get("execution") or {}).get("seed", ""),
        "machine": machine,
        "tensorflow": metrics["versions"].get("tensorflow") or "",
        "keras": metrics["versions"].get("keras") or "",
        "kit": metrics["versions"].get("keras-course-recipes") or "",
        "commit": metrics["versions"].get("commit") or "",
        "date": datetime.date.fromtimestamp(metrics_file.stat().st_mtime).isoformat(),
        "run_id": run_id(run_dir),
        "weights": weights[:16] if isinstance(weights, str) else "",
        "source": "recipes record",
    }


def run_id(run_dir):
    """A digest of the run directory's absolute path: the same directory twice is one run
    (the path itself, a home folder's, stays on the machine)."""
    return hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _metrics_problem(metrics):
    """What keeps `row` from reading `metrics` (a metrics.json's), or None."""
    if not isinstance(metrics, dict):
        return f"it holds a {type(metrics).__name__}, not the mapping a run writes"
    kinds = {"device": (dict, "a mapping"), "versions": (dict, "a mapping"),
             "timing": (dict, "a mapping"), "test": (dict, "a mapping"),
             "evaluated_on": (str, "a split's name"), "epochs_completed": (int, "a count")}
    for key, (kind, what) in kinds.items():
        if key not in metrics:
            return f"`{key}` is missing"
        if not isinstance(metrics[key], kind) or isinstance(metrics[key], bool):
            return f"`{key}` is {json.dumps(metrics[key])[:40]}, not {what}"
    if "accuracy" not in metrics["test"]:
        return "`test.accuracy` is missing"
    accuracy = metrics["test"]["accuracy"]
    if accuracy is not None and not _number(accuracy):
        return f"`test.accuracy` is {json.dumps(accuracy)[:40]}, not a number"
    epoch_s = metrics["timing"].get("epoch_s")
    if not isinstance(epoch_s, list) or not all(_number(value) for value in epoch_s):
        return "`timing.epoch_s` (each epoch's seconds) is missing or not a list of numbers"
    if metrics["timing"].get("images_per_s") is not None and not _number(
            metrics["timing"]["images_per_s"]):
        return "`timing.images_per_s` is not a number"
    device = metrics["device"]
    if not (isinstance(device.get("gpus") or [], list) and all(
            isinstance(name, str) for name in device.get("gpus") or [])
            and isinstance(device.get("cpu") or "", str)
            and isinstance(device.get("cpu_features") or [], list)
            and isinstance(device.get("cpu_generation") or "", str)):
        return "`device` does not name its CPU and GPUs as a run writes them"
    if not all(isinstance(value, str) or value is None for value in metrics["versions"].values()):
        return "`versions` holds something other than version names"
    return None


def training_keys(default, config, prefix=""):
    """The dotted keys whose values differ between a recipe's `default` settings and a run's
    `config`: every key the run trained by, the ones a resume may change included
    (`train.epochs`, `execution.mode`), but not `run.*` (where it wrote, how it logged).
    `rundir.changed_keys`, which a resume checks, leaves the resumable ones out."""
    changed = []
    for key in sorted(set(default) | set(config)):
        dotted, a, b = f"{prefix}{key}", default.get(key), config.get(key)
        if dotted == "run":
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed += training_keys(a, b, dotted + ".")
        elif a != b:
            changed.append(dotted)
    return changed


def _value(tree, dotted):
    for part in dotted.split("."):
        tree = tree[part]
    return tree


def _defaults(recipe):
    """Recipe `recipe`'s own settings, as `recipes run NAME` resolves them without an
    override: not the environment's KERAS_BACKEND, which would hide the run's backend
    from the command."""
    with _without_environment("KERAS_BACKEND"):
        return recipe_config.resolve(recipe, announce=lambda line: None)


@contextlib.contextmanager
def _without_environment(name):
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


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
        raise UserError(f"{folder} was measured on a CPU that no machine class describes "
                        f"({results['device'].get('cpu')}): name one with --machine CLASS, one "
                        f"of {classes()}.")
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
    """A value as `key=value` takes it on the command line: YAML's flow style, which
    reads back as the same value (a string that reads as a number or a boolean quoted)."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9,
                          allow_unicode=True)
    return text[:-len("\n...\n")] if text.endswith("\n...\n") else text.rstrip("\n")


def read_rows(path, columns=COLUMNS, check=None):
    """The rows of the store's file `path` (dicts), every one checked: the header is
    `columns`, each line holds as many fields, and `check(row)` (for accuracy.csv, the
    store's own checks) finds no problem; a damaged line is a `UserError` naming the file
    and the line's number."""
    return [found for _, found in _numbered_rows(path, columns, check)]


def _numbered_rows(path, columns, check=None):
    """[(line number, row)] of `read_rows`."""
    if check is None and tuple(columns) == COLUMNS:
        check = _accuracy_problem
    path, columns = Path(path), list(columns)
    try:
        with path.open(newline="", encoding="utf-8") as file:
            reader, line, found = csv.reader(file), 1, []
            header = next(reader, None)
            if header != columns:
                raise UserError(f"{path}, line 1: {_header_problem(header, columns)}; mend "
                                "the header (and the rows below it), or give another store.")
            for cells in reader:
                line, end = line + 1, reader.line_num
                if not cells:  # a blank line holds no row
                    line = end
                    continue
                if end != line:  # a quote left open: the next lines read as its field
                    raise UserError(f"{path}, line {line}: a quoted field runs on to line "
                                    f"{end}: a line cut short, or a stray quote; a row of the "
                                    "store is one line: mend or delete it.")
                if len(cells) != len(columns):
                    raise UserError(f"{path}, line {line}: {len(cells)} field"
                                    f"{'s' if len(cells) != 1 else ''} where the header names "
                                    f"{len(columns)}: a line cut short, joined or stray; mend "
                                    "or delete it.")
                row = dict(zip(columns, cells))
                problem = (check(row) if check else None) or (
                    _conflict(row, found) if tuple(columns) == COLUMNS else None)
                if problem:
                    raise UserError(f"{path}, line {line}: {problem}; mend or delete the line.")
                found.append((line, row))
                line = end
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text: restore it (git checkout {path} in a "
                        "checkout), or give another store.") from None
    except csv.Error as error:
        raise UserError(f"{path}, line {line + 1}: not CSV ({error}); mend or delete the "
                        "line.") from None
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error.strerror or error}): give a store "
                        "you can read.") from None
    return found


def _header_problem(header, columns):
    """How the header `header` differs from the store's `columns`."""
    missing = [name for name in columns if name not in (header or ())]
    extra = [name for name in header or () if name not in columns]
    if not header or not missing and not extra:
        return (f"{'no header' if not header else 'the columns out of order'}, where the "
                f"store's header is {','.join(columns)}")
    return "the header " + " and ".join(filter(None, [
        missing and f"lacks {', '.join(missing)}", extra and f"has {', '.join(extra)}"]))


def _finite(text):
    """`text` as a finite number, or None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _accuracy_problem(row):
    """What makes `row` no row of accuracy.csv, or None: a blank that must be filled, a
    figure that is not a fraction, a count that is not whole, a date that is none."""
    for name in ("group", "recipe", "command", "split", "metric", "value", "machine", "date"):
        if not row[name].strip():
            return f"its {name} is blank"
    if row["split"] not in ("validation", "test"):
        return f"its split is {row['split']!r}, not validation or test"
    value = _finite(row["value"])
    if value is None or not 0 <= value <= 1:
        return f"its value is {row['value']!r}, not a finite fraction (an accuracy, 0 to 1)"
    if row["dataset"] == "synthetic":
        return "its run trained on random images (data.source=synthetic)"
    for name in ("epochs", "seed", "images_scored"):
        if row[name] and not (row[name].isascii() and row[name].isdigit()):
            return f"its {name} is {row[name]!r}, not a whole number"
    for name in ("wall_s", "images_per_s"):
        if row[name] and (_finite(row[name]) is None or _finite(row[name]) < 0):
            return f"its {name} is {row[name]!r}, not a number"
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]):
        return f"its date is {row['date']!r}, not YYYY-MM-DD"
    return None


def _conflict(row, rows):
    """Why `row` cannot join the store's `rows` ([(where, row)]: a line's number, or
    words for a row not written yet), or None: the same run (its directory, its
    weights), or unlike the rows of its group."""
    def at(where):
        return f"line {where}" if isinstance(where, int) else where

    for where, other in rows:
        for name, what in RUN_COLUMNS.items():
            if row[name] and row[name] == other[name]:
                return (f"it is recorded already, at {at(where)} (group '{other['group']}'): "
                        f"the same {what}, and a run is one row")
    for where, other in rows:
        if other["group"] != row["group"]:
            continue
        for name in GROUP_COLUMNS:
            if row[name] and other[name] and row[name] != other[name]:
                return (f"its {name} is {row[name]}, and group '{row['group']}' holds "
                        f"{other[name]} ({at(where)}): a group is one configuration's seeds")
    return None


def check(rows, store=STORE, name="accuracy", columns=COLUMNS, origins=None, figures=True):
    """Refuses, in one line, `rows` that the store's `name`.csv would not hold (`append`'s
    refusals; `figures=False` leaves out the figure's, for rows checked before their runs
    measured anything); returns the file's path."""
    store = Path(store)
    if store.exists() and not store.is_dir():
        raise UserError(f"the store {store} is a file, not a folder: give --store a folder "
                        "(results/ by default).")
    path = store / f"{name}.csv"
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is not a file: give another --store.")
    found = _numbered_rows(path, columns) if path.exists() else []
    if tuple(columns) != COLUMNS:
        return path
    origins = origins or [None] * len(rows)
    for new, origin in zip(rows, origins):
        what = origin or f"the row of {new['recipe']} (seed {new['seed'] or '-'})"
        new = {key: str(value) for key, value in new.items()}
        problem = (_refusal(new) if figures else None) or _conflict(new, found)
        if problem:
            raise UserError(f"{what} is not recorded in {path}: {problem}. {_advice(problem)}")
        found.append((f"{what}, earlier in this command", new))
    return path


def _refusal(row):
    """What keeps a new row from being a figure: random images, a figure that is not
    finite, a cell the store cannot hold."""
    if row["dataset"] == "synthetic":
        return ("it trained on random images (data.source=synthetic), and its accuracy "
                "measures nothing")
    if _finite(row["value"]) is None:
        return f"its accuracy is {row['value']}, not a finite figure"
    return _accuracy_problem(row)


def _advice(problem):
    """What to do about a refused row: its problem says which."""
    if "random images" in problem:
        return "Record a run on real images (data.source=tfds or folder)."
    if "finite" in problem:
        return ("The training diverged, or metrics.json was edited: train again (a lower "
                "train.lr), or record another run.")
    if "recorded already" in problem:
        return "To record it anew, delete that line of the store first."
    if "a group is one" in problem:
        return "Give it a --group of its own, or record a run like the group's."
    return "Record a run's directory as the run left it."


def append(rows, store=STORE, name="accuracy", columns=COLUMNS, origins=None):
    """Appends `rows` to `store/NAME.csv`, written with its header if new, once `check`
    passes them all (`origins`: what each row came from, as its refusal names it)."""
    path = check(rows, store, name, columns, origins)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, columns, lineterminator="\n")  # the store's files are LF, as git keeps text
            if new:
                writer.writeheader()
            writer.writerows(rows)
    except FileExistsError:
        raise UserError(f"the store {store} is below a file, not a folder: give --store a "
                        "folder (results/ by default).") from None
    except OSError as error:
        raise UserError(f"the store {store} cannot be written ({error.strerror or error}): "
                        "give --store a folder you can write.") from None
    return path


def record(run_dirs, group, machine, store):
    runs, origins, measured = [], [], []  # every folder checked before anything is written
    for run_dir in run_dirs:
        if not (Path(run_dir) / "metrics.json").is_file() and (
                Path(run_dir) / "results.json").is_file():
            measured.append(speed_rows(run_dir, group, machine))
        else:
            runs.append(row(run_dir, group, machine))
            origins.append(str(run_dir))
    if runs:
        check(runs, store, origins=origins)
    for rows in measured:
        check(rows, store, "speed", SPEED_COLUMNS)
    if runs:
        path = append(runs, store, origins=origins)
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
                        help=f"the machine class, where the CPU does not say: {classes()}")
    parser.add_argument("--store", default=STORE, type=Path, help="the store's folder (results/)")


COMMANDS = (
    Command("record", "append finished runs' results to the results store (results/accuracy.csv; "
                      "a compare's to results/speed.csv)",
            lambda run_dirs, group, machine, store: record(run_dirs, group, machine, store),
            arguments=add_arguments, on_recipe=False, without_tensorflow=True),
)
