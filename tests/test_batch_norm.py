"""FusedBatchNormalization trains as keras.layers.BatchNormalization does."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_course_recipes.models.densenet_whitened import FusedBatchNormalization
from keras_course_recipes.augment import network_of
import keras_course_recipes as kit
def _pair(scale, momentum=0.6):
    keras_layer = keras.layers.BatchNormalization(momentum=momentum, epsilon=1e-5, scale=scale)
    fused = FusedBatchNormalization(momentum=momentum, epsilon=1e-5, scale=scale)
    for layer in (keras_layer, fused):
        layer.build((None, 6, 6, 5))
    beta = np.random.default_rng(0).normal(size=5).astype("float32")
    for layer in (keras_layer, fused):
        layer.beta.assign(beta)
        if scale:
            layer.gamma.assign(beta + 2)
    return keras_layer, fused


def _train_step(layer, inputs):
    inputs = tf.constant(inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = layer(inputs, training=True)
        # A weight per element: with one per channel, the input's gradient is exactly 0 in
        # theory, and what is compared is float32 rounding, which differs by CPU.
        weights = np.random.default_rng(0).normal(size=outputs.shape).astype("float32")
        loss = tf.reduce_sum(outputs * tf.cast(weights, outputs.dtype))
    grads = tape.gradient(loss, [inputs, *layer.trainable_variables])
    return outputs.numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("scale", [True, False])
def test_a_training_step_equals_keras_layers(scale):
    inputs = np.random.default_rng(1).normal(3, 2, size=(8, 6, 6, 5)).astype("float32")
    keras_layer, fused = _pair(scale)
    expected, expected_grads = _train_step(keras_layer, inputs)
    outputs, grads = _train_step(fused, inputs)
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads):
        np.testing.assert_allclose(grad, expected_grad, atol=1e-4)
    # The moving statistics, with the biased batch variance.
    np.testing.assert_allclose(fused.moving_mean.numpy(), keras_layer.moving_mean.numpy(),
                               rtol=1e-6)
    np.testing.assert_allclose(fused.moving_variance.numpy(),
                               keras_layer.moving_variance.numpy(), rtol=1e-5)
    # Inference reads the moving statistics, as Keras' does.
    np.testing.assert_allclose(fused(inputs, training=False), keras_layer(inputs, training=False),
                               atol=1e-5)


def test_bfloat16_activations_stay_bfloat16_and_close():
    inputs = np.random.default_rng(2).normal(size=(8, 6, 6, 5)).astype("float32")
    keras_layer, _ = _pair(scale=False)
    fused = FusedBatchNormalization(momentum=0.6, epsilon=1e-5, scale=False,
                                           dtype="mixed_bfloat16")
    fused.build((None, 6, 6, 5))
    fused.beta.assign(keras_layer.beta.numpy())
    outputs = fused(tf.cast(inputs, "bfloat16"), training=True)
    assert outputs.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(outputs, "float32"), keras_layer(inputs, training=True),
                               atol=0.05)


def test_it_survives_saving(tmp_path):
    model = keras.Sequential([keras.Input((4, 4, 2)),
                              FusedBatchNormalization(momentum=0.6, scale=False)])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert type(loaded.layers[0]) is FusedBatchNormalization
    assert loaded.layers[0].momentum == 0.6


@pytest.mark.parametrize("fused, kind", [("true", FusedBatchNormalization),
                                         ("false", keras.layers.BatchNormalization)])
def test_densenet_cifar10_cpu_builds_the_batch_norm_its_config_names(fused, kind, tiny_config):
    config = tiny_config("densenet_cifar10_cpu", f"model.fused_batch_norm={fused}")
    model = network_of(kit.load("densenet_cifar10_cpu").build(config).model)
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and all(type(layer) is kind for layer in norms)
