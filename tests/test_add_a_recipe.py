"""Adding a recipe is adding a file: docs/add-a-recipe.md's example, written into
recipes/ of a copy of the checkout, installed from that copy, is a recipe that
`recipes list`, `run`, `compare` and `notebooks` pick up, with no list edited."""

import json
import re
import subprocess

import pytest

from conftest import ROOT, FreshPythons, kit_source

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
