"""Input pipelines: tensorflow-datasets, synthetic tensors, or an image folder.

An image folder is decoded once into uint8 arrays and cached next to it
(`_folder_arrays`), so that each run, and each run of a sweep, does not
decode every file again.

Every source yields uint8 images and int labels, which go through the same
pipeline: cache the decoded uint8 images (tfds; the others are arrays in
memory already), shuffle, batch, scale to float32 in
[0, 1] on whole batches, one-hot the labels if the recipe asks, augment
(training only, when `data.augment_on` places it on the host; see
`recipes/_augment.py`), prefetch. Training batches drop
the remainder, so every step has one shape and XLA compiles once.
"""

import dataclasses
import hashlib
import math
import os
import socket
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import keras
import numpy as np

from recipes import UserError, _augment, _environment

# name: (input shape, number of classes)
DATASETS = {
    "mnist": ((28, 28, 1), 10),
    "fashion_mnist": ((28, 28, 1), 10),
    "cifar10": ((32, 32, 3), 10),
    "cifar100": ((32, 32, 3), 100),
}

# Where tensorflow-datasets reads its prepared copies (`try_gcs`).
TFDS_HOST = ("storage.googleapis.com", 443)
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}


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
    name = data_config["name"]
    if name not in DATASETS:
        raise UserError(f"Unknown data.name '{name}'. "
                        f"Known datasets: {', '.join(DATASETS)}.")
    if not 0 <= data_config["validation_split"] < 1:
        raise UserError("data.validation_split must be at least 0 and below 1, "
                        f"got {data_config['validation_split']}; 0 trains on every "
                        "training image and validates on the test split.")
    input_shape, num_classes = DATASETS[name]
    one_hot = one_hot or _augment.mixes_labels(data_config["augment"])
    augment = _augment.pipeline(data_config["augment"], one_hot, seed,
                                data_config["augment_engine"])
    augment_on = _augment.placement(data_config["augment_on"], augment.engine) if augment else None
    source, evaluated_on = data_config["source"], "test"
    with_tensorflow = _environment.has_tensorflow()
    if not with_tensorflow and (source == "tfds" or augment_on == "host"):
        raise UserError(
            ("data.source=tfds reads tensorflow-datasets" if source == "tfds" else
             "data.augment_on=host augments in tf.data") + ", which needs TensorFlow, not "
            "installed here. Without it, train on data.source=folder or synthetic, with "
            "data.augment_on=device data.augment_engine=keras.")
    # tfds gives tf.data datasets; synthetic and folder give (images, labels) arrays.
    if source == "tfds":
        train, validation, test = _tfds_splits(data_config)
    elif source == "synthetic":
        train, validation, test = _synthetic_splits(data_config, input_shape,
                                                    num_classes, seed)
    else:
        train, validation, test, num_classes = _folder_splits(data_config, input_shape)
        if test is None:
            test, evaluated_on = validation, "validation"
    # validation_split=0, the Keras examples' protocol: every training image
    # trains, and the test split is the validation data too.
    validated_on = "held_out"
    if data_config["validation_split"] == 0:
        validation, validated_on = test, "test"

    batch_size = data_config["batch_size"] * replicas  # the global batch
    train_examples = _count(train) if source == "tfds" else len(train[1])
    if train_examples < batch_size:
        raise UserError(
            f"The training split has {train_examples} examples, fewer than a batch of "
            f"{batch_size} (data.batch_size={data_config['batch_size']} x {replicas} "
            "replicas): lower the batch size"
            + (" or raise data.synthetic_examples." if source == "synthetic" else "."))

    if with_tensorflow:
        batches = _tf_batches(data_config, batch_size, num_classes, one_hot, seed,
                              augment if augment_on == "host" else None)
    else:
        def batches(split, training, cache=False, start=0):  # arrays: nothing to cache
            return ArrayBatches(*split, batch_size, num_classes if one_hot else None,
                                shuffle_seed=seed if training else None, start=start)

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


def _tf_batches(data_config, batch_size, num_classes, one_hot, seed, host_augment):
    """`batches(split, training, cache, start)`: the tf.data pipeline of a
    split, a tf.data.Dataset or an (images, labels) pair of arrays; for
    training, from the run's training step `start` on.

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

    def batches(split, training, cache=data_config["cache"], start=0):
        dataset = split
        if isinstance(split, tuple):  # arrays in memory already: nothing to cache
            dataset, cache = tf.data.Dataset.from_tensor_slices(split), False
        if cache:
            dataset = dataset.cache()
        if training:
            # Shuffled after repeating, in one fixed order: every new
            # iterator gives the same stream (Keras' JAX fit opens two).
            dataset = dataset.repeat().shuffle(data_config["shuffle_buffer"], seed=seed,
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


class ArrayBatches(keras.utils.PyDataset):
    """Batches of uint8 images as float32 in [0, 1], with their labels: the
    tf.data pipeline's batches, for Keras without TensorFlow.

    With `shuffle_seed`, the training split: endless, each pass over the
    images in its own order, seeded by (shuffle_seed, pass) (a full shuffle,
    whatever `data.shuffle_buffer`), without the last partial batch, and
    starting at the run's training step `start`. Without, one ordered pass
    with every image.

    Args:
        images: uint8 array, (examples, height, width, channels).
        labels: int array of class indices, (examples,).
        batch_size: images per batch.
        num_classes: one-hot labels of this many classes; None keeps indices.
        shuffle_seed: seeds the training split's order; None for another split.
        start: the run's training step that batch 0 is: a resumed run's
            first step, so that it sees what an uninterrupted run would.
    """

    def __init__(self, images, labels, batch_size, num_classes=None, shuffle_seed=None,
                 start=0):
        super().__init__()
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.num_classes, self.shuffle_seed, self.start = num_classes, shuffle_seed, start
        self._order = None, None  # (pass, its permutation)

    @property
    def num_batches(self):
        if self.shuffle_seed is not None:
            return None  # endless: fit's steps_per_epoch ends each epoch
        return math.ceil(len(self.labels) / self.batch_size)

    def __getitem__(self, index):
        if self.shuffle_seed is None:
            rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        else:
            per_pass = len(self.labels) // self.batch_size
            number, position = divmod(self.start + index, per_pass)
            if self._order[0] != number:
                rng = np.random.default_rng([self.shuffle_seed, number])
                self._order = number, rng.permutation(len(self.labels))
            rows = self._order[1][position * self.batch_size:(position + 1) * self.batch_size]
        images = self.images[rows].astype(np.float32) / 255.0
        labels = self.labels[rows]
        if self.num_classes is not None:
            labels = np.eye(self.num_classes, dtype=np.float32)[labels]
        return images, labels


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


def _count(dataset):
    count = int(dataset.cardinality())
    if count >= 0:
        return count
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _tfds_splits(data_config):
    """(train, validation, test) from tensorflow-datasets: the validation
    images are the last `data.validation_split` of its train split, counted
    exactly (tfds' percent slices round to whole percent); None for 0."""
    import tensorflow_datasets as tfds

    load_args = dict(split=["train", "test"], as_supervised=True, try_gcs=True,
                     data_dir=data_config["dir"])
    try:
        train, test = tfds.load(data_config["name"], download=False, **load_args)
    except AssertionError:  # not prepared in data_dir yet: fetch TFDS's prepared copy
        if not _reachable(*TFDS_HOST):
            where = data_config["dir"] or "~/tensorflow_datasets"
            raise UserError(
                f"Dataset '{data_config['name']}' is not in {where} and "
                f"{TFDS_HOST[0]} cannot be reached, so it cannot be downloaded. "
                "Either train on random data with data.source=synthetic, or on a "
                "connected machine run `python -c \"import tensorflow_datasets as "
                f"tfds; tfds.load('{data_config['name']}', try_gcs=True)\"`, copy "
                "its ~/tensorflow_datasets folder here and pass data.dir=PATH.") from None
        print(f"Downloading {data_config['name']} into {data_config['dir'] or '~/tensorflow_datasets'} ...")
        train, test = tfds.load(data_config["name"], download=True, **load_args)
    if data_config["validation_split"] == 0:
        return train, None, test
    total = _count(train)
    kept = total - held_out_count(total, data_config["validation_split"],
                                  f"the {total:,} images of {data_config['name']}'s train split")
    return train.take(kept), train.skip(kept), test


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


def _reachable(host, port, timeout_s=10):
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _synthetic_splits(data_config, input_shape, num_classes, seed):
    """Random images with the dataset's shapes, no download, and learnable:
    each is half its class's random template, half noise."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(num_classes, *input_shape))
    train_n = data_config["synthetic_examples"]
    held_out = max(1, int(train_n * data_config["validation_split"]))
    test_n = max(1, int(train_n * 0.1))

    def split(n):
        labels = rng.integers(0, num_classes, size=(n,))
        noise = rng.integers(0, 256, size=(n, *input_shape))
        return ((templates[labels] + noise) // 2).astype(np.uint8), labels

    return split(train_n), split(held_out), split(test_n)


def _folder_splits(data_config, input_shape):
    """`data.path/train/<class>/*.png|jpg`, and `test/<class>/*` if there is
    one (else the test split is None), resized to `input_shape`; the
    validation images are a seeded random `data.validation_split` of train."""
    if data_config["path"] is None:
        raise UserError("data.source=folder needs data.path=DIR, a folder "
                        "with train/<class>/*.png or *.jpg (and optionally test/<class>/).")
    root = Path(data_config["path"]).expanduser()
    if data_config["validation_split"] == 0 and not (root / "test").is_dir():
        raise UserError(f"data.validation_split=0 validates on the test split, and {root} "
                        "has no test/<class>/ folder: hold out part of train/ instead "
                        "(data.validation_split=0.1).")
    images, labels, classes = _folder_arrays(root / "train", input_shape)
    order = np.random.default_rng(0).permutation(len(labels))
    split = data_config["validation_split"]
    held_out = held_out_count(len(labels), split, f"the {len(labels):,} images in "
                              f"{root / 'train'}") if split else 0
    kept, validation = order[held_out:], order[:held_out]
    splits = [(images[part], labels[part]) for part in (kept, validation)]
    if (root / "test").is_dir():
        test_images, test_labels, test_classes = _folder_arrays(root / "test", input_shape)
        if test_classes != classes:
            raise UserError(f"{root}/test has classes {test_classes} but "
                            f"{root}/train has {classes}; they must match.")
        splits.append((test_images, test_labels))
    else:
        print(f"{root} has no test/ folder: the run evaluates on its "
              f"{held_out:,} validation images.", flush=True)
        splits.append(None)
    return (*splits, len(classes))


# Bump when the cached arrays' layout changes.
CACHE_VERSION = 2


def _folder_arrays(folder, input_shape):
    """A folder of `<class>/*` images as uint8 arrays of `input_shape`, their
    labels (class folders in sorted order) and the class names.

    Decoding thousands of small files costs far more than training reads
    them, so the arrays are cached in `<folder>/../.cache/`. The cache holds
    the folder's fingerprint, a SHA-256 of every image's path below `folder`
    (so its class), size and modification time, and is decoded again when
    any of these changes: a file moved to another class is a new dataset.
    """
    files = sorted(p for p in folder.glob("*/*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UserError(f"{folder} is missing or holds no <class>/*.png or *.jpg images; "
                        "data.source=folder expects data.path/train/<class>/.")
    classes = sorted({path.parent.name for path in files})
    empty = sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name not in classes)
    if empty:
        raise UserError(f"{folder} has class folders without images: {', '.join(empty)}. "
                        "Add images to them, or remove them.")
    if len(classes) < 2:
        raise UserError(f"{folder} holds one class ({classes[0]}); a classifier needs at "
                        "least two <class>/ folders of images.")
    listing = hashlib.sha256(str(CACHE_VERSION).encode())
    for path in files:
        stat = path.stat()
        listing.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    fingerprint = np.array(listing.hexdigest())
    height, width, channels = input_shape
    cache = folder.parent / ".cache" / f"{folder.name}-{height}x{width}x{channels}.npz"
    started = time.perf_counter()
    try:
        with np.load(cache) as cached:
            if np.array_equal(cached["fingerprint"], fingerprint):
                found = cached["images"], cached["labels"], list(cached["classes"])
                print(f"loaded the {len(files):,} images of {folder} from {cache} in "
                      f"{time.perf_counter() - started:.1f} s", flush=True)
                return found
    except FileNotFoundError:
        pass  # no cache yet: decode
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        # A kill or a full disk while copying it leaves a truncated file.
        print(f"{cache} is damaged ({type(error).__name__}: {error}); decoding the images "
              "again.", flush=True)

    if not _environment.has_tensorflow():
        raise UserError(f"{folder} has no decoded cache that matches its images (none, "
                        "stale or damaged), and decoding needs TensorFlow, not installed "
                        "here. Where it is, decode them once "
                        "(python -m recipes data-benchmark NAME data.source=folder "
                        f"data.path=...), then copy {cache} here with the images, keeping "
                        "their modification times (tar and rsync -a do).")
    import tensorflow as tf

    labels = np.array([classes.index(path.parent.name) for path in files], dtype=np.int64)
    print(f"decoding the {len(files):,} images in {folder} (once: they are cached)...",
          flush=True)

    def decode(path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=channels,
                                   expand_animations=False)
        image = tf.image.resize(image, (height, width))  # bilinear; the same size is a no-op
        return tf.cast(tf.round(image), tf.uint8)

    paths = tf.data.Dataset.from_tensor_slices([str(path) for path in files])
    try:
        images = np.concatenate(list(paths.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
                                     .batch(1024).as_numpy_iterator()))
    except tf.errors.InvalidArgumentError:
        # TensorFlow's error does not name the file: find it, one at a time.
        for path in files:
            try:
                decode(str(path))
            except tf.errors.InvalidArgumentError:
                raise UserError(f"{path} is not an image TensorFlow can decode (PNG, JPEG, "
                                "GIF or BMP): replace or remove it.") from None
        raise
    seconds = time.perf_counter() - started
    try:
        _write_atomically(cache, images=images, labels=labels, classes=np.array(classes),
                          fingerprint=fingerprint)
        where = f"cached in {cache}"
    except OSError as error:
        where = f"not cached ({error}): they will be decoded again next time"
    print(f"decoded {len(files):,} images in {seconds:.1f} s "
          f"({len(files) / seconds:,.0f} images/s); {where}", flush=True)
    return images, labels, classes


def _write_atomically(cache, **arrays):
    """Saves `arrays` as the .npz file `cache`, through a temporary file of
    this process's own in the same folder, renamed when complete: a reader
    never sees a partial cache, and two processes decoding one folder at
    once never write into the same file."""
    cache.parent.mkdir(exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=cache.parent, prefix=f"{cache.stem}.",
                                       suffix=".partial.npz")
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **arrays)
        os.chmod(partial, 0o644)  # mkstemp's file is private; a cache is not
        os.replace(partial, cache)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
