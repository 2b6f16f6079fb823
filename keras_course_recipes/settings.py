"""A recipe's settings: every key's type, choices and range, and the checks
that give a wrong `key=value` (or a key set in CONFIG) one line that names
it, before Keras starts. `resolve` layers them: defaults < the recipe's
CONFIG < YAML files < the command line."""

import ast
import copy
import difflib
import functools
import math
from pathlib import Path

import yaml

from keras_course_recipes.errors import UserError


# Every run's keys beside its recipe's CONFIG, in one place for a recipe file and
# `recipes run` alike: the data section's are data.py's DEFAULTS (and augment.py's for
# a recipe that augments), the model and train sections are the recipe's own.
DEFAULTS = {
    "execution": {
        "backend": "tensorflow",  # tensorflow | jax | torch: Keras' backend (a recipe file's: KERAS_BACKEND's)
        "mode": None,  # eager | graph | xla; null: Keras' default step (graph; jax: xla; torch: eager)
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
        "dir": None,  # None: runs/NAME/<timestamp>; an existing run's resumes it
        "resume": False,  # continue the newest unfinished run of these settings
        "verbose": "auto",  # auto | 0 | 1 | 2, as model.fit's; auto: 1 on a terminal, else 2
        "export": False,  # also write the final model as a SavedModel, to serve without this code
    },
}
# The execution modes each Keras backend has, and what `execution.mode: null` means there: Keras'
# own default step (on torch, Keras compiles only with jit_compile=True, which runs torch.compile).
BACKEND_MODES = {"tensorflow": ("eager", "graph", "xla"), "jax": ("eager", "xla"),
                 "torch": ("eager", "xla")}
COMPILED_MODE = {"tensorflow": "graph", "jax": "xla", "torch": "eager"}
# Types a key's default does not show (a key whose default is None also takes null).
TYPES = {"data.dir": str, "data.path": str, "train.steps_per_epoch": int, "run.dir": str,
         "run.verbose": (str, int), "execution.mode": str, "execution.onednn": bool,
         "callbacks.profile": (str, int, list), "execution.devices": str}
CHOICES = {"execution.backend": list(BACKEND_MODES),
           "execution.strategy": ["none", "mirrored", "multi_worker"],
           # What every recipe logs: a metric it does not log could never pick a best epoch.
           "callbacks.monitor": ["val_accuracy", "val_loss", "accuracy", "loss"],
           "data.source": ["tfds", "synthetic", "folder"],
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
    "execution.timeout_s": (lambda v: v > 0, "above 0"),
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
# A recipe's own keys are typed by their value in CONFIG, unless their name says more: a
# student's `"epochs": "2"` or `"hidden_units": 512` is then one line, not a traceback in Keras.
TYPES_BY_NAME = {
    **dict.fromkeys(["epochs", "validation_freq", "dense_units", "init_filters", "depth",
                     "growth_rate", "whitening_images", "warmup_epochs", "layers_per_block",
                     "whitening_bias_epochs", "lookahead_start_epoch"], int),
    **dict.fromkeys(["lr", "dropout", "conv_dropout", "dense_dropout", "label_smoothing",
                     "momentum", "batch_norm_momentum", "muon_momentum", "bias_lr_scale",
                     "muon_lr", "weight_decay", "lr_decay", "compression", "lookahead_decay"],
                    float),
    **dict.fromkeys(["hidden_units", "filters", "widths", "growth_rates"], list),
    "units": (int, list),
}
# How alike a key the defaults lack and another key of its section may be before it
# reads as a misspelling of it ("droput" and "dropout" are 0.92; "momentum" and
# "muon_momentum", both real keys, 0.76).
NEAR_MISS = 0.85
TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
              list: "a list", dict: "a mapping"}


def defaults(recipe_config, folder=Path(__file__).parent):
    """`DEFAULTS` for a recipe whose CONFIG is `recipe_config`: with the data section
    it reads (`data_defaults`), and empty model and train sections, its own."""
    return {"data": data_defaults(recipe_config.get("data", {}), folder), "model": {},
            "train": {}, **copy.deepcopy(DEFAULTS)}


def resolve(name, defaults, config, layers=(), overrides=(), schema=None, announce=None,
            origin=None, declared=()):
    """Recipe `name`'s settings, `recipe: name` first, as `Settings`: `defaults` <
    its `config` (the CONFIG object, written `origin`), which may add keys of its
    own, typed by `schema` (a type's name, or a list of choices), `TYPES_BY_NAME`
    or their value < each `(origin, mapping)` of `layers` < the `key=value`
    overrides, each told to `announce`. Every value is `check`ed, and a key of
    the recipe's own that reads as a misspelling of its neighbour is refused.
    `declared`: the keys the recipe's file writes in its CONFIG (`written_keys`),
    so that one a later change to CONFIG dropped is not called unknown.

    A key of the recipe's own takes None where its type is declared (`TYPES`, a
    type's name in `schema`: "None: the variant's") or where nothing says what
    it takes; where its name says (`"lr": None`) or its choices do, None is no
    value, and one line."""
    tree = copy.deepcopy(defaults)
    types, choices, limits = dict(TYPES), dict(CHOICES), LIMITS
    for key, entry in (schema or {}).items():
        if isinstance(entry, list):
            choices[key] = entry
        else:
            types[key] = {"bool": bool, "int": int, "float": float, "str": str, "list": list}[entry]
    nullable = {key for key, value in flatten(tree).items() if value is None}

    def entry(key, value, own=False):  # (type, nullable, choices, list items' type, range)
        leaf = key.rpartition(".")[2]
        named = TYPES_BY_NAME.get(leaf) if own else None
        null = (key in types or (value is None and named is None and key not in choices)
                if own else value is None or key in nullable)
        # object: a key whose value is None and whose type nothing declares takes any value
        return (types.get(key) or named or (object if value is None else type(value)), null,
                choices.get(key), _number_items(value), limits.get(key) or LIMITS_BY_NAME.get(leaf))

    known = {key: entry(key, value) for key, value in flatten(tree).items()}
    origin = origin or f"in {name}.py's CONFIG"
    own = {key: value for key, value in flatten(config).items() if key not in known}
    _refuse_near_misses(own, [*known, *own], origin)
    for key, value in own.items():
        known[key] = entry(key, value, own=True)  # a key of the recipe's own
    for key, value in flatten(config).items():
        set_key(tree, key, check(known, key, value, origin))
    known = {key: entry(key, value, own=key in own) for key, value in flatten(tree).items()}
    items = [(origin, key, value) for origin, layer in layers
             for key, value in flatten(layer).items()]
    items += [("on the command line", *parse_override(item)) for item in overrides]
    for origin, key, value in items:
        if key not in known and key in declared:
            section = key.rpartition(".")[0]
            raise UserError(f"Config key '{key}' {origin}: CONFIG lacks it. The recipe's file "
                            f"writes it there, but a later change to CONFIG (an update of its "
                            f"'{section}' section?) dropped it: put it back in CONFIG to set it.")
        set_key(tree, key, check(known, key, value, origin))
        if announce and origin == "on the command line":
            announce(f"override: {key} = {value!r}")
    tree = Settings.of({"recipe": name, **tree})
    _check_dataset(tree["data"]["name"])
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
    return tree


def _check_dataset(name):
    """Refuses a `data.name` keras_course_recipes/data.py does not know (its `DATASETS`,
    read as a literal): `show` refuses what `run` would."""
    known = list(module_literal(Path(__file__).parent / "data.py", "DATASETS"))
    if name not in known:
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        raise UserError(f"Unknown data.name '{name}'. Known datasets: {', '.join(known)}."
                        + (f" Did you mean '{close[0]}'?" if close else ""))


def _refuse_near_misses(own, keys, origin):
    """A `UserError` when a key of the recipe's own is `NEAR_MISS`-alike another key of
    its section: `"droput"` beside `"dropout"` would train without either noticing."""
    for key in own:
        section, _, leaf = key.rpartition(".")
        siblings = [k.rpartition(".")[2] for k in keys
                    if k != key and k.rpartition(".")[0] == section]
        close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=NEAR_MISS)
        if close:
            pair = sorted([key, f"{section}.{close[0]}"])
            raise UserError(f"Config keys '{pair[0]}' and '{pair[1]}' are both set {origin}, and "
                            "one looks like a misspelling of the other: keep the one the recipe "
                            "reads (a key of your own needs a name unlike its neighbours').")


class MissingKey(UserError, KeyError):
    """A key that a recipe reads and its settings lack."""

    __str__ = Exception.__str__  # KeyError's would quote the line


class Settings(dict):
    """Resolved settings, a plain mapping but for one thing: reading a key that a
    section lacks (a CONFIG key renamed or deleted) is a `MissingKey` that names
    it, instead of a `KeyError` deep in a recipe. `plain` turns it back into dicts."""

    def __init__(self, mapping=(), path=""):
        super().__init__(mapping)
        self.path = path

    @classmethod
    def of(cls, tree, path=""):
        return cls({key: cls.of(value, f"{path}{key}.") if isinstance(value, dict) else value
                    for key, value in tree.items()}, path)

    def __missing__(self, key):
        close = difflib.get_close_matches(str(key), [str(k) for k in self], n=1, cutoff=0.6)
        name = f"{self.path}{key}"
        raise MissingKey(f"this recipe reads the config key '{name}', which its settings lack"
                         + (f" (they have '{self.path}{close[0]}')" if close else "")
                         + ": put it back in CONFIG.")


def plain(tree):
    """`tree` with every `Settings` as a dict: what YAML's safe dumper writes."""
    if isinstance(tree, dict):
        return {key: plain(value) for key, value in tree.items()}
    return [plain(item) for item in tree] if isinstance(tree, list) else tree


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
    value = _plain(value)
    if expected is float and isinstance(value, (str, int)) and not isinstance(value, bool):
        try:  # YAML 1.1 reads 1e-3 as a string
            value = float(value)
        except ValueError:
            pass
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        wanted = " or ".join(TYPE_NAMES[t] for t in (expected if isinstance(expected, tuple)
                                                     else (expected,)))
        if value is None:  # not a value of this key's
            raise UserError(f"Config key '{key}' expects {wanted}, got None {origin}: it "
                            "needs a value.")
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


def _plain(value):
    """`value` with each NumPy number in it as Python's (`np.float32(1e-3)` as 0.001,
    its shortest text: what the student wrote), as Keras and config.yaml take them."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():
        item = value.item()
        return float(str(value)) if isinstance(item, float) else item
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
    importing it (the module imports Keras); `NotLiteral` where the module's
    value could differ from it."""
    path = Path(path)
    status = path.stat()
    found = _file_literal(path, status.st_mtime_ns, status.st_size, name)
    if found is _UNSET and default is None:
        raise UserError(f"{path} has no {name} literal.")
    return default if found is _UNSET else copy.deepcopy(found)


@functools.cache
def _file_literal(path, mtime_ns, size, name):
    """`source_literal` of the file at `path`, parsed once per version of the
    file: every resolved config reads the same few modules' literals."""
    return source_literal(path.read_text(), name, path, missing=_UNSET)


_UNSET = object()  # `_file_literal` of a name the file does not assign


class NotLiteral(Exception):
    """A module's value that only running it gives: an expression, or a later change."""


def source_literal(source, name, path="<source>", missing=None):
    """The literal assigned to `name` at the top level of Python `source`, or `missing`;
    `NotLiteral` when its value is an expression (`1e-3 * 2`, a name, a call) or a
    later top-level statement (outside `if __name__ == "__main__":`) mentions it."""
    body = ast.parse(source).body
    places = _assignments(body, name)
    if not places:
        return missing
    later = [node for node in body[places[-1] + 1:]
             if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))
             and not _is_main_block(node)]
    if any(isinstance(found, ast.Name) and found.id == name
           for node in later for found in ast.walk(node)):
        raise NotLiteral(f"{path}: {name} is changed after it is assigned")
    try:
        return ast.literal_eval(body[places[-1]].value)
    except ValueError:
        raise NotLiteral(f"{path}: {name} holds an expression") from None


def _assignments(body, name):
    """The indexes in a module's `body` of the statements that assign `name`."""
    return [index for index, node in enumerate(body) if isinstance(node, ast.Assign)
            and getattr(node.targets[0], "id", None) == name]


def _is_main_block(node):
    """Whether `node` is `if __name__ == "__main__":`."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and getattr(test.left, "id", None) == "__name__")


def written_keys(path, name):
    """The dotted keys of the dict assigned to `name` at the top level of the Python
    file `path`, as written (values may be expressions); empty where it is not a
    dict there or the file cannot be read."""
    try:
        body = ast.parse(Path(path).read_text()).body
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return set()
    places = _assignments(body, name)

    def keys(node, prefix):
        found = set()
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                if isinstance(value, ast.Dict) and value.keys:
                    found |= keys(value, f"{prefix}{key.value}.")
                elif prefix:
                    found.add(f"{prefix}{key.value}")
        return found

    node = body[places[-1]].value if places else None
    return keys(node, "") if isinstance(node, ast.Dict) else set()


def literal_at(path, name, dotted):
    """The literal at `dotted` ("execution.backend") inside the dict literal assigned to
    `name` in the file `path`, None where it is not set; a `UserError` where it is an
    expression: it is read before Keras loads, so only a literal can be."""
    body = ast.parse(Path(path).read_text()).body
    places = _assignments(body, name)
    node = body[places[-1]].value if places else None
    for part in dotted.split("."):
        if not isinstance(node, ast.Dict):
            return None
        node = next((value for key, value in zip(node.keys, node.values)
                     if isinstance(key, ast.Constant) and key.value == part), None)
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise UserError(f"{path}, line {node.lineno}: {name}'s {dotted} is read before Keras "
                        f"loads, to choose its backend, so it must be written as a plain value "
                        f"(for example \"jax\"), not an expression.") from None


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
    """The data section's keys: keras_course_recipes/data.py's DEFAULTS, and keras_course_recipes/augment.py's
    for a recipe whose CONFIG lists `data.augment`."""
    defaults = module_literal(folder / "data.py", "DEFAULTS")
    if "augment" in data_config:
        if not (folder / "augment.py").is_file():
            raise UserError(f"This recipe augments its images, and {folder / 'augment.py'} is "
                            "missing: copy keras_course_recipes/augment.py beside keras_course_recipes/data.py.")
        defaults.update(module_literal(folder / "augment.py", "DEFAULTS"))
    return defaults
