"""The configuration tables agree with the code's defaults: the reference in
docs/configuration.md lists every key, the README's essentials a few."""

import re

import keras_course_recipes as kit
from conftest import ROOT
from keras_course_recipes import recipe_config, settings


REFERENCE = ROOT / "docs" / "configuration.md"
CHOICES = settings.CHOICES  # the keys' choices


def config_table_rows(page=REFERENCE):
    """{key: the rest of its row} for every key in the page's "Configuration" table."""
    section = page.read_text().split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first, rest = line[2:].split(" | ", 1)
            for key in re.findall(r"`([a-z_]+\.[a-z_]+)`", first):
                rows[key] = rest
    return rows


def default_keys():
    """Every recipe's keys: the defaults, with the augmentation keys a recipe that augments
    has, and the train keys that every recipe's CONFIG sets."""
    trains = [set(recipe_config.recipe_values(module)[0]["train"]) for module in kit.MODULES]
    return {f"{section}.{key}" for module in kit.MODULES
            for section, values in recipe_config.defaults(module).items() for key in values} | {
        f"train.{key}" for key in set.intersection(*trains)}


def check_the_table_lists_every_default_key_and_no_other():
    """The rule, over every recipe module `kit.MODULES` names (an added one among them)."""
    listed = set(config_table_rows())
    assert listed - default_keys() == set(), "in docs/configuration.md, not in the defaults"
    assert default_keys() - listed == set(), "in the defaults, not in docs/configuration.md"


def test_the_table_lists_every_default_key_and_no_other():
    check_the_table_lists_every_default_key_and_no_other()


def test_the_readmes_essentials_are_rows_of_the_reference():
    essentials = config_table_rows(ROOT / "README.md")
    assert len(essentials) >= 5, "the README's table was not found"
    reference = config_table_rows()
    for key, row in essentials.items():
        assert key in reference, f"the README lists {key}, which the reference lacks"
        assert row.split(" | ")[0] == reference[key].split(" | ")[0], f"{key}: another default"
        for choice in CHOICES.get(key, []):
            if isinstance(choice, str):
                assert f"`{choice}`" in row, f"{key}: {choice}"


def test_the_table_names_every_choice_of_a_key():
    rows = config_table_rows()
    for key, choices in CHOICES.items():
        for choice in choices:
            if isinstance(choice, str):
                assert f"`{choice}`" in rows[key], f"{key}: {choice}"


def test_the_table_states_each_plain_default():
    rows = config_table_rows()
    for key in default_keys():
        section, name = key.split(".")
        default = recipe_config.defaults("cifar10_cnn")[section].get(name)
        if isinstance(default, (bool, int, float)) and key not in ("train.epochs", "train.lr"):
            # A table cell shows YAML: true, 0.1, 2048.
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            assert shown in rows[key].split(" | ")[0], f"{key}: default {shown}"
