"""A recipe's settings: the shared keys' types, choices and ranges, a recipe's
own keys' as its `CONFIG_SCHEMA` declares them (`declarations`), and the
checks that give a wrong `key=value` (or a key set in CONFIG) one line that
names it, before Keras starts. `resolve` layers them: defaults < the
recipe's CONFIG < YAML files < the command line. No recipe and none of a
recipe's own keys is named here: a recipe's file declares them."""

import ast
import copy
import difflib
import functools
import math
import operator
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
# The train keys the kit reads: every recipe's CONFIG has the first three, and the harness
# and the run directory read the other two where a recipe's CONFIG has them (its
# CONFIG_SCHEMA gives train.schedule's choices). The rest of the train section, and the
# whole model section, are the recipe's own.
TRAIN_KEYS = ("epochs", "steps_per_epoch", "lr", "validation_freq", "schedule")
# Types a key's default does not show (a key whose default is None also takes null, and of
# the train keys, steps_per_epoch: null is one pass).
TYPES = {"data.dir": str, "data.path": str, "train.epochs": int, "train.steps_per_epoch": int,
         "train.lr": float, "train.validation_freq": int, "train.schedule": str,
         "run.dir": str, "run.verbose": (str, int), "execution.mode": str,
         "execution.onednn": bool, "callbacks.profile": (str, int, list),
         "execution.devices": str, "data.early_size": int, "data.early_crop": bool}
NULLABLE = {"train.steps_per_epoch"}
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
ONE = (lambda v: v >= 1, "at least 1")
FRACTION = (lambda v: 0 <= v < 1, "at least 0 and below 1")
POSITIVE = (lambda v: math.isfinite(v) and v > 0, "a finite number above 0")
# Every shared number's range, by key; a recipe's own keys' are in its CONFIG_SCHEMA.
LIMITS = {
    "train.epochs": ONE, "train.lr": POSITIVE, "train.validation_freq": ONE,
    "data.batch_size": ONE,
    "data.synthetic_examples": ONE, "data.shuffle_buffer": ONE, "execution.steps_per_execution": ONE,
    "data.early_size": ONE, "data.early_epochs": (lambda v: v >= 0, "at least 0"),
    "train.steps_per_epoch": (lambda v: v >= 1, "at least 1, or null for one pass"),
    "data.validation_split": (FRACTION[0], "at least 0 and below 1 (0: validate on the test split)"),
    "execution.seed": (lambda v: 0 <= v < 2**32, "from 0 to 2**32 - 1 (NumPy's seed range)"),
    "run.dir": (lambda v: v.strip() != "", "a folder's path, not empty (null: runs/NAME/<timestamp>)"),
    "execution.timeout_s": (lambda v: v > 0, "above 0"),
}
# How alike a key the defaults lack and another key of its section may be before it
# reads as a misspelling of it ("droput" and "dropout" are 0.92; "momentum" and
# "muon_momentum", both real keys, 0.76).
NEAR_MISS = 0.85
TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
              list: "a list", dict: "a mapping"}
# A CONFIG_SCHEMA's words (`declarations`): type names, the bounds, and the cross-checks.
TYPES_NAMED = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict}
BOUNDS = {"at_least": (operator.ge, "at least"), "above": (operator.gt, "above"),
          "at_most": (operator.le, "at most"), "below": (operator.lt, "below")}
WORDS = {"type", "items", "choices", *BOUNDS, "min_length", "same_length_as", "needs"}


def defaults(recipe_config, folder=Path(__file__).parent):
    """`DEFAULTS` for a recipe whose CONFIG is `recipe_config`: with the data section
    it reads (`data_defaults`), and empty model and train sections, its own."""
    return {"data": data_defaults(recipe_config.get("data", {}), folder), "model": {},
            "train": {}, **copy.deepcopy(DEFAULTS)}


def resolve(name, defaults, config, layers=(), overrides=(), schema=None, announce=None,
            origin=None, declared=()):
    """Recipe `name`'s settings, `recipe: name` first, as `Settings`: `defaults` <
    its `config` (the CONFIG object, written `origin`), which may add keys of its
    own, declared by `schema` (its `CONFIG_SCHEMA`: `declarations`) or typed by
    their value < each `(origin, mapping)` of `layers` < the `key=value`
    overrides, each told to `announce`. Every value is `check`ed, the schema's
    cross-checks once every layer is applied, and a key of the recipe's own that
    reads as a misspelling of its neighbour is refused. `declared`: the keys the
    recipe's file writes in its CONFIG (`written_keys`), so that one a later
    change to CONFIG dropped is not called unknown.

    A key of the recipe's own takes None where its declared type says "null"
    (`"type": ["int", "null"]`: "None: the variant's"), or where nothing says
    what it takes; where its type is declared without null (`TYPES`' `train.lr`,
    a schema's `"type": "list"`) or its choices are, None is no value, and one
    line."""
    tree = copy.deepcopy(defaults)
    rules = declarations(schema)
    nullable = {key for key, value in flatten(tree).items() if value is None}

    def entry(key, value, own=False):  # (type, nullable, choices, list items' type, range)
        rule = rules.get(key, {})
        named = rule.get("type", ())
        kinds = tuple(kind for kind in named if kind is not type(None))
        # object: a key whose value is None and whose type nothing declares takes any value
        expected = ((kinds[0] if len(kinds) == 1 else kinds) if kinds else
                    TYPES.get(key) or (object if value is None else type(value)))
        choices = rule.get("choices", CHOICES.get(key))
        if named:
            null = type(None) in named
        elif own:
            null = key in NULLABLE or (value is None and key not in TYPES and choices is None)
        else:
            null = value is None or key in nullable
        items = rule.get("items") or _number_items(value)
        return (expected, null, choices, items,
                _both(LIMITS.get(key), _declared_limit(
                    rule, kinds or (expected if isinstance(expected, tuple) else (expected,)),
                    items)))

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
    _cross_check(flatten(tree), rules)
    train = tree["train"]
    if train.get("validation_freq", 1) > train["epochs"]:
        raise UserError(f"train.validation_freq={train['validation_freq']} is above "
                        f"train.epochs={train['epochs']}: the run would never validate, nor save "
                        f"checkpoints/best.keras; use {train['epochs']} to validate after the "
                        "last epoch only.")
    return tree


def declarations(schema):
    """A recipe's `CONFIG_SCHEMA`, the declaration of its own keys beside its
    CONFIG, as {dotted key: rule}; a `UserError` for a word it does not know.
    A recipe declares every key of its own (the model section, and the train
    keys besides `TRAIN_KEYS`) whose type, choices or range its CONFIG's value
    does not say, in a literal the kit reads without running the recipe:

        CONFIG_SCHEMA = {
            "model.rate": {"type": "float", "above": 0, "at_most": 1},
            "model.size": {"type": ["int", "null"], "at_least": 1},  # None: the variant's
            "model.sizes": {"type": "list", "items": "int", "at_least": 1, "min_length": 1,
                            "same_length_as": "model.strides"},
            "train.ramp_epochs": {"type": "int", "at_least": 0, "below": "train.epochs",
                                  "needs": {"train.schedule": ["cosine", "constant"]}},
            "train.solver": ["sgd", "adam"],  # a list: its choices
            "model.gated": "bool",  # a type's name: {"type": "bool"}
        }

    A rule's words:
    - `type`: bool, int, float, str, list or dict, or a list of them; `null`
      among them lets the key take None. Without it, CONFIG's value's type.
    - `items`: a list's items' type, int or float.
    - `choices`: the values it takes.
    - `at_least`, `above`, `at_most`, `below`: a number bounds the value (each
      number of a list); a float is finite besides. A dotted key instead
      compares the value with that key's, once every layer is applied.
    - `min_length`: a list's fewest entries.
    - `same_length_as`: a dotted key whose list has as many entries.
    - `needs`: {dotted key: [values]}: where this key is set (not 0, false,
      null or empty), each key named holds one of its values.
    A value out of its rule is one line that names the key. The shared keys'
    checks are `TYPES`, `CHOICES` and `LIMITS`, and the same for every recipe."""
    rules = {}
    for key, declared in (schema or {}).items():
        rule = ({"choices": declared} if isinstance(declared, list) else
                {"type": declared} if isinstance(declared, str) else declared)
        where = f"CONFIG_SCHEMA's '{key}'"
        if not isinstance(rule, dict) or set(rule) - WORDS:
            raise UserError(f"{where} must be a type's name, a list of choices or a mapping of "
                            f"the words {', '.join(sorted(WORDS))}; got {declared!r}.")
        rule = dict(rule)
        if "type" in rule:
            names = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
            unknown = [name for name in names if name not in TYPES_NAMED and name != "null"]
            if unknown:
                raise UserError(f"{where} has the type {unknown[0]!r}; types are "
                                f"{', '.join(TYPES_NAMED)} and null.")
            rule["type"] = tuple(TYPES_NAMED.get(name, type(None)) for name in names)
        if "items" in rule:
            if rule["items"] not in ("int", "float"):
                raise UserError(f"{where}'s items are int or float, not {rule['items']!r}.")
            rule["items"] = TYPES_NAMED[rule["items"]]
        wrong = next((word for word in (*BOUNDS, "same_length_as") if word in rule
                      and not (_is_number(rule[word]) or isinstance(rule[word], str))), None)
        if wrong or not isinstance(rule.get("needs", {}), dict):
            raise UserError(f"{where}'s '{wrong or 'needs'}' takes "
                            + ("a number or a dotted key" if wrong else
                               "a mapping of dotted keys to lists of values")
                            + f"; got {rule[wrong or 'needs']!r}.")
        rules[key] = rule
    return rules


def _declared_limit(rule, kinds, items):
    """(test, what it needs) of a rule's numeric bounds and `min_length`, for a
    key of the types `kinds` (Python's) whose list items are `items`; None
    without any."""
    bounds = [(word, rule[word]) for word in BOUNDS if _is_number(rule.get(word))]
    least = rule.get("min_length")
    if not bounds and least is None:
        return None
    tests = [(BOUNDS[word][0], number) for word, number in bounds]
    needs = " and ".join(f"{BOUNDS[word][1]} {number}" for word, number in bounds)
    if float in kinds and not any(word in ("at_most", "below") for word, _ in bounds):
        needs = ("a finite number" + (", " if needs.startswith("at ") else " ") + needs).strip()
    if list in kinds:
        noun = "integers" if items is int else "numbers"
        head = (f"a non-empty list of {noun}" if least == 1 else
                f"a list of at least {least} {noun}" if least else f"a list of {noun}")
        each = f"{head}, each {needs}" if needs else head
        needs = each if set(kinds) <= {list} else f"{needs}, or {each}"

    def within(value):
        if isinstance(value, list) and least and len(value) < least:
            return False
        return all((not isinstance(number, float) or math.isfinite(number))
                   and all(compare(number, bound) for compare, bound in tests)
                   for number in (value if isinstance(value, list) else [value]))

    return within, needs


def _both(first, second):
    """One (test, what it needs) of two, either of which may be None."""
    if first is None or second is None:
        return first or second
    return (lambda v: first[0](v) and second[0](v)), f"{first[1]} and {second[1]}"


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cross_check(flat, rules):
    """Refuses settings (`flatten`ed) that break a rule's cross-checks (`declarations`:
    a bound that names a key, `same_length_as`, `needs`), in one line naming both keys."""
    for key, rule in rules.items():
        if key not in flat:
            continue
        value = flat[key]
        others = [rule[word] for word in BOUNDS if isinstance(rule.get(word), str)]
        others += [rule["same_length_as"]] if "same_length_as" in rule else []
        others += list(rule.get("needs", {})) if value else []
        lacking = next((other for other in others if other not in flat), None)
        if lacking:
            raise UserError(f"CONFIG_SCHEMA's '{key}' names '{lacking}', which the settings "
                            "lack: name a key of CONFIG.")
        for word, (compare, words) in BOUNDS.items():
            other = rule.get(word)
            if (isinstance(other, str) and _is_number(value) and _is_number(flat[other])
                    and not compare(value, flat[other])):
                raise UserError(f"{key}={value} must be {words} {other}={flat[other]}; change "
                                "one of them.")
        other = rule.get("same_length_as")
        if (other and isinstance(value, list) and isinstance(flat[other], list)
                and len(value) != len(flat[other])):
            raise UserError(f"{key} and {other} need the same number of entries; got {value} "
                            f"and {flat[other]}.")
        for other, values in rule.get("needs", {}).items() if value else ():
            if flat[other] not in values:
                raise UserError(f"{key} works with {other}={' or '.join(map(str, values))}, not "
                                f"{other}={flat[other]}: change one of them.")


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
    for a recipe whose CONFIG lists `data.augment`. The progressive-resizing keys only
    where CONFIG lists `data.early_size`: its model takes images of any size."""
    defaults = module_literal(folder / "data.py", "DEFAULTS")
    if "early_size" not in data_config:
        for key in ("early_size", "early_epochs", "early_crop"):
            defaults.pop(key)
    if "augment" in data_config:
        if not (folder / "augment.py").is_file():
            raise UserError(f"This recipe augments its images, and {folder / 'augment.py'} is "
                            "missing: copy keras_course_recipes/augment.py beside keras_course_recipes/data.py.")
        defaults.update(module_literal(folder / "augment.py", "DEFAULTS"))
    return defaults
