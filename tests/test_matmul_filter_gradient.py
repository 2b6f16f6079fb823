"""MatmulFilterGradientConv2D: Keras' convolution, its filter gradient as one
matmul per kernel tap on TensorFlow."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes as kit
from conftest import output_and_gradients
from keras_course_recipes.models.densenet_whitened import MatmulFilterGradientConv2D, densenet_whitened
from keras_course_recipes.augment import network_of


@pytest.mark.parametrize("kernel_size, dtype",
                         [(3, "float32"), (5, "float32"), (3, "mixed_bfloat16")])
def test_it_computes_keras_convolution_and_its_gradients(kernel_size, dtype):
    x = tf.constant(np.random.default_rng(0).normal(size=(4, 6, 7, 5)), tf.float32)
    made = [cls(8, kernel_size, padding="same", use_bias=False, dtype=dtype,
                kernel_initializer=keras.initializers.GlorotUniform(seed=1))
            for cls in (MatmulFilterGradientConv2D, keras.layers.Conv2D)]
    for layer in made:
        layer.build(x.shape)
    ours, keras_own = (output_and_gradients(layer, x, [layer.kernel]) for layer in made)
    tolerance = 1e-4 if dtype == "float32" else 3e-2  # bfloat16 keeps 8 bits of mantissa
    for got, want in zip(ours, keras_own):
        assert got.dtype == want.dtype
        scale = float(tf.reduce_max(tf.abs(tf.cast(want, tf.float32))))
        np.testing.assert_allclose(tf.cast(got, tf.float32), tf.cast(want, tf.float32),
                                   atol=tolerance * scale)


def test_its_graph_computes_the_filter_gradient_with_matmuls():
    def gradient_ops(layer):
        layer.build((2, 5, 5, 4))
        @tf.function
        def gradient(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(layer(x))
            return tape.gradient(loss, layer.kernel)
        graph = gradient.get_concrete_function(tf.TensorSpec((2, 5, 5, 4))).graph
        return {op.type for op in graph.get_operations()}

    ours = gradient_ops(MatmulFilterGradientConv2D(6, 3, padding="same"))
    assert "MatMul" in ours and "Conv2DBackpropFilter" not in ours
    assert "Conv2DBackpropFilter" in gradient_ops(keras.layers.Conv2D(6, 3, padding="same"))
    # Strides it does not handle: Keras' own convolution and gradient.
    assert "Conv2DBackpropFilter" in gradient_ops(
        MatmulFilterGradientConv2D(6, 3, strides=2, padding="same"))


def test_the_network_uses_it_on_small_maps_only_and_saves_it(tmp_path):
    images = np.random.default_rng(0).random((8, 32, 32, 3)).astype("float32")
    model = densenet_whitened((32, 32, 3), 10, images, widths=(8, 8, 8), growth_rates=(4, 4, 4))
    matmul = {layer.name for layer in model.layers if isinstance(layer, MatmulFilterGradientConv2D)}
    assert matmul == {"block2_layer1_conv", "block3_conv", "block3_layer1_conv"}  # 7x7 and 3x3 maps
    plain = densenet_whitened((32, 32, 3), 10, images, widths=(8, 8, 8), growth_rates=(4, 4, 4),
                              matmul_filter_gradient=False)
    assert not any(isinstance(layer, MatmulFilterGradientConv2D) for layer in plain.layers)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.get_layer("block3_conv"), MatmulFilterGradientConv2D)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0),
                               atol=1e-6)


@pytest.mark.parametrize("setting, small_maps", [("true", 3), ("false", 0)])
def test_densenet_cifar10_cpu_builds_what_its_config_names(setting, small_maps, tiny_config):
    config = tiny_config("densenet_cifar10_cpu", f"model.matmul_filter_gradient={setting}")
    model = network_of(kit.load("densenet_cifar10_cpu").build(config).model)
    layers = [layer for layer in model.layers if isinstance(layer, MatmulFilterGradientConv2D)]
    assert len(layers) == small_maps
