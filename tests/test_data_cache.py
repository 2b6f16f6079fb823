"""The decoded folder cache: whole when two processes decode one folder at
once, and the same arrays whichever decoder, TensorFlow or PIL, wrote it."""

import numpy as np
import pytest
from PIL import Image

from keras_course_recipes.errors import UserError
from keras_course_recipes import folder as rfolder
from test_data import write_folder


def test_two_decoders_of_one_folder_each_write_their_own_temporary_file(
        tmp_path, monkeypatch, capsys):
    """A second decoder runs its whole decode while the first is still
    writing: each writes its own file, and both caches are complete."""
    write_folder(tmp_path, splits=("train",))
    save = np.savez
    interleaved = []

    def save_while_another_decodes(file, **arrays):
        save(file, **arrays)
        if not interleaved:
            interleaved.append(True)
            rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))

    monkeypatch.setattr(np, "savez", save_while_another_decodes)
    images, labels, classes = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))

    assert interleaved
    assert capsys.readouterr().out.count("; cached in") == 2
    cache = tmp_path / ".cache"
    assert [path.name for path in cache.iterdir()] == ["train-32x32x3.npz"]
    with np.load(cache / "train-32x32x3.npz") as cached:
        np.testing.assert_array_equal(cached["images"], images)
        assert list(cached["classes"]) == classes


def write_mixed_folder(root):
    """`root/train/<class>/`: PNGs and JPEGs written by PIL, colour and grey,
    at 32x32 and at sizes that are resized up and down."""
    rng = np.random.default_rng(0)
    files = {"a": [("png", (32, 32, 3)), ("jpg", (32, 32, 3)), ("png", (32, 32))],
             "b": [("jpg", (40, 50, 3)), ("png", (20, 24, 3)), ("jpg", (40, 50, 3))]}
    for name, images in files.items():
        (root / "train" / name).mkdir(parents=True)
        for index, (suffix, shape) in enumerate(images):
            pixels = rng.integers(0, 256, size=shape, dtype=np.uint8)
            Image.fromarray(pixels).save(root / "train" / name / f"{index}.{suffix}",
                                         quality=90)
    return sorted((root / "train").glob("*/*"))


def test_tensorflow_and_pil_decode_the_same_arrays(tmp_path):
    """PNG and JPEG, colour and grey, resized up, down or not: a cache
    either decoder writes holds what the other would have decoded. (Here
    Keras runs on TensorFlow, so PIL's resize is TensorFlow's;
    tests/test_jax_backend.py compares JAX's.)"""
    files = write_mixed_folder(tmp_path)
    by_tensorflow = rfolder._decode_with_tensorflow(files, (32, 32, 3))
    np.testing.assert_array_equal(rfolder._decode_with_pil(files, (32, 32, 3)), by_tensorflow)
    grey = [path for path in files if Image.open(path).mode == "L"]
    np.testing.assert_array_equal(rfolder._decode_with_pil(grey, (28, 28, 1)),
                                  rfolder._decode_with_tensorflow(grey, (28, 28, 1)))


def test_colour_read_into_one_channel_is_the_one_difference(tmp_path):
    """Each decoder turns colour into grey its own way: PNGs differ by at most
    one unit, JPEGs more (libjpeg's grey is its luma channel, PIL's is
    computed from the decoded RGB); docs/backends.md says so."""
    files = write_mixed_folder(tmp_path)
    for suffix, most in ((".png", 1), (".jpg", 255)):
        colour = [path for path in files if path.suffix == suffix
                  and Image.open(path).mode == "RGB" and Image.open(path).size == (32, 32)]
        difference = np.abs(rfolder._decode_with_pil(colour, (32, 32, 1)).astype(int)
                            - rfolder._decode_with_tensorflow(colour, (32, 32, 1)))
        assert 0 < difference.max() <= most


def test_the_cache_says_which_decoder_wrote_it_and_either_reads_it(
        tmp_path, monkeypatch, capsys):
    write_mixed_folder(tmp_path)
    monkeypatch.setattr(rfolder, "HAS_TENSORFLOW", False)
    by_pil, labels, classes = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    assert "with PIL" in capsys.readouterr().out
    monkeypatch.setattr(rfolder, "HAS_TENSORFLOW", True)
    read, _, _ = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    out = capsys.readouterr().out
    assert "(decoded by PIL)" in out and "decoding" not in out
    np.testing.assert_array_equal(read, by_pil)
    assert (labels.tolist(), classes) == ([0, 0, 0, 1, 1, 1], ["a", "b"])


def test_a_file_pil_cannot_decode_is_named(tmp_path):
    files = write_mixed_folder(tmp_path)
    files[1].write_bytes(b"not an image")
    with pytest.raises(UserError, match=f"{files[1]} is not an image PIL can decode"):
        rfolder._decode_with_pil(files, (32, 32, 3))
