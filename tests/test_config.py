"""Config precedence, parsing and every error message, through the CLI too."""

import subprocess
import sys

import pytest

from conftest import ROOT
from keras_course_recipes import recipe_config, settings
from keras_course_recipes.errors import UserError


def resolve(*overrides, files=()):
    return recipe_config.resolve("mnist_mlp", files, overrides, announce=lambda line: None)


def test_precedence_defaults_recipe_files_command_line(tmp_path):
    first = tmp_path / "first.yaml"
    first.write_text("train:\n  epochs: 3\n  lr: 0.5\ndata:\n  batch_size: 7\n")
    second = tmp_path / "second.yaml"
    second.write_text("train:\n  epochs: 4\n")

    config = resolve("train.epochs=5", files=[first, second])

    assert config["execution"]["mode"] == "graph"  # built-in default
    assert config["model"]["hidden_units"] == [512, 512]  # recipe YAML
    assert config["data"]["batch_size"] == 7  # first extra file
    assert config["train"]["lr"] == 0.5  # first file, not overridden later
    assert config["train"]["epochs"] == 5  # command line beats both files


def test_the_train_section_is_the_recipes_own():
    assert "train" not in settings.DEFAULTS and resolve()["train"]["epochs"] == 20


def test_values_parse_as_yaml_scalars_and_lists():
    config = resolve("train.lr=1e-3", "model.hidden_units=[64,32]",
                     "callbacks.graph=true", "train.steps_per_epoch=3",
                     "data.dir=/tmp/x", "run.verbose=2")
    assert config["train"]["lr"] == pytest.approx(1e-3)
    assert config["model"]["hidden_units"] == [64, 32]
    assert config["callbacks"]["graph"] is True
    assert config["train"]["steps_per_epoch"] == 3
    assert config["data"]["dir"] == "/tmp/x"
    assert config["run"]["verbose"] == 2


def test_integer_is_accepted_where_a_number_is_expected():
    assert resolve("train.lr=1")["train"]["lr"] == 1.0


@pytest.mark.parametrize("override, message", [
    ("train.epoch=1", "Unknown config key 'train.epoch' on the command line. Did you mean train.epochs"),
    ("trian.epochs=1", "Did you mean train.epochs"),
    ("train.epochs=abc", "'train.epochs' expects an integer, got 'abc'"),
    ("train.epochs=2.5", "'train.epochs' expects an integer"),
    ("train.epochs=true", "'train.epochs' expects an integer"),
    ("callbacks.graph=yes please", "'callbacks.graph' expects true/false"),
    ("execution.mode=fast", "'execution.mode' must be one of eager, graph, xla; got 'fast'"),
    ("execution.precision=float16", "must be one of float32, mixed_float16, mixed_bfloat16"),
    ("data.source=web", "must be one of tfds, synthetic, folder"),
    ("train.epochs", "Expected key=value, got 'train.epochs'"),
    ("train.epochs=null", "'train.epochs' expects an integer, got None"),
    # What a shell leaves of data.augment=[{"pad_crop":{"padding":4}}] unquoted.
    ("data.augment=[flip,{pad_crop:{padding:4}}]",
     "'padding:4' needs a space after the colon: write 'padding: 4'"),
])
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(UserError, match=None) as error:
        resolve(override)
    assert message in str(error.value)


def test_unknown_key_in_a_config_file_names_the_file(tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("train:\n  epoch: 1\n")
    with pytest.raises(UserError) as error:
        resolve(files=[extra])
    assert f"'train.epoch' in {extra}" in str(error.value)


def test_missing_or_malformed_config_file(tmp_path):
    with pytest.raises(UserError, match="Config file not found"):
        resolve(files=[tmp_path / "missing.yaml"])
    with pytest.raises(UserError, match=f"^{tmp_path} is a folder, not a YAML config file"):
        resolve(files=[tmp_path])
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: [unclosed\n")
    with pytest.raises(UserError, match="is not valid YAML") as error:
        resolve(files=[broken])
    assert "\n" not in str(error.value) and "at line 2" in str(error.value)  # one line, and where


def test_unknown_recipe_lists_the_closest_and_all():
    with pytest.raises(UserError) as error:
        recipe_config.resolve("mnist_mpl")
    assert "Unknown recipe 'mnist_mpl'. Did you mean mnist_mlp," in str(error.value)
    assert "cifar10_cnn" in str(error.value)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "keras_course_recipes", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_errors_are_one_message_and_exit_2():
    for args, message in [
        (["run", "nope"], "Unknown recipe 'nope'"),
        (["run", "mnist_mlp", "train.epoch=1"], "Unknown config key 'train.epoch'"),
        (["show", "mnist_mlp", "--config", "missing.yaml"], "Config file not found"),
    ]:
        result = cli(*args)
        assert result.returncode == 2, result
        assert message in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_show_prints_the_resolved_config():
    result = cli("show", "mnist_mlp", "train.epochs=3")
    assert result.returncode == 0, result.stderr
    import yaml

    shown = yaml.safe_load(result.stdout)
    assert shown["train"]["epochs"] == 3
    assert set(shown) == {"recipe", "data", "model", "train", "execution", "callbacks", "run"}
    assert shown["recipe"] == "mnist_mlp"


@pytest.mark.slow
def test_cli_list_names_every_recipe_with_a_description():
    result = cli("list")
    assert result.returncode == 0
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines())
    from keras_course_recipes import names

    assert sorted(lines) == names()
    assert all(description.strip() for description in lines.values())


def test_a_literal_read_from_a_file_follows_edits_and_is_the_callers_own(tmp_path):
    """`settings.module_literal` parses a file once per version of it: an
    edit is read again, and a caller may change what it got."""
    from keras_course_recipes import settings

    path = tmp_path / "recipe.py"
    path.write_text("CONFIG = {'train': {'epochs': 1}}\n")
    first = settings.module_literal(path, "CONFIG")
    first["train"]["epochs"] = 99
    assert settings.module_literal(path, "CONFIG") == {"train": {"epochs": 1}}
    path.write_text("CONFIG = {'train': {'epochs': 2, 'lr': 0.1}}\n")
    assert settings.module_literal(path, "CONFIG") == {"train": {"epochs": 2, "lr": 0.1}}


def test_a_yaml_recipe_added_or_edited_is_seen_at_once(tmp_path, monkeypatch):
    import keras_course_recipes as kit
    monkeypatch.setattr(kit, "CONFIGS_DIR", tmp_path)
    assert "mine" not in kit.names()
    (tmp_path / "mine.yaml").write_text("recipe: mnist_mlp\n")
    assert kit.module_of("mine") == "mnist_mlp"
    (tmp_path / "mine.yaml").write_text("recipe: cifar10_cnn  # now\n")
    assert kit.module_of("mine") == "cifar10_cnn"
