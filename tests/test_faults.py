"""Faults and bad input never give a silent wrong result or a traceback:
damaged backups, divergence, a changed image folder, values no run can use."""

import csv
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes as kit
from conftest import ROOT, TINY
from keras_course_recipes import recipe_config, errors, harness, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes import folder as rfolder
from keras_course_recipes.tools import soak as _soak

from test_data import write_folder
from test_resume import RecordStartingState, fit_with


class StopAfterEpoch(keras.callbacks.Callback):
    """Stands in for a kill once `epochs` epochs are finished and backed up:
    as the next one begins (the harness's callbacks come before the recipe's,
    BackupAndRestore last, so an epoch's end is not over until then)."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epochs:
            raise KeyboardInterrupt


def history_epochs(run_dir):
    with (run_dir / "history.csv").open() as file:
        return [int(row["epoch"]) for row in csv.DictReader(file)]


def interrupted_run(tiny_config, epochs_done=3):
    """An mnist_mlp run of 5 epochs, killed after `epochs_done`."""
    with pytest.raises(errors.Interrupted):
        fit_with(kit.load("mnist_mlp"), tiny_config("mnist_mlp", "train.epochs=5"),
                 StopAfterEpoch(epochs_done))


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["delete weights", "delete metadata", "truncate weights",
                                    "garble metadata", "weights newer than metadata"])
def test_a_damaged_latest_backup_resumes_from_the_previous_epoch(damage, tiny_config, tmp_path,
                                                                  capsys):
    interrupted_run(tiny_config)
    backup = tmp_path / "run" / "backup"
    weights, metadata = backup / "latest.weights.h5", backup / "training_metadata.json"
    if damage == "delete weights":
        weights.unlink()
    elif damage == "delete metadata":
        metadata.unlink()
    elif damage == "truncate weights":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif damage == "garble metadata":
        metadata.write_text("{not json")
    else:
        weights.write_bytes(weights.read_bytes())  # rewritten after the metadata
    probe = RecordStartingState()
    metrics = fit_with(kit.load("mnist_mlp"), tiny_config("mnist_mlp", "train.epochs=5"), probe)
    assert "repaired:" in capsys.readouterr().out
    assert probe.iterations == 2 * 2  # the previous state: 2 epochs of 2 steps
    assert history_epochs(tmp_path / "run") == [0, 1, 2, 3, 4]  # each epoch once
    assert metrics["epochs_completed"] == 5
    assert len(metrics["timing"]["epoch_s"]) == 5  # both processes' epochs


@pytest.mark.slow
def test_a_backup_with_no_whole_state_is_refused_with_the_file_named(tiny_config, tmp_path):
    interrupted_run(tiny_config)
    backup = tmp_path / "run" / "backup"
    for name in ("latest.weights.h5", "latest.weights.h5.bkp"):
        (backup / name).write_bytes(b"garbage")
    with pytest.raises(UserError, match=r"latest.weights.h5 is damaged.*Start a new run"):
        harness.open_run(tiny_config("mnist_mlp", "train.epochs=5"))


@pytest.mark.slow
def test_a_kill_during_the_first_backup_starts_the_run_over(tiny_config, tmp_path, capsys):
    interrupted_run(tiny_config, epochs_done=1)
    (tmp_path / "run" / "backup" / "latest.weights.h5").write_bytes(b"")
    probe = RecordStartingState()
    fit_with(kit.load("mnist_mlp"), tiny_config("mnist_mlp", "train.epochs=2"), probe)
    assert "starting this run from the beginning" in capsys.readouterr().out
    assert probe.iterations == 0
    assert history_epochs(tmp_path / "run") == [0, 1]


@pytest.mark.slow
def test_divergence_raises_and_keeps_the_last_backup(tiny_config):
    """Epoch 1 trains on finite data, epoch 2 meets a NaN: fit raises, and
    BackupAndRestore's state of epoch 1 stays (TerminateOnNaN would let fit
    return, and BackupAndRestore would delete it)."""
    images = np.ones((8, 4), "float32")
    images[4:] = np.nan
    data = tf.data.Dataset.from_tensor_slices((images, np.zeros((8, 1), "float32"))).batch(2)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with rundir.Run.open(tiny_config("mnist_mlp")) as run:
        backup = keras.callbacks.BackupAndRestore(run.dir / "backup", double_checkpoint=True)
        with pytest.raises(errors.TrainingDiverged, match="became nan at epoch 2, step 1"):
            model.fit(data, epochs=3, steps_per_epoch=2, verbose=0,
                      callbacks=[*run.callbacks(), backup])
    status = json.loads((run.dir / "status.json").read_text())
    assert (status["status"], status["epoch"], status["step"]) == ("diverged", 1, 0)
    assert json.loads((run.dir / "backup" / "training_metadata.json").read_text())["epoch"] == 1


def test_a_loss_a_thousandfold_over_its_lowest_is_warned_about_once(tiny_config, capsys):
    with rundir.Run.open(tiny_config("mnist_mlp")) as run:
        guard = run.callbacks()[0]  # the callback that watches every batch's loss
        for step, loss in enumerate([1.0, 0.5, 400.0, 600.0, 0.4]):
            guard.on_train_batch_end(step, {"loss": loss})
    out = capsys.readouterr().out
    assert out.count("warning: the training loss is 600") == 1 and "400" not in out


@pytest.mark.slow
def test_a_diverging_run_exits_with_one_line_and_is_not_finished(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, "train.lr=1e30",
         f"run.dir={run_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "error: the training loss became" in result.stderr
    assert not (run_dir / "metrics.json").exists()
    assert json.loads((run_dir / "status.json").read_text())["status"] == "diverged"


def test_moving_an_image_to_another_class_rebuilds_the_folder_cache(tmp_path, capsys):
    write_folder(tmp_path, splits=("train",))
    _, labels, _ = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    moved = tmp_path / "train" / "cat" / "0.png"
    moved.rename(tmp_path / "train" / "dog" / "moved.png")  # same size, same mtime
    capsys.readouterr()
    _, relabelled, _ = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    assert "decoding the 12 images" in capsys.readouterr().out
    assert labels.sum() + 1 == relabelled.sum()  # one more dog (label 1)


@pytest.mark.parametrize("make, message", [
    (lambda root: write_folder(root, classes=("cat",), splits=("train",)), "holds one class"),
    (lambda root: (write_folder(root, splits=("train",)), (root / "train" / "emu").mkdir()),
     "class folders without images: emu"),
    (lambda root: (write_folder(root, splits=("train",)),
                   (root / "train" / "cat" / "bad.png").write_bytes(b"not an image")),
     "bad.png is not an image TensorFlow can decode"),
])
def test_bad_image_folders_are_user_errors(make, message, tmp_path):
    make(tmp_path)
    with pytest.raises(UserError, match=message):
        rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))


@pytest.mark.parametrize("override, message", [
    ("train.epochs=-3", "'train.epochs' must be at least 1, got -3"),
    ("data.batch_size=0", "'data.batch_size' must be at least 1"),
    ("train.lr=0", "'train.lr' must be a finite number above 0"),
    ("train.lr=-0.1", "'train.lr' must be a finite number above 0"),
    ("train.lr=.nan", "'train.lr' must be a finite number above 0, got nan"),
    ("model.hidden_units=[512,abc]", "expects a list of integers, got 'abc'"),
    ("data.validation_split=1", "'data.validation_split' must be at least 0 and below 1"),
])
def test_values_no_run_can_use_are_refused_before_training(override, message):
    with pytest.raises(UserError, match=message):
        recipe_config.resolve("mnist_mlp", overrides=[override], announce=lambda line: None)


def test_an_unwritable_run_directory_is_a_user_error(tiny_config, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UserError, match="Cannot create the run directory"):
        harness.open_run(tiny_config("mnist_mlp", f"run.dir={blocker / 'run'}"))


@pytest.mark.slow
def test_the_soak_kills_and_resumes_a_run_to_its_end(tmp_path):
    row = _soak.soak("mnist_mlp", kills=2, overrides=[*TINY, "train.epochs=8",
                                                      "train.steps_per_epoch=40"],
                     runs_dir=tmp_path)
    assert row["kills"] >= 1 and row["resumes that succeeded"] == row["kills"]
    assert row["finished epochs lost per kill (max)"] <= 1
    assert row["every epoch once in history.csv"] and row["run finished"]
    # And it trained as the uninterrupted run beside it did (tests/test_resume_exact.py).
    assert row["losses equal the uninterrupted run's"]


@pytest.mark.slow
def test_a_finished_run_trains_further_when_train_epochs_is_raised(tiny_config, tmp_path, capsys):
    """The tf.function lesson's workflow: an eager epoch to debug, then on as a graph."""
    recipe = kit.load("mnist_mlp")
    first = harness.train(tiny_config("mnist_mlp", "train.epochs=1", "execution.mode=eager"))
    probe = RecordStartingState()
    with pytest.raises(UserError, match="finished run of 1 epochs.*Raise train.epochs above 1"):
        harness.open_run(tiny_config("mnist_mlp", "train.epochs=1"))
    metrics = fit_with(recipe, tiny_config("mnist_mlp", "train.epochs=3", "execution.mode=graph"),
                       probe)
    assert "extending the finished run" in capsys.readouterr().out
    assert probe.iterations == 2  # one epoch of two steps, then on
    assert history_epochs(tmp_path / "run") == [0, 1, 2]
    assert metrics["epochs_completed"] == 3 and metrics["mode_used"] == "graph"
    assert json.loads((tmp_path / "run" / "metrics-1-epochs.json").read_text()) == first


def test_changing_the_epochs_of_a_scheduled_run_is_refused(tiny_config, tmp_path):
    """A cosine schedule spans all epochs: more of them would restart its curve."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_config(run_dir, tiny_config("densenet_cifar10_wide"))
    with pytest.raises(UserError, match="'cosine' schedule over all its epochs"):
        harness.open_run(tiny_config("densenet_cifar10_wide", "train.epochs=5"))
