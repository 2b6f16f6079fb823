"""Every registered recipe trains: each module in every execution mode on
synthetic data, and every recipe name on tensorflow-datasets' mock data."""

import csv
import json
import math

import keras
import pytest
import tensorflow_datasets as tfds

import recipes
from callbacks.timing import EPOCH_KEYS
from models import network_of

MODES = ["eager", "graph", "xla"]
MODULES = sorted({recipes.module_of(name) for name in recipes.names()})
TIMING_KEYS = {"trace_s", "step_ms_median", "images_per_s", "input_wait_fraction", "epoch_s"}
pytestmark = pytest.mark.slow  # every test here trains


def test_every_recipe_module_has_build_and_run():
    for module in MODULES:
        recipe = recipes.load(module)
        assert callable(recipe.build) and callable(recipe.run), module


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MODULES)
def test_recipe_trains_in_each_mode(name, mode, tiny_config, tmp_path):
    config = tiny_config(name, f"execution.mode={mode}", "train.epochs=2")

    metrics = recipes.load(name).run(config)

    run_dir = tmp_path / "run"
    assert metrics == json.loads((run_dir / "metrics.json").read_text())
    assert metrics["mode_requested"] == metrics["mode_used"] == mode
    assert metrics["epochs_completed"] == 2
    for path in ["config.yaml", "history.csv", "checkpoints/best.keras",
                 "checkpoints/last.keras", "tensorboard/train"]:
        assert (run_dir / path).exists(), path
    with (run_dir / "history.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert [row["epoch"] for row in rows] == ["0", "1"]
    assert set(EPOCH_KEYS) <= set(rows[0])


@pytest.mark.parametrize("name", recipes.names())
def test_recipe_loads_tensorflow_datasets(name, tiny_config):
    """The real tfds loading code, fed by tensorflow-datasets' mock data; for
    a YAML recipe, also its settings on its module's code."""
    with tfds.testing.mock_data(num_examples=40):
        metrics = recipes.load(name).run(tiny_config(name, "data.source=tfds"))
    assert metrics["recipe"] == name
    assert metrics["epochs_completed"] == 1


def test_a_recipe_learns_learnable_synthetic_data(tiny_config):
    """Each synthetic class is its own template plus noise: well above the
    10% of chance after a few epochs."""
    config = tiny_config("mnist_mlp", "data.synthetic_examples=640", "data.batch_size=32",
                         "train.steps_per_epoch=null", "train.epochs=3")
    metrics = recipes.load("mnist_mlp").run(config)
    assert metrics["test"]["accuracy"] > 0.5


def tensorboard_tags(log_dir):
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return set(events.Tags()["tensors"])


def test_metrics_json_contract(tiny_config, tmp_path):
    metrics = recipes.load("mnist_mlp").run(
        tiny_config("mnist_mlp", "train.steps_per_epoch=4", "train.epochs=2"))

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
    with (tmp_path / "run" / "history.csv").open() as file:
        history = [float(row["val_accuracy"]) for row in csv.DictReader(file)]
    best = max(range(2), key=lambda epoch: (history[epoch], -epoch))
    assert metrics["best"]["epoch"] == best
    assert metrics["best"]["val_accuracy"] == pytest.approx(history[best])
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(metrics["final"])
    assert metrics["final"]["val_accuracy"] == pytest.approx(history[-1])
    assert {"loss", "accuracy"} <= set(metrics["test"])
    timing = metrics["timing"]
    assert TIMING_KEYS <= set(timing)
    assert timing["step_ms_p10"] <= timing["step_ms_median"] <= timing["step_ms_p90"]
    # 7 steady steps (8 less the tracing one) of 16 images, in less time
    # than the two epochs took.
    assert timing["images_per_s"] > 16 * 7 / sum(timing["epoch_s"])
    assert len(timing["epoch_s"]) == 2
    assert set(metrics["versions"]) == {"tensorflow", "keras", "keras-cv"}
    assert metrics["versions"]["tensorflow"].startswith("2.21")
    assert {"gpus", "cpu", "cpu_cores", "cpu_features"} <= set(metrics["device"])


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("name", MODULES)
def test_recipe_trains_under_each_mixed_precision(name, precision, tiny_config, tmp_path):
    """Every precision the README documents, on every recipe module: the
    layers compute in the half type, and the loss stays finite."""
    metrics = recipes.load(name).run(tiny_config(name, f"execution.precision={precision}"))
    assert metrics["precision"] == precision
    assert math.isfinite(metrics["final"]["loss"])
    saved = keras.saving.load_model(tmp_path / "run" / "checkpoints" / "last.keras")
    computes = {layer.compute_dtype for layer in network_of(saved).layers if layer.weights}
    assert precision.removeprefix("mixed_") in computes, computes


def test_the_documented_xla_bfloat16_densenet_command_trains(tiny_config):
    """README, "DenseNet on CIFAR": execution.mode=xla execution.precision=mixed_bfloat16."""
    metrics = recipes.load("densenet_cifar100").run(tiny_config(
        "densenet_cifar100", "execution.mode=xla", "execution.precision=mixed_bfloat16"))
    assert (metrics["mode_used"], metrics["precision"]) == ("xla", "mixed_bfloat16")
    assert math.isfinite(metrics["final"]["loss"])


def test_mixed_precision_and_steps_per_execution(tiny_config):
    config = tiny_config("mnist_mlp", "execution.precision=mixed_bfloat16",
                         "execution.steps_per_execution=2", "train.steps_per_epoch=4")
    metrics = recipes.load("mnist_mlp").run(config)
    assert metrics["precision"] == "mixed_bfloat16"
    assert metrics["timing"]["step_ms_median"] > 0
    # One call of the train function runs two steps: input wait is not measurable.
    assert metrics["timing"]["input_wait_fraction"] is None


def test_cifar10_cnn_decays_its_rate_as_keras_2_did(tiny_config):
    """Keras 2's RMSprop(lr=1e-4, decay=1e-6): lr / (1 + 1e-6 * step), so the
    rate is halved after a million steps."""
    optimizer = recipes.load("cifar10_cnn").build(tiny_config("cifar10_cnn")).model.optimizer
    assert isinstance(optimizer, keras.optimizers.RMSprop)
    assert optimizer.epsilon == 1e-14  # Keras 2's sqrt(v) + 1e-7, as sqrt(v + 1e-14)
    assert float(optimizer.learning_rate) == pytest.approx(1e-4)
    optimizer.iterations.assign(10**6)
    assert float(optimizer.learning_rate) == pytest.approx(0.5e-4)
