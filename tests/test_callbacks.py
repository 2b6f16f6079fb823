"""The callbacks this repository adds: execution-mode check and timing."""

import math
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes.callbacks.timing as timing_module
from keras_course_recipes.callbacks.execution_mode_check import ExecutionModeCheck
from keras_course_recipes.callbacks.timing import Timing, execution_mode
from keras_course_recipes.augment import AugmentedModel


def tiny_model(*extra_layers):
    return keras.Sequential([keras.Input((8, 8, 1)), *extra_layers,
                             keras.layers.Flatten(), keras.layers.Dense(2)])


@pytest.mark.slow
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


def batches():
    return tf.data.Dataset.from_tensors(
        (tf.zeros((4, 8, 8, 1)), tf.zeros((4, 2)))).repeat()


class StepClock:
    """Stands in for the `time` module in callbacks.timing during `fit`:
    `perf_counter` reads as if the steps of each epoch took the seconds that
    `epochs` lists, and `time` reads the real clock `behind` seconds late, so
    that each step seems to have started that long before the input pipeline
    stamped its batch (with tf.timestamp, the real clock)."""

    def __init__(self, epochs, behind=0.0):
        self.readings, now = [], 0.0
        for steps in epochs:
            self.readings.append(now)  # on_epoch_begin
            for seconds in steps:
                self.readings += [now, now + seconds]  # on_train_batch_begin, _end
                now += seconds
            self.readings.append(now + 1.0)  # on_epoch_end, after validation, say
            now += 2.0
        self.behind = behind

    def perf_counter(self):
        return self.readings.pop(0)

    def time(self):
        return time.time() - self.behind


def train_with_timing(monkeypatch, epochs, behind=0.0):
    """Two-class `fit` of a tiny model, timed by `StepClock(epochs, behind)`."""
    monkeypatch.setattr(timing_module, "time", StepClock(epochs, behind))
    model = tiny_model()
    model.compile(optimizer="sgd", loss="mse")
    timing = Timing(batch_size=4)
    model.fit(timing.instrument(batches()), epochs=len(epochs), steps_per_epoch=len(epochs[0]),
              callbacks=[timing], verbose=0)
    return timing.summary()


@pytest.mark.slow
def test_timing_summary_is_consistent(monkeypatch):
    # Two epochs of 5 steps; the first step traces for 3 s.
    summary = train_with_timing(monkeypatch, [[3.0, 0.1, 0.2, 0.1, 0.4], [0.1, 0.1, 0.2, 0.4, 0.1]])
    assert summary["epoch_s"] == pytest.approx([3.8 + 1.0, 0.9 + 1.0])
    assert summary["first_step_s"] == pytest.approx(3.0)
    assert summary["step_ms_median"] == pytest.approx(100)  # of the 9 steps after the first
    assert summary["trace_s"] == pytest.approx(3.0 - 0.1)  # beyond a median step
    assert summary["images_per_s"] == pytest.approx(9 * 4 / 1.7)
    assert (summary["step_ms_p10"], summary["step_ms_p90"]) == pytest.approx((100, 400))


@pytest.mark.slow
def test_timing_sees_a_slow_input_pipeline(monkeypatch):
    # Steps of 100 s, of which the batch arrived 80 s (plus the real
    # milliseconds between the hook and the stamp) after the step began.
    # Usually exactly 0.8, but tf.data may stamp a batch against the hook of
    # the step before or after its own, or stamp a batch fetched ahead that no
    # step of the run takes (thread scheduling decides), each of which moves
    # the fraction by 80 / 700 = 0.11: 0.69, 0.91, 1.03 and 1.26 were seen.
    # So the bounds are what no scheduling reaches: no wait reads about 0
    # (below), and a stamp against a step that never began reads the clock's
    # 1.8e9 s.
    summary = train_with_timing(monkeypatch, [[100.0] * 4] * 2, behind=80.0)
    assert 0.5 < summary["input_wait_fraction"] < 2.0
    on_time = train_with_timing(monkeypatch, [[100.0] * 4] * 2, behind=0.0)
    assert on_time["input_wait_fraction"] < 0.01


class Clock:
    """Stands in for the `time` module in callbacks.timing: `perf_counter`
    returns the given readings in turn."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def perf_counter(self):
        return self.readings.pop(0)

    def time(self):
        return 0.0


def test_timing_splits_a_call_of_several_steps_into_steps(monkeypatch):
    """steps_per_execution=2: each call of the train function runs two
    steps, and Keras calls the batch hooks once per call, with its first
    and last step."""
    model = tiny_model()
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    # Epoch begins at 0 s; calls at 1-1.5 s (traces), 2-2.2 s and 3-3.3 s; epoch ends at 4 s.
    monkeypatch.setattr(timing_module, "time", Clock(0.0, 1.0, 1.5, 2.0, 2.2, 3.0, 3.3, 4.0))
    timing = Timing(batch_size=4)
    timing.set_model(model)
    logs = {}
    timing.on_epoch_begin(0)
    for first, last in [(0, 1), (2, 3), (4, 5)]:
        timing.on_train_batch_begin(first)
        timing.on_train_batch_end(last, {"loss": 1.0})
    timing.on_epoch_end(0, logs)

    assert timing.step_s == pytest.approx([0.1, 0.1, 0.15, 0.15])
    summary = timing.summary()
    assert summary["first_step_s"] == pytest.approx(0.5)
    assert summary["trace_s"] == pytest.approx(0.5 - 0.125)  # beyond a median step
    assert summary["step_ms_median"] == pytest.approx(125)
    assert summary["images_per_s"] == pytest.approx(4 * 4 / 0.5)  # 4 steps of 4 in 0.5 s
    assert summary["input_wait_fraction"] is None  # a call takes two batches at once
    assert summary["epoch_s"] == pytest.approx([4.0])
    # Every key, every epoch (history.csv's columns stay fixed): NaN where unmeasured.
    assert logs == pytest.approx({"time_epoch_s": 4.0, "time_step_ms": 125,
                                  "time_images_per_s": 32.0,
                                  "time_input_wait_fraction": math.nan}, nan_ok=True)
