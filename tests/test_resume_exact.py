"""A run interrupted at an epoch boundary and resumed trains exactly as the
uninterrupted run: the same batches, augmentation draws, dropout masks and
optimizer state, so bitwise the same losses and weights when TensorFlow runs
each op on one thread.

The resumed half of a run trains in a process of its own, as a user's resumed
run does: one process per backend trains every case's first half, and a
second the uninterrupted runs and the resumed halves (`trained`).
"""

import csv
import os

import numpy as np
import pytest

from conftest import TINY, SharedRuns, run_once, shared_folder
from keras_course_recipes.data import ArrayBatches
from keras_course_recipes.tools import soak

# Trains recipes as `python -m keras_course_recipes run` does, on one CPU thread (where
# TensorFlow's CPU kernels give the same bits every run; its op determinism
# refuses the tf.timestamp that Timing's input-wait stage runs in tf.data).
# argv[1] is a JSON list of runs, [label, recipe, overrides], trained one
# after the other; their metrics (or the traceback that ended one) go to the
# JSON file argv[2] as each ends.
DRIVER = """
import json, sys, traceback
import keras
if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
import keras_course_recipes as kit
from keras_course_recipes import recipe_config, harness
results = {}
for label, name, overrides in json.loads(sys.argv[1]):
    try:
        config = recipe_config.resolve(name, overrides=overrides, announce=lambda line: None)
        results[label] = harness.train(config)
    except Exception:
        results[label] = {"driver_traceback": traceback.format_exc()}
    open(sys.argv[2], "w").write(json.dumps(results))
"""

# id -> the recipe, its backend and its overrides.
CASES = {
    "dropout": ("mnist_mlp", "tensorflow", []),
    # cifar10_cnn has dropout too.
    "device-augmentation": ("cifar10_cnn", "tensorflow", [
        "data.augment_on=device", "data.augment_engine=keras", "data.augment=[flip,pad_crop,shift]"]),
    "host-augmentation": ("cifar10_cnn", "tensorflow", [
        "data.augment_on=host", "data.augment_engine=keras", "data.augment=[flip,pad_crop,shift]"]),
    # Keras' JAX `fit` opens two iterators on the training data.
    "jax-device-augmentation": ("cifar10_cnn", "jax", [
        "data.augment_on=device", "data.augment_engine=keras", "data.augment=[flip,pad_crop]"]),
}


def trained(tmp_path_factory, backend):
    """Every case of `backend` trained 2 epochs in a process (label "CASE
    first"), then in a new process 4 epochs in one go in another run
    directory ("CASE whole") and the first run resumed to 4 ("CASE resumed"),
    once per session; returns what both gave, as `SharedRuns`, whose folder
    holds each case's run directories."""
    folder = shared_folder(tmp_path_factory, f"resume-exact-{backend}")
    env = {**os.environ, "KERAS_BACKEND": backend}
    cases = {case: (name, [*TINY, f"execution.backend={backend}", *overrides])
             for case, (name, case_backend, overrides) in CASES.items() if case_backend == backend}
    first = run_once(folder, "first", DRIVER, [
        (f"{case} first", name, [*common, f"run.dir={folder / case / 'resumed'}",
                                 "train.epochs=2"]) for case, (name, common) in cases.items()], env)
    second = run_once(folder, "second", DRIVER, [
        (f"{case} {run}", name, [*common, f"run.dir={folder / case / run}", "train.epochs=4"])
        for case, (name, common) in cases.items() for run in ("whole", "resumed")], env)
    return SharedRuns(folder, {**first.results, **second.results},
                      f"first: {first.ended}\nsecond: {second.ended}")


def losses(history):
    with history.open() as file:
        return [(row["loss"], row["val_loss"]) for row in csv.DictReader(file)]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_a_resumed_run_equals_the_uninterrupted_one(case, tmp_path_factory):
    runs = trained(tmp_path_factory, CASES[case][1])
    assert runs[f"{case} first"]["epochs_completed"] == 2
    whole, resumed = runs[f"{case} whole"], runs[f"{case} resumed"]
    whole_losses, resumed_losses = (losses(runs.folder / case / run / "history.csv")
                                    for run in ("whole", "resumed"))
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
