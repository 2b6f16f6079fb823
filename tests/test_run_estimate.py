"""RunEstimate: one line after the first epoch with the whole run's time."""

import pytest

import keras_course_recipes as kit
import keras_course_recipes.callbacks.run_estimate as run_estimate_module
from keras_course_recipes.callbacks.run_estimate import RunEstimate
from keras_course_recipes import recipe_config, harness


class Clock:
    """Stands in for the `time` module in callbacks.run_estimate: `monotonic`
    returns the given readings in turn."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def monotonic(self):
        return self.readings.pop(0)


def test_the_estimate_is_the_epochs_left_at_the_first_epochs_pace(monkeypatch, capsys):
    monkeypatch.setattr(run_estimate_module, "time", Clock(100.0, 2100.0))
    estimate = RunEstimate(300, over_a_day="Try the CPU recipe.")
    estimate.on_epoch_begin(0)
    estimate.on_epoch_end(0)
    estimate.on_epoch_begin(1)  # later epochs print nothing more
    estimate.on_epoch_end(1)
    out = capsys.readouterr().out
    assert out.count("estimate:") == 1
    assert out.startswith("estimate: 299 more epochs at 33.3 min each (epoch 1's pace): 6.9 days, ")
    assert out.rstrip().endswith(". Try the CPU recipe.")


def test_a_resumed_run_counts_from_its_epoch_and_a_short_one_gets_no_note(monkeypatch, capsys):
    monkeypatch.setattr(run_estimate_module, "time", Clock(0.0, 30.0))
    estimate = RunEstimate(10, over_a_day="Try the CPU recipe.")
    estimate.on_epoch_begin(6)  # resumed after 6 epochs
    estimate.on_epoch_end(6)
    assert capsys.readouterr().out.startswith(
        "estimate: 3 more epochs at 30 s each (epoch 7's pace): 90 s, until ")


def test_the_last_epoch_prints_no_estimate(monkeypatch, capsys):
    monkeypatch.setattr(run_estimate_module, "time", Clock(0.0, 30.0))
    estimate = RunEstimate(1)
    estimate.on_epoch_begin(0)
    estimate.on_epoch_end(0)
    assert capsys.readouterr().out == ""


def test_bad_epochs_are_refused():
    with pytest.raises(ValueError, match="received: epochs=0"):
        RunEstimate(0)


def test_every_recipe_trains_with_it_pointing_to_the_cpu_recipes_on_a_cpu(tmp_path):
    config = recipe_config.resolve("densenet_cifar100", overrides=["train.epochs=300",
                                                             f"run.dir={tmp_path / 'run'}"],
                             announce=lambda line: None)
    run = harness.open_run(config)
    run.close()
    chosen = [callback for callback in harness.callbacks(run) if isinstance(callback, RunEstimate)]
    assert [(callback.epochs, callback.over_a_day) for callback in chosen] == [
        (300, harness.CPU_HINT)]  # this machine has no GPU
    # The harness names no recipe: `recipes list` says which are made for a CPU.
    assert "recipes list" in harness.CPU_HINT
    assert not [name for name in kit.names() if name in harness.CPU_HINT]
