"""The tensorflow-datasets source: a dataset's train and test splits, read
from `data.dir` or fetched once from TFDS's prepared copy."""

import socket

from recipes import UserError
from recipes._data import held_out_count

# Where tensorflow-datasets reads its prepared copies (`try_gcs`).
TFDS_HOST = ("storage.googleapis.com", 443)


def splits(data_config):
    """(train, validation, test) tf.data datasets of (uint8 image, int label):
    the validation images are the last `data.validation_split` of tfds'
    train split, counted exactly (tfds' percent slices round to whole
    percent); None for 0."""
    train, test = _load(data_config)
    if data_config["validation_split"] == 0:
        return train, None, test
    total = count(train)
    kept = total - held_out_count(total, data_config["validation_split"],
                                  f"the {total:,} images of {data_config['name']}'s train split")
    return train.take(kept), train.skip(kept), test


def count(dataset):
    """How many examples `dataset` holds: its cardinality, or counted."""
    known = int(dataset.cardinality())
    if known >= 0:
        return known
    return int(dataset.reduce(0, lambda n, _: n + 1))


def _load(data_config):
    """The train and test splits, downloaded first if `data.dir` lacks them
    and TFDS's host answers; refused in one message if it does not."""
    import tensorflow_datasets as tfds

    name, where = data_config["name"], data_config["dir"] or "~/tensorflow_datasets"
    load_args = dict(split=["train", "test"], as_supervised=True, try_gcs=True,
                     data_dir=data_config["dir"])
    try:
        return tfds.load(name, download=False, **load_args)
    except AssertionError:  # not prepared in data_dir yet: fetch TFDS's prepared copy
        if not _reachable(*TFDS_HOST):
            raise UserError(
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
