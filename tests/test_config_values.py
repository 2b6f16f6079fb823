"""What a student may put in CONFIG, or around a recipe file, and still get one
line: None where a value is needed, a CONFIG that is not a dict, NumPy numbers
(which are numbers), a key a later `CONFIG.update` dropped, a file that hides a
package the recipe imports, and a backend that only KERAS_BACKEND asked for."""

import subprocess
import sys
import types

import numpy as np
import pytest
import yaml

from conftest import ROOT
from keras_course_recipes import recipe_config, runs
from keras_course_recipes.errors import UserError
from keras_course_recipes import __main__ as cli
from keras_course_recipes.tools import compare as _compare

TINY = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
        "train.epochs=1", "train.steps_per_epoch=2", "run.verbose=0"]


def mnist_config(**changes):
    """mnist_mlp's CONFIG, each `section={key: value}` of `changes` updated into it."""
    config = recipe_config.recipe_values("mnist_mlp")[0]
    for section, values in changes.items():
        config.setdefault(section, {}).update(values)
    return config


def settle(config, *overrides, declared=()):
    """`config` settled as mnist_mlp's, with its file's CONFIG_SCHEMA."""
    return recipe_config.settle("mnist_mlp", config, recipe_config.recipe_schema("mnist_mlp"),
                          overrides=overrides, announce=lambda line: None, declared=declared)


def student_file(tmp_path, after_config=""):
    """mnist_mlp's file copied, `after_config` (code) put after its CONFIG, run as
    a module: the namespace a recipe file gives `runs.main`."""
    text = (ROOT / "recipes" / "mnist_mlp.py").read_text()
    text = text.replace("\nCONFIG_SCHEMA = ", f"\n{after_config}\nCONFIG_SCHEMA = ", 1)
    path = tmp_path / "mnist_mlp.py"
    path.write_text(text)
    namespace = {"__name__": "student", "__file__": str(path)}
    exec(compile(text, str(path), "exec"), namespace)
    return namespace


def refused(namespace, monkeypatch, capsys, *overrides, kernel=False):
    """The line `runs.main` prints for `namespace`'s CONFIG, run as its file (exit
    status 2) or, with `kernel`, in a notebook's cell (no exit, no `__file__`)."""
    monkeypatch.setattr(sys, "argv", ["mnist_mlp.py", "data.source=synthetic", *overrides])
    run = lambda *args, **kwargs: pytest.fail("trained")  # noqa: E731
    namespace = {**namespace, "run": run}  # the file's last line, in the file's globals
    if kernel:
        monkeypatch.setitem(sys.modules, "IPython",
                            types.SimpleNamespace(get_ipython=lambda: object()))
        namespace.pop("__file__")
        assert eval('runs.main("mnist_mlp", CONFIG, run, CONFIG_SCHEMA)', namespace) is None
    else:
        with pytest.raises(SystemExit) as exit_:
            eval('runs.main("mnist_mlp", CONFIG, run, CONFIG_SCHEMA)', namespace)
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# ## None where a value is needed

@pytest.mark.parametrize("kernel", [False, True], ids=["file", "notebook cell"])
@pytest.mark.parametrize("edit, key", [
    ('CONFIG["model"]["hidden_units"] = None', "model.hidden_units"),
    ('CONFIG["train"]["lr"] = None', "train.lr"),
    ('CONFIG["train"]["optimizer"] = None', "train.optimizer"),
    ('CONFIG["execution"]["seed"] = None', "execution.seed"),
])
def test_none_where_a_value_is_needed_is_one_line_naming_the_key(edit, key, kernel, tmp_path,
                                                                 monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = refused(student_file(tmp_path, edit), monkeypatch, capsys, kernel=kernel)
    assert f"Config key '{key}'" in err and "None" in err, err


def test_none_in_a_modules_config_is_refused_by_the_command_line_too():
    with pytest.raises(UserError, match="Config key 'model.hidden_units' expects a list, got "
                                        "None in CONFIG"):
        settle(mnist_config(model={"hidden_units": None}))


def test_a_key_the_recipe_declares_nullable_still_takes_none():
    """CONFIG_SCHEMA's "None: the variant's", and train.steps_per_epoch's one pass,
    also on the command line after CONFIG gave a number."""
    depth = recipe_config.resolve("densenet_cifar100", announce=lambda line: None)["model"]["depth"]
    assert depth is None
    config = settle(mnist_config(train={"steps_per_epoch": 2}), "train.steps_per_epoch=null")
    assert config["train"]["steps_per_epoch"] is None


def test_a_key_of_the_students_own_may_be_none_and_set_later():
    config = settle(mnist_config(model={"note": None}), "model.note=3")
    assert config["model"]["note"] == 3


@pytest.mark.parametrize("kernel", [False, True], ids=["file", "notebook cell"])
@pytest.mark.parametrize("edit, message", [
    ("CONFIG = None", "CONFIG must be a dict of sections"),
    ("CONFIG = [1, 2]", "CONFIG must be a dict of sections"),
    ('CONFIG["train"] = None', "CONFIG's 'train' section must be a dict of keys, got None"),
])
def test_a_config_that_is_not_a_dict_is_one_line(edit, message, kernel, tmp_path, monkeypatch,
                                                 capsys):
    monkeypatch.chdir(tmp_path)
    err = refused(student_file(tmp_path, edit), monkeypatch, capsys, kernel=kernel)
    assert message in err, err


def test_a_modules_config_of_none_is_one_line_on_the_command_line(tmp_path, monkeypatch):
    package = tmp_path / "recipes"
    package.mkdir()
    text = (ROOT / "recipes" / "mnist_mlp.py").read_text()
    (package / "mnist_mlp.py").write_text(text.replace("\nCONFIG = {", "\nCONFIG = None\n_ = {", 1))
    monkeypatch.setattr(recipe_config, "RECIPES_DIR", package)
    with pytest.raises(UserError, match="CONFIG must be a dict of sections .*, got None"):
        recipe_config.resolve("mnist_mlp", announce=lambda line: None)


# ## NumPy numbers are numbers

def test_numpy_numbers_in_config_train_as_plain_python_numbers():
    config = settle(mnist_config(train={"lr": np.float32(1e-3), "epochs": np.int64(3)},
                                  model={"hidden_units": list(np.array([32, 16])),
                                         "dropout": np.float64(0.25)}))
    assert config["train"]["lr"] == 0.001 and type(config["train"]["lr"]) is float
    assert config["train"]["epochs"] == 3 and type(config["train"]["epochs"]) is int
    assert config["model"]["hidden_units"] == [32, 16]
    assert all(type(units) is int for units in config["model"]["hidden_units"])
    assert type(config["model"]["dropout"]) is float
    # config.yaml: plain YAML numbers, which yaml.safe_load reads back
    assert yaml.safe_load(recipe_config.dump(config))["train"] == {**config["train"]}


def test_a_numpy_number_out_of_range_is_still_refused():
    with pytest.raises(UserError, match="'train.epochs' must be at least 1, got 0"):
        settle(mnist_config(train={"epochs": np.int64(0)}))


# ## A key a later change to CONFIG dropped

def test_a_key_config_update_dropped_is_said_missing_from_config_not_unknown(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace = student_file(tmp_path, 'CONFIG.update({"train": {"epochs": 1}})')
    err = refused(namespace, monkeypatch, capsys, "train.steps_per_epoch=2")
    assert "'train.steps_per_epoch'" in err and "CONFIG lacks it" in err, err
    assert "Unknown" not in err
    # A misspelling is still one
    err = refused(namespace, monkeypatch, capsys, "train.stepz=2")
    assert "Unknown config key 'train.stepz'" in err


def test_a_key_the_file_declares_and_config_lacks_names_config(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text('CONFIG = {"train": {"epochs": 2, "lr": 1e-3 * 2}, "model": {}}\n'
                    'CONFIG.update({"train": {"epochs": 1}})\n')
    from keras_course_recipes import settings

    assert settings.written_keys(path, "CONFIG") == {"train.epochs", "train.lr"}
    config = mnist_config()
    config["train"] = {"epochs": 1}
    with pytest.raises(UserError, match="'train.lr' on the command line: CONFIG lacks it"):
        settle(config, "train.lr=0.1", declared=settings.written_keys(path, "CONFIG"))


def test_reading_a_key_config_lacks_does_not_advise_the_command_line(tmp_path, monkeypatch,
                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    namespace = student_file(tmp_path, 'del CONFIG["train"]["steps_per_epoch"]')
    monkeypatch.setattr(sys, "argv", ["mnist_mlp.py", "data.source=synthetic"])

    def run(config, run):  # a recipe's contract: the config and the kit's RecipeRun
        namespace["build"](config, run)

    with pytest.raises(SystemExit):
        runs.main("mnist_mlp", namespace["CONFIG"], run, namespace["CONFIG_SCHEMA"])
    err = capsys.readouterr().err
    assert "put it back in CONFIG" in err and "=VALUE" not in err, err


# ## A file that hides a package

def test_a_file_beside_the_recipe_that_hides_a_package_is_named(tmp_path, monkeypatch):
    (tmp_path / "yaml.py").write_text("x = 1\n")
    fake = types.ModuleType("yaml")
    fake.__file__ = str(tmp_path / "yaml.py")
    monkeypatch.setitem(sys.modules, "yaml", fake)
    monkeypatch.chdir(tmp_path)
    assert runs.hidden_package([tmp_path]) == "./yaml.py hides the yaml package: rename it."
    assert runs.hidden_package([tmp_path / "elsewhere"]) is None
    monkeypatch.delitem(sys.modules, "yaml")
    monkeypatch.syspath_prepend(str(tmp_path))  # not imported yet: where it would be found
    assert runs.hidden_package([tmp_path], names=["yaml"]).startswith("./yaml.py hides")


def test_a_notebook_beside_a_file_that_hides_a_package_gets_its_line(tmp_path, monkeypatch,
                                                                      capsys):
    namespace = student_file(tmp_path)
    (tmp_path / "yaml.py").write_text("x = 1\n")
    fake = types.ModuleType("yaml")
    fake.__file__ = str(tmp_path / "yaml.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "yaml", fake)
    err = refused(namespace, monkeypatch, capsys, kernel=True)
    assert err == "error: ./yaml.py hides the yaml package: rename it.\n"


@pytest.mark.slow  # starts a process per file (none loads TensorFlow)
@pytest.mark.parametrize("module", ["keras", "yaml", "numpy", "keras_course_recipes"])
def test_a_recipe_file_beside_a_file_that_hides_a_package_says_so(module, tmp_path):
    (tmp_path / "mnist_mlp.py").write_text((ROOT / "recipes" / "mnist_mlp.py").read_text())
    (tmp_path / f"{module}.py").write_text("x = 1\n")
    result = subprocess.run([sys.executable, "mnist_mlp.py", *TINY], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"{module}.py hides the {module} package: rename it" \
        in line, result.stderr


@pytest.mark.slow  # starts a process
def test_the_command_line_in_a_folder_with_a_file_that_hides_a_package_says_so(tmp_path):
    (tmp_path / "keras.py").write_text("x = 1\n")
    result = subprocess.run([sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp",
                             *TINY, f"run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and result.stderr == (
        "error: ./keras.py hides the keras package: rename it.\n"), result.stderr


# ## KERAS_BACKEND

def test_a_tensorflow_only_recipe_on_keras_backend_names_the_variable(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    with pytest.raises(UserError) as error:
        recipe_config.resolve("graph_lessons", announce=lambda line: None)
    assert str(error.value).startswith("KERAS_BACKEND=jax (the environment variable) cannot run "
                                       "the tf.function lessons")
    assert "execution.backend=jax" not in str(error.value)


def test_a_recipe_file_on_keras_backend_names_the_variable(monkeypatch):
    """`KERAS_BACKEND=jax python graph_lessons.py`: the backend Keras loaded, as runs.main
    settles it."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    config = recipe_config.recipe_values("graph_lessons")[0]
    with pytest.raises(UserError) as error:
        recipe_config.settle("graph_lessons", config, layers=[(
            "by the backend Keras loaded", {"execution": {"backend": "jax"}})],
            only="the tf.function lessons", backend_setting=runs._backend_setting("jax"))
    assert str(error.value) == (
        "KERAS_BACKEND=jax (the environment variable) cannot run the tf.function lessons: it is "
        "TensorFlow's. Run it without KERAS_BACKEND=jax (TensorFlow is the default).")


def test_compare_says_keras_backend_goes_unused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.chdir(tmp_path)
    measured = []

    def measure_mode(name, mode, *job):
        measured.append(mode)
        raise UserError("measured")

    monkeypatch.setattr(_compare, "measure_mode", measure_mode)
    # graph_lessons runs on TensorFlow only: compare measures it, KERAS_BACKEND aside
    with pytest.raises(UserError, match="measured"):
        cli.main(["compare", "graph_lessons", "modes=eager,graph", "steps=2", *TINY])
    assert measured == ["eager"]
    assert ("note: compare does not use KERAS_BACKEND=jax: each mode names its backend"
            in capsys.readouterr().out)


# ## show checks what run checks

def test_show_refuses_a_data_name_run_refuses(capsys):
    with pytest.raises(UserError, match="Unknown data.name 'mnîst'. Known datasets: mnist, "
                                        ".* Did you mean 'mnist'"):
        cli.main(["show", "mnist_mlp", "data.name=mnîst"])
    assert capsys.readouterr().out == ""
