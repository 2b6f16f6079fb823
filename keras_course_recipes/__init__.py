"""keras-course-recipes: Keras 3 training recipes, and the kit they run on.

The lessons are `keras_course_recipes.recipes` (the repository's recipes/
folder), one module per recipe, looked up here by name: a recipe is either a
module of `MODULES`, a file of its own (its settings are its `CONFIG`), or a YAML file in
`keras_course_recipes.configs` (configs/) whose top-level `recipe:` key names
the module that runs it, with its settings applied on top of that module's.
The builders are `keras_course_recipes.models` (models/), the callbacks
`keras_course_recipes.callbacks` (callbacks/).

The kit, in this folder: `runs` (a recipe's command line and run),
`settings` (every key's checks), `rundir` (the run directory: lock, resume,
repairs), `history_csv` (its history.csv, read whole), `errors`, `data` (what
it trains on), `folder` (image folders) and
`augment` (augmentation); then `harness` (what `recipes run` adds around a
recipe), `recipe_config`, `machine`, `process` and `_distribute` (the harness's), and
`tools` (the commands that work on a recipe). `RecipeRun`, here, is what
a recipe's `run(config, run)` is given of its run. Listing recipes reads
docstrings and YAML comments without importing anything, so `list` and
`show` do not pay for importing TensorFlow. Importing any of it changes
nothing in the process.
"""

import ast
import difflib
import functools
import importlib
from pathlib import Path

import yaml

from keras_course_recipes import errors

__version__ = "1.0.0"  # the distribution's version: pyproject.toml reads it from here

RUNS_DIR = Path("runs")  # where runs are written, relative to where the command runs

PACKAGE_DIR = Path(__file__).resolve().parent


def _mapped(folder):
    """Where subpackage `folder` is: inside this package where the kit is installed
    from a wheel, beside it in a checkout (and its editable install)."""
    inside = PACKAGE_DIR / folder
    return inside if inside.is_dir() else PACKAGE_DIR.parent / folder


RECIPES_DIR = _mapped("recipes")  # the recipe files, the lessons
CONFIGS_DIR = _mapped("configs")  # the YAML recipes
# The recipe modules, each a file of recipes/ with its CONFIG, `build(config, run=None)` and
# `run(config, run)`: adding a recipe is adding its file (docs/add-a-recipe.md).
MODULES = tuple(sorted(path.stem for path in RECIPES_DIR.glob("*.py")
                       if not path.stem.startswith("_")))


def _config_recipes():
    """{name: module} for every YAML in `configs/` with a `recipe:` key."""
    found = {}
    for path in CONFIGS_DIR.glob("*.yaml"):
        status = path.stat()
        module = _recipe_key(path, status.st_mtime_ns, status.st_size)
        if module in MODULES:
            found[path.stem] = module
    return found


@functools.cache
def _recipe_key(path, mtime_ns, size):
    """The `recipe:` value of the YAML at `path`, parsed once per version of
    the file (as settings.module_literal reads a module's): names and
    lookups ask for it many times."""
    data = yaml.safe_load(path.read_text()) or {}
    return data.get("recipe") if isinstance(data, dict) else None


def names():
    """Returns the sorted names of every registered recipe."""
    return sorted({*MODULES, *_config_recipes()})


def check_name(name):
    """Raises `errors.UserError` naming the closest recipes if `name` is unknown."""
    known = names()
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise errors.UserError(
        f"Unknown recipe '{name}'.{hint} "
        f"Known recipes: {', '.join(known)} (see `python -m keras_course_recipes list`)."
    )


def module_of(name):
    """Returns the name of the module that runs recipe `name`."""
    check_name(name)
    return name if name in MODULES else _config_recipes()[name]


def description(name):
    """Returns the first line of a recipe's docstring, or of its YAML's comment."""
    module = module_of(name)
    if module != name:
        first = (CONFIGS_DIR / f"{name}.yaml").read_text().splitlines()[0]
        return first.lstrip("# ").strip() if first.startswith("#") else ""
    doc = ast.get_docstring(ast.parse((RECIPES_DIR / f"{name}.py").read_text())) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def load(name):
    """Imports and returns the module that runs recipe `name`."""
    return importlib.import_module(f"{__name__}.recipes.{module_of(name)}")


class RecipeRun:
    """What a recipe's `run(config, run)` is given: the kit's side of one run, as
    `recipes run`, `python NAME.py` or a notebook cell starts it (harness.py,
    rundir.py's `Run`). The lesson keeps every Keras call; this adds:

    - `dir`: the run directory (a `pathlib.Path`), made, marked, locked and read
      back to resume; the recipe's callbacks write there, and the kit
      config.yaml, checkpoints/best.keras and metrics.json.
    - `callbacks`: the kit's, first in `fit`'s list: config.yaml and a resumed
      run's repairs as training starts, each epoch's random draws from (seed,
      epoch), a Ctrl-C or SIGTERM that stops after the step, a diverged loss
      that ends the run; the execution mode's check, the run's time estimate,
      best.keras, and what `callbacks.*` asks for.
    - `initial_epoch`: the finished epochs the backup holds (0: a fresh start).
      BackupAndRestore brings back the weights and the optimizer, and
      `build(config, run)` the data from there: the batches an uninterrupted
      run trains on.
    - `verbose`: `fit`'s, from `run.verbose`.
    """

    def __init__(self, run_dir, callbacks=(), initial_epoch=0, verbose="auto"):
        self.dir, self.callbacks = Path(run_dir), list(callbacks)
        self.initial_epoch, self.verbose = initial_epoch, verbose
