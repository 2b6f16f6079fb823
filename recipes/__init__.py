"""Keras 3 training recipes, looked up by name.

A recipe is a module in this package whose name does not start with `_`; its
name is also the name of its YAML file in `configs/`. Listing recipes reads
their docstrings without importing them, so `list` and `show` do not pay for
importing TensorFlow.
"""

import ast
import difflib
import importlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


class UserError(Exception):
    """A problem the user can fix: printed as one message, exit status 2."""


def names():
    """Returns the sorted names of every registered recipe."""
    return sorted(
        path.stem
        for path in PACKAGE_DIR.glob("*.py")
        if not path.stem.startswith("_")
    )


def check_name(name):
    """Raises `UserError` naming the closest recipes if `name` is unknown."""
    known = names()
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UserError(
        f"Unknown recipe '{name}'.{hint} "
        f"Known recipes: {', '.join(known)} (see `python -m recipes list`)."
    )


def description(name):
    """Returns the first line of a recipe's docstring, without importing it."""
    check_name(name)
    tree = ast.parse((PACKAGE_DIR / f"{name}.py").read_text())
    doc = ast.get_docstring(tree) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def load(name):
    """Imports and returns the recipe module `name`."""
    check_name(name)
    return importlib.import_module(f"{__name__}.{name}")
