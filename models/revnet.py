"""RevNet: reversible residual networks for 32x32 images (Gomez et al. 2017, arXiv 1707.04585).

A reversible unit splits its input's channels into halves x1, x2 and computes

    y1 = x1 + F(x2),    y2 = x2 + G(y1),

so its input follows from its output: x2 = y2 - G(y1), x1 = y1 - F(x2). A
stage of such units need not keep its activations for the backward pass:
`ReversibleStage`'s custom gradient rebuilds them from the stage's output,
one unit at a time, backwards, so the memory a training step needs hardly
grows with depth. Each stage starts with an `EntryUnit`, which changes the
width and resolution and cannot be inverted; it backpropagates as usual.

`backprop` chooses how a stage computes its gradient, on the same weights:
`"reversible"`, the custom gradient; `"standard"`, ordinary backpropagation,
which keeps every activation; `"remat"`, `keras.remat` on each unit, which
keeps each unit's input and recomputes the rest (and, unlike the reversible
gradient, updates batch norm's moving statistics a second time while doing
so).

Layout (the TensorFlow RevNet example, `tensorflow/contrib/eager/python/
examples/revnet/config.py`): a 3x3 stem convolution, then three stages of
units at widths `filters` (the second and third halve the resolution), then
batch norm, ReLU, global average pooling and a softmax classifier.
"""

import functools

import keras
import tensorflow as tf
from keras import layers, ops

# The stem's width, units per stage (an EntryUnit, then reversible units),
# the stages' widths, bottleneck.
VARIANTS = {
    "revnet38": dict(init_filters=32, units=(3, 3, 3), filters=(32, 64, 112), bottleneck=False),
    "revnet110": dict(init_filters=32, units=(9, 9, 9), filters=(32, 64, 128), bottleneck=False),
    "revnet164": dict(init_filters=32, units=(9, 9, 9), filters=(128, 256, 512),
                      bottleneck=True),
}
BACKPROPS = ("reversible", "standard", "remat")


def residual_function(filters, bottleneck, weight_decay, strides=1, name="residual"):
    """F or G: BN-ReLU-Conv3x3 twice, or with a bottleneck BN-ReLU-Conv1x1 to
    filters/4, BN-ReLU-Conv3x3, BN-ReLU-Conv1x1 back to filters. The first
    convolution takes `strides`. No dropout: the backward pass recomputes F
    and G and must get the same function.

    Returns:
        An unbuilt `keras.Sequential`.
    """
    shapes = ([(filters // 4, 1), (filters // 4, 3), (filters, 1)] if bottleneck
              else [(filters, 3), (filters, 3)])
    stack = []
    for index, (count, size) in enumerate(shapes, start=1):
        stack += [
            layers.BatchNormalization(name=f"{name}_bn{index}"),
            layers.ReLU(name=f"{name}_relu{index}"),
            _conv(count, size, weight_decay, f"{name}_conv{index}",
                  strides=strides if index == 1 else 1),
        ]
    return keras.Sequential(stack, name=name)


def _conv(filters, size, weight_decay, name, strides=1):
    # weight_decay/2 * ||w||^2, as the TensorFlow example's tf.nn.l2_loss.
    regularizer = keras.regularizers.L2(weight_decay / 2) if weight_decay else None
    return layers.Conv2D(filters, size, strides=strides, padding="same", use_bias=False,
                         kernel_initializer="he_normal", kernel_regularizer=regularizer,
                         name=name)


def _split(x):
    return ops.split(x, 2, axis=-1)


@keras.saving.register_keras_serializable(package="models")
class EntryUnit(layers.Layer):
    """The first unit of a stage: y1 = x1' + F(x2), y2 = x2' + G(y1), where
    F's first convolution is strided and each x' is its half average-pooled
    by the stride and zero-padded to the new width. Not invertible, so it
    backpropagates as usual.

    Args:
        filters: the output's channels (even).
        strides: 1, or 2 to halve the resolution.
        bottleneck, weight_decay: as in `residual_function`.
    """

    def __init__(self, filters, strides=1, bottleneck=False, weight_decay=0.0, **kwargs):
        super().__init__(**kwargs)
        if filters % 2:
            raise ValueError(f"`filters` must be even, received: filters={filters}")
        self.settings = dict(filters=filters, strides=strides, bottleneck=bottleneck,
                             weight_decay=weight_decay)
        half = filters // 2
        self.f = residual_function(half, bottleneck, weight_decay, strides, f"{self.name}_f")
        self.g = residual_function(half, bottleneck, weight_decay, 1, f"{self.name}_g")

    def build(self, input_shape):
        batch, height, width, channels = input_shape
        self.f.build((batch, height, width, channels // 2))
        self.g.build(self.f.compute_output_shape((batch, height, width, channels // 2)))

    def call(self, x, training=None):
        x1, x2 = _split(x)
        y1 = self._shortcut(x1) + self.f(x2, training=training)
        y2 = self._shortcut(x2) + self.g(y1, training=training)
        return ops.concatenate([y1, y2], axis=-1)

    def _shortcut(self, x):
        strides = self.settings["strides"]
        if strides > 1:
            x = ops.average_pool(x, strides, strides, padding="valid")
        missing = self.settings["filters"] // 2 - x.shape[-1]
        return ops.pad(x, [[0, 0], [0, 0], [0, 0], [0, missing]]) if missing else x

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        strides = self.settings["strides"]
        return (batch, height // strides if height else None, width // strides if width else None,
                self.settings["filters"])

    def get_config(self):
        return {**super().get_config(), **self.settings}


@keras.saving.register_keras_serializable(package="models")
class ReversibleStage(layers.Layer):
    """Reversible units, y1 = x1 + F(x2), y2 = x2 + G(y1), at one width and
    resolution, with the gradient that `backprop` names.

    The reversible gradient is one `tf.custom_gradient` over the whole stage:
    the forward pass keeps only the stage's output, and the backward pass
    walks the units backwards, rebuilding each unit's input from its output
    and running F and G again under a tape to get their gradients. A custom
    gradient per unit would keep every unit's output instead.

    Args:
        units: reversible units in the stage.
        filters: the stage's channels (even), in and out.
        bottleneck, weight_decay: as in `residual_function`.
        backprop: `"reversible"`, `"standard"` or `"remat"`.
    """

    def __init__(self, units, filters, bottleneck=False, weight_decay=0.0,
                 backprop="reversible", **kwargs):
        super().__init__(**kwargs)
        if backprop not in BACKPROPS:
            raise ValueError(f"`backprop` must be one of {BACKPROPS}, "
                             f"received: backprop={backprop!r}")
        self.settings = dict(units=units, filters=filters, bottleneck=bottleneck,
                             weight_decay=weight_decay, backprop=backprop)
        half = filters // 2
        self.residuals = [
            (residual_function(half, bottleneck, weight_decay, name=f"{self.name}_unit{i}_f"),
             residual_function(half, bottleneck, weight_decay, name=f"{self.name}_unit{i}_g"))
            for i in range(1, units + 1)]

    def build(self, input_shape):
        half = (*input_shape[:-1], input_shape[-1] // 2)
        for f, g in self.residuals:
            f.build(half)
            g.build(half)

    def call(self, x, training=None):
        x1, x2 = _split(x)
        backprop = self.settings["backprop"]
        if backprop == "reversible":
            y1, y2 = self.reversible(x1, x2, training=bool(training))
        else:
            for f, g in self.residuals:
                # Bound here: graph-mode custom gradients take no keyword arguments.
                unit = functools.partial(_unit, f, g, training=training)
                x1, x2 = (keras.remat(unit) if backprop == "remat" else unit)(x1, x2)
            y1, y2 = x1, x2
        return ops.concatenate([y1, y2], axis=-1)

    def reversible(self, x1, x2, training):
        """The stage's units on halves `x1`, `x2`, with the reversible gradient."""
        residuals = self.residuals
        # The trainable weights enter as inputs, read here: the gradient
        # returns theirs as it returns any input's, and the reads (casts,
        # under a mixed policy) carry it on to the variables. Nothing inside
        # reads a trainable variable, so tf.custom_gradient asks for no
        # `variables=` gradients (it raises a TypeError if something does).
        weights = [(_values(f.trainable_variables), _values(g.trainable_variables))
                   for f, g in residuals]

        @tf.custom_gradient
        def stage(x1, x2, *flat_weights):
            units = list(zip(residuals, tf.nest.pack_sequence_as(weights, flat_weights)))
            # Nothing here for an outer tape to record (and keep): the
            # gradient comes from `gradient` alone.
            x1, x2 = tf.stop_gradient(x1), tf.stop_gradient(x2)
            for (f, g), (f_weights, g_weights) in units:
                x1 = x1 + _forward(f, f_weights, x2, training)
                x2 = x2 + _forward(g, g_weights, x1, training)
            y1, y2 = x1, x2

            def gradient(dy1, dy2):
                b1, b2, found = y1, y2, []
                for (f, g), (f_weights, g_weights) in reversed(units):
                    # Rebuilding a unit's input needs only the outputs, so a
                    # graph executor (and XLA) would run the whole chain of
                    # reconstructions at once, ahead of the gradients, and
                    # hold all of it: each unit waits for the gradient of the
                    # one after it (TF's recompute_grad adds the same data
                    # dependency, once).
                    zero = _zero_after(dy1)
                    b1, b2 = b1 + ops.cast(zero, b1.dtype), b2 + ops.cast(zero, b2.dtype)
                    # The unit's input, rebuilt by `inverse`'s own code; the
                    # tape keeps one unit's F and G for their gradients.
                    with tf.GradientTape(persistent=True) as tape:
                        tape.watch([b1, *f_weights, *g_weights])
                        x1, x2 = _inverse_unit(f, g, f_weights, g_weights, b1, b2, training)
                    # x2 = y2 - G(y1) and x1 = y1 - F(x2), so backpropagating
                    # -dy2 from x2 is backpropagating dy2 through G (to y1
                    # and G's weights), and -dz1 from x1 is dz1 through F.
                    from_g, *g_grads = tape.gradient(x2, [b1, *g_weights], output_gradients=-dy2)
                    dz1 = dy1 + from_g
                    from_f, *f_grads = tape.gradient(x1, [x2, *f_weights], output_gradients=-dz1)
                    found.append((f_grads, g_grads))
                    b1, b2 = x1, x2
                    dy1, dy2 = dz1, dy2 + from_f
                # One gradient per input: the halves', then the weights'.
                return (dy1, dy2, *tf.nest.flatten(found[::-1]))

            return (y1, y2), gradient

        return stage(x1, x2, *tf.nest.flatten(weights))

    def inverse(self, y, training=False):
        """The stage's input, rebuilt from its output `y` unit by unit, with
        the code the reversible backward pass runs."""
        y1, y2 = _split(y)
        for f, g in reversed(self.residuals):
            y1, y2 = _inverse_unit(f, g, _values(f.trainable_variables),
                                   _values(g.trainable_variables), y1, y2, training)
        return ops.concatenate([y1, y2], axis=-1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), **self.settings}


def _unit(f, g, x1, x2, training=None):
    """One reversible unit, forward: (x1, x2) -> (y1, y2)."""
    y1 = x1 + f(x2, training=training)
    return y1, x2 + g(y1, training=training)


def _forward(function, weights, x, training):
    """`function(x)` on trainable `weights`, with nothing for a tape to
    record: stateless, on values cut from the graph of gradients, its state
    updates assigned after."""
    out, updated = function.stateless_call([tf.stop_gradient(w) for w in weights],
                                           _values(function.non_trainable_variables),
                                           x, training=training)
    for variable, value in zip(function.non_trainable_variables, updated):
        variable.assign(value)
    return out


def _inverse_unit(f, g, f_weights, g_weights, y1, y2, training):
    """One reversible unit backwards: its input `(x1, x2)` from its output,
    x2 = y2 - G(y1), x1 = y1 - F(x2), with F and G on the given trainable
    weights. Stateless: batch norm's moving statistics, updated by the
    forward pass, are not updated a second time."""
    x2 = y2 - g.stateless_call(g_weights, _values(g.non_trainable_variables), y1,
                               training=training)[0]
    x1 = y1 - f.stateless_call(f_weights, _values(f.non_trainable_variables), x2,
                               training=training)[0]
    return x1, x2


def _values(variables):
    """The current values of `variables`, as tensors."""
    return [tf.convert_to_tensor(v.value) for v in variables]


def _zero_after(tensor):
    """A scalar 0 computed from `tensor`, with no gradient (TensorFlow's
    `recompute_grad` trick: a comparison XLA does not fold away)."""
    first = ops.max(ops.reshape(tensor, [-1])[:1])
    flag = ops.stop_gradient(ops.cast(first, "bool"))
    return ops.where(ops.equal(flag, flag), 0.0, float("nan"))


def revnet(input_shape, num_classes, units=(3, 3, 3), filters=(32, 64, 112),
           bottleneck=False, init_filters=32, weight_decay=2e-4, backprop="reversible",
           normalization=None, name="revnet"):
    """Builds a CIFAR-style RevNet.

    Args:
        input_shape: shape of one image, e.g. `(32, 32, 3)`.
        num_classes: number of output classes.
        units: units per stage, the `EntryUnit` included.
        filters: each stage's width.
        bottleneck: bottleneck residual functions (RevNet-164).
        init_filters: the stem convolution's width.
        weight_decay: L2 weight decay of every kernel, as weight_decay/2 * ||w||^2.
        backprop: how the reversible stages backpropagate: `"reversible"`,
            `"standard"` or `"remat"`.
        normalization: an optional layer applied to the input first.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` that outputs class probabilities.
    """
    if backprop not in BACKPROPS:
        raise ValueError(f"`backprop` must be one of {BACKPROPS}, received: backprop={backprop!r}")
    inputs = keras.Input(shape=input_shape, name="image")
    x = normalization(inputs) if normalization else inputs
    x = _conv(init_filters, 3, weight_decay, "stem_conv")(x)
    x = layers.BatchNormalization(name="stem_bn")(x)
    x = layers.ReLU(name="stem_relu")(x)
    for stage, (count, width) in enumerate(zip(units, filters), start=1):
        x = EntryUnit(width, 1 if stage == 1 else 2, bottleneck, weight_decay,
                      name=f"stage{stage}_entry")(x)
        if count > 1:
            x = ReversibleStage(count - 1, width, bottleneck, weight_decay, backprop,
                                name=f"stage{stage}")(x)
    x = layers.BatchNormalization(name="final_bn")(x)
    x = layers.ReLU(name="final_relu")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    # float32 softmax: see models/mlp.py.
    outputs = layers.Dense(num_classes, activation="softmax", dtype="float32",
                           kernel_regularizer=keras.regularizers.L2(weight_decay / 2)
                           if weight_decay else None, name="predictions")(x)
    return keras.Model(inputs, outputs, name=name)


def depth(units, bottleneck, **unused):
    """The paper's depth of a RevNet: its stem, 2 (basic) or 3 (bottleneck)
    convolutions in each of F and G of every unit, and the classifier."""
    return 2 + sum(units) * 2 * (3 if bottleneck else 2)


def variant_spec(variant, **fields):
    """Returns `variant`'s fields from `VARIANTS`, overridden by `fields` that
    are not None, after checking that they describe a RevNet.

    Raises:
        ValueError: for an unknown variant or inconsistent fields.
    """
    if variant not in VARIANTS:
        raise ValueError(f"Unknown RevNet variant {variant!r}; known: {', '.join(VARIANTS)}")
    spec = {**VARIANTS[variant], **{k: v for k, v in fields.items() if v is not None}}
    units, filters = list(spec["units"]), list(spec["filters"])
    if len(units) != len(filters) or not units or min(units) < 1:
        raise ValueError(f"`units` and `filters` need one entry per stage, units at least 1; "
                         f"received: units={units}, filters={filters}")
    if any(width % 2 or (spec["bottleneck"] and width % 8) for width in filters):
        raise ValueError(f"every width must be even (a multiple of 8 with bottlenecks), "
                         f"received: filters={filters}")
    if any(later < earlier for earlier, later in zip([spec["init_filters"], *filters], filters)):
        raise ValueError(f"widths must not shrink from the stem's (init_filters="
                         f"{spec['init_filters']}) on: an entry unit pads channels, it cannot "
                         f"drop them; received: filters={filters}")
    return {**spec, "units": tuple(units), "filters": tuple(filters)}


def revnet_variant(variant, **kwargs):
    """Builds a named variant from `VARIANTS`; `kwargs` override its fields."""
    fields = {key: kwargs.pop(key) for key in ("init_filters", "units", "filters", "bottleneck")
              if key in kwargs}
    return revnet(**variant_spec(variant, **fields), **kwargs)
