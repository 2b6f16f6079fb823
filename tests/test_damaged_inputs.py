"""Damaged or changed files a run reads are repaired, said so in one line, or
refused in one line before anything is written: never a traceback."""

import numpy as np
import pytest

from recipes import _data

from test_data import write_folder


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_folder_cache_is_decoded_again_and_said_so(damage, tmp_path, capsys):
    write_folder(tmp_path, splits=("train",))
    images, labels, classes = _data._folder_arrays(tmp_path / "train", (32, 32, 3))
    cache = tmp_path / ".cache" / "train-32x32x3.npz"
    whole = cache.read_bytes()
    cache.write_bytes(whole[:len(whole) // 2] if damage == "truncate" else b"\0" * len(whole))
    capsys.readouterr()

    again = _data._folder_arrays(tmp_path / "train", (32, 32, 3))

    out = capsys.readouterr().out
    assert f"{cache} is damaged" in out and "decoding the 12 images" in out
    np.testing.assert_array_equal(again[0], images)
    assert again[2] == classes and cache.read_bytes() != b"\0" * len(whole)
