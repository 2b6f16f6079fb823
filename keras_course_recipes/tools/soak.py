"""`python -m keras_course_recipes soak NAME kills=N`: kill a training N times, resume it each time.

Runs `python -m keras_course_recipes run NAME` in a run directory of its own and SIGKILLs
it at random moments, half of them timed to land inside a checkpoint write
(the moment BackupAndRestore has copied its previous state aside and is
writing the new one). After each kill it checks what the next start will
resume from (`rundir.saved_epochs`, what the run itself reads first) and
starts the same command again. At the end the run goes on to finish, and a
table says whether it survived: kills, successful resumes, finished epochs
lost per kill, whether every epoch appears once in history.csv, whether the
run finished, and whether its losses equal, within 1e-4 relative, those of
the same run trained without a kill (in a directory beside it); the command
fails if they do not.
"""

import math
import random
import subprocess
import sys
import time

from keras_course_recipes import RUNS_DIR, history_csv, recipe_config, rundir

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, count, tables

POLL_S = 0.001
DEFAULT_KILLS = 20
# A resumed run's losses against the uninterrupted run's: what the docs promise.
RELATIVE_TOLERANCE = 1e-4


def soak(name, kills=DEFAULT_KILLS, config_files=(), overrides=(), seed=0, runs_dir=RUNS_DIR):
    """Kills and resumes recipe `name` `kills` times; prints and returns the results."""
    run_dir = rundir.new_directory(runs_dir / "soak" / name).resolve()
    reference = run_dir.with_name(f"{run_dir.name}-uninterrupted")
    config = recipe_config.resolve(name, config_files, [*overrides, f"run.dir={run_dir}"],
                             announce=lambda line: None)
    epochs = config["train"]["epochs"]

    def command(directory):
        return [sys.executable, "-m", "keras_course_recipes", "run", name,
                *[f"--config={path}" for path in config_files], *overrides,
                f"run.dir={directory}", "run.verbose=0"]

    rng = random.Random(seed)
    lost, log = [], run_dir.parent / f"{run_dir.name}.log"
    with log.open("w") as output:
        print("training the uninterrupted run to compare with...", flush=True)
        subprocess.run(command(reference), stdout=output, stderr=subprocess.STDOUT)
        for kill in range(1, kills + 1):
            process = subprocess.Popen(command(run_dir), stdout=output,
                                       stderr=subprocess.STDOUT)
            during_write = kill % 2 == 0
            recorded = _wait_and_kill(process, run_dir, during_write, rng)
            if recorded is None:  # it exited before this kill
                returncode = process.returncode
                break
            if (run_dir / "metrics.json").exists():  # killed as it exited: it had finished
                returncode = 0
                break
            restored = rundir.saved_epochs(run_dir / "backup")
            lost.append(recorded - restored)
            print(f"kill {kill}: {'during a checkpoint write' if during_write else 'at random'} "
                  f"after {recorded} finished epochs; resumes from {restored}", flush=True)
        else:
            returncode = subprocess.run(command(run_dir), stdout=output,
                                        stderr=subprocess.STDOUT).returncode
    # Every kill was followed by a start; the last one ran to its end.
    resumed = len(lost) - (returncode != 0)
    history = [int(row["epoch"]) for row in history_csv.read_rows(run_dir / "history.csv")]
    difference = _loss_difference(run_dir / "history.csv", reference / "history.csv")
    row = {
        "kills": len(lost),
        "resumes that succeeded": resumed,
        "finished epochs lost per kill (max)": max(lost, default=0),
        "epochs lost in all": sum(lost),
        "every epoch once in history.csv": history == list(range(epochs)),
        "run finished": (run_dir / "metrics.json").exists(),
        "losses equal the uninterrupted run's": not difference,
    }
    table = tables.markdown_table(list(row), [row])
    (run_dir / "soak.md").write_text(table + "\n")
    print(f"\n{table}\n\nrun: {run_dir}; the processes' output: {log}")
    if returncode != 0:
        raise UserError(f"The final run did not finish (exit {returncode}); see {log}.")
    if difference:
        raise UserError(f"The killed and resumed run did not train as the uninterrupted one "
                        f"({reference}): {difference}.")
    return row


def _loss_difference(history, reference):
    """What differs between the loss columns of two history.csv files, beyond
    `RELATIVE_TOLERANCE`; None when nothing does."""
    rows, expected = history_csv.read_rows(history), history_csv.read_rows(reference)
    if len(rows) != len(expected) or not expected:
        return f"{len(rows)} epochs in history.csv, {len(expected)} uninterrupted"
    for row, want in zip(rows, expected):
        for column in (key for key in want if "loss" in key):
            got, wanted = float(row.get(column) or "nan"), float(want[column])
            if not math.isclose(got, wanted, rel_tol=RELATIVE_TOLERANCE):
                return f"epoch {row['epoch']}: {column} {got} against {wanted}"
    return None


def _wait_and_kill(process, run_dir, during_write, rng):
    """SIGKILLs `process` once it has trained a while; returns the epochs
    history.csv recorded at that moment, or None if it exited first.

    At random: up to 1.5 s after it finishes an epoch, so that every process
    trains (a kill during start-up tests nothing). During a write: as soon
    as BackupAndRestore has copied its previous state aside.
    """
    history, marker = run_dir / "history.csv", run_dir / "backup" / "training_metadata.json.bkp"
    size = lambda path: path.stat().st_size if path.exists() else 0  # noqa: E731
    started, deadline = size(history), None
    stamp = marker.stat().st_mtime_ns if marker.exists() else None
    while process.poll() is None:
        if during_write:
            # The previous state was just copied aside: the new one is being written.
            if marker.exists() and marker.stat().st_mtime_ns != stamp:
                break
        elif deadline is None:
            if size(history) > started:  # an epoch's row was appended
                deadline = time.monotonic() + rng.uniform(0.0, 1.5)
        elif time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    if process.poll() is not None:
        return None
    process.kill()
    process.wait()
    return len(history_csv.read_rows(history))


COMMANDS = (
    Command("soak", "SIGKILL a training N times at random moments and resume it each time; "
                    "a table of what survived (option kills=N)",
            soak, (count("kills", DEFAULT_KILLS, minimum=1),)),
)
