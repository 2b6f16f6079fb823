"""Ctrl-C says what it saved: the finished epochs, or that none finished."""

import gc
import json
import signal
import subprocess
import sys

import h5py
import keras
import numpy as np
import pytest

from conftest import ROOT, TINY
from keras_course_recipes import __main__ as cli
from keras_course_recipes import errors, harness, rundir


@pytest.mark.slow
def test_an_interrupt_before_the_first_epoch_says_nothing_was_saved(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, "train.steps_per_epoch=100000",
         "data.synthetic_examples=256", f"run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:
        if line.startswith("run directory:"):
            break
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running 120 s after Ctrl-C: {process.communicate()[1][-3000:]}")
    assert process.returncode == 130, err[-2000:]
    # The folder it made holds nothing to go on from: removed, so the same command starts over
    # (run.resume=true was once advised, and then refused, finding no run).
    assert (f"interrupted before the first epoch of {run_dir} finished: no epoch was saved, "
            "and the folder is removed; the same command starts the run again.") in err
    assert "finished epochs are saved" not in err and not run_dir.exists()


def test_the_interrupt_note_counts_the_saved_epochs(tiny_config, tmp_path):
    run = harness.open_run(tiny_config("mnist_mlp"))
    run.close()
    backup = run.dir / "backup"
    backup.mkdir(parents=True)
    with h5py.File(backup / rundir.BACKUP_WEIGHTS, "w") as file:
        file["layers/dense/vars/0"] = [1.0]
    (backup / rundir.BACKUP_METADATA).write_text(json.dumps({"epoch": 3}))
    assert run.saved_note() == (
        f"interrupted: 3 finished epoch(s) are saved in {run.dir}; run the same command with "
        "run.resume=true (or the same run.dir) to continue.")


class SwallowsTheCtrlC(keras.callbacks.Callback):
    """Library code that a Ctrl-C lands in, and that keeps its KeyboardInterrupt."""

    def __init__(self, how):
        super().__init__()
        self.how, self.batches = how, []

    def on_train_batch_begin(self, batch, logs=None):
        self.batches.append(batch)
        if batch != 2:
            return
        if self.how == "except":
            try:
                signal.raise_signal(signal.SIGINT)
            except BaseException:
                pass
        else:  # Python drops what a gc callback raises (JAX registers one)
            def press(phase, info):
                if phase == "start":
                    signal.raise_signal(signal.SIGINT)
            gc.callbacks.append(press)
            try:
                gc.collect()
            finally:
                gc.callbacks.remove(press)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["except", "gc_callback"])
def test_one_ctrl_c_stops_training_even_when_library_code_swallows_it(how, tiny_config, monkeypatch,
                                                                   capsys):
    """A CI run once trained on after its SIGINT landed in JAX's gc callback."""
    monkeypatch.setattr(sys, "unraisablehook", errors._on_unraisable)
    previous = signal.getsignal(signal.SIGINT)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    swallower = SwallowsTheCtrlC(how)
    with rundir.Run.open(tiny_config("mnist_mlp")) as run, pytest.raises(KeyboardInterrupt):
        model.fit(np.zeros((20, 2)), np.zeros(20), batch_size=1, epochs=1, verbose=0,
                  callbacks=[*run.callbacks(), swallower])
    assert run.interrupted is not None
    assert signal.getsignal(signal.SIGINT) is previous  # its handler lasts as long as training
    assert swallower.batches == [0, 1, 2]  # stopped at the end of the batch it was pressed in
    assert "Exception ignored" not in capsys.readouterr().err


@pytest.mark.parametrize("while_interrupted", [True, False])
def test_only_what_ctrl_c_caused_goes_unprinted(while_interrupted, monkeypatch, capsys):
    """Library code can turn a Ctrl-C into another exception (TensorFlow's
    nest did, in a CI run, and printed its traceback); others still print. A Ctrl-C
    dropped so is kept for the run to raise."""
    monkeypatch.setattr(sys, "unraisablehook", errors._on_unraisable)
    monkeypatch.setattr(errors, "_pending", None)

    def raises(phase, info):
        if phase != "start":
            return
        try:
            raise KeyboardInterrupt if while_interrupted else OSError("not Ctrl-C")
        except BaseException:
            raise ValueError("the two structures differ")
    gc.callbacks.append(raises)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(raises)
    assert ("Exception ignored" in capsys.readouterr().err) is not while_interrupted
    assert isinstance(errors._pending, KeyboardInterrupt) is while_interrupted


class PressesCtrlC(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 2:
            signal.raise_signal(signal.SIGINT)


@pytest.mark.slow
def test_ctrl_c_lets_the_step_in_flight_finish(tiny_config, capfd):
    """Raised at once, a Ctrl-C could land inside TensorFlow tracing a function,
    whose half-built graph then printed a traceback as it was collected."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with rundir.Run.open(tiny_config("mnist_mlp")) as run, pytest.raises(KeyboardInterrupt):
        model.fit(np.zeros((20, 2)), np.zeros(20), batch_size=1, epochs=1, verbose=0,
                  callbacks=[*run.callbacks(), PressesCtrlC()])
    assert int(model.optimizer.iterations) == 3  # the step it was pressed in ran
    assert "stopping after this step (Ctrl-C again stops as soon as the computation in flight returns" in capfd.readouterr().err


def test_after_a_reported_interrupt_collected_leftovers_go_unprinted(monkeypatch, capsys):
    monkeypatch.setattr(sys, "unraisablehook", errors._on_unraisable)
    monkeypatch.setattr(errors, "reported_interrupt", False)

    def leftover(phase, info):  # TensorFlow's half-built graph, as a gc callback
        if phase == "start":
            raise TypeError("'NoneType' object is not iterable")

    def collect():
        gc.callbacks.append(leftover)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(leftover)
        return capsys.readouterr().err

    assert "Exception ignored" in collect()  # a bug, before any interrupt: printed
    monkeypatch.setattr(cli, "main", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert cli.run_cli([]) == 130
    assert "Exception ignored" not in collect()


@pytest.mark.slow
def test_a_ctrl_c_once_the_run_directory_is_printed_is_the_runs(tiny_config, monkeypatch):
    """A CI run trained on, for minutes, after a Ctrl-C sent on seeing "run
    directory:": the run's handler was not yet installed, and the
    KeyboardInterrupt could land where library code drops it."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with rundir.Run.open(tiny_config("mnist_mlp")) as run, pytest.raises(KeyboardInterrupt):
        apply = run.state.apply

        def apply_and_press(*args):
            apply(*args)  # which prints "run directory:"
            try:  # library code that drops what it catches
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass
        monkeypatch.setattr(run.state, "apply", apply_and_press)
        model.fit(np.zeros((20, 2)), np.zeros(20), batch_size=1, epochs=1, verbose=0,
                  callbacks=run.callbacks())
    assert int(model.optimizer.iterations) == 1


def test_a_ctrl_c_python_dropped_before_training_still_stops_the_run(tiny_config, monkeypatch,
                                                                   capsys):
    """A Ctrl-C 2 to 3.5 s after start, while TensorFlow loads, once landed in one
    of its garbage-collector callbacks, where Python drops it: the run trained
    to the end and exited 0."""
    monkeypatch.setattr(errors, "_pending", None)
    monkeypatch.setattr(sys, "unraisablehook", errors._on_unraisable)

    def press(phase, info):  # where Python delivers the signal: inside a gc callback
        if phase == "start":
            errors.latch(signal.SIGINT, None)

    gc.callbacks.append(press)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(press)
    trained = []
    with rundir.Run.open(tiny_config("mnist_mlp")) as run, pytest.raises(errors.Interrupted) as error:
        run.train(lambda *args, **kwargs: trained.append(True))
    assert not trained and error.value.status == 130
    assert "Exception ignored" not in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("how", ["python -m keras_course_recipes", "a copied recipe"])
def test_a_ctrl_c_while_keras_loads_is_one_line(how, tmp_path, fresh_pythons):
    """A copied recipe stopped while `import keras` ran printed a 24 to 49 line
    KeyboardInterrupt traceback."""
    import shutil
    import time

    if how == "a copied recipe":
        shutil.copyfile(ROOT / "recipes" / "mnist_mlp.py", tmp_path / "mnist_mlp.py")
        command = [str(fresh_pythons.kit), "mnist_mlp.py"]
    else:
        command = [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", "execution.onednn=null"]
    # As a terminal starts it: Ctrl-C's default action (pytest-xdist's workers ignore SIGINT,
    # and a child inherits that).
    process = subprocess.Popen([*command, *[item for item in TINY if "onednn" not in item],
                                "train.epochs=3", "train.steps_per_epoch=50"], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.5)  # Keras and TensorFlow are loading
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    # 130, or ended by SIGINT itself as Python ends on an uncaught Ctrl-C (a shell shows 130)
    assert process.returncode in (130, -signal.SIGINT) and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("interrupted"), err[-3000:]
    assert "test:" not in out


def test_a_ctrl_c_the_users_code_handled_before_the_run_is_not_replayed(tiny_config, monkeypatch):
    """The latch once remembered every Ctrl-C, and a run stopped before its first
    epoch, exit 130, for one that the student's own code had caught and handled."""
    monkeypatch.setattr(errors, "_pending", None)
    try:
        errors.latch(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass  # the user's code, handling it
    trained = []
    with rundir.Run.open(tiny_config("mnist_mlp")) as run:
        run.train(lambda *args, **kwargs: trained.append(True))
    assert trained == [True]
