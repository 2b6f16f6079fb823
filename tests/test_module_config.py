"""CONFIG is Python: whatever a student writes there trains with its value, from
a recipe file (`runs.main`) and from `python -m keras_course_recipes` (`recipe_config.resolve`);
a misspelt key or a value of the wrong type is still one line."""

import json
import shutil
import sys

import pytest

from conftest import ROOT
from keras_course_recipes import recipe_config, runs
from keras_course_recipes.errors import UserError
from keras_course_recipes import __main__ as cli


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A copy of recipes/ that the test may edit, in the place of the real one."""
    copy = tmp_path / "recipes"
    shutil.copytree(ROOT / "recipes", copy)
    monkeypatch.setattr(recipe_config, "RECIPES_DIR", copy)
    return copy


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, message", [
    ('"epochs": 20,', '"epochs": "twenty",', "'train.epochs' expects an integer, got 'twenty'"),
    ('"batch_size": 128,', '"batch_size": 0,', "'data.batch_size' must be at least 1"),
    ('"dropout": 0.2,', '"dropout": 1.5,', "'model.dropout' must be at least 0 and below 1"),
])
def test_a_wrong_value_in_a_modules_config_is_refused_naming_the_file(package, old, new, message):
    edit(package / "mnist_mlp.py", old, new)
    with pytest.raises(UserError, match=f"{message}.* in .*mnist_mlp.py's CONFIG"):
        recipe_config.resolve("mnist_mlp", announce=print)


@pytest.mark.parametrize("old, new, key, value", [
    ('"dropout": 0.2,', '"dropout": 0.1 * 2,', "dropout", pytest.approx(0.2)),
    ('"hidden_units": [512, 512],', '"hidden_units": [64 * 2 for _ in range(3)],',
     "hidden_units", [128, 128, 128]),
    ('CONFIG_SCHEMA = {', 'CONFIG["model"]["dropout"] = 0.4\nCONFIG_SCHEMA = {', "dropout", 0.4),
])
def test_a_modules_config_written_as_python_resolves_to_its_value(package, old, new, key, value):
    """Not a literal: the module's own CONFIG, Keras started first on the backend asked for."""
    edit(package / "mnist_mlp.py", old, new)
    assert recipe_config.resolve("mnist_mlp", announce=print)["model"][key] == value


def test_a_backend_written_as_an_expression_is_one_line_saying_what_to_write(package):
    """`execution.backend` is read before Keras loads: from the file's text."""
    edit(package / "mnist_mlp.py", '"seed": 0,', '"seed": 0, "backend": "tensor" + "flow",')
    with pytest.raises(UserError, match=r"line \d+: CONFIG's execution.backend is read before "
                                        "Keras loads.*plain value"):
        recipe_config.resolve("mnist_mlp", announce=print)


def student_file(tmp_path, *edits, module="mnist_mlp"):
    """The namespace of `module`'s file, copied and edited (each `(old, new)` of
    `edits`) as a student would, then run as a module."""
    path = tmp_path / f"{module}.py"
    path.write_text((ROOT / "recipes" / f"{module}.py").read_text())
    for old, new in edits:
        edit(path, old, new)
    namespace = {"__name__": "student", "__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace


class Built(Exception):
    """What the stand-in `run` raises once it has built the experiment."""


def main(namespace, monkeypatch, *overrides):
    """`runs.main` as the file's last line calls it, with `run` building the
    experiment (every key `build` reads is read) and training nothing."""
    monkeypatch.setattr(sys, "argv", ["mnist_mlp.py", "data.source=synthetic", *overrides])
    built = {}

    def run(config, run):  # the recipe's contract: the config and the kit's RecipeRun
        built["config"] = config
        namespace["build"](config)
        raise Built  # a bug to runs.main: re-raised, as it is

    with pytest.raises(Built):
        runs.main("mnist_mlp", namespace["CONFIG"], run, namespace.get("CONFIG_SCHEMA"))
    return built["config"]


@pytest.mark.parametrize("edits, key, value", [
    ([('"lr": 1.0e-3,', '"lr": 1.0e-3 * 2,')], "train.lr", pytest.approx(2e-3)),
    ([("CONFIG = {", "LR = 3e-3\nCONFIG = {"), ('"lr": 1.0e-3,', '"lr": LR,')],
     "train.lr", pytest.approx(3e-3)),
    ([('"hidden_units": [512, 512],', '"hidden_units": [2 ** 5 for _ in range(3)],')],
     "model.hidden_units", [32, 32, 32]),
    ([('"dropout": 0.2,', '"dropout": float("0.3"),')], "model.dropout", pytest.approx(0.3)),
    ([('"name": "mnist",', '**dict(name="mnist"),'), ('"batch_size": 128,', '"batch_size": 2 ** 6,')],
     "data.batch_size", 64),
])
def test_a_recipe_files_config_written_as_python_trains_with_its_value(
        edits, key, value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    section, name = key.split(".")
    assert main(student_file(tmp_path, *edits), monkeypatch)[section][name] == value
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("old, new, overrides, message", [
    ('"epochs": 20,', '"epochs": "2",', (), "'train.epochs' expects an integer, got '2'"),
    ('"hidden_units": [512, 512],', '"hidden_units": 512,', (),
     "'model.hidden_units' expects a list, got 512"),
    ('"dropout": 0.2,', '"dropout": 0.2, "droput": 0.5,', (),
     "'model.dropout' and 'model.droput' are both set in CONFIG"),
    ('"epochs": 20,', '"epoch": 20,', (),
     "reads the config key 'train.epochs', which its settings lack (they have 'train.epoch')"),
    ('        "steps_per_epoch": None,  # None: one pass over the training images\n', '', (),
     "reads the config key 'train.steps_per_epoch'"),
    ('"seed": 0,', '"seed": 0, "backend": "jax",', (),
     "execution.backend in CONFIG: a recipe file trains on the backend Keras loaded"),
    (None, None, ("execution.backend=jax",), "run KERAS_BACKEND=jax python mnist_mlp.py"),
])
def test_a_students_edit_that_cannot_train_is_one_line(old, new, overrides, message, tmp_path,
                                                        monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = student_file(tmp_path, *([(old, new)] if old else []))
    with pytest.raises(SystemExit) as exit_:
        main(namespace, monkeypatch, *overrides)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1 and not list(tmp_path.glob("runs/*/*"))


def test_a_key_a_later_cell_misspells_is_refused(tmp_path, monkeypatch, capsys):
    """A notebook's `CONFIG["train"]["epoch"] = 1` after the CONFIG cell."""
    monkeypatch.chdir(tmp_path)
    namespace = student_file(tmp_path)
    namespace["CONFIG"]["train"]["epoch"] = 1
    with pytest.raises(SystemExit):
        main(namespace, monkeypatch)
    assert "'train.epoch' and 'train.epochs' are both set" in capsys.readouterr().err


def test_the_backend_keras_runs_on_may_be_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = student_file(tmp_path, ('"seed": 0,', '"seed": 0, "backend": "tensorflow",'))
    config = main(namespace, monkeypatch, "execution.backend=tensorflow")
    assert config["execution"]["backend"] == namespace["CONFIG"]["execution"]["backend"]


def written(run_dir):
    """The files a run wrote, by path (TensorBoard's event files by folder: their names
    hold the time and the process), and metrics.json's keys."""
    paths = {str(path.relative_to(run_dir).parent if "tfevents" in path.name else
                 path.relative_to(run_dir)) for path in run_dir.rglob("*") if path.is_file()}
    return paths, sorted(json.loads((run_dir / "metrics.json").read_text()))


@pytest.mark.slow  # trains twice
def test_a_recipe_file_and_the_command_line_write_the_same_files(tmp_path, monkeypatch, capsys):
    """One way a run happens: `python mnist_mlp.py` and `recipes run mnist_mlp` differ
    only in where the settings come from."""
    monkeypatch.chdir(tmp_path)
    tiny = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
            "train.epochs=2", "train.steps_per_epoch=2", "run.verbose=0"]
    namespace = student_file(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mnist_mlp.py", *tiny, f"run.dir={tmp_path / 'file'}"])
    experiment = runs.main("mnist_mlp", namespace["CONFIG"], namespace["run"],
                           namespace["CONFIG_SCHEMA"])
    assert cli.main(["run", "mnist_mlp", *tiny, f"run.dir={tmp_path / 'command'}"]) == 0
    from_file, from_command = written(tmp_path / "file"), written(tmp_path / "command")
    assert from_file == from_command
    assert {"metrics.json", "config.yaml", "history.csv", "checkpoints/best.keras",
            "checkpoints/last.keras", "tensorboard/train"} <= from_file[0]
    assert experiment.metrics["mode_used"] == "graph" and experiment.test == {
        key: pytest.approx(value) for key, value in experiment.metrics["test"].items()}
