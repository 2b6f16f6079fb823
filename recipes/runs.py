"""A recipe's command line and run directory, one path for a copied recipe and
for `python -m recipes run` (which adds its own checks and files, in
recipes/harness.py): every `key=value` checked, one line for what a user can
fix, and a run directory that is locked and resumes at its last finished
epoch. Plumbing: a student need not read it.

    if __name__ == "__main__":  # python mnist_mlp.py key=value, %run, or a notebook cell
        experiment = runs.main("mnist_mlp", CONFIG, run, CONFIG_SCHEMA)

Keras is imported only when training starts: the repository checks a config
before Keras starts, to choose its backend.
"""

import ast
import copy
import csv
import datetime
import difflib
import hashlib
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import filelock
import yaml

RUNS_DIR = Path("runs")  # relative to where the command runs


class UserError(Exception):
    """A problem the user can fix: one line, exit status 2."""


class Interrupted(UserError):
    """Ctrl-C (exit status 130) or SIGTERM (143) stopped a run: what is saved."""

    def __init__(self, note, status=130):
        super().__init__(note)
        self.status = status


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite (exit status 3)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, as job schedulers and container runtimes stop a process."""


# ## Settings: every key's type, choices and range

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
    found = source_literal(Path(path).read_text(), name)
    if found is None and default is None:
        raise UserError(f"{path} has no {name} literal.")
    return default if found is None else found


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


# ## A copied recipe's command line, and a notebook cell's

def main(name, config, run, schema=None):
    """Trains recipe `name` as `python NAME.py key=value ...`, `%run NAME.py
    key=value ...` or a notebook cell does, and returns what `run` returns:
    `config` (with the data module's keys and `DEFAULTS`) updated by the
    overrides, every value checked (a key the CONFIG as written lacks is
    refused); then `run(config, run_dir, ...)` in a locked `run.dir`, resumed
    at its last finished epoch, or a new runs/NAME/<date>-<time>. What a user
    can fix is one line on stderr and `exit_status`'s exit status; in a
    notebook, the line and None."""
    import keras

    caller = sys._getframe(1).f_globals
    in_kernel = "ipykernel" in sys.modules
    # A kernel's argv is its own (Jupyter's -f FILE, VS Code's --f=FILE, Colab's
    # launcher): overrides come from the command line of the file that calls this.
    ran_as_file = "__file__" in caller and Path(sys.argv[0]).name == Path(caller["__file__"]).name
    overrides = sys.argv[1:] if ran_as_file or not in_kernel else []
    try:
        with signals_and_output():
            config = resolve(name, {"data": data_defaults(config["data"]), **DEFAULTS}, config,
                             overrides=overrides, schema=schema, announce=print,
                             declared=declared_config(caller), origin="in CONFIG")
            execution = config["execution"]
            resolve_mode(execution, keras.backend.backend())
            if execution.get("onednn") is not None and "TF_ENABLE_ONEDNN_OPTS" not in os.environ:
                print(f"note: execution.onednn is read as TensorFlow starts: run with "
                      f"TF_ENABLE_ONEDNN_OPTS={int(execution['onednn'])} to be sure of it.")
            keras.backend.clear_session()  # a notebook's earlier runs: the layers' names start over
            with Run.open(config) as active:
                result = active.train(run)
            print("test:", result.test)
        return result
    except (UserError, TrainingDiverged, OSError, KeyboardInterrupt) as error:
        status, message = exit_status(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        note_reported(error)
        if not in_kernel:
            sys.exit(status)


def exit_status(error, again="the same command with the same run.dir"):
    """(exit status, one line) for what a user can act on, (None, None) for a
    bug; `again` is the command that goes on with the run."""
    if isinstance(error, Interrupted):
        return error.status, str(error)
    if isinstance(error, (UserError, TrainingDiverged)):
        return 2 if isinstance(error, UserError) else 3, f"error: {error}"
    if isinstance(error, OSError) and error.errno == 28:  # ENOSPC
        return 2, (f"error: the disk is full ({error.filename or 'writing the run'}): finished "
                   f"epochs are saved; free some space and run {again} to go on.")
    if isinstance(error, KeyboardInterrupt):  # before training started: nothing to save
        return 143 if isinstance(error, Terminated) else 130, "interrupted."
    return None, None


class signals_and_output:
    """While a run trains, SIGTERM (a job scheduler's stop) ends it as Ctrl-C
    does, and once standard output's reader has gone (`| head`, a closed
    stream) what is printed is dropped instead of ending the run."""

    def __enter__(self):
        main = threading.current_thread() is threading.main_thread()
        self._term = signal.signal(signal.SIGTERM, _latch) if main else None
        self._stdout, sys.stdout = sys.stdout, _Tolerant(sys.stdout)

    def __exit__(self, *error):
        if self._term is not None:
            signal.signal(signal.SIGTERM, self._term)
        sys.stdout = self._stdout


# ## A Ctrl-C or SIGTERM at any moment, from the first import on

_pending = None  # the interrupt that came, until a run reports it: Python may drop it


def _latch(number, frame):
    """Ctrl-C's and SIGTERM's handler until a run's own takes over (`Run._start`):
    remembered, then raised. Python drops an exception raised in a garbage
    collector's callback (TensorFlow's run while it loads), so a run checks
    `raise_pending` before it trains, and after every batch."""
    global _pending
    _pending = Terminated() if number == signal.SIGTERM else KeyboardInterrupt()
    raise _pending


def raise_pending():
    """Raises the interrupt that came and was dropped, once."""
    global _pending
    if _pending is not None:
        error, _pending = _pending, None
        raise error


def _interrupt_hook(kind, error, trace):
    # An interrupt nothing caught (a copied recipe stopped while `import keras`
    # runs): its one line, and the exit status of the signal, not a traceback.
    if not isinstance(error, KeyboardInterrupt):
        return sys.__excepthook__(kind, error, trace)
    print(exit_status(error)[1], file=sys.stderr, flush=True)
    if isinstance(error, Terminated):
        os._exit(143)  # else Python ends the process as Ctrl-C's (130)


reported_interrupt = False  # set once an interrupt's line is printed


def note_reported(error):
    """After `error`'s line is printed: an interrupt is reported, no longer pending."""
    global _pending, reported_interrupt
    if isinstance(error, (KeyboardInterrupt, Interrupted)):
        _pending, reported_interrupt = None, True


def _on_unraisable(unraisable):
    # A dropped Ctrl-C is remembered (`raise_pending`), not printed; nor what an
    # interrupt left half-built and fails as it is collected (TensorFlow's graph
    # of a function it was tracing), once the interrupt was reported.
    error = unraisable.exc_value
    while error is not None and not isinstance(error, KeyboardInterrupt):
        error = error.__context__
    if error is not None or reported_interrupt:
        return
    sys.__unraisablehook__(unraisable)


def install_interrupt_hooks():
    """Installs `_latch` for Ctrl-C and SIGTERM, and the hooks that keep an
    interrupt to one line, in a program's main thread; not inside a notebook's
    kernel, nor over handlers that are not Python's defaults."""
    if ("ipykernel" in sys.modules or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, _latch)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _interrupt_hook
    if sys.unraisablehook is sys.__unraisablehook__:
        sys.unraisablehook = _on_unraisable


install_interrupt_hooks()  # a recipe imports this module before Keras: from its first second


class _Tolerant:
    """A stream that drops what is written once its reader has gone."""

    def __init__(self, stream):
        self.stream, self._gone = stream, stream is None

    def write(self, text):
        self._try(lambda: self.stream.write(text))
        return len(text)

    def flush(self):
        self._try(lambda: self.stream.flush())

    def _try(self, action):
        if self._gone:
            return
        try:
            action()
        except (OSError, ValueError):  # a broken pipe, or a closed stream
            self._gone = True
            try:  # Python flushes stdout at exit: point it at devnull, so that cannot raise
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            except (OSError, ValueError):
                pass

    def isatty(self):
        return not self._gone and self.stream.isatty()

    def __getattr__(self, name):
        return getattr(self.stream, name)


# ## The run directory

# What may change when a run resumes; not the backend or precision, which train differently.
RESUMABLE_KEYS = {"run", "train.epochs", "execution.mode", "execution.steps_per_execution",
                  "execution.onednn"}
# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes in backup/
# after each epoch, in this order: the previous state copied to *.bkp, then these.
BACKUP_WEIGHTS, BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"
DIGEST_PREFIX = "# sha256 of the lines above, written by the harness: "  # config.yaml's last line


class Run:
    """One process's run directory from `open` to `close`: `dir`, and
    `initial_epoch`, the finished epochs its backup holds."""

    def __init__(self, config, run_dir, created, lock, state):
        self.config, self.dir, self.created, self._lock = config, run_dir, created, lock
        self.state, self.initial_epoch = state, state.epochs
        self.interrupted, self._handlers, self._epoch = None, {}, 0
        self._lowest, self._warned = math.inf, False  # the training loss, for its divergence

    @classmethod
    def open(cls, config, run_dir=None, reader=None):
        """Locks `run_dir` (else `run.dir`, else a `new_directory`) and reads it
        with `reader` (`inspect` unless given), writing nothing else; a
        `UserError` when these settings cannot train there."""
        if run_dir is None and config["run"]["dir"] is None:
            run_dir, created = new_directory(RUNS_DIR / config["recipe"]), True
        else:
            run_dir = Path(run_dir or config["run"]["dir"]).expanduser()
            created = not run_dir.exists()
            try:
                run_dir.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise UserError(f"Cannot create the run directory {run_dir}: {error.strerror}. "
                                "Give a folder you can write to with run.dir=PATH.") from None
        lock = None
        try:
            lock = _lock(run_dir)
            state = (reader or inspect)(run_dir, config)
        except BaseException:
            if lock is not None:
                lock.release()
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        if state.epochs:
            print(f"resuming the run in {run_dir} from its last finished epoch ({state.epochs})",
                  flush=True)
        return cls(config, run_dir, created, lock, state)

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self.close()

    def train(self, run, extra_callbacks=()):
        """The recipe's `run(config, dir, extra_callbacks, initial_epoch,
        verbose)`, `callbacks()` first; Ctrl-C or SIGTERM end it as
        `Interrupted`, saying what was saved."""
        try:
            raise_pending()
            result = run(self.config, self.dir, extra_callbacks=[*self.callbacks(),
                                                                 *extra_callbacks],
                         initial_epoch=self.initial_epoch, verbose=fit_verbose(self.config))
            raise_pending()  # one that the final evaluation dropped
            return result
        except BaseException as error:
            cause = error
            while cause is not None and not isinstance(cause, KeyboardInterrupt):
                cause = cause.__context__  # library code that turned it into another error
            cause = self.interrupted or cause
            if cause is None:
                raise
            raise Interrupted(self.interrupt_note(),
                              143 if isinstance(cause, Terminated) else 130) from None

    def callbacks(self):
        """Callbacks to put first in `fit`'s: as training starts (the model built,
        the backup not yet read), the repairs `inspect` found and config.yaml;
        each epoch's random draws from (seed, epoch) (`seed_epoch`); after each
        batch, training or validating, a Ctrl-C or SIGTERM that came during it
        stops training, and so does a NaN or
        infinite loss (`TrainingDiverged`: Keras' TerminateOnNaN would end
        `fit` as if it had finished); a loss 1000x its lowest is warned about."""
        import keras

        seed = self.config["execution"]["seed"]
        # A LambdaCallback's functions are not given the model: they read the callback's.
        guard = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs: self._start(),
            on_epoch_begin=lambda epoch, logs: setattr(self, "_epoch", epoch),
            on_train_batch_end=self._after_batch, on_test_batch_end=self._stop_if_interrupted,
            on_train_end=lambda logs: self._release())
        seeds = keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda epoch, logs: seed_epoch(seeds.model, seed, epoch))
        return [guard, seeds]

    def _start(self):
        # The handlers first: once "run directory:" is printed, a Ctrl-C is the
        # run's, and a KeyboardInterrupt that library code might drop cannot be lost.
        if threading.current_thread() is threading.main_thread():
            self._handlers = {number: signal.signal(number, self._on_signal)
                              for number in (signal.SIGINT, signal.SIGTERM)}
        raise_pending()
        self.state.apply(self.dir, self.config)
        (self.dir / "status.json").unlink(missing_ok=True)  # a resumed divergence is no longer one

    def _on_signal(self, number, frame):
        # Raised here, it could land inside TensorFlow tracing a function, whose
        # half-built graph then prints a traceback as it is collected: the step
        # in flight finishes first, and `_after_batch` raises.
        self.interrupted = Terminated() if number == signal.SIGTERM else KeyboardInterrupt()
        self._release()  # a second Ctrl-C is the process's own again
        try:  # os.write: print could be a reentrant call into the stream in use
            os.write(2, b"stopping after this step (%s again stops as soon as the computation "
                        b"in flight returns, without saving it)\n" % (
                            b"SIGTERM" if number == signal.SIGTERM else b"Ctrl-C"))
        except OSError:
            pass

    def _release(self):
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        self._handlers = {}

    def _stop_if_interrupted(self, batch=None, logs=None):
        if self.interrupted is not None:
            raise self.interrupted
        raise_pending()

    def _after_batch(self, batch, logs):
        self._stop_if_interrupted()
        if "loss" not in (logs or {}):
            return
        loss, epoch = float(logs["loss"]), self._epoch
        if loss > 1000 * self._lowest and not self._warned:
            self._warned = True
            print(f"warning: the training loss is {loss:.3g} at epoch {epoch + 1}, step "
                  f"{batch + 1}, over 1000x its lowest so far ({self._lowest:.3g}): the run may "
                  "be diverging; lower train.lr if it does not recover.", flush=True)
        self._lowest = min(self._lowest, loss)
        if not math.isfinite(loss):
            (self.dir / "status.json").write_text(json.dumps(
                {"status": "diverged", "epoch": epoch, "step": batch, "loss": str(loss)}) + "\n")
            raise TrainingDiverged(
                f"the training loss became {loss} at epoch {epoch + 1}, step {batch + 1}: the "
                "run diverged and stops here, its last finished epoch kept. Lower train.lr (or "
                "check the data) and start a new run; the same command would resume into the "
                "same divergence.")

    def interrupt_note(self):
        """What was saved when Ctrl-C or SIGTERM stopped this run, and how to go on."""
        again = ("the same command with run.resume=true (or the same run.dir)"
                 if "resume" in self.config["run"] else f"the same command with run.dir={self.dir}")
        epochs = saved_epochs(self.dir / "backup")
        if not epochs:
            return (f"interrupted before the first epoch of {self.dir} finished: no epoch "
                    f"was saved; {again} starts it again from the beginning.")
        return (f"interrupted: {epochs} finished epoch(s) are saved in {self.dir}; "
                f"run {again} to continue.")

    def close(self):
        """Releases the lock; removes the directory if this run made it and left it empty."""
        self._release()
        if self._lock is not None:
            self._lock.release()
        self._lock = None
        if self.created and self.dir.is_dir() and not any(
                path.name != ".lock" for path in self.dir.iterdir()):
            shutil.rmtree(self.dir, ignore_errors=True)


def fit_verbose(config):
    """`run.verbose` for `fit`: `auto` is a progress bar on a terminal, else a line an epoch."""
    verbose = config["run"]["verbose"]
    return (1 if sys.stdout.isatty() else 2) if verbose == "auto" else verbose


def seed_epoch(model, seed, epoch):
    """Sets every Keras `SeedGenerator` of `model` (dropout, and its
    `augmentation_layers`) from (seed, epoch, its index): BackupAndRestore
    saves weights, not these, so a resumed run would draw epoch 0's again."""
    import numpy as np

    found = {}
    for owner in [model, *getattr(model, "augmentation_layers", [])]:
        for variable in owner.variables:
            if variable.name == "seed_generator_state":
                found.setdefault(id(variable), variable)
    for index, state in enumerate(found.values()):
        derived = np.random.default_rng([seed, epoch, index]).integers(2**31)
        state.assign(np.array([derived, 0]).astype(state.dtype))  # [seed, draws so far]


def timestamped(parent):
    """`parent/<date>-<time>` (`20250131-142501`); created by whoever writes there."""
    return Path(parent) / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def new_directory(parent):
    """Creates `parent/<date>-<time>`, or `-2`, `-3`... when another run took
    that name in the same second: exclusively, so that two runs never share one."""
    path = timestamped(parent)
    for number in range(1, 1000):
        candidate = path if number == 1 else path.with_name(f"{path.name}-{number}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
        except OSError as error:
            raise UserError(f"Cannot create the run directory {candidate}: {error.strerror}. "
                            "Give a folder you can write to with run.dir=PATH.") from None
    raise UserError(f"{parent} has no free name for a new run at {path.name}; give run.dir=PATH.")


def _lock(run_dir):
    """An exclusive lock on `run_dir/.lock` (filelock's: fcntl on POSIX, msvcrt on
    Windows), which ends with this process however it ends; refused, naming
    its holder, when another process has it."""
    path = run_dir / ".lock"
    lock = filelock.FileLock(path, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        for _ in range(50):  # the holder may be writing its line
            try:
                holder = path.read_text(errors="replace")
            except OSError:  # Windows: the holder's locked byte cannot be read
                holder = "\n"
            if holder.endswith("\n"):
                break
            time.sleep(0.01)
        raise UserError(f"{run_dir} is in use by {holder.strip() or 'another process'}: two "
                        "processes must not train one run. Wait for it to finish (or stop it), "
                        "or give another run.dir.") from None
    except OSError as error:
        raise UserError(f"Cannot write in the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    try:  # one write, for a refused process's message
        path.write_text(f"process {os.getpid()} ({' '.join(sys.argv[:3])})\n")
    except OSError:
        pass  # Windows locks the file's first byte against other handles: no holder's name
    return lock


class SavedState:
    """What `inspect` found: the finished `epochs` to resume from, the kept
    `rows` of history.csv, and `repairs`, [(note, action)] to carry
    out, in order, when training starts."""

    def __init__(self, epochs, rows, repairs):
        self.epochs, self.rows, self.repairs = epochs, rows, repairs

    def apply(self, run_dir, config):
        """Carries out the repairs, then writes config.yaml."""
        for note, action in self.repairs:
            action()
            if note:
                print(note, flush=True)
        write_config(run_dir, config)


def inspect(run_dir, config):
    """A `SavedState`, read without writing: whether `config` can train in
    `run_dir`, and from which epoch. config.yaml must be whole and differ
    only in `RESUMABLE_KEYS`; the backup's latest state is used when whole
    and written in order, else its previous one (`*.bkp`); history.csv's rows
    after it go when training starts (a kill between its row and the backup)."""
    backup, history = run_dir / "backup", run_dir / "history.csv"
    saved, repairs = read_config(run_dir), []
    if saved is not None:
        changed = changed_keys(saved, config)
        if changed:
            raise UserError(f"Cannot resume {run_dir}: its config differs in {', '.join(changed)}. "
                            "Only run.*, train.epochs, execution.mode, "
                            "execution.steps_per_execution and execution.onednn may change; use "
                            "the same settings, or another run.dir.")
        epochs, schedule = config["train"]["epochs"], config["train"].get("schedule", "constant")
        if saved["train"]["epochs"] != epochs and schedule != "constant":
            raise UserError(f"Cannot change train.epochs from {saved['train']['epochs']} to "
                            f"{epochs} when resuming {run_dir}: its learning rate follows a "
                            f"'{schedule}' schedule over all its epochs, which would jump to a "
                            "new curve. Keep the epochs, or start a new run.")
    elif (backup / BACKUP_METADATA).exists() or history.exists():
        raise UserError(f"{run_dir} holds a run's backup or history but no config.yaml, so the "
                        "settings it trained with cannot be checked against these. Restore its "
                        "config.yaml, or start a new run.dir.")
    epochs, problem = _saved_state(backup, "")
    if epochs is None and backup.exists():
        previous = _saved_state(backup, ".bkp")[0]
        if previous is not None:
            repairs.append((f"repaired: {problem}; resuming from the previous backup, "
                            f"{previous} finished epochs.", lambda: _restore_previous(backup)))
            epochs = previous
    rows, torn = history_rows(history)
    if epochs is None and (backup.exists() or rows):
        if len(rows) > 1 or (backup / f"{BACKUP_WEIGHTS}.bkp").exists():
            raise UserError(
                f"Cannot resume {run_dir}: {problem or f'{backup} is missing'}, and no previous "
                "state can replace it. Start a new run with another run.dir, or delete "
                f"{run_dir} to train this one from the start.")
        repairs.append((f"note: {problem or f'{backup} is missing'}; at most one epoch was "
                        "finished: starting this run from the beginning.",
                        lambda: shutil.rmtree(backup, ignore_errors=True)))
    epochs, wanted = epochs or 0, config["train"]["epochs"]
    if epochs > wanted:
        raise UserError(f"Cannot resume {run_dir}: its backup holds {epochs} finished epochs, "
                        f"more than train.epochs={wanted}. A backup past the run's end is "
                        "damaged or from another run: start a new run.dir.")
    # CSVLogger appends: a last row without its newline would be joined to the next.
    if torn or len(rows) > epochs or (history.exists() and not history.read_bytes().endswith(b"\n")
                                      and history.stat().st_size):
        repairs.append((f"repaired {torn_note(history, torn)}" if torn else "",
                        lambda: _keep_rows(history, epochs)))
    return SavedState(epochs, [row for row in rows if int(float(row["epoch"])) < epochs], repairs)


def changed_keys(old, new, prefix=""):
    """The dotted keys whose values differ between two configs, but `RESUMABLE_KEYS`."""
    changed = []
    for key in sorted(set(old) | set(new)):
        dotted, a, b = f"{prefix}{key}", old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and dotted not in RESUMABLE_KEYS:
            changed += changed_keys(a, b, dotted + ".")
        elif a != b and dotted not in RESUMABLE_KEYS:
            changed.append(dotted)
    return changed


def read_config(run_dir):
    """The config a run in `run_dir` wrote, or None; a `UserError` when it
    was cut short or edited (its digest line differs)."""
    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        return None
    body, _, digest = path.read_text(errors="replace").rpartition(DIGEST_PREFIX)
    if not digest.strip() or hashlib.sha256(body.encode()).hexdigest() != digest.strip():
        raise UserError(f"{path} is not the config this run wrote: it was cut short or edited "
                        "(its digest line differs). A run trains with what its backup holds, "
                        "whatever config.yaml says: restore the file, or start a new run.dir.")
    return yaml.safe_load(body)


def write_config(run_dir, config):
    """Writes the resolved `config.yaml`, with its digest line."""
    body = yaml.safe_dump(config, sort_keys=False)
    try:
        (run_dir / "config.yaml").write_text(
            body + DIGEST_PREFIX + hashlib.sha256(body.encode()).hexdigest() + "\n")
    except OSError as error:
        raise UserError(f"Cannot write the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    print(f"run directory: {run_dir}", flush=True)


def _restore_previous(backup):
    for name in (BACKUP_WEIGHTS, BACKUP_METADATA):
        shutil.copyfile(backup / f"{name}.bkp", backup / name)


def saved_epochs(backup):
    """The finished epochs a backup holds: its latest whole state's, else its previous one's."""
    return _saved_state(backup, "")[0] or _saved_state(backup, ".bkp")[0] or 0


def _saved_state(backup, suffix):
    """(finished epochs, None) for a whole state in `backup`, else (None, what is wrong)."""
    weights, metadata = backup / (BACKUP_WEIGHTS + suffix), backup / (BACKUP_METADATA + suffix)
    for path in (weights, metadata):
        if not path.exists():
            return None, f"{path} is missing"
    try:
        epochs = json.loads(metadata.read_text())["epoch"]
        if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 0:
            raise ValueError(epochs)
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"{metadata} is damaged"
    import h5py  # Keras' own dependency, for its .weights.h5 files

    try:
        with h5py.File(weights, "r") as file:
            if not len(file):
                raise OSError("empty")
    except OSError:
        return None, f"{weights} is damaged"
    if metadata.stat().st_mtime_ns < weights.stat().st_mtime_ns:
        return None, f"{weights} is newer than {metadata} (a kill between the two writes)"
    return epochs, None


def history_rows(path):
    """(whole rows as dicts of strings, torn lines) of history.csv: a kill while
    CSVLogger writes leaves a last line that does not parse to the header's numbers."""
    if not path.exists():
        return [], []
    try:
        lines = path.read_text().splitlines(keepends=True)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text, so not the history CSVLogger wrote: restore it, "
                        "or start a new run.dir.") from None
    if not lines or not lines[0].endswith("\n"):  # no header yet, or a torn one
        return [], lines
    header, rows, torn = next(csv.reader(lines[:1])), [], []
    for line in lines[1:]:
        fields = next(csv.reader([line]), [])
        if len(fields) == len(header) and fields[0] and all(map(_is_number, fields)):
            rows.append(dict(zip(header, fields)))
        elif line.strip():
            torn.append(line)
    return rows, torn


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return text in ("", "NA")


def _keep_rows(path, epochs):
    """Rewrites history.csv with its header and the rows of the epochs before
    `epochs`: the later ones train again, and a torn row goes."""
    rows = history_rows(path)[0]
    with path.open(newline="", errors="replace") as file:
        first = file.readline()
    with path.open("w", newline="") as file:
        if first.endswith("\n"):  # else a kill tore the header: CSVLogger writes it again
            writer = csv.DictWriter(file, fieldnames=next(csv.reader([first])),
                                    lineterminator="\n")
            writer.writeheader()
            writer.writerows(row for row in rows if int(float(row["epoch"])) < epochs)


def torn_note(path, torn):
    return (f"{path}: left out {len(torn)} incomplete row(s), what a kill during a write "
            f"leaves: {' | '.join(line.strip() for line in torn)}")
