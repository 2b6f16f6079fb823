"""The run directory: where a run writes, and the rules for resuming one.

    runs/NAME/<timestamp>/   config.yaml, history.csv, checkpoints/, backup/,
                             tensorboard/, metrics.json (once it finished)
"""

import csv
import datetime
import json
import os
import shutil
from pathlib import Path

import yaml

from recipes import RUNS_DIR, UserError
from recipes._config import dump

# Keys that may change between a run and its resumption: where and how long
# it runs, and how its steps execute (a run trained eagerly may go on under
# XLA, one trained on TensorFlow on JAX: the backup's weights and optimizer
# state are arrays that any backend loads). Not the precision: mixed_float16 adds loss-scale state, and Keras'
# BackupAndRestore then silently starts over from epoch 0.
RESUMABLE_KEYS = {"run", "train.epochs", "execution.backend", "execution.mode",
                  "execution.steps_per_execution", "execution.onednn"}


def timestamped(parent):
    """Returns `parent/<date>-<time>` (`20250131-142501`), the path of a new
    run or output directory; creating it is left to whoever writes there."""
    return Path(parent) / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def new_directory(parent):
    """Creates and returns a new directory `parent/<date>-<time>`, or
    `<date>-<time>-2`, `-3`... when another run took that name in the same
    second: created exclusively, so that two runs never share one."""
    path = timestamped(parent)
    for number in range(1, 1000):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
        except OSError as error:
            raise UserError(f"Cannot create the run directory {candidate}: {error.strerror}. "
                            "Give a folder you can write to with run.dir=PATH.") from None
    raise UserError(f"{parent} has no free name for a new run directory at {path.name}; "
                    "give one with run.dir=PATH.")


def create(run_dir, config):
    """Creates `run_dir` (or reuses it, to resume), writes the resolved
    `config.yaml` into it and returns it."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(dump(config))
    except OSError as error:
        raise UserError(f"Cannot write the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    print(f"run directory: {run_dir}", flush=True)
    return run_dir


def choose(config):
    """Returns the directory a run of `config["recipe"]` writes to: `run.dir`,
    the latest unfinished run with `run.resume`, or a new timestamped one,
    created here (`new_directory`).

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
        return new_directory(RUNS_DIR / name)

    if (run_dir / "config.yaml").exists():
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        changed = _changed_keys(saved, config)
        if changed:
            raise UserError(f"Cannot resume {run_dir}: its config differs in "
                            f"{', '.join(changed)}. Only run.*, train.epochs, execution.backend, "
                            "execution.mode, execution.steps_per_execution and execution.onednn "
                            "may change; use the same settings, or another run.dir.")
        epochs = config["train"]["epochs"]
        schedule = config["train"].get("schedule", "constant")
        if saved["train"]["epochs"] != epochs and schedule != "constant":
            raise UserError(f"Cannot change train.epochs from {saved['train']['epochs']} to {epochs} "
                            f"when resuming {run_dir}: its learning rate follows a '{schedule}' "
                            "schedule over all its epochs, which would jump to a new curve. "
                            "Keep the epochs, or start a new run.")
        if (run_dir / "metrics.json").exists():
            _reopen_finished(run_dir, epochs)
        print(f"resuming the run in {run_dir} from its last finished epoch")
    return run_dir


def _reopen_finished(run_dir, epochs):
    """Lets a finished run train on to `epochs`, from the final state its
    backup kept; its metrics.json is kept as metrics-N-epochs.json."""
    done = len(read_history(run_dir / "history.csv"))
    if epochs <= done:
        raise UserError(f"{run_dir} holds a finished run of {done} epochs (metrics.json). "
                        f"Raise train.epochs above {done} to train it further, or start a new run.")
    if not (run_dir / "backup" / BACKUP_METADATA).exists():
        raise UserError(f"{run_dir} holds a finished run without its final training state "
                        f"(backup/{BACKUP_METADATA}), so it cannot train further: start a new run.")
    (run_dir / "metrics.json").rename(run_dir / f"metrics-{done}-epochs.json")
    print(f"extending the finished run in {run_dir} from {done} to {epochs} epochs")


# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes in
# backup/ at the end of each epoch, in this order: the previous state copied
# to *.bkp, then the weights, then the metadata (the number of finished epochs).
BACKUP_WEIGHTS, BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"


def check_backup(run_dir):
    """Makes sure a resumed run starts from a whole state, before `fit` reads it.

    Keras loads whichever backup files exist, and falls back to the previous
    state only when the weights raise an `OSError`: a missing or garbled
    metadata file restarts at epoch 0 on trained weights, and a missing
    weights file trains fresh weights under the later epoch number. Here the
    latest state is used when both of its files read and the metadata was
    written after the weights (a kill between the two leaves newer weights
    beside older metadata); else the previous state, said so; else the run is
    refused with a message. history.csv keeps only the epochs the state
    holds, so that each epoch appears in it once.

    Returns:
        The number of finished epochs the run resumes from (0: it starts).

    Raises:
        UserError: the backup cannot be resumed from.
    """
    backup, history = run_dir / "backup", run_dir / "history.csv"
    recorded = len(read_history(history))
    epochs, problem = _saved_state(backup, "")
    if epochs is None and backup.exists():
        previous, _ = _saved_state(backup, ".bkp")
        if previous is not None:
            for name in (BACKUP_WEIGHTS, BACKUP_METADATA):
                shutil.copyfile(backup / f"{name}.bkp", backup / name)
            print(f"repaired: {problem}; resuming from the previous backup, "
                  f"{previous} finished epochs.", flush=True)
            epochs = previous
    if epochs is None and (backup.exists() or recorded):
        if recorded > 1 or (backup / f"{BACKUP_WEIGHTS}.bkp").exists():
            raise UserError(
                f"Cannot resume {run_dir}: {problem or f'{backup} is missing'}, and no "
                "previous state can replace it. Start a new run with another run.dir, "
                f"or delete {run_dir} to train this one from the start.")
        print(f"note: {problem or f'{backup} is missing'}; at most one epoch was finished: "
              "starting this run from the beginning.", flush=True)
        shutil.rmtree(backup, ignore_errors=True)
    _keep_epochs(history, epochs or 0)
    global training_in
    training_in = run_dir
    return epochs or 0


# The run directory this process last checked and then trains in: what an
# interrupt has to report on (interrupt_note).
training_in = None


def interrupt_note(again):
    """The line to print when Ctrl-C stops this process: what was saved, and
    `again`, the command that continues it."""
    if training_in is None:
        return "interrupted before a run started: nothing was saved."
    backup = training_in / "backup"
    # A Ctrl-C during the backup's write leaves the previous state whole.
    epochs = _saved_state(backup, "")[0] or _saved_state(backup, ".bkp")[0]
    if not epochs:
        return (f"interrupted before the first epoch of {training_in} finished: no epoch "
                f"was saved; {again} starts it again from the beginning.")
    return (f"interrupted: {epochs} finished epoch(s) are saved in {training_in}; "
            f"run {again} to continue.")


def check_backup_fits(run_dir, model):
    """Refuses to resume or extend the run in `run_dir` when its saved state
    holds weights of other shapes than `model`'s, e.g. after a class was
    added to the data folder; before anything in the directory changes.

    A backup that cannot be read is left to `check_backup`.

    Raises:
        UserError: a weight's shape differs, or the layers differ.
    """
    weights = Path(run_dir).expanduser() / "backup" / BACKUP_WEIGHTS
    if not weights.is_file():
        return
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        expected = Path(scratch) / "model.weights.h5"
        model.save_weights(expected)  # the layout this model saves and loads
        try:
            saved = _layer_shapes(weights)
        except (OSError, KeyError):
            return
        wanted = _layer_shapes(expected)
    differing = sorted(path for path in saved.keys() | wanted.keys()
                       if saved.get(path) != wanted.get(path))
    if differing:
        path = differing[0]
        raise UserError(
            f"Cannot resume {run_dir}: its saved state does not fit the model built now "
            f"({path}: {saved.get(path, 'absent')} there, {wanted.get(path, 'absent')} now). "
            "Did the data change, e.g. a class folder added to data.path? Train it as a new "
            "run (another run.dir), or restore the data the run was trained on.")


def _layer_shapes(weights_file):
    """{path: shape} of every layer weight in a Keras `.weights.h5` file."""
    import h5py  # Keras' own dependency, for its .weights.h5 files

    shapes = {}
    with h5py.File(weights_file, "r") as file:
        file["layers"].visititems(lambda path, item: shapes.__setitem__(path, item.shape)
                                  if isinstance(item, h5py.Dataset) else None)
    return shapes


def _saved_state(backup, suffix):
    """(finished epochs, None) for a whole state in `backup`, else (None, what is wrong)."""
    weights, metadata = backup / (BACKUP_WEIGHTS + suffix), backup / (BACKUP_METADATA + suffix)
    for path in (weights, metadata):
        if not path.exists():
            return None, f"{path} is missing"
    try:
        epochs = json.loads(metadata.read_text())["epoch"]
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(epochs)
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"{metadata} is damaged"
    import h5py  # Keras' own dependency, for its .weights.h5 files

    try:
        with h5py.File(weights, "r") as file:
            if not len(file):
                raise OSError("empty")
    except OSError:
        return None, f"{weights} is damaged"
    if metadata.stat().st_mtime_ns < weights.stat().st_mtime_ns:
        return None, f"{weights} is newer than {metadata} (a kill between the two writes)"
    return epochs, None


def _keep_epochs(history, epochs):
    """Drops history.csv's rows from epoch `epochs` on: they are trained
    again. A torn row goes too, said so, so that the next row starts on a
    line of its own."""
    lines, torn = _whole_lines(history)
    kept = lines[:1] + [line for line in lines[1:] if int(line.split(",")[0]) < epochs]
    if torn:
        print("repaired " + _torn_note(history, torn), flush=True)
    if torn or len(kept) != len(lines):
        with history.open("w", newline="") as file:
            file.writelines(kept)


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


def read_rows(path, announce=None):
    """The CSV history's whole rows as dicts of strings; [] if there is none yet.

    A kill while CSVLogger writes a row leaves a torn last line: fewer
    fields, or a number cut short without its newline. Such a row is left
    out, and `announce` (e.g. `print`), if given, told so in one line;
    `check_backup` also removes it from the file before training goes on.
    """
    path = Path(path)
    lines, torn = _whole_lines(path)
    if torn and announce:
        announce(_torn_note(path, torn))
    header = next(csv.reader(lines[:1]), None)
    return [dict(zip(header, fields)) for fields in csv.reader(lines[1:]) if fields]


def _whole_lines(path):
    """(the header and whole rows of the CSV at `path`, its torn rows), as lines."""
    if not path.exists():
        return [], []
    with path.open(newline="") as file:
        lines = file.read().splitlines(keepends=True)
    if not lines or not lines[0].endswith("\n"):  # no header yet, or a torn one
        return [], lines
    header, kept, torn = next(csv.reader(lines[:1])), lines[:1], []
    for line in lines[1:]:
        fields = next(csv.reader([line]), [])
        if line.endswith("\n") and len(fields) == len(header) and all(map(_is_number, fields)):
            kept.append(line)
        elif line.strip():
            torn.append(line)
    return kept, torn


def _torn_note(path, torn):
    return (f"{path}: left out {len(torn)} incomplete row(s), what a kill during a write "
            f"leaves: {' | '.join(line.strip() for line in torn)}")


def _is_number(text):
    """Whether a history.csv field is a number, or empty or NA (no value)."""
    try:
        float(text)
    except ValueError:
        return text in ("", "NA")
    return True


def read_column(path, column):
    """One column of the CSV history, as floats, for the epochs that have it."""
    return [float(row[column]) for row in read_rows(path) if row.get(column) not in (None, "", "NA")]


def read_history(path):
    """The CSV history's epochs as dicts of the model's metrics."""
    return [{k: float(v) for k, v in row.items()
             if k != "epoch" and not k.startswith("time_") and v not in ("", "NA")}
            for row in read_rows(path)]


def worker_task():
    """`(index, number of workers)` from `TF_CONFIG`, or None without one."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        tf_config = json.loads(text)
        return tf_config["task"]["index"], len(tf_config["cluster"]["worker"])
    except (ValueError, KeyError, TypeError):
        raise UserError(f"TF_CONFIG is not a cluster spec: {text!r}. It needs "
                        '{"cluster": {"worker": [HOST:PORT, ...]}, "task": {"type": '
                        '"worker", "index": I}}.') from None


def is_chief(config):
    """Whether this process writes the run's files: worker 0 of a
    `multi_worker` run, or the only process."""
    return config["execution"]["strategy"] != "multi_worker" or worker_task()[0] == 0
