"""Images in memory are held once: a run's peak memory stays within about two
copies of its uint8 images (four, once: from_tensor_slices' copies and
tf.data's), and the splits, batches and so training stay what they were."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from keras_course_recipes import data as rdata
from test_data import data_config, write_folder

# Run in a process of its own, whose peak resident memory (VmHWM) is this
# test's: TensorFlow started, then a large split loaded and each of its
# pipelines' first batch drawn (a new iterator is where tf.data copied a
# pipeline's tensors). Prints the peak above the memory before loading, in
# copies of the images' bytes.
PEAK_COPIES = r"""
import sys
import numpy as np
from keras_course_recipes import data, folder

source, count = sys.argv[1], int(sys.argv[2])
shape = data.DATASETS["cifar10"][0]


def read(config, input_shape):  # a folder's cached images, made up: read as they are
    rng = np.random.default_rng(0)
    split = lambda n: (rng.integers(0, 256, (n, *input_shape), np.uint8),
                       rng.integers(0, 10, n))
    return split(count), split(count // 10), [str(c) for c in range(10)]


def load_and_draw(config):
    splits = data.load({"name": "cifar10", "path": "made-up", **config})
    for batches in (splits.train, splits.train_plain, splits.validation, splits.test):
        next(iter(batches))


def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024  # kB


load_and_draw({"source": "synthetic", "synthetic_examples": 256})  # TensorFlow and tf.data start
folder.read = read
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")  # VmHWM starts again from here
before = status("VmRSS")
load_and_draw({"source": source, "synthetic_examples": count})
images = count + (round(count * 0.1) + count // 10 if source == "synthetic" else count // 10)
print((status("VmHWM") - before) / (images * np.prod(shape)))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux's /proc only")
@pytest.mark.parametrize("source", ["synthetic", "folder"])
def test_loading_in_memory_images_peaks_within_two_and_a_half_copies(source):
    """40,000 CIFAR-sized images and their validation and test splits
    (about 150 MB): the loading and the pipelines hold them once, and a
    folder's splits are copied out of the images read, so two copies for a
    moment. Before, the peak was 3.9 copies for either."""
    result = subprocess.run([sys.executable, "-c", PEAK_COPIES, source, "40000"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    copies = float(result.stdout.split()[-1])
    print(f"{source}: peak {copies:.2f} copies of the images")
    assert copies < 2.5


def test_synthetic_images_are_those_of_one_draw_for_the_whole_split(monkeypatch):
    """Made a chunk at a time, the images are those the one-call formula drew
    (the recipes' results with synthetic data stay as they were)."""
    config = {**rdata.DEFAULTS, "synthetic_examples": 50}

    def in_one_draw(input_shape, num_classes, seed):
        rng = np.random.default_rng(seed)
        templates = rng.integers(0, 256, size=(num_classes, *input_shape), dtype=np.uint8)
        splits = []
        for n in (50, 5, 5):
            labels = rng.integers(0, num_classes, size=(n,))
            noise = rng.integers(0, 256, size=(n, *input_shape), dtype=np.uint8)
            splits.append((templates[labels] // 2 + noise // 2 + (templates[labels] & noise & 1),
                           labels))
        return splits

    monkeypatch.setattr(rdata, "SYNTHETIC_CHUNK", 8)
    for input_shape in [(28, 28, 1), (32, 32, 3), (3, 3, 1)]:
        made = rdata._synthetic_splits(config, input_shape, 10, seed=3)
        for (images, labels), (expected, expected_labels) in zip(made, in_one_draw(
                input_shape, 10, seed=3)):
            np.testing.assert_array_equal(images, expected)
            np.testing.assert_array_equal(labels, expected_labels)
            assert images.ctypes.data % rdata.ALIGNMENT == 0


def test_aligned_rows_are_the_rows_in_memory_tensorflow_can_share():
    array = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)[1:]  # 21 bytes in: unaligned
    rows = np.array([3, 0, 2])
    taken = rdata.aligned_rows(array, rows)
    np.testing.assert_array_equal(taken, array[rows])
    assert taken.ctypes.data % rdata.ALIGNMENT == 0 and taken.flags.c_contiguous


@pytest.mark.parametrize("source", ["synthetic", "folder"])
def test_batches_read_the_split_arrays_where_they_are(source, tmp_path):
    """The pipeline's tensors share the arrays' memory: its ordered batches
    are the arrays' images, scaled, in order."""
    write_folder(tmp_path, per_class=20, splits=("train",), size=(32, 32))
    config = {**rdata.DEFAULTS, **data_config(f"data.source={source}", f"data.path={tmp_path}",
                                              "data.synthetic_examples=40",
                                              "data.validation_split=0.25")}
    shape = rdata.DATASETS[config["name"]][0]
    train, validation, test, _, _ = rdata.source_splits(config, shape, 10, seed=0)
    assert all(split[0].ctypes.data % rdata.ALIGNMENT == 0 for split in (train, validation, test))
    data = rdata.load(config)
    for split, batches in [(train, data.train_plain), (validation, data.validation),
                           (test, data.test)]:
        images = np.concatenate([np.asarray(x) for x, _ in batches])
        labels = np.concatenate([np.asarray(y) for _, y in batches])
        np.testing.assert_array_equal(images, split[0].astype(np.float32) / 255.0)
        np.testing.assert_array_equal(labels, split[1])
