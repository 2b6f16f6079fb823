"""The decoded folder cache stays whole when two processes decode one folder at once."""

import numpy as np

from recipes import _folder
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
            _folder.arrays(tmp_path / "train", (32, 32, 3))

    monkeypatch.setattr(np, "savez", save_while_another_decodes)
    images, labels, classes = _folder.arrays(tmp_path / "train", (32, 32, 3))

    assert interleaved
    assert capsys.readouterr().out.count("; cached in") == 2
    cache = tmp_path / ".cache"
    assert [path.name for path in cache.iterdir()] == ["train-32x32x3.npz"]
    with np.load(cache / "train-32x32x3.npz") as cached:
        np.testing.assert_array_equal(cached["images"], images)
        assert list(cached["classes"]) == classes
