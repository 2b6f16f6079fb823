"""The DenseNet recipes: config layering of the YAML recipes, the learning-rate
schedules, model errors, normalization and the saved model."""

import keras
import numpy as np
import pytest

import keras_course_recipes as kit
from keras_course_recipes import recipe_config, harness
from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes.recipes.densenet_cifar100 import _schedule

MODERN = recipe_config.CONFIGS_DIR / "densenet_cifar100_modern.yaml"


def resolve(name, *overrides, files=()):
    return recipe_config.resolve(name, files, overrides, announce=lambda line: None)


def test_yaml_recipes_layer_over_their_module():
    paper, cifar10 = resolve("densenet_cifar100"), resolve("densenet_cifar10")
    assert kit.module_of("densenet_cifar10") == "densenet_cifar100"
    assert cifar10["recipe"] == "densenet_cifar10"
    assert (paper["data"]["name"], cifar10["data"]["name"]) == ("cifar100", "cifar10")
    # Everything else is the paper's protocol, from the module's YAML.
    assert {**cifar10, "recipe": None, "data": None} == {**paper, "recipe": None, "data": None}
    assert paper["model"]["variant"] == "densenet_bc100_k12"
    assert paper["train"]["schedule"] == "step"
    assert paper["data"]["augment"] == [{"pad_crop": {"fill": "mean"}}, "flip"]
    assert (paper["data"]["batch_size"], paper["train"]["epochs"], paper["train"]["lr"]) == (64, 300, 0.1)


def test_modern_config_runs_by_name_or_through_config():
    by_name = resolve("densenet_cifar100_modern")
    through_config = resolve("densenet_cifar100", files=[MODERN])
    assert {**by_name, "recipe": None} == {**through_config, "recipe": None}
    assert by_name["train"]["schedule"] == "cosine"
    assert by_name["train"]["label_smoothing"] == 0.1
    assert by_name["model"] == resolve("densenet_cifar100")["model"]  # same network
    with pytest.raises(UserError, match="written for the 'densenet_cifar100' recipe"):
        resolve("mnist_mlp", files=[MODERN])


def test_a_yaml_recipe_may_only_set_existing_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_config, "CONFIGS_DIR", tmp_path)
    (tmp_path / "typo.yaml").write_text("recipe: densenet_cifar100\ntrain:\n  warmup: 3\n")
    monkeypatch.setattr(kit, "CONFIGS_DIR", tmp_path)
    with pytest.raises(UserError, match="Unknown config key 'train.warmup'.*Did you mean train.warmup_epochs"):
        resolve("typo")


def learning_rates(schedule, steps):
    return [float(schedule(step)) for step in steps]


def test_step_schedule_divides_by_ten_at_half_and_three_quarters():
    train = resolve("densenet_cifar100", "train.epochs=4")["train"]
    schedule = _schedule(train, steps_per_epoch=10)
    assert learning_rates(schedule, [0, 19, 20, 29, 30, 39]) == pytest.approx(
        [0.1, 0.1, 0.01, 0.01, 0.001, 0.001])


def test_cosine_schedule_warms_up_then_decays_to_zero():
    train = resolve("densenet_cifar100_modern", "train.epochs=10", "train.warmup_epochs=2")["train"]
    schedule = _schedule(train, steps_per_epoch=10)
    rates = learning_rates(schedule, range(0, 101))
    assert rates[0] == 0.0 and rates[10] == pytest.approx(0.05)
    assert max(rates) == pytest.approx(0.1) and rates.index(max(rates)) == 20
    assert rates[60] == pytest.approx(0.05)  # half-way through the decay
    assert all(a >= b for a, b in zip(rates[20:], rates[21:])) and rates[100] == pytest.approx(0.0)


def test_constant_schedule_keeps_the_rate_after_its_warm_up():
    train = resolve("densenet_cifar100", "train.schedule=constant", "train.epochs=10")["train"]
    assert _schedule(train, steps_per_epoch=10) == 0.1
    warmed = _schedule({**train, "warmup_epochs": 2}, steps_per_epoch=10)
    rates = learning_rates(warmed, range(0, 101))
    assert rates[0] == 0.0 and rates[10] == pytest.approx(0.05)
    assert rates[20:] == pytest.approx([0.1] * 81)


@pytest.mark.parametrize("override, message", [
    ("model.variant=densenet121", "Unknown DenseNet variant 'densenet121'"),
    ("model.depth=17", "depth - 4 must be a positive multiple of 6"),
])
def test_model_errors_are_user_errors_before_anything_is_written(
        override, message, tiny_config, tmp_path):
    with pytest.raises(UserError, match=message):
        harness.train(tiny_config("densenet_cifar100", override))
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sequential_api_trains_and_the_checkpoint_loads(tiny_config, tmp_path):
    config = tiny_config("densenet_cifar10", "model.api=sequential",
                         "data.augment=[pad_crop,flip,mixup]")
    metrics = harness.train(config)
    functional = harness.train(
        tiny_config("densenet_cifar10", f"run.dir={tmp_path / 'functional'}"))
    assert metrics["trainable_params"] == functional["trainable_params"]
    assert metrics["recipe"] == "densenet_cifar10"

    model = keras.saving.load_model(tmp_path / "run" / "checkpoints" / "last.keras")
    assert isinstance(model, keras.Sequential)
    # The per-channel normalization holds the training images' statistics.
    data = rdata.load(config["data"], seed=0, one_hot=True)
    images = np.concatenate([x for x, _ in data.train_plain.as_numpy_iterator()])
    normalization = model.get_layer("normalization")
    np.testing.assert_allclose(np.ravel(normalization.mean), images.mean(axis=(0, 1, 2)), rtol=1e-4)
    np.testing.assert_allclose(np.ravel(normalization.variance), images.var(axis=(0, 1, 2)), rtol=1e-3)
    # The last checkpoint is the model the run evaluated.
    assert model.evaluate(data.test, return_dict=True, verbose=0)["loss"] == pytest.approx(
        metrics["test"]["loss"], rel=1e-4)
