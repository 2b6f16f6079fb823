"""The layout keeps its lists true: the recipe modules `recipes.MODULES`
names are the ones in the folder."""

import ast

import recipes
from conftest import ROOT


def _top_level_functions(path):
    return {node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef)}


def test_modules_names_every_recipe_module_and_nothing_else():
    with_build_and_run = {path.stem for path in (ROOT / "recipes").glob("*.py")
                          if {"build", "run"} <= _top_level_functions(path)}
    assert with_build_and_run, "no module with build and run found: the search is broken"
    assert set(recipes.MODULES) == with_build_and_run
    assert len(recipes.MODULES) == len(set(recipes.MODULES))
