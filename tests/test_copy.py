"""A recipe leaves the repository: each recipe module's header names the
files to copy beside it, at most three, and the recipe copied with exactly
those into an empty folder outside the repository trains on its own, with
`key=value` overrides, writing TensorBoard logs, checkpoints and the timing
line. And what it shows is true: every Keras call a student would copy is
in the recipe's own body, and the harness is not."""

import ast
import os
import re
import shutil
import subprocess
import sys

import pytest

import recipes
from conftest import ROOT, TINY_MODEL

# The header's paragraph that names them: "Copy it out: this file, with A, B and C ..."
COPY_PARAGRAPH = re.compile(r"Copy it\s+out:(.*?)\n\n", re.S)
FILE = re.compile(r"\b(?:models|recipes|callbacks)/\w+\.py\b")


def files_to_copy(module):
    """The files the header of recipe module `module` says to copy beside it."""
    doc = ast.get_docstring(ast.parse((ROOT / "recipes" / f"{module}.py").read_text()))
    paragraph = COPY_PARAGRAPH.search(doc + "\n\n")
    assert paragraph, f"{module}: its header does not say what to copy beside it"
    return FILE.findall(paragraph.group(1))


@pytest.mark.parametrize("module", recipes.MODULES)
def test_the_header_names_at_most_three_files_that_exist(module):
    files = files_to_copy(module)
    assert 1 <= len(files) <= 3, files
    assert all((ROOT / path).is_file() for path in files), files


def copied(module, folder):
    """`module`'s recipe and the files its header names, in `folder`."""
    for path in [f"recipes/{module}.py", *files_to_copy(module)]:
        target = folder / (f"{module}.py" if path == f"recipes/{module}.py" else path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, target)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("module", recipes.MODULES)
def test_a_copied_recipe_trains_on_its_own(module, tmp_path):
    folder = copied(module, tmp_path / "my_project")
    assert not str(folder).startswith(str(ROOT))
    overrides = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
                 "train.epochs=1", "train.steps_per_epoch=2", *TINY_MODEL.get(module, [])]
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, f"{module}.py", *overrides], cwd=folder,
                            capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    [run_dir] = (folder / "runs" / module).iterdir()
    assert (run_dir / "checkpoints" / "last.keras").is_file()
    assert list((run_dir / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert (run_dir / "history.csv").read_text().count("\n") == 2  # header, one epoch
    assert (run_dir / "backup" / "training_metadata.json").is_file()
    assert re.search(r"^timing: mode graph, [\d.]+ ms/step", result.stdout, re.M), result.stdout
    assert "test:" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("argument", ["train.epoch=1", "epochs=1", "train.epochs",
                                      "data.sorce=synthetic"])
def test_a_copied_recipe_refuses_a_key_its_config_does_not_have(argument, tmp_path):
    """A typo would otherwise add a key nothing reads, and train as if unsaid."""
    folder = copied("mnist_mlp", tmp_path / "my_project")
    result = subprocess.run([sys.executable, "mnist_mlp.py", argument], cwd=folder,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and f"error: '{argument}'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (folder / "runs").exists()


@pytest.mark.parametrize("module", recipes.MODULES)
def test_every_copied_recipe_checks_its_keys(module):
    main = (ROOT / "recipes" / f"{module}.py").read_text().split('if __name__ == "__main__":')[1]
    assert "if not equals or name not in known:" in main and "sys.exit(" in main


# What a student copies: every one of these calls is in each recipe's own code.
KERAS_CALLS = ["keras.utils.set_random_seed(", "keras.mixed_precision.set_global_policy(",
               "data.load(", ".compile(", "run_eagerly=", "jit_compile=", ".fit(",
               "keras.callbacks.TensorBoard(", "keras.callbacks.ModelCheckpoint(",
               "keras.callbacks.BackupAndRestore(", "keras.callbacks.CSVLogger(", "Timing("]


@pytest.mark.parametrize("module", recipes.MODULES)
def test_every_call_a_student_would_copy_is_in_the_recipe_and_the_harness_is_not(module):
    source = (ROOT / "recipes" / f"{module}.py").read_text()
    assert [call for call in KERAS_CALLS if call not in source] == []
    imported = {node.module for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom)}
    assert not {"recipes.harness", "recipes._config", "recipes._environment"} & imported
    assert "harness" not in re.findall(r"from recipes import (\w+)", source)


def test_the_docs_say_what_a_recipe_holds_and_how_to_copy_one():
    page = " ".join((ROOT / "docs" / "recipes.md").read_text().split())
    assert "Every Keras call a student would copy is in the recipe itself" in page
    for call in ("set_random_seed", "set_global_policy", "BackupAndRestore", "CSVLogger",
                 "ModelCheckpoint", "TensorBoard", "Timing"):
        assert call in page, call
    for path in files_to_copy("mnist_mlp"):
        assert path in page, path
