"""A recipe leaves the repository: where the kit is installed, its file alone
trains; where it is not, the file says in one line what to install; and
`python -m keras_course_recipes copy` copies it with the kit's files it imports, where it
trains on its own, through the same checks, run directory, lock and resume
as `python -m keras_course_recipes run` (keras_course_recipes/runs.py). What it shows is true: every
Keras call a student would copy is in the recipe's own body."""

import ast
import re
import shutil
import subprocess
import sys

import pytest

import keras_course_recipes as kit
from conftest import ROOT, TINY_MODEL
from keras_course_recipes import rundir, runs, settings
from keras_course_recipes.tools.copy import kit_files
from keras_course_recipes.errors import UserError


def copy_list(module):
    """The paths, in a copy, of the kit's files that recipe `module` imports."""
    return list(kit_files(ROOT / "recipes" / f"{module}.py"))


PACKAGE = "keras_course_recipes"
# The run's path, the same as `recipes run`'s (harness.py), with the callbacks every run adds;
# not those a setting asks for (callbacks.graph, callbacks.diagnostics), loaded by name.
KIT = [f"{PACKAGE}/{path}" for path in (
    "__init__.py", "_distribute.py", "callbacks/__init__.py", "callbacks/best_checkpoint.py",
    "callbacks/execution_mode_check.py", "callbacks/run_estimate.py", "callbacks/timing.py",
    "data.py", "errors.py", "harness.py", "history_csv.py", "machine.py", "models/__init__.py",
    "process.py", "recipe_config.py", "rundir.py", "runs.py", "settings.py")]


@pytest.mark.parametrize("module, model, augments", [
    ("mnist_mlp", "models/mlp.py", False), ("cifar10_cnn", "models/simple_cnn.py", True),
    ("densenet_cifar10_cpu", "models/densenet_whitened.py", True)])
def test_the_copy_holds_what_the_recipe_imports_and_what_that_imports(module, model, augments):
    """keras_course_recipes/folder.py, which data.py loads by name for a folder, and the
    callbacks the harness loads by name where a setting asks for them, are left out;
    the builders and callbacks go where the package has them, not where the
    repository keeps them."""
    augmenting = [f"{PACKAGE}/augment.py"] if augments else []
    assert copy_list(module) == sorted([*KIT, f"{PACKAGE}/{model}", *augmenting])
    assert kit_files(ROOT / "recipes" / f"{module}.py")[f"{PACKAGE}/{model}"] == ROOT / model


def test_a_callback_a_copy_lacks_is_one_line_naming_the_setting_and_the_file():
    """What `recipes copy` leaves out (tools/copy.py's OPTIONAL), the harness loads by
    name, and a copy without it says what to copy."""
    from keras_course_recipes import harness
    from keras_course_recipes.tools.copy import OPTIONAL

    assert harness.asked_callback("graph_writer", "callbacks.graph").GraphWriter
    with pytest.raises(UserError) as refused:
        harness.asked_callback("absent_writer", "callbacks.graph")
    assert str(refused.value) == (
        "callbacks.graph=true writes with keras_course_recipes/callbacks/absent_writer.py: copy "
        "it from the repository beside keras_course_recipes/callbacks/timing.py.")
    assert not set(OPTIONAL) & set(copy_list("mnist_mlp"))
    assert all((ROOT / path.removeprefix(f"{PACKAGE}/")).is_file() or (ROOT / path).is_file()
               for path in OPTIONAL)


def copied(module, folder):
    """`module`'s recipe and the kit's files it imports, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "recipes" / f"{module}.py", folder / f"{module}.py")
    for path, source in kit_files(ROOT / "recipes" / f"{module}.py").items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / path)
    return folder


TINY_COPY = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
             "train.epochs=1", "train.steps_per_epoch=2"]


def run_copy(python, folder, module, *overrides):
    """`python module.py overrides` in `folder`, as a student runs a recipe."""
    return subprocess.run([str(python), f"{module}.py", *overrides], cwd=folder,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("module", kit.MODULES)
def test_a_copied_recipe_trains_on_its_own(module, tmp_path, fresh_pythons):
    """Where the kit is not installed: the files `copy` gives."""
    folder = copied(module, tmp_path / "my_project")
    assert not str(folder).startswith(str(ROOT))
    result = run_copy(fresh_pythons.bare, folder, module, *TINY_COPY, *TINY_MODEL.get(module, []))
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = (folder / "runs" / module).iterdir()
    assert (run_dir / "checkpoints" / "last.keras").is_file()
    assert list((run_dir / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert (run_dir / "history.csv").read_text().count("\n") == 2  # header, one epoch
    assert rundir.read_config(run_dir)["recipe"] == module
    assert re.search(r"^timing: mode graph, [\d.]+ ms/step", result.stdout, re.M), result.stdout
    assert "test:" in result.stdout


@pytest.mark.slow
def test_where_the_kit_is_installed_the_recipe_file_alone_trains(tmp_path, fresh_pythons):
    folder = tmp_path / "anywhere"
    folder.mkdir()
    shutil.copyfile(ROOT / "recipes" / "cifar10_cnn.py", folder / "cifar10_cnn.py")
    result = run_copy(fresh_pythons.kit, folder, "cifar10_cnn", *TINY_COPY)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test:" in result.stdout and sorted(folder.iterdir()) == [folder / "cifar10_cnn.py",
                                                                    folder / "runs"]


@pytest.mark.slow
@pytest.mark.parametrize("missing", ["the kit", "keras_course_recipes/augment.py"])
def test_without_its_kit_a_recipe_says_what_to_install_in_one_line(missing, tmp_path,
                                                                    fresh_pythons):
    """The whole kit missing, or a file of a copy (a copied cifar10_cnn once raised an
    ImportError traceback at its `from keras_course_recipes import augment, data, runs`)."""
    folder = tmp_path / "anywhere"
    if missing == "the kit":
        folder.mkdir()
        shutil.copyfile(ROOT / "recipes" / "cifar10_cnn.py", folder / "cifar10_cnn.py")
    else:
        copied("cifar10_cnn", folder)
        (folder / missing).unlink()
    result = run_copy(fresh_pythons.bare, folder, "cifar10_cnn", "data.augment=[]", *TINY_COPY)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.splitlines()[-1]  # after TensorFlow's start-up notices, if it started
    assert line.endswith("this recipe runs on its kit, the keras-course-recipes package: pip "
                         "install it where this Python runs, or copy the recipe with every file "
                         "of the kit it imports (recipes copy NAME DIR; its README says how).")
    assert line.startswith("error: No module named 'keras_course_recipes'" if missing == "the kit"
                           else "error: cannot import name 'augment' from "
                           "'keras_course_recipes'"), line


@pytest.mark.slow
def test_a_copied_recipe_resumes_and_extends_its_run_dir_and_refuses_other_settings(
        tmp_path, fresh_pythons):
    folder = copied("mnist_mlp", tmp_path / "my_project")
    run_dir = folder / "mine"
    first = run_copy(fresh_pythons.bare, folder, "mnist_mlp", *TINY_COPY, f"run.dir={run_dir}")
    assert first.returncode == 0, first.stderr[-3000:]
    extended = run_copy(fresh_pythons.bare, folder, "mnist_mlp", *TINY_COPY, "train.epochs=2",
                        f"run.dir={run_dir}")
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert f"resuming the run in {run_dir} from its last finished epoch (1)" in extended.stdout
    assert [line.split(",")[0] for line in
            (run_dir / "history.csv").read_text().splitlines()[1:]] == ["0", "1"]
    other = run_copy(fresh_pythons.bare, folder, "mnist_mlp", *TINY_COPY, "train.epochs=3",
                     "data.batch_size=8", f"run.dir={run_dir}")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert [line for line in other.stderr.splitlines() if line.startswith("error:")] == [
        f"error: Cannot resume {run_dir}: its config differs in data.batch_size. Only run.*, "
        "train.epochs, execution.mode, execution.steps_per_execution and execution.onednn may "
        "change; use the same settings, or another run.dir."]


# What a copied file refused with a traceback, or took and trained wrongly on.
REFUSED = [
    ("mnist_mlp", "train.optimizer=adam", "'train.optimizer' must be one of rmsprop, sgd"),
    ("mnist_mlp", "train.epochs=-1", "'train.epochs' must be at least 1"),
    ("mnist_mlp", "train.epochs=abc", "'train.epochs' expects an integer"),
    ("mnist_mlp", "execution.mode=bogus", "'execution.mode' must be one of eager, graph, xla"),
    ("mnist_mlp", "execution.seed=-1", "'execution.seed' must be from 0"),
    ("mnist_mlp", "data.batch_size=0", "'data.batch_size' must be at least 1"),
    ("mnist_mlp", "data.validation_split=1.0", "'data.validation_split' must be at least 0 and below 1"),
    ("mnist_mlp", "execution.precision=bogus", "'execution.precision' must be one of"),
    ("mnist_mlp", "model.dropout=1.5", "'model.dropout' must be at least 0 and below 1"),
    ("mnist_mlp", "train.epoch=1", "Unknown config key 'train.epoch' on the command line"),
    ("mnist_mlp", "data.augment=[flip]", "Unknown config key 'data.augment'"),
    ("mnist_mlp", "epochs", "Expected key=value, got 'epochs'"),
    ("cifar10_cnn", "model.conv_dropout=1.5", "'model.conv_dropout' must be at least 0 and below 1"),
    ("cifar10_cnn", "data.augment=[bogus]", "Unknown augmentation 'bogus' in data.augment"),
    ("densenet_cifar10_cpu", "train.optimizer=adam", "'train.optimizer' must be one of sgd, muon"),
    ("densenet_cifar10_cpu", "model.test_time_views=5", "'model.test_time_views' must be one of 1, 2, 6"),
    ("densenet_cifar10_cpu", "train.lookahead_decay=1", "'train.lookahead_decay' must be above 0 and below 1"),
]


@pytest.mark.parametrize("module, item, message", REFUSED)
def test_a_copied_recipe_refuses_what_the_repository_refuses_before_anything_is_written(
        module, item, message, tmp_path, monkeypatch, capsys):
    """The copy's command line is keras_course_recipes/runs.py's `main`, the checks of
    `python -m keras_course_recipes run`: one line, exit status 2, and no run directory."""
    monkeypatch.chdir(tmp_path)
    recipe = kit.load(module)
    monkeypatch.setattr(sys, "argv", [f"{module}.py", "data.source=synthetic", item])
    with pytest.raises(SystemExit) as exit_:
        runs.main(module, recipe.CONFIG, recipe.run, getattr(recipe, "CONFIG_SCHEMA", None))
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and message in err, err
    assert err.count("\n") == 1 and not list(tmp_path.glob("runs/*/*"))  # no run directory


def check_resolves_alike(module):
    """The rule: recipe module `module` resolves through a copy's path
    (runs.main's: the module's own objects) as through the repository's
    (`recipes run`'s: its file read), with the same checks and the same values,
    the execution mode included: null is the backend's compiled step (on
    TensorFlow, graph)."""
    recipe = kit.load(module)
    from keras_course_recipes import recipe_config

    copied_config = recipe_config.settle(  # as runs.main does, on the backend Keras loaded
        module, recipe.CONFIG, getattr(recipe, "CONFIG_SCHEMA", None),
        [("by the backend Keras loaded", {"execution": {"backend": "tensorflow"}})],
        announce=lambda line: None)
    repository = recipe_config.resolve(module, announce=lambda line: None)
    assert copied_config == repository
    assert repository["execution"]["mode"] == "graph"


@pytest.mark.parametrize("module", kit.MODULES)
def test_the_copy_and_the_repository_resolve_a_recipe_alike(module):
    check_resolves_alike(module)


# What a student copies: every one of these calls is in each recipe's own code.
KERAS_CALLS = ["keras.utils.set_random_seed(", "keras.mixed_precision.set_global_policy(",
               "data.load(", ".compile(", "run_eagerly=", "jit_compile=", ".fit(",
               "keras.callbacks.TensorBoard(", "keras.callbacks.ModelCheckpoint(",
               "keras.callbacks.BackupAndRestore(", "keras.callbacks.CSVLogger(", "Timing("]


def check_shows_what_a_student_copies(source):
    """The rule, on a recipe file's text `source`: every one of KERAS_CALLS is in
    it, and nothing of the harness is imported."""
    assert [call for call in KERAS_CALLS if call not in source] == []
    imported = {node.module for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom)}
    assert not {"keras_course_recipes.harness", "keras_course_recipes.recipe_config",
                "keras_course_recipes.process"} & imported
    assert "harness" not in re.findall(r"from keras_course_recipes import (\w+)", source)


@pytest.mark.parametrize("module", kit.MODULES)
def test_every_call_a_student_would_copy_is_in_the_recipe_and_the_harness_is_not(module):
    check_shows_what_a_student_copies((ROOT / "recipes" / f"{module}.py").read_text())


def test_the_docs_list_the_files_a_copy_carries():
    """docs/recipes.md's listing of `make copy NAME=mnist_mlp`, against the copy's list."""
    page = (ROOT / "docs" / "recipes.md").read_text()
    listing = page.split("make copy NAME=mnist_mlp DIR=my_project\n```\n\n```\n")[1]
    assert listing.split("\n```")[0].splitlines() == ["mnist_mlp.py", *copy_list("mnist_mlp")]


@pytest.mark.slow
@pytest.mark.parametrize("setting, message", [
    ("data.source=folder", "reads image folders with keras_course_recipes/folder.py: copy it"),
    ("callbacks.graph=true", "writes with keras_course_recipes/callbacks/graph_writer.py: copy it")])
def test_a_copy_without_a_module_a_setting_asks_for_says_to_copy_it(setting, message, tmp_path,
                                                                     fresh_pythons):
    """`copy` leaves out what a run loads only where a setting asks for it:
    keras_course_recipes/folder.py for data.source=folder, the graph writer for
    callbacks.graph."""
    folder = copied("mnist_mlp", tmp_path / "my_project")
    result = run_copy(fresh_pythons.bare, folder, "mnist_mlp", setting, f"data.path={tmp_path}",
                      *([] if "folder" in setting else TINY_COPY))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert message in result.stderr


def test_two_copies_started_in_the_same_second_get_two_run_directories(tmp_path, monkeypatch):
    """A copy without run.dir takes runs/NAME/<date>-<time>, exclusively."""
    monkeypatch.chdir(tmp_path)
    recipe = kit.load("mnist_mlp")
    config = settings.resolve("mnist_mlp", settings.defaults(recipe.CONFIG), recipe.CONFIG)
    first, second = rundir.Run.open(config), rundir.Run.open(config)
    try:
        assert first.dir != second.dir and first.dir.parent == second.dir.parent
    finally:
        first.close()
        second.close()


def test_an_interrupted_copy_says_how_to_go_on(tmp_path, monkeypatch):
    """A copy resumes as `recipes run` does: its note names run.resume and the run.dir;
    before its first epoch, in a folder it made, nothing is kept and the same command
    starts over."""
    monkeypatch.chdir(tmp_path)
    recipe = kit.load("mnist_mlp")
    config = settings.resolve("mnist_mlp", settings.defaults(recipe.CONFIG), recipe.CONFIG)
    with rundir.Run.open(config) as run:
        assert run.saved_note() == (
            f"interrupted before the first epoch of {run.dir} finished: no epoch was saved, "
            "and the folder is removed; the same command starts the run again.")
        (run.dir / "history.csv").write_text("epoch,loss\n")  # what a run writes as it starts
    assert not run.dir.exists()
    (tmp_path / "mine").mkdir()  # a folder the student gave: kept, and named again
    config["run"]["dir"] = str(tmp_path / "mine")
    with rundir.Run.open(config) as run:
        assert run.saved_note().endswith("the same command with run.resume=true (or the same "
                                         "run.dir) starts it again from the beginning.")
    assert run.dir.exists()


@pytest.mark.slow
def test_a_students_own_modules_beside_a_recipe_change_nothing(tmp_path, fresh_pythons):
    """The kit once installed `recipes`, `models` and `callbacks`: a student's `models.py`
    beside a copied recipe broke it with wrong advice. Each of these files fails if imported."""
    for name in ("models.py", "callbacks.py", "recipes.py", "data.py", "utils.py",
                 "models/__init__.py", "models/mlp.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"raise RuntimeError('the student\\'s own {name} was imported')\n")
    shutil.copyfile(ROOT / "recipes" / "mnist_mlp.py", tmp_path / "mnist_mlp.py")
    result = run_copy(fresh_pythons.kit, tmp_path, "mnist_mlp", *TINY_COPY)
    assert result.returncode == 0 and "/metrics.json" in result.stdout, result.stderr[-3000:]
    assert "student" not in result.stderr


@pytest.mark.slow
def test_in_a_copys_folder_python_m_says_the_copy_hides_the_installed_kit(tmp_path,
                                                                           fresh_pythons):
    """`recipes copy` writes the copy's keras_course_recipes/__main__.py: the folder's
    partial package comes first on `python -m`'s path; the `recipes` command still works."""
    recipes = fresh_pythons.kit.parent / "recipes"
    assert subprocess.run([str(recipes), "copy", "mnist_mlp", str(tmp_path / "mine")],
                          capture_output=True, text=True, timeout=120).returncode == 0
    shadowed = subprocess.run([str(fresh_pythons.kit), "-m", "keras_course_recipes", "list"],
                              cwd=tmp_path / "mine", capture_output=True, text=True, timeout=120)
    assert shadowed.returncode == 1 and "Traceback" not in shadowed.stderr
    assert shadowed.stderr.strip().endswith("python NAME.py trains the copy).")
    listed = subprocess.run([str(recipes), "list"], cwd=tmp_path / "mine", capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0 and "mnist_mlp" in listed.stdout
