"""The README's configuration table agrees with the code's defaults."""

import re

from conftest import ROOT
from recipes import _config


def config_table_rows():
    """{key: the rest of its row} for every key in README's "Configuration" table."""
    section = (ROOT / "README.md").read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            first, rest = line[2:].split(" | ", 1)
            for key in re.findall(r"`([a-z_]+\.[a-z_]+)`", first):
                rows[key] = rest
    return rows


def default_keys():
    return {f"{section}.{key}" for section, values in _config.DEFAULTS.items()
            for key in values}


def test_the_table_lists_every_default_key_and_no_other():
    listed = set(config_table_rows())
    assert listed - default_keys() == set(), "in the README, not in _config.DEFAULTS"
    assert default_keys() - listed == set(), "in _config.DEFAULTS, not in the README"


def test_the_table_names_every_choice_of_a_key():
    rows = config_table_rows()
    for key, choices in _config.CHOICES.items():
        for choice in choices:
            if isinstance(choice, str):
                assert f"`{choice}`" in rows[key], f"{key}: {choice}"


def test_the_table_states_each_plain_default():
    rows = config_table_rows()
    for key in default_keys():
        section, name = key.split(".")
        default = _config.DEFAULTS[section][name]
        if isinstance(default, (bool, int, float)) and key not in ("train.epochs", "train.lr"):
            # A table cell shows YAML: true, 0.1, 2048.
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            assert shown in rows[key].split(" | ")[0], f"{key}: default {shown}"
