"""Resolves a recipe's configuration, and checks every value before a run starts.

Precedence, lowest first: `DEFAULTS` (with recipes/data.py's `DEFAULTS` as
the data section) < the recipe module's `CONFIG` < `configs/NAME.yaml` when
the recipe is a YAML of its own < each `--config` file in order <
`key=value` overrides. The module's CONFIG may add keys of its own (its
model's fields, say), typed by their value there or by the module's
`CONFIG_SCHEMA`; everything after it may only set keys that exist. Unknown
keys, values of the wrong type and numbers out of their range (`LIMITS`)
are `UserError`s that name the key, raised before anything is built or
written. The resolved config records the recipe's name under the top-level
key `recipe`.
"""

import ast
import copy
import difflib
import math
from pathlib import Path

import yaml

from recipes import CONFIGS_DIR, PACKAGE_DIR, UserError, module_of

DEFAULTS = {
    "data": None,  # recipes/data.py's DEFAULTS, read in `defaults()`
    "model": {},
    "train": {
        "epochs": 10,
        "steps_per_epoch": None,  # None: one pass over the training split
        "lr": 1e-3,
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

# The range of every number a user can give, checked when the config is
# resolved, before anything is built or written: key -> (test, what it needs).
# A key of a recipe's own is checked by its last part (`model.dropout`,
# `model.hidden_units`), whatever the recipe.
LIMITS = {
    "train.epochs": (lambda v: v >= 1, "at least 1"),
    "train.lr": (lambda v: math.isfinite(v) and v > 0, "a finite number above 0"),
    "train.steps_per_epoch": (lambda v: v >= 1, "at least 1, or null for one pass"),
    "data.batch_size": (lambda v: v >= 1, "at least 1"),
    "data.synthetic_examples": (lambda v: v >= 1, "at least 1"),
    "data.shuffle_buffer": (lambda v: v >= 1, "at least 1"),
    "data.validation_split": (lambda v: 0 <= v < 1, "at least 0 and below 1 (0: validate on the test split)"),
    "execution.seed": (lambda v: 0 <= v < 2**32, "from 0 to 2**32 - 1 (NumPy's seed range)"),
    "execution.steps_per_execution": (lambda v: v >= 1, "at least 1"),
    "execution.timeout_s": (lambda v: v > 0, "above 0"),
    "run.dir": (lambda v: v.strip() != "", "a folder's path, not empty (null: runs/NAME/<timestamp>)"),
}
# By a key's last part, for the keys recipes add.
LIMITS_BY_NAME = {
    "dropout": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "conv_dropout": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "dense_dropout": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "label_smoothing": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "momentum": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "batch_norm_momentum": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
    "weight_decay": (lambda v: math.isfinite(v) and v >= 0, "a finite number, at least 0"),
    "lr_decay": (lambda v: math.isfinite(v) and v >= 0, "a finite number, at least 0"),
    "warmup_epochs": (lambda v: v >= 0, "at least 0"),
    "bias_lr_scale": (lambda v: math.isfinite(v) and v > 0, "a finite number above 0"),
    "hidden_units": (lambda v: all(n >= 1 for n in v), "a list of layer widths, each at least 1"),
    "filters": (lambda v: all(n >= 1 for n in v), "a list of widths, each at least 1"),
    "widths": (lambda v: len(v) >= 1 and all(n >= 1 for n in v), "a list of widths, each at least 1"),
    "growth_rates": (lambda v: len(v) >= 1 and all(n >= 1 for n in v), "a list of widths, each at least 1"),
    "units": (lambda v: v >= 1 if isinstance(v, int) else all(n >= 1 for n in v), "at least 1"),
    "dense_units": (lambda v: v >= 1, "at least 1"),
    "init_filters": (lambda v: v >= 1, "at least 1"),
    "depth": (lambda v: v >= 1, "at least 1"),
    "growth_rate": (lambda v: v >= 1, "at least 1"),
    "compression": (lambda v: 0 < v <= 1, "above 0 and at most 1"),
    "layers_per_block": (lambda v: v >= 0, "at least 0"),
    "whitening_images": (lambda v: v >= 1, "at least 1"),
    "whitening_bias_epochs": (lambda v: v >= 0, "at least 0"),
    "validation_freq": (lambda v: v >= 1, "at least 1"),
    "lookahead_start_epoch": (lambda v: v >= 0, "at least 0"),
    "muon_lr": (lambda v: math.isfinite(v) and v > 0, "a finite number above 0"),
    "muon_momentum": (lambda v: 0 <= v < 1, "at least 0 and below 1"),
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
    # What every recipe logs: a metric it does not log could never pick a best epoch.
    "callbacks.monitor": ["val_accuracy", "val_loss", "accuracy", "loss"],
}

TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number",
              str: "a string", list: "a list", dict: "a mapping"}
TYPES_BY_NAME = {"bool": bool, "int": int, "float": float, "str": str, "list": list}


def defaults():
    """`DEFAULTS`, with the data section recipes/data.py declares."""
    tree = copy.deepcopy(DEFAULTS)
    tree["data"] = module_literal(PACKAGE_DIR / "data.py", "DEFAULTS")
    return tree


def resolve(name, config_files=(), overrides=(), announce=print):
    """Returns the resolved config of recipe `name` as a nested dict.

    Args:
        name: the recipe's name: a recipe module's, or the stem of a YAML in
            `configs/` that names its module.
        config_files: extra YAML files, applied in order.
        overrides: `key=value` strings; values are parsed as YAML.
        announce: called with one line per command-line override.
    """
    module = module_of(name)
    config = defaults()
    types, choices = {**TYPES}, {**CHOICES}
    for key, entry in recipe_schema(module).items():
        if isinstance(entry, list):
            choices[key] = entry
        else:
            types[key] = TYPES_BY_NAME[entry]
    # A key whose default is null accepts null, whatever the recipe sets.
    nullable = {key for key, value in _flatten(config).items() if value is None}

    def schema_of(tree):
        return {key: (types.get(key, type(value)), value is None or key in nullable,
                      choices.get(key), _number_items(value))
                for key, value in _flatten(tree).items()}

    # The module's CONFIG is checked as a user's file is: against the
    # defaults for their keys, against CONFIG_SCHEMA for the keys it adds.
    source = PACKAGE_DIR / f"{module}.py"
    known = schema_of(config)
    for key, value in _flatten(module_literal(source, "CONFIG")).items():
        if key.partition(".")[0] not in DEFAULTS:
            raise UserError(f"{source}: unknown section in '{key}'; "
                            f"sections are {', '.join(DEFAULTS)}.")
        if key not in known:  # a key of its own: typed by CONFIG_SCHEMA, or by this value
            known[key] = (types.get(key, type(value)), True, choices.get(key), None)
        _set(config, key, _checked(known, key, value, f"in {source}'s CONFIG"))
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
    _check_together(config)
    return {"recipe": name, **config}


def _check_together(config):
    """Refuses settings that are each valid but cannot work together, or
    whose form a type does not say."""
    profile = config["callbacks"]["profile"]
    if profile is not None and _steps(profile) is None:
        raise UserError("callbacks.profile takes the first and last training step to profile, "
                        f"e.g. callbacks.profile=5,8 (or one step: 5); got {profile!r}.")
    model = config["model"]
    if "widths" in model and len(model["widths"]) != len(model.get("growth_rates", [])):
        raise UserError(f"model.widths and model.growth_rates need one entry per block each; got "
                        f"{model['widths']} and {model.get('growth_rates')}.")
    train = config["train"]
    if train.get("warmup_epochs") and train.get("schedule") == "step":
        raise UserError("train.warmup_epochs works with train.schedule=cosine or constant; "
                        "the step schedule (the paper's) has no warm-up. Set one of them.")
    if train.get("warmup_epochs") and train["warmup_epochs"] >= train["epochs"]:
        raise UserError(f"train.warmup_epochs={train['warmup_epochs']} leaves no epoch of the "
                        f"{train['epochs']} to train after it; lower it.")


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
    """The `CONFIG_SCHEMA` of recipe module `module`: `{key: type name or list
    of choices}` for the keys its CONFIG adds whose value there does not tell
    their type (None: "the variant's") or that take one of a few values."""
    return module_literal(PACKAGE_DIR / f"{module}.py", "CONFIG_SCHEMA", default={})


def module_literal(path, name, default=None):
    """The literal assigned to `name` at the top level of the Python file
    `path`, read without importing it: a recipe module imports TensorFlow,
    and `list` and `show` answer without it."""
    for node in ast.parse(Path(path).read_text()).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == name):
            return ast.literal_eval(node.value)
    if default is None:
        raise UserError(f"{path} has no {name} literal.")
    return default


def dump(config):
    """Returns `config` as YAML text, sections in their usual order."""
    return yaml.safe_dump(config, sort_keys=False)


def _read_yaml(path, module):
    """The mapping in `path`, less its `recipe:` key, which must name `module`."""
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
    limit = LIMITS.get(key) or LIMITS_BY_NAME.get(key.rpartition(".")[2])
    if limit is not None and not _within(limit[0], value):
        raise UserError(f"Config key '{key}' must be {limit[1]}, got {value!r} {origin}.")
    return value


def _within(test, value):
    """Whether `value` passes a limit's test; a value of a type it cannot
    judge (null, text) is left to the type check."""
    try:
        return test(value)
    except TypeError:
        return True


def _number_items(default):
    """int or float when `default` is a non-empty list of that number type, else None."""
    if isinstance(default, list) and default:
        kinds = {type(item) for item in default}
        if len(kinds) == 1 and kinds <= {int, float}:
            return kinds.pop()
    return None
