"""`ArrayBatches`: the batches of arrays in memory as Keras reads them
without TensorFlow, the tf.data pipeline's counterpart on JAX."""

import math

import keras
import numpy as np


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
