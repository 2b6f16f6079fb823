"""FusedActivation: Keras' activation, its ops fused by XLA on TensorFlow."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import output_and_gradients
from keras_course_recipes.models.densenet_whitened import FusedActivation
from keras_course_recipes.augment import network_of
import keras_course_recipes as kit
@pytest.mark.parametrize("activation", ["gelu", "relu", "tanh"])
def test_it_computes_keras_activation_and_its_gradient(activation):
    x = tf.constant(np.random.default_rng(0).normal(scale=3, size=(2, 5, 5, 3)), tf.float32)
    fused = output_and_gradients(FusedActivation(activation), x)
    plain = output_and_gradients(keras.layers.Activation(activation), x)
    for got, want in zip(fused, plain):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Eagerly it is Keras' layer itself.
    np.testing.assert_array_equal(FusedActivation(activation)(x),
                                  keras.layers.Activation(activation)(x))


def test_in_a_graph_the_activation_is_one_xla_compiled_call():
    graph = tf.function(FusedActivation("gelu")).get_concrete_function(
        tf.TensorSpec((2, 3), tf.float32)).graph
    calls = [op for op in graph.get_operations() if op.type == "PartitionedCall"]
    assert len(calls) == 1 and calls[0].get_attr("_XlaMustCompile")
    graph = tf.function(keras.layers.Activation("gelu")).get_concrete_function(
        tf.TensorSpec((2, 3), tf.float32)).graph
    assert not any(op.type == "PartitionedCall" for op in graph.get_operations())


def test_it_survives_saving(tmp_path):
    model = keras.Sequential([keras.Input((3,)), FusedActivation("gelu")])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert type(loaded.layers[0]) is FusedActivation
    x = np.linspace(-3, 3, 6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("fused, kind", [("true", FusedActivation),
                                         ("false", keras.layers.Activation)])
def test_densenet_cifar10_cpu_builds_the_activation_its_config_names(fused, kind, tiny_config):
    config = tiny_config("densenet_cifar10_cpu", f"model.fused_activation={fused}")
    model = network_of(kit.load("densenet_cifar10_cpu").build(config).model)
    gelus = [layer for layer in model.layers if layer.name.endswith("_gelu")]
    assert len(gelus) == 7 and all(type(layer) is kind for layer in gelus)
