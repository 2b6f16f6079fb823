"""The images a recipe trains on, batched for `fit`.

    splits = data.load({"name": "mnist", "batch_size": 128}, seed=0)
    model.fit(splits.train, steps_per_epoch=splits.steps_per_epoch,
              validation_data=splits.validation, epochs=2)

A source gives uint8 images and int labels: `tfds` (tensorflow-datasets'
train and test splits), `synthetic` (random images of the dataset's shapes,
each half its class's template, so that a model can learn them) or
`folder` (`data.path/train/<class>/*`, through keras_course_recipes/folder.py). Every
source then goes through one pipeline: shuffle, batch, scale to [0, 1] on
whole batches, one-hot labels if asked, augment on the host if asked
(keras_course_recipes/augment.py), prefetch. Training batches drop the remainder, so
that every step has one shape and XLA compiles once. The pipeline is
tf.data; without TensorFlow (Keras on JAX alone) it is `ArrayBatches`.

Images in memory (synthetic, folder) are uint8 arrays held once, which
tf.data reads where they are (see `_tf_batches`): a run's memory peaks at
two copies of them, while a folder's splits are copied out of the images
read, and holds one after.
"""

import dataclasses
import importlib
import importlib.util
import math
import socket
import sys
import warnings
from pathlib import Path

import keras
import numpy as np

from keras_course_recipes.errors import UserError

HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None

# Every key of a config's `data` section, with its default (read as a literal
# by keras_course_recipes/settings.py's `data_defaults`, before Keras starts).
DEFAULTS = {
    "source": "tfds",  # tfds | synthetic | folder
    "name": "mnist",  # sets input shape and class count, also for folder/synthetic
    "dir": None,  # tensorflow-datasets' data_dir; None is its own default
    "path": None,  # root of an image folder tree, for source=folder
    "batch_size": 128,
    "validation_split": 0.1,  # fraction of the training split held out
    "synthetic_examples": 2048,  # training examples for source=synthetic
    "shuffle_buffer": 10000,
    "cache": True,  # tfds: keep decoded uint8 images in memory after the first epoch
    # Progressive resizing: the first early_epochs train on images shrunk to early_size
    # pixels a side (a fraction of the arithmetic), then full size; null: full size throughout.
    # early_crop: a random early_size window of each image instead, at full scale.
    # Offered by a recipe whose CONFIG lists data.early_size (its model takes any size).
    "early_size": None,
    "early_epochs": 0,
    "early_crop": False,
}
# name: (input shape, number of classes). Read as a literal by keras_course_recipes/settings.py,
# which refuses any other data.name before Keras starts (`show` as `run`).
DATASETS = {"mnist": ((28, 28, 1), 10), "fashion_mnist": ((28, 28, 1), 10),
            "cifar10": ((32, 32, 3), 10), "cifar100": ((32, 32, 3), 100)}
# Fewer validation images than this make val_ metrics, and so the best checkpoint, noise.
MIN_VALIDATION_IMAGES = 100
# TensorFlow can share an array's memory only where its data start at a
# multiple of this many bytes, its tensors' alignment: an array 16 bytes off
# aborted the process (a failed CHECK). The splits' images are allocated so.
ALIGNMENT = 64


@dataclasses.dataclass
class Data:
    """Batched splits, each a `tf.data.Dataset` of (images, labels) batches
    (an `ArrayBatches` without TensorFlow), and what a model needs to know."""

    train: object  # shuffled, augmented on the host if asked, endless: use steps_per_epoch
    train_plain: object  # one ordered pass, not augmented: to adapt a normalization
    validation: object
    test: object
    input_shape: tuple  # one image's; None a side where training images change size (early_size)
    num_classes: int
    train_examples: int
    batch_size: int  # the global batch: data.batch_size times the replicas
    steps_per_epoch: int
    evaluated_on: str  # "test", or "validation" for a folder without test/
    validated_on: str  # "held_out" training images, or "test" (validation_split=0)
    one_hot: bool  # labels are one-hot vectors rather than class indices
    augment: object = None  # the recipe's augmentation (keras_course_recipes/augment.py), or None
    augment_on: str = None  # where it runs: "host" (in `train` already) or "device"


def load(data_config, seed=0, steps_per_epoch=None, one_hot=False, initial_epoch=0,
         augmentation=None):
    """The train/validation/test batches that `data_config` (a config's `data`
    section; `DEFAULTS` fill the keys it leaves out) asks for.

    Args:
        seed: seeds the synthetic images, the shuffle order and augmentation.
        steps_per_epoch: training steps per epoch; None is one pass.
        one_hot: one-hot labels (for label smoothing); also when
            `augmentation` mixes labels (MixUp, CutMix).
        initial_epoch: the epoch training starts at, so that a resumed
            run's batches are the ones an uninterrupted run trains on.
        augmentation: keras_course_recipes/augment.py's `Augmentation`, or None; `host`
            augmentation runs in the training pipeline.

    Under a `tf.distribute` strategy's scope, a batch holds `data.batch_size`
    images per replica.
    """
    unknown = sorted(key for key in data_config
                     if key not in DEFAULTS and not key.startswith("augment"))
    if unknown:
        raise UserError(f"Unknown data key(s) {', '.join(unknown)}; the data section takes "
                        f"{', '.join(DEFAULTS)} (and data.augment* in a recipe that augments).")
    config = {**DEFAULTS, **data_config}
    if config["name"] not in DATASETS:
        raise UserError(f"Unknown data.name '{config['name']}'. "
                        f"Known datasets: {', '.join(DATASETS)}.")
    if not 0 <= config["validation_split"] < 1:
        raise UserError("data.validation_split must be at least 0 and below 1, got "
                        f"{config['validation_split']}; 0 trains on every training image and "
                        "validates on the test split.")
    # The batches are shuffled here: fit's default shuffle=True warns for nothing.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    input_shape, num_classes = DATASETS[config["name"]]
    one_hot = one_hot or bool(augmentation and augmentation.mixes_labels)
    host = augmentation if augmentation and augmentation.on == "host" else None
    if not HAS_TENSORFLOW and (config["source"] == "tfds" or host):
        raise UserError(
            ("data.source=tfds reads tensorflow-datasets" if config["source"] == "tfds"
             else "data.augment_on=host augments in tf.data") + ", which needs TensorFlow, not "
            "installed here. Without it, train on data.source=folder or synthetic"
            # The augmentation keys exist only in a recipe that augments.
            + (", with data.augment_on=device data.augment_engine=keras" if "augment_on" in config
               else "") + ".")
    train, validation, test, num_classes, evaluated_on = source_splits(config, input_shape,
                                                                 num_classes, seed)
    validated_on = "held_out"
    if config["validation_split"] == 0:  # the Keras examples' protocol: test validates
        validation, validated_on = test, "test"

    tf = sys.modules.get("tensorflow")  # not imported: no strategy can be in use
    replicas = tf.distribute.get_strategy().num_replicas_in_sync if tf else 1
    batch_size = config["batch_size"] * replicas
    train_examples = _count(train) if config["source"] == "tfds" else len(train[1])
    if train_examples < batch_size:
        raise UserError(
            f"The training split has {train_examples} examples, fewer than a batch of "
            f"{batch_size} (data.batch_size={config['batch_size']} x {replicas} replicas): lower "
            "the batch size" + (" or raise data.synthetic_examples."
                                if config["source"] == "synthetic" else "."))
    steps_per_epoch = steps_per_epoch or train_examples // batch_size
    mirrored = augmentation.mirrored(train_examples, seed) if augmentation else None
    labels = num_classes if one_hot else None
    early_steps = _early_steps(config, input_shape, steps_per_epoch)
    if early_steps:
        input_shape = (None, None, input_shape[-1])  # a model that takes either size
    if HAS_TENSORFLOW:
        batches = _tf_batches(config, batch_size, labels, seed, host, mirrored, replicas,
                              early_steps)
    else:
        def batches(split, training, cache=False, start=0):  # arrays: nothing to cache
            return ArrayBatches(*split, batch_size, labels, seed if training else None, start,
                                mirrored if training else None)

    return Data(
        train=batches(train, training=True, start=initial_epoch * steps_per_epoch),
        train_plain=batches(train, training=False, cache=False),
        validation=batches(validation, training=False), test=batches(test, training=False),
        input_shape=input_shape, num_classes=num_classes, train_examples=train_examples,
        batch_size=batch_size, steps_per_epoch=steps_per_epoch, evaluated_on=evaluated_on,
        validated_on=validated_on, one_hot=one_hot, augment=augmentation,
        augment_on=augmentation.on if augmentation else None)


def _early_steps(config, input_shape, steps_per_epoch):
    """The training steps whose images shrink to `data.early_size`, refused in one
    line where they cannot: 0 without progressive resizing."""
    size, epochs = config["early_size"], config["early_epochs"]
    if size is None:
        given = [f"data.{key}={str(config[key]).lower()}" for key in ("early_epochs", "early_crop")
                 if config[key]]
        if given:  # else they would be dropped without a word: a full-size run
            raise UserError(f"{' and '.join(given)} needs data.early_size, the early images' "
                            "size a side: give it, or drop them.")
        return 0
    if epochs == 0:
        raise UserError(f"data.early_size={size} with data.early_epochs=0 changes no epoch: "
                        "give the number of early epochs, or drop data.early_size.")
    if size >= min(input_shape[:2]):
        raise UserError(f"data.early_size={size} is not below the images' "
                        f"{input_shape[0]}x{input_shape[1]}: give a smaller size, or null.")
    if not HAS_TENSORFLOW:
        raise UserError("data.early_size shrinks the training images in tf.data, which needs "
                        "TensorFlow, not installed here: drop data.early_size.")
    return epochs * steps_per_epoch


def images(batches):
    """A split's images without labels, as `Normalization.adapt` takes them: a
    tf.data.Dataset, or from `ArrayBatches` one array (Keras 3.15's adapt would
    import TensorFlow to test a PyDataset; tests/test_jax_backend.py checks)."""
    if isinstance(batches, ArrayBatches):
        found = batches.images.astype(np.float32)
        found /= 255.0  # in place: one float copy of the images, not two
        return found
    return batches.map(lambda images, labels: images)


def first_images(batches, count):
    """The first `count` images of a split's ordered batches, as one array."""
    found = images(batches)
    if isinstance(found, np.ndarray):
        return found[:count]
    return np.asarray(next(iter(found.unbatch().take(count).batch(count))))


def source_splits(config, input_shape, num_classes, seed):
    """(train, validation, test, classes, what `test` holds) of `config`'s
    source (every key of DEFAULTS): tf.data datasets from tfds, (images,
    labels) arrays from the others."""
    if config["source"] == "tfds":
        return (*_tfds_splits(config), num_classes, "test")
    if config["source"] == "synthetic":
        return (*_synthetic_splits(config, input_shape, num_classes, seed), num_classes, "test")
    try:
        folder = importlib.import_module("keras_course_recipes.folder")
    except ModuleNotFoundError as error:
        if error.name != "keras_course_recipes.folder":
            raise
        raise UserError("data.source=folder reads image folders with keras_course_recipes/folder.py: copy "
                        "it from the repository beside keras_course_recipes/data.py.") from None
    (images, labels), test, classes = folder.read(config, input_shape)
    # A seeded `data.validation_split` of train/ validates. Each split is
    # copied out of the images read into memory TensorFlow can share, which
    # then replaces them: two copies of the images for a moment, one after.
    order, split = np.random.default_rng(0).permutation(len(labels)), config["validation_split"]
    root = Path(config["path"]).expanduser()
    held_out = held_out_count(len(labels), split, f"the {len(labels):,} images in "
                              f"{root / 'train'}") if split else 0
    train = aligned_rows(images, order[held_out:]), labels[order[held_out:]]
    validation = aligned_rows(images, order[:held_out]), labels[order[:held_out]]
    del images  # freed before the test split is copied
    if test is None:
        print(f"{root} has no test/ folder: the run evaluates on its {held_out:,} validation "
              "images.", flush=True)
        return train, validation, validation, len(classes), "validation"
    test = aligned_rows(test[0], np.arange(len(test[1]))), test[1]
    return train, validation, test, len(classes), "test"


def aligned_empty(shape, dtype=np.uint8):
    """An array of `shape`, not initialized, whose data start at a multiple of
    ALIGNMENT bytes: memory that TensorFlow can share."""
    size = math.prod(shape) * np.dtype(dtype).itemsize
    memory = np.empty(size + ALIGNMENT, np.uint8)
    start = -memory.ctypes.data % ALIGNMENT
    return memory[start:start + size].view(dtype).reshape(shape)


def aligned_rows(array, rows):
    """`array[rows]` (`rows` an array of indices) in memory that TensorFlow can share."""
    taken = aligned_empty((len(rows), *array.shape[1:]), array.dtype)
    # mode="clip", for indices in range: "raise" copies them through a buffer as large.
    return np.take(array, rows, axis=0, out=taken, mode="clip")


def held_out_count(total, validation_split, what):
    """How many of `total` images `validation_split` holds out: refused when
    none, warned about when fewer than MIN_VALIDATION_IMAGES."""
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


# ## tensorflow-datasets

TFDS_HOST = ("storage.googleapis.com", 443)  # where tfds reads its prepared copies (try_gcs)


def _tfds_splits(config, offline=None):
    """(train, validation, test) tf.data datasets: the validation images are
    the last `data.validation_split` of tfds' train split, counted exactly
    (tfds' percent slices round to whole percents); None for 0. `offline`
    says what to do where the dataset is missing and cannot be downloaded
    (default: a run's options)."""
    if importlib.util.find_spec("tensorflow_datasets") is None:
        raise UserError("data.source=tfds needs tensorflow-datasets, not installed here: pip "
                        "install tensorflow-datasets (the kit's [tensorflow] extra has it), or "
                        "train on data.source=folder or synthetic.")
    import tensorflow_datasets as tfds

    name, where = config["name"], config["dir"] or "~/tensorflow_datasets"
    arguments = dict(split=["train", "test"], as_supervised=True, try_gcs=True,
                     data_dir=config["dir"])
    try:
        train, test = tfds.load(name, download=False, **arguments)
    except AssertionError:  # not prepared in data_dir: fetch TFDS's prepared copy
        if not _reachable(*TFDS_HOST):
            raise UserError(
                f"Dataset '{name}' is not in {where} and {TFDS_HOST[0]} cannot be reached, so "
                "it cannot be downloaded. " + (offline or "Either train on random data with "
                "data.source=synthetic, or on a connected machine run `python -c \"import "
                f"tensorflow_datasets as tfds; tfds.load('{name}', try_gcs=True)\"`, copy its "
                "~/tensorflow_datasets folder here and pass data.dir=PATH.")) from None
        print(f"Downloading {name} into {where} ...")
        train, test = tfds.load(name, download=True, **arguments)
    if config["validation_split"] == 0:
        return train, None, test
    total = _count(train)
    kept = total - held_out_count(total, config["validation_split"],
                                  f"the {total:,} images of {name}'s train split")
    return train.take(kept), train.skip(kept), test


def _reachable(host, port, timeout_s=10):
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def _count(dataset):
    """How many examples a tf.data dataset holds: its cardinality, or counted."""
    known = int(dataset.cardinality())
    return known if known >= 0 else int(dataset.reduce(0, lambda n, _: n + 1))


# ## Synthetic images

# Synthetic images are made this many at a time, into their split's array:
# the noise and the sums take memory for these only. A multiple of 4, so that
# the draws are those of one call for the whole split (NumPy draws uint8 four
# at a time from each 32-bit number, starting afresh in each call).
SYNTHETIC_CHUNK = 1024


def _synthetic_splits(config, input_shape, num_classes, seed):
    """(train, validation, test) (uint8 images, int labels) arrays, each image
    half its class's random template, half noise: `data.synthetic_examples`
    train, `data.validation_split` of them more validate, a tenth test."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(num_classes, *input_shape), dtype=np.uint8)
    count = config["synthetic_examples"]
    held_out = (held_out_count(count, config["validation_split"],
                               f"the {count:,} synthetic images")
                if config["validation_split"] else 1)

    def split(n):
        labels = rng.integers(0, num_classes, size=(n,))
        images = aligned_empty((n, *input_shape))
        for start in range(0, n, SYNTHETIC_CHUNK):
            rows = slice(start, start + SYNTHETIC_CHUNK)
            noise = rng.integers(0, 256, size=images[rows].shape, dtype=np.uint8)
            template = templates[labels[rows]]
            # Halved before adding: uint8 throughout, the memory of real images.
            images[rows] = template // 2 + noise // 2 + (template & noise & 1)
        return images, labels

    return split(count), split(held_out), split(max(1, count // 10))


# ## Batches

def _tf_batches(config, batch_size, one_hot_classes, seed, host_augment, mirrored, replicas,
                early_steps=0):
    """`batches(split, training, cache, start)`: a split's tf.data pipeline
    (a tf.data.Dataset, or an (images, labels) pair of arrays); for training,
    from the run's step `start` on. `mirrored`: the images alternating_flip
    mirrors in even passes, or None. The training batches before step
    `early_steps` are shrunk to `data.early_size` a side, or with
    `data.early_crop` cut to a window that size, drawn by the step's seed.

    A resumed run starts the pipeline from the beginning and skips the
    batches before `start`, so that the seeded shuffle's order and host
    augmentation's draws are the uninterrupted run's. Under several
    replicas an evaluated split's batches hold a multiple of them, so that
    the first splits evenly (Keras 3.15 averages it across replicas to
    learn its shapes).

    A split of arrays keeps its images where they are. Handed to
    `from_tensor_slices` as NumPy arrays, they were copied into a tensor
    (twice over, in TensorFlow 2.21), and again for each new iterator,
    which tf.data makes by rewriting the pipeline for its default
    optimizations: a run held about four copies. So the pipeline starts
    from a tensor that shares the array's memory (DLPack), and goes
    without those optimizations: its steps are parallel and prefetched
    as written."""
    import tensorflow as tf

    autotune = tf.data.AUTOTUNE

    def shared(images):  # a tensor of the array's memory, no copy; copied where it cannot be
        if images.ctypes.data % ALIGNMENT or not (images.flags.c_contiguous
                                                  and images.flags.writeable):
            images = aligned_rows(images, np.arange(len(images)))
        return tf.experimental.dlpack.from_dlpack(images.__dlpack__())

    def to_model_input(images, labels):  # on whole batches: one op, not one per image
        images = tf.cast(images, tf.float32) / 255.0
        return images, labels if one_hot_classes is None else tf.one_hot(labels, one_hot_classes)

    def early(step, batch):
        images, labels = batch
        smaller = window if config["early_crop"] else shrink
        return tf.cond(step < early_steps, lambda: smaller(step, images), lambda: images), labels

    def shrink(step, images):  # antialiased, as a smaller camera would see the image
        size = config["early_size"]
        return tf.image.resize(images, (size, size), antialias=True)

    def window(step, images):
        # Each image's own early_size window, its corner drawn from (seed, step): a resumed
        # run draws the same ones. crop_and_resize at whole-pixel corners copies the pixels.
        size, (height, width) = config["early_size"], images.shape[1:3]
        count = tf.shape(images)[0]
        corners = tf.random.stateless_uniform(
            [count, 2], seed=tf.stack([tf.cast(seed or 0, tf.int64), step]),
            maxval=min(height, width) - size + 1, dtype=tf.int32)
        top, left = tf.unstack(tf.cast(corners, tf.float32), axis=1)
        boxes = tf.stack([top / (height - 1), left / (width - 1), (top + size - 1) / (height - 1),
                          (left + size - 1) / (width - 1)], axis=1)
        return tf.image.crop_and_resize(images, boxes, tf.range(count), (size, size))

    def alternate_flip(positions, example):
        # An image's position in the repeated stream is (pass, image): mirrored
        # in even passes if `mirrored` says so, else in odd ones.
        images, labels = example
        count = len(mirrored)
        flip = tf.gather(mirrored, positions % count) != (positions // count % 2 == 1)
        return tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images), labels

    def traced_once(augment):
        """`augment`, for `map`, which traces it as a tf.function: a first
        trace that creates variables is traced again without. Keras' layers
        under another backend create their TensorFlow seed states as tf.data
        first calls them, and RandAugment's graph took 9 s to trace on JAX
        (EPYC-oneDNN). Here they are made outside the traced graph, as the
        first trace would have lifted them, with the same initial seeds:
        one trace, the same random stream."""
        def outside_the_trace(next_creator, **kwargs):
            with tf.init_scope():  # created eagerly, not lifted (and so not traced again)
                return next_creator(**{**kwargs, "experimental_enable_variable_lifting": False})

        def augment_batch(images, labels):
            with tf.variable_creator_scope(outside_the_trace):
                return augment(images, labels)

        return augment_batch

    def batches(split, training, cache=config["cache"], start=0):
        dataset, arrays = split, isinstance(split, tuple)
        if arrays:  # in memory already: nothing to cache
            images, labels = split
            dataset, cache = tf.data.Dataset.from_tensor_slices((shared(images), labels)), False
        if cache:
            dataset = dataset.cache()
        if training:
            dataset = dataset.repeat()
            if mirrored is not None:
                dataset = dataset.enumerate()  # each image's position, for alternate_flip
            # Shuffled after repeating, in one fixed order: every new iterator
            # gives the same stream (Keras' JAX fit opens two).
            dataset = dataset.shuffle(config["shuffle_buffer"], seed=seed,
                                      reshuffle_each_iteration=False)
            if not host_augment:
                dataset = dataset.skip(start * batch_size)
        size = batch_size
        if not training and replicas > 1:
            count = len(split[1]) if isinstance(split, tuple) else _count(dataset)
            size = max(replicas, min(batch_size, count) // replicas * replicas)
        dataset = dataset.batch(size, drop_remainder=training, num_parallel_calls=autotune)
        if training and mirrored is not None:
            dataset = dataset.map(alternate_flip, num_parallel_calls=autotune)
        dataset = dataset.map(to_model_input, num_parallel_calls=autotune)
        if training and host_augment:
            # One batch at a time, so that the layers' random state advances in
            # the same order every run, and a seeded run repeats exactly;
            # prefetch overlaps it with training.
            dataset = dataset.map(traced_once(host_augment)).skip(start)
        if training and early_steps > start:  # numbered from the run's step `start`
            dataset = dataset.enumerate(start).map(early, num_parallel_calls=autotune)
        # AUTOTUNE's parallel steps then run on min(16, cores) threads. tf.data's
        # autotuning thread, on 2 cores, took a core from training now and then,
        # and held the end of `fit` for up to 16 s.
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.apply_default_optimizations = not arrays
        return dataset.prefetch(autotune).with_options(options)

    return batches


class ArrayBatches(keras.utils.PyDataset):
    """Batches of uint8 images as float32 in [0, 1], with their labels: the
    tf.data pipeline's, for Keras without TensorFlow.

    With `shuffle_seed`, the training split: endless, each pass over the
    images in its own order, seeded by (shuffle_seed, pass), without the
    last partial batch, from the run's step `start`, mirroring each pass the
    images `mirrored` (bool per image, or None) names in even passes and
    the others in odd ones. Without, one ordered pass with every image.
    `num_classes`: one-hot labels of that many classes; None keeps indices.
    """

    def __init__(self, images, labels, batch_size, num_classes=None, shuffle_seed=None,
                 start=0, mirrored=None):
        super().__init__()
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.num_classes, self.shuffle_seed, self.start = num_classes, shuffle_seed, start
        self.mirrored, self._order = mirrored, (None, None)  # (pass, its permutation)

    @property
    def num_batches(self):
        if self.shuffle_seed is not None:
            return None  # endless: fit's steps_per_epoch ends each epoch
        return math.ceil(len(self.labels) / self.batch_size)

    def __getitem__(self, index):
        if self.shuffle_seed is None:
            rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        else:
            number, position = divmod(self.start + index, len(self.labels) // self.batch_size)
            if self._order[0] != number:
                rng = np.random.default_rng([self.shuffle_seed, number])
                self._order = number, rng.permutation(len(self.labels))
            rows = self._order[1][position * self.batch_size:(position + 1) * self.batch_size]
        images = self.images[rows].astype(np.float32) / 255.0
        if self.mirrored is not None and self.shuffle_seed is not None:
            flip = self.mirrored[rows] != (number % 2 == 1)
            images[flip] = images[flip][:, :, ::-1]
        labels = self.labels[rows]
        if self.num_classes is not None:
            labels = np.eye(self.num_classes, dtype=np.float32)[labels]
        return images, labels
