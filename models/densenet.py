"""DenseNet for 32x32 images (Huang et al., arXiv 1608.06993), two ways.

The functional builder wires every concatenation in the open; the Sequential
one stacks the custom `DenseBlock` and `TransitionBlock` layers. Both create
the same layers in the same order from the same helpers, so they hold the same
weights and compute the same function.

Layout (the paper's CIFAR networks): a 3x3 stem convolution, three dense
blocks separated by transitions (1x1 convolution, 2x2 average pool), then
batch norm, ReLU, global average pooling and a softmax classifier.
"""

import keras
from keras import layers, ops

# The paper's CIFAR networks. "BC": bottleneck layers and compression 0.5.
VARIANTS = {
    "densenet40_k12": dict(depth=40, growth_rate=12, bottleneck=False, compression=1.0),
    "densenet100_k12": dict(depth=100, growth_rate=12, bottleneck=False, compression=1.0),
    "densenet_bc100_k12": dict(depth=100, growth_rate=12, bottleneck=True, compression=0.5),
    "densenet_bc250_k24": dict(depth=250, growth_rate=24, bottleneck=True, compression=0.5),
    "densenet_bc190_k40": dict(depth=190, growth_rate=40, bottleneck=True, compression=0.5),
}
NUM_BLOCKS = 3


def _composite_layers(growth_rate, bottleneck, batch_norm, dropout, weight_decay, name):
    """The layers of one composite function H: [BN-ReLU-Conv1x1(4k)-]BN-ReLU-Conv3x3(k)."""
    convs = [(4 * growth_rate, 1, "1x1")] if bottleneck else []
    convs.append((growth_rate, 3, "3x3"))
    stack = []
    for filters, size, label in convs:
        if batch_norm:
            stack.append(layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_{label}_bn"))
        stack.append(layers.ReLU(name=f"{name}_{label}_relu"))
        stack.append(_conv(filters, size, weight_decay, f"{name}_{label}_conv"))
        if dropout:
            stack.append(layers.Dropout(dropout, name=f"{name}_{label}_dropout"))
    return stack


def _transition_layers(filters, batch_norm, dropout, weight_decay, name):
    """The layers of a transition: [BN-]ReLU-Conv1x1-[Dropout-]AvgPool2x2."""
    stack = [layers.BatchNormalization(epsilon=1.001e-5, name=f"{name}_bn")] if batch_norm else []
    stack += [layers.ReLU(name=f"{name}_relu"),
              _conv(filters, 1, weight_decay, f"{name}_conv")]
    if dropout:
        stack.append(layers.Dropout(dropout, name=f"{name}_dropout"))
    stack.append(layers.AveragePooling2D(2, name=f"{name}_pool"))
    return stack


def _conv(filters, size, weight_decay, name):
    # The paper's weight decay is an L2 penalty of weight_decay/2 * ||w||^2 on
    # the loss (Torch's convention), which Keras' L2(l2) writes as l2 * ||w||^2.
    regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    return layers.Conv2D(filters, size, padding="same", use_bias=False,
                         kernel_initializer="he_normal",
                         kernel_regularizer=regularizer, name=name)


def _apply(stack, x):
    for layer in stack:
        x = layer(x)
    return x


def _build(stack, shape):
    """Builds `stack`'s layers for input `shape`; returns the output shape.

    A custom layer must create its sublayers' weights in `build`, or a saved
    model has nowhere to load them into.
    """
    for layer in stack:
        layer.build(shape)
        shape = layer.compute_output_shape(shape)
    return shape


def conv_block(x, growth_rate, bottleneck=True, batch_norm=True, dropout=0.0,
               weight_decay=0.0, name="conv_block"):
    """One dense-block layer: new features concatenated to its input.

    Args:
        x: input tensor.
        growth_rate: feature maps the layer adds (k).
        bottleneck: whether a 1x1 convolution to 4k maps comes first ("B").
        batch_norm: whether each convolution is preceded by batch norm.
        dropout: dropout rate after each convolution; 0 for none.
        weight_decay: L2 weight decay of the convolution kernels.
        name: prefix of the layer names.

    Returns:
        `x` with `growth_rate` more channels.
    """
    y = _apply(_composite_layers(growth_rate, bottleneck, batch_norm, dropout,
                                 weight_decay, name), x)
    return layers.Concatenate(name=f"{name}_concat")([x, y])


def dense_block(x, num_layers, growth_rate, name="dense_block", **block_args):
    """A dense block: `num_layers` conv blocks, each seeing all earlier maps.

    Args:
        x: input tensor.
        num_layers: conv blocks in the block.
        growth_rate: feature maps each conv block adds.
        name: prefix of the layer names.
        **block_args: `bottleneck`, `batch_norm`, `dropout`, `weight_decay`
            of `conv_block`.

    Returns:
        `x` with `num_layers * growth_rate` more channels.
    """
    for index in range(1, num_layers + 1):
        x = conv_block(x, growth_rate, name=f"{name}_layer{index}", **block_args)
    return x


def transition_block(x, compression, batch_norm=True, dropout=0.0,
                     weight_decay=0.0, name="transition"):
    """A transition: 1x1 convolution to fewer maps, then 2x2 average pooling.

    Args:
        x: input tensor.
        compression: fraction of the channels kept (theta; 0.5 in "C" nets).
        batch_norm, dropout, weight_decay: as in `conv_block`.
        name: prefix of the layer names.

    Returns:
        A tensor of half the spatial size and `compression` of the channels.
    """
    filters = int(x.shape[-1] * compression)
    return _apply(_transition_layers(filters, batch_norm, dropout, weight_decay, name), x)


@keras.saving.register_keras_serializable(package="densenet")
class DenseBlock(layers.Layer):
    """A dense block as one layer, for `keras.Sequential` models.

    Args:
        num_layers, growth_rate, bottleneck, batch_norm, dropout,
        weight_decay: as in `dense_block`.
    """

    def __init__(self, num_layers, growth_rate, bottleneck=True, batch_norm=True,
                 dropout=0.0, weight_decay=0.0, **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(num_layers=num_layers, growth_rate=growth_rate,
                             bottleneck=bottleneck, batch_norm=batch_norm,
                             dropout=dropout, weight_decay=weight_decay)
        self.composites = [
            _composite_layers(growth_rate, bottleneck, batch_norm, dropout,
                              weight_decay, f"{self.name}_layer{index}")
            for index in range(1, num_layers + 1)
        ]

    def build(self, input_shape):
        channels = input_shape[-1]
        for stack in self.composites:
            _build(stack, (*input_shape[:-1], channels))
            channels += self.settings["growth_rate"]

    def call(self, x):
        for stack in self.composites:
            y = x
            for layer in stack:  # Keras passes `training` on to them
                y = layer(y)
            x = ops.concatenate([x, y], axis=-1)
        return x

    def compute_output_shape(self, input_shape):
        added = self.settings["num_layers"] * self.settings["growth_rate"]
        return (*input_shape[:-1], input_shape[-1] + added)

    def get_config(self):
        return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package="densenet")
class TransitionBlock(layers.Layer):
    """A transition as one layer, for `keras.Sequential` models.

    Args:
        compression, batch_norm, dropout, weight_decay: as in
        `transition_block`.
    """

    def __init__(self, compression, batch_norm=True, dropout=0.0,
                 weight_decay=0.0, **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(compression=compression, batch_norm=batch_norm,
                             dropout=dropout, weight_decay=weight_decay)

    def build(self, input_shape):
        # The filter count depends on the input's channels, known only now.
        filters = int(input_shape[-1] * self.settings["compression"])
        self.stack = _transition_layers(filters, self.settings["batch_norm"],
                                        self.settings["dropout"],
                                        self.settings["weight_decay"], self.name)
        _build(self.stack, input_shape)

    def call(self, x):
        return _apply(self.stack, x)

    def compute_output_shape(self, input_shape):
        filters = int(input_shape[-1] * self.settings["compression"])
        height, width = (None if s is None else s // 2 for s in input_shape[1:3])
        return (input_shape[0], height, width, filters)

    def get_config(self):
        return {**super().get_config(), **self.settings}


def densenet(input_shape, num_classes, depth=100, growth_rate=12, bottleneck=True,
             compression=0.5, dropout=0.0, batch_norm=True, weight_decay=1e-4,
             normalization=None, api="functional", name="densenet"):
    """Builds a CIFAR-style DenseNet.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`.
        num_classes: number of output classes.
        depth: total depth L; (L - 4) must divide by 3, or by 6 with bottlenecks.
        growth_rate: feature maps each layer adds (k).
        bottleneck: 1x1 bottleneck convolutions ("B").
        compression: channels kept by each transition (0.5 for "C", 1 for none).
        dropout: dropout rate after each convolution (the paper: 0.2 without
            augmentation, 0 with).
        batch_norm: batch norm before each convolution; False leaves it out.
        weight_decay: L2 weight decay of every kernel, in Torch's convention.
        normalization: an optional layer applied to the input first (per-channel
            normalization, say), so the saved model takes raw [0, 1] images.
        api: `"functional"`, or `"sequential"` for the custom-layer version.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    per_block = _layers_per_block(depth, bottleneck)
    if api not in ("functional", "sequential"):
        raise ValueError(f"api must be 'functional' or 'sequential', received: api={api!r}")
    block_args = dict(bottleneck=bottleneck, batch_norm=batch_norm, dropout=dropout,
                      weight_decay=weight_decay)
    transition_args = dict(batch_norm=batch_norm, dropout=dropout, weight_decay=weight_decay)
    stem_filters = 2 * growth_rate if bottleneck and compression < 1 else 16

    inputs = keras.Input(shape=input_shape, name="image")
    head = [layers.BatchNormalization(epsilon=1.001e-5, name="final_bn")] if batch_norm else []
    head += [layers.ReLU(name="final_relu"),
             layers.GlobalAveragePooling2D(name="pool"),
             # float32 softmax: see models/mlp.py.
             layers.Dense(num_classes, activation="softmax", dtype="float32",
                          kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                          if weight_decay else None, name="predictions")]
    stem = _conv(stem_filters, 3, weight_decay, "stem_conv")

    if api == "sequential":
        stack = [inputs, *([normalization] if normalization else []), stem]
        for block in range(1, NUM_BLOCKS + 1):
            stack.append(DenseBlock(per_block, growth_rate, name=f"block{block}", **block_args))
            if block < NUM_BLOCKS:
                stack.append(TransitionBlock(compression, name=f"transition{block}",
                                             **transition_args))
        return keras.Sequential(stack + head, name=name)

    x = normalization(inputs) if normalization else inputs
    x = stem(x)
    for block in range(1, NUM_BLOCKS + 1):
        x = dense_block(x, per_block, growth_rate, name=f"block{block}", **block_args)
        if block < NUM_BLOCKS:
            x = transition_block(x, compression, name=f"transition{block}", **transition_args)
    return keras.Model(inputs, _apply(head, x), name=name)


def _layers_per_block(depth, bottleneck):
    """Conv blocks per dense block: the stem, two transitions and the
    classifier take 4 of the depth, each conv block 1 (2 with a bottleneck)."""
    step = 6 if bottleneck else 3
    if depth < 4 + step or (depth - 4) % step:
        raise ValueError(f"depth - 4 must be a positive multiple of {step} for "
                         f"bottleneck={bottleneck}, received: depth={depth}")
    return (depth - 4) // step


def variant_spec(variant, **fields):
    """Returns `variant`'s fields from `VARIANTS`, overridden by `fields` that
    are not None, after checking that they describe a DenseNet.

    Raises:
        ValueError: for an unknown variant or an impossible depth.
    """
    if variant not in VARIANTS:
        raise ValueError(f"Unknown DenseNet variant {variant!r}; "
                         f"known: {', '.join(VARIANTS)}")
    spec = {**VARIANTS[variant], **{k: v for k, v in fields.items() if v is not None}}
    _layers_per_block(spec["depth"], spec["bottleneck"])
    return spec


def densenet_variant(variant, **kwargs):
    """Builds a named variant from `VARIANTS`; `kwargs` override its fields."""
    return densenet(**{**variant_spec(variant), **kwargs})
