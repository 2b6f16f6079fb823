"""The callbacks this repository adds: execution-mode check and timing."""

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from callbacks import ExecutionModeCheck, Timing, execution_mode
from models import AugmentedModel


def tiny_model(*extra_layers):
    return keras.Sequential([keras.Input((8, 8, 1)), *extra_layers,
                             keras.layers.Flatten(), keras.layers.Dense(2)])


def test_mode_check_sees_keras_drop_xla(capsys):
    # RandomCrop does not support XLA, so Keras silently trains in graph mode.
    model = tiny_model(keras.layers.RandomCrop(6, 6))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    check = ExecutionModeCheck("xla")
    model.fit(np.zeros((4, 8, 8, 1)), np.zeros((4, 2)), epochs=1, verbose=0,
              callbacks=[check])
    assert check.mode_used == "graph"
    assert "execution.mode=xla was requested" in capsys.readouterr().err


@pytest.mark.parametrize("compile_args, mode", [
    ({"run_eagerly": True}, "eager"),
    ({"jit_compile": False}, "graph"),
    ({"jit_compile": True}, "xla"),
])
def test_execution_mode(compile_args, mode):
    model = tiny_model()
    model.compile(optimizer="sgd", loss="mse", **compile_args)
    assert execution_mode(model) == mode
    # A model that augments on the device compiles its network's step apart.
    augmented = AugmentedModel(tiny_model(), augment=lambda images, labels: (images, labels))
    augmented.compile(optimizer="sgd", loss="mse", **compile_args)
    assert execution_mode(augmented) == mode


def test_callbacks_reject_bad_arguments():
    with pytest.raises(ValueError, match="received: requested='fast'"):
        ExecutionModeCheck("fast")
    with pytest.raises(ValueError, match="received: batch_size=0"):
        Timing(batch_size=0)


def train_with_timing(dataset, steps=12):
    model = tiny_model()
    model.compile(optimizer="sgd", loss="mse")
    timing = Timing(batch_size=4)
    model.fit(timing.instrument(dataset), epochs=2, steps_per_epoch=steps,
              callbacks=[timing], verbose=0)
    return timing.summary()


def batches():
    return tf.data.Dataset.from_tensors(
        (tf.zeros((4, 8, 8, 1)), tf.zeros((4, 2)))).repeat()


def test_timing_sees_a_slow_input_pipeline():
    def slow(x, y):
        x = tf.numpy_function(lambda a: (time.sleep(0.05), a)[1], [x], tf.float32)
        return tf.ensure_shape(x, (4, 8, 8, 1)), y

    summary = train_with_timing(batches().map(slow))
    # The model takes well under a millisecond; the input takes 50 ms.
    assert summary["step_ms_median"] >= 45
    assert summary["input_wait_fraction"] > 0.8


def test_timing_summary_is_consistent():
    summary = train_with_timing(batches())
    assert summary["first_step_s"] > summary["step_ms_median"] / 1000
    assert summary["trace_s"] > 0
    assert len(summary["epoch_s"]) == 2
    # Two epochs of 12 steps, less the first (tracing) step.
    assert summary["images_per_s"] == pytest.approx(
        4 / (summary["step_ms_median"] / 1000), rel=0.5)
