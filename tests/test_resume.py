"""An interrupted run resumes at the next epoch with the saved state."""

import csv
import subprocess
import sys

import keras
import numpy as np
import pytest

import recipes
from conftest import ROOT, TINY
from recipes import UserError, _runner


class StopAfterFirstEpoch(keras.callbacks.Callback):
    """Stands in for Ctrl-C right after epoch 1 is saved."""

    def on_epoch_end(self, epoch, logs=None):
        raise KeyboardInterrupt


class RecordStartingState(keras.callbacks.Callback):
    """Records the weights and optimizer step that training starts from."""

    def on_train_begin(self, logs=None):
        self.weights = [w.copy() for w in self.model.get_weights()]
        self.iterations = int(self.model.optimizer.iterations.numpy())


def with_extra_callback(monkeypatch, callback):
    standard = _runner.standard_callbacks
    monkeypatch.setattr(_runner, "standard_callbacks",
                        lambda config, run_dir: [*standard(config, run_dir), callback])


def test_rerun_continues_at_epoch_2_with_saved_state(tiny_config, tmp_path, monkeypatch):
    config = tiny_config("mnist_mlp", "train.epochs=3")
    recipe = recipes.load("mnist_mlp")

    with monkeypatch.context() as patch:
        with_extra_callback(patch, StopAfterFirstEpoch())
        with pytest.raises(KeyboardInterrupt):
            recipe.run(config)
    run_dir = tmp_path / "run"
    assert not (run_dir / "metrics.json").exists()
    saved = keras.saving.load_model(run_dir / "checkpoints" / "last.keras")

    probe = RecordStartingState()
    with monkeypatch.context() as patch:
        with_extra_callback(patch, probe)
        metrics = recipe.run(config)

    # BackupAndRestore restored epoch 1's weights and optimizer before epoch 2.
    assert probe.iterations == 2  # two steps per epoch, one epoch done
    for restored, expected in zip(probe.weights, saved.get_weights()):
        np.testing.assert_allclose(restored, expected)
    with (run_dir / "history.csv").open() as file:
        assert [row["epoch"] for row in csv.DictReader(file)] == ["0", "1", "2"]
    assert metrics["epochs_completed"] == 3


def test_resume_finds_the_latest_unfinished_run(tiny_config, tmp_path, monkeypatch):
    monkeypatch.setattr(_runner, "RUNS_DIR", tmp_path / "runs")
    unfinished = tmp_path / "runs" / "mnist_mlp" / "20260101-000000"
    unfinished.mkdir(parents=True)
    config = tiny_config("mnist_mlp", "run.dir=null", "run.resume=true")
    (unfinished / "config.yaml").write_text(_runner.dump(config))
    assert _runner._run_dir(config) == unfinished

    (unfinished / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="no unfinished run to resume"):
        _runner._run_dir(config)


def test_resume_refuses_a_finished_run_or_a_changed_config(tiny_config, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(_runner.dump(tiny_config("mnist_mlp")))
    with pytest.raises(UserError, match="differs in data.batch_size"):
        _runner._run_dir(tiny_config("mnist_mlp", "data.batch_size=8"))
    # More epochs is a resumable change.
    _runner._run_dir(tiny_config("mnist_mlp", "train.epochs=5"))
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="holds a finished run"):
        _runner._run_dir(tiny_config("mnist_mlp"))


def test_cli_interrupt_says_how_to_resume(tmp_path):
    """A real SIGINT in the middle of training: a message, not a traceback."""
    import signal
    import time

    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "recipes", "run", "mnist_mlp", *TINY,
         "train.epochs=1000", f"run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (run_dir / "history.csv").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "run.resume=true" in stderr
    assert "Traceback" not in stderr
