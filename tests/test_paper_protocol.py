"""densenet_cifar100 follows Huang et al.'s code where the data allows: all
50,000 training images, Torch's batch-norm momentum 0.1, and crops padded
with the mean colour, as its normalized-then-zero-padded images are."""

import numpy as np
import pytest
import tensorflow as tf

from keras_course_recipes import recipe_config
from keras_course_recipes.errors import UserError
from keras_course_recipes import augment as raugment


def test_the_paper_recipe_trains_on_every_image_with_its_momentum_and_padding():
    paper = recipe_config.resolve("densenet_cifar100", announce=lambda line: None)
    assert paper["data"]["validation_split"] == 0
    assert paper["model"]["batch_norm_momentum"] == 0.9  # Torch's 0.1
    assert paper["data"]["augment"][0] == {"pad_crop": {"fill": "mean"}}
    # The CPU recipe keeps the protocol its results were measured with.
    cpu = recipe_config.resolve("densenet_cifar10_wide", announce=lambda line: None)
    assert cpu["data"]["validation_split"] == 0.1 and cpu["data"]["augment"][0] == "pad_crop"


def mean_padded(images):
    """`images` padded by 4 with their batch's mean colour, as NumPy does it."""
    mean = images.mean(axis=(0, 1, 2))
    return np.stack([np.pad(images[..., c], [(0, 0), (4, 4), (4, 4)], constant_values=mean[c])
                     for c in range(3)], axis=-1)


@pytest.mark.parametrize("path", ["tf.data", "keras.ops"])
def test_pad_crop_with_fill_mean_pads_with_the_batch_mean_colour(path):
    rng = np.random.default_rng(0)
    images = rng.uniform(size=(16, 32, 32, 3)).astype("float32")
    if path == "tf.data":
        augment = raugment.augmentation([{"pad_crop": {"fill": "mean"}}], seed=1)
        cropped, _ = augment(tf.constant(images), tf.zeros((16, 10)))
    else:
        cropped = raugment.PadCrop(4, fill="mean", seed=1)(images)
    cropped, padded = np.asarray(cropped), mean_padded(images)
    shifted = 0
    for index in range(16):
        matches = [(dy, dx) for dy in range(9) for dx in range(9)
                   if np.allclose(cropped[index], padded[index, dy:dy + 32, dx:dx + 32], atol=1e-6)]
        assert matches, f"image {index} is not a crop of the mean-padded image"
        shifted += matches[0] != (4, 4)
    assert shifted > 8


def test_pad_crop_refuses_an_unknown_fill():
    with pytest.raises(UserError, match="pad_crop's fill must be one of black, mean"):
        raugment.augmentation([{"pad_crop": {"fill": "grey"}}], seed=1)
