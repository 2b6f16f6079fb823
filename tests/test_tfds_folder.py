"""`tfds-to-folder` writes tensorflow-datasets' splits as the folder that
data.source=folder reads, pixel for pixel, on tfds' mock data."""

import importlib.util

import numpy as np
import pytest
import tensorflow_datasets as tfds

from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes.tools import tfds_folder


def _arrays(split):
    images, labels = zip(*split.as_numpy_iterator())
    return np.stack(images), np.array(labels)


@pytest.mark.parametrize("name", ["cifar10", "fashion_mnist"])
def test_the_folder_holds_every_image_losslessly_with_its_class(name, tmp_path, capsys):
    # 200 random labels: every class has images, as in the real splits.
    with tfds.testing.mock_data(num_examples=200):
        expected = [_arrays(split) for split in
                    tfds.load(name, split=["train", "test"], as_supervised=True)]
        assert tfds_folder.export(name, tmp_path) == {"train": 200, "test": 200}
    config = {**rdata.DEFAULTS, "source": "folder", "path": str(tmp_path), "name": name,
              "validation_split": 0}
    train, _, test, classes, evaluated_on = rdata.source_splits(
        config, rdata.DATASETS[name][0], 10, seed=0)
    assert evaluated_on == "test" and classes == 10
    for (images, labels), (want_images, want_labels) in zip((train, test), expected):
        # The same images, each with its label (the folder reads them in its own order).
        found = sorted(zip(images.reshape(len(images), -1).tolist(), labels.tolist()))
        wanted = sorted(zip(want_images.reshape(len(want_images), -1).tolist(),
                            want_labels.tolist()))
        assert found == wanted
    assert "done: train with data.source=folder" in capsys.readouterr().out


def test_fashion_mnist_keeps_its_class_numbers_in_sorted_folders(tmp_path):
    with tfds.testing.mock_data(num_examples=200):
        tfds_folder.export("fashion_mnist", tmp_path)
    folders = sorted(path.name for path in (tmp_path / "train").iterdir())
    assert folders[0] == "0_T-shirt_top" and folders[9] == "9_Ankle boot"


def test_an_interrupted_split_starts_again_and_a_finished_one_is_kept(tmp_path, capsys):
    (tmp_path / "train" / "cat").mkdir(parents=True)
    (tmp_path / ".test.partial" / "cat").mkdir(parents=True)
    (tmp_path / ".test.partial" / "cat" / "0_cat.png").write_bytes(b"half")
    with tfds.testing.mock_data(num_examples=6):
        assert tfds_folder.export("cifar10", tmp_path) == {"test": 6}
    out = capsys.readouterr().out
    assert "train is there already: kept" in out and "started again" in out
    assert not (tmp_path / ".test.partial").exists()
    assert len(list((tmp_path / "test").glob("*/*.png"))) == 6


@pytest.mark.parametrize("setup, message", [
    (lambda root: None, "Unknown dataset 'cifar11'"),
    (lambda root: [(root / split).mkdir(parents=True) for split in ("train", "test")],
     "holds train/ and test/ already"),
    (lambda root: root.write_text("x"), "is a file"),
])
def test_what_cannot_be_written_is_one_line(setup, message, tmp_path):
    root = tmp_path / "images"
    setup(root)
    with pytest.raises(UserError, match=message):
        tfds_folder.export("cifar11" if "Unknown" in message else "cifar10", root)


def test_without_tensorflow_datasets_it_is_one_line(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "tensorflow_datasets" else real(name, *args))
    with pytest.raises(UserError, match="needs tensorflow-datasets, not installed here"):
        tfds_folder.export("cifar10", tmp_path)


def test_without_the_dataset_or_a_network_it_advises_its_own_option(tmp_path, monkeypatch):
    def not_prepared(*args, download, **kwargs):
        assert not download  # tests never download
        raise AssertionError("Dataset cifar10: could not find data in " + str(tmp_path))

    monkeypatch.setattr(tfds, "load", not_prepared)
    monkeypatch.setattr(rdata, "_reachable", lambda *args: False)
    with pytest.raises(UserError, match="cannot be downloaded") as error:
        tfds_folder.export("cifar10", tmp_path / "images", data_dir=tmp_path)
    assert "pass --data-dir DIR" in str(error.value)
    assert "data.source" not in str(error.value) and "data.dir" not in str(error.value)
