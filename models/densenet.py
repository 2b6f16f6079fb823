"""DenseNet for 32x32 images (Huang et al., arXiv 1608.06993), two ways.

The functional builder wires every concatenation in the open; the Sequential
one stacks the custom `DenseBlock` and `TransitionBlock` layers. Both create
the same layers in the same order from the same helpers, so they hold the same
weights and compute the same function.

Layout (the paper's CIFAR networks): a 3x3 stem convolution, three dense
blocks separated by transitions (1x1 convolution, 2x2 average pool), then
batch norm, ReLU, global average pooling and a softmax classifier.

`densenet_cpu` is ours, built for an hour of a 2-core CPU: the same dense
blocks and transitions, but wide and shallow (3 layers per block, a growth
rate per block: 48, 96, 128), after a stem that halves the image at once
(the ImageNet DenseNet's conv-BN-ReLU-max-pool, at 3x3), with max-pooling
transitions. A training step's time goes with the pixels each convolution
sees times its channels, and a CPU runs wide convolutions far closer to its
peak than the paper's 12-channel ones (docs/step-time.md).
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
    "densenet_cpu": dict(depth=13, growth_rate=(48, 96, 128), bottleneck=False, compression=0.5,
                         stem_filters=48, stem_pool=True, transition_pool="max"),
}
NUM_BLOCKS = 3


def _batch_norm(momentum, name):
    return layers.BatchNormalization(momentum=momentum, epsilon=1.001e-5, name=name)


def _composite_layers(growth_rate, bottleneck, batch_norm, dropout, weight_decay, name,
                      batch_norm_momentum=0.99):
    """The layers of one composite function H: [BN-ReLU-Conv1x1(4k)-]BN-ReLU-Conv3x3(k)."""
    convs = [(4 * growth_rate, 1, "1x1")] if bottleneck else []
    convs.append((growth_rate, 3, "3x3"))
    stack = []
    for filters, size, label in convs:
        if batch_norm:
            stack.append(_batch_norm(batch_norm_momentum, f"{name}_{label}_bn"))
        stack.append(layers.ReLU(name=f"{name}_{label}_relu"))
        stack.append(_conv(filters, size, weight_decay, f"{name}_{label}_conv"))
        if dropout:
            stack.append(layers.Dropout(dropout, name=f"{name}_{label}_dropout"))
    return stack


def _transition_layers(filters, batch_norm, dropout, weight_decay, name,
                       batch_norm_momentum=0.99, pool="average"):
    """The layers of a transition: [BN-]ReLU-Conv1x1-[Dropout-]Pool2x2 (average or max)."""
    stack = [_batch_norm(batch_norm_momentum, f"{name}_bn")] if batch_norm else []
    stack += [layers.ReLU(name=f"{name}_relu"),
              _conv(filters, 1, weight_decay, f"{name}_conv")]
    if dropout:
        stack.append(layers.Dropout(dropout, name=f"{name}_dropout"))
    pooling = {"average": layers.AveragePooling2D, "max": layers.MaxPooling2D}[pool]
    stack.append(pooling(2, name=f"{name}_pool"))
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
               weight_decay=0.0, batch_norm_momentum=0.99, name="conv_block"):
    """One dense-block layer: new features concatenated to its input.

    Args:
        x: input tensor.
        growth_rate: feature maps the layer adds (k).
        bottleneck: whether a 1x1 convolution to 4k maps comes first ("B").
        batch_norm: whether each convolution is preceded by batch norm.
        dropout: dropout rate after each convolution; 0 for none.
        weight_decay: L2 weight decay of the convolution kernels.
        batch_norm_momentum: of the moving statistics (Keras' default 0.99;
            0.9 forgets the initial statistics 10x faster, for short runs).
        name: prefix of the layer names.

    Returns:
        `x` with `growth_rate` more channels.
    """
    y = _apply(_composite_layers(growth_rate, bottleneck, batch_norm, dropout,
                                 weight_decay, name, batch_norm_momentum), x)
    return layers.Concatenate(name=f"{name}_concat")([x, y])


def dense_block(x, num_layers, growth_rate, name="dense_block", **block_args):
    """A dense block: `num_layers` conv blocks, each seeing all earlier maps.

    Args:
        x: input tensor.
        num_layers: conv blocks in the block.
        growth_rate: feature maps each conv block adds.
        name: prefix of the layer names.
        **block_args: `bottleneck`, `batch_norm`, `dropout`, `weight_decay`,
            `batch_norm_momentum` of `conv_block`.

    Returns:
        `x` with `num_layers * growth_rate` more channels.
    """
    for index in range(1, num_layers + 1):
        x = conv_block(x, growth_rate, name=f"{name}_layer{index}", **block_args)
    return x


def transition_block(x, compression, batch_norm=True, dropout=0.0, weight_decay=0.0,
                     batch_norm_momentum=0.99, pool="average", name="transition"):
    """A transition: 1x1 convolution to fewer maps, then 2x2 pooling.

    Args:
        x: input tensor.
        compression: fraction of the channels kept (theta; 0.5 in "C" nets).
        batch_norm, dropout, weight_decay, batch_norm_momentum: as in `conv_block`.
        pool: `"average"` (the paper's) or `"max"`.
        name: prefix of the layer names.

    Returns:
        A tensor of half the spatial size and `compression` of the channels.
    """
    filters = int(x.shape[-1] * compression)
    return _apply(_transition_layers(filters, batch_norm, dropout, weight_decay, name,
                                     batch_norm_momentum, pool), x)


@keras.saving.register_keras_serializable(package="densenet")
class DenseBlock(layers.Layer):
    """A dense block as one layer, for `keras.Sequential` models.

    Args:
        num_layers, growth_rate, bottleneck, batch_norm, dropout,
        weight_decay, batch_norm_momentum: as in `dense_block`.
    """

    def __init__(self, num_layers, growth_rate, bottleneck=True, batch_norm=True,
                 dropout=0.0, weight_decay=0.0, batch_norm_momentum=0.99, **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(num_layers=num_layers, growth_rate=growth_rate,
                             bottleneck=bottleneck, batch_norm=batch_norm,
                             dropout=dropout, weight_decay=weight_decay,
                             batch_norm_momentum=batch_norm_momentum)
        self.composites = [
            _composite_layers(growth_rate, bottleneck, batch_norm, dropout,
                              weight_decay, f"{self.name}_layer{index}", batch_norm_momentum)
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
        compression, batch_norm, dropout, weight_decay, batch_norm_momentum,
        pool: as in `transition_block`.
    """

    def __init__(self, compression, batch_norm=True, dropout=0.0, weight_decay=0.0,
                 batch_norm_momentum=0.99, pool="average", **kwargs):
        super().__init__(**kwargs)
        self.settings = dict(compression=compression, batch_norm=batch_norm,
                             dropout=dropout, weight_decay=weight_decay,
                             batch_norm_momentum=batch_norm_momentum, pool=pool)

    def build(self, input_shape):
        # The filter count depends on the input's channels, known only now.
        settings = dict(self.settings)
        filters = int(input_shape[-1] * settings.pop("compression"))
        self.stack = _transition_layers(filters, name=self.name, **settings)
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
             normalization=None, api="functional", stem_filters=None, stem_pool=False,
             transition_pool="average", batch_norm_momentum=0.99, name="densenet"):
    """Builds a CIFAR-style DenseNet.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`.
        num_classes: number of output classes.
        depth: total depth L; (L - 4) must divide by 3, or by 6 with bottlenecks.
        growth_rate: feature maps each layer adds (k): one number, or one per
            dense block.
        bottleneck: 1x1 bottleneck convolutions ("B").
        compression: channels kept by each transition (0.5 for "C", 1 for none).
        dropout: dropout rate after each convolution (the paper: 0.2 without
            augmentation, 0 with).
        batch_norm: batch norm before each convolution; False leaves it out.
        weight_decay: L2 weight decay of every kernel, in Torch's convention.
        normalization: an optional layer applied to the input first (per-channel
            normalization, say), so the saved model takes raw [0, 1] images.
        api: `"functional"`, or `"sequential"` for the custom-layer version.
        stem_filters: the stem convolution's maps; None: the paper's (2k for
            DenseNet-BC, else 16).
        stem_pool: whether the stem is conv-BN-ReLU-max-pool, halving the
            image before the first block (the ImageNet DenseNet's stem).
        transition_pool: `"average"` (the paper's) or `"max"`.
        batch_norm_momentum: of every batch norm's moving statistics.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    per_block = _layers_per_block(depth, bottleneck)
    growth_rates = _growth_rates(growth_rate)
    if api not in ("functional", "sequential"):
        raise ValueError(f"api must be 'functional' or 'sequential', received: api={api!r}")
    block_args = dict(bottleneck=bottleneck, batch_norm=batch_norm, dropout=dropout,
                      weight_decay=weight_decay, batch_norm_momentum=batch_norm_momentum)
    transition_args = dict(batch_norm=batch_norm, dropout=dropout, weight_decay=weight_decay,
                           batch_norm_momentum=batch_norm_momentum, pool=transition_pool)
    if stem_filters is None:
        stem_filters = 2 * growth_rates[0] if bottleneck and compression < 1 else 16

    inputs = keras.Input(shape=input_shape, name="image")
    head = _head_layers(num_classes, batch_norm, weight_decay, batch_norm_momentum)
    stem = _stem_layers(stem_filters, stem_pool, batch_norm, weight_decay, batch_norm_momentum)

    if api == "sequential":
        stack = [inputs, *([normalization] if normalization else []), *stem]
        for block, block_growth in enumerate(growth_rates, start=1):
            stack.append(DenseBlock(per_block, block_growth, name=f"block{block}", **block_args))
            if block < NUM_BLOCKS:
                stack.append(TransitionBlock(compression, name=f"transition{block}",
                                             **transition_args))
        return keras.Sequential(stack + head, name=name)

    x = normalization(inputs) if normalization else inputs
    x = _apply(stem, x)
    for block, block_growth in enumerate(growth_rates, start=1):
        x = dense_block(x, per_block, block_growth, name=f"block{block}", **block_args)
        if block < NUM_BLOCKS:
            x = transition_block(x, compression, name=f"transition{block}", **transition_args)
    return keras.Model(inputs, _apply(head, x), name=name)


def _stem_layers(filters, pool, batch_norm, weight_decay, batch_norm_momentum):
    """The stem: a 3x3 convolution, and with `pool` [BN-]ReLU-MaxPool2x2 after it."""
    stem = [_conv(filters, 3, weight_decay, "stem_conv")]
    if pool:
        stem += [*([_batch_norm(batch_norm_momentum, "stem_bn")] if batch_norm else []),
                 layers.ReLU(name="stem_relu"), layers.MaxPooling2D(2, name="stem_pool")]
    return stem


def _head_layers(num_classes, batch_norm, weight_decay, batch_norm_momentum):
    """The classifier: [BN-]ReLU-GlobalAveragePool-Dense with a softmax."""
    head = [_batch_norm(batch_norm_momentum, "final_bn")] if batch_norm else []
    return head + [layers.ReLU(name="final_relu"),
                   layers.GlobalAveragePooling2D(name="pool"),
                   # float32 softmax: see models/mlp.py.
                   layers.Dense(num_classes, activation="softmax", dtype="float32",
                                kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                                if weight_decay else None, name="predictions")]


def _growth_rates(growth_rate):
    """One growth rate per dense block, from one for all or a list of them."""
    if isinstance(growth_rate, int):
        return (growth_rate,) * NUM_BLOCKS
    if len(growth_rate) != NUM_BLOCKS or not all(isinstance(k, int) and k > 0 for k in growth_rate):
        raise ValueError(f"growth_rate takes one positive integer or {NUM_BLOCKS}, one per "
                         f"dense block, received: growth_rate={growth_rate!r}")
    return tuple(growth_rate)


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
    _growth_rates(spec["growth_rate"])
    return spec


def densenet_variant(variant, **kwargs):
    """Builds a named variant from `VARIANTS`; `kwargs` override its fields."""
    return densenet(**{**variant_spec(variant), **kwargs})
