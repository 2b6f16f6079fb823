"""An LSTM classifier that reads an image row by row, its cell stepped in a Python loop."""

import keras
from keras import layers, ops


@keras.saving.register_keras_serializable(package="models")
class PythonLoopLSTM(layers.Layer):
    """Runs an `LSTMCell` over the time steps in a Python `for` loop; returns
    the last output.

    `keras.layers.LSTM` runs its loop as one symbolic op (and cuDNN's kernel
    on a GPU). Stepping the cell in Python is what a first version looks
    like, and shows what graph execution buys: run eagerly, every step
    dispatches its dozen ops from Python; traced, the loop is unrolled into
    one graph, once.

    Args:
        units: the LSTM's state size.
    """

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.cell = layers.LSTMCell(units, name="cell")

    def build(self, input_shape):
        self.cell.build((input_shape[0], input_shape[-1]))

    def call(self, sequences):
        batch = ops.shape(sequences)[0]
        state = [ops.zeros((batch, self.units), dtype=self.compute_dtype)] * 2
        output = state[0]
        for step in range(sequences.shape[1]):  # a Python loop: the steps are unrolled
            output, state = self.cell(sequences[:, step], state)
        return output

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.units)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def row_lstm(input_shape, num_classes, units=128, name="row_lstm"):
    """Builds a classifier that reads each image's rows as a sequence.

    Args:
        input_shape: shape of one image, `(rows, columns, channels)`; each row
            of `columns * channels` values is one time step.
        num_classes: number of output classes.
        units: the LSTM's state size.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    rows, columns, channels = input_shape
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Reshape((rows, columns * channels), name="rows")(inputs)
    x = PythonLoopLSTM(units, name="lstm")(x)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32",
                           name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)
