"""The layout keeps its lists true: `kit.MODULES` names the recipe
modules in the folder, and the command table of docs/configuration.md names
the commands of `python -m keras_course_recipes` and of the checkout's `python -m
benchmarks`, each with the options its tool declares."""

import ast
import re

import pytest

import keras_course_recipes as kit
from conftest import ROOT
from benchmarks.__main__ import TOOLS as BENCHMARKS
from keras_course_recipes.__main__ import commands, main

COMMANDS = {**commands(), **commands(tools=BENCHMARKS)}


def _top_level_functions(path):
    return {node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef)}


# A recipe's contract with the kit: the config, and the kit's RecipeRun (None: a fresh start).
CONTRACT = {"build": "config, run=None", "run": "config, run"}


def contract_of(source):
    """{name: its parameters as written} of the top-level `build` and `run` in the
    recipe file's text `source` (those it defines)."""
    return {node.name: ast.unparse(node.args) for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name in CONTRACT}


def test_modules_names_every_recipe_module_and_nothing_else():
    with_build_and_run = {path.stem for path in (ROOT / "recipes").glob("*.py")
                          if {"build", "run"} <= _top_level_functions(path)}
    assert with_build_and_run, "no module with build and run found: the search is broken"
    assert set(kit.MODULES) == with_build_and_run
    assert len(kit.MODULES) == len(set(kit.MODULES))


@pytest.mark.parametrize("module", kit.MODULES)
def test_every_recipe_takes_the_config_and_the_kits_run(module):
    """`build(config, run=None)` and `run(config, run)`: what the harness and the tools call."""
    assert contract_of((ROOT / "recipes" / f"{module}.py").read_text()) == CONTRACT


def _readme_commands():
    """{command: its row} from the table under docs/configuration.md's "Command line"."""
    reference = (ROOT / "docs" / "configuration.md").read_text()
    section = reference.split("\n## Command line\n")[1].split("\n## ")[0]
    return {match[1]: match[0] for match in
            re.finditer(r"^\| `python -m (?:keras_course_recipes|benchmarks) ([\w-]+).*$", section,
                        re.MULTILINE)}


def test_the_readme_table_lists_every_command_and_no_other():
    assert len(_readme_commands()) > 10, "the command table was not found"
    assert sorted(_readme_commands()) == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_readme_row_names_each_option_of_its_command(name):
    row = _readme_commands()[name]
    for option in COMMANDS[name].options:
        assert f"{option.name}=" in row, f"{name}: {option.name}= is not in the command table's row"


def test_a_command_takes_its_options_out_of_the_overrides():
    options, overrides = COMMANDS["compare"].split(
        ["modes=graph,xla", "train.lr=0.1", "steps=7", "model.depth=[1,2]"])
    assert options == {"modes": ["graph", "xla"], "steps": 7, "repeats": 1}
    assert overrides == ["train.lr=0.1", "model.depth=[1,2]"]


def test_another_commands_option_is_an_error_that_names_its_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "mnist_mlp", "size=model.depth=[10,22]"])
    assert exit_.value.code == 2
    assert "size= belongs to compare-sizes" in capsys.readouterr().err
