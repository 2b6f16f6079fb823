"""A recipe module's own YAML is checked as a user's file is."""

import shutil

import pytest

from conftest import ROOT
from recipes import UserError, _config


@pytest.fixture
def configs(tmp_path, monkeypatch):
    """A copy of configs/ that the test may edit, in the place of the real one."""
    copy = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", copy)
    monkeypatch.setattr(_config, "CONFIGS_DIR", copy)
    return copy


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_an_exponent_without_a_dot_is_a_number_in_the_modules_yaml(configs):
    edit(configs / "densenet_cifar100.yaml", "weight_decay: 1.0e-4", "weight_decay: 1e-4")
    edit(configs / "mnist_mlp.yaml", "lr: 1.0e-3", "lr: 1e-3")
    assert _config.resolve("densenet_cifar100", announce=print)["model"]["weight_decay"] == 1e-4
    assert _config.resolve("mnist_mlp", announce=print)["train"]["lr"] == 1e-3


@pytest.mark.parametrize("old, new, message", [
    ("epochs: 20", "epochs: twenty", "'train.epochs' expects an integer, got 'twenty'"),
    ("batch_size: 128", "batch_size: 0", "'data.batch_size' must be at least 1"),
])
def test_a_wrong_value_in_the_modules_yaml_is_refused_naming_the_file(configs, old, new, message):
    edit(configs / "mnist_mlp.yaml", old, new)
    with pytest.raises(UserError, match=f"{message}.* in .*mnist_mlp.yaml"):
        _config.resolve("mnist_mlp", announce=print)
