"""train.warmup_epochs warms up every schedule, the step schedule included."""

import keras
import pytest

from recipes import UserError, _config
from recipes._experiment import learning_rate_schedule


def train_config(*overrides):
    return _config.resolve("densenet_cifar100", overrides=["train.epochs=4", *overrides],
                           announce=lambda line: None)["train"]


def test_the_step_schedule_warms_up_linearly_then_steps_at_half_and_three_quarters():
    schedule = learning_rate_schedule(train_config("train.warmup_epochs=1"), steps_per_epoch=10,
                                      lr=0.1)
    rates = [float(schedule(step)) for step in [0, 5, 10, 19, 20, 29, 30, 39]]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_the_warmed_up_step_schedule_saves_and_loads():
    schedule = learning_rate_schedule(train_config("train.warmup_epochs=1"), steps_per_epoch=10,
                                      lr=0.1)
    again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert [float(again(step)) for step in (5, 25)] == pytest.approx([0.05, 0.01])


def test_a_warm_up_as_long_as_the_run_is_refused_for_the_step_schedule():
    with pytest.raises(UserError, match="warmup_epochs=4 leaves no epoch"):
        learning_rate_schedule(train_config("train.warmup_epochs=4"), steps_per_epoch=10, lr=0.1)
