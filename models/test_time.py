"""Test-time augmentation: a model's predictions averaged over each image and its mirror."""

import keras
from keras import ops


def flip_averaged(network):
    """Wraps `network` so it predicts the mean of its class probabilities on
    each image and on the image flipped left to right.

    A horizontally flipped photograph is as likely as the original, and the
    two predictions err differently: their mean is a little more accurate, at
    twice the cost of a prediction. Training is not affected; the wrapper
    shares `network`'s weights.

    Args:
        network: a built model that takes `(batch, height, width, channels)` images.

    Returns:
        An uncompiled `keras.Model` with `network`'s input and output shapes.
    """
    images = keras.Input(shape=network.input_shape[1:], name="image")
    mirrored = ops.flip(images, axis=2)  # axis 2 is width
    averaged = keras.layers.Average(name="flip_average", dtype="float32")(
        [network(images), network(mirrored)])
    return keras.Model(images, averaged, name=f"{network.name}_flip_averaged")
