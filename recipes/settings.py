"""A recipe's settings: every key's type, choices and range, and the checks
that give a wrong `key=value` (or a key set in CONFIG) one line that names
it, before Keras starts. `resolve` layers them: defaults < the recipe's
CONFIG < YAML files < the command line."""

import ast
import copy
import difflib
import functools
import math
import sys
from pathlib import Path

import yaml

from recipes.errors import UserError


# A copied recipe's keys beside its CONFIG and the data module's DEFAULTS.
DEFAULTS = {"run": {
    "dir": None,  # None: runs/NAME/<timestamp>; an existing run's resumes it
    "verbose": "auto",  # auto | 0 | 1 | 2, as model.fit's; auto: 1 on a terminal, else 2
}}
# The execution modes each Keras backend has, and what `execution.mode: null` means there: Keras'
# own default step (on torch, Keras compiles only with jit_compile=True, which runs torch.compile).
BACKEND_MODES = {"tensorflow": ("eager", "graph", "xla"), "jax": ("eager", "xla"),
                 "torch": ("eager", "xla")}
COMPILED_MODE = {"tensorflow": "graph", "jax": "xla", "torch": "eager"}
# Types a key's default does not show (a key whose default is None also takes null).
TYPES = {"data.dir": str, "data.path": str, "train.steps_per_epoch": int, "run.dir": str,
         "run.verbose": (str, int), "execution.mode": str, "execution.onednn": bool}
CHOICES = {"data.source": ["tfds", "synthetic", "folder"],
           "data.augment_on": ["auto", "device", "host"],
           "data.augment_engine": ["auto", "keras_cv", "keras"],
           "execution.mode": ["eager", "graph", "xla"],
           "execution.precision": ["float32", "mixed_float16", "mixed_bfloat16"],
           "run.verbose": ["auto", 0, 1, 2]}
ONE, ZERO = (lambda v: v >= 1, "at least 1"), (lambda v: v >= 0, "at least 0")
FRACTION = (lambda v: 0 <= v < 1, "at least 0 and below 1")
POSITIVE = (lambda v: math.isfinite(v) and v > 0, "a finite number above 0")
WIDTHS = (lambda v: len(v) >= 1 and all(n >= 1 for n in v), "a list of widths, each at least 1")
# Every number's range: by key, or for a recipe's own keys by the key's last part.
LIMITS = {
    "train.epochs": ONE, "train.lr": POSITIVE, "data.batch_size": ONE,
    "data.synthetic_examples": ONE, "data.shuffle_buffer": ONE, "execution.steps_per_execution": ONE,
    "train.steps_per_epoch": (lambda v: v >= 1, "at least 1, or null for one pass"),
    "data.validation_split": (FRACTION[0], "at least 0 and below 1 (0: validate on the test split)"),
    "execution.seed": (lambda v: 0 <= v < 2**32, "from 0 to 2**32 - 1 (NumPy's seed range)"),
    "run.dir": (lambda v: v.strip() != "", "a folder's path, not empty (null: runs/NAME/<timestamp>)"),
}
LIMITS_BY_NAME = {
    **dict.fromkeys(["dropout", "conv_dropout", "dense_dropout", "label_smoothing", "momentum",
                     "batch_norm_momentum", "muon_momentum"], FRACTION),
    **dict.fromkeys(["bias_lr_scale", "muon_lr"], POSITIVE),
    **dict.fromkeys(["weight_decay", "lr_decay"], (lambda v: math.isfinite(v) and v >= 0,
                                                   "a finite number, at least 0")),
    **dict.fromkeys(["dense_units", "init_filters", "depth", "growth_rate", "whitening_images",
                     "validation_freq"], ONE),
    **dict.fromkeys(["warmup_epochs", "layers_per_block", "whitening_bias_epochs",
                     "lookahead_start_epoch"], ZERO),
    **dict.fromkeys(["widths", "growth_rates"], WIDTHS),
    "hidden_units": (lambda v: all(n >= 1 for n in v), "a list of layer widths, each at least 1"),
    "filters": (lambda v: all(n >= 1 for n in v), WIDTHS[1]),
    "units": (lambda v: v >= 1 if isinstance(v, int) else all(n >= 1 for n in v), "at least 1"),
    "compression": (lambda v: 0 < v <= 1, "above 0 and at most 1"),
    "lookahead_decay": (lambda v: 0 < v < 1, "above 0 and below 1"),
}
TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
              list: "a list", dict: "a mapping"}


def resolve(name, defaults, config, layers=(), overrides=(), schema=None, announce=None,
            types=None, choices=None, limits=None, origin=None, declared=None):
    """Recipe `name`'s settings, `recipe: name` first: `defaults` < its `config`
    (written `origin`), which may add the keys `declared` (the CONFIG as written;
    default: `config`) has, typed by their value or by `schema` (a type's name,
    or a list of choices) < each `(origin, mapping)` of `layers` < the
    `key=value` overrides, each told to `announce`. Every value is `check`ed;
    `types`, `choices` and `limits` add to this module's tables."""
    tree = copy.deepcopy(defaults)
    types, choices = {**TYPES, **(types or {})}, {**CHOICES, **(choices or {})}
    limits = {**LIMITS, **(limits or {})}
    for key, entry in (schema or {}).items():
        if isinstance(entry, list):
            choices[key] = entry
        else:
            types[key] = {"bool": bool, "int": int, "float": float, "str": str, "list": list}[entry]
    nullable = {key for key, value in flatten(tree).items() if value is None}

    def entry(key, value, null=False):  # (type, nullable, choices, list items' type, range)
        return (types.get(key, type(value)), null or value is None or key in nullable,
                choices.get(key), _number_items(value),
                limits.get(key) or LIMITS_BY_NAME.get(key.rpartition(".")[2]))

    known = {key: entry(key, value) for key, value in flatten(tree).items()}
    for key, value in flatten(config if declared is None else declared).items():
        known.setdefault(key, entry(key, value, null=True))  # a key of the recipe's own
    for key, value in flatten(config).items():
        set_key(tree, key, check(known, key, value, origin or f"in {name}.py's CONFIG"))
    known = {key: entry(key, value) for key, value in flatten(tree).items()}
    items = [(origin, key, value) for origin, layer in layers
             for key, value in flatten(layer).items()]
    items += [("on the command line", *parse_override(item)) for item in overrides]
    for origin, key, value in items:
        set_key(tree, key, check(known, key, value, origin))
        if announce and origin == "on the command line":
            announce(f"override: {key} = {value!r}")
    model, train = tree.get("model", {}), tree["train"]
    if "widths" in model and len(model["widths"]) != len(model.get("growth_rates", [])):
        raise UserError(f"model.widths and model.growth_rates need one entry per block each; got "
                        f"{model['widths']} and {model.get('growth_rates')}.")
    if train.get("warmup_epochs") and train.get("schedule") == "step":
        raise UserError("train.warmup_epochs works with train.schedule=cosine or constant; "
                        "the step schedule (the paper's) has no warm-up. Set one of them.")
    if train.get("warmup_epochs") and train["warmup_epochs"] >= train["epochs"]:
        raise UserError(f"train.warmup_epochs={train['warmup_epochs']} leaves no epoch of the "
                        f"{train['epochs']} to train after it; lower it.")
    if train.get("validation_freq", 1) > train["epochs"]:
        raise UserError(f"train.validation_freq={train['validation_freq']} is above "
                        f"train.epochs={train['epochs']}: the run would never validate, nor save "
                        f"checkpoints/best.keras; use {train['epochs']} to validate after the "
                        "last epoch only.")
    return {"recipe": name, **tree}


def parse_override(item):
    """`key=value` as (key, value), the value read as YAML."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"Expected key=value, got '{item}' (for example train.epochs=2).")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        raise UserError(f"Cannot parse the value of '{item}' as YAML.") from None
    glued = next((k for k in _bare_keys(value) if ":" in k), None)
    if glued:  # YAML reads {padding:4} as the key 'padding:4' with no value
        name, _, rest = glued.partition(":")
        raise UserError(f"In '{item}', '{glued}' needs a space after the colon: write "
                        f"'{name}: {rest}' (a shell strips the quotes of \"{name}\":{rest}, so "
                        "quote the whole override).")
    return key.strip(), value


def _bare_keys(value):
    """The keys with no value of every mapping inside `value`."""
    if isinstance(value, dict):
        return [k for k, v in value.items() if isinstance(k, str) and v is None] + [
            k for v in value.values() for k in _bare_keys(v)]
    return [k for item in value for k in _bare_keys(item)] if isinstance(value, list) else []


def check(schema, key, value, origin):
    """`value` as `key`'s type in `schema` ({key: (type, nullable, choices,
    list items' type, (test, what it needs) or None)}) and in its range;
    else a `UserError` that names the key."""
    if key not in schema:
        close = difflib.get_close_matches(key, schema, n=3, cutoff=0.6)
        section = key.partition(".")[0]
        siblings = [k for k in schema if k.startswith(section + ".")]
        valid = (f" Keys in '{section}': {', '.join(siblings)}." if siblings else
                 f" Sections: {', '.join(dict.fromkeys(k.partition('.')[0] for k in schema))}.")
        raise UserError(f"Unknown config key '{key}' {origin}."
                        + (f" Did you mean {', '.join(close)}?" if close else "") + valid)
    expected, nullable, choices, item_type, limit = schema[key]
    if value is None and nullable:
        return None
    if expected is float and isinstance(value, (str, int)) and not isinstance(value, bool):
        try:  # YAML 1.1 reads 1e-3 as a string
            value = float(value)
        except ValueError:
            pass
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        wanted = " or ".join(TYPE_NAMES[t] for t in (expected if isinstance(expected, tuple)
                                                     else (expected,)))
        raise UserError(f"Config key '{key}' expects {wanted}, "
                        f"got {value!r} ({type(value).__name__}) {origin}.")
    if choices is not None and value not in choices:
        raise UserError(f"Config key '{key}' must be one of "
                        f"{', '.join(map(str, choices))}; got {value!r} {origin}.")
    for item in value if item_type and isinstance(value, list) else []:
        if not isinstance(item, item_type) or isinstance(item, bool):
            kind = TYPE_NAMES[item_type].split(" ", 1)[1]
            raise UserError(f"Config key '{key}' expects a list of {kind}s, "
                            f"got {item!r} in {value!r} {origin}.")
    try:
        within = limit is None or limit[0](value)
    except TypeError:  # text or null where a number goes: the type check's
        within = True
    if not within:
        raise UserError(f"Config key '{key}' must be {limit[1]}, got {value!r} {origin}.")
    return value


def _number_items(default):
    """int or float when `default` is a non-empty list of that number type."""
    kinds = {type(item) for item in default} if isinstance(default, list) else set()
    return kinds.pop() if len(kinds) == 1 and kinds <= {int, float} else None


def flatten(tree, prefix=""):
    """{"a": {"b": 1}} as {"a.b": 1}; an empty mapping below the top is a value."""
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and (value or not prefix):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def set_key(tree, dotted, value):
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def module_literal(path, name, default=None):
    """The literal assigned to `name` in the Python file `path`, read without
    importing it (the data module imports Keras)."""
    path = Path(path)
    status = path.stat()
    found = _file_literal(path, status.st_mtime_ns, status.st_size, name)
    if found is None and default is None:
        raise UserError(f"{path} has no {name} literal.")
    return default if found is None else copy.deepcopy(found)


@functools.cache
def _file_literal(path, mtime_ns, size, name):
    """`source_literal` of the file at `path`, parsed once per version of the
    file: every resolved config reads the same few modules' literals."""
    return source_literal(path.read_text(), name)


def source_literal(source, name):
    """The literal last assigned to `name` at the top level of Python `source`, or None."""
    nodes = [node for node in ast.parse(source).body if isinstance(node, ast.Assign)
             and getattr(node.targets[0], "id", None) == name]
    return ast.literal_eval(nodes[-1].value) if nodes else None


def declared_config(caller):
    """The CONFIG literal as it is written, in the file that calls `main` (namespace
    `caller`) or the notebook cell that last assigned it: the keys a recipe adds. A
    key set afterwards (`CONFIG["train"]["epoch"] = 1`) is checked against it."""
    path = caller.get("__file__")
    if path and Path(path).is_file():
        return module_literal(path, "CONFIG", default={}) or None
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is None:
        return None
    from IPython.core.inputtransformer2 import TransformerManager  # %magics to Python

    for cell in reversed(shell.user_ns.get("In", [])):
        try:
            found = source_literal(TransformerManager().transform_cell(cell), "CONFIG")
        except (SyntaxError, ValueError):  # not Python, or a CONFIG that is no literal
            continue
        if found is not None:
            return found
    return None


def resolve_mode(execution, backend):
    """Sets `execution.mode` (null: `COMPILED_MODE`'s) to a mode `backend` has, or
    refuses it: a tf.function (graph) exists on TensorFlow only."""
    execution["mode"] = execution["mode"] or COMPILED_MODE[backend]
    if execution["mode"] not in BACKEND_MODES[backend]:
        raise UserError(f"execution.mode={execution['mode']} is a tf.function, TensorFlow's; "
                        f"on {backend}, use execution.mode=xla (jit_compile: "
                        f"{'jax.jit' if backend == 'jax' else 'torch.compile'}) or eager.")
    return execution["mode"]


def data_defaults(data_config, folder=Path(__file__).parent):
    """The data section's keys: recipes/data.py's DEFAULTS, and recipes/augment.py's
    for a recipe whose CONFIG lists `data.augment`."""
    defaults = module_literal(folder / "data.py", "DEFAULTS")
    if "augment" in data_config:
        if not (folder / "augment.py").is_file():
            raise UserError(f"This recipe augments its images, and {folder / 'augment.py'} is "
                            "missing: copy recipes/augment.py beside recipes/data.py.")
        defaults.update(module_literal(folder / "augment.py", "DEFAULTS"))
    return defaults
