"""The three data sources and the offline failure, without any download."""

import keras
import numpy as np
import pytest
import tensorflow_datasets as tfds

from keras_course_recipes import recipe_config, harness

from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes import folder as rfolder


def data_config(*overrides):
    return recipe_config.resolve("cifar10_cnn", overrides=["data.batch_size=8", *overrides],
                           announce=lambda line: None)["data"]


def test_synthetic_batches_have_the_dataset_shapes():
    data = rdata.load(data_config("data.source=synthetic", "data.synthetic_examples=40"))
    images, labels = next(iter(data.train))
    assert images.shape == (8, 32, 32, 3) and images.dtype == "float32"
    assert 0.0 <= float(np.min(images)) and float(np.max(images)) <= 1.0
    assert labels.shape == (8,) and int(np.max(labels)) < 10
    assert data.num_classes == 10 and data.steps_per_epoch == 40 // 8
    # Evaluation keeps every example; only training drops the last partial batch.
    assert sum(int(x.shape[0]) for x, _ in data.test) == 4
    # Autotuning's thread held the end of `fit` for 16 s on 2 cores: it stays off.
    assert not any(split.options().autotune.enabled
                   for split in (data.train, data.validation, data.test))


def write_folder(root, classes=("cat", "dog"), per_class=6, splits=("train", "test"),
                 size=(40, 50)):
    rng = np.random.default_rng(0)
    for split in splits:
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True)
            for index in range(per_class):
                pixels = rng.integers(0, 256, size=(*size, 3), dtype=np.uint8)
                keras.utils.save_img(folder / f"{index}.png", pixels)


def test_folder_source_resizes_to_the_recipe_input(tmp_path):
    write_folder(tmp_path)
    data = rdata.load(data_config("data.source=folder", f"data.path={tmp_path}",
                                  "data.validation_split=0.25", "data.batch_size=4"))
    images, labels = next(iter(data.train))
    assert images.shape == (4, 32, 32, 3)
    assert data.num_classes == 2
    assert data.train_examples == 9  # 75% of 12
    assert sum(int(x.shape[0]) for x, _ in data.test) == 12


def test_folder_images_are_decoded_once_and_cached_until_the_folder_changes(tmp_path, capsys):
    write_folder(tmp_path)
    config = data_config("data.source=folder", f"data.path={tmp_path}",
                         "data.validation_split=0.25", "data.batch_size=4")
    first = rdata.load(config)
    assert capsys.readouterr().out.count("decoding the 12 images") == 2  # train/ and test/
    assert (tmp_path / ".cache" / "train-32x32x3.npz").exists()

    again = rdata.load(config)
    assert "decoding" not in capsys.readouterr().out
    for (a, _), (b, _) in zip(first.validation, again.validation):
        np.testing.assert_array_equal(a, b)

    keras.utils.save_img(tmp_path / "train" / "cat" / "new.png",
                         np.zeros((40, 50, 3), dtype=np.uint8))
    changed = rdata.load(config)
    assert "decoding the 13 images" in capsys.readouterr().out
    assert changed.train_examples == 13 - round(13 * 0.25)


def test_folder_images_keep_their_pixels_and_class_labels(tmp_path):
    write_folder(tmp_path, classes=("a", "b"), per_class=3, size=(32, 32))
    images, labels, classes = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    assert classes == ["a", "b"] and labels.tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_array_equal(images[4], keras.utils.img_to_array(
        keras.utils.load_img(tmp_path / "train" / "b" / "1.png")).astype(np.uint8))


def test_validation_split_zero_trains_on_every_training_image_and_validates_on_test(tmp_path):
    """The Keras examples' protocol: all of train/ trains, test/ validates."""
    write_folder(tmp_path)
    data = rdata.load(data_config("data.source=folder", f"data.path={tmp_path}",
                                  "data.validation_split=0", "data.batch_size=4"))
    assert data.train_examples == 12 and data.validated_on == data.evaluated_on == "test"
    _, _, expected = rfolder.folder_arrays(tmp_path / "test", (32, 32, 3))
    validation = np.concatenate([labels for _, labels in data.validation])
    test = np.concatenate([labels for _, labels in data.test])
    np.testing.assert_array_equal(validation, test)
    assert len(validation) == 12

    held_out = rdata.load(data_config("data.source=folder", f"data.path={tmp_path}",
                                      "data.validation_split=0.25", "data.batch_size=4"))
    assert held_out.train_examples == 9 and held_out.validated_on == "held_out"


def test_validation_split_zero_on_tensorflow_datasets_uses_the_whole_train_split():
    with tfds.testing.mock_data(num_examples=40):
        data = rdata.load(data_config("data.source=tfds", "data.validation_split=0"))
    assert data.train_examples == 40 and data.validated_on == "test"


@pytest.mark.slow
def test_without_a_test_folder_a_run_evaluates_on_the_validation_images(tmp_path, tiny_config):
    write_folder(tmp_path / "images", splits=("train",), per_class=10)
    config = tiny_config("cifar10_cnn", "data.source=folder", f"data.path={tmp_path / 'images'}",
                         "data.batch_size=4", "data.augment=[]")
    metrics = harness.train(config)
    assert metrics["evaluated_on"] == "validation"
    # The same images, the same final weights: the last epoch's validation loss.
    assert metrics["test"]["loss"] == pytest.approx(metrics["final"]["val_loss"], rel=1e-5)


@pytest.mark.slow
def test_folder_source_trains_a_recipe(tmp_path, tiny_config):
    write_folder(tmp_path / "images", classes=("a", "b", "c"))
    config = tiny_config("cifar10_cnn", "data.source=folder",
                         f"data.path={tmp_path / 'images'}", "data.batch_size=4")
    metrics = harness.train(config)
    assert metrics["epochs_completed"] == 1
    # The folder's three classes size the classifier: 32x32 -> 30 -> 15 -> 13 -> 6.
    convolutions = (3 * 9 * 32 + 32) + (32 * 9 * 32 + 32) + (32 * 9 * 64 + 64) + (64 * 9 * 64 + 64)
    assert metrics["params"] == convolutions + (6 * 6 * 64 * 512 + 512) + (512 * 3 + 3)


@pytest.mark.parametrize("overrides, message", [
    (["data.source=folder"], "needs data.path=DIR"),
    (["data.source=folder", "data.path=/nonexistent"], "/nonexistent/train is missing"),
    (["data.source=folder", "data.path=/nonexistent"], "data.source=folder expects data.path/train/<class>/"),
    (["data.source=synthetic", "data.synthetic_examples=4", "data.validation_split=0.5"],
     "fewer than a batch of 8 (data.batch_size=8 x 1"),
    (["data.source=synthetic", "data.name=imagenet"], "Unknown data.name 'imagenet'"),
    (["data.source=folder", "data.path=/nonexistent", "data.validation_split=0"],
     "has no test/<class>/ folder"),
])
def test_bad_data_settings_are_user_errors(overrides, message):
    with pytest.raises(UserError) as error:
        rdata.load(data_config(*overrides))
    assert message in str(error.value)


def test_tfds_without_data_or_network_fails_fast_with_advice(tmp_path, monkeypatch):
    # Never download in a test: report the host unreachable, as it is in CI.
    asked = []
    monkeypatch.setattr(rdata, "_reachable", lambda host, port: asked.append((host, port)))
    with pytest.raises(UserError) as error:
        rdata.load(data_config("data.source=tfds", f"data.dir={tmp_path}"))
    # Fast: one look at TFDS's host, then the advice; no download was tried.
    assert asked == [rdata.TFDS_HOST]
    assert "cannot be reached, so it cannot be downloaded" in str(error.value)
    assert "data.source=synthetic" in str(error.value)
    assert "data.dir=PATH" in str(error.value)
    assert not list(tmp_path.rglob("*.tfrecord*")) and not (tmp_path / "downloads").exists()


@pytest.mark.slow
def test_the_data_benchmark_times_the_recipe_pipeline(tmp_path, monkeypatch, capsys):
    from keras_course_recipes.tools import data_bench as _data_bench

    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    result = _data_bench.benchmark("cifar10_cnn", steps=5, overrides=[
        "data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=8"])
    assert (result["batch_size"], result["augment_on"], result["train_examples"]) == (8, "host", 64)
    assert f"delivers {result['images_per_s']:,.0f} images/s" in capsys.readouterr().out


def test_without_tensorflow_datasets_the_tfds_source_is_one_line(monkeypatch):
    """An optional part of the kit: its absence is one line, not a traceback."""
    import sys

    from keras_course_recipes import data
    from keras_course_recipes.errors import UserError

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # as if not installed
    with pytest.raises(UserError, match="data.source=tfds needs tensorflow-datasets, not "
                                        "installed here: pip install tensorflow-datasets"):
        data._tfds_splits({**data.DEFAULTS, "name": "mnist"})


@pytest.mark.parametrize("augments", [False, True])
def test_without_tensorflow_the_advice_names_only_keys_the_recipe_has(augments, monkeypatch):
    """mnist_mlp has no data.augment_on: the line once advised it, and the recipe refused it."""
    monkeypatch.setattr(rdata, "HAS_TENSORFLOW", False)
    config = {"name": "mnist", "source": "tfds", **({"augment_on": "auto"} if augments else {})}
    with pytest.raises(UserError) as error:
        rdata.load(config)
    assert ("data.augment_on=device" in str(error.value)) == augments, error.value
    assert "data.source=folder or synthetic" in str(error.value)
