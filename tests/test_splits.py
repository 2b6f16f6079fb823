"""The validation split holds out exactly what data.validation_split says,
and never so little that its metrics mean nothing without a word."""

import pytest
import tensorflow_datasets as tfds

from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata

from test_data import data_config, write_folder


def test_tensorflow_datasets_validation_split_is_exact_not_whole_percent():
    with tfds.testing.mock_data(num_examples=1000):
        data = rdata.load(data_config("data.source=tfds", "data.validation_split=0.125"))
    assert data.train_examples == 875  # train[:88%] held out 120
    assert sum(int(images.shape[0]) for images, _ in data.validation) == 125


@pytest.mark.parametrize("source", ["tfds", "folder"])
def test_a_validation_split_that_holds_out_no_image_is_refused(source, tmp_path):
    write_folder(tmp_path)
    with tfds.testing.mock_data(num_examples=1000), pytest.raises(
            UserError, match="validation_split=0.0001 of .* holds out no image"):
        rdata.load(data_config(f"data.source={source}", f"data.path={tmp_path}",
                               "data.validation_split=0.0001", "data.batch_size=4"))


def test_a_validation_split_of_a_few_images_is_warned_about(capsys):
    with tfds.testing.mock_data(num_examples=1000):
        rdata.load(data_config("data.source=tfds", "data.validation_split=0.005"))
    assert ("warning: data.validation_split=0.005 of the 1,000 images of cifar10's train split "
            "holds out 5 image(s)") in capsys.readouterr().out
