"""PatchWhitening: a first convolution fitted to the data, not trained (cifar10-airbench)."""

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="models")
class PatchWhitening(keras.layers.Layer):
    """A `size`x`size` convolution whose filters whiten the image's patches.

    `adapt(images)` computes the second moments of every `size`x`size` patch
    of normalized images (their covariance about zero; 12 numbers per patch
    of a 2x2 RGB image, so a 12x12 matrix), and sets the
    filters to its eigenvectors, each divided by the square root of its
    eigenvalue: on those patches, the filters' outputs are uncorrelated and
    of unit variance. Each filter comes twice, as `v` and `-v`, so that a
    following ReLU or GELU keeps both signs. The filters are then frozen (a
    non-trainable weight, saved with the model); the bias trains. This is
    cifar10-airbench's first layer (KellerJordan/cifar10-airbench,
    `init_whitening_conv`): the network starts from decorrelated inputs.

    Keras has no layer for it; `adapt` follows `keras.layers.Normalization`'s.

    Args:
        size: the patch (and kernel) size; the convolution is "valid", so
            the output is `size - 1` pixels smaller.
        epsilon: added to each eigenvalue, so that the near-zero ones do not
            blow up their filters.

    Example:

    ```python
    whitening = PatchWhitening(size=2)
    whitening.adapt(images[:5000])          # (n, 32, 32, 3), normalized
    features = whitening(images)            # (n, 31, 31, 24)
    ```
    """

    def __init__(self, size=2, epsilon=5e-4, **kwargs):
        super().__init__(**kwargs)
        self.size, self.epsilon = size, epsilon

    def build(self, input_shape):
        patch = self.size * self.size * input_shape[-1]
        self.kernel = self.add_weight(shape=(self.size, self.size, input_shape[-1], 2 * patch),
                                      initializer="zeros", trainable=False, name="kernel")
        self.bias = self.add_weight(shape=(2 * patch,), initializer="zeros", name="bias")

    def adapt(self, images):
        """Sets the filters from `images`, an array (n, height, width, channels)."""
        images = np.asarray(images, dtype=np.float64)
        if not self.built:
            self.build(images.shape)
        self.kernel.assign(whitening_filters(images, self.size, self.epsilon))

    def call(self, images):
        kernel = ops.cast(self.kernel, self.compute_dtype)
        return ops.conv(images, kernel, padding="valid") + ops.cast(self.bias, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        trim = self.size - 1
        height, width = (None if s is None else s - trim for s in input_shape[1:3])
        return (input_shape[0], height, width, 2 * self.size * self.size * input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "size": self.size, "epsilon": self.epsilon}


def whitening_filters(images, size, epsilon):
    """The (size, size, channels, 2 * size * size * channels) kernel of
    `PatchWhitening` for `images`: the patch second moments' eigenvectors over
    the square roots of their eigenvalues, largest first, then negated."""
    channels = images.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(images, (size, size), axis=(1, 2))
    # (n, h', w', channels, size, size) -> one row per patch, in the kernel's (h, w, c) order.
    patches = windows.transpose(0, 1, 2, 4, 5, 3).reshape(-1, size * size * channels)
    moments = patches.T @ patches / len(patches)
    eigenvalues, eigenvectors = np.linalg.eigh(moments)  # ascending
    filters = (eigenvectors / np.sqrt(eigenvalues + epsilon))[:, ::-1]
    kernel = np.concatenate([filters, -filters], axis=1)
    return kernel.reshape(size, size, channels, -1).astype(np.float32)
