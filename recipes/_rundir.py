"""The run directory: where a run writes, and the rules for resuming one.

    runs/NAME/<timestamp>/   config.yaml, history.csv, checkpoints/, backup/,
                             tensorboard/, metrics.json (once it finished)
"""

import csv
import datetime
from pathlib import Path

import yaml

from recipes import RUNS_DIR, UserError
from recipes._config import dump

# Keys that may change between a run and its resumption: where and how long
# it runs, and how its steps execute (a run trained eagerly may go on under
# XLA). Not the precision: mixed_float16 adds loss-scale state, and Keras'
# BackupAndRestore then silently starts over from epoch 0.
RESUMABLE_KEYS = {"run", "train.epochs", "execution.mode", "execution.steps_per_execution",
                  "execution.onednn"}


def create(run_dir, config):
    """Creates `run_dir` (or reuses it, to resume), writes the resolved
    `config.yaml` into it and returns it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump(config))
    print(f"run directory: {run_dir}", flush=True)
    return run_dir


def choose(config):
    """Returns the directory a run of `config["recipe"]` writes to: `run.dir`,
    the latest unfinished run with `run.resume`, or a new timestamped one.

    Raises:
        UserError: the directory holds a finished run, or one whose config
            differs in more than `RESUMABLE_KEYS`.
    """
    name, run = config["recipe"], config["run"]
    if run["dir"] is not None:
        run_dir = Path(run["dir"]).expanduser()
    elif run["resume"]:
        unfinished = [d for d in sorted((RUNS_DIR / name).glob("*"))
                      if (d / "config.yaml").exists() and not (d / "metrics.json").exists()]
        if not unfinished:
            raise UserError(f"run.resume=true, but {RUNS_DIR / name} holds no "
                            "unfinished run to resume. Drop run.resume to start one.")
        run_dir = unfinished[-1]
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        return RUNS_DIR / name / stamp

    if (run_dir / "metrics.json").exists():
        raise UserError(f"{run_dir} holds a finished run (metrics.json). "
                        "Start a new run, or give another run.dir.")
    if (run_dir / "config.yaml").exists():
        changed = _changed_keys(yaml.safe_load((run_dir / "config.yaml").read_text()), config)
        if changed:
            raise UserError(f"Cannot resume {run_dir}: its config differs in "
                            f"{', '.join(changed)}. Only run.*, train.epochs, execution.mode "
                            "and execution.steps_per_execution may change; use the same "
                            "settings, or another run.dir.")
        print(f"resuming the run in {run_dir} from its last finished epoch")
    return run_dir


def _changed_keys(old, new, prefix=""):
    changed = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        if dotted in RESUMABLE_KEYS:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += _changed_keys(a, b, dotted + ".")
        elif a != b:
            changed.append(dotted)
    return changed


def read_history(path):
    """The CSV history's epochs as dicts of the model's metrics."""
    path = Path(path)
    if not path.exists():
        return []
    with path.open() as file:
        return [{k: float(v) for k, v in row.items()
                 if k != "epoch" and not k.startswith("time_") and v != ""}
                for row in csv.DictReader(file)]
