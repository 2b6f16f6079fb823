"""A DenseNet built the way cifar10-airbench builds its fast network.

airbench94 (KellerJordan/cifar10-airbench) reaches 94% on CIFAR-10 with
three groups of conv-pool-BN-GELU-conv-BN-GELU after a frozen whitening
convolution. This keeps its every ingredient and makes each group a dense
block: the group's first convolution (then 2x2 max-pooling, batch norm,
GELU) is the block's input, and each of its `layers_per_block` layers
(conv-BN-GELU) reads the concatenation of the input and every earlier
layer's output, and adds `growth_rate` maps to it. The next block's first
convolution is its transition: it reads all of them.

The rest is airbench's: a `PatchWhitening` first layer (2x2, frozen filters
fitted to the data) and GELU; convolutions without bias, initialized as
identities (`PartialIdentity`); batch norm without scale; a global max pool,
then a bias-free linear classifier whose logits are scaled by 1/9 before the
softmax.

This file holds every piece of it that Keras lacks, so that a recipe copied
out of the repository takes one model file: `PatchWhitening`,
`PartialIdentity`, `FusedBatchNormalization`, `FusedActivation`,
`MatmulFilterGradientConv2D`, and the
six-view test-time augmentation (`test_time_views`, `view_metrics`).
"""

import functools

import keras
import numpy as np
from keras import layers, ops


# Maps of at most this many pixels take `MatmulFilterGradientConv2D` (7x7 and 3x3
# here): on larger ones, oneDNN's own filter gradient is the faster (docs/step-time.md).
MATMUL_FILTER_GRADIENT_MAX_PIXELS = 64


def _conv(x, filters, weight_decay, identity_init, matmul_filter_gradient, data_format, name,
          pixels):
    # Torch's default draw, uniform in +-1/sqrt(fan_in), with or without the identity filters.
    drawn = keras.initializers.VarianceScaling(1 / 3, mode="fan_in", distribution="uniform")
    small = pixels <= MATMUL_FILTER_GRADIENT_MAX_PIXELS  # the map's at full size
    conv = MatmulFilterGradientConv2D if matmul_filter_gradient and small else layers.Conv2D
    return conv(filters, 3, padding="same", use_bias=False, data_format=data_format,
                kernel_initializer=PartialIdentity() if identity_init else drawn,
                kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                if weight_decay else None, name=name)(x)


def _activation(activation, fused, name):
    return (FusedActivation if fused else layers.Activation)(activation, name=name)


def _bn_act(x, momentum, beta_weight_decay, activation, fused, fused_activation, axis, name):
    # Without a scale (airbench's frozen weight of 1): the next convolution scales.
    batch_norm = FusedBatchNormalization if fused else layers.BatchNormalization
    x = batch_norm(
        axis=axis, momentum=momentum, epsilon=1e-5, scale=False, name=f"{name}_bn",
        beta_regularizer=keras.regularizers.L2(beta_weight_decay / 2)
        if beta_weight_decay else None)(x)
    return _activation(activation, fused_activation, f"{name}_{activation}")(x)


def densenet_whitened(input_shape, num_classes, whitening_images, widths=(64, 192, 192),
                      growth_rates=(64, 192, 192), layers_per_block=1, normalization=None,
                      batch_norm_momentum=0.6, weight_decay=0.0, beta_weight_decay=0.0,
                      conv_weight_decay=None, activation="gelu", head_scale=1 / 9,
                      whitening=True, identity_init=True, fused_batch_norm=True,
                      fused_activation=True, matmul_filter_gradient=True, dense_connections=True,
                      data_format="channels_last", name="densenet_whitened"):
    """Builds the network.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`; `(None, None, 3)`
            takes images of any size.
        num_classes: number of output classes.
        whitening_images: training images, as the network receives them
            (after `normalization`), to fit the whitening filters to; a few
            thousand are plenty.
        widths: each block's first convolution's maps.
        growth_rates: maps each layer of a block adds, one per block.
        layers_per_block: dense layers after each block's first convolution.
        normalization: an optional layer applied to the input first, so that
            a saved model takes raw [0, 1] images.
        batch_norm_momentum: of the moving statistics (airbench: Torch's 0.4,
            Keras' 0.6).
        weight_decay: L2 weight decay of the kernels, in Torch's convention.
        beta_weight_decay: the same for batch norm's offsets (lower when
            they train at a higher learning rate, so that the decay per step
            stays the same).
        conv_weight_decay: the same for the 3x3 convolutions' kernels;
            None: `weight_decay`. 0 for an optimizer that sets their norm
            itself (the recipe's Muon), where decay would only waste steps.
        activation: of every layer.
        head_scale: multiplies the logits.
        whitening: False makes the first layer an ordinary trainable 2x2
            convolution of the same shape (to measure what whitening buys).
        identity_init: False draws every filter of the 3x3 convolutions.
        fused_batch_norm: `FusedBatchNormalization` (one TensorFlow kernel
            per batch norm in training) rather than Keras' layer; the same
            arithmetic.
        fused_activation: `FusedActivation` (XLA fuses each activation's
            element-wise ops on TensorFlow) rather than Keras' layer; the
            same arithmetic.
        matmul_filter_gradient: `MatmulFilterGradientConv2D` for the
            convolutions on maps of at most
            `MATMUL_FILTER_GRADIENT_MAX_PIXELS` pixels (the same arithmetic,
            a faster filter gradient on TensorFlow); False: Keras' layer.
        dense_connections: False makes each layer's output replace its
            input instead of joining it: with `widths` equal to
            `growth_rates` and one layer per block, that is airbench94's own
            network (64, 256, 256), a control to measure the dense
            connections against; not a DenseNet.
        data_format: the layout of the maps inside the network;
            "channels_first" (the model transposes its channels-last input
            once, after `normalization`) suits backends whose convolutions
            are channels-first, PyTorch's. TensorFlow's CPU kernels take
            channels-last only.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    if not len(widths) == len(growth_rates) >= 1:
        raise ValueError("widths and growth_rates need one entry per block, received: "
                         f"widths={widths}, growth_rates={growth_rates}")
    inputs = keras.Input(shape=input_shape, name="image")
    x = normalization(inputs) if normalization else inputs
    channels = 1 if data_format == "channels_first" else -1
    if channels == 1:
        x = layers.Permute((3, 1, 2), name="to_channels_first")(x)
    if whitening:
        first = PatchWhitening(size=2, data_format=data_format, name="whitening")
        first.adapt(whitening_images)
    else:
        first = layers.Conv2D(2 * 2 * 2 * input_shape[-1], 2, data_format=data_format,
                              name="whitening")
    x = _activation(activation, fused_activation, f"whitening_{activation}")(first(x))
    bn_args = dict(momentum=batch_norm_momentum, beta_weight_decay=beta_weight_decay,
                   activation=activation, fused=fused_batch_norm,
                   fused_activation=fused_activation, axis=channels)
    conv_args = dict(weight_decay=weight_decay if conv_weight_decay is None else conv_weight_decay,
                     identity_init=identity_init, matmul_filter_gradient=matmul_filter_gradient,
                     data_format=data_format)
    # Each map's side on full-size images (the input's may be open: data.early_size).
    side = np.shape(whitening_images)[1] - 1  # after the 2x2 whitening, unpadded
    for block, (width, growth) in enumerate(zip(widths, growth_rates), start=1):
        x = _conv(x, width, name=f"block{block}_conv", pixels=side * side, **conv_args)
        x = layers.MaxPooling2D(2, data_format=data_format, name=f"block{block}_pool")(x)
        side //= 2
        x = _bn_act(x, name=f"block{block}", **bn_args)
        for index in range(1, layers_per_block + 1):
            prefix = f"block{block}_layer{index}"
            y = _conv(x, growth, name=f"{prefix}_conv", pixels=side * side, **conv_args)
            y = _bn_act(y, name=prefix, **bn_args)
            x = (layers.Concatenate(axis=channels, name=f"{prefix}_concat")([x, y])
                 if dense_connections else y)
    x = layers.GlobalMaxPooling2D(data_format=data_format, name="pool")(x)
    logits = layers.Dense(num_classes, use_bias=False, name="logits",
                          kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                          if weight_decay else None)(x)
    logits = layers.Rescaling(head_scale, name="logits_scale")(logits)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Activation("softmax", dtype="float32", name="predictions")(logits)
    return keras.Model(inputs, outputs, name=name)


# ## The first layer: whitened patches

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
        data_format: of the images it is called on ("channels_first" or
            "channels_last"); `adapt` takes channels-last images either way.

    Example:

    ```python
    whitening = PatchWhitening(size=2)
    whitening.adapt(images[:5000])          # (n, 32, 32, 3), normalized
    features = whitening(images)            # (n, 31, 31, 24)
    ```
    """

    def __init__(self, size=2, epsilon=5e-4, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.size, self.epsilon, self.data_format = size, epsilon, data_format

    def build(self, input_shape):
        channels = input_shape[1 if self.data_format == "channels_first" else -1]
        patch = self.size * self.size * channels
        self.kernel = self.add_weight(shape=(self.size, self.size, channels, 2 * patch),
                                      initializer="zeros", trainable=False, name="kernel")
        self.bias = self.add_weight(shape=(2 * patch,), initializer="zeros", name="bias")

    def adapt(self, images):
        """Sets the filters from `images`, an array (n, height, width, channels)."""
        images = np.asarray(images, dtype=np.float64)
        if not self.built:
            self.build(images.shape if self.data_format == "channels_last"
                       else np.take(images.shape, [0, 3, 1, 2]))
        self.kernel.assign(whitening_filters(images, self.size, self.epsilon))

    def call(self, images):
        kernel = ops.cast(self.kernel, self.compute_dtype)
        bias = ops.cast(self.bias, self.compute_dtype)
        if self.data_format == "channels_first":
            bias = ops.reshape(bias, (-1, 1, 1))
        return ops.conv(images, kernel, padding="valid", data_format=self.data_format) + bias

    def compute_output_shape(self, input_shape):
        trim, first = self.size - 1, self.data_format == "channels_first"
        channels = input_shape[1 if first else -1]
        height, width = (None if s is None else s - trim
                         for s in (input_shape[2:4] if first else input_shape[1:3]))
        maps = 2 * self.size * self.size * channels
        return ((input_shape[0], maps, height, width) if first
                else (input_shape[0], height, width, maps))

    def get_config(self):
        return {**super().get_config(), "size": self.size, "epsilon": self.epsilon,
                "data_format": self.data_format}


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


# ## Identity-initialized convolutions

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


# ## Batch norm in one TensorFlow kernel

@keras.saving.register_keras_serializable(package="models")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` whose training step is TensorFlow's
    fused kernel.

    On TensorFlow, Keras 3.15's layer casts bfloat16 activations to float32,
    takes the batch's mean and variance as separate reductions and normalizes
    with element-wise ops, each a pass over the activations, forward and
    backward. `tf.compat.v1.nn.fused_batch_norm` does the statistics and the
    normalization in one kernel (oneDNN's on a CPU), reading bfloat16 as it
    is, and its gradient is one kernel too. The moving statistics are
    updated as Keras updates them (the biased batch variance). Inference, other
    backends, masks and renormalization are Keras' own code path.

    Keras has no fused option since Keras 3 (tf.keras 2's `fused=True`).
    """

    def call(self, inputs, training=None, mask=None):
        fusable = (keras.backend.backend() == "tensorflow" and training and self.trainable
                   and mask is None and not self.renorm and len(inputs.shape) == 4
                   and self.axis in (-1, 3))
        if not fusable:
            return super().call(inputs, training=training, mask=mask)
        import tensorflow as tf

        channels = inputs.shape[-1]
        scale = tf.cast(self.gamma, "float32") if self.scale else tf.ones([channels])
        offset = tf.cast(self.beta, "float32") if self.center else tf.zeros([channels])
        outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, epsilon=self.epsilon, is_training=True)
        # The kernel returns the unbiased variance (n / (n - 1)); Keras keeps the biased one.
        count = tf.cast(tf.size(inputs) // channels, "float32")
        variance = variance * (count - 1) / count
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum
                                    + variance * (1 - self.momentum))
        return tf.cast(outputs, self.compute_dtype)


# ## A faster filter gradient for small maps

@keras.saving.register_keras_serializable(package="models")
class MatmulFilterGradientConv2D(keras.layers.Conv2D):
    """`keras.layers.Conv2D` whose gradient with respect to its kernel is one
    matrix product per kernel tap, on TensorFlow.

    TensorFlow 2.21 computes a convolution's filter gradient with the
    oneDNN 3.7.3 it bundles. In bfloat16 on 7x7 maps of 256 channels at
    batch 1024, that kernel takes three times the forward convolution's
    time in a training step (oneDNN's own log, `ONEDNN_VERBOSE=1`), for the
    same arithmetic. The gradient is also a sum over the kernel's taps: for
    tap (i, j), the input shifted by (i, j), as a (pixels, channels in)
    matrix, transposed, times the upstream gradient (pixels, channels out).
    On maps of up to 8x8 those k x k matmuls are the faster (the step of
    airbench94's network 5% shorter, of densenet_cifar10_95's 8%:
    docs/step-time.md); on larger maps the shifted copies cost more than they save.
    The forward pass and the input gradient are TensorFlow's own, and the
    layer is Keras' own for other backends, strides, dilations, groups,
    and even kernels.
    """

    def convolution_op(self, inputs, kernel):
        if not (keras.backend.backend() == "tensorflow"
                and all(size % 2 for size in self.kernel_size) and self.strides == (1, 1)
                and self.padding == "same" and self.dilation_rate == (1, 1) and self.groups == 1
                and self.data_format == "channels_last" and None not in inputs.shape[1:]):
            return super().convolution_op(inputs, kernel)
        import tensorflow as tf

        @tf.custom_gradient
        def convolution(inputs, kernel):
            def gradients(upstream):
                return (tf.nn.conv2d_transpose(upstream, kernel, tf.shape(inputs), 1, "SAME"),
                        filter_gradient(inputs, upstream, kernel.shape))
            return tf.nn.conv2d(inputs, kernel, 1, "SAME"), gradients

        return convolution(inputs, tf.convert_to_tensor(kernel))


def filter_gradient(inputs, upstream, kernel_shape):
    """The gradient of a stride-1 "same" convolution with respect to its
    odd-sized (height, width, in, out) kernel, on TensorFlow: for each tap,
    the shifted input's pixels, transposed, times the upstream gradient's."""
    import tensorflow as tf

    height, width, channels_in, channels_out = kernel_shape
    rows, columns = inputs.shape[1:3]
    padded = tf.pad(inputs, [(0, 0), (height // 2,) * 2, (width // 2,) * 2, (0, 0)])
    upstream = tf.reshape(upstream, (-1, channels_out))
    taps = [tf.matmul(tf.reshape(padded[:, i:i + rows, j:j + columns], (-1, channels_in)),
                      upstream, transpose_a=True)
            for i in range(height) for j in range(width)]
    return tf.reshape(tf.stack(taps), kernel_shape)


# ## GELU fused by XLA

@keras.saving.register_keras_serializable(package="models")
class FusedActivation(keras.layers.Activation):
    """`keras.layers.Activation` whose forward and backward passes are each
    one XLA-compiled loop on TensorFlow.

    On TensorFlow, Keras' exact GELU runs as separate element-wise ops (erfc,
    multiplies; its gradient adds exp, square, negation), each a pass over
    the activations. In airbench94's network at batch 1024 on a 2-core CPU
    they take about half of the `mixed_bfloat16` training step.
    `tf.function(jit_compile=True)` around the activation lets XLA fuse them
    while TensorFlow's own kernels (oneDNN's convolutions) run the rest of
    the graph. The arithmetic is Keras' own. Eagerly
    (`execution.mode=eager`) and on other backends it is Keras' layer: JAX
    compiles the whole step with XLA already.
    """

    def call(self, inputs):
        if keras.backend.backend() != "tensorflow":
            return super().call(inputs)
        import tensorflow as tf

        if tf.executing_eagerly():
            return super().call(inputs)
        return _compiled(self.activation)(inputs)


@functools.cache
def _compiled(activation):
    import tensorflow as tf

    return tf.function(activation, jit_compile=True)


# ## Test-time augmentation: six views of each image

# Each view's weight in the mean over 1, 2 or 6 views, in `test_time_views`' order:
# the image, its mirror, then the pairs shifted up-left and down-right
# (cifar10-airbench's: half on the image and its mirror, a quarter per pair).
VIEW_WEIGHTS = {1: [1.0], 2: [0.5, 0.5], 6: [0.25, 0.25, 0.125, 0.125, 0.125, 0.125]}


def test_time_views(network, translate=False):
    """Wraps `network` so that it predicts every view of each image at once:
    the image and its mirror; with `translate`, also the pair shifted by one
    pixel up and left, and the pair shifted down and right (edges reflected).

    Returns:
        An uncompiled `keras.Model` from `network`'s input to its
        predictions stacked per view: `(batch, 2 or 6, classes)`.
    """
    images = keras.Input(shape=network.input_shape[1:], name="image")
    shown = [images]
    if translate:  # the image's size, where the network takes any (data.early_size)
        padded = ops.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
        shown += [padded[:, :-2, :-2], padded[:, 2:, 2:]]
    predictions = []
    for view in shown:
        predictions += [network(view), network(ops.flip(view, axis=2))]  # axis 2 is width
    stacked = ops.stack([ops.cast(p, "float32") for p in predictions], axis=1)
    return keras.Model(images, stacked, name=f"{network.name}_views")


def average_views(predictions, count, average="probabilities"):
    """The mean over the first `count` (1, 2 or 6) of `test_time_views`' predictions,
    weighted by `VIEW_WEIGHTS`: of the probabilities, or (`"logits"`,
    airbench's) the softmax of the mean logit. A probability's log is its
    logit less a constant per view, so the mean log-probability stands in
    for the mean logit."""
    if average not in ("probabilities", "logits"):
        raise ValueError(f"average must be 'probabilities' or 'logits'; received: {average!r}")
    weights = ops.reshape(ops.convert_to_tensor(VIEW_WEIGHTS[count], "float32"), (1, count, 1))
    chosen = predictions[:, :count]
    if average == "logits":
        return ops.softmax(ops.sum(ops.multiply(weights, ops.log(chosen)), axis=1))
    return ops.sum(ops.multiply(weights, chosen), axis=1)


def view_metrics(predictions, labels, count, average, loss, regularization=0.0):
    """What `evaluate` reports for the mean over `count` of `test_time_views`'
    `predictions`, from the predictions: `loss` (a Keras loss, plus the
    model's `regularization` penalty, as `evaluate` adds it) and accuracy,
    against one-hot `labels`. One pass of `test_time_views` gives every view count's
    and average's metrics, where `evaluate` needs a pass and a trace each."""
    averaged = average_views(ops.convert_to_tensor(predictions, "float32"), count, average)
    hits = ops.equal(ops.argmax(averaged, axis=-1), ops.argmax(labels, axis=-1))
    return {"loss": float(loss(labels, averaged)) + float(regularization),
            "accuracy": float(ops.mean(ops.cast(hits, "float32")))}
