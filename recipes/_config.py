"""Resolves a recipe's configuration.

Precedence, lowest first: `DEFAULTS` < `configs/MODULE.yaml` (the module that
runs the recipe) < `configs/NAME.yaml` when the recipe is a YAML of its own <
each `--config` file in order < `key=value` overrides. The module's YAML may
add keys of its own (its model's fields, say), typed by their value there or
by the module's `CONFIG_SCHEMA`; everything after it may only set keys that
exist. Unknown keys and values of the wrong type are `UserError`s that name
the key. The resolved config records the recipe's name under the top-level
key `recipe`.
"""

import ast
import copy
import difflib
import math
import re
from pathlib import Path

import yaml

from recipes import CONFIGS_DIR, PACKAGE_DIR, UserError, module_of

DEFAULTS = {
    "data": {
        "source": "tfds",  # tfds | synthetic | folder
        "name": "mnist",  # sets input shape and class count, also for folder/synthetic
        "dir": None,  # tensorflow-datasets' data_dir; None is its own default
        "path": None,  # root of an image folder tree, for data.source=folder
        "batch_size": 128,
        "validation_split": 0.1,  # fraction of the training split held out
        "synthetic_examples": 2048,  # training examples for data.source=synthetic
        "shuffle_buffer": 10000,
        "cache": True,  # tfds: keep decoded uint8 images in memory after the first epoch
        "augment": [],  # training-only operations, in order: see recipes/_augment.py
        "augment_on": "auto",  # device (in the training step) or host (tf.data); auto: device on a GPU or without TensorFlow
        "augment_engine": "auto",  # keras_cv | keras (Keras core's); auto: keras_cv on TF, keras on JAX
    },
    "model": {},
    "train": {
        "epochs": 10,
        "steps_per_epoch": None,  # None: one pass over the training split
        "lr": 1e-3,
        "scale_lr_with_batch": False,  # lr times the replicas: the linear scaling rule
    },
    "execution": {
        "backend": "tensorflow",  # tensorflow | jax: Keras' backend, set before Keras is imported
        "mode": None,  # eager | graph | xla; null: the backend's compiled step (graph; jax: xla)
        "steps_per_execution": 1,
        "precision": "float32",  # float32 | mixed_float16 | mixed_bfloat16
        "seed": 0,
        "onednn": None,  # oneDNN's CPU kernels: null keeps TensorFlow's choice; true/false set it
        "strategy": "none",  # none | mirrored | multi_worker: tf.distribute data parallelism
        "devices": None,  # mirrored: null, every GPU; cpu:N, the CPU as N logical devices
        "timeout_s": 120,  # multi_worker: how long a worker waits for its peers to start
    },
    "callbacks": {
        "tensorboard": True,
        "checkpoint": True,
        "monitor": "val_accuracy",  # what decides the best checkpoint
        "graph": False,  # write the training step's graph to TensorBoard (graph and xla modes)
        "profile": None,  # START,END: profile those training steps for TensorBoard's Profile tab
        "diagnostics": False,  # activation and gradient histograms, input images: why it does not train
    },
    "run": {
        "dir": None,  # None: runs/NAME/<timestamp>
        "resume": False,  # continue the latest unfinished run of this recipe
        "verbose": "auto",  # auto | 0 | 1 | 2, as in model.fit; auto: 1 on a terminal, else 2
        "export": False,  # also write the final model as a SavedModel, to serve without this code
    },
}

# Types of keys that their default does not show; any other key takes its
# default's type. A key whose default is None also accepts null.
TYPES = {
    "data.dir": str,
    "data.path": str,
    "train.steps_per_epoch": int,
    "run.dir": str,
    "callbacks.profile": (str, int, list),
    "run.verbose": (str, int),
    "execution.onednn": bool,
    "execution.devices": str,
    "execution.mode": str,
}

CHOICES = {
    "data.source": ["tfds", "synthetic", "folder"],
    "data.augment_on": ["auto", "device", "host"],
    "data.augment_engine": ["auto", "keras_cv", "keras"],
    "execution.backend": ["tensorflow", "jax"],
    "execution.mode": ["eager", "graph", "xla"],
    "execution.precision": ["float32", "mixed_float16", "mixed_bfloat16"],
    "execution.strategy": ["none", "mirrored", "multi_worker"],
    "run.verbose": ["auto", 0, 1, 2],
}

# Values no run can use, refused before anything is built: key -> (test, what it needs).
LIMITS = {
    "train.epochs": (lambda v: v >= 1, "at least 1"),
    "train.lr": (lambda v: math.isfinite(v) and v > 0, "a finite number above 0"),
    "data.batch_size": (lambda v: v >= 1, "at least 1"),
    "data.synthetic_examples": (lambda v: v >= 1, "at least 1"),
    "train.steps_per_epoch": (lambda v: v >= 1, "at least 1, or null for one pass"),
}

TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number",
              str: "a string", list: "a list", dict: "a mapping"}
TYPES_BY_NAME = {"bool": bool, "int": int, "float": float, "str": str, "list": list}


def resolve(name, config_files=(), overrides=(), announce=print):
    """Returns the resolved config of recipe `name` as a nested dict.

    Args:
        name: the recipe's name, also the stem of its YAML in `configs/`.
        config_files: extra YAML files, applied in order.
        overrides: `key=value` strings; values are parsed as YAML.
        announce: called with one line per command-line override.
    """
    module = module_of(name)
    config = copy.deepcopy(DEFAULTS)
    types, choices = {**TYPES}, {**CHOICES}
    for key, entry in recipe_schema(module).items():
        if isinstance(entry, list):
            choices[key] = entry
        else:
            types[key] = TYPES_BY_NAME[entry]
    # A key whose default is null accepts null, whatever the module's YAML sets.
    nullable = {key for key, value in _flatten(DEFAULTS).items() if value is None}

    def schema_of(tree):
        return {key: (types.get(key, type(value)), value is None or key in nullable,
                      choices.get(key), _number_items(value))
                for key, value in _flatten(tree).items()}

    # The module's YAML is checked as a user's file is: against the defaults
    # for their keys, against CONFIG_SCHEMA for the keys it adds.
    module_yaml = CONFIGS_DIR / f"{module}.yaml"
    if module_yaml.exists():
        known = schema_of(DEFAULTS)
        for key, value in _flatten(_read_yaml(module_yaml, module)).items():
            if key.partition(".")[0] not in DEFAULTS:
                raise UserError(f"{module_yaml}: unknown section in '{key}'; "
                                f"sections are {', '.join(DEFAULTS)}.")
            if key not in known:  # a key of its own: typed by CONFIG_SCHEMA, or by this value
                if isinstance(value, str) and NUMBER_READ_AS_TEXT.fullmatch(value):
                    value = float(value)
                known[key] = (types.get(key, type(value)), True, choices.get(key), None)
            _set(config, key, _checked(known, key, value, f"in {module_yaml}"))
    schema = schema_of(config)

    layers = [CONFIGS_DIR / f"{name}.yaml"] if name != module else []
    for path in [*layers, *map(Path, config_files)]:
        for key, value in _flatten(_read_yaml(path, module)).items():
            _set(config, key, _checked(schema, key, value, f"in {path}"))
    for item in overrides:
        key, value = _parse_override(item)
        _set(config, key, _checked(schema, key, value, "on the command line"))
        announce(f"override: {key} = {value!r}")
    execution = config["execution"]
    if execution["mode"] is None:
        execution["mode"] = COMPILED_MODE[execution["backend"]]
    if execution["backend"] == "jax":
        _check_jax(module, config)
    return {"recipe": name, **config}


# What `execution.mode: null` means on each backend: its compiled training step.
COMPILED_MODE = {"tensorflow": "graph", "jax": "xla"}

# Recipe modules that teach TensorFlow itself, and the feature that keeps them there.
TENSORFLOW_ONLY_RECIPES = {
    "graph_lessons": "the tf.function lessons",
    "revnet_cifar10": "RevNet's tf.custom_gradient",
}


def _check_jax(module, config):
    """Refuses, before anything runs, what `execution.backend=jax` cannot do:
    each of these is TensorFlow's own."""
    execution, callbacks = config["execution"], config["callbacks"]
    refused = [
        (module in TENSORFLOW_ONLY_RECIPES, TENSORFLOW_ONLY_RECIPES.get(module)),
        (execution["mode"] == "graph",
         "execution.mode=graph, a tf.function (under jax: execution.mode=xla, jax.jit, or eager)"),
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
            raise UserError(f"execution.backend=jax cannot run {feature}: it is TensorFlow's. "
                            "Drop execution.backend=jax (TensorFlow is the default).")


def recipe_schema(module):
    """The `CONFIG_SCHEMA` literal of recipe module `module`, read without
    importing it (which would import TensorFlow): `{key: type name or list
    of choices}` for the keys its YAML adds whose value there does not tell
    their type (null: "the variant's") or that take one of a few values."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text())
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "CONFIG_SCHEMA"):
            return ast.literal_eval(node.value)
    return {}


def dump(config):
    """Returns `config` as YAML text, sections in their usual order."""
    return yaml.safe_dump(config, sort_keys=False)


def _read_yaml(path, module):
    """The mapping in `path`, less its `recipe:` key, which must name `module`."""
    if not path.is_file():
        raise UserError(f"Config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise UserError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of sections, "
                        f"got {type(data).__name__}.")
    written_for = data.pop("recipe", module)
    if written_for != module:
        raise UserError(f"{path} is written for the '{written_for}' recipe (its "
                        f"`recipe:` key says so); it does not apply to '{module}'.")
    return data


def _parse_override(item):
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"Expected key=value, got '{item}' "
                        f"(for example train.epochs=2).")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise UserError(f"Cannot parse the value of '{item}' as YAML.") from None
    glued = _glued_key(value)
    if glued:
        # YAML reads {padding:4} as the key 'padding:4' with no value.
        name, _, rest = glued.partition(":")
        raise UserError(f"In '{item}', '{glued}' needs a space after the colon: "
                        f"write '{name}: {rest}' (a shell strips the quotes of "
                        f'"{name}":{rest}, so quote the whole override).')
    return key.strip(), value


def _glued_key(value):
    """The first mapping key like 'padding:4' (with no value) inside `value`."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if isinstance(key, str) and ":" in key and inner is None:
                return key
            found = _glued_key(inner)
            if found:
                return found
    if isinstance(value, list):
        return next(filter(None, map(_glued_key, value)), None)
    return None


def _flatten(tree, prefix=""):
    flat = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and (value or not prefix):
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _set(config, dotted, value):
    *parents, leaf = dotted.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _checked(schema, key, value, origin):
    """Returns `value` converted to `key`'s type, or raises a `UserError`."""
    if key not in schema:
        close = difflib.get_close_matches(key, schema, n=3, cutoff=0.6)
        section = key.partition(".")[0]
        siblings = [k for k in schema if k.startswith(section + ".")]
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        valid = (f" Keys in '{section}': {', '.join(siblings)}." if siblings
                 else f" Sections: {', '.join(DEFAULTS)}.")
        raise UserError(f"Unknown config key '{key}' {origin}.{hint}{valid}")
    expected, nullable, choices, item_type = schema[key]
    if value is None and nullable:
        return None
    if expected is float and isinstance(value, str):
        try:  # YAML 1.1 reads 1e-3 as a string
            value = float(value)
        except ValueError:
            pass
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if expected is not type(None) and (
        not isinstance(value, expected)
        or (isinstance(value, bool) and expected is not bool)
    ):
        wanted = " or ".join(TYPE_NAMES[t] for t in (expected if isinstance(expected, tuple) else (expected,)))
        raise UserError(f"Config key '{key}' expects {wanted}, "
                        f"got {value!r} ({type(value).__name__}) {origin}.")
    if choices is not None and value not in choices:
        raise UserError(f"Config key '{key}' must be one of "
                        f"{', '.join(map(str, choices))}; got {value!r} {origin}.")
    if item_type is not None and isinstance(value, list):
        for item in value:
            if not isinstance(item, item_type) or isinstance(item, bool):
                raise UserError(f"Config key '{key}' expects a list of "
                                f"{TYPE_NAMES[item_type].removeprefix('a ').removeprefix('an ')}s, "
                                f"got {item!r} in {value!r} {origin}.")
    if key in LIMITS and not LIMITS[key][0](value):
        raise UserError(f"Config key '{key}' must be {LIMITS[key][1]}, got {value!r} {origin}.")
    return value


# What YAML 1.1 (PyYAML) reads as a string although it means a number: an
# exponent without a dot, 1e-4; read as the number, as a user's value is.
NUMBER_READ_AS_TEXT = re.compile(r"[-+]?(\d+|\d*\.\d+)[eE][-+]?\d+")


def _number_items(default):
    """int or float when `default` is a non-empty list of that number type, else None."""
    if isinstance(default, list) and default:
        kinds = {type(item) for item in default}
        if len(kinds) == 1 and kinds <= {int, float}:
            return kinds.pop()
    return None
