"""A run interrupted at an epoch boundary and resumed trains exactly as the
uninterrupted run: the same batches, augmentation draws, dropout masks and
optimizer state, so bitwise the same losses and weights when TensorFlow runs
each op on one thread.

Each training runs in a process of its own, as a user's resumed run does.
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, TINY, fast_xla_env
from keras_course_recipes.data import ArrayBatches
from keras_course_recipes.tools import soak

# Trains a recipe as `python -m keras_course_recipes run` does, on one CPU thread (where
# TensorFlow's CPU kernels give the same bits every run; its op determinism
# refuses the tf.timestamp that Timing's input-wait stage runs in tf.data).
# argv[1] is the recipe, argv[2] a JSON list of runs, each a list of
# overrides, trained one after the other; prints their metrics.
DRIVER = """
import json, sys
import keras
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
import keras_course_recipes as kit
from keras_course_recipes import _config, harness
metrics = []
for overrides in json.loads(sys.argv[2]):
    config = _config.resolve(sys.argv[1], overrides=overrides, announce=lambda line: None)
    metrics.append(harness.train(config))
print(json.dumps(metrics))
"""


def train(name, backend, *runs):
    """Trains `name` `runs` in a process of their own; returns their metrics."""
    env = (fast_xla_env(KERAS_BACKEND=backend) if backend == "jax"  # compiled sooner, alike
           else {**os.environ, "KERAS_BACKEND": backend})
    result = subprocess.run([sys.executable, "-c", DRIVER, name, json.dumps(runs)],
                            cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def train_whole_and_resumed(name, tmp_path, backend, *overrides):
    """Trains `name` 2 epochs, then in a new process 4 epochs in one go in
    another run directory and the first run resumed to 4; returns the two
    4-epoch runs' metrics and history.csv losses."""
    common = [*TINY, f"execution.backend={backend}", *overrides]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    train(name, backend, [*common, f"run.dir={resumed}", "train.epochs=2"])
    metrics = train(name, backend, [*common, f"run.dir={whole}", "train.epochs=4"],
                    [*common, f"run.dir={resumed}", "train.epochs=4"])
    return (metrics,
            [losses(run / "history.csv") for run in (whole, resumed)])


def losses(history):
    with history.open() as file:
        return [(row["loss"], row["val_loss"]) for row in csv.DictReader(file)]


@pytest.mark.slow
@pytest.mark.parametrize("name, backend, overrides", [
    pytest.param("mnist_mlp", "tensorflow", [], id="dropout"),
    # cifar10_cnn has dropout too.
    pytest.param("cifar10_cnn", "tensorflow",
                 ["data.augment_on=device", "data.augment_engine=keras",
                  "data.augment=[flip,pad_crop,shift]"], id="device-augmentation"),
    pytest.param("cifar10_cnn", "tensorflow",
                 ["data.augment_on=host", "data.augment_engine=keras",
                  "data.augment=[flip,pad_crop,shift]"], id="host-augmentation"),
    # Keras' JAX `fit` opens two iterators on the training data.
    pytest.param("cifar10_cnn", "jax",
                 ["data.augment_on=device", "data.augment_engine=keras",
                  "data.augment=[flip,pad_crop]"], id="jax-device-augmentation"),
])
def test_a_resumed_run_equals_the_uninterrupted_one(name, backend, overrides, tmp_path):
    (whole, resumed), (whole_losses, resumed_losses) = train_whole_and_resumed(
        name, tmp_path, backend, *overrides)
    assert len(whole_losses) == len(resumed_losses) == 4
    assert resumed_losses == whole_losses
    assert resumed["weights_sha256"] == whole["weights_sha256"]


def test_the_soak_finds_losses_that_differ_by_more_than_its_tolerance(tmp_path):
    def history(name, losses):
        path = tmp_path / name
        path.write_text("epoch,loss,val_loss\n" + "".join(
            f"{epoch},{loss},2.0\n" for epoch, loss in enumerate(losses)))
        return path

    reference = history("reference.csv", [1.0, 0.5])
    assert soak._loss_difference(history("close.csv", [1.0, 0.50000001]), reference) is None
    assert soak._loss_difference(history("far.csv", [1.0, 0.5001]), reference) == (
        "epoch 1: loss 0.5001 against 0.5")
    assert "1 epochs" in soak._loss_difference(history("short.csv", [1.0]), reference)


def test_array_batches_from_a_step_are_the_uninterrupted_batches_of_that_step():
    """Without TensorFlow: a resumed run's ArrayBatches start at its step."""
    images, labels = np.zeros((10, 2, 2, 1), np.uint8), np.arange(10)
    whole = ArrayBatches(images, labels, 4, shuffle_seed=0)
    resumed = ArrayBatches(images, labels, 4, shuffle_seed=0, start=3)
    for index in range(4):  # across passes of 2 batches
        np.testing.assert_array_equal(resumed[index][1], whole[3 + index][1])
