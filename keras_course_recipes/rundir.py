"""A run directory on disk: created exclusively and marked as a run's (a
folder of the user's own files is refused), locked against a second
process, and read back to resume: the finished epochs its backup holds,
config.yaml (with its digest) against the settings now, and history.csv's
rows (history_csv.py), repaired where a kill tore one; and `Run`, one
process's run in it, from `open` to `close`, with the callbacks that keep it
true (each epoch's random draws, one Ctrl-C or SIGTERM, a diverged loss). The
part of the kit a student need not read."""

import datetime
import hashlib
import importlib.util
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

from keras_course_recipes import RUNS_DIR, RecipeRun, errors, history_csv
from keras_course_recipes.errors import (Interrupted, Terminated, TrainingDiverged, UserError,
                                         raise_pending)
from keras_course_recipes.settings import plain

# What may change when a run resumes; not the backend or precision, which train differently.
RESUMABLE_KEYS = {"run", "train.epochs", "execution.mode", "execution.steps_per_execution",
                  "execution.onednn"}
# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes in backup/
# after each epoch, in this order: the previous state copied to *.bkp, then these.
BACKUP_WEIGHTS, BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"
DIGEST_PREFIX = "# sha256 of the lines above, written by the harness: "  # config.yaml's last line
# Written as a run takes a folder it made (or found empty): what tells a run directory from a
# folder of the user's, which a run would fill with its files and whose metrics.json or
# checkpoints/best.keras it would replace. Run directories made before it existed are told by
# their layout (`claim`).
MARK = ".keras-course-run"
MARK_TEXT = ("A run directory of keras-course-recipes: the same command with run.dir set to this "
             "folder resumes or extends its run.\n")
# What a folder may hold and still count as empty: a lock a refused run left, and the folders of
# a multi-worker run's other workers, which may start before its chief.
NOT_CONTENT = {".lock", "workers"}


def choose(config):
    """`(run directory, created)` of a run of `config`: `run.dir`, or a new
    runs/NAME/<date>-<time>, created here so that no other run takes it."""
    if config["run"]["dir"] is None:
        return new_directory(RUNS_DIR / config["recipe"]), True
    run_dir = Path(config["run"]["dir"]).expanduser()
    return run_dir, not run_dir.exists()


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


def claim(run_dir):
    """The names `run_dir` holds (none where it does not exist yet), once it is
    known to be a folder a run may use: empty (`NOT_CONTENT` aside), marked
    (`MARK`), or a run directory from before the mark (`_run_layout`); the
    working directory only empty or marked.

    Raises:
        UserError: a folder of someone's own files, which a run would scatter
            its files among and replace theirs.
    """
    if not run_dir.is_dir():
        return set()  # to be made; or a file, which making it refuses
    try:
        names = {path.name for path in run_dir.iterdir()}
    except OSError as error:
        raise UserError(f"Cannot read the run directory {run_dir}: {error.strerror}. Give a "
                        "folder you can read and write with run.dir=PATH.") from None
    content = sorted(names - NOT_CONTENT)
    if not content or MARK in names:
        return names
    shown = ", ".join(content[:3]) + (f" and {len(content) - 3} more" if len(content) > 3 else "")
    if run_dir.resolve() == Path.cwd().resolve():
        raise UserError(f"run.dir={run_dir} is the working directory, which holds files of its "
                        f"own ({shown}): a run would scatter its files among them. Give run.dir "
                        "a new or empty folder (run.dir=runs/NAME, say), or leave it out for a "
                        "new folder below runs/.")
    if not _run_layout(run_dir, names):
        raise UserError(f"{run_dir} is not a run directory: it holds files of its own ({shown}) "
                        "and no mark of a run, and a run would write its metrics.json, history.csv "
                        "and checkpoints/ among them, replacing any of the same name. Give "
                        "run.dir a new or empty folder, or leave it out for a new folder below "
                        "runs/.")
    return names


def _run_layout(run_dir, names):
    """Whether the folder `run_dir`, holding `names`, is a run directory made before
    `MARK` existed: a backup/, config.yaml and history.csv, or a config.yaml with
    the digest line that `write_config` ends it with."""
    if (run_dir / "backup").is_dir() or {"config.yaml", "history.csv"} <= names:
        return True
    try:
        with (run_dir / "config.yaml").open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 200))  # its last line
            return DIGEST_PREFIX.encode() in file.read()
    except OSError:
        return False


def mark(run_dir):
    """Writes `MARK` in `run_dir`: from now on, a run directory."""
    try:
        (run_dir / MARK).write_text(MARK_TEXT)
    except OSError as error:
        raise UserError(f"Cannot write in the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None


def out_of_memory(error):
    """Whether `error` (or what it was raised from) is an allocation that failed:
    TensorFlow's ResourceExhaustedError (but a full disk's), jaxlib's
    XlaRuntimeError RESOURCE_EXHAUSTED, PyTorch's OutOfMemoryError or its
    RuntimeError "out of memory" (CUDA's) or "not enough memory" (its CPU's)."""
    if errors.disk_full(error):
        return False
    while error is not None:
        if type(error).__name__ in ("ResourceExhaustedError", "OutOfMemoryError"):
            return True
        text = str(error)
        if isinstance(error, RuntimeError) and ("RESOURCE_EXHAUSTED" in text or any(
                words in text.lower() for words in ("out of memory", "not enough memory"))):
            return True
        error = error.__cause__ or error.__context__
    return False


def lock_run_dir(run_dir):
    """An exclusive lock on `run_dir/.lock` (filelock's: fcntl on POSIX, msvcrt on
    Windows, else a lock file it removes), which ends with this process however
    it ends; refused, naming its holder, when another process has it."""
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
        holder = holder.strip() if holder.startswith("process ") else "another process"
        raise UserError(f"{run_dir} is in use by {holder}: two processes must not train one "
                        "run. Wait for it to finish (or stop it), or give another run.dir.") from None
    except OSError as error:
        raise UserError(f"Cannot write in the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    if not isinstance(lock, filelock.SoftFileLock):  # whose file holds its own record
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
    rows, torn = history_csv.history_rows(history)
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
        repairs.append((f"repaired {history_csv.torn_note(history, torn)}" if torn else "",
                        lambda: history_csv.keep_rows(history, epochs)))
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
    body = yaml.safe_dump(plain(config), sort_keys=False)
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


# ## The run: from its directory's opening to its close

class Run:
    """One process's run directory from `open` to `close`: `dir`, and
    `initial_epoch`, the finished epochs its backup holds."""

    def __init__(self, config, run_dir, created, lock, state, before=()):
        self.config, self.dir, self.created, self._lock = config, run_dir, created, lock
        self.state, self.initial_epoch = state, state.epochs
        self.interrupted, self._handlers, self._epoch = None, {}, 0
        self._before = set(before)  # the names the folder held before this run: not its own
        self._discard = False  # whether `close` removes what this run wrote, its folder if made
        self._lowest, self._warned = math.inf, False  # the training loss, for its divergence

    @classmethod
    def open(cls, config, run_dir=None, reader=None):
        """Locks `run_dir` (else `choose`'s) and reads it with `reader`
        (`inspect` unless given), writing nothing else; a `UserError`
        when these settings cannot train there."""
        if run_dir is None:
            run_dir, created = choose(config)
        else:
            run_dir = Path(run_dir).expanduser()
            created = not run_dir.exists()
        before = set() if created else claim(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"Cannot create the run directory {run_dir}: {error.strerror}. "
                            "Give a folder you can write to with run.dir=PATH.") from None
        lock = None
        try:
            if MARK not in before and not before - NOT_CONTENT:  # made here, or found empty
                mark(run_dir)
            lock = lock_run_dir(run_dir)
            state = (reader or inspect)(run_dir, config)
        except BaseException:
            if lock is not None:
                lock.release()
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)
            else:  # refused: the folder as it was
                for name in {MARK, ".lock"} - before:
                    (run_dir / name).unlink(missing_ok=True)
            raise
        if state.epochs:
            print(f"resuming the run in {run_dir} from its last finished epoch ({state.epochs})",
                  flush=True)
        return cls(config, run_dir, created, lock, state, before)

    def __enter__(self):
        return self

    def __exit__(self, *error):
        self.close()

    def train(self, lesson, extra_callbacks=()):
        """The recipe's `run(config, run)`, `lesson`, given a `RecipeRun`: this
        run's directory, `callbacks()` then `extra_callbacks`, the epoch to start
        from and `fit`'s verbosity; Ctrl-C or SIGTERM end it as `Interrupted`,
        saying what was saved."""
        if not has_tensorboard():
            missing = "TensorFlow" if importlib.util.find_spec("tensorflow") is None else "tensorboard"
            print(f"note: no TensorBoard logs: Keras' TensorBoard callback writes through "
                  f"tf.summary, and {missing} is not installed here ({errors.install_advice('tensorflow')}"
                  "); history.csv has every epoch's numbers.", flush=True)
        try:
            raise_pending()
            result = lesson(self.config, RecipeRun(
                self.dir, [*self.callbacks(), *extra_callbacks], self.initial_epoch,
                fit_verbose(self.config)))
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
            if cause is None and out_of_memory(error):
                raise UserError(self.out_of_memory_note()) from None
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

    def out_of_memory_note(self):
        """What a batch too large for memory leaves, and what to do."""
        size = self.config["data"].get("batch_size")
        what = f"out of memory: a batch of data.batch_size={size} did not fit"
        lower = ("lower data.batch_size" + (f" (to {size // 2}, say)"
                                            if isinstance(size, int) and size > 1 else ""))
        epochs = saved_epochs(self.dir / "backup")
        if not epochs and self.created:
            return self.saved_note(what, f"{lower}, then")
        if not epochs:
            self._discard = True  # `close` removes what it wrote: the folder as it was
            return (f"{what} before the first epoch of {self.dir} finished: no epoch was saved, "
                    f"and what this run wrote there is removed; {lower}, then the same command "
                    "starts the run again.")
        return (f"{what}: {epochs} finished epoch(s) stay in {self.dir} (the same command resumes "
                f"them where more memory is free). To train with less memory, {lower} and give "
                "a new run.dir: a run keeps its batch size when it resumes.")

    def saved_note(self, what="interrupted", then=""):
        """What this run has saved when `what` stopped it, and the command that goes on."""
        again = (f"{then} the same command with run.resume=true (or the same run.dir)"
                 if "resume" in self.config["run"] else
                 f"{then} the same command with run.dir={self.dir}").strip()
        epochs = saved_epochs(self.dir / "backup")
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
        """Releases the lock; removes the directory if this run made it and left it
        empty, and what this run wrote when it saved nothing to go on from
        (`saved_note`, `out_of_memory_note`)."""
        self._release()
        if self._lock is not None:
            self._lock.release()
        self._lock = None
        if not self.dir.is_dir():
            return
        if self.created and (self._discard or not any(
                path.name not in (".lock", MARK) for path in self.dir.iterdir())):
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self._discard:  # a folder that was there: only what this run added goes
            for path in self.dir.iterdir():
                if path.name not in self._before:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)


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
