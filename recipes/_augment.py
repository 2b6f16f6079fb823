"""Training-time augmentation: what (`data.augment`), where (`data.augment_on`)
and with which library (`data.augment_engine`).

`data.augment` lists operations applied in order to whole training batches of
float images in [0, 1]. Each entry is a name, or a one-key mapping from a name
to its parameters:

    data.augment=[flip,pad_crop,{randaugment: {magnitude: 0.3}},cutmix]

`alternating_flip` is the exception: the input pipeline mirrors each image
before batching, a seeded half of them in even passes over the data and the
other half in odd ones (`alternating_flips`), wherever the other operations run.

Only training batches are augmented: validation, test and prediction see the
images as they are. `mixup` and `cutmix` blend pairs of images and their
labels into soft labels: with them, the pipeline gives one-hot labels
(`recipes/_data.py`) and recipes train on a categorical cross-entropy.

`data.augment_on` places the work:
- `host`: a map in the tf.data pipeline, on the CPU, overlapping the step;
- `device`: inside `fit`'s training step, on the accelerator: the recipe
  wraps its model in `models.AugmentedModel`;
- `auto`: `device` when the backend sees a GPU, else `host` (the faster one on
  this repository's CPU machine; docs/augmentation.md); `device` without
  TensorFlow installed, where tf.data is not.

`data.augment_engine` picks the layers: `keras_cv`, or `keras`, Keras core's
equivalents under the same names and parameters; `auto` (the default) is
keras-cv on TensorFlow and Keras core on JAX, where keras-cv's TensorFlow
layers cannot run in the step. keras-cv's last release was in April 2024; the
docs/augmentation.md lists what differs between the two. It is imported only when one of
its operations is built.
"""

import inspect
import math
import sys

import keras
import numpy as np
from keras import ops

from recipes import UserError

ENGINES = ("keras_cv", "keras")


def _layers(engine):
    """The module whose layers `engine` names."""
    if engine == "keras_cv":
        from recipes import _environment

        if not _environment.has_tensorflow():
            raise UserError("data.augment_engine=keras_cv needs TensorFlow (keras-cv's layers "
                            "are TensorFlow code), not installed here: set "
                            "data.augment_engine=keras, Keras core's layers.")
        import keras_cv

        return keras_cv.layers
    return keras.layers


def flip(engine, seed, mode="horizontal"):
    """Random flips (RandomFlip)."""
    return _images_only(_layers(engine).RandomFlip(mode, seed=seed, dtype="float32"))


def pad_crop(engine, seed, padding=4, fill="black"):
    """Pads by `padding` pixels, then crops each image back at a random offset.

    `fill` is what the padding holds: `black` (0); `mean`, the batch's
    mean colour per channel, which is what the DenseNet paper's code pads
    with: it normalizes first, then pads with zeros (liuzhuang13/DenseNet,
    `datasets/cifar10.lua`); or `reflect`, the edge pixels mirrored, as
    cifar10-airbench's translations are, so that no border comes in.

    Our own, the same for both engines: Keras' RandomCrop shifts a whole batch
    by one offset, and keras-cv's resamples the window (some crops come out
    stretched by a pixel); the DenseNet paper shifts each image by whole pixels.
    `PadCrop` does it in `keras.ops`, drawing from its `SeedGenerator` (whose
    state `callbacks.EpochSeeds` sets each epoch); TensorFlow tensors under
    the JAX backend (tf.data) take TensorFlow's ops instead.
    """
    del engine  # the same code for both
    if fill not in FILLS:
        raise UserError(f"pad_crop's fill must be one of {', '.join(FILLS)}, got {fill!r}.")
    layer = PadCrop(padding, fill, seed=seed, dtype="float32")

    def apply(images, labels):
        tf = sys.modules.get("tensorflow")  # not imported: `images` is not its tensor
        if (tf is None or not isinstance(images, tf.Tensor)
                or keras.backend.backend() == "tensorflow"):
            return layer(images, training=True), labels
        batch, height, width = tf.unstack(tf.shape(images)[:3])
        sides = [[0, 0], [padding, padding], [padding, padding], [0, 0]]
        if fill == "reflect":
            padded = tf.pad(images, sides, mode="REFLECT")
        else:
            colour = tf.reduce_mean(images, axis=[0, 1, 2], keepdims=True) if fill == "mean" else 0.0
            padded = tf.pad(images - colour, sides) + colour
        offsets = tf.random.uniform([batch, 2], 0, 2 * padding + 1, tf.int32, seed=seed)
        rows = offsets[:, :1] + tf.range(height)
        columns = offsets[:, 1:] + tf.range(width)
        cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
        return tf.gather(cropped, columns, axis=2, batch_dims=1), labels

    return apply, layer


@keras.saving.register_keras_serializable(package="recipes")
class PadCrop(keras.layers.Layer):
    """Pads a batch by `padding` pixels and crops each image back at its own
    random offset, by whole pixels, in `keras.ops`: any backend's step.

    Args:
        padding: pixels added on each side, and so the largest shift.
        fill: `black` pads with 0; `mean` with the batch's mean colour;
            `reflect` with the edge pixels mirrored.
        seed: seeds the layer's `SeedGenerator`.
    """

    def __init__(self, padding=4, fill="black", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.padding, self.fill, self.seed = padding, fill, seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, images, training=True):
        if not training:
            return images
        p = self.padding
        batch, height, width = ops.shape(images)[:3]
        sides = [[0, 0], [p, p], [p, p], [0, 0]]
        if self.fill == "reflect":
            padded = ops.pad(images, sides, mode="reflect")
        else:
            colour = ops.mean(images, axis=(0, 1, 2), keepdims=True) if self.fill == "mean" else 0.0
            padded = ops.pad(images - colour, sides) + colour
        offsets = keras.random.randint((batch, 2), 0, 2 * p + 1, seed=self.seed_generator)
        rows = offsets[:, :1] + ops.arange(height)  # (batch, height)
        columns = offsets[:, 1:] + ops.arange(width)
        cropped = ops.take_along_axis(padded, rows[:, :, None, None], axis=1)
        return ops.take_along_axis(cropped, columns[:, None, :, None], axis=2)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "padding": self.padding, "fill": self.fill,
                "seed": self.seed}


# What pad_crop's padding holds: 0, the batch's mean colour per channel, or the mirrored edge.
FILLS = ("black", "mean", "reflect")


def shift(engine, seed, factor=0.1, fill_mode="nearest"):
    """Random shifts of up to `factor` of the height and width, by fractions
    of a pixel (bilinear), filling what comes in from the edge as `fill_mode`
    says: Keras 2's ImageDataGenerator(width_shift_range=0.1,
    height_shift_range=0.1), whose default fill is the nearest pixel.

    Keras core's RandomTranslation for both engines: it is that generator's
    shift, made a layer.
    """
    del engine  # the same layer for both
    return _images_only(keras.layers.RandomTranslation(
        factor, factor, fill_mode=fill_mode, interpolation="bilinear", seed=seed,
        dtype="float32"))


def randaugment(engine, seed, magnitude=0.5, augmentations_per_image=2):
    """RandAugment: `augmentations_per_image` random operations of strength `magnitude`."""
    if engine == "keras":
        return _images_only(keras.layers.RandAugment(
            value_range=(0, 1), factor=magnitude, num_ops=augmentations_per_image,
            seed=seed, dtype="float32"))

    layer = _layers("keras_cv").RandAugment(
        value_range=(0, 1), magnitude=magnitude, augmentations_per_image=augmentations_per_image,
        seed=seed, dtype="float32", name="rand_augment")

    import tensorflow as tf  # keras-cv's layers are TensorFlow code

    def apply(images, labels):
        # One image at a time, in order: every image draws from the layer's one
        # seed state, and the parallel iterations of its own batch loop would
        # draw in a different order each run, so a seeded run would not
        # repeat. Slower; docs/augmentation.md has its speed.
        one_by_one = tf.map_fn(lambda image: layer(image, training=True), images,
                               parallel_iterations=1)
        return one_by_one, labels

    return apply, layer


def random_erasing(engine, seed, scale=(0.02, 0.33)):
    """Sets a random rectangle of each image to 0; `scale`: its area range,
    as fractions of the image (each side is a square root of one)."""
    if engine == "keras_cv":
        sides = tuple(math.sqrt(s) for s in scale)
        layer = _layers(engine).RandomCutout(height_factor=sides, width_factor=sides,
                                             fill_value=0.0, seed=seed, dtype="float32")
    else:
        layer = keras.layers.RandomErasing(factor=(1.0, 1.0), scale=scale, fill_value=0.0,
                                           value_range=(0, 1), seed=seed, dtype="float32")
    return _images_only(layer)


def color_jitter(engine, seed, brightness_factor=0.2, contrast_factor=0.2,
                 saturation_factor=(0.3, 0.7), hue_factor=0.05):
    """Random brightness, contrast, saturation and hue (RandomColorJitter;
    saturation 0.5 leaves an image as it is)."""
    layer = _layers(engine).RandomColorJitter(
        value_range=(0, 1), brightness_factor=brightness_factor,
        contrast_factor=contrast_factor, saturation_factor=saturation_factor,
        hue_factor=hue_factor, seed=seed, dtype="float32")
    return _images_only(layer)


def mixup(engine, seed, alpha=0.2):
    """MixUp: blends pairs of images and their labels, weights from Beta(alpha, alpha)."""
    return _mixing(_layers(engine).MixUp(alpha=alpha, seed=seed, dtype="float32"))


def cutmix(engine, seed, alpha=1.0):
    """CutMix: pastes a box of another image, labels mixed by its area.
    keras-cv draws the area from Beta(alpha, alpha); Keras core first draws
    its Beta parameter from U(0, alpha), with alpha at most 1."""
    if engine == "keras_cv":
        layer = _layers(engine).CutMix(alpha=alpha, seed=seed, dtype="float32")
    else:
        layer = keras.layers.CutMix(factor=alpha, seed=seed, dtype="float32")
    return _mixing(layer)


# Each operation returns (apply, layer): `(images, labels) -> (images,
# labels)` on a batch, and the Keras layer that it draws random numbers with.


def _images_only(layer):
    return (lambda images, labels: (layer(images, training=True), labels)), layer


def _mixing(layer):
    def apply(images, labels):
        mixed = layer({"images": images, "labels": labels}, training=True)
        return mixed["images"], mixed["labels"]

    return apply, layer


class Augmentation:
    """`data.augment`'s operations as one function on whole batches:
    `(images, labels) -> (images, labels)`, applied in order.

    Attributes:
        layers: the Keras layers the operations draw random numbers with. A
            model that augments in its training step tracks them, so that on
            JAX their seed states travel with the step's state.
        engine: the library whose layers it uses, `keras_cv` or `keras`.
    """

    def __init__(self, steps, engine):
        self._steps = steps
        self.layers = [layer for _, layer in steps]
        self.engine = engine

    def __call__(self, images, labels):
        for apply, _ in self._steps:
            images, labels = apply(images, labels)
        return images, labels


# Not a batch operation: the input pipeline mirrors each image itself, since
# the choice depends on the image's index and the pass over the data.
ALTERNATING_FLIP = "alternating_flip"


def alternating_flips(count, seed):
    """`alternating_flip`: which of `count` training images are mirrored in
    even passes over the data (a seeded half); the others are mirrored in odd
    passes. cifar10-airbench's derandomized flip: every image is seen both
    ways in any two consecutive epochs, where random flips show a quarter of
    them one way twice."""
    return np.random.default_rng([seed, count]).random(count) < 0.5


def has_alternating_flip(entries):
    return any(_parse(entry)[0] == ALTERNATING_FLIP for entry in entries)


OPERATIONS = {operation.__name__: operation for operation in (
    flip, pad_crop, shift, randaugment, random_erasing, color_jitter, mixup, cutmix)}
NEEDS_ONE_HOT = {"mixup", "cutmix"}


def mixes_labels(entries):
    """Whether `data.augment` entries blend labels, so need one-hot ones."""
    return any(_parse(entry)[0] in NEEDS_ONE_HOT for entry in entries)


def pipeline(entries, one_hot, seed=0, engine="auto"):
    """Returns an `Augmentation` applying `entries` in order with `engine`'s
    layers (`auto`: `resolve_engine`'s), or None when there are none.

    Raises:
        UserError: for an unknown operation or parameter.
        ValueError: for a mixing operation on integer labels.
    """
    engine, steps = resolve_engine(engine), []
    for index, entry in enumerate(entries):
        name, params = _parse(entry)
        if name == ALTERNATING_FLIP:
            if params:
                raise UserError(f"data.augment: '{ALTERNATING_FLIP}' takes no parameters.")
            continue
        if name not in OPERATIONS:
            raise UserError(f"Unknown augmentation '{name}' in data.augment; "
                            f"known: {', '.join([*OPERATIONS, ALTERNATING_FLIP])}.")
        if name in NEEDS_ONE_HOT and not one_hot:
            raise ValueError(f"'{name}' mixes labels: it needs one-hot labels.")
        try:
            steps.append(OPERATIONS[name](engine, seed + index, **params))
        except (TypeError, ValueError) as error:
            accepted = list(inspect.signature(OPERATIONS[name]).parameters)[2:]
            raise UserError(f"data.augment: bad parameters for '{name}' ({error}); "
                            f"it takes {', '.join(accepted) or 'none'}.") from None
    return Augmentation(steps, engine) if steps else None


def resolve_engine(engine):
    """`data.augment_engine`, with `auto` made keras-cv on TensorFlow and
    Keras core's layers on JAX."""
    from recipes import _environment

    if engine != "auto":
        return engine
    return "keras_cv" if _environment.backend() == "tensorflow" else "keras"


def _parse(entry):
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        (name, params), = entry.items()
        if params is None or isinstance(params, dict):
            return name, params or {}
    raise UserError(f"data.augment: cannot read {entry!r}; write a name, or "
                    "{name: {parameter: value}}, e.g. {randaugment: {magnitude: 0.3}}.")


def placement(augment_on, engine):
    """Where `data.augment_on` runs augmentation on this machine: device or host.

    Raises:
        UserError: keras-cv's layers asked to run in a JAX training step;
            they are TensorFlow code.
    """
    from recipes import _environment

    if augment_on == "auto":
        on_host = _environment.has_tensorflow() and not _environment.gpus()
        augment_on = "host" if on_host else "device"
    if augment_on == "device" and engine == "keras_cv" and _environment.backend() == "jax":
        raise UserError("keras-cv's layers are TensorFlow code: they cannot run in a JAX "
                        "training step (data.augment_on=device). Set data.augment_engine=keras, "
                        "Keras core's layers, or data.augment_on=host (tf.data).")
    return augment_on
