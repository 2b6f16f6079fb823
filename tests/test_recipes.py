"""Every registered recipe trains: each module in every execution mode on
synthetic data, and every recipe name on tensorflow-datasets' mock data."""

import csv
import json
import math
import subprocess

import keras
import pytest
import tensorflow_datasets as tfds

import keras_course_recipes as kit
from keras_course_recipes.callbacks.timing import EPOCH_KEYS
from conftest import ROOT, run_with
from keras_course_recipes import data as rdata
from keras_course_recipes import harness
from keras_course_recipes.augment import network_of

# graph, the default, trains every recipe name below (tensorflow-datasets'
# mock data) and every module copied (tests/test_copy.py). Each of the other
# modes' runs is also one of the precisions the docs document: every module
# trains in every mode and under every precision, a run each.
PRECISION_OF_MODE = {"eager": "mixed_float16", "xla": "mixed_bfloat16"}
MODULES = sorted({kit.module_of(name) for name in kit.names()})
TIMING_KEYS = {"trace_s", "step_ms_median", "images_per_s", "input_wait_fraction", "epoch_s"}
pytestmark = pytest.mark.slow  # every test here trains


@pytest.mark.parametrize("name", MODULES)
def test_build_says_what_run_trains_and_trains_nothing(name, tiny_config, tmp_path):
    """`build(config)`: the compiled, untrained model for the data, and
    nothing written."""
    experiment = kit.load(name).build(tiny_config(name, "train.epochs=3"))
    model, data = experiment.model, experiment.data
    assert model.compiled and int(model.optimizer.iterations) == 0
    network = network_of(model)
    assert tuple(network.input_shape[1:]) == data.input_shape
    assert network.output_shape[-1] == data.num_classes
    assert data.steps_per_epoch == 2
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("mode", PRECISION_OF_MODE)
@pytest.mark.parametrize("name", MODULES)
def test_recipe_trains_in_each_mode_and_precision(name, mode, tiny_config, tmp_path):
    """The mode, and the precision: the layers compute in the half type, and
    the loss stays finite (docs/densenet.md shows xla with mixed_bfloat16)."""
    precision = PRECISION_OF_MODE[mode]
    config = tiny_config(name, f"execution.mode={mode}", f"execution.precision={precision}",
                         "train.epochs=2")

    metrics = harness.train(config)

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
    assert metrics["precision"] == precision
    assert math.isfinite(metrics["final"]["loss"])
    saved = keras.saving.load_model(run_dir / "checkpoints" / "last.keras")
    computes = {layer.compute_dtype for layer in network_of(saved).layers if layer.weights}
    assert precision.removeprefix("mixed_") in computes, computes


@pytest.mark.parametrize("name", kit.names())
def test_recipe_loads_tensorflow_datasets(name, tiny_config):
    """The real tfds loading code, fed by tensorflow-datasets' mock data; for
    a YAML recipe, also its settings on its module's code."""
    config = tiny_config(name, "data.source=tfds")
    probe = CallCount()
    with tfds.testing.mock_data(num_examples=40):
        metrics = run_with(kit.load(name), config, probe)
    # tfds' 40 mock examples less the validation split, not 64 synthetic ones.
    assert metrics["train_examples"] == 40 - round(40 * config["data"]["validation_split"])
    # The recipe's own dataset: its YAML's data.name, on its module's model.
    shape, classes = rdata.DATASETS[config["data"]["name"]]
    network = network_of(probe.model)
    assert (tuple(network.input_shape[1:]), network.output_shape[-1]) == (shape, classes)
    assert metrics["epochs_completed"] == 1 and math.isfinite(metrics["final"]["loss"])
    assert set(metrics["test"]) == {"loss", "accuracy"}


def test_a_recipe_learns_learnable_synthetic_data(tiny_config):
    """Each synthetic class is its own template plus noise: well above the
    10% of chance after a few epochs."""
    config = tiny_config("mnist_mlp", "data.synthetic_examples=640", "data.batch_size=32",
                         "train.steps_per_epoch=null", "train.epochs=3")
    metrics = harness.train(config)
    assert metrics["test"]["accuracy"] > 0.5


def tensorboard_tags(log_dir):
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    return set(events.Tags()["tensors"])


def test_metrics_json_contract(tiny_config, tmp_path):
    metrics = harness.train(
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
    # The run's images/s against each epoch's in history.csv: 3 steady steps
    # of 16 images in the first epoch (4 less the tracing one), 4 in the second.
    with (tmp_path / "run" / "history.csv").open() as file:
        per_epoch = [float(row["time_images_per_s"]) for row in csv.DictReader(file)]
    seconds = [16 * 3 / per_epoch[0], 16 * 4 / per_epoch[1]]
    assert timing["images_per_s"] == pytest.approx(16 * 7 / sum(seconds), rel=1e-6)
    assert len(timing["epoch_s"]) == 2
    assert set(metrics["versions"]) == {"keras-course-recipes", "commit", "tensorflow", "keras",
                                        "keras-cv"}
    if (ROOT / ".git").exists():  # a clone: the commit it has checked out, as git names it
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        assert metrics["versions"]["commit"] == head[:12]
    assert metrics["versions"]["tensorflow"].startswith("2.21")
    assert {"gpus", "cpu", "cpu_generation", "cpu_cores", "cpu_features"} <= set(metrics["device"])


class CallCount(keras.callbacks.Callback):
    """Counts the calls of the train function: Keras calls the batch hooks once per call."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def on_train_batch_end(self, batch, logs=None):
        self.calls += 1


def test_mixed_precision_and_steps_per_execution(tiny_config):
    config = tiny_config("mnist_mlp", "execution.precision=mixed_bfloat16",
                         "execution.steps_per_execution=2", "train.steps_per_epoch=4")
    counter = CallCount()
    metrics = run_with(kit.load("mnist_mlp"), config, counter)
    assert "bfloat16" in {layer.compute_dtype for layer in counter.model.layers if layer.weights}
    assert int(counter.model.optimizer.iterations) == 4 and counter.calls == 2
    # The first call (two steps) traces; the second call's time is split
    # over its two steps, which the timing counts as two equal steady steps
    # (callbacks/timing.py's own arithmetic: tests/test_callbacks.py).
    timing = metrics["timing"]
    assert timing["step_ms_p10"] == timing["step_ms_median"] == timing["step_ms_p90"]
    # One call of the train function runs two steps: input wait is not measurable.
    assert timing["input_wait_fraction"] is None


def test_cifar10_cnn_decays_its_rate_as_keras_2_did(tiny_config):
    """Keras 2's RMSprop(lr=1e-4, decay=1e-6): lr / (1 + 1e-6 * step), so the
    rate is halved after a million steps."""
    optimizer = kit.load("cifar10_cnn").build(tiny_config("cifar10_cnn")).model.optimizer
    assert isinstance(optimizer, keras.optimizers.RMSprop)
    assert optimizer.epsilon == 1e-14  # Keras 2's sqrt(v) + 1e-7, as sqrt(v + 1e-14)
    assert float(optimizer.learning_rate) == pytest.approx(1e-4)
    optimizer.iterations.assign(10**6)
    assert float(optimizer.learning_rate) == pytest.approx(0.5e-4)
