"""Progressive resizing (`data.early_size`, `data.early_epochs`): the first
epochs train on shrunk images, the same stream in the same order, from any
step a run resumes at; the whitened network takes either size."""

import itertools

import numpy as np
import pytest

from keras_course_recipes import data as rdata
from keras_course_recipes import recipe_config
from keras_course_recipes.errors import UserError
from keras_course_recipes.models import densenet_whitened as whitened  # not its test_time_views: pytest would collect it


def data_config(*overrides):
    return recipe_config.resolve(
        "cifar10_record", overrides=["data.source=synthetic", "data.synthetic_examples=64",
                                     "data.batch_size=8", *overrides],
        announce=lambda line: None)["data"]


def stream(data, steps):
    return [(tuple(images.shape), np.asarray(labels)) for images, labels
            in itertools.islice(data.train, steps)]


def test_the_first_epochs_are_shrunk_and_the_stream_is_the_same():
    full = rdata.load(data_config(), seed=3, one_hot=True)
    early = rdata.load(data_config("data.early_size=16", "data.early_epochs=2"), seed=3,
                       one_hot=True)
    steps = full.steps_per_epoch  # 7: 57 training images in batches of 8
    found, expected = stream(early, 3 * steps), stream(full, 3 * steps)
    assert [shape for shape, _ in found] == [(8, 16, 16, 3)] * 2 * steps + [(8, 32, 32, 3)] * steps
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(found, expected))
    assert (full.input_shape, early.input_shape) == ((32, 32, 3), (None, None, 3))


def test_a_resumed_run_shrinks_only_the_early_steps_it_has_left():
    config = data_config("data.early_size=16", "data.early_epochs=2")
    whole = rdata.load(config, seed=3, one_hot=True)
    resumed = rdata.load(config, seed=3, one_hot=True, initial_epoch=1)
    steps = whole.steps_per_epoch
    found, expected = stream(resumed, 2 * steps), stream(whole, 3 * steps)[steps:]
    assert [shape for shape, _ in found] == [shape for shape, _ in expected]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(found, expected))


@pytest.mark.parametrize("overrides, message", [
    (("data.early_size=32", "data.early_epochs=1"), "data.early_size=32 is not below the images' 32x32"),
    (("data.early_size=0",), "'data.early_size' must be at least 1"),
    (("data.early_epochs=-1",), "'data.early_epochs' must be at least 0"),
    (("data.early_epochs=2", "data.early_crop=true"),
     "data.early_epochs=2 and data.early_crop=true needs data.early_size"),
    (("data.early_size=16",), "data.early_size=16 with data.early_epochs=0 changes no epoch"),
])
def test_a_size_that_cannot_shrink_is_one_line(overrides, message):
    with pytest.raises(UserError, match=message):
        rdata.load(data_config(*overrides))


def test_the_whitened_network_takes_either_size_and_its_views_are_the_same():
    images = np.random.default_rng(0).random((4, 32, 32, 3)).astype("float32")
    open_size = whitened.densenet_whitened((None, None, 3), 10, images, widths=(8, 8, 8),
                                  growth_rates=(8, 8, 8))
    fixed = whitened.densenet_whitened((32, 32, 3), 10, images, widths=(8, 8, 8), growth_rates=(8, 8, 8))
    fixed.set_weights(open_size.get_weights())
    assert open_size(images[:, :16, :16]).shape == (4, 10)
    views = [np.asarray(whitened.test_time_views(model, translate=True)(images))
             for model in (open_size, fixed)]
    assert views[0].shape == (4, 6, 10)
    np.testing.assert_allclose(views[0], views[1], rtol=1e-5, atol=1e-6)


def test_a_recipe_whose_model_takes_one_size_refuses_the_keys_in_one_line():
    with pytest.raises(UserError, match="Unknown config key 'data.early_size'"):
        recipe_config.resolve("mnist_mlp", overrides=["data.early_size=14"],
                              announce=lambda line: None)


def test_early_crop_cuts_each_image_a_window_at_full_scale_the_same_on_resume():
    config = data_config("data.early_size=20", "data.early_epochs=2", "data.early_crop=true")
    full = rdata.load(data_config(), seed=3, one_hot=True)
    cropped = rdata.load(config, seed=3, one_hot=True)
    steps = full.steps_per_epoch
    batches = list(itertools.islice(cropped.train, 3 * steps))
    assert [tuple(images.shape) for images, _ in batches] == (
        [(8, 20, 20, 3)] * 2 * steps + [(8, 32, 32, 3)] * steps)
    corners = set()
    for (window, _), (image, _) in zip(batches[:2 * steps], itertools.islice(full.train, 2 * steps)):
        for one, whole in zip(np.asarray(window), np.asarray(image)):  # the pixels, not a resampling
            found = [(top, left) for top in range(13) for left in range(13)
                     if np.allclose(whole[top:top + 20, left:left + 20], one, atol=1e-6)]
            assert found, "a window that is no part of its image"
            corners.add(found[0])
    assert len(corners) > 10  # each image its own corner
    resumed = rdata.load(config, seed=3, one_hot=True, initial_epoch=1)
    for (a, _), (b, _) in zip(itertools.islice(resumed.train, steps), batches[steps:2 * steps]):
        np.testing.assert_array_equal(a, b)
