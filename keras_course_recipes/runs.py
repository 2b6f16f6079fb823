"""A recipe's command line and run: one path for a copied recipe, a notebook
cell and `python -m keras_course_recipes run` (which adds its own checks and files, in
keras_course_recipes/harness.py). `main` checks every setting (keras_course_recipes/settings.py),
opens a run directory that is locked and resumes at its last finished
epoch (keras_course_recipes/rundir.py), and trains through the recipe's `run`; what a
user can fix is one line. A Ctrl-C or SIGTERM at any moment, from this
module's import on, stops the run with one line that says what was saved.

    if __name__ == "__main__":  # python mnist_mlp.py key=value, %run, or a notebook cell
        experiment = runs.main("mnist_mlp", CONFIG, run, CONFIG_SCHEMA)

Keras is imported only when training starts: the repository checks a config
before Keras starts, to choose its backend.
"""

import atexit
import gc
import importlib.util
import inspect
import json
import math
import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from keras_course_recipes import errors, rundir
from keras_course_recipes.errors import (Interrupted, Terminated, TrainingDiverged, UserError,
                            exit_status, note_reported, raise_pending)
from keras_course_recipes.settings import (BACKEND_MODES, DEFAULTS, data_defaults, parse_override,
                                           resolve, resolve_mode)


# ## A copied recipe's command line, and a notebook cell's

# The backends a recipe trains on: Keras has others (numpy, openvino) that cannot train.
KERAS_BACKENDS = tuple(BACKEND_MODES)


def start(name):
    """A recipe file's first call, with its `__name__`, before `import keras`. Run as
    a program (`python NAME.py`), from here on a Ctrl-C or SIGTERM stops it with one
    line, a KERAS_BACKEND no recipe trains on is refused in one, and the collector
    skips what Keras loaded at exit; `main` puts the handlers back as it returns.
    Imported (by the command line, a test, a notebook), it changes nothing."""
    in_kernel = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)() is not None
    if name != "__main__" or in_kernel:
        return
    if "keras" not in sys.modules:
        problem = backend_problem(os.environ.get("KERAS_BACKEND"), Path(sys.argv[0]).name)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
    errors.install_interrupt_hooks()
    freeze_at_exit()


def backend_problem(asked, script):
    """Why Keras cannot start on backend `asked` (KERAS_BACKEND; None: Keras' default,
    tensorflow) for `python script`, in one line, or None."""
    if asked and asked not in KERAS_BACKENDS:
        return (f"KERAS_BACKEND={asked} is not a backend a recipe trains on: use "
                f"{', '.join(KERAS_BACKENDS)} (unset, Keras uses tensorflow).")
    backend = asked or "tensorflow"
    if importlib.util.find_spec(backend) is not None:
        return None
    named = f"KERAS_BACKEND={backend}" if asked else "tensorflow, Keras' default backend,"
    others = [other for other in KERAS_BACKENDS
              if other != backend and importlib.util.find_spec(other) is not None]
    return (f"{named} is not installed here: {errors.install_advice(backend)}"
            + (f", or run KERAS_BACKEND={others[0]} python {script}" if others else "") + ".")


def freeze_at_exit():
    """TensorFlow and Keras load about 400,000 objects that live as long as the
    process, and Python's last full garbage collection, at exit, walks them all
    (about 1 s on 2 cores): frozen, they are left out of it (registered before
    Keras loads, the freeze runs after its exit handlers). Raising the
    collector's thresholds would save about 0.7 s of their import too, but a
    Ctrl-C while TensorFlow loaded then crashed the process (SIGSEGV) in 2 of 15
    tries. For a process of the kit's own: the command line, a recipe file."""
    atexit.unregister(gc.freeze)  # once
    atexit.register(gc.freeze)


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

    caller = inspect.currentframe().f_back.f_globals  # the recipe's file, or a notebook's
    # An IPython shell runs this (a kernel's cell), not ipykernel merely imported (by jupyter_client).
    in_kernel = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)() is not None
    # A kernel's argv is its own (Jupyter's -f FILE, VS Code's --f=FILE, Colab's
    # launcher): overrides come from the command line of the file that calls this.
    ran_as_file = "__file__" in caller and Path(sys.argv[0]).name == Path(caller["__file__"]).name
    overrides = sys.argv[1:] if ran_as_file or not in_kernel else []
    try:
        with signals_and_output():
            config, overrides = _without_backend(
                config, overrides, keras.backend.backend(),
                Path(caller["__file__"]).name if ran_as_file else f"{name}.py")
            config = resolve(name, {"data": data_defaults(config.get("data", {})), **DEFAULTS},
                             config, overrides=overrides, schema=schema, announce=print,
                             origin="in CONFIG")
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
    except (Exception, KeyboardInterrupt) as error:  # exit_status tells a bug, re-raised
        status, message = exit_status(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        note_reported(error)
        if not in_kernel:
            sys.exit(status)
    finally:
        errors.restore_interrupt_hooks()  # `start`'s, once the run is over


def _without_backend(config, overrides, started, script):
    """(`config`, `overrides`) less an `execution.backend` that names the backend
    Keras `started` on; any other backend, in CONFIG or on the command line, is a
    `UserError`: a recipe file's backend is KERAS_BACKEND's, read once, as its
    `import keras` runs."""
    asked = [(f"'{item}' on the command line", parse_override(item)[1]) for item in overrides
             if item.partition("=")[0].strip() == "execution.backend"]
    execution = config.get("execution", {})
    if "backend" in execution:
        asked.insert(0, ("execution.backend in CONFIG", execution["backend"]))
    for where, backend in asked:
        if backend != started:
            raise UserError(f"{where}: a recipe file trains on the backend Keras loaded when it "
                            f"was imported ({started} here); to train on {backend}, run "
                            f"KERAS_BACKEND={backend} python {script} ...")
    if "backend" in execution:  # said, and true: nothing else reads it
        config = {**config, "execution": {k: v for k, v in execution.items() if k != "backend"}}
    return config, [item for item in overrides
                    if item.partition("=")[0].strip() != "execution.backend"]


class signals_and_output:
    """While a run trains, SIGTERM (a job scheduler's stop) ends it as Ctrl-C
    does, and once standard output's reader has gone (`| head`, a closed
    stream) what is printed is dropped instead of ending the run."""

    def __enter__(self):
        main = threading.current_thread() is threading.main_thread()
        self._term = signal.signal(signal.SIGTERM, errors.latch) if main else None
        self._stdout, sys.stdout = sys.stdout, _Tolerant(sys.stdout)

    def __exit__(self, *error):
        if self._term is not None:
            signal.signal(signal.SIGTERM, self._term)
        sys.stdout = self._stdout


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


class Run:
    """One process's run directory from `open` to `close`: `dir`, and
    `initial_epoch`, the finished epochs its backup holds."""

    def __init__(self, config, run_dir, created, lock, state):
        self.config, self.dir, self.created, self._lock = config, run_dir, created, lock
        self.state, self.initial_epoch = state, state.epochs
        self.interrupted, self._handlers, self._epoch = None, {}, 0
        self._discard = False  # whether `close` removes the directory this run made, whole
        self._lowest, self._warned = math.inf, False  # the training loss, for its divergence

    @classmethod
    def open(cls, config, run_dir=None, reader=None):
        """Locks `run_dir` (else `rundir.choose`'s) and reads it with `reader`
        (`rundir.inspect` unless given), writing nothing else; a `UserError`
        when these settings cannot train there."""
        if run_dir is None:
            run_dir, created = rundir.choose(config)
        else:
            run_dir = Path(run_dir).expanduser()
            created = not run_dir.exists()
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"Cannot create the run directory {run_dir}: {error.strerror}. "
                            "Give a folder you can write to with run.dir=PATH.") from None
        lock = None
        try:
            lock = rundir.lock_run_dir(run_dir)
            state = (reader or rundir.inspect)(run_dir, config)
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
        if not has_tensorboard():
            missing = "TensorFlow" if importlib.util.find_spec("tensorflow") is None else "tensorboard"
            print(f"note: no TensorBoard logs: Keras' TensorBoard callback writes through "
                  f"tf.summary, and {missing} is not installed here ({errors.install_advice('tensorflow')}"
                  "); history.csv has every epoch's numbers.", flush=True)
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
            if cause is None and errors.disk_full(error):
                where = getattr(error, "filename", None) or "writing the run"
                raise UserError(self.saved_note(f"the disk is full ({where})",
                                                "free some space, then")) from None
            if cause is None:
                raise
            raise Interrupted(self.saved_note(), 143 if isinstance(cause, Terminated) else 130) \
                from None

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

    def saved_note(self, what="interrupted", then=""):
        """What this run has saved when `what` stopped it, and the command that goes on."""
        again = (f"{then} the same command with run.resume=true (or the same run.dir)"
                 if "resume" in self.config["run"] else
                 f"{then} the same command with run.dir={self.dir}").strip()
        epochs = rundir.saved_epochs(self.dir / "backup")
        if not epochs and self.created:
            self._discard = True  # it holds nothing to go on from: `close` removes it
            return (f"{what} before the first epoch of {self.dir} finished: no epoch was saved, "
                    f"and the folder is removed; {then + ' ' if then else ''}the same command "
                    "starts the run again.")
        if not epochs:
            return (f"{what} before the first epoch of {self.dir} finished: no epoch was saved; "
                    f"{again} starts it again from the beginning.")
        return (f"{what}: {epochs} finished epoch(s) are saved in {self.dir}; run {again} to "
                "continue.")

    def close(self):
        """Releases the lock; removes the directory if this run made it and left it empty."""
        self._release()
        if self._lock is not None:
            self._lock.release()
        self._lock = None
        if self.created and self.dir.is_dir() and (self._discard or not any(
                path.name != ".lock" for path in self.dir.iterdir())):
            shutil.rmtree(self.dir, ignore_errors=True)


def has_tensorboard():
    """Whether Keras' TensorBoard callback can write here: it writes through
    tf.summary, and TensorFlow 2.21 no longer installs the tensorboard package."""
    return all(importlib.util.find_spec(name) is not None for name in ("tensorflow", "tensorboard"))


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
