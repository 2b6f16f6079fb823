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
"""

import keras
from keras import layers

from models.batch_norm import FusedBatchNormalization
from models.fused_activation import FusedActivation
from models.initializers import PartialIdentity
from models.whitening import PatchWhitening


def _conv(filters, weight_decay, identity_init, name):
    # Torch's default draw, uniform in +-1/sqrt(fan_in), with or without the identity filters.
    drawn = keras.initializers.VarianceScaling(1 / 3, mode="fan_in", distribution="uniform")
    return layers.Conv2D(filters, 3, padding="same", use_bias=False,
                         kernel_initializer=PartialIdentity() if identity_init else drawn,
                         kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                         if weight_decay else None, name=name)


def _activation(activation, fused, name):
    return (FusedActivation if fused else layers.Activation)(activation, name=name)


def _bn_act(x, momentum, beta_weight_decay, activation, fused, fused_activation, name):
    # Without a scale (airbench's frozen weight of 1): the next convolution scales.
    batch_norm = FusedBatchNormalization if fused else layers.BatchNormalization
    x = batch_norm(
        momentum=momentum, epsilon=1e-5, scale=False, name=f"{name}_bn",
        beta_regularizer=keras.regularizers.L2(beta_weight_decay / 2)
        if beta_weight_decay else None)(x)
    return _activation(activation, fused_activation, f"{name}_{activation}")(x)


def densenet_whitened(input_shape, num_classes, whitening_images, widths=(64, 192, 192),
                      growth_rates=(64, 192, 192), layers_per_block=1, normalization=None,
                      batch_norm_momentum=0.6, weight_decay=0.0, beta_weight_decay=0.0,
                      activation="gelu", head_scale=1 / 9, whitening=True, identity_init=True,
                      fused_batch_norm=True, fused_activation=True, dense_connections=True,
                      name="densenet_whitened"):
    """Builds the network.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`.
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
        dense_connections: False makes each layer's output replace its
            input instead of joining it: with `widths` equal to
            `growth_rates` and one layer per block, that is airbench94's own
            network (64, 256, 256), a control to measure the dense
            connections against; not a DenseNet.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    if not len(widths) == len(growth_rates) >= 1:
        raise ValueError("widths and growth_rates need one entry per block, received: "
                         f"widths={widths}, growth_rates={growth_rates}")
    inputs = keras.Input(shape=input_shape, name="image")
    x = normalization(inputs) if normalization else inputs
    if whitening:
        first = PatchWhitening(size=2, name="whitening")
        first.adapt(whitening_images)
    else:
        first = layers.Conv2D(2 * 2 * 2 * input_shape[-1], 2, name="whitening")
    x = _activation(activation, fused_activation, f"whitening_{activation}")(first(x))
    bn_args = dict(momentum=batch_norm_momentum, beta_weight_decay=beta_weight_decay,
                   activation=activation, fused=fused_batch_norm,
                   fused_activation=fused_activation)
    for block, (width, growth) in enumerate(zip(widths, growth_rates), start=1):
        x = _conv(width, weight_decay, identity_init, f"block{block}_conv")(x)
        x = layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
        x = _bn_act(x, name=f"block{block}", **bn_args)
        for index in range(1, layers_per_block + 1):
            prefix = f"block{block}_layer{index}"
            y = _conv(growth, weight_decay, identity_init, f"{prefix}_conv")(x)
            y = _bn_act(y, name=prefix, **bn_args)
            x = layers.Concatenate(name=f"{prefix}_concat")([x, y]) if dense_connections else y
    x = layers.GlobalMaxPooling2D(name="pool")(x)
    logits = layers.Dense(num_classes, use_bias=False, name="logits",
                          kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                          if weight_decay else None)(x)
    logits = layers.Rescaling(head_scale, name="logits_scale")(logits)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Activation("softmax", dtype="float32", name="predictions")(logits)
    return keras.Model(inputs, outputs, name=name)
