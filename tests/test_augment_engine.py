"""data.augment_engine=auto, the default: keras-cv on TensorFlow, Keras
core's layers on JAX, where keras-cv's cannot run in the step; metrics.json
says which (a DenseNet's, trained on JAX: tests/test_jax_backend.py)."""

import sys

import keras
import keras_cv
import pytest

from keras_course_recipes import recipe_config

from keras_course_recipes.errors import UserError
from keras_course_recipes import augment as raugment


def test_auto_is_the_default_and_follows_the_backend():
    assert recipe_config.resolve("cifar10_cnn", announce=print)["data"]["augment_engine"] == "auto"
    on_tensorflow = raugment.augmentation(["flip"], engine="auto")
    assert on_tensorflow.engine == "keras_cv"
    assert isinstance(on_tensorflow.layers[0], keras_cv.layers.RandomFlip)
    assert raugment.resolve_engine("auto", "jax") == "keras"
    assert type(raugment.augmentation(["flip"], engine="keras").layers[0]) is keras.layers.RandomFlip
    assert raugment.augmentation(["flip"], engine="keras_cv").engine == "keras_cv"


def test_without_keras_cv_auto_takes_keras_core_s_layers_and_says_so(monkeypatch, capsys):
    """keras-cv is optional: a kit installed without it still augments."""
    from keras_course_recipes import augment

    monkeypatch.setitem(sys.modules, "keras_cv", None)  # not importable, as if not installed
    assert augment.resolve_engine("auto", "tensorflow") == "keras"
    assert "note: keras-cv is not installed: augmentation runs on Keras core's layers" in (
        capsys.readouterr().out)
    with pytest.raises(UserError, match="data.augment_engine=keras_cv needs keras-cv, not "
                                        "installed here: make setup, or set "
                                        "data.augment_engine=keras"):
        augment._layers("keras_cv")
