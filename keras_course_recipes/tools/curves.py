"""`python -m keras_course_recipes curves RUN_DIR [RUN_DIR ...]`: validation accuracy against wall time.

Reads each run's `history.csv` (its `time_epoch_s` column, from the `Timing`
callback, and `val_accuracy`) and draws one line per run: what a time budget
buys. Writes `accuracy_vs_time.png` into the first run directory, or `--out`,
and beside it `time_to_accuracy.md`: the minutes each run took to first reach
each of `--thresholds`, as cifar10-airbench tabulates its runs.
"""

import argparse
import itertools
import math
from pathlib import Path

from keras_course_recipes import history_csv, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, plots

# cifar10-airbench's table: minutes to each of these validation accuracies.
THRESHOLDS = (0.85, 0.90, 0.93, 0.94, 0.95)


def read_curve(run_dir):
    """`(label, minutes, val_accuracy)`: cumulative epoch wall time and the
    validation accuracy after each epoch of the run in `run_dir`."""
    run_dir = Path(run_dir)
    history = run_dir / "history.csv"
    if not history.is_file():
        raise UserError(f"{run_dir} holds no history.csv: give the directory of a run "
                        "(runs/NAME/<timestamp>).")
    rows = history_csv.read_rows(history, announce=print)  # a torn last row left out, said so
    if not rows or "val_accuracy" not in rows[0] or "time_epoch_s" not in rows[0]:
        raise UserError(f"{history} has no val_accuracy and time_epoch_s columns.")
    missing = [row["epoch"] for row in rows
               if not all(_finite(row[column]) for column in ("time_epoch_s", "val_accuracy"))]
    if missing:
        raise UserError(f"{history}: epoch {missing[0]} has no time_epoch_s or val_accuracy "
                        "(NA or empty), so it has no place on the curve: restore the row, or "
                        "leave this run out.")
    minutes = list(itertools.accumulate(float(row["time_epoch_s"]) / 60 for row in rows))
    config = rundir.read_config(run_dir)  # one line if config.yaml was garbled or edited
    name = config["recipe"] if config else run_dir.name
    return f"{name} ({run_dir.name})", minutes, [float(row["val_accuracy"]) for row in rows]


def _finite(text):
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def time_to_accuracy(lines, thresholds):
    """A Markdown table: per run, the minutes of training (epochs and their
    validation) after which validation accuracy first reached each threshold."""
    header = " | ".join(f"{t:.0%}" for t in thresholds)
    rows = [f"| run | {header} | epochs | last |", "|---" * (len(thresholds) + 3) + "|"]
    for label, minutes, accuracy in lines:
        reached = [next((f"{m:.1f}" for m, a in zip(minutes, accuracy) if a >= t), "-")
                   for t in thresholds]
        rows.append(f"| {label} | {' | '.join(reached)} | {len(accuracy)} | {accuracy[-1]:.2%} |")
    return "\n".join(rows) + "\n"


def curves(run_dirs, out=None, thresholds=THRESHOLDS):
    """Draws the runs' curves and tabulates their minutes to `thresholds`;
    returns the PNG's path."""
    if not run_dirs:
        raise UserError("curves needs at least one run directory.")
    lines = [read_curve(run_dir) for run_dir in run_dirs]
    path = Path(out) if out else Path(run_dirs[0]) / "accuracy_vs_time.png"
    table = time_to_accuracy(lines, thresholds)
    try:
        plots.accuracy_vs_time(lines, path)
        (path.parent / "time_to_accuracy.md").write_text(table)
    except OSError as error:
        raise UserError(f"Cannot write {error.filename or path}: {error.strerror}. Give a "
                        "folder you can write to with --out.") from None
    print(table, end="")
    for label, minutes, accuracy in lines:
        best = max(range(len(accuracy)), key=accuracy.__getitem__)
        print(f"{label}: best val_accuracy {accuracy[best]:.4f} at {minutes[best]:.1f} min "
              f"(epoch {best + 1} of {len(accuracy)}, {minutes[-1]:.1f} min in all)")
    print(f"plot: {path}; table: {path.parent / 'time_to_accuracy.md'}")
    return path


def add_arguments(parser):
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="runs/NAME/<timestamp>")
    parser.add_argument("--out", metavar="PNG",
                        help="default: RUN_DIR/accuracy_vs_time.png of the first run")
    parser.add_argument("--thresholds", type=_fractions, default=THRESHOLDS,
                        metavar="A,B,...", help="accuracies to time, e.g. 0.85,0.9 (default "
                        "0.85,0.9,0.93,0.94,0.95, cifar10-airbench's)")


def _fractions(text):
    try:
        values = tuple(float(item) for item in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"expects accuracies in (0, 1] separated by "
                                         f"commas, e.g. 0.85,0.9; got {text!r}")
    return values


COMMANDS = (
    Command("curves", "plot validation accuracy against training time for one or more runs",
            curves, arguments=add_arguments, on_recipe=False, without_tensorflow=True, draws=True),
)
