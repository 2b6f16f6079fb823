"""Every registered recipe, in every execution mode, on tiny offline data."""

import csv
import json

import pytest
import tensorflow_datasets as tfds

import recipes
from callbacks.timing import EPOCH_KEYS

MODES = ["eager", "graph", "xla"]
TIMING_KEYS = {"trace_s", "step_ms_median", "images_per_s", "input_wait_fraction", "epoch_s"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", recipes.names())
def test_recipe_trains_in_each_mode(name, mode, tiny_config, tmp_path):
    config = tiny_config(name, f"execution.mode={mode}", "train.epochs=2")

    metrics = recipes.load(name).run(config)

    run_dir = tmp_path / "run"
    assert metrics == json.loads((run_dir / "metrics.json").read_text())
    assert metrics["mode_requested"] == metrics["mode_used"] == mode
    assert metrics["epochs_completed"] == 2
    assert 0.0 <= metrics["test"]["accuracy"] <= 1.0
    for path in ["config.yaml", "history.csv", "checkpoints/best.keras",
                 "checkpoints/last.keras", "tensorboard/train"]:
        assert (run_dir / path).exists(), path
    with (run_dir / "history.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert set(EPOCH_KEYS) <= set(rows[0])


def tensorboard_tags(log_dir):
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return set(events.Tags()["tensors"])


def test_metrics_json_contract(tiny_config, tmp_path):
    metrics = recipes.load("mnist_mlp").run(tiny_config("mnist_mlp", "train.steps_per_epoch=4"))

    # TensorBoard gets losses, metrics, the learning rate and the timing.
    assert {"epoch_loss", "epoch_accuracy", "epoch_learning_rate",
            *(f"epoch_{key}" for key in EPOCH_KEYS)} <= tensorboard_tags(
                tmp_path / "run" / "tensorboard" / "train")

    assert {"recipe", "mode_requested", "mode_used", "precision", "params",
            "trainable_params", "final", "best", "test", "timing", "versions",
            "device"} <= set(metrics)
    assert metrics["recipe"] == "mnist_mlp"
    assert metrics["precision"] == "float32"
    assert metrics["params"] == metrics["trainable_params"] == (
        784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10)
    assert metrics["best"]["epoch"] == 0 and metrics["best"]["val_accuracy"] == metrics["final"]["val_accuracy"]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics["final"])
    assert {"loss", "accuracy"} <= set(metrics["test"])
    timing = metrics["timing"]
    assert TIMING_KEYS <= set(timing)
    assert timing["trace_s"] >= 0 and timing["step_ms_median"] > 0
    assert timing["step_ms_p10"] <= timing["step_ms_median"] <= timing["step_ms_p90"]
    assert timing["images_per_s"] > 0
    assert 0 <= timing["input_wait_fraction"] <= 1
    assert len(timing["epoch_s"]) == 1
    assert set(metrics["versions"]) == {"tensorflow", "keras", "keras-cv"}
    assert metrics["versions"]["tensorflow"].startswith("2.21")
    assert {"gpus", "cpu", "cpu_cores", "cpu_features"} <= set(metrics["device"])


@pytest.mark.parametrize("name", recipes.names())
def test_recipe_loads_tensorflow_datasets(name, tiny_config):
    """The real tfds loading code, fed by tensorflow-datasets' mock data."""
    with tfds.testing.mock_data(num_examples=40):
        metrics = recipes.load(name).run(tiny_config(name, "data.source=tfds"))
    assert metrics["epochs_completed"] == 1


def test_mixed_precision_and_steps_per_execution(tiny_config):
    config = tiny_config("mnist_mlp", "execution.precision=mixed_bfloat16",
                         "execution.steps_per_execution=2", "train.steps_per_epoch=4")
    metrics = recipes.load("mnist_mlp").run(config)
    assert metrics["precision"] == "mixed_bfloat16"
    assert metrics["timing"]["step_ms_median"] > 0
    # One call of the train function runs two steps: input wait is not measurable.
    assert metrics["timing"]["input_wait_fraction"] is None
