"""Identity ("Dirac") initialization of convolutions (cifar10-airbench)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="models")
class PartialIdentity(keras.initializers.Initializer):
    """A convolution kernel whose first `min(in, out)` filters pass their
    input channel through unchanged; the other filters are drawn as Torch's
    default: uniform in +-1/sqrt(fan_in).

    The identity filters make each convolution start as an implicit residual
    connection: at initialization the layer forwards its input, and training
    learns what to add. cifar10-airbench does this to every convolution
    (`torch.nn.init.dirac_` on the first `in` filters). Keras has the
    `Identity` initializer for 2-D matrices only.

    Args:
        seed: seeds the non-identity filters.

    Example:

    ```python
    keras.layers.Conv2D(64, 3, padding="same", kernel_initializer=PartialIdentity(seed=1))
    ```
    """

    def __init__(self, seed=None):
        self.seed = seed

    def __call__(self, shape, dtype=None):
        height, width, channels_in, channels_out = shape
        limit = (height * width * channels_in) ** -0.5
        kernel = keras.random.uniform(shape, -limit, limit, dtype=dtype, seed=self.seed)
        identity = min(channels_in, channels_out)
        # 1 at the centre tap from channel i to filter i, for i < identity; 0 elsewhere in those filters.
        centre = ops.reshape(ops.one_hot(height // 2 * width + width // 2, height * width,
                                         dtype=dtype), (height, width, 1, 1))
        dirac = centre * ops.eye(channels_in, identity, dtype=dtype)[None, None]
        keep = ops.concatenate([ops.zeros((identity,), dtype=dtype),
                                ops.ones((channels_out - identity,), dtype=dtype)])
        return ops.pad(dirac, [(0, 0), (0, 0), (0, 0), (0, channels_out - identity)]) + kernel * keep

    def get_config(self):
        return {"seed": self.seed}
