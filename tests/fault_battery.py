"""A battery of bad inputs and faults that a new user could hit, each run as a
user runs it: `python -m keras_course_recipes ...` in a process of its own, from the
repository's root, with its run directory (and every other path it is given)
in a fresh temporary directory, on tiny synthetic settings so that each case
takes seconds. Not a test module (pytest collects tests/test_*.py only): a
report of what a user would see.

    python tests/fault_battery.py [--only 3,17] [--out battery.md]
    make battery ARGS="--only 3,17"

Each case says what a correct outcome is:
- refused: a non-zero exit whose stderr ends (TensorFlow's C++ log lines
  aside) in one line that starts with "error:" (argparse's refusals start
  with its program name, "python -m keras_course_recipes run: error:"), and no traceback;
- trains: exit 0, and the run's files tell the truth: metrics.json parses and
  counts the train.epochs asked for, history.csv holds epochs 0..N-1 once
  each, and metrics.json's best epoch is one of them;
- stops then resumes: a signal mid-run ends the process (exit 130 for
  Ctrl-C's SIGINT, or the process ended by SIGINT itself, as Python ends
  on an uncaught Ctrl-C; 143 or SIGTERM for SIGTERM; -9 for kill -9), then
  the same command trains to the end and the files tell the truth as above.
  The signal is sent once a file of the run exists, or a number of seconds
  after the start (start-up: while Keras and TensorFlow load).

A notebook case runs the recipe's file pasted into one cell, CONFIG set by a
second cell, on a Jupyter kernel launched as Jupyter (`-f FILE`) or as VS
Code (`--ip=... --f=FILE`) launches it; a cell that prints an "error:" line
counts as a non-zero exit.

Each case's actual outcome is one of: OK (as declared), TRACEBACK ("Traceback"
on stderr), SILENT-WRONG (exit 0 but a file lies, or exit 0 where a refusal
was declared), OTHER (anything else, said in the note). Cases run one at a
time, each line printed as it finishes, then a Markdown table and the totals
per class. Exit status 1 when any case is not OK.
"""

import argparse
import ast
import collections
import csv
import dataclasses
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
REFUSED, TRAINS, STOPS = "refused", "trains", "stops then resumes"
OK, TRACEBACK, SILENT_WRONG, OTHER = "OK", "TRACEBACK", "SILENT-WRONG", "OTHER"
TIMEOUT_S = 300  # per process: a generous bound on a case of seconds, for a hang

# A few steps on a handful of random images: every stage of a run in seconds.
# execution.onednn=null: TensorFlow's own choice, also where a recipe asks for oneDNN.
TINY = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
        "train.epochs=1", "train.steps_per_epoch=2", "run.verbose=0", "execution.onednn=null"]
# The smallest model of each family that still builds the recipe's network.
TINY_MODEL = {
    "densenet_cifar10_cpu": ["model.widths=[8,8,8]", "model.growth_rates=[4,4,4]",
                             "model.whitening_images=32"],
    "densenet_cifar100": ["model.depth=10", "model.growth_rate=4"],
}
# Long enough epochs (a second or more) for a signal to land mid-run.
LONG = ["train.epochs=3", "train.steps_per_epoch=300"]
# The settings of an image folder in TMP/images (`image_folder`).
FOLDER = ["data.source=folder", "data.path=TMP/images"]

# TensorFlow's C++ logging, which may follow a refusal's line on stderr.
TF_LOG = re.compile(r"^(WARNING: All log messages|[IWE]\d{4} )")
REFUSAL = re.compile(r"^(python -m keras_course_recipes( [\w-]+)?: )?error: ")


# ---------------------------------------------------------------- cases

@dataclasses.dataclass
class Case:
    """One thing a user did, and what a correct outcome is.

    Attributes:
        name: what was done, in words.
        args: what follows `python -m keras_course_recipes`; RUN stands for the run
            directory (TMP/run), TMP for the case's temporary directory.
        expect: REFUSED, TRAINS or STOPS.
        setup: prepares or damages files in TMP before the command; may
            return a process to kill once the command is done (a first
            training that holds the run directory).
        interrupt: for STOPS, (signal, file): the signal is sent once that
            file exists below the run directory (config.yaml: training has
            started; backup/training_metadata.json: an epoch is saved), or
            (signal, seconds) after the process starts.
        close_stdout: the reader of stdout goes after its first line, as
            with `| head -1`.
        in_temp_dir: runs with TMP as its working directory (and the
            repository on PYTHONPATH): for a run without run.dir, which
            would otherwise look in, or write, the repository's runs/.
        copied: a recipe module copied with its files into TMP/copy
            (`python -m keras_course_recipes copy`), run there as `python NAME.py ARGS`
            by a Python that sees the pinned stack but not the installed kit
            (`bare_python`); its runs write no metrics.json (the
            repository's), and print the test metrics.
        stdout_closed: standard output closed before it starts (`>&-`).
        concurrent: two processes of the command started at once; each must
            do what the case expects, in a run directory of its own.
        run_dir: where the run writes, below TMP.
        kernel: for a notebook case, how its kernel is launched: "jupyter"
            or "vscode"; `args` are then CONFIG's settings, as key=value.
    """

    name: str
    args: list
    expect: str
    setup: Callable | None = None
    interrupt: tuple | None = None
    close_stdout: bool = False
    in_temp_dir: bool = False
    copied: str | None = None
    stdout_closed: bool = False
    concurrent: bool = False
    run_dir: str = "run"
    kernel: str | None = None


def run(*items, recipe="mnist_mlp"):
    """`run RECIPE` on tiny settings in RUN, then `items`, which win."""
    return ["run", recipe, *TINY, *TINY_MODEL.get(recipe, []), "run.dir=RUN", *items]


# A copied recipe's command line has no execution.onednn nor run.resume: the
# repository's keys (its own CONFIG's it has).
COPY_TINY = [item for item in TINY if not item.startswith("execution.onednn")]


def copy(*items, recipe="mnist_mlp", run_dir="RUN"):
    """A copied `recipe`'s arguments on tiny settings in `run_dir`, then `items`."""
    return [*COPY_TINY, *TINY_MODEL.get(recipe, []),
            *([f"run.dir={run_dir}"] if run_dir else []), *items]


class SetupFailed(Exception):
    """A case's setup could not prepare its files: the case says nothing."""


def finished_run(*overrides, recipe="mnist_mlp"):
    """A setup: a finished run of 2 epochs in RUN, trained by the command line."""
    def setup(tmp):
        result = execute([sys.executable, "-m", "keras_course_recipes",
                          *expand(run("train.epochs=2", *overrides, recipe=recipe), tmp)], ROOT)
        if result.returncode != 0:
            raise SetupFailed(f"its first training exited {result.returncode}: "
                              f"{last_line(result.stderr)}")
    return setup


def copied_run(recipe):
    """A setup: a run of 2 epochs in RUN, trained by the copied recipe in TMP/copy."""
    def setup(tmp):
        result = execute([bare_python(), f"{recipe}.py",
                          *expand(copy("train.epochs=2", recipe=recipe), tmp)], tmp / "copy",
                         copied=True)
        if result.returncode != 0:
            raise SetupFailed(f"the copy's first training exited {result.returncode}: "
                              f"{last_line(result.stderr)}")
    return setup


def stopped_run(*overrides, recipe="mnist_mlp"):
    """A setup: a run stopped after its second epoch was saved, before
    metrics.json (what a kill at that moment leaves), to resume with
    train.epochs=3."""
    return after(finished_run(*overrides, recipe=recipe), delete("run/metrics.json"))


def image_folder(train=("cat", "dog"), test=("cat", "dog"), size=(28, 28), mode="L"):
    """A setup: TMP/images/train/<class>/*.png, 12 random images a class, and
    test/<class>/ with 4 (none when `test` is None)."""
    def setup(tmp):
        rng = np.random.default_rng(0)
        for split, classes, count in (("train", train, 12), ("test", test or (), 4)):
            for name in classes:
                folder = tmp / "images" / split / name
                folder.mkdir(parents=True)
                for number in range(count):
                    shape = (*size[::-1], 3) if mode == "RGB" else size[::-1]
                    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
                    Image.fromarray(pixels, mode).save(folder / f"{number}.png")
    return setup


def after(prepare, *damages):
    """A setup: `prepare`, then each damage in order."""
    def setup(tmp):
        prepare(tmp)
        for damage in damages:
            damage(tmp)
    return setup


# Damages: each a function of TMP that changes one path below it.

def delete(path):
    def damage(tmp):
        target = tmp / path
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    return damage


def truncate(path, keep=0.5):
    """Keeps the first `keep` of the file's bytes: a write that did not finish."""
    def damage(tmp):
        data = (tmp / path).read_bytes()
        (tmp / path).write_bytes(data[:int(len(data) * keep)])
    return damage


def garble(path):
    """The same number of bytes, random: a disk or a copy gone wrong."""
    def damage(tmp):
        size = (tmp / path).stat().st_size
        (tmp / path).write_bytes(np.random.default_rng(0).bytes(size))
    return damage


def write(path, content):
    def damage(tmp):
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (tmp / path).write_bytes(content)
        else:
            (tmp / path).write_text(content)
    return damage


def edit(path, change):
    """`change`, a function of the file's text, applied to it."""
    def damage(tmp):
        (tmp / path).write_text(change((tmp / path).read_text()))
    return damage


def mkdir(path):
    return lambda tmp: (tmp / path).mkdir(parents=True)


def folder_module(tmp):
    """keras_course_recipes/folder.py copied beside a copied recipe, as its header says for a folder."""
    shutil.copyfile(ROOT / "keras_course_recipes" / "folder.py",
                    tmp / "copy" / "keras_course_recipes" / "folder.py")


def rename(path, name):
    """Renames the file to `name`, bytes: a name that need not be UTF-8."""
    return lambda tmp: os.rename(tmp / path, os.fsencode((tmp / path).parent) + b"/" + name)


def symlink(path, target):
    return lambda tmp: (tmp / path).symlink_to(target)


def move(path, to):
    def damage(tmp):
        (tmp / to).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).rename(tmp / to)
    return damage


def epoch_time(text, value):
    """history.csv with the first row's time_epoch_s set to `value`."""
    rows = list(csv.DictReader(text.splitlines(keepends=True)))
    rows[0]["time_epoch_s"] = value
    lines = [",".join(rows[0])] + [",".join(row.values()) for row in rows]
    return "\n".join(lines) + "\n"


def metadata_epoch(value):
    """backup/training_metadata.json saying `value` finished epochs."""
    return write("run/backup/training_metadata.json", json.dumps({"epoch": value, "batch": 0}))


def sixteen_bit_png(path):
    def damage(tmp):
        Image.fromarray(np.full((28, 28), 40000, np.uint16)).save(tmp / path)
    return damage


def history_with_extra_column(text):
    """A column of numbers added to every row, as another tool might."""
    lines = text.splitlines()
    return "\n".join([lines[0] + ",extra"] + [line + ",0.5" for line in lines[1:]]) + "\n"


def torn_row(text):
    """The last row cut in the middle."""
    return text[:len(text) - len(text.splitlines()[-1]) // 2 - 1]


def duplicated_last_row(text):
    return text + text.splitlines(keepends=True)[-1]


def a_first_training(tmp):
    """A setup: a long training holding RUN (its lock taken), returned to be
    killed once the case's command is done."""
    command = [sys.executable, "-m", "keras_course_recipes",
               *expand(run("train.steps_per_epoch=100000"), tmp)]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    lock, deadline = tmp / "run" / ".lock", time.monotonic() + TIMEOUT_S
    # The lock file names its holder once it holds it.
    while not (lock.exists() and lock.read_text().startswith("process")):
        if first.poll() is not None or time.monotonic() > deadline:
            first.kill()
            raise SetupFailed(f"the first training exited {first.poll()} before taking the lock")
        time.sleep(0.1)
    return first


def failing_allocation(epoch):
    """A setup: the copied mnist_mlp's fit given a callback that raises TensorFlow's
    ResourceExhaustedError as epoch `epoch` begins: a batch too large for memory,
    without allocating one."""
    def change(text):
        raiser = ("def _allocation_fails(epoch, logs):  # the battery's stand-in for an OOM\n"
                  "    import tensorflow as tf\n\n"
                  f"    if epoch == {epoch}:\n"
                  "        raise tf.errors.ResourceExhaustedError(\n"
                  "            None, None, 'OOM when allocating tensor with shape[16,512]')\n\n\n")
        changed = text.replace("def run(", raiser + "def run(", 1).replace(
            "*run.callbacks,", "*run.callbacks, keras.callbacks.LambdaCallback("
            "on_epoch_begin=_allocation_fails),", 1)
        if "_allocation_fails)" not in changed:
            raise SetupFailed("mnist_mlp.py's run has no `*run.callbacks,` to add one after")
        return changed
    return edit("copy/mnist_mlp.py", change)

RESUME = "train.epochs=3"  # a stopped_run's 2 epochs, and one more
CASES = [
    # -- values at and past the edge of each range (LIMITS, CHOICES, a recipe's CONFIG_SCHEMA)
    Case("train.epochs=0", run("train.epochs=0"), REFUSED),
    Case("train.epochs negative", run("train.epochs=-3"), REFUSED),
    Case("train.epochs a fraction", run("train.epochs=2.5"), REFUSED),
    Case("train.epochs true", run("train.epochs=true"), REFUSED),
    Case("train.epochs null", run("train.epochs=null"), REFUSED),
    Case("train.epochs a word", run("train.epochs=two"), REFUSED),
    Case("train.lr=0", run("train.lr=0"), REFUSED),
    Case("train.lr=inf", run("train.lr=inf"), REFUSED),
    Case("train.lr=.nan (YAML's NaN)", run("train.lr=.nan"), REFUSED),
    Case("train.lr=1e400 (overflows to inf)", run("train.lr=1e400"), REFUSED),
    Case("train.steps_per_epoch=0", run("train.steps_per_epoch=0"), REFUSED),
    Case("train.steps_per_epoch=null: one pass", run("train.steps_per_epoch=null"), TRAINS),
    Case("data.batch_size=0", run("data.batch_size=0"), REFUSED),
    Case("data.batch_size a float", run("data.batch_size=16.0"), REFUSED),
    Case("data.batch_size above the examples", run("data.batch_size=65"), REFUSED),
    Case("data.batch_size equal to the examples", run("data.batch_size=64"), TRAINS),
    Case("data.synthetic_examples=0", run("data.synthetic_examples=0"), REFUSED),
    Case("data.shuffle_buffer=0", run("data.shuffle_buffer=0"), REFUSED),
    Case("data.shuffle_buffer=1", run("data.shuffle_buffer=1"), TRAINS),
    Case("data.validation_split=1", run("data.validation_split=1"), REFUSED),
    Case("data.validation_split negative", run("data.validation_split=-0.1"), REFUSED),
    Case("data.validation_split too small to hold out an image",
         run("data.validation_split=0.001"), REFUSED),
    Case("data.validation_split=0: validate on test", run("data.validation_split=0"), TRAINS),
    Case("execution.seed=-1", run("execution.seed=-1"), REFUSED),
    Case("execution.seed=2**32", run("execution.seed=4294967296"), REFUSED),
    Case("execution.seed=2**32-1, the largest", run("execution.seed=4294967295"), TRAINS),
    Case("execution.steps_per_execution=0", run("execution.steps_per_execution=0"), REFUSED),
    Case("execution.steps_per_execution above train.steps_per_epoch",
         run("execution.steps_per_execution=3"), TRAINS),
    Case("execution.timeout_s=0", run("execution.timeout_s=0"), REFUSED),
    Case("model.dropout=1", run("model.dropout=1"), REFUSED),
    Case("model.dropout=0", run("model.dropout=0"), TRAINS),
    Case("model.dropout null", run("model.dropout=null"), REFUSED),
    Case("model.hidden_units=[0]", run("model.hidden_units=[0]"), REFUSED),
    Case("model.hidden_units a number, not a list", run("model.hidden_units=512"), REFUSED),
    Case("model.hidden_units with a fraction", run("model.hidden_units=[8.5]"), REFUSED),
    Case("model.hidden_units=[]: softmax regression", run("model.hidden_units=[]"), TRAINS),
    Case("data.source not a choice", run("data.source=s3"), REFUSED),
    Case("data.name unknown", run("data.name=imagenet"), REFUSED),
    Case("execution.backend not a choice", run("execution.backend=numpy"), REFUSED),
    Case("execution.precision not a choice", run("execution.precision=float16"), REFUSED),
    Case("execution.mode not a choice", run("execution.mode=jit"), REFUSED),
    Case("execution.strategy=multi_worker without TF_CONFIG",
         run("execution.strategy=multi_worker"), REFUSED),
    Case("execution.devices=gpu:1 under mirrored",
         run("execution.strategy=mirrored", "execution.devices=gpu:1"), REFUSED),
    Case("execution.onednn not true/false", run("execution.onednn=maybe"), REFUSED),
    Case("run.verbose=3", run("run.verbose=3"), REFUSED),
    Case("run.dir empty", run("run.dir=''"), REFUSED),
    Case("callbacks.monitor=val_acc", run("callbacks.monitor=val_acc"), REFUSED),
    Case("callbacks.profile backwards", run("callbacks.profile=5,2"), REFUSED),
    Case("callbacks.profile=0", run("callbacks.profile=0"), REFUSED),
    Case("train.optimizer not a choice", run("train.optimizer=adam"), REFUSED),
    # -- unknown keys and malformed items
    Case("unknown key, close to a real one", run("train.epoch=2"), REFUSED),
    Case("unknown section", run("trainer.epochs=2"), REFUSED),
    Case("a whole section as a value", run("train=5"), REFUSED),
    Case("an item without =", run("train.epochs"), REFUSED),
    Case("an item without a key", run("=3"), REFUSED),
    Case("a value that is not YAML", run("train.epochs=[1"), REFUSED),
    # -- odd YAML in data.augment (cifar10_cnn augments)
    Case("augment mapping without a space: {pad_crop:{padding:4}}",
         run("data.augment=[{pad_crop:{padding:4}}]", recipe="cifar10_cnn"), REFUSED),
    Case("augment as nested lists", run("data.augment=[[flip]]", recipe="cifar10_cnn"), REFUSED),
    Case("augment null", run("data.augment=null", recipe="cifar10_cnn"), REFUSED),
    Case("augment an unknown operation", run("data.augment=[warp]", recipe="cifar10_cnn"),
         REFUSED),
    Case("augment pad_crop padding 0", run("data.augment=[{pad_crop: {padding: 0}}]",
                                           recipe="cifar10_cnn"), REFUSED),
    Case("cifar10_cnn model.filters=[0]", run("model.filters=[0]", recipe="cifar10_cnn"),
         REFUSED),
    Case("cifar10_cnn model.dense_units=0", run("model.dense_units=0", recipe="cifar10_cnn"),
         REFUSED),
    Case("cifar10_cnn, tiny settings", run(recipe="cifar10_cnn"), TRAINS),
    # -- the DenseNets' own settings
    Case("densenet_cifar10_cpu, tiny model", run(recipe="densenet_cifar10_cpu"), TRAINS),
    Case("densenet_cifar10_cpu model.widths=[]",
         run("model.widths=[]", recipe="densenet_cifar10_cpu"), REFUSED),
    Case("densenet_cifar10_cpu widths and growth_rates of other lengths",
         run("model.widths=[8,8]", recipe="densenet_cifar10_cpu"), REFUSED),
    Case("densenet_cifar10_cpu model.whitening_images=0",
         run("model.whitening_images=0", recipe="densenet_cifar10_cpu"), REFUSED),
    Case("densenet_cifar10_cpu model.test_time_views=3",
         run("model.test_time_views=3", recipe="densenet_cifar10_cpu"), REFUSED),
    Case("densenet_cifar100, tiny model", run(recipe="densenet_cifar100"), TRAINS),
    Case("densenet_cifar100 a depth no DenseNet has",
         run("model.depth=11", recipe="densenet_cifar100"), REFUSED),
    Case("densenet_cifar100 model.compression=0",
         run("model.compression=0", recipe="densenet_cifar100"), REFUSED),
    Case("densenet_cifar100 model.variant unknown",
         run("model.variant=densenet_huge", recipe="densenet_cifar100"), REFUSED),
    Case("densenet_cifar100 warm-up under the step schedule",
         run("train.warmup_epochs=1", recipe="densenet_cifar100"), REFUSED),
    Case("densenet_cifar100 warm-up as long as the run",
         run("train.schedule=cosine", "train.warmup_epochs=1", recipe="densenet_cifar100"),
         REFUSED),
    # -- --config files
    Case("--config missing", [*run(), "--config", "TMP/nowhere.yaml"], REFUSED),
    Case("--config empty", [*run(), "--config", "TMP/c.yaml"], TRAINS, write("c.yaml", "")),
    Case("--config a directory", [*run(), "--config", "TMP"], REFUSED),
    Case("--config a list, not a mapping", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "- train.epochs=2\n")),
    Case("--config another recipe's", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "recipe: cifar10_cnn\ntrain:\n  epochs: 1\n")),
    Case("--config with an unknown key", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "train:\n  epoch: 2\n")),
    Case("--config not valid YAML", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "train:\n  epochs: [1\n")),
    Case("--config not UTF-8", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "# caf\xe9\ntrain:\n  epochs: 1\n".encode("latin-1"))),
    Case("--config a section as a number", [*run(), "--config", "TMP/c.yaml"], REFUSED,
         write("c.yaml", "train: 5\n")),
    # A section whose keys are all commented out is null in YAML: nothing to set.
    Case("--config a section with every key commented out", [*run(), "--config", "TMP/c.yaml"],
         TRAINS, write("c.yaml", "train:\n  # epochs: 2\n")),
    # -- data.path problems (an image folder of MNIST's shapes)
    Case("folder: a good one, with test/", run(*FOLDER), TRAINS, image_folder()),
    Case("folder: colour images of another size", run(*FOLDER), TRAINS,
         image_folder(size=(40, 30), mode="RGB")),
    Case("folder: data.path not given", run("data.source=folder"), REFUSED),
    Case("folder: data.path missing", run("data.source=folder", "data.path=TMP/nowhere"),
         REFUSED),
    Case("folder: data.path a file", run(*FOLDER), REFUSED, write("images", "not a folder")),
    Case("folder: data.path is its train/ folder",
         run("data.source=folder", "data.path=TMP/images/train"), REFUSED, image_folder()),
    Case("folder: an empty class folder", run(*FOLDER), REFUSED,
         after(image_folder(), mkdir("images/train/bird"))),
    Case("folder: one class", run(*FOLDER), REFUSED, image_folder(train=("cat",), test=None)),
    Case("folder: a text file named .jpg", run(*FOLDER), REFUSED,
         after(image_folder(), write("images/train/dog/notes.jpg", "not an image"))),
    Case("folder: a PNG cut in half", run(*FOLDER), REFUSED,
         after(image_folder(), truncate("images/train/dog/0.png"))),
    Case("folder: a 16-bit PNG", run(*FOLDER), REFUSED,
         after(image_folder(), sixteen_bit_png("images/train/dog/deep.png"))),
    Case("folder: test/ with other classes", run(*FOLDER), REFUSED,
         image_folder(test=("cat", "cow"))),
    Case("folder: validation_split=0 without test/", run(*FOLDER, "data.validation_split=0"),
         REFUSED, image_folder(test=None)),
    # -- a stopped run's files damaged before it resumes (2 epochs saved, train.epochs=3)
    Case("resume: latest weights deleted", run(RESUME), TRAINS,
         after(stopped_run(), delete("run/backup/latest.weights.h5"))),
    Case("resume: latest weights truncated", run(RESUME), TRAINS,
         after(stopped_run(), truncate("run/backup/latest.weights.h5"))),
    Case("resume: latest weights garbled", run(RESUME), TRAINS,
         after(stopped_run(), garble("run/backup/latest.weights.h5"))),
    Case("resume: metadata deleted", run(RESUME), TRAINS,
         after(stopped_run(), delete("run/backup/training_metadata.json"))),
    Case("resume: metadata truncated", run(RESUME), TRAINS,
         after(stopped_run(), truncate("run/backup/training_metadata.json"))),
    Case("resume: metadata garbled", run(RESUME), TRAINS,
         after(stopped_run(), garble("run/backup/training_metadata.json"))),
    Case("resume: the .bkp copies deleted", run(RESUME), TRAINS,
         after(stopped_run(), delete("run/backup/latest.weights.h5.bkp"),
               delete("run/backup/training_metadata.json.bkp"))),
    Case("resume: latest weights and their .bkp garbled", run(RESUME), REFUSED,
         after(stopped_run(), garble("run/backup/latest.weights.h5"),
               garble("run/backup/latest.weights.h5.bkp"))),
    Case("resume: backup/ deleted", run(RESUME), REFUSED,
         after(stopped_run(), delete("run/backup"))),
    Case("resume: metadata epoch negative", run(RESUME), TRAINS,
         after(stopped_run(), metadata_epoch(-1))),
    Case("resume: metadata epoch a string", run(RESUME), TRAINS,
         after(stopped_run(), metadata_epoch("2"))),
    Case("resume: metadata epoch past train.epochs", run(RESUME), REFUSED,
         after(stopped_run(), metadata_epoch(99))),
    Case("resume: history.csv deleted", run(RESUME), REFUSED,
         after(stopped_run(), delete("run/history.csv"))),
    Case("resume: history.csv emptied", run(RESUME), REFUSED,
         after(stopped_run(), write("run/history.csv", ""))),
    Case("resume: history.csv truncated to its first row", run(RESUME), REFUSED,
         after(stopped_run(), edit("run/history.csv", lambda t: "".join(t.splitlines(True)[:2])))),
    Case("resume: history.csv's last row torn", run(RESUME), REFUSED,
         after(stopped_run(), edit("run/history.csv", torn_row))),
    # What a kill while CSVLogger wrote the next epoch's row leaves.
    Case("resume: history.csv with a torn row after the saved epochs", run(RESUME), TRAINS,
         after(stopped_run(), edit("run/history.csv", lambda t: t + "2,0.1"))),
    Case("resume: history.csv without its last newline", run(RESUME), TRAINS,
         after(stopped_run(), edit("run/history.csv", str.rstrip))),
    # CSVLogger appends in its own column order: rows under another header would lie.
    Case("resume: history.csv's last row duplicated", run(RESUME), REFUSED,
         after(stopped_run(), edit("run/history.csv", duplicated_last_row))),
    Case("resume: history.csv with an extra column", run(RESUME), REFUSED,
         after(stopped_run(), edit("run/history.csv", history_with_extra_column))),
    Case("resume: config.yaml emptied", run(RESUME), REFUSED,
         after(stopped_run(), write("run/config.yaml", ""))),
    Case("resume: config.yaml edited (train.lr)", run(RESUME), REFUSED,
         after(stopped_run(), edit("run/config.yaml",
                                   lambda t: t.replace("lr: 0.001", "lr: 0.1")))),
    # Without config.yaml nothing says what the saved epochs trained with:
    # metrics.json would describe a run that never was.
    Case("resume: config.yaml deleted, same settings", run(RESUME), REFUSED,
         after(stopped_run(), delete("run/config.yaml"))),
    Case("resume: config.yaml deleted, then data.batch_size=32", run(RESUME, "data.batch_size=32"),
         REFUSED, after(stopped_run(), delete("run/config.yaml"))),
    Case("resume: best.keras truncated", run(RESUME), TRAINS,
         after(stopped_run(), truncate("run/checkpoints/best.keras"))),
    Case("resume: .lock left by a dead process", run(RESUME), TRAINS,
         after(stopped_run(), write("run/.lock", "process 999999 (python -m keras_course_recipes run)\n"))),
    Case("finished run: metrics.json truncated, same command", run("train.epochs=2"), TRAINS,
         after(finished_run(), truncate("run/metrics.json"))),
    # -- resumes with changed settings
    Case("resume with data.batch_size=32", run(RESUME, "data.batch_size=32"), REFUSED,
         stopped_run()),
    Case("resume with a bigger model", run(RESUME, "model.hidden_units=[16]"), REFUSED,
         stopped_run("model.hidden_units=[8]")),
    Case("resume with execution.precision=mixed_bfloat16",
         run(RESUME, "execution.precision=mixed_bfloat16"), REFUSED, stopped_run()),
    Case("resume with execution.backend=jax", run(RESUME, "execution.backend=jax"), REFUSED,
         stopped_run()),
    Case("resume with train.lr=0.01", run(RESUME, "train.lr=0.01"), REFUSED, stopped_run()),
    Case("resume with execution.mode=eager (allowed)", run(RESUME, "execution.mode=eager"),
         TRAINS, stopped_run()),
    Case("densenet_cifar100 resume with more epochs (step schedule)",
         run(RESUME, recipe="densenet_cifar100"), REFUSED,
         stopped_run(recipe="densenet_cifar100")),
    Case("densenet_cifar10_cpu finished run extended (triangle schedule)",
         run(RESUME, recipe="densenet_cifar10_cpu"), REFUSED,
         finished_run(recipe="densenet_cifar10_cpu")),
    # -- finished runs run again
    Case("finished run extended from 2 to 3 epochs", run(RESUME), TRAINS, finished_run()),
    Case("finished run, same train.epochs again", run("train.epochs=2"), REFUSED,
         finished_run()),
    Case("finished run, train.epochs shrunk to 1", run("train.epochs=1"), REFUSED,
         finished_run()),
    Case("stopped run, train.epochs shrunk to 1", run("train.epochs=1"), REFUSED, stopped_run()),
    Case("finished run without backup/, extended", run(RESUME), REFUSED,
         after(finished_run(), delete("run/backup"))),
    # -- processes and signals
    Case("a second process on a run directory in use", run(), REFUSED, a_first_training),
    Case("Ctrl-C after an epoch, then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGINT, "backup/training_metadata.json")),
    Case("Ctrl-C before the first epoch ends, then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGINT, "config.yaml")),
    Case("kill -9 after an epoch, then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGKILL, "backup/training_metadata.json")),
    Case("kill -9 before the first epoch ends, then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGKILL, "config.yaml")),
    Case("stdout closed after its first line (| head -1)",
         run("train.epochs=3", "run.verbose=2"), TRAINS, close_stdout=True),
    Case("run.dir an existing file", run("run.dir=TMP/file"), REFUSED, write("file", "x")),
    Case("run.dir below a file", run("run.dir=TMP/file/run"), REFUSED, write("file", "x")),
    Case("run.resume=true with nothing to resume", ["run", "mnist_mlp", *TINY, "run.resume=true"],
         REFUSED, in_temp_dir=True),
    # -- the tools' own options
    Case("compare steps=0", ["compare", "mnist_mlp", "steps=0"], REFUSED),
    Case("compare an unknown mode", ["compare", "mnist_mlp", "modes=warp"], REFUSED),
    Case("compare repeats=0", ["compare", "mnist_mlp", "repeats=0"], REFUSED),
    Case("a compare option given to run", run("steps=5"), REFUSED),
    Case("sweep --grid without a list", ["sweep", "mnist_mlp", "--grid", "train.lr=0.1",
                                         "--dir", "TMP/sweep", *TINY], REFUSED),
    Case("sweep --grid an empty list", ["sweep", "mnist_mlp", "--grid", "train.lr=[]",
                                        "--dir", "TMP/sweep", *TINY], REFUSED),
    Case("sweep --grid an unknown key", ["sweep", "mnist_mlp", "--grid", "train.nope=[1,2]",
                                         "--dir", "TMP/sweep", *TINY], REFUSED),
    Case("sweep --grid with a value out of range",
         ["sweep", "mnist_mlp", "--grid", "train.lr=[0.1,-1]", "--dir", "TMP/sweep", *TINY],
         REFUSED),
    Case("sweep one key in two --grid", ["sweep", "mnist_mlp", "--grid", "train.lr=[0.1]",
                                         "--grid", "train.lr=[0.2]", "--dir", "TMP/sweep",
                                         *TINY], REFUSED),
    Case("sweep without --grid", ["sweep", "mnist_mlp", *TINY], REFUSED),
    Case("curves on a folder without history.csv", ["curves", "TMP"], REFUSED),
    Case("curves on a folder that does not exist", ["curves", "TMP/nowhere"], REFUSED),
    Case("curves on a history.csv without val_accuracy", ["curves", "TMP/h"], REFUSED,
         write("h/history.csv", "epoch,loss\n0,1.0\n")),
    Case("curves --thresholds above 1", ["curves", "TMP", "--thresholds", "1.5"], REFUSED),
    # -- the command line itself
    Case("an unknown recipe", ["run", "mnist_mpl", *TINY], REFUSED),
    Case("run without a recipe", ["run"], REFUSED),
    Case("an unknown command", ["train", "mnist_mlp"], REFUSED),
    Case("show with a value out of range", ["show", "mnist_mlp", "train.epochs=0"], REFUSED),
    # -- the second round: odd files the tools and folders read
    Case("stdout closed from the start (>&-)", run("train.epochs=2"), TRAINS,
         stdout_closed=True),
    Case("SIGTERM after an epoch, then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGTERM, "backup/training_metadata.json")),
    Case("folder: an image whose name is not UTF-8", run(*FOLDER), TRAINS,
         after(image_folder(), rename("images/train/dog/0.png", b"caf\xe9.png"))),
    Case("folder: a symlink loop named .png", run(*FOLDER), REFUSED,
         after(image_folder(), symlink("images/train/dog/loop.png", "loop.png"))),
    Case("folder: a folder named x.png", run(*FOLDER), REFUSED,
         after(image_folder(), mkdir("images/train/dog/x.png"))),
    Case("curves on a history.csv of random bytes", ["curves", "TMP/run"], REFUSED,
         after(finished_run(), garble("run/history.csv"))),
    Case("curves on a time_epoch_s of NA", ["curves", "TMP/run"], REFUSED,
         after(finished_run(), edit("run/history.csv", lambda t: epoch_time(t, "NA")))),
    Case("curves on an empty time_epoch_s", ["curves", "TMP/run"], REFUSED,
         after(finished_run(), edit("run/history.csv", lambda t: epoch_time(t, "")))),
    Case("curves on a config.yaml of random bytes", ["curves", "TMP/run"], REFUSED,
         after(finished_run(), garble("run/config.yaml"))),
    Case("curves --out below a file", ["curves", "TMP/run", "--out", "TMP/file/plot.png"],
         REFUSED, after(finished_run(), write("file", "x"))),
    Case("finished run extended, its history.csv random bytes", run(RESUME), REFUSED,
         after(finished_run(), garble("run/history.csv"))),
    Case("run.resume=true: the newest unfinished run of these settings",
         ["run", "mnist_mlp", *TINY, RESUME, "run.resume=true"], TRAINS,
         after(stopped_run(), move("run", "runs/mnist_mlp/20260101-000000"),
               stopped_run("data.batch_size=8"), move("run", "runs/mnist_mlp/20260102-000000")),
         in_temp_dir=True, run_dir="runs/mnist_mlp/20260101-000000"),
    Case("run.resume=true: no unfinished run of these settings",
         ["run", "mnist_mlp", *TINY, RESUME, "run.resume=true"], REFUSED,
         after(stopped_run("data.batch_size=8"), move("run", "runs/mnist_mlp/20260102-000000")),
         in_temp_dir=True),
    # -- a recipe copied out of the repository, run as `python NAME.py`
    Case("copied: tiny settings", copy(), TRAINS, copied="mnist_mlp"),
    Case("copied: train.epochs=-1", copy("train.epochs=-1"), REFUSED, copied="mnist_mlp"),
    Case("copied cifar10_cnn: train.epochs=-1", copy("train.epochs=-1", recipe="cifar10_cnn"),
         REFUSED, copied="cifar10_cnn"),
    Case("copied: execution.mode=bogus", copy("execution.mode=bogus"), REFUSED,
         copied="mnist_mlp"),
    Case("copied cifar10_cnn: execution.mode=bogus",
         copy("execution.mode=bogus", recipe="cifar10_cnn"), REFUSED, copied="cifar10_cnn"),
    Case("copied densenet_cifar10_cpu: execution.mode=bogus",
         copy("execution.mode=bogus", recipe="densenet_cifar10_cpu"), REFUSED,
         copied="densenet_cifar10_cpu"),
    Case("copied densenet_cifar10_cpu: train.optimizer=adam",
         copy("train.optimizer=adam", recipe="densenet_cifar10_cpu"), REFUSED,
         copied="densenet_cifar10_cpu"),
    Case("copied: two started at once, no run.dir", copy(run_dir=None), TRAINS,
         copied="mnist_mlp", concurrent=True),
    Case("copied: train.optimizer=adam", copy("train.optimizer=adam"), REFUSED,
         copied="mnist_mlp"),
    Case("copied: train.epochs=abc", copy("train.epochs=abc"), REFUSED, copied="mnist_mlp"),
    Case("copied: data.batch_size=0", copy("data.batch_size=0"), REFUSED, copied="mnist_mlp"),
    Case("copied: model.dropout=1.5", copy("model.dropout=1.5"), REFUSED, copied="mnist_mlp"),
    Case("copied cifar10_cnn: model.conv_dropout=1.5",
         copy("model.conv_dropout=1.5", recipe="cifar10_cnn"), REFUSED, copied="cifar10_cnn"),
    Case("copied: execution.precision=bogus", copy("execution.precision=bogus"), REFUSED,
         copied="mnist_mlp"),
    Case("copied: execution.seed=-1", copy("execution.seed=-1"), REFUSED, copied="mnist_mlp"),
    Case("copied: data.validation_split=1.0", copy("data.validation_split=1.0"), REFUSED,
         copied="mnist_mlp"),
    Case("copied cifar10_cnn: data.augment=[bogus]",
         copy("data.augment=[bogus]", recipe="cifar10_cnn"), REFUSED, copied="cifar10_cnn"),
    Case("copied: data.path missing", copy("data.source=folder", "data.path=TMP/nowhere"),
         REFUSED, copied="mnist_mlp"),
    Case("copied without keras_course_recipes/folder.py: data.source=folder", copy(*FOLDER), REFUSED,
         image_folder(), copied="mnist_mlp"),
    Case("copied with keras_course_recipes/folder.py: a folder of PNGs cut in half", copy(*FOLDER), REFUSED,
         after(image_folder(), truncate("images/train/dog/0.png"),
               truncate("images/train/cat/1.png"), folder_module), copied="mnist_mlp"),
    Case("copied with keras_course_recipes/folder.py: a good folder", copy(*FOLDER), TRAINS,
         after(image_folder(), folder_module), copied="mnist_mlp"),
    Case("copied: the default tfds source, no network",
         [item for item in copy() if not item.startswith("data.source")], REFUSED,
         copied="mnist_mlp"),
    Case("copied: stdout closed after its first line (| head -1)",
         copy("train.epochs=3", "run.verbose=2"), TRAINS, copied="mnist_mlp",
         close_stdout=True),
    Case("copied: Ctrl-C after an epoch, then the same command", copy(*LONG), STOPS,
         copied="mnist_mlp", interrupt=(signal.SIGINT, "backup/training_metadata.json")),
    Case("copied: SIGTERM after an epoch, then the same command", copy(*LONG), STOPS,
         copied="mnist_mlp", interrupt=(signal.SIGTERM, "backup/training_metadata.json")),
    Case("copied: kill -9 after an epoch, then the same command", copy(*LONG), STOPS,
         copied="mnist_mlp", interrupt=(signal.SIGKILL, "backup/training_metadata.json")),
    Case("copied densenet_cifar10_cpu: model.test_time_views=5",
         copy("model.test_time_views=5", recipe="densenet_cifar10_cpu"), REFUSED,
         copied="densenet_cifar10_cpu"),
    Case("copied: run.dir of a run with other settings", copy("data.batch_size=8"), REFUSED,
         copied="mnist_mlp", setup=copied_run("mnist_mlp")),
    Case("copied: run.dir of a finished run, extended", copy(RESUME), TRAINS,
         copied="mnist_mlp", setup=copied_run("mnist_mlp")),
    # -- the third round: a Ctrl-C at any moment, notebooks, the tools' paths
    *[Case(f"Ctrl-C {seconds} s after start (start-up), then the same command", run(*LONG),
           STOPS, interrupt=(signal.SIGINT, seconds)) for seconds in (0.5, 1.5, 2.5, 3.5)],
    Case("SIGTERM 2 s after start (start-up), then the same command", run(*LONG), STOPS,
         interrupt=(signal.SIGTERM, 2.0)),
    *[Case(f"copied: Ctrl-C {seconds} s after start (import keras), then the same command",
           copy(*LONG), STOPS, copied="mnist_mlp", interrupt=(signal.SIGINT, seconds))
      for seconds in (1.0, 2.0, 3.0)],
    Case("copied: SIGTERM 2 s after start (import keras), then the same command", copy(*LONG),
         STOPS, copied="mnist_mlp", interrupt=(signal.SIGTERM, 2.0)),
    Case("copied cifar10_cnn without keras_course_recipes/augment.py, data.augment=[]",
         copy("data.augment=[]", recipe="cifar10_cnn"), REFUSED, delete("copy/keras_course_recipes/augment.py"),
         copied="cifar10_cnn"),
    Case("notebook cell, a Jupyter kernel", copy(), TRAINS, kernel="jupyter"),
    Case("notebook cell, a kernel launched as VS Code launches it", copy(), TRAINS,
         kernel="vscode"),
    Case("notebook cell: CONFIG's train.epoch (meant: epochs)", copy("train.epoch=1"), REFUSED,
         kernel="jupyter"),
    Case("run.resume=true with a new run.dir", run("run.resume=true", "run.dir=TMP/new"), REFUSED),
    Case("copy into a file", ["copy", "mnist_mlp", "TMP/file"], REFUSED, write("file", "x")),
    Case("copy below a file", ["copy", "mnist_mlp", "TMP/file/mine"], REFUSED, write("file", "x")),
    Case("copy onto an existing copy", ["copy", "mnist_mlp", "TMP/mine"], REFUSED,
         write("mine/mnist_mlp.py", "x")),
    Case("copy into a read-only folder", ["copy", "mnist_mlp", "/proc/mine"], REFUSED),
    Case("anchor --script missing", ["anchor", "densenet_cifar10_cpu", "--script", "TMP/no.py",
                                     "runs=1", "data.source=folder", "data.path=TMP"], REFUSED,
         in_temp_dir=True),
    Case("anchor --script a folder", ["anchor", "densenet_cifar10_cpu", "--script", "TMP",
                                      "runs=1", "data.source=folder", "data.path=TMP"], REFUSED,
         in_temp_dir=True),
    Case("anchor --script not UTF-8", ["anchor", "densenet_cifar10_cpu", "--script", "TMP/a.py",
                                       "runs=1", "data.source=folder", "data.path=TMP"], REFUSED,
         write("a.py", b"\xff\xfe airbench"), in_temp_dir=True),
    Case("execution.backend=torch: Keras on PyTorch", run("execution.backend=torch"), TRAINS),
    Case("anchor on a folder without train/: nothing left behind",
         ["anchor", "densenet_cifar10_cpu", "--script", "TMP/airbench94_muon.py", "runs=1",
          "data.source=folder", "data.path=TMP"], REFUSED, lambda tmp: airbench_stand_in(tmp),
         in_temp_dir=True),
    # -- round 4: run directories and memory
    Case("run.dir a folder of the user's own files (metrics.json, checkpoints/best.keras)",
         run(), REFUSED, after(write("run/metrics.json", "[0.91, 0.93]\n"),
                               write("run/checkpoints/best.keras", b"my model"))),
    Case("run.dir=. in a working directory holding the user's files",
         ["run", "mnist_mlp", *TINY, "run.dir=."], REFUSED, write("notes.txt", "mine\n"),
         in_temp_dir=True),
    Case("run.dir=. in an empty working directory", ["run", "mnist_mlp", *TINY, "run.dir=."],
         TRAINS, in_temp_dir=True, run_dir="."),
    Case("a run directory from before its mark (1.0.0), resumed", run(RESUME), TRAINS,
         after(stopped_run(), delete("run/.keras-course-run"))),
    Case("notebooks --dir a file", ["notebooks", "--dir", "TMP/file"], REFUSED,
         write("file", "x")),
    Case("notebooks --dir a read-only folder", ["notebooks", "--dir", "/proc"], REFUSED),
    Case("copy a YAML recipe", ["copy", "densenet_cifar10_95", "TMP/mine"], REFUSED),
    Case("copied: a batch too large for memory before the first epoch ends (simulated)",
         copy(), REFUSED, failing_allocation(0), copied="mnist_mlp"),
    Case("copied: a batch too large for memory after an epoch (simulated)",
         copy("train.epochs=2"), REFUSED, failing_allocation(1), copied="mnist_mlp"),
    # -- round 4: CONFIG values and hidden modules
    Case("notebook cell: CONFIG's model.hidden_units=None", copy("model.hidden_units=null"),
         REFUSED, kernel="jupyter"),
    Case("notebook cell: CONFIG's train.lr=None", copy("train.lr=null"), REFUSED,
         kernel="jupyter"),
    # (each line put after the copied recipe's CONFIG, before its CONFIG_SCHEMA)
    *[Case(f"copied: {line}", copy(), expect, copied="mnist_mlp", setup=edit(
        "copy/mnist_mlp.py", lambda text, line=line: text.replace(
            "\nCONFIG_SCHEMA = ", f"\n{line}\nCONFIG_SCHEMA = ", 1)))
      for line, expect in [("CONFIG = None", REFUSED),
                           ('CONFIG["train"]["lr"] = __import__("numpy").float32(1e-3)', TRAINS),
                           # train.steps_per_epoch=2, on the command line, is one CONFIG lacks
                           ('CONFIG.update({"train": {"epochs": 1}})', REFUSED)]],
    *[Case(f"copied: a {module}.py beside the recipe", copy(), REFUSED,
           write(f"copy/{module}.py", "x = 1\n"), copied="mnist_mlp")
      for module in ("keras", "yaml", "numpy")],
    Case("copied: a keras_course_recipes.py beside the recipe, the kit not copied", copy(),
         REFUSED, after(delete("copy/keras_course_recipes"),
                        write("copy/keras_course_recipes.py", "x = 1\n")), copied="mnist_mlp"),
    Case("show data.name=mnîst", ["show", "mnist_mlp", "data.name=mnîst"], REFUSED),
    # -- round 4: the results store
    # `recipes record` on a run trained on TMP/images, then damaged; the store TMP/store, a
    # copy of results/accuracy.csv where a case gives it (the damaged rows `make results`
    # reads are tests/test_record_store.py's: the battery runs the kit's command line).
    *[Case(f"record: {what}", ["record", "RUN", "--machine", "EPYC-AVX2", *store], REFUSED,
           after(image_folder(), finished_run(*FOLDER), damage))
      for what, store, damage in [
          ("metrics.json's test accuracy as text", ["--store", "TMP/store"],
           edit("run/metrics.json", lambda text: json.dumps(
               {**json.loads(text), "test": {"accuracy": "abc"}}))),
          ("metrics.json's timing without epoch_s", ["--store", "TMP/store"],
           edit("run/metrics.json", lambda text: json.dumps(
               {**json.loads(text), "timing": {"images_per_s": 100.0}}))),
          ("metrics.json's device a string", ["--store", "TMP/store"],
           edit("run/metrics.json", lambda text: json.dumps(
               {**json.loads(text), "device": "AMD EPYC"}))),
          ("metrics.json's test null", ["--store", "TMP/store"],
           edit("run/metrics.json", lambda text: json.dumps({**json.loads(text), "test": None}))),
          ("metrics.json's test accuracy NaN", ["--store", "TMP/store"],
           edit("run/metrics.json", lambda text: json.dumps(
               {**json.loads(text), "test": {"accuracy": float("nan")}}))),
          ("config.yaml deleted", ["--store", "TMP/store"], delete("run/config.yaml")),
          ("--store read-only", ["--store", "/proc/recipes-store"], lambda tmp: None),
          ("--store a file", ["--store", "TMP/file"], write("file", "x")),
          ("a run recorded already", ["--store", "TMP/store"], lambda tmp: execute(
              [sys.executable, "-m", "keras_course_recipes", "record", str(tmp / "run"),
               "--machine", "EPYC-AVX2", "--store", str(tmp / "store")], ROOT)),
          ("2 epochs into the group 'mnist_mlp 20ep oneDNN'",
           ["--group", "mnist_mlp 20ep oneDNN", "--store", "TMP/store"],
           write("store/accuracy.csv", (ROOT / "results" / "accuracy.csv").read_text())),
          ("a store's value edited to abc", ["--store", "TMP/store"],
           write("store/accuracy.csv", (ROOT / "results" / "accuracy.csv").read_text().replace(
               ",accuracy,0.9165,", ",accuracy,abc,", 1))),
          ("a store's column deleted", ["--store", "TMP/store"],
           write("store/accuracy.csv", (ROOT / "results" / "accuracy.csv").read_text().replace(
               ",wall_s,", ",", 1))),
          ("a store's row cut short", ["--store", "TMP/store"],
           write("store/accuracy.csv", "".join(
               line[:150] + "\n" if number == 3 else line for number, line in enumerate(
                   (ROOT / "results" / "accuracy.csv").read_text().splitlines(True))))),
          ("a store with a garbage line appended", ["--store", "TMP/store"],
           write("store/accuracy.csv", (ROOT / "results" / "accuracy.csv").read_text()
                 + "garbage\n")),
      ]],
    Case("record: a run on random images (data.source=synthetic)",
         ["record", "RUN", "--group", "mnist_mlp 20ep oneDNN", "--machine", "EPYC-oneDNN",
          "--store", "TMP/store"], REFUSED,
         after(finished_run(), write("store/accuracy.csv",
                                     (ROOT / "results" / "accuracy.csv").read_text()))),
]


def airbench_stand_in(tmp):
    """TMP/airbench94_muon.py: tests/test_anchor.py's stand-in for the published script."""
    source = (ROOT / "tests" / "test_anchor.py").read_text()
    node = next(node for node in ast.parse(source).body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", None) == "STAND_IN")
    (tmp / "airbench94_muon.py").write_text(ast.literal_eval(node.value))


# ---------------------------------------------------------------- running

@dataclasses.dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


@functools.cache
def bare_python():
    """A Python that sees this one's packages but not the kit installed in it (its
    editable install's finder runs from a .pth file this one's site runs, not
    from the path a .pth line adds): what a copied recipe runs on elsewhere."""
    import sysconfig

    folder = Path(tempfile.mkdtemp(prefix="fault-battery-python-"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True)
    Path(purelib.stdout.strip(), "pinned_stack.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return str(python)


def expand(args, tmp):
    """`args` with RUN and TMP replaced by the case's paths."""
    return [arg.replace("RUN", str(tmp / "run")).replace("TMP", str(tmp)) for arg in args]


def environment(copied=False):
    """This process's environment, with the repository importable from anywhere;
    for a copied recipe, without it."""
    if copied:
        return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def execute(command, cwd, copied=False, stdout_closed=False):
    result = subprocess.run(command, cwd=cwd, env=environment(copied), capture_output=not
                            stdout_closed, stderr=subprocess.PIPE if stdout_closed else None,
                            text=True, timeout=TIMEOUT_S,
                            preexec_fn=(lambda: os.close(1)) if stdout_closed else None)
    return Outcome(result.returncode, result.stdout or "", result.stderr)


def concurrently(command, cwd, copied):
    """Two processes of `command`, started together; both their outcomes."""
    with tempfile.TemporaryFile("w+") as out1, tempfile.TemporaryFile("w+") as err1, \
            tempfile.TemporaryFile("w+") as out2, tempfile.TemporaryFile("w+") as err2:
        pairs = [(out1, err1), (out2, err2)]
        processes = [subprocess.Popen(command, cwd=cwd, env=environment(copied), stdout=out,
                                      stderr=err, text=True) for out, err in pairs]
        outcomes = []
        for process, (out, err) in zip(processes, pairs):
            process.wait(timeout=TIMEOUT_S)
            out.seek(0)
            err.seek(0)
            outcomes.append(Outcome(process.returncode, out.read(), err.read()))
        return outcomes


def interrupted(command, cwd, run_dir, sig, ready, copied=False):
    """Starts `command`, sends `sig` once `run_dir/ready` exists (or `ready`
    seconds after the start, for a number), and waits.
    Its output goes to files: a pipe nobody reads could block it."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        # As a terminal starts it: Ctrl-C's default action, whatever this process inherited.
        process = subprocess.Popen(command, cwd=cwd, env=environment(copied), stdout=out,
                                   stderr=err, text=True, preexec_fn=lambda: signal.signal(
                                       signal.SIGINT, signal.SIG_DFL))
        started = time.monotonic()
        deadline = started + TIMEOUT_S
        while process.poll() is None and not (
                time.monotonic() - started >= ready if isinstance(ready, float)
                else (run_dir / ready).exists()):
            if time.monotonic() > deadline:
                process.kill()
                break
            time.sleep(0.02)
        if process.poll() is None:
            process.send_signal(sig)
        process.wait(timeout=TIMEOUT_S)
        out.seek(0)
        err.seek(0)
        return Outcome(process.returncode, out.read(), err.read())


def with_stdout_closed(command, cwd, copied=False):
    """Runs `command`, its stdout's reader gone after the first line."""
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, env=environment(copied),
                                   stdout=subprocess.PIPE, stderr=err, text=True)
        process.stdout.readline()
        process.stdout.close()
        process.wait(timeout=TIMEOUT_S)
        err.seek(0)
        return Outcome(process.returncode, "", err.read())


def run_case(case, tmp):
    """(class, note) of `case`, run in the fresh directory `tmp`."""
    if case.kernel:
        return in_notebook(case, tmp)
    copied = case.copied is not None
    try:
        if copied:
            execute([sys.executable, "-m", "keras_course_recipes", "copy", case.copied, str(tmp / "copy")],
                    ROOT)
        background = case.setup(tmp) if case.setup else None
    except (SetupFailed, subprocess.TimeoutExpired) as error:
        return OTHER, f"setup failed: {error}"
    command = ([bare_python(), f"{case.copied}.py"] if copied
               else [sys.executable, "-m", "keras_course_recipes"]) + expand(case.args, tmp)
    cwd = tmp / "copy" if copied else tmp if case.in_temp_dir else ROOT
    run_dir = tmp / case.run_dir
    try:
        if case.interrupt:
            first = interrupted(command, cwd, run_dir, *case.interrupt, copied=copied)
            klass, note = classify(case, execute(command, cwd, copied), run_dir, first)
        elif case.close_stdout:
            klass, note = classify(case, with_stdout_closed(command, cwd, copied), run_dir)
        elif case.concurrent:
            outcomes = concurrently(command, cwd, copied)
            found = sorted((cwd / "runs" / case.copied).iterdir()) if copied else []
            if len(found) != 2:
                klass, note = SILENT_WRONG, f"two processes, {len(found)} run director(ies)"
            else:
                klass, note = max((classify(case, outcome, directory)
                                   for outcome, directory in zip(outcomes, found)),
                                  key=lambda pair: pair[0] != OK)
        else:
            before = set((tmp / "runs").rglob("*"))
            outcome = execute(command, cwd, copied, stdout_closed=case.stdout_closed)
            written = sorted(set((tmp / "runs").rglob("*")) - before) if case.in_temp_dir else []
            klass, note = classify(case, outcome, run_dir, left=written[0] if written else None)
    except subprocess.TimeoutExpired:
        klass, note = OTHER, f"still running after {TIMEOUT_S} s"
    finally:
        if background is not None:
            background.kill()
            background.wait()
    # The paths as the table's commands show them.
    return klass, note.replace(str(run_dir), "RUN").replace(str(tmp), "TMP")


def in_notebook(case, tmp):
    """(class, note) of a notebook case: mnist_mlp's file pasted into one cell of
    a notebook in TMP, then a cell that sets CONFIG's keys as `case.args` says
    and trains, on a kernel launched as `case.kernel` launches one."""
    import nbclient
    import nbformat

    settings = {}
    for item in expand(case.args, tmp):
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        settings.setdefault(section, {})[name] = value
    edits = "".join(f"CONFIG.setdefault({section!r}, {{}}).update("
                    + ", ".join(f"{name}=yaml.safe_load({value!r})" for name, value in keys.items())
                    + ")\n" for section, keys in settings.items())
    recipe = (ROOT / "recipes" / "mnist_mlp.py").read_text().partition("# ## Run it")[0]
    cells = [recipe, "import yaml\n" + edits
             + 'experiment = runs.main("mnist_mlp", CONFIG, run, CONFIG_SCHEMA)']
    launch = {"jupyter": ["-f", "{connection_file}"],
              "vscode": ["--ip=127.0.0.1", "--f={connection_file}"]}[case.kernel]
    spec = tmp / "jupyter" / "kernels" / case.kernel
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", *launch],
        "display_name": case.kernel, "language": "python"}))
    os.environ["JUPYTER_PATH"] = str(tmp / "jupyter")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    try:
        nbclient.NotebookClient(notebook, timeout=TIMEOUT_S, kernel_name=case.kernel,
                                resources={"metadata": {"path": str(tmp)}}).execute()
    except nbclient.exceptions.CellExecutionError as error:
        return TRACEBACK, str(error).strip().splitlines()[-1]
    outputs = notebook.cells[-1].outputs
    out = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    err = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
    refused = any(REFUSAL.match(line) for line in err.splitlines())
    return classify(dataclasses.replace(case, copied="mnist_mlp"),
                    Outcome(2 if refused else 0, out, err), tmp / case.run_dir)


# ---------------------------------------------------------------- judging

def last_line(stderr):
    """stderr's last line that is not TensorFlow's C++ logging."""
    lines = [line for line in stderr.splitlines() if line.strip() and not TF_LOG.match(line)]
    return lines[-1].strip() if lines else ""


def classify(case, outcome, run_dir, first=None, left=None):
    """(class, note) of a case's outcome; `first`: the interrupted process's, for STOPS;
    `left`: a path below TMP/runs the command wrote, for a refused one."""
    for process in filter(None, (first, outcome)):
        if "Traceback" in process.stderr:
            return TRACEBACK, last_line(process.stderr)
    if case.expect == REFUSED:
        if outcome.returncode == 0:
            return SILENT_WRONG, "exit 0: not refused"
        if left:
            return SILENT_WRONG, f"refused, but left {left} behind"
        if REFUSAL.match(last_line(outcome.stderr)):
            return OK, last_line(outcome.stderr)
        return OTHER, f"exit {outcome.returncode}, stderr ends: {last_line(outcome.stderr)}"
    if first is not None:
        sig = case.interrupt[0]
        wanted = {signal.SIGINT: (130, -sig), signal.SIGTERM: (143, -sig)}.get(sig, (-sig,))
        if first.returncode not in wanted:
            return OTHER, (f"the interrupted process exited {first.returncode}, not {wanted[0]}: "
                           f"{last_line(first.stderr)}")
    if outcome.returncode != 0:
        return OTHER, f"exit {outcome.returncode}: {last_line(outcome.stderr)}"
    epochs = int(next(arg for arg in reversed(case.args)
                      if arg.startswith("train.epochs=")).partition("=")[2])
    problem = untruth(run_dir, epochs, copied=case.copied is not None)
    if not problem and case.copied and "/metrics.json" not in outcome.stdout and not case.close_stdout:
        problem = "exit 0 without the test metrics printed"
    if problem:
        return SILENT_WRONG, problem
    resumed = f" (first exit {first.returncode})" if first else ""
    return OK, f"{epochs} epoch(s), each once in history.csv{resumed}"


def untruth(run_dir, epochs, copied=False):
    """What in `run_dir`'s files contradicts a run of `epochs` epochs, or None;
    a copied recipe's run has no metrics.json (the repository's) to check."""
    try:
        with (run_dir / "history.csv").open(newline="") as file:
            recorded = [int(float(row["epoch"])) for row in csv.DictReader(file)]
    except (OSError, KeyError, TypeError, ValueError) as error:
        return f"history.csv cannot be read ({type(error).__name__}: {error})"
    if copied:
        return (None if recorded == list(range(epochs))
                else f"history.csv holds epochs {recorded}, not 0..{epochs - 1} once each")
    try:
        metrics = json.loads((run_dir / "metrics.json").read_text())
    except OSError:
        return "exit 0 without metrics.json"
    except ValueError:
        return "metrics.json does not parse"
    if metrics.get("epochs_completed") != epochs:
        return f"metrics.json says {metrics.get('epochs_completed')} epochs, {epochs} were asked"
    if recorded != list(range(epochs)):
        return f"history.csv holds epochs {recorded}, not 0..{epochs - 1} once each"
    best = (metrics.get("best") or {}).get("epoch")
    if best not in recorded:
        return f"metrics.json's best epoch {best} is not in history.csv"
    return None


# ---------------------------------------------------------------- report

def shown(case):
    """The command as a user types it, the temporary paths as RUN and TMP."""
    if case.kernel:
        return "a cell: CONFIG " + shlex.join(case.args) + f" ({case.kernel} kernel)"
    if case.copied:
        return f"python {case.copied}.py " + shlex.join(case.args)
    return "python -m keras_course_recipes " + shlex.join(case.args)


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows):
    lines = ["| # | what was done | command | expected | actual | note |",
             "|---|---|---|---|---|---|"]
    for number, case, klass, note in rows:
        where = (" (in TMP/copy)" if case.copied else " (in TMP)" if case.in_temp_dir
                 else "")
        lines.append(f"| {number} | {cell(case.name)} | `{cell(shown(case))}`{where} | "
                     f"{case.expect} | {klass} | {cell(note[:300])} |")
    totals = collections.Counter(klass for _, _, klass, _ in rows)
    lines += ["", "| class | cases |", "|---|---|"]
    lines += [f"| {klass} | {totals[klass]} |" for klass in (OK, TRACEBACK, SILENT_WRONG, OTHER)]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", metavar="N,M", help="run only these cases (numbers from 1)")
    parser.add_argument("--out", metavar="FILE.md", help="also write the table to this file")
    args = parser.parse_args(argv)
    numbers = range(1, len(CASES) + 1)
    if args.only:
        try:
            numbers = [int(item) for item in args.only.split(",")]
        except ValueError:
            parser.error(f"--only takes case numbers separated by commas, got {args.only!r}")
        if not all(1 <= number <= len(CASES) for number in numbers):
            parser.error(f"--only: cases are numbered 1 to {len(CASES)}")

    rows = []
    for number in numbers:
        case = CASES[number - 1]
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fault-battery-") as tmp:
            klass, note = run_case(case, Path(tmp))
        rows.append((number, case, klass, note))
        print(f"{number:3} {klass:<12} {time.monotonic() - started:6.1f} s  {case.name}",
              flush=True)

    report = table(rows)
    print("\n" + report, end="")
    if args.out:
        Path(args.out).write_text(report)
    return 0 if all(klass == OK for _, _, klass, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
