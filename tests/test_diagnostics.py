"""callbacks.diagnostics: activation and gradient summaries, written without changing training."""

import csv

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from keras_course_recipes import harness
from keras_course_recipes.callbacks.diagnostics import Diagnostics

pytestmark = pytest.mark.slow  # every test here trains


def history(run_dir):
    with (run_dir / "history.csv").open() as file:
        return [(row["loss"], row["val_loss"]) for row in csv.DictReader(file)]


def test_the_summaries_are_written(tiny_config, tmp_path):
    harness.train(tiny_config("mnist_mlp", "callbacks.diagnostics=true",
                                              "model.hidden_units=[24]", "train.epochs=2"))
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard" / "diagnostics"),
                              size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    layers = ["flatten", "dense_1", "dropout_1", "predictions"]
    assert {f"activations/{layer}" for layer in layers} <= tags
    assert {"gradient_norm/dense_1", "gradient_norm/predictions",
            "gradients/dense_1", "gradients/predictions", "inputs"} <= tags
    assert "gradient_norm/flatten" not in tags  # no weights, no gradient
    # One value per epoch; a histogram of the 16 x 24 activations of dense_1.
    norms = events.Tensors("gradient_norm/dense_1")
    assert [event.step for event in norms] == [0, 1]
    assert all(tf.make_ndarray(event.tensor_proto) > 0 for event in norms)
    buckets = tf.make_ndarray(events.Tensors("activations/dense_1")[0].tensor_proto)
    assert buckets[:, 2].sum() == 16 * 24
    # The images: 8 of them, 28 x 28, as the run's first batch.
    image = events.Tensors("inputs")[0].tensor_proto
    assert tf.make_ndarray(image)[:2].tolist() == [b"28", b"28"] and len(image.string_val) == 2 + 8


def test_training_is_the_same_with_and_without_them(tiny_config, tmp_path):
    """Batch norm's moving statistics and dropout's random state are put back."""
    def run(name, *extra):
        config = tiny_config("densenet_cifar10", "train.epochs=2", "model.dropout=0.2",
                             f"run.dir={tmp_path / name}", *extra)
        harness.train(config)
        return history(tmp_path / name)

    assert run("with", "callbacks.diagnostics=true") == run("without")


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="received: max_images=0"):
        Diagnostics("logs", (np.zeros((2, 4)), np.zeros(2)), max_images=0)
