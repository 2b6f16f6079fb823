"""Resolves a recipe's configuration for `python -m keras_course_recipes`, with the checks
a recipe file runs too (`runs.main` settles its CONFIG through `settle`).

Precedence, lowest first: `settings.DEFAULTS` (with keras_course_recipes/data.py's `DEFAULTS` as
the data section, and keras_course_recipes/augment.py's for a recipe that augments) < the
recipe module's `CONFIG` < `configs/NAME.yaml` when the recipe is a YAML of
its own < each `--config` file in order < `key=value` overrides. Unknown
keys, values of the wrong type and numbers out of their range are
`UserError`s that name the key, raised before anything is built or written.
"""

import copy
import importlib.util
import os
from pathlib import Path

import yaml

from keras_course_recipes import CONFIGS_DIR, PACKAGE_DIR, RECIPES_DIR, module_of, settings
from keras_course_recipes.errors import UserError

def defaults(module):
    """`settings.defaults` for recipe module `module`."""
    return settings.defaults(recipe_values(module)[0], PACKAGE_DIR)


def recipe_values(module, layers=(), overrides=()):
    """(CONFIG, CONFIG_SCHEMA) of recipe module `module`. Where both are literals
    that nothing changes, as they are written in its file, read without running
    it, so that `show` and a typo's error need no TensorFlow; otherwise the
    module's own objects, Keras started first on the backend that `layers`, the
    environment and `overrides` choose (`_backend_before_keras`)."""
    source = RECIPES_DIR / f"{module}.py"
    try:
        return (settings.module_literal(source, "CONFIG"),
                settings.module_literal(source, "CONFIG_SCHEMA", default={}))
    except settings.NotLiteral:
        pass
    from keras_course_recipes import process

    backend, onednn = _backend_before_keras(source, layers, overrides)
    process.request_backend({"execution": {"backend": backend}})
    process.request_onednn({"execution": {"onednn": onednn}})
    spec = importlib.util.spec_from_file_location(f"keras_course_recipes._settings_of_{module}", source)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)  # a recipe runs nothing on import but its definitions
    return copy.deepcopy(loaded.CONFIG), copy.deepcopy(getattr(loaded, "CONFIG_SCHEMA", {}))


def _backend_before_keras(source, layers, overrides):
    """`execution.backend` and `execution.onednn` as the settings will resolve them,
    found before Keras and TensorFlow load (each reads its own once, on import):
    the command line's, else the environment's and the YAML files', else the
    CONFIG's as written in `source`."""
    found = {}
    for key in ("execution.backend", "execution.onednn"):
        value = settings.literal_at(source, "CONFIG", key)
        for _, layer in layers:
            value = settings.flatten(layer).get(key, value)
        for item in overrides:
            if item.partition("=")[0].strip() == key:
                value = settings.parse_override(item)[1]
        found[key] = value
    backend = found["execution.backend"] or settings.DEFAULTS["execution"]["backend"]
    if backend not in settings.CHOICES["execution.backend"]:
        raise UserError(f"Config key 'execution.backend' must be one of "
                        f"{', '.join(settings.CHOICES['execution.backend'])}; got {backend!r}.")
    return backend, found["execution.onednn"]


def resolve(name, config_files=(), overrides=(), announce=print, environment=True):
    """Returns the resolved config of recipe `name` as a nested dict.

    Args:
        name: the recipe's name: a recipe module's, or the stem of a YAML in
            `configs/` that names its module.
        config_files: extra YAML files, applied in order.
        overrides: `key=value` strings; values are parsed as YAML.
        announce: called with one line per command-line override.
        environment: whether KERAS_BACKEND sets `execution.backend` (a command
            whose parts each name their backend, compare's modes, reads it not).
    """
    module = module_of(name)
    source = RECIPES_DIR / f"{module}.py"
    layers = [CONFIGS_DIR / f"{name}.yaml"] if name != module else []
    layers = [(f"in {path}", _read_yaml(path, module)) for path in [*layers, *map(Path, config_files)]]
    asked = os.environ.get("KERAS_BACKEND") if environment else None
    if asked:  # Keras' own switch, below the command line's
        layers.append(("in the environment variable KERAS_BACKEND",
                       {"execution": {"backend": asked}}))
    from_environment = asked and not any(item.partition("=")[0].strip() == "execution.backend"
                                         for item in overrides)
    values, schema = recipe_values(module, layers, overrides)
    return settle(name, values, schema, layers, overrides, announce,
                  f"in {source}'s CONFIG", tensorflow_only(module),
                  declared=settings.written_keys(source, "CONFIG"),
                  backend_setting=(f"KERAS_BACKEND={asked} (the environment variable)",
                                   "Unset KERAS_BACKEND (TensorFlow is the default), or give "
                                   "execution.backend=tensorflow") if from_environment else None)


def settle(name, values, schema=None, layers=(), overrides=(), announce=print,
           origin="in CONFIG", only=None, declared=(), backend_setting=None):
    """Recipe `name`'s settings from its CONFIG object `values` (written
    `origin`), `CONFIG_SCHEMA` and `TENSORFLOW_ONLY` (`only`), the YAML `layers` and
    the overrides, every check passed: what `resolve` gives the command line, and
    `runs.main` a recipe file. `declared`: the keys the recipe's file writes in
    CONFIG (`settings.resolve`'s); `backend_setting`: (what asked for the backend,
    how to undo it) where that is not `execution.backend` (`_check_backend`)."""
    check_sections(values, origin)
    sections = settings.defaults(values, PACKAGE_DIR)
    unknown = sorted(set(values) - set(sections))
    if unknown:
        raise UserError(f"{name}: unknown CONFIG section {unknown[0]}; sections are "
                        f"{', '.join(sections)}.")
    config = settings.resolve(name, sections, values, layers=layers, overrides=overrides,
                              schema=schema, announce=announce, origin=origin, declared=declared)
    backend = config["execution"]["backend"]
    if backend != "tensorflow":
        _check_backend(config, only, backend_setting)
    settings.resolve_mode(config["execution"], backend)
    _check_together(config)
    return config


def check_sections(values, origin="in CONFIG"):
    """Refuses a CONFIG (written `origin`) that is not a dict of dicts: `CONFIG = None`."""
    where = origin.removeprefix("in ")
    if not isinstance(values, dict):
        raise UserError(f"{where} must be a dict of sections (data, model, train, execution, "
                        f"callbacks, run), got {values!r}.")
    for section, keys in values.items():
        if not isinstance(keys, dict):
            raise UserError(f"{where}'s '{section}' section must be a dict of keys, got "
                            f"{keys!r}.")


def _check_together(config):
    """Refuses a `callbacks.profile` whose form its type does not say."""
    profile = config["callbacks"]["profile"]
    if profile is not None and _steps(profile) is None:
        raise UserError("callbacks.profile takes the first and last training step to profile, "
                        f"e.g. callbacks.profile=5,8 (or one step: 5); got {profile!r}.")


def _steps(profile):
    """`callbacks.profile` as (first, last) training step from 1, or None if it is not one."""
    parts = (profile if isinstance(profile, list) else
             [profile] if isinstance(profile, int) else str(profile).split(","))
    try:
        steps = [int(part) for part in parts]
    except (TypeError, ValueError):
        return None
    if len(steps) == 1:
        steps *= 2
    return tuple(steps) if len(steps) == 2 and 1 <= steps[0] <= steps[1] else None


def tensorflow_only(module):
    """Why recipe module `module` trains on TensorFlow alone (its `TENSORFLOW_ONLY`,
    e.g. RevNet's tf.custom_gradient), or None: it runs on every backend."""
    source = RECIPES_DIR / f"{module}.py"
    return (settings.module_literal(source, "TENSORFLOW_ONLY", default="") or None) if source.is_file() else None


def _check_backend(config, only, setting=None):
    """Refuses, before anything runs, what Keras on JAX or torch cannot do:
    each of these is TensorFlow's own (`only`: the recipe's `TENSORFLOW_ONLY`).
    `setting`: (what asked for the backend, how to undo it), where that is not
    `execution.backend` (KERAS_BACKEND, the backend Keras loaded)."""
    execution, callbacks, backend = config["execution"], config["callbacks"], config["execution"]["backend"]
    asked, undo = setting or (f"execution.backend={backend}",
                              f"Drop execution.backend={backend} (TensorFlow is the default)")
    refused = [
        (only is not None, only),
        (execution["strategy"] != "none", f"execution.strategy={execution['strategy']}, "
                                          "tf.distribute"),
        (callbacks["graph"], "callbacks.graph, the TensorBoard graph writer"),
        (callbacks["profile"] is not None, "callbacks.profile, TensorFlow's profiler"),
        (callbacks["diagnostics"], "callbacks.diagnostics, which reads gradients "
                                   "through tf.GradientTape"),
        (config["run"]["export"], "run.export, a TensorFlow SavedModel"),
    ]
    for refuse, feature in refused:
        if refuse:
            raise UserError(f"{asked} cannot run {feature}: it is TensorFlow's. {undo}.")


def recipe_schema(module):
    """The `CONFIG_SCHEMA` of recipe module `module`, as its file writes it: the
    types, choices, bounds and cross-checks of the keys its CONFIG adds
    (`settings.declarations` reads it)."""
    return recipe_values(module)[1]


def dump(config):
    """Returns `config` as YAML text, sections in their usual order."""
    return yaml.safe_dump(settings.plain(config), sort_keys=False)


def _read_yaml(path, module):
    """The mapping in `path`, less its `recipe:` key, which must name `module`."""
    if path.is_dir():  # not "not found": the user can see it is there
        raise UserError(f"{path} is a folder, not a YAML config file: give --config a file.")
    if not path.is_file():
        raise UserError(f"Config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text: a config file is YAML, written in "
                        "UTF-8.") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path} is not valid YAML: {_one_line(error)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of sections, "
                        f"got {type(data).__name__}.")
    # A section whose every key is commented out reads as null: it sets nothing.
    data = {section: values for section, values in data.items() if values is not None}
    written_for = data.pop("recipe", module)
    if written_for != module:
        raise UserError(f"{path} is written for the '{written_for}' recipe (its "
                        f"`recipe:` key says so); it does not apply to '{module}'.")
    return data


def _one_line(error):
    """A YAML error as one line: what is wrong, and where (PyYAML prints the
    text around it on lines of their own)."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(error, 'problem', None) or error}{where}"
