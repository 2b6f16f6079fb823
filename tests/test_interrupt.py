"""Ctrl-C says what it saved: the finished epochs, or that none finished."""

import json
import signal
import subprocess
import sys

import h5py
import pytest

from conftest import ROOT, TINY
from recipes import _rundir


@pytest.mark.slow
def test_an_interrupt_before_the_first_epoch_says_nothing_was_saved(tmp_path):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "recipes", "run", "mnist_mlp", *TINY, "train.steps_per_epoch=100000",
         "data.synthetic_examples=256", f"run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in process.stdout:
        if line.startswith("run directory:"):
            break
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert (f"interrupted before the first epoch of {run_dir} finished: no epoch was saved; "
            "the same command with run.resume=true (or the same run.dir) starts it again") in err
    assert "finished epochs are saved" not in err


def test_the_interrupt_note_counts_the_saved_epochs(tmp_path, monkeypatch):
    backup = tmp_path / "backup"
    backup.mkdir()
    with h5py.File(backup / _rundir.BACKUP_WEIGHTS, "w") as file:
        file["layers/dense/vars/0"] = [1.0]
    (backup / _rundir.BACKUP_METADATA).write_text(json.dumps({"epoch": 3}))
    monkeypatch.setattr(_rundir, "training_in", tmp_path)
    assert _rundir.interrupt_note("X") == (
        f"interrupted: 3 finished epoch(s) are saved in {tmp_path}; run X to continue.")


def test_a_ctrl_c_inside_a_garbage_collector_callback_still_stops_the_run():
    """Python drops an exception raised in a gc callback; JAX registers one even
    under TensorFlow, and a Ctrl-C that landed there once let a CI run train on."""
    script = """
import gc, signal, sys, time
sys.path.insert(0, ".")
from recipes import __main__ as cli
cli.catch_interrupts()
pressed = []
def press_once(phase, info):
    if not pressed:
        pressed.append(True)
        signal.raise_signal(signal.SIGINT)  # the handler raises here, inside the callback
gc.callbacks.append(press_once)
try:
    gc.collect()
    started = time.monotonic()
    while time.monotonic() < started + 20:  # a training run, in short
        pass
    sys.exit(0)
except KeyboardInterrupt:
    sys.exit(130)
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 130, result.stderr[-2000:]
    assert "Exception ignored" not in result.stderr
