"""Exit 0 means the run did what it said: every value is checked before a
run starts, one process trains a run directory at a time, and no file lies
after a fault. Each case is what a user typed or did, run through the
command line's own code (`keras_course_recipes.__main__.run_cli`), and each failed before
the checks it tests were written."""

import csv
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, TINY
from keras_course_recipes import __main__ as cli
from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes import folder as rfolder
from keras_course_recipes import harness, rundir
from test_data import write_folder


def run(capsys, *args):
    """(exit status, stdout, stderr) of `python -m keras_course_recipes ARGS`, in this process."""
    capsys.readouterr()
    status = cli.run_cli([*map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def train(capsys, run_dir, *overrides):
    return run(capsys, "run", "mnist_mlp", *TINY, f"run.dir={run_dir}", *overrides)


def epochs_in(run_dir):
    with (run_dir / "history.csv").open(newline="") as file:
        return [int(row["epoch"]) for row in csv.DictReader(file)]


# ---------------------------------------------------------------- values

@pytest.mark.parametrize("override, message", [
    ("execution.seed=-1", "'execution.seed' must be from 0 to 2**32 - 1"),
    ("execution.seed=1099511627776", "'execution.seed' must be from 0 to 2**32 - 1"),
    ("data.shuffle_buffer=0", "'data.shuffle_buffer' must be at least 1"),
    ("data.shuffle_buffer=-5", "'data.shuffle_buffer' must be at least 1"),
    ("model.dropout=1.5", "'model.dropout' must be at least 0 and below 1"),
    ("model.dropout=-0.1", "'model.dropout' must be at least 0 and below 1"),
    ("model.hidden_units=[0]", "'model.hidden_units' must be a list of integers, each at least 1"),
    ("model.hidden_units=[-5]", "'model.hidden_units' must be a list of integers, each at least 1"),
    ("execution.steps_per_execution=0", "'execution.steps_per_execution' must be at least 1"),
    ("execution.steps_per_execution=-1", "'execution.steps_per_execution' must be at least 1"),
    ("callbacks.monitor=val_acc", "'callbacks.monitor' must be one of val_accuracy, val_loss"),
    ("run.dir=''", "'run.dir' must be a folder's path, not empty"),
])
def test_a_value_no_run_can_use_is_one_line_before_anything_is_written(
        override, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # run.dir='' would have written here
    status, _, err = run(capsys, "run", "mnist_mlp", *TINY, override)
    assert status == 2 and err.startswith("error: ") and message in err, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, "# caf\xe9\ntrain:\n  epochs: 2\n".encode("latin-1")])
def test_a_config_file_that_is_not_text_is_one_line(content, capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_bytes(content)
    status, _, err = run(capsys, "run", "mnist_mlp", "--config", path, *TINY)
    assert status == 2 and f"{path} is not UTF-8 text" in err


def test_too_few_synthetic_images_to_validate_on_are_refused_or_warned(capsys, tmp_path):
    status, _, err = train(capsys, tmp_path / "a", "data.validation_split=0.0001")
    assert status == 2 and "holds out no image to validate on" in err
    rdata.load({"source": "synthetic", "validation_split": 0.01, "batch_size": 16})
    assert "holds out 20 image(s)" in capsys.readouterr().out


@pytest.mark.parametrize("settings, message", [
    (["model.widths=[8,8]", "model.growth_rates=[4,4,4]"],
     "model.widths and model.growth_rates need the same number of entries"),
    (["train.epochs=2", "train.validation_freq=3"],  # fit would never validate
     "train.validation_freq=3 is above train.epochs=2: the run would never validate"),
])
def test_settings_that_cannot_work_together_are_one_line(settings, message, capsys, tmp_path):
    status, _, err = run(capsys, "run", "densenet_cifar10_cpu", *TINY, *settings,
                         f"run.dir={tmp_path}")
    assert status == 2 and message in err and not (tmp_path / "checkpoints").exists()


def test_a_config_section_with_every_key_commented_out_sets_nothing(capsys, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("train:\n  # epochs: 2\n")
    status, out, _ = run(capsys, "show", "mnist_mlp", "--config", path)
    assert status == 0 and "epochs: 20" in out


def test_a_16_bit_png_is_refused_in_one_line(tmp_path):
    for name in ("cat", "dog"):
        (tmp_path / "train" / name).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "train" / name / "0.png")
    deep = tmp_path / "train" / "dog" / "deep.png"
    Image.fromarray(np.full((8, 8), 40000, np.uint16)).save(deep)
    with pytest.raises(UserError, match=f"{deep} is a 16-bit PNG"):
        rfolder.folder_arrays(tmp_path / "train", (8, 8, 1))


# ---------------------------------------------------------------- files that lie

@pytest.mark.slow
def test_a_last_history_row_without_its_newline_is_whole(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "train.epochs=2")[0] == 0
    history = run_dir / "history.csv"
    history.write_bytes(history.read_bytes().rstrip(b"\r\n"))
    status, out, _ = train(capsys, run_dir, "train.epochs=4")
    assert status == 0 and "from 2 to 4 epochs" in out
    assert epochs_in(run_dir) == [0, 1, 2, 3]
    assert json.loads((run_dir / "metrics.json").read_text())["epochs_completed"] == 4


@pytest.mark.slow
@pytest.mark.parametrize("damage, message", [
    ("epoch 99", "its backup holds 99 finished epochs, more than train.epochs=4"),
    ("history gone", "but {run}/history.csv records none"),
    ("history short", "but {run}/history.csv records 0"),
    ("row duplicated", "but {run}/history.csv records 0-1, 1"),
    ("column added", "columns are not in the order CSVLogger writes them"),
])
def test_a_backup_that_history_does_not_back_is_refused_before_anything_changes(
        damage, message, capsys, tmp_path):
    run_dir = tmp_path / "run"
    stop = train(capsys, run_dir, "train.epochs=4", "train.steps_per_epoch=2")
    assert stop[0] == 0
    (run_dir / "metrics.json").unlink()  # as if it had stopped after its last epoch
    metadata = run_dir / "backup" / "training_metadata.json"
    if damage == "epoch 99":
        metadata.write_text(json.dumps({"epoch": 99}))
    elif damage == "history gone":
        metadata.write_text(json.dumps({"epoch": 2}))
        (run_dir / "history.csv").unlink()
    else:
        metadata.write_text(json.dumps({"epoch": 2}))
        lines = (run_dir / "history.csv").read_text().splitlines(keepends=True)[:3]
        if damage == "history short":
            lines = lines[:2]
        elif damage == "row duplicated":
            lines.append(lines[-1])
        else:  # as a spreadsheet or pandas might save it: rows under another header
            lines = [line.rstrip("\r\n") + (",extra\n" if i == 0 else ",0.5\n")
                     for i, line in enumerate(lines)]
        (run_dir / "history.csv").write_text("".join(lines))
    before = {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"}
    status, _, err = train(capsys, run_dir, "train.epochs=4", "train.steps_per_epoch=2")
    assert status == 2 and message.format(run=run_dir) in err, err
    assert {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"} == before


@pytest.mark.slow
def test_a_run_killed_before_its_first_epoch_ended_trains_from_the_start(capsys, tmp_path):
    """What a kill leaves then: config.yaml and an empty history.csv."""
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "train.epochs=1")[0] == 0
    for path in [run_dir / "metrics.json", *run_dir.glob("*/*"), *run_dir.glob("*/*/*")]:
        if path.is_file():
            path.unlink()
    (run_dir / "history.csv").write_text("")
    status, _, err = train(capsys, run_dir, "train.epochs=2")
    assert status == 0, err
    assert epochs_in(run_dir) == [0, 1]


@pytest.mark.slow  # a second process
def test_a_second_process_on_one_run_directory_is_refused_naming_the_first(capsys, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
         "f.write('process 4242 (python -m keras_course_recipes run)'); f.flush(); "
         "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
         str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        status, _, err = train(capsys, run_dir)
    finally:
        holder.kill()
        holder.wait()
    assert status == 2 and f"{run_dir} is in use by process 4242" in err
    assert not (run_dir / "history.csv").exists()


@pytest.mark.slow
def test_a_closed_standard_output_does_not_end_training(tmp_path):
    """`... | head -3`: the reader goes, the run trains every epoch it was asked for."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, "train.epochs=3",
         "run.verbose=2", f"run.dir={run_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-2000:]
    assert epochs_in(run_dir) == [0, 1, 2]
    assert json.loads((run_dir / "metrics.json").read_text())["epochs_completed"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("edit, message", [
    (lambda text: "", "config.yaml is not the config this run wrote"),
    (lambda text: text[:len(text) // 2], "config.yaml is not the config this run wrote"),
    (lambda text: text.replace("lr: 0.001", "lr: 0.1"), "config.yaml is not the config this run wrote"),
])
def test_a_damaged_or_edited_config_yaml_is_named_as_such(edit, message, capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "train.epochs=2")[0] == 0
    (run_dir / "metrics.json").unlink()
    path = run_dir / "config.yaml"
    path.write_text(edit(path.read_text()))
    status, _, err = train(capsys, run_dir, "train.epochs=2")
    assert status == 2 and message in err, err


@pytest.mark.slow
def test_a_resume_with_another_model_or_without_its_config_names_what_differs(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "model.hidden_units=[32]")[0] == 0
    (run_dir / "metrics.json").unlink()
    status, _, err = train(capsys, run_dir, "model.hidden_units=[16]")
    assert status == 2 and "its config differs in model.hidden_units" in err
    status, _, err = run(capsys, "run", "cifar10_cnn", *TINY, f"run.dir={run_dir}")
    assert status == 2 and "its config differs in " in err and "recipe" in err
    (run_dir / "config.yaml").unlink()
    status, _, err = train(capsys, run_dir, "model.hidden_units=[32]", "data.batch_size=32")
    assert status == 2 and "holds a run's backup or history but no config.yaml" in err


@pytest.mark.slow
def test_changing_the_backend_on_resume_is_refused(tiny_config, capsys, tmp_path):
    """(Through the harness: this process's Keras runs on TensorFlow, so the
    command line would refuse JAX before looking at the run.)"""
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir)[0] == 0
    (run_dir / "metrics.json").unlink()
    with pytest.raises(harness.UserError, match="differs in execution.backend"):
        harness.open_run(tiny_config("mnist_mlp", "execution.backend=jax"))


@pytest.mark.slow
def test_a_finished_run_with_no_whole_backup_is_refused_before_any_file_changes(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "train.epochs=2")[0] == 0
    for name in ("latest.weights.h5", "latest.weights.h5.bkp"):
        (run_dir / "backup" / name).write_bytes(b"garbage")
    before = {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"}
    status, _, err = train(capsys, run_dir, "train.epochs=3")
    assert status == 2 and "latest.weights.h5 is damaged" in err
    assert {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"} == before


def test_a_damaged_best_checkpoint_is_removed_and_said_so(tiny_config, tmp_path, capsys):
    config = tiny_config("mnist_mlp")
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "best.keras").write_bytes(b"PK\x03\x04 cut short by a full disk")
    state = harness.inspect(run_dir, config)
    state.apply(run_dir, config)
    assert "best.keras was damaged" in capsys.readouterr().out
    assert not (run_dir / "checkpoints" / "best.keras").exists()


@pytest.mark.parametrize("path", ["the command line", "a copy"])
def test_a_full_disk_says_what_was_saved_and_how_to_go_on(path, tiny_config, tmp_path,
                                                          monkeypatch):
    """A copy once said "finished epochs are saved; ... the same run.dir" when none
    was saved and it had been given no run.dir."""
    import errno

    from keras_course_recipes import errors, rundir

    monkeypatch.chdir(tmp_path)
    config = tiny_config("mnist_mlp", "run.dir=null")
    if path == "a copy":
        del config["run"]["resume"]

    def fills_the_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "runs/x/backup/latest.weights.h5")

    with rundir.Run.open(config) as run, pytest.raises(errors.UserError) as error:
        run.train(fills_the_disk)
    assert str(error.value) == (
        f"the disk is full (runs/x/backup/latest.weights.h5) before the first epoch of {run.dir} "
        "finished: no epoch was saved, and the folder is removed; free some space, then the same "
        "command starts the run again.")
    assert not run.dir.exists()


def test_a_full_disk_under_tensorboards_writer_is_one_line(tiny_config, tmp_path, monkeypatch):
    """TensorFlow's file writers say ResourceExhaustedError, not OSError, of a full disk."""
    import tensorflow as tf

    from keras_course_recipes import errors, rundir

    monkeypatch.chdir(tmp_path)

    def fills_the_disk(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(
            None, None, "runs/x/tensorboard/train/events.out; No space left on device")

    with rundir.Run.open(tiny_config("mnist_mlp", "run.dir=null")) as run, \
            pytest.raises(errors.UserError, match="^the disk is full .*free some space"):
        run.train(fills_the_disk)


def test_the_best_epoch_is_the_rows_epoch_not_its_position():
    rows = [{"epoch": 0, "val_accuracy": 0.5}, {"epoch": 2, "val_accuracy": 0.9},
            {"epoch": 3, "val_accuracy": 0.7}]
    assert harness._best_epoch(rows, "val_accuracy")["epoch"] == 2


@pytest.mark.slow
def test_a_sweep_run_again_after_a_damaged_metrics_json_repairs_it(tmp_path, capsys):
    from keras_course_recipes.tools import sweep

    overrides = [*TINY, "model.hidden_units=[8]"]
    first = sweep.sweep("mnist_mlp", ["train.lr=[0.01,0.02]"], overrides=overrides,
                        sweep_dir=tmp_path)
    damaged = Path(first[1]["run_dir"]) / "metrics.json"
    damaged.write_text(damaged.read_text()[:40])
    capsys.readouterr()

    again = sweep.sweep("mnist_mlp", ["train.lr=[0.01,0.02]"], overrides=overrides,
                        sweep_dir=tmp_path)

    assert "metrics.json was damaged" in capsys.readouterr().out
    assert json.loads(damaged.read_text())["epochs_completed"] == 1
    assert [row["test_accuracy"] for row in again] == [row["test_accuracy"] for row in first]


@pytest.mark.slow
def test_the_fault_battery_runs_its_cases_and_tables_them(tmp_path):
    """`make battery`: here its first two cases."""
    table = tmp_path / "battery.md"
    result = subprocess.run([sys.executable, "tests/fault_battery.py", "--only", "1,2",
                             "--out", str(table)], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| OK | 2 |" in table.read_text()


# ---------------------------------------------------------------- the battery's second round

@pytest.mark.slow
def test_standard_output_closed_from_the_start_does_not_end_training(tmp_path):
    """`python -m keras_course_recipes run ... >&-`: Python starts with no sys.stdout."""
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, "train.epochs=2",
         f"run.dir={run_dir}"], cwd=ROOT, stderr=subprocess.PIPE, text=True, timeout=300,
        preexec_fn=lambda: os.close(1))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert json.loads((run_dir / "metrics.json").read_text())["epochs_completed"] == 2


@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does_and_it_resumes(tmp_path):
    """How job schedulers and container runtimes stop a process."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, "train.epochs=3",
               "train.steps_per_epoch=300", f"run.dir={run_dir}"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    while not (run_dir / "backup" / "training_metadata.json").exists():
        assert process.poll() is None, process.stderr.read()[-2000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and "finished epoch(s) are saved in" in lines[0], err[-2000:]
    resumed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert epochs_in(run_dir) == [0, 1, 2]


def test_a_lock_read_while_its_holder_writes_still_names_the_holder(tmp_path):
    """The holder takes the lock, then writes its line: a second process
    that reads in between waits for the line instead of saying "another process"."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = open(run_dir / ".lock", "a+")
    fcntl.flock(holder, fcntl.LOCK_EX)
    holder.write("process 4242 (python -m")
    holder.flush()
    finish = threading.Timer(0.1, lambda: (holder.write(" keras_course_recipes run)\n"), holder.flush()))
    finish.start()
    try:
        with pytest.raises(UserError, match=r"in use by process 4242 \(python -m keras_course_recipes run\)"):
            rundir.Run.open({"recipe": "mnist_mlp", "run": {"dir": str(run_dir)},
                           "train": {"epochs": 1}})
    finally:
        finish.join()
        holder.close()


def test_synthetic_images_take_the_memory_of_real_ones():
    train, validation, test = rdata._synthetic_splits(
        {**rdata.DEFAULTS, "synthetic_examples": 64}, (32, 32, 3), 10, seed=0)
    assert {split[0].dtype for split in (train, validation, test)} == {np.dtype(np.uint8)}


@pytest.mark.parametrize("make, message", [
    (lambda images: (images / "dog" / "x.png").mkdir(), "x.png is not an image file"),
    (lambda images: (images / "dog" / "loop.png").symlink_to(images / "dog" / "loop.png"),
     "loop.png is not an image file"),
])
def test_an_odd_entry_in_an_image_folder_is_named_in_one_line(make, message, tmp_path):
    write_folder(tmp_path, splits=("train",))
    make(tmp_path / "train")
    with pytest.raises(UserError, match=message):
        rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))


def test_an_image_whose_name_is_not_utf8_is_read(tmp_path):
    write_folder(tmp_path, splits=("train",))
    dog = tmp_path / "train" / "dog"
    source = next(dog.glob("*.png"))
    os.rename(source, os.fsencode(dog) + b"/caf\xe9.png")  # Latin-1, not UTF-8
    images, labels, classes = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    assert len(images) == len(labels) and classes == ["cat", "dog"]


@pytest.mark.slow
def test_extending_a_finished_run_whose_history_is_not_text_is_one_line(capsys, tmp_path):
    run_dir = tmp_path / "run"
    assert train(capsys, run_dir, "train.epochs=1")[0] == 0
    (run_dir / "history.csv").write_bytes(np.random.default_rng(0).bytes(200))
    status, _, err = train(capsys, run_dir, "train.epochs=2")
    assert status == 2 and "history.csv is not text" in err and "Traceback" not in err
