"""The synthetic source: random images with a dataset's shapes, no download,
and learnable, for tests and for timing without data."""

import numpy as np


def splits(data_config, input_shape, num_classes, seed):
    """(train, validation, test) (uint8 images, int labels) arrays: each image
    is half its class's random template, half noise. `data.synthetic_examples`
    train; the validation and test splits are drawn the same way."""
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
