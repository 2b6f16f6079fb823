"""Input pipelines: what `load` returns, whatever the source.

A source gives uint8 images and int labels: tensorflow-datasets
(`recipes/_tfds.py`), synthetic arrays (`recipes/_synthetic.py`) or an image
folder decoded once and cached (`recipes/_folder.py`). Every source goes
through the same pipeline: cache the decoded uint8 images (tfds; the others
are arrays in memory already), shuffle, batch, scale to float32 in [0, 1] on
whole batches, one-hot the labels if the recipe asks, augment (training only,
when `data.augment_on` places it on the host; see `recipes/_augment.py`),
prefetch. Training batches drop the remainder, so every step has one shape
and XLA compiles once. With TensorFlow the pipeline is tf.data
(`_tf_batches`); without it, `ArrayBatches` (`recipes/_array_batches.py`).
"""

import dataclasses

import numpy as np

from recipes import UserError, _augment, _environment, _synthetic
from recipes._array_batches import ArrayBatches

# name: (input shape, number of classes)
DATASETS = {
    "mnist": ((28, 28, 1), 10),
    "fashion_mnist": ((28, 28, 1), 10),
    "cifar10": ((32, 32, 3), 10),
    "cifar100": ((32, 32, 3), 100),
}


@dataclasses.dataclass
class Data:
    """Batched splits and what a model needs to know about them. Each split is
    a `tf.data.Dataset` of (images, labels) batches, or without TensorFlow an
    `ArrayBatches`."""

    train: object  # shuffled, augmented, repeats forever; use steps_per_epoch
    train_from: object  # step -> `train` from that training step of the run on (a resume)
    train_plain: object  # one ordered pass, not augmented: to adapt normalization
    validation: object
    test: object
    input_shape: tuple
    num_classes: int
    train_examples: int
    batch_size: int  # the global batch: data.batch_size times the replicas
    steps_per_epoch: int
    evaluated_on: str  # what `test` holds: "test", or "validation" for a folder without test/
    validated_on: str  # what `validation` holds: "held_out" training images, or "test" (validation_split=0)
    one_hot: bool  # labels are one-hot vectors rather than class indices
    augment: object  # an _augment.Augmentation: (images, labels) -> (images, labels), or None
    augment_on: str  # "host" (already in `train`), "device" (for models.AugmentedModel) or None


def load(data_config, seed=0, steps_per_epoch=None, one_hot=False, replicas=1):
    """Builds the train/validation/test pipelines that `data_config` asks for.

    Args:
        data_config: the config's `data` section.
        seed: seeds the synthetic data, the shuffle order and augmentation.
        steps_per_epoch: training steps per epoch; None means one pass.
        one_hot: one-hot float labels instead of integers (for label
            smoothing); a mixing augmentation (MixUp, CutMix) turns them
            on, since it blends labels.
        replicas: the strategy's replicas: batches hold `data.batch_size`
            images for each, and `fit` splits them.
    """
    input_shape, num_classes = _checked_dataset(data_config)
    one_hot = one_hot or _augment.mixes_labels(data_config["augment"])
    augment = _augment.pipeline(data_config["augment"], one_hot, seed,
                                data_config["augment_engine"])
    augment_on = _augment.placement(data_config["augment_on"], augment.engine) if augment else None
    with_tensorflow = _environment.has_tensorflow()
    if not with_tensorflow and (data_config["source"] == "tfds" or augment_on == "host"):
        raise UserError(
            ("data.source=tfds reads tensorflow-datasets" if data_config["source"] == "tfds"
             else "data.augment_on=host augments in tf.data") + ", which needs TensorFlow, not "
            "installed here. Without it, train on data.source=folder or synthetic, with "
            "data.augment_on=device data.augment_engine=keras.")
    train, validation, test, num_classes, evaluated_on = _splits(
        data_config, input_shape, num_classes, seed)
    # validation_split=0, the Keras examples' protocol: every training image
    # trains, and the test split is the validation data too.
    validated_on = "held_out"
    if data_config["validation_split"] == 0:
        validation, validated_on = test, "test"

    batch_size = data_config["batch_size"] * replicas  # the global batch
    train_examples = _train_examples(train, data_config, batch_size, replicas)
    mirrored = (_augment.alternating_flips(train_examples, seed)
                if _augment.has_alternating_flip(data_config["augment"]) else None)
    if with_tensorflow:
        batches = _tf_batches(data_config, batch_size, num_classes, one_hot, seed,
                              augment if augment_on == "host" else None, mirrored)
    else:
        def batches(split, training, cache=False, start=0):  # arrays: nothing to cache
            return ArrayBatches(*split, batch_size, num_classes if one_hot else None,
                                shuffle_seed=seed if training else None, start=start,
                                mirrored=mirrored if training else None)

    return Data(
        train=batches(train, training=True),
        train_from=lambda step: batches(train, training=True, start=step),
        train_plain=batches(train, training=False, cache=False),
        validation=batches(validation, training=False),
        test=batches(test, training=False),
        input_shape=input_shape,
        num_classes=num_classes,
        train_examples=train_examples,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch or train_examples // batch_size,
        evaluated_on=evaluated_on,
        validated_on=validated_on,
        one_hot=one_hot,
        augment=augment,
        augment_on=augment_on,
    )


def _checked_dataset(data_config):
    """(input shape, number of classes) of `data.name`, once the data
    settings that no source can use are refused."""
    name = data_config["name"]
    if name not in DATASETS:
        raise UserError(f"Unknown data.name '{name}'. "
                        f"Known datasets: {', '.join(DATASETS)}.")
    if not 0 <= data_config["validation_split"] < 1:
        raise UserError("data.validation_split must be at least 0 and below 1, "
                        f"got {data_config['validation_split']}; 0 trains on every "
                        "training image and validates on the test split.")
    return DATASETS[name]


def _splits(data_config, input_shape, num_classes, seed):
    """(train, validation, test, number of classes, what `test` holds) from
    `data.source`: tfds gives tf.data datasets, synthetic and folder give
    (images, labels) arrays. A folder without test/ is evaluated on its
    validation images."""
    # Imported here: they import held_out_count from this module.
    from recipes import _folder, _tfds

    source = data_config["source"]
    if source == "tfds":
        return (*_tfds.splits(data_config), num_classes, "test")
    if source == "synthetic":
        return (*_synthetic.splits(data_config, input_shape, num_classes, seed),
                num_classes, "test")
    train, validation, test, num_classes = _folder.splits(data_config, input_shape)
    if test is None:
        return train, validation, validation, num_classes, "validation"
    return train, validation, test, num_classes, "test"


def _train_examples(train, data_config, batch_size, replicas):
    """How many examples the training split holds; refused when that is
    fewer than one batch."""
    if data_config["source"] == "tfds":
        from recipes import _tfds

        count = _tfds.count(train)
    else:
        count = len(train[1])
    if count < batch_size:
        raise UserError(
            f"The training split has {count} examples, fewer than a batch of "
            f"{batch_size} (data.batch_size={data_config['batch_size']} x {replicas} "
            "replicas): lower the batch size"
            + (" or raise data.synthetic_examples." if data_config["source"] == "synthetic"
               else "."))
    return count


def _tf_batches(data_config, batch_size, num_classes, one_hot, seed, host_augment,
                mirrored=None):
    """`batches(split, training, cache, start)`: the tf.data pipeline of a
    split, a tf.data.Dataset or an (images, labels) pair of arrays; for
    training, from the run's training step `start` on. `mirrored`: the
    training images that `alternating_flip` mirrors in even passes, or None.

    A resumed run starts its pipeline from the beginning and skips the
    batches before `start`: the seeded shuffle's order, and host
    augmentation's draws, are then the uninterrupted run's. Skipping reads
    the images again (about 2 microseconds each from memory) and augments
    those batches again when augmentation runs on the host.
    """
    import tensorflow as tf

    autotune = tf.data.AUTOTUNE

    def to_model_input(images, labels):
        # Whole batches: one vectorized op instead of one per image.
        images = tf.cast(images, tf.float32) / 255.0
        return images, tf.one_hot(labels, num_classes) if one_hot else labels

    def alternate_flip(position, example):
        # The position in the repeated stream is (pass, image): mirrored in
        # even passes if `mirrored` says so, otherwise in odd ones.
        image, label = example
        count = len(mirrored)
        flip = tf.gather(mirrored, position % count) != (position // count % 2 == 1)
        return tf.where(flip, tf.reverse(image, axis=[1]), image), label

    def batches(split, training, cache=data_config["cache"], start=0):
        dataset = split
        if isinstance(split, tuple):  # arrays in memory already: nothing to cache
            dataset, cache = tf.data.Dataset.from_tensor_slices(split), False
        if cache:
            dataset = dataset.cache()
        if training:
            dataset = dataset.repeat()
            if mirrored is not None:
                dataset = dataset.enumerate().map(alternate_flip, num_parallel_calls=autotune)
            # Shuffled after repeating, in one fixed order: every new
            # iterator gives the same stream (Keras' JAX fit opens two).
            dataset = dataset.shuffle(data_config["shuffle_buffer"], seed=seed,
                                      reshuffle_each_iteration=False)
        if training and not host_augment:
            dataset = dataset.skip(start * batch_size)
        dataset = dataset.batch(batch_size, drop_remainder=training,
                                num_parallel_calls=autotune)
        dataset = dataset.map(to_model_input, num_parallel_calls=autotune)
        if training and host_augment:
            # One batch at a time: the layers' random state then advances in
            # the same order every run, so a seeded run repeats exactly.
            # Each call is vectorized, and prefetch overlaps it with training.
            dataset = dataset.map(host_augment).skip(start)
        return dataset.prefetch(autotune)

    return batches


def images(batches):
    """A split's images without their labels, as `Normalization.adapt` takes
    them: a tf.data.Dataset of image batches, or from `ArrayBatches` one
    float32 array. Not the `ArrayBatches` itself, which Keras documents that
    adapt takes: Keras 3.15.1's adapt tests every input but an array against
    tf.data.Dataset first, which imports TensorFlow (tests/test_jax_backend.py
    checks that it still does)."""
    if isinstance(batches, ArrayBatches):
        return batches.images.astype(np.float32) / 255.0
    return batches.map(lambda images, labels: images)


# Fewer validation images than this make val_ metrics, and so best.keras, noise.
MIN_VALIDATION_IMAGES = 100

def held_out_count(total, validation_split, what):
    """How many of `total` training images `validation_split` holds out for
    validation: refused when none, warned about when fewer than
    MIN_VALIDATION_IMAGES."""
    count = round(total * validation_split)
    if count == 0:
        raise UserError(f"data.validation_split={validation_split} of {what} holds out no image "
                        "to validate on. Raise it (0.1 is usual), or set it to 0 to validate "
                        "on the test split.")
    if count < MIN_VALIDATION_IMAGES:
        print(f"warning: data.validation_split={validation_split} of {what} holds out "
              f"{count} image(s): the val_ metrics, and so the best checkpoint, rest on them "
              f"alone. Hold out at least {MIN_VALIDATION_IMAGES}.", flush=True)
    return count
