"""A recipe module's own CONFIG is checked as a user's file is, and read
without importing the module."""

import shutil

import pytest

from conftest import ROOT
from recipes import UserError, _config


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A copy of recipes/ that the test may edit, in the place of the real one."""
    copy = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", copy)
    monkeypatch.setattr(_config, "PACKAGE_DIR", copy)
    return copy


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("old, new, message", [
    ('"epochs": 20,', '"epochs": "twenty",', "'train.epochs' expects an integer, got 'twenty'"),
    ('"batch_size": 128,', '"batch_size": 0,', "'data.batch_size' must be at least 1"),
    ('"dropout": 0.2,', '"dropout": 1.5,', "'model.dropout' must be at least 0 and below 1"),
])
def test_a_wrong_value_in_a_modules_config_is_refused_naming_the_file(package, old, new, message):
    edit(package / "mnist_mlp.py", old, new)
    with pytest.raises(UserError, match=f"{message}.* in .*mnist_mlp.py's CONFIG"):
        _config.resolve("mnist_mlp", announce=print)


def test_a_config_that_is_not_a_literal_is_refused(package):
    edit(package / "mnist_mlp.py", '"dropout": 0.2,', '"dropout": 0.1 * 2,')
    with pytest.raises(ValueError, match="malformed node"):
        _config.resolve("mnist_mlp", announce=print)
