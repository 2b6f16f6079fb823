"""`data.augment`: each operation, the exact pad-crop, soft labels, errors,
and that only the training split is augmented."""

import numpy as np
import pytest
import tensorflow as tf

from recipes import UserError, _augment, _config, _data


def batch(n=16, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(n, 32, 32, 3)).astype("float32")
    labels = tf.one_hot(rng.integers(0, classes, n), classes)
    return tf.constant(images), labels


@pytest.mark.parametrize("entry", list(_augment.OPERATIONS) + [{"randaugment": {"magnitude": 0.3}}])
def test_each_operation_keeps_shapes_dtypes_and_range(entry):
    images, labels = batch()
    out_images, out_labels = _augment.pipeline([entry], one_hot=True)(images, labels)
    assert out_images.shape == images.shape and out_images.dtype == tf.float32
    assert out_labels.shape == labels.shape and out_labels.dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(out_images)) and float(tf.reduce_max(out_images)) <= 1.0


def test_pad_crop_shifts_each_image_by_whole_pixels():
    images, labels = batch(n=32)
    cropped, _ = _augment.pipeline(["pad_crop"], one_hot=True, seed=1)(images, labels)
    padded = np.pad(images.numpy(), [(0, 0), (4, 4), (4, 4), (0, 0)])
    shifts = []
    for index in range(32):
        matches = [(dy, dx) for dy in range(9) for dx in range(9)
                   if np.array_equal(cropped[index], padded[index, dy:dy + 32, dx:dx + 32])]
        assert matches, f"image {index} is not an exact shifted crop"
        shifts.append(matches[0])
    assert len(set(shifts)) > 5  # one offset per image, not one per batch


@pytest.mark.parametrize("name", sorted(_augment.NEEDS_ONE_HOT))
def test_mixing_gives_soft_labels_that_sum_to_one(name):
    images, labels = batch(n=64)
    _, mixed = _augment.pipeline([name], one_hot=True, seed=3)(images, labels)
    np.testing.assert_allclose(tf.reduce_sum(mixed, axis=-1), 1.0, rtol=1e-5)
    assert np.any((mixed.numpy() > 0) & (mixed.numpy() < 1))  # some labels are blends


@pytest.mark.parametrize("entries, one_hot, message", [
    (["flip", "rotate"], True, "Unknown augmentation 'rotate' in data.augment; known: flip, pad_crop"),
    (["mixup"], False, "'mixup' mixes labels, so it needs a recipe trained on one-hot labels"),
    ([{"pad_crop": {"pad": 4}}], True, "bad parameters for 'pad_crop'.*it takes padding"),
    ([{"flip": 3}], True, "cannot read {'flip': 3}"),
])
def test_bad_entries_are_user_errors(entries, one_hot, message):
    with pytest.raises(UserError, match=message):
        _augment.pipeline(entries, one_hot=one_hot)


def test_only_training_batches_are_augmented():
    def load(augment):
        config = _config.resolve("densenet_cifar10", overrides=[
            "data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
            f"data.augment={augment}"], announce=lambda line: None)
        return _data.load(config["data"], seed=0, one_hot=True)

    plain, augmented = load("[]"), load("[pad_crop,flip,cutmix]")
    for split in ("validation", "test", "train_plain"):
        for (x, y), (ax, ay) in zip(getattr(plain, split), getattr(augmented, split)):
            np.testing.assert_array_equal(x, ax)
            np.testing.assert_array_equal(y, ay)
    (x, y), (ax, ay) = next(iter(plain.train)), next(iter(augmented.train))
    np.testing.assert_array_equal(y.numpy().max(axis=-1), 1.0)  # one-hot before mixing
    assert not np.array_equal(x, ax) and not np.array_equal(y, ay)
