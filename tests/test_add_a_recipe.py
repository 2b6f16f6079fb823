"""Adding a recipe is adding a file: docs/add-a-recipe.md's example, written into
recipes/ of a copy of the checkout, installed from that copy, is a recipe that
`recipes list`, `run`, `compare` and `notebooks` pick up, with no list edited;
and, added in this process as written, it passes every rule `make test-fast`
applies to each recipe, as the page promises."""

import importlib
import json
import re
import shutil
import subprocess
import sys

import pytest

import keras_course_recipes as kit
import keras_course_recipes.recipes
from conftest import ROOT, FreshPythons, kit_source
from test_architecture import check_augmentation_is_honoured_or_refused
from test_copy import check_resolves_alike, check_shows_what_a_student_copies
from test_docs import check_the_recipe_table_lists_every_recipe_and_no_other
from test_layout import CONTRACT, contract_of
from test_notebooks import check_renders
from test_readme_options import check_the_table_lists_every_default_key_and_no_other

PAGE = ROOT / "docs" / "add-a-recipe.md"
TINY = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
        "train.epochs=1", "train.steps_per_epoch=2", "run.verbose=0"]


def example():
    """The page's recipe file, its one ```python block."""
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    return code


def test_the_page_shows_a_whole_recipe_file():
    code = example()
    for part in ('"""My softmax', "runs.start(__name__)", "CONFIG = {", "def build(",
                 "def run(", 'runs.main("my_softmax", CONFIG, run)'):
        assert part in code, part


NAME = "my_softmax"  # the page's recipe


@pytest.fixture
def added(tmp_path, monkeypatch):
    """The page's example added to recipes/ as written, in this process only: the
    kit's registry reads a folder that holds the recipe files and it (as it reads
    recipes/ once the file is there), and `kit.load` imports it from there.
    Nothing of the checkout changes."""
    folder = tmp_path / "recipes"
    shutil.copytree(kit.RECIPES_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / f"{NAME}.py").write_text(example())
    recipes_dir = kit.RECIPES_DIR
    for module in list(sys.modules.values()):  # the kit's modules that read recipes/
        if (getattr(module, "__name__", "").startswith("keras_course_recipes")
                and getattr(module, "RECIPES_DIR", None) == recipes_dir):
            monkeypatch.setattr(module, "RECIPES_DIR", folder)
    monkeypatch.setattr(kit, "MODULES", tuple(sorted([*kit.MODULES, NAME])))
    package = keras_course_recipes.recipes
    # After the package's own folder: every other recipe is still imported from there.
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    importlib.invalidate_caches()
    yield folder
    sys.modules.pop(f"{package.__name__}.{NAME}", None)
    if hasattr(package, NAME):
        delattr(package, NAME)


def test_the_pages_example_passes_every_rule_the_fast_tests_apply_to_a_recipe(
        added, tiny_config, tmp_path, monkeypatch):
    """The page's steps: the file copied into recipes/, `make notebooks`, `make
    results`, then `make test-fast`, whose rules over `kit.MODULES` are these
    (tests/test_copy.py, test_layout.py, test_notebooks.py, test_architecture.py,
    test_readme_options.py, test_docs.py); and `build`, as the tools call it."""
    from benchmarks import results

    source = (added / f"{NAME}.py").read_text()
    assert NAME in kit.MODULES and NAME in kit.names()
    assert kit.description(NAME) == "My softmax regression on MNIST: one Dense layer, a first " \
                                    "recipe of my own."
    check_shows_what_a_student_copies(source)
    assert contract_of(source) == CONTRACT
    check_resolves_alike(NAME)
    check_renders(NAME)  # make notebooks
    check_augmentation_is_honoured_or_refused(NAME, tiny_config)
    check_the_table_lists_every_default_key_and_no_other()
    readme = tmp_path / "README.md"  # make results: the README's recipe table, regenerated
    readme.write_text(results.regenerate((ROOT / "README.md").read_text()))
    check_the_recipe_table_lists_every_recipe_and_no_other(readme)
    experiment = kit.load(NAME).build(tiny_config(NAME))  # as compare, graph and preview do
    assert experiment.model.compiled and experiment.data.steps_per_epoch == 2
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # builds a wheel and trains
def test_a_recipe_file_added_to_a_copy_of_the_checkout_is_a_recipe(tmp_path):
    source = kit_source(tmp_path / "checkout")
    (source / "recipes" / "my_softmax.py").write_text(example())
    recipes = FreshPythons(tmp_path / "pythons", source=source).kit.parent / "recipes"
    work = tmp_path / "work"
    work.mkdir()

    def command(*args):
        result = subprocess.run([str(recipes), *args], cwd=work, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    listed = command("list")
    assert re.search(r"^my_softmax +My softmax regression on MNIST", listed, re.MULTILINE), listed
    command("run", "my_softmax", *TINY, "run.dir=run")
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert metrics["recipe"] == "my_softmax" and (work / "run" / "checkpoints" / "best.keras").is_file()
    command("compare", "my_softmax", "modes=graph", "steps=2", "repeats=1", *TINY)
    assert list(work.glob("runs/compare/my_softmax/*/table.md"))
    command("notebooks", "--dir", "notebooks")
    assert (work / "notebooks" / "my_softmax.ipynb").is_file()
