"""The convolutional network of the Keras MNIST example."""

import keras
from keras import layers


def mnist_cnn(input_shape, num_classes, filters=(32, 64), dense_units=128,
              conv_dropout=0.25, dense_dropout=0.5, name="mnist_cnn"):
    """Builds unpadded 3x3 convolutions, one max-pool, then a dense head, as
    Keras' `examples/mnist_cnn.py` does.

    Args:
        input_shape: shape of one image, e.g. `(28, 28, 1)`.
        num_classes: number of output classes.
        filters: filters of each 3x3 convolution, in order.
        dense_units: width of the hidden dense layer.
        conv_dropout: dropout rate after the max-pool.
        dense_dropout: dropout rate after the hidden dense layer.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    inputs = keras.Input(shape=input_shape, name="image")
    x = inputs
    for index, count in enumerate(filters, start=1):
        x = layers.Conv2D(count, 3, activation="relu", name=f"conv{index}")(x)
    x = layers.MaxPooling2D(name="pool")(x)
    x = layers.Dropout(conv_dropout, name="conv_dropout")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(dense_units, activation="relu", name="dense")(x)
    x = layers.Dropout(dense_dropout, name="dense_dropout")(x)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32",
                           name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)
