"""A multilayer perceptron: the first model of every deep-learning course."""

import keras
from keras import layers


def mlp(input_shape, num_classes, hidden_units=(512, 512), dropout=0.2, name="mlp"):
    """Builds a fully connected classifier.

    Args:
        input_shape: shape of one input, e.g. `(28, 28, 1)`; it is flattened.
        num_classes: number of output classes.
        hidden_units: width of each hidden `Dense` layer, in order; none
            makes it a softmax (multinomial logistic) regression.
        dropout: dropout rate after each hidden layer; 0 for none.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Flatten(name="flatten")(inputs)
    for index, units in enumerate(hidden_units, start=1):
        x = layers.Dense(units, activation="relu", name=f"dense_{index}")(x)
        if dropout:
            x = layers.Dropout(dropout, name=f"dropout_{index}")(x)
    # float32 softmax: under mixed precision, float16 probabilities lose the
    # small values that the cross-entropy needs.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32",
                           name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)
