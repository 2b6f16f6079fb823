"""A small convolutional network, as in the classic Keras CIFAR-10 example."""

import keras
from keras import layers


def simple_cnn(input_shape, num_classes, filters=(32, 64), dense_units=512,
               conv_dropout=0.25, dense_dropout=0.5, name="simple_cnn"):
    """Builds stages of two 3x3 convolutions and a max-pool, then a dense head.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`.
        num_classes: number of output classes.
        filters: convolution filters of each stage; each stage's unpadded
            convolution takes 2 pixels off and its pool halves the rest
            (32 -> 15 -> 6 for CIFAR-10).
        dense_units: width of the hidden dense layer.
        conv_dropout: dropout rate after each stage.
        dense_dropout: dropout rate after the hidden dense layer.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    inputs = keras.Input(shape=input_shape, name="image")
    x = inputs
    for stage, stage_filters in enumerate(filters, start=1):
        x = layers.Conv2D(stage_filters, 3, padding="same", activation="relu",
                          name=f"stage{stage}_conv1")(x)
        x = layers.Conv2D(stage_filters, 3, activation="relu",
                          name=f"stage{stage}_conv2")(x)
        x = layers.MaxPooling2D(name=f"stage{stage}_pool")(x)
        x = layers.Dropout(conv_dropout, name=f"stage{stage}_dropout")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(dense_units, activation="relu", name="dense")(x)
    x = layers.Dropout(dense_dropout, name="dense_dropout")(x)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32",
                           name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)
