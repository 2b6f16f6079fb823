"""An interrupted run resumes at the next epoch with the saved state, in the
same execution mode or another one."""

import csv
import json
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_course_recipes as kit
from conftest import ROOT, TINY, run_with
from keras_course_recipes import errors, harness, rundir
from keras_course_recipes.errors import UserError


class StopAfterFirstEpoch(keras.callbacks.Callback):
    """Stands in for Ctrl-C right after epoch 1 is saved (as epoch 2 begins:
    the harness's callbacks come first, BackupAndRestore last)."""

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            raise KeyboardInterrupt


class RecordStartingState(keras.callbacks.Callback):
    """Records the weights and optimizer step that training starts from: as
    the first epoch begins, once BackupAndRestore has restored them."""

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self, "weights"):
            self.weights = [w.copy() for w in self.model.get_weights()]
            self.iterations = int(self.model.optimizer.iterations.numpy())


def opened(config):
    """The run directory the harness picks for `config`, after its checks."""
    run = harness.open_run(config)
    run.close()
    return run.dir


def fit_with(recipe, config, callback):
    """The harness's run, with one more callback after its own."""
    return run_with(recipe, config, callback)


@pytest.mark.slow
@pytest.mark.parametrize("first_mode, then_mode", [("graph", "graph"), ("eager", "xla")])
def test_rerun_continues_at_epoch_2_with_saved_state(first_mode, then_mode, tiny_config, tmp_path):
    recipe = kit.load("mnist_mlp")
    with pytest.raises(errors.Interrupted):
        fit_with(recipe, tiny_config("mnist_mlp", "train.epochs=3",
                                     f"execution.mode={first_mode}"), StopAfterFirstEpoch())
    run_dir = tmp_path / "run"
    assert not (run_dir / "metrics.json").exists()
    saved = keras.saving.load_model(run_dir / "checkpoints" / "last.keras")

    probe = RecordStartingState()
    metrics = fit_with(recipe, tiny_config("mnist_mlp", "train.epochs=3",
                                           f"execution.mode={then_mode}"), probe)

    # BackupAndRestore restored epoch 1's weights and optimizer before epoch 2.
    assert probe.iterations == 2  # two steps per epoch, one epoch done
    for restored, expected in zip(probe.weights, saved.get_weights()):
        np.testing.assert_allclose(restored, expected)
    with (run_dir / "history.csv").open() as file:
        assert [row["epoch"] for row in csv.DictReader(file)] == ["0", "1", "2"]
    assert metrics["epochs_completed"] == 3
    assert metrics["mode_used"] == then_mode


def test_resume_finds_the_newest_unfinished_run_of_these_settings(tiny_config, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    config = tiny_config("mnist_mlp", "run.dir=null", "run.resume=true")
    older, newer = (tmp_path / "runs" / "mnist_mlp" / stamp
                    for stamp in ("20260101-000000", "20260102-000000"))
    for run_dir, settings in ((older, config), (newer, tiny_config("mnist_mlp", "data.batch_size=8"))):
        run_dir.mkdir(parents=True)
        rundir.write_config(run_dir, settings)
    assert opened(config).resolve() == older  # the newer one trains with another batch

    (older / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="holds no unfinished run of these settings "
                                        r"\(20260102-000000 differs in data.batch_size\)"):
        opened(config)


def test_resume_refuses_a_finished_run_or_a_changed_config(tiny_config, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_config(run_dir, tiny_config("mnist_mlp"))
    with pytest.raises(UserError, match="differs in data.batch_size"):
        opened(tiny_config("mnist_mlp", "data.batch_size=8"))
    with pytest.raises(UserError, match="differs in execution.precision"):
        opened(tiny_config("mnist_mlp", "execution.precision=mixed_float16"))
    # More epochs, or another execution mode, are resumable changes.
    opened(tiny_config("mnist_mlp", "train.epochs=5", "execution.mode=xla"))
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="holds a finished run"):
        opened(tiny_config("mnist_mlp"))


@pytest.mark.slow
def test_cli_interrupt_says_how_to_resume(tmp_path):
    """A real SIGINT in the middle of training: a message, not a traceback."""
    import signal
    import time

    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY,
         "train.epochs=1000", f"run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    history = run_dir / "history.csv"  # a finished epoch's row: then there is a run to resume
    while not (history.exists() and len(history.read_text().splitlines()) > 1) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "run.resume=true" in stderr, stderr
    assert "Traceback" not in stderr, stderr  # whole: a CI run once printed one


@pytest.mark.slow
def test_an_exported_model_serves_without_this_code(tiny_config, tmp_path):
    """run.export=true: a SavedModel that plain TensorFlow loads and runs,
    in a process that cannot import this repository."""
    metrics = harness.train(tiny_config("graph_lessons", "run.export=true"))
    run_dir = tmp_path / "run"
    model = keras.saving.load_model(run_dir / "checkpoints" / "last.keras")
    images = np.random.default_rng(0).uniform(size=(3, 28, 28, 1)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    script = ("import json, sys, numpy as np, tensorflow as tf; "
              "served = tf.saved_model.load(sys.argv[1]); "
              "out = served.serve(tf.constant(np.load(sys.argv[2]))).numpy(); "
              "print(json.dumps({'out': out.tolist(), "
              "'ours': [m for m in sys.modules if m.split('.')[0] == 'keras_course_recipes']}))")
    result = subprocess.run([sys.executable, "-c", script, str(run_dir / "saved_model"),
                             str(tmp_path / "images.npy")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["ours"] == []
    np.testing.assert_allclose(served["out"], model.predict(images, verbose=0), rtol=1e-5)
    assert metrics["epochs_completed"] == 1


class RecordEpochWeights(keras.callbacks.Callback):
    """Keeps each finished epoch's weights, by epoch number."""

    def __init__(self):
        super().__init__()
        self.weights = {}

    def on_epoch_end(self, epoch, logs=None):
        self.weights[epoch] = self.model.get_weights()


class PredictClassZero(keras.callbacks.Callback):
    """Makes every later epoch far worse: the network answers class 0 with
    certainty, whatever the image."""

    def on_epoch_begin(self, epoch, logs=None):
        last = self.model.layers[-1]
        kernel, bias = last.get_weights()
        last.set_weights([np.zeros_like(kernel), np.eye(len(bias))[0] * 100])


@pytest.mark.slow
def test_a_worse_epoch_after_a_resume_keeps_best_keras(tiny_config, tmp_path):
    recipe = kit.load("mnist_mlp")
    recorded = RecordEpochWeights()
    # By val_loss: certain answers of class 0 cost every other image a huge
    # loss, where their accuracy could match a barely trained network's.
    fit_with(recipe, tiny_config("mnist_mlp", "train.epochs=2", "callbacks.monitor=val_loss"),
             recorded)
    best = tmp_path / "run" / "checkpoints" / "best.keras"
    before = best.read_bytes()

    metrics = fit_with(recipe, tiny_config("mnist_mlp", "train.epochs=4",
                                           "callbacks.monitor=val_loss"), PredictClassZero())

    assert best.read_bytes() == before
    assert metrics["best"]["epoch"] in (0, 1)
    for kept, trained in zip(keras.saving.load_model(best).get_weights(),
                             recorded.weights[metrics["best"]["epoch"]]):
        np.testing.assert_array_equal(kept, trained)


def test_two_runs_started_in_the_same_second_get_two_directories(tiny_config, tmp_path,
                                                                 monkeypatch):
    import datetime

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 1, 12, 0, 0)

    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    monkeypatch.setattr(datetime, "datetime", Frozen)
    config = tiny_config("mnist_mlp", "run.dir=null")
    first, second, third = (harness.choose(config)[0] for _ in range(3))
    assert [first.name, second.name, third.name] == [
        "20260101-120000", "20260101-120000-2", "20260101-120000-3"]
    assert all(d.is_dir() and not any(d.iterdir()) for d in (first, second, third))


def test_run_resume_with_a_run_dir_that_holds_no_run_is_refused(tiny_config, tmp_path):
    """It once started a fresh run there without a word."""
    config = tiny_config("mnist_mlp", "run.resume=true", f"run.dir={tmp_path / 'new'}")
    with pytest.raises(UserError, match=r"run.resume=true, but .*new holds no run to resume"):
        harness.open_run(config)
    assert not (tmp_path / "new").exists()
