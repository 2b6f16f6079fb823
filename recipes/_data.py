"""Input pipelines: tensorflow-datasets, synthetic tensors, or an image folder.

Every source yields uint8 images and int labels, which go through the same
pipeline: cache the decoded uint8 images, shuffle, batch, scale to float32 in
[0, 1] on whole batches, one-hot the labels if the recipe asks, augment
(training only, when `data.augment_on` places it on the host; see
`recipes/_augment.py`), prefetch. Training batches drop
the remainder, so every step has one shape and XLA compiles once.
"""

import dataclasses
import socket
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from recipes import UserError, _augment

AUTOTUNE = tf.data.AUTOTUNE

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
    """Batched splits and what a model needs to know about them."""

    train: tf.data.Dataset  # shuffled, augmented, repeats forever; use steps_per_epoch
    train_plain: tf.data.Dataset  # one ordered pass, not augmented: to adapt normalization
    validation: tf.data.Dataset
    test: tf.data.Dataset
    input_shape: tuple
    num_classes: int
    train_examples: int
    batch_size: int
    steps_per_epoch: int
    one_hot: bool  # labels are one-hot vectors rather than class indices
    augment: object  # (images, labels) -> (images, labels), or None
    augment_on: str  # "host" (already in `train`), "device" (for models.AugmentedModel) or None


def load(data_config, seed=0, steps_per_epoch=None, one_hot=False):
    """Builds the train/validation/test pipelines that `data_config` asks for.

    Args:
        data_config: the config's `data` section.
        seed: seeds the synthetic data, the shuffle order and augmentation.
        steps_per_epoch: training steps per epoch; None means one pass.
        one_hot: one-hot float labels instead of integers (for label
            smoothing); a mixing augmentation (MixUp, CutMix) turns them
            on, since it blends labels.
    """
    name = data_config["name"]
    if name not in DATASETS:
        raise UserError(f"Unknown data.name '{name}'. "
                        f"Known datasets: {', '.join(DATASETS)}.")
    if not 0 < data_config["validation_split"] < 1:
        raise UserError("data.validation_split must be between 0 and 1 "
                        f"(exclusive), got {data_config['validation_split']}.")
    input_shape, num_classes = DATASETS[name]
    one_hot = one_hot or _augment.mixes_labels(data_config["augment"])
    augment = _augment.pipeline(data_config["augment"], one_hot, seed,
                                data_config["augment_engine"])
    augment_on = _augment.placement(data_config["augment_on"]) if augment else None
    source = data_config["source"]
    if source == "tfds":
        train, validation, test = _tfds_splits(data_config)
    elif source == "synthetic":
        train, validation, test = _synthetic_splits(data_config, input_shape,
                                                    num_classes, seed)
    else:
        train, validation, test, num_classes = _folder_splits(data_config, input_shape)

    batch_size = data_config["batch_size"]
    train_examples = _count(train)
    if train_examples < batch_size:
        raise UserError(
            f"The training split has {train_examples} examples, fewer than "
            f"data.batch_size={batch_size}: lower the batch size"
            + (" or raise data.synthetic_examples." if source == "synthetic" else "."))

    def to_model_input(images, labels):
        # Whole batches: one vectorized op instead of one per image.
        images = tf.cast(images, tf.float32) / 255.0
        return images, tf.one_hot(labels, num_classes) if one_hot else labels

    def batches(dataset, training, cache=data_config["cache"]):
        if cache:
            dataset = dataset.cache()
        if training:
            dataset = dataset.shuffle(data_config["shuffle_buffer"], seed=seed).repeat()
        dataset = dataset.batch(batch_size, drop_remainder=training,
                                num_parallel_calls=AUTOTUNE)
        dataset = dataset.map(to_model_input, num_parallel_calls=AUTOTUNE)
        if training and augment_on == "host":
            # One batch at a time: the layers' random state then advances in
            # the same order every run, so a seeded run repeats exactly.
            # Each call is vectorized, and prefetch overlaps it with training.
            dataset = dataset.map(augment)
        return dataset.prefetch(AUTOTUNE)

    return Data(
        train=batches(train, training=True),
        train_plain=batches(train, training=False, cache=False),
        validation=batches(validation, training=False),
        test=batches(test, training=False),
        input_shape=input_shape,
        num_classes=num_classes,
        train_examples=train_examples,
        batch_size=batch_size,
        steps_per_epoch=steps_per_epoch or train_examples // batch_size,
        one_hot=one_hot,
        augment=augment,
        augment_on=augment_on,
    )


def _count(dataset):
    count = int(dataset.cardinality())
    if count >= 0:
        return count
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _split_names(validation_split):
    percent = round(100 * (1 - validation_split))
    return f"train[:{percent}%]", f"train[{percent}%:]", "test"


def _tfds_splits(data_config):
    import tensorflow_datasets as tfds

    splits = _split_names(data_config["validation_split"])
    load_args = dict(split=list(splits), as_supervised=True, try_gcs=True,
                     data_dir=data_config["dir"])
    try:
        return tfds.load(data_config["name"], download=False, **load_args)
    except AssertionError:
        pass  # not prepared in data_dir yet: fetch TFDS's prepared copy
    if not _reachable(*TFDS_HOST):
        where = data_config["dir"] or "~/tensorflow_datasets"
        raise UserError(
            f"Dataset '{data_config['name']}' is not in {where} and "
            f"{TFDS_HOST[0]} cannot be reached, so it cannot be downloaded. "
            "Either train on random data with data.source=synthetic, or on a "
            "connected machine run `python -c \"import tensorflow_datasets as "
            f"tfds; tfds.load('{data_config['name']}', try_gcs=True)\"`, copy "
            "its ~/tensorflow_datasets folder here and pass data.dir=PATH.")
    print(f"Downloading {data_config['name']} into {data_config['dir'] or '~/tensorflow_datasets'} ...")
    return tfds.load(data_config["name"], download=True, **load_args)


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

    def split(n):
        labels = rng.integers(0, num_classes, size=(n,))
        noise = rng.integers(0, 256, size=(n, *input_shape))
        images = ((templates[labels] + noise) // 2).astype(np.uint8)
        return tf.data.Dataset.from_tensor_slices((images, labels))

    return split(train_n), split(held_out), split(held_out)


def _folder_splits(data_config, input_shape):
    """`data.path/{train,test}/<class>/*.png|jpg`, resized to `input_shape`."""
    if data_config["path"] is None:
        raise UserError("data.source=folder needs data.path=DIR, a folder "
                        "with train/<class>/*.png and test/<class>/*.png.")
    root = Path(data_config["path"]).expanduser()
    for split in ("train", "test"):
        folder = root / split
        if not folder.is_dir() or not any(
                p.suffix.lower() in IMAGE_SUFFIXES for p in folder.glob("*/*")):
            raise UserError(f"{folder} is missing or holds no <class>/*.png "
                            "or *.jpg images; data.source=folder expects "
                            "data.path/train/<class>/ and data.path/test/<class>/.")
    color_mode = "grayscale" if input_shape[-1] == 1 else "rgb"

    def read(folder, subset=None):
        return keras.utils.image_dataset_from_directory(
            folder, labels="inferred", label_mode="int", color_mode=color_mode,
            image_size=input_shape[:2], batch_size=None, shuffle=subset is not None,
            seed=0, validation_split=data_config["validation_split"] if subset else None,
            subset=subset, verbose=False)

    train = read(root / "train", "training")
    validation = read(root / "train", "validation")
    test = read(root / "test")
    if test.class_names != train.class_names:
        raise UserError(f"{root}/test has classes {test.class_names} but "
                        f"{root}/train has {train.class_names}; they must match.")
    num_classes = len(train.class_names)

    def to_uint8(image, label):
        return tf.cast(tf.round(image), tf.uint8), label

    return (*(d.map(to_uint8, num_parallel_calls=AUTOTUNE)
              for d in (train, validation, test)), num_classes)
