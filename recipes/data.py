"""The data a recipe trains on: images and labels from tensorflow-datasets, an
image folder or random arrays, batched for `fit`, and augmented.

    splits = data.load({"name": "mnist", "batch_size": 128}, seed=0)
    model.fit(splits.train, steps_per_epoch=splits.steps_per_epoch,
              validation_data=splits.validation, epochs=2)

`load` takes a config's `data` section; `DEFAULTS` holds every key it reads,
with its meaning. A source gives uint8 images and int labels: tfds (its train
and test splits), `synthetic` (random images of the dataset's shapes, for
tests and timing) or `folder` (`data.path/train/<class>/*`, decoded once and
cached beside it). Every source then goes through one pipeline: shuffle,
batch, scale to float32 in [0, 1] on whole batches, one-hot the labels if
asked, augment training batches, prefetch. Training batches drop the
remainder, so that every step has one shape and XLA compiles once. With
TensorFlow the pipeline is tf.data; without it (Keras on JAX alone),
`ArrayBatches`, a `keras.utils.PyDataset`.

Augmentation (`data.augment`) lists operations on whole training batches,
each a name or a one-key mapping to its parameters:

    data.augment=[flip,pad_crop,{randaugment: {magnitude: 0.3}},cutmix]

`data.augment_on` places them: `host`, a map in the tf.data pipeline on the
CPU; `device`, inside `fit`'s training step, where the recipe wraps its model
in `AugmentedModel`; `auto`, the device with a GPU or without TensorFlow, else
the host (docs/augmentation.md measured why). `data.augment_engine` picks the
layers: keras-cv's (`keras_cv`) or Keras core's (`keras`); `auto` is keras-cv
on TensorFlow and Keras core on JAX. `mixup` and `cutmix` blend labels, so
with them the labels are one-hot. `alternating_flip` is done by the pipeline
itself: each image is mirrored in every other pass over the data.

This module needs only Keras, NumPy and, for tfds and tf.data, TensorFlow:
a recipe copied out of the repository takes it along. A wrong setting
raises `ConfigError`, with a message that says what to change.
"""

import dataclasses
import hashlib
import importlib.util
import inspect
import math
import os
import socket
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from pathlib import Path

import keras
import numpy as np
from keras import ops


class ConfigError(ValueError):
    """A setting that cannot work, with what to change: the command line
    prints it as one message. The data's settings raise it, and so do the
    recipes for their own (here, since this is the one module of the
    repository's that every recipe takes along)."""


HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None

# Every key of a config's `data` section, with its default. A literal: the
# repository's config reads it without importing this module.
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
    "augment": [],  # training-only operations, in order
    "augment_on": "auto",  # device (in the training step) or host (tf.data); auto: device on a GPU or without TensorFlow
    "augment_engine": "auto",  # keras_cv | keras (Keras core's); auto: keras_cv on TF, keras on JAX
}

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
    augment: object  # an Augmentation: (images, labels) -> (images, labels), or None
    augment_on: str  # "host" (already in `train`), "device" (for AugmentedModel) or None


def load(data_config, seed=0, steps_per_epoch=None, one_hot=False, initial_epoch=0):
    """Builds the train/validation/test batches that `data_config` asks for.

    Args:
        data_config: a config's `data` section; keys it leaves out take
            `DEFAULTS`' values.
        seed: seeds the synthetic data, the shuffle order and augmentation.
        steps_per_epoch: training steps per epoch; None means one pass.
        one_hot: one-hot float labels instead of integers (for label
            smoothing); a mixing augmentation (MixUp, CutMix) turns them
            on, since it blends labels.
        initial_epoch: the epoch training starts at: a resumed run's
            batches are then the ones an uninterrupted run trains on.

    Under a `tf.distribute` strategy's scope, batches hold `data.batch_size`
    images for each replica, and `fit` splits them.
    """
    config = _checked(data_config)
    # The batches are shuffled here: fit's default shuffle=True warns for nothing.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    input_shape, num_classes = DATASETS[config["name"]]
    one_hot = one_hot or mixes_labels(config["augment"])
    augment = augmentation(config["augment"], one_hot, seed, config["augment_engine"])
    augment_on = placement(config["augment_on"], augment.engine) if augment else None
    if not HAS_TENSORFLOW and (config["source"] == "tfds" or augment_on == "host"):
        raise ConfigError(
            ("data.source=tfds reads tensorflow-datasets" if config["source"] == "tfds"
             else "data.augment_on=host augments in tf.data") + ", which needs TensorFlow, not "
            "installed here. Without it, train on data.source=folder or synthetic, with "
            "data.augment_on=device data.augment_engine=keras.")
    train, validation, test, num_classes, evaluated_on = _splits(
        config, input_shape, num_classes, seed)
    # validation_split=0, the Keras examples' protocol: every training image
    # trains, and the test split is the validation data too.
    validated_on = "held_out"
    if config["validation_split"] == 0:
        validation, validated_on = test, "test"

    replicas = _replicas()
    batch_size = config["batch_size"] * replicas  # the global batch
    train_examples = _train_examples(train, config, batch_size, replicas)
    steps_per_epoch = steps_per_epoch or train_examples // batch_size
    mirrored = (alternating_flips(train_examples, seed)
                if has_alternating_flip(config["augment"]) else None)
    if HAS_TENSORFLOW:
        batches = _tf_batches(config, batch_size, num_classes, one_hot, seed,
                              augment if augment_on == "host" else None, mirrored, replicas)
    else:
        def batches(split, training, cache=False, start=0):  # arrays: nothing to cache
            return ArrayBatches(*split, batch_size, num_classes if one_hot else None,
                                shuffle_seed=seed if training else None, start=start,
                                mirrored=mirrored if training else None)

    return Data(
        train=batches(train, training=True, start=initial_epoch * steps_per_epoch),
        train_plain=batches(train, training=False, cache=False),
        validation=batches(validation, training=False),
        test=batches(test, training=False),
        input_shape=input_shape,
        num_classes=num_classes,
        train_examples=train_examples,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch,
        evaluated_on=evaluated_on,
        validated_on=validated_on,
        one_hot=one_hot,
        augment=augment,
        augment_on=augment_on,
    )


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


def first_images(batches, count):
    """The first `count` images of a split's ordered batches, as one array."""
    found = images(batches)
    if isinstance(found, np.ndarray):
        return found[:count]
    return np.asarray(next(iter(found.unbatch().take(count).batch(count))))


def _checked(data_config):
    """`DEFAULTS` updated by `data_config`, once the settings that no source
    can use are refused."""
    unknown = sorted(set(data_config) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"Unknown data key(s) {', '.join(unknown)}; the data section takes "
                        f"{', '.join(DEFAULTS)}.")
    config = {**DEFAULTS, **data_config}
    if config["name"] not in DATASETS:
        raise ConfigError(f"Unknown data.name '{config['name']}'. "
                        f"Known datasets: {', '.join(DATASETS)}.")
    if not 0 <= config["validation_split"] < 1:
        raise ConfigError("data.validation_split must be at least 0 and below 1, "
                        f"got {config['validation_split']}; 0 trains on every "
                        "training image and validates on the test split.")
    return config


def _replicas():
    """Replicas of the `tf.distribute` strategy whose scope this runs in (1 outside any)."""
    tf = sys.modules.get("tensorflow")  # not imported: no strategy can be in use
    return tf.distribute.get_strategy().num_replicas_in_sync if tf else 1


def _splits(config, input_shape, num_classes, seed):
    """(train, validation, test, number of classes, what `test` holds) from
    `data.source`: tfds gives tf.data datasets, synthetic and folder give
    (images, labels) arrays. A folder without test/ is evaluated on its
    validation images."""
    source = config["source"]
    if source == "tfds":
        return (*_tfds_splits(config), num_classes, "test")
    if source == "synthetic":
        return (*_synthetic_splits(config, input_shape, num_classes, seed),
                num_classes, "test")
    train, validation, test, num_classes = _folder_splits(config, input_shape)
    if test is None:
        return train, validation, validation, num_classes, "validation"
    return train, validation, test, num_classes, "test"


def _train_examples(train, config, batch_size, replicas):
    """How many examples the training split holds; refused when that is
    fewer than one batch."""
    count = _tfds_count(train) if config["source"] == "tfds" else len(train[1])
    if count < batch_size:
        raise ConfigError(
            f"The training split has {count} examples, fewer than a batch of "
            f"{batch_size} (data.batch_size={config['batch_size']} x {replicas} "
            "replicas): lower the batch size"
            + (" or raise data.synthetic_examples." if config["source"] == "synthetic"
               else "."))
    return count


# Fewer validation images than this make val_ metrics, and so the best checkpoint, noise.
MIN_VALIDATION_IMAGES = 100


def held_out_count(total, validation_split, what):
    """How many of `total` training images `validation_split` holds out for
    validation: refused when none, warned about when fewer than
    MIN_VALIDATION_IMAGES."""
    count = round(total * validation_split)
    if count == 0:
        raise ConfigError(f"data.validation_split={validation_split} of {what} holds out no image "
                        "to validate on. Raise it (0.1 is usual), or set it to 0 to validate "
                        "on the test split.")
    if count < MIN_VALIDATION_IMAGES:
        print(f"warning: data.validation_split={validation_split} of {what} holds out "
              f"{count} image(s): the val_ metrics, and so the best checkpoint, rest on them "
              f"alone. Hold out at least {MIN_VALIDATION_IMAGES}.", flush=True)
    return count


# ## tensorflow-datasets

# Where tensorflow-datasets reads its prepared copies (`try_gcs`).
TFDS_HOST = ("storage.googleapis.com", 443)


def _tfds_splits(config):
    """(train, validation, test) tf.data datasets of (uint8 image, int label):
    the validation images are the last `data.validation_split` of tfds'
    train split, counted exactly (tfds' percent slices round to whole
    percent); None for 0."""
    train, test = _tfds_load(config)
    if config["validation_split"] == 0:
        return train, None, test
    total = _tfds_count(train)
    kept = total - held_out_count(total, config["validation_split"],
                                  f"the {total:,} images of {config['name']}'s train split")
    return train.take(kept), train.skip(kept), test


def _tfds_count(dataset):
    """How many examples `dataset` holds: its cardinality, or counted."""
    known = int(dataset.cardinality())
    if known >= 0:
        return known
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _tfds_load(config):
    """The train and test splits, downloaded first if `data.dir` lacks them
    and TFDS's host answers; refused in one message if it does not."""
    import tensorflow_datasets as tfds

    name, where = config["name"], config["dir"] or "~/tensorflow_datasets"
    load_args = dict(split=["train", "test"], as_supervised=True, try_gcs=True,
                     data_dir=config["dir"])
    try:
        return tfds.load(name, download=False, **load_args)
    except AssertionError:  # not prepared in data_dir yet: fetch TFDS's prepared copy
        if not _reachable(*TFDS_HOST):
            raise ConfigError(
                f"Dataset '{name}' is not in {where} and "
                f"{TFDS_HOST[0]} cannot be reached, so it cannot be downloaded. "
                "Either train on random data with data.source=synthetic, or on a "
                "connected machine run `python -c \"import tensorflow_datasets as "
                f"tfds; tfds.load('{name}', try_gcs=True)\"`, copy "
                "its ~/tensorflow_datasets folder here and pass data.dir=PATH.") from None
    print(f"Downloading {name} into {where} ...")
    return tfds.load(name, download=True, **load_args)


def _reachable(host, port, timeout_s=10):
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# ## Synthetic images

def _synthetic_splits(config, input_shape, num_classes, seed):
    """(train, validation, test) (uint8 images, int labels) arrays: each image
    is half its class's random template, half noise, so that a model can
    learn them. `data.synthetic_examples` train; the validation images are
    `data.validation_split` of them more, the test images a tenth."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(num_classes, *input_shape))
    train_n = config["synthetic_examples"]
    held_out = (held_out_count(train_n, config["validation_split"],
                               f"the {train_n:,} synthetic images")
                if config["validation_split"] else 1)
    test_n = max(1, int(train_n * 0.1))

    def split(n):
        labels = rng.integers(0, num_classes, size=(n,))
        noise = rng.integers(0, 256, size=(n, *input_shape))
        return ((templates[labels] + noise) // 2).astype(np.uint8), labels

    return split(train_n), split(held_out), split(test_n)


# ## An image folder

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
# Bump when the cached arrays' layout or their decoding changes (3: JPEG's
# accurate IDCT, as PIL's, and the decoder's name).
CACHE_VERSION = 3


def _folder_splits(config, input_shape):
    """(train, validation, test, number of classes): (uint8 images, int
    labels) arrays of `data.path/train/<class>/*`, and of `test/<class>/*` if
    there is one (else the test split is None), resized to `input_shape`; the
    validation images are a seeded random `data.validation_split` of train."""
    if config["path"] is None:
        raise ConfigError("data.source=folder needs data.path=DIR, a folder "
                        "with train/<class>/*.png or *.jpg (and optionally test/<class>/).")
    root = Path(config["path"]).expanduser()
    if config["validation_split"] == 0 and not (root / "test").is_dir():
        raise ConfigError(f"data.validation_split=0 validates on the test split, and {root} "
                        "has no test/<class>/ folder: hold out part of train/ instead "
                        "(data.validation_split=0.1).")
    images, labels, classes = folder_arrays(root / "train", input_shape)
    order = np.random.default_rng(0).permutation(len(labels))
    split = config["validation_split"]
    held_out = held_out_count(len(labels), split, f"the {len(labels):,} images in "
                              f"{root / 'train'}") if split else 0
    kept, validation = order[held_out:], order[:held_out]
    found = [(images[part], labels[part]) for part in (kept, validation)]
    if (root / "test").is_dir():
        test_images, test_labels, test_classes = folder_arrays(root / "test", input_shape)
        if test_classes != classes:
            raise ConfigError(f"{root}/test has classes {test_classes} but "
                            f"{root}/train has {classes}; they must match.")
        found.append((test_images, test_labels))
    else:
        print(f"{root} has no test/ folder: the run evaluates on its "
              f"{held_out:,} validation images.", flush=True)
        found.append(None)
    return (*found, len(classes))


def folder_arrays(folder, input_shape):
    """A folder of `<class>/*` images as uint8 arrays of `input_shape`, their
    labels (class folders in sorted order) and the class names.

    Decoding thousands of small files costs far more than training reads
    them, so the arrays are cached in `<folder>/../.cache/`. The cache holds
    the folder's fingerprint, a SHA-256 of every image's path below `folder`
    (so its class), size and modification time, and is decoded again when
    any of these changes: a file moved to another class is a new dataset.
    TensorFlow decodes where it is installed, PIL (through Keras) where it is
    not; both give the same arrays, so a cache written by either is read by
    both, and records which wrote it.
    """
    files, classes = _listing(folder)
    fingerprint = _fingerprint(folder, files)
    height, width, channels = input_shape
    cache = folder.parent / ".cache" / f"{folder.name}-{height}x{width}x{channels}.npz"
    started = time.perf_counter()
    cached = _read_cache(cache, fingerprint)
    if cached is not None:
        images, labels, classes, decoder = cached
        print(f"loaded the {len(files):,} images of {folder} from {cache} (decoded by "
              f"{decoder}) in {time.perf_counter() - started:.1f} s", flush=True)
        return images, labels, classes

    _refuse_16_bit(files)
    labels = np.array([classes.index(path.parent.name) for path in files], dtype=np.int64)
    decoder = "TensorFlow" if HAS_TENSORFLOW else "PIL"
    print(f"decoding the {len(files):,} images in {folder} with {decoder} (once: they are "
          "cached)...", flush=True)
    decode = _decode_with_tensorflow if HAS_TENSORFLOW else _decode_with_pil
    images = decode(files, input_shape)
    seconds = time.perf_counter() - started
    try:
        _write_atomically(cache, images=images, labels=labels, classes=np.array(classes),
                          fingerprint=fingerprint, decoder=np.array(decoder))
        where = f"cached in {cache}"
    except OSError as error:
        where = f"not cached ({error}): they will be decoded again next time"
    print(f"decoded {len(files):,} images in {seconds:.1f} s "
          f"({len(files) / seconds:,.0f} images/s); {where}", flush=True)
    return images, labels, classes


def _listing(folder):
    """The image files below `folder/<class>/`, sorted, and the class names;
    refused in one message when there is nothing a classifier can learn."""
    files = sorted(p for p in folder.glob("*/*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ConfigError(f"{folder} is missing or holds no <class>/*.png or *.jpg images; "
                        "data.source=folder expects data.path/train/<class>/.")
    classes = sorted({path.parent.name for path in files})
    empty = sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name not in classes)
    if empty:
        raise ConfigError(f"{folder} has class folders without images: {', '.join(empty)}. "
                        "Add images to them, or remove them.")
    if len(classes) < 2:
        raise ConfigError(f"{folder} holds one class ({classes[0]}); a classifier needs at "
                        "least two <class>/ folders of images.")
    return files, classes


def _refuse_16_bit(files):
    """Refuses 16-bit PNGs: TensorFlow scales them to 8 bits and PIL clips them,
    so the two decoders would cache different images."""
    for path in files:
        if path.suffix.lower() != ".png":
            continue
        with path.open("rb") as file:
            header = file.read(25)  # the signature, then IHDR: width, height, bit depth
        if len(header) == 25 and header[1:4] == b"PNG" and header[24] == 16:
            raise ConfigError(f"{path} is a 16-bit PNG; the recipes read 8-bit images. "
                            "Convert the folder to 8 bits first (e.g. PIL's "
                            "Image.point(lambda v: v // 256)), or remove it.")


def _fingerprint(folder, files):
    """A SHA-256 of the cache's version and every file's path, size and
    modification time, as a numpy string to store in the cache."""
    listing = hashlib.sha256(str(CACHE_VERSION).encode())
    for path in files:
        stat = path.stat()
        listing.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return np.array(listing.hexdigest())


def _read_cache(cache, fingerprint):
    """The cached (images, labels, classes, decoder) if `cache` holds them
    for `fingerprint`; None when it is missing, stale or damaged (said so)."""
    try:
        with np.load(cache) as cached:
            if np.array_equal(cached["fingerprint"], fingerprint):
                return (cached["images"], cached["labels"], list(cached["classes"]),
                        str(cached["decoder"]))
    except FileNotFoundError:
        pass  # no cache yet: decode
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        # A kill or a full disk while copying it leaves a truncated file.
        print(f"{cache} is damaged ({type(error).__name__}: {error}); decoding the images "
              "again.", flush=True)
    return None


def _decode_with_tensorflow(files, input_shape):
    """The images of `files` as one uint8 array of `input_shape` each,
    decoded by TensorFlow and resized bilinearly."""
    import tensorflow as tf

    height, width, channels = input_shape

    def decode(path):
        contents = tf.io.read_file(path)
        # JPEG with the accurate integer IDCT, PIL's, so that both write one
        # cache: TensorFlow's default, the fast IDCT, gives other pixels.
        image = tf.cond(
            tf.io.is_jpeg(contents),
            lambda: tf.io.decode_jpeg(contents, channels=channels,
                                      dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(contents, channels=channels, expand_animations=False))
        image = tf.image.resize(image, (height, width))  # bilinear; the same size is a no-op
        return tf.cast(tf.round(image), tf.uint8)

    paths = tf.data.Dataset.from_tensor_slices([str(path) for path in files])
    try:
        return np.concatenate(list(paths.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
                                   .batch(1024).as_numpy_iterator()))
    except tf.errors.InvalidArgumentError:
        # TensorFlow's error does not name the file: find it, one at a time.
        for path in files:
            try:
                decode(str(path))
            except tf.errors.InvalidArgumentError:
                raise ConfigError(f"{path} is not an image TensorFlow can decode (PNG, JPEG, "
                                "GIF or BMP): replace or remove it.") from None
        raise


def _decode_with_pil(files, input_shape):
    """The images of `files` as one uint8 array of `input_shape` each,
    decoded by PIL through Keras, without TensorFlow, into the arrays that
    `_decode_with_tensorflow` gives: resized by `keras.ops.image.resize` as
    TensorFlow resizes (bilinear, half-pixel centres, no antialiasing;
    `load_img`'s own resize is PIL's, which antialiases), all the images of
    one size in one call."""
    height, width, channels = input_shape
    color_mode = {1: "grayscale", 3: "rgb", 4: "rgba"}[channels]
    images = np.empty((len(files), height, width, channels), np.uint8)
    by_size = {}  # (height, width): [(index, image)] of the images to resize
    for index, path in enumerate(files):
        try:
            image = keras.utils.img_to_array(keras.utils.load_img(path, color_mode=color_mode),
                                             dtype="uint8")
        except OSError:  # PIL's UnidentifiedImageError, or a truncated file
            raise ConfigError(f"{path} is not an image PIL can decode (PNG or JPEG): replace "
                            "or remove it.") from None
        if image.shape[:2] == (height, width):
            images[index] = image
        else:
            by_size.setdefault(image.shape[:2], []).append((index, image))
    for group in by_size.values():
        indices, originals = zip(*group)
        resized = ops.image.resize(np.stack(originals).astype(np.float32),
                                   (height, width), interpolation="bilinear", antialias=False)
        images[list(indices)] = np.round(ops.convert_to_numpy(resized))
    return images


def _write_atomically(cache, **named_arrays):
    """Saves `named_arrays` as the .npz file `cache`, through a temporary file of
    this process's own in the same folder, renamed when complete: a reader
    never sees a partial cache, and two processes decoding one folder at
    once never write into the same file."""
    cache.parent.mkdir(exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=cache.parent, prefix=f"{cache.stem}.",
                                       suffix=".partial.npz")
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **named_arrays)
        os.chmod(partial, 0o644)  # mkstemp's file is private; a cache is not
        os.replace(partial, cache)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


# ## Batches

def _tf_batches(config, batch_size, num_classes, one_hot, seed, host_augment, mirrored=None,
                replicas=1):
    """`batches(split, training, cache, start)`: the tf.data pipeline of a
    split, a tf.data.Dataset or an (images, labels) pair of arrays; for
    training, from the run's training step `start` on. `mirrored`: the
    training images that `alternating_flip` mirrors in even passes, or None.

    A resumed run starts its pipeline from the beginning and skips the
    batches before `start`: the seeded shuffle's order, and host
    augmentation's draws, are then the uninterrupted run's. Skipping reads
    the images again (about 2 microseconds each from memory) and augments
    those batches again when augmentation runs on the host.

    Under a strategy of several replicas, an evaluated split's batches hold a
    multiple of the replicas, so that the first splits evenly: Keras 3.15
    averages the first batch across replicas to learn its shapes, which fails
    for one that does not (a split smaller than a batch, of an odd size).
    Every image is still evaluated: the last batch, partial, splits unevenly
    in the step, where tf.distribute handles it.
    """
    import tensorflow as tf

    autotune = tf.data.AUTOTUNE

    def to_model_input(images, labels):
        # Whole batches: one vectorized op instead of one per image.
        images = tf.cast(images, tf.float32) / 255.0
        return images, tf.one_hot(labels, num_classes) if one_hot else labels

    def alternate_flip(positions, example):
        # An image's position in the repeated stream is (pass, image):
        # mirrored in even passes if `mirrored` says so, otherwise in odd
        # ones. On whole batches: a map per image costs 15x more.
        images, labels = example
        count = len(mirrored)
        flip = tf.gather(mirrored, positions % count) != (positions // count % 2 == 1)
        return tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images), labels

    def batches(split, training, cache=config["cache"], start=0):
        dataset = split
        if isinstance(split, tuple):  # arrays in memory already: nothing to cache
            dataset, cache = tf.data.Dataset.from_tensor_slices(split), False
        if cache:
            dataset = dataset.cache()
        if training:
            dataset = dataset.repeat()
            if mirrored is not None:
                dataset = dataset.enumerate()  # each image's position, for alternate_flip
            # Shuffled after repeating, in one fixed order: every new
            # iterator gives the same stream (Keras' JAX fit opens two).
            dataset = dataset.shuffle(config["shuffle_buffer"], seed=seed,
                                      reshuffle_each_iteration=False)
        if training and not host_augment:
            dataset = dataset.skip(start * batch_size)
        size = batch_size
        if not training and replicas > 1:
            count = len(split[1]) if isinstance(split, tuple) else _tfds_count(dataset)
            size = max(replicas, min(batch_size, count) // replicas * replicas)
        dataset = dataset.batch(size, drop_remainder=training, num_parallel_calls=autotune)
        if training and mirrored is not None:
            dataset = dataset.map(alternate_flip, num_parallel_calls=autotune)
        dataset = dataset.map(to_model_input, num_parallel_calls=autotune)
        if training and host_augment:
            # One batch at a time: the layers' random state then advances in
            # the same order every run, so a seeded run repeats exactly.
            # Each call is vectorized, and prefetch overlaps it with training.
            dataset = dataset.map(host_augment).skip(start)
        # Parallel steps at AUTOTUNE then run on min(16, cores) threads,
        # fixed. tf.data's autotuning thread, on a 2-core CPU, took a core
        # from training now and then, and held the end of `fit` (the
        # destruction of its iterator) for up to 16 s.
        options = tf.data.Options()
        options.autotune.enabled = False
        return dataset.prefetch(autotune).with_options(options)

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
        mirrored: bool array, (examples,): the images `alternating_flip`
            mirrors in even passes (the others in odd ones), in the training
            split; None mirrors none.
    """

    def __init__(self, images, labels, batch_size, num_classes=None, shuffle_seed=None,
                 start=0, mirrored=None):
        super().__init__()
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.num_classes, self.shuffle_seed, self.start = num_classes, shuffle_seed, start
        self.mirrored = mirrored
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
        if self.mirrored is not None and self.shuffle_seed is not None:  # training passes only
            flip = self.mirrored[rows] != (number % 2 == 1)
            images[flip] = images[flip][:, :, ::-1]
        labels = self.labels[rows]
        if self.num_classes is not None:
            labels = np.eye(self.num_classes, dtype=np.float32)[labels]
        return images, labels


# ## Augmentation

ENGINES = ("keras_cv", "keras")


def _layers(engine):
    """The module whose layers `engine` names."""
    if engine == "keras_cv":
        if not HAS_TENSORFLOW:
            raise ConfigError("data.augment_engine=keras_cv needs TensorFlow (keras-cv's layers "
                            "are TensorFlow code), not installed here: set "
                            "data.augment_engine=keras, Keras core's layers.")
        import keras_cv

        return keras_cv.layers
    return keras.layers


# Each operation returns (apply, layer): `(images, labels) -> (images,
# labels)` on a batch, and the Keras layer that it draws random numbers with.

def flip(engine, seed, mode="horizontal"):
    """Random flips (RandomFlip)."""
    return _images_only(_layers(engine).RandomFlip(mode, seed=seed, dtype="float32"))


# What pad_crop's padding holds: 0, the batch's mean colour per channel, or the mirrored edge.
FILLS = ("black", "mean", "reflect")


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
        raise ConfigError(f"pad_crop's fill must be one of {', '.join(FILLS)}, got {fill!r}.")
    if not isinstance(padding, int) or isinstance(padding, bool) or padding < 1:
        raise ConfigError(f"pad_crop's padding must be a whole number of pixels, at least 1; "
                        f"got {padding!r}.")
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
        return _gather_crop(padded, rows, columns), labels

    return apply, layer


def _gather_crop(padded, rows, columns):
    """Each image of `padded` at its `rows` x `columns`, by TensorFlow's
    batched gathers: its `take_along_axis` broadcasts the indices to every
    pixel and takes 7x as long on a CPU (49 against 7 ms for 1,024 CIFAR
    images)."""
    import tensorflow as tf  # only ever called on TensorFlow tensors

    cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
    return tf.gather(cropped, columns, axis=2, batch_dims=1)


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
        if keras.backend.backend() == "tensorflow":
            return _gather_crop(padded, rows, columns)
        cropped = ops.take_along_axis(padded, rows[:, :, None, None], axis=1)
        return ops.take_along_axis(cropped, columns[:, None, :, None], axis=2)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "padding": self.padding, "fill": self.fill,
                "seed": self.seed}


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


def augmentation(entries, one_hot, seed=0, engine="auto"):
    """Returns an `Augmentation` applying `entries` in order with `engine`'s
    layers (`auto`: `resolve_engine`'s), or None when there are none.

    Raises:
        ConfigError: for an unknown operation or parameter.
        ValueError: for a mixing operation on integer labels.
    """
    engine, steps = resolve_engine(engine), []
    for index, entry in enumerate(entries):
        name, params = _parse(entry)
        if name == ALTERNATING_FLIP:
            if params:
                raise ConfigError(f"data.augment: '{ALTERNATING_FLIP}' takes no parameters.")
            continue
        if name not in OPERATIONS:
            raise ConfigError(f"Unknown augmentation '{name}' in data.augment; "
                            f"known: {', '.join([*OPERATIONS, ALTERNATING_FLIP])}.")
        if name in NEEDS_ONE_HOT and not one_hot:
            raise ValueError(f"'{name}' mixes labels: it needs one-hot labels.")
        try:
            steps.append(OPERATIONS[name](engine, seed + index, **params))
        except ConfigError:
            raise
        except (TypeError, ValueError) as error:
            accepted = list(inspect.signature(OPERATIONS[name]).parameters)[2:]
            raise ConfigError(f"data.augment: bad parameters for '{name}' ({error}); "
                            f"it takes {', '.join(accepted) or 'none'}.") from None
    return Augmentation(steps, engine) if steps else None


def resolve_engine(engine):
    """`data.augment_engine`, with `auto` made keras-cv on TensorFlow and
    Keras core's layers on JAX."""
    if engine != "auto":
        return engine
    return "keras_cv" if backend() == "tensorflow" else "keras"


def backend():
    """Keras' backend: "tensorflow" or "jax"."""
    return keras.backend.backend()


def _parse(entry):
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        (name, params), = entry.items()
        if params is None or isinstance(params, dict):
            return name, params or {}
    raise ConfigError(f"data.augment: cannot read {entry!r}; write a name, or "
                    "{name: {parameter: value}}, e.g. {randaugment: {magnitude: 0.3}}.")


def gpus():
    """The names of the GPUs that Keras' backend computes on."""
    if backend() == "jax":
        import jax

        return [device.device_kind for device in jax.devices() if device.platform == "gpu"]
    import tensorflow as tf

    return [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]


def placement(augment_on, engine):
    """Where `data.augment_on` runs augmentation on this machine: device or host.

    Raises:
        ConfigError: keras-cv's layers asked to run in a JAX training step;
            they are TensorFlow code.
    """
    if augment_on == "auto":
        augment_on = "host" if HAS_TENSORFLOW and not gpus() else "device"
    if augment_on == "device" and engine == "keras_cv" and backend() == "jax":
        raise ConfigError("keras-cv's layers are TensorFlow code: they cannot run in a JAX "
                        "training step (data.augment_on=device). Set data.augment_engine=keras, "
                        "Keras core's layers, or data.augment_on=host (tf.data).")
    return augment_on


# ## Augmentation in the training step

JAX = keras.backend.backend() == "jax"


@keras.saving.register_keras_serializable(package="models")
class AugmentedModel(keras.Model):
    """Trains `network` on batches that `augment` transforms inside `fit`'s
    training step, on the accelerator; evaluation and prediction see the
    images as they are.

    Keras runs no user code between reading a batch and the training step,
    so this overrides `train_step`, the documented way to change what `fit`
    does, whose signature is the backend's.

    On JAX the step is a pure function of every variable's value, and
    `jit_compile=True` compiles augmentation and network together: Keras
    core's layers run there. The augmentation's layers are tracked as
    `augment_layers`, so that their seed states are among the model's
    non-trainable variables: the step reads them, and returns them advanced.

    On TensorFlow, under XLA the augmentation stays out of the compiled cluster
    (RandAugment, MixUp and CutMix use ops XLA cannot compile), and Keras
    compiles a whole step or none of it: `compile` keeps the functions of
    `fit`, `evaluate` and `predict` plain graphs and compiles Keras' own
    training, test and prediction steps as `jit_compile=True` functions of
    their own, which the overridden steps call (the training step after
    the augmentation). `step_jit_compile` says whether it did.

    A saved model loads back without its augmentation, which is a Python
    function: it predicts as `network` does.

    Args:
        network: the model to train, built.
        augment: `(images, labels) -> (images, labels)` on whole batches,
            with the Keras layers it draws random numbers with as its
            `layers` (an `Augmentation`), or None.

    Example:

    ```python
    model = AugmentedModel(network, augment)
    model.compile(optimizer="sgd", loss="categorical_crossentropy", jit_compile=True)
    model.fit(batches)
    model.step_jit_compile  # True: the network's steps run under XLA
    ```
    """

    def __init__(self, network, augment=None, **kwargs):
        super().__init__(**kwargs)
        if not network.built:
            raise ValueError(f"`network` must be built, received: network={network.name} "
                             "(unbuilt)")
        self.network = network
        self.augment = augment
        if JAX and augment is not None:
            self.augment_layers = list(augment.layers)
        self.step_jit_compile = False
        # `predict` needs no `compile`: until then the steps are Keras' own,
        # jit-compiled or not as Keras decides.
        self._set_network_steps(jit_compile=False)
        self.build(network.input_shape)

    @property
    def augmentation_layers(self):
        """The layers the augmentation draws random numbers with: the ones
        `callbacks.EpochSeeds` seeds each epoch."""
        return self.augment.layers if self.augment is not None else []

    def call(self, inputs, training=None):
        return self.network(inputs, training=training)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        # Resolved by Keras ("auto"; False if a layer cannot be compiled).
        self.step_jit_compile = self.jit_compile
        if JAX:
            return  # one jitted step, augmentation included: Keras core's layers compile
        # With it on, fit's function would take the augmentation into XLA:
        # compiled again, with jit_compile=False, Keras' own functions stay
        # plain graphs, and call the network's steps compiled.
        super().compile(*args, **{**kwargs, "jit_compile": False})
        self._set_network_steps(self.step_jit_compile)
        # fit traces its step with AutoGraph off, and keras-cv's layers need
        # it (Python `if`s on tensors): a tf.function of their own turns it on.
        import tensorflow as tf

        self._augment_batch = (self.augment if self.run_eagerly or self.augment is None
                               else tf.function(self.augment))

    def compile_from_config(self, config):
        # Keras leaves a loaded model with its own `compile` uncompiled, and
        # asks for this override: compile, then create the optimizer's
        # variables for the saved ones to load into.
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def _set_network_steps(self, jit_compile):
        # Keras' own steps; none of them augments, so XLA can compile each.
        steps = (super().train_step, super().test_step, super().predict_step)
        if jit_compile and not JAX:
            import tensorflow as tf

            steps = [tf.function(step, jit_compile=True) for step in steps]
        self._network_train, self._network_test, self._network_predict = steps

    def train_step(self, *step_args):
        # TensorFlow calls train_step(data); JAX calls train_step(state, data).
        if JAX:
            return self._jax_train_step(*step_args)
        data, = step_args
        if self.augment is not None:
            data = self._augment_batch(*data)
        return self._network_train(data)

    def _jax_train_step(self, state, data):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        if self.augment is not None:
            # The layers read their seed states from the step's state, and
            # write the advanced ones into the scope instead of the variables.
            values = list(zip(self.non_trainable_variables, non_trainable))
            with keras.StatelessScope(state_mapping=values) as scope:
                data = self.augment(*data)
            non_trainable = [scope.get_current_value(variable)
                             for variable in self.non_trainable_variables]
        state = trainable, non_trainable, optimizer_variables, metrics_variables
        return self._network_train(state, data)

    def test_step(self, *step_args):
        return self._network_test(*step_args)

    def predict_step(self, *step_args):
        return self._network_predict(*step_args)

    def get_config(self):
        return {**super().get_config(),
                "network": keras.saving.serialize_keras_object(self.network)}

    @classmethod
    def from_config(cls, config):
        network = keras.saving.deserialize_keras_object(config.pop("network"))
        return cls(network, **config)


def network_of(model):
    """The network a model trains: inside an `AugmentedModel`, or the model itself."""
    return model.network if isinstance(model, AugmentedModel) else model
