"""train.warmup_epochs warms up the cosine and constant schedules; the step
schedule, the paper's, has none, and asking for one is refused."""

import pytest

from keras_course_recipes import recipe_config

from keras_course_recipes.errors import UserError


def test_a_warm_up_with_the_step_schedule_is_refused_before_anything_runs():
    with pytest.raises(UserError, match="warmup_epochs works with train.schedule=cosine"):
        recipe_config.resolve("densenet_cifar100", overrides=["train.warmup_epochs=1"],
                        announce=lambda line: None)


def test_a_warm_up_as_long_as_the_run_is_refused():
    with pytest.raises(UserError, match="warmup_epochs=4 must be below train.epochs=4"):
        recipe_config.resolve("densenet_cifar100", overrides=[
            "train.epochs=4", "train.schedule=cosine", "train.warmup_epochs=4"],
            announce=lambda line: None)
