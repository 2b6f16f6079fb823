"""Training-time augmentation, named in `data.augment`.

`data.augment` lists operations applied in order to whole training batches of
float images in [0, 1]. Each entry is a name, or a one-key mapping from a name
to its parameters:

    data.augment=[flip,pad_crop,{randaugment: {magnitude: 0.3}},cutmix]

They run in the tf.data pipeline, on the training split only: validation,
test and prediction see the images as they are. `mixup` and `cutmix` blend
pairs of images and their labels, so they need one-hot labels.
"""

import inspect

import keras_cv
import tensorflow as tf

from recipes import UserError


def flip(mode="horizontal", seed=None):
    """Random flips (keras-cv RandomFlip)."""
    layer = keras_cv.layers.RandomFlip(mode, seed=seed, dtype="float32")
    return lambda images, labels: (layer(images), labels)


def pad_crop(padding=4, seed=None):
    """Zero-pads by `padding` pixels, then crops each image back at a random offset.

    Written here because Keras' RandomCrop shifts a whole batch by one offset
    and keras-cv's resamples the window (some crops come out stretched by a
    pixel); the DenseNet paper shifts each image by whole pixels.
    """

    def apply(images, labels):
        batch, height, width = tf.unstack(tf.shape(images)[:3])
        padded = tf.pad(images, [[0, 0], [padding, padding], [padding, padding], [0, 0]])
        offsets = tf.random.uniform([batch, 2], 0, 2 * padding + 1, tf.int32, seed=seed)
        rows = offsets[:, :1] + tf.range(height)
        columns = offsets[:, 1:] + tf.range(width)
        cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
        return tf.gather(cropped, columns, axis=2, batch_dims=1), labels

    return apply


def randaugment(magnitude=0.5, augmentations_per_image=2, seed=None, **options):
    """keras-cv RandAugment on [0, 1] images; `options` go to the layer."""
    layer = keras_cv.layers.RandAugment(
        value_range=(0, 1), magnitude=magnitude,
        augmentations_per_image=augmentations_per_image, seed=seed,
        dtype="float32", **options)
    return lambda images, labels: (layer(images), labels)


def _mixing(layer_class):
    def build(alpha=None, seed=None):
        options = {} if alpha is None else {"alpha": alpha}
        layer = layer_class(seed=seed, dtype="float32", **options)

        def apply(images, labels):
            mixed = layer({"images": images, "labels": labels})
            return mixed["images"], mixed["labels"]

        return apply

    build.__doc__ = f"keras-cv {layer_class.__name__}: blends pairs of images and their labels."
    return build


OPERATIONS = {
    "flip": flip,
    "pad_crop": pad_crop,
    "randaugment": randaugment,
    "mixup": _mixing(keras_cv.layers.MixUp),
    "cutmix": _mixing(keras_cv.layers.CutMix),
}
NEEDS_ONE_HOT = {"mixup", "cutmix"}


def pipeline(entries, one_hot, seed=0):
    """Returns a function `(images, labels) -> (images, labels)` applying
    `entries` in order, or None when there are none.

    Raises:
        UserError: for an unknown operation or parameter, or a mixing
            operation on integer labels.
    """
    steps = []
    for index, entry in enumerate(entries):
        name, params = _parse(entry)
        if name not in OPERATIONS:
            raise UserError(f"Unknown augmentation '{name}' in data.augment; "
                            f"known: {', '.join(OPERATIONS)}.")
        if name in NEEDS_ONE_HOT and not one_hot:
            raise UserError(f"data.augment: '{name}' mixes labels, so it needs a "
                            "recipe trained on one-hot labels (the densenet_* "
                            "recipes); this recipe uses integer labels.")
        try:
            steps.append(OPERATIONS[name](seed=seed + index, **params))
        except TypeError as error:
            accepted = [p for p in inspect.signature(OPERATIONS[name]).parameters
                        if p not in ("seed", "options")]
            raise UserError(f"data.augment: bad parameters for '{name}' ({error}); "
                            f"it takes {', '.join(accepted) or 'none'}.") from None
    if not steps:
        return None

    def apply(images, labels):
        for step in steps:
            images, labels = step(images, labels)
        return images, labels

    return apply


def _parse(entry):
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        (name, params), = entry.items()
        if params is None or isinstance(params, dict):
            return name, params or {}
    raise UserError(f"data.augment: cannot read {entry!r}; write a name, or "
                    "{name: {parameter: value}}, e.g. {randaugment: {magnitude: 0.3}}.")
