"""The harness: what `python -m recipes run` (and `make recipe`) adds around a
recipe's own `run`, in one call, `harness.train(config)`.

A recipe trains the same without it: its `run(config, run_dir)` builds, fits
with TensorBoard, CSVLogger, ModelCheckpoint (last.keras), BackupAndRestore
and Timing, and evaluates; a copied recipe calls that directly. The harness
adds only what this repository needs around it:

Before training, without writing anything:
- the process set up as the config asks: Keras' backend, oneDNN, logical CPU
  devices, and the `tf.distribute` strategy whose scope `run` is called in
  (execution.strategy, docs/distributed.md);
- the run directory: `runs/NAME/<date>-<time>` (a new, exclusive name), or
  `run.dir`, or with `run.resume` the latest unfinished run of the recipe;
- an exclusive lock on it (`.lock`): a second process refuses, naming the
  first;
- a run to resume checked whole: config.yaml unchanged but for what may
  change (`RESUMABLE_KEYS`), the backup readable, its epoch consistent with
  history.csv and train.epochs, and `initial_epoch`, the epoch it resumes at,
  passed to `run` so that its batches are the uninterrupted run's.

When resuming, the recipe's `build` once more, to check the backup's weights
against the model's shapes before anything changes.

At the start of training (a `keras.callbacks.LambdaCallback`, the first of
its callbacks), before BackupAndRestore reads the backup, and only then, the
files changed: config.yaml written (with its digest, so that an edit or a
truncation is noticed), a damaged latest backup replaced by the previous
one, history.csv cut to the epochs the backup holds, a finished run's
metrics.json kept as metrics-N-epochs.json when it is extended, a damaged
best.keras or metrics.json removed.

Callbacks, given to `run`, which puts them first:
- that `LambdaCallback` (above);
- `callbacks.StopAfterInterrupt`: one Ctrl-C always stops training;
- `callbacks.ExecutionModeCheck`: warns when the mode asked for is not the
  mode the model runs in;
- `callbacks.EpochSeeds`: dropout and device augmentation drawn from
  (seed, epoch), so that a resumed epoch draws what it would have;
- `callbacks.DivergenceStop`: a NaN or infinite loss stops the run (exit 3,
  `status.json`);
- `callbacks.RunEstimate`: after the first epoch, the whole run's time;
- `keras.callbacks.ModelCheckpoint`: `checkpoints/best.keras` by
  `callbacks.monitor`, starting from the best that history.csv holds;
- as `callbacks.*` asks: `callbacks.GraphWriter`, a second
  `keras.callbacks.TensorBoard` for `callbacks.profile` (its logs in
  `tensorboard/profile`), `callbacks.Diagnostics`.

After training: `metrics.json` (what ran, the final and best epochs, the test
metrics, timing, versions, the machine) once every asked-for epoch is in
history.csv, and a summary; `run.export` writes a SavedModel.
"""

import contextlib
import csv
import datetime
import errno
import fcntl
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import zipfile
from pathlib import Path

import yaml

import recipes
from recipes import RUNS_DIR, UserError, _config, _environment

# Keys that may change between a run and its resumption: where and how long
# it runs, and how its steps execute (a run trained eagerly may go on under
# XLA). Not the backend: its random draws and its augmentation engine differ,
# so a resumed run would not train as the uninterrupted one; nor the
# precision: mixed_float16 adds loss-scale state.
RESUMABLE_KEYS = {"run", "train.epochs", "execution.mode", "execution.steps_per_execution",
                  "execution.onednn"}

# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes in
# backup/ at the end of each epoch, in this order: the previous state copied
# to *.bkp, then the weights, then the metadata (the number of finished epochs).
BACKUP_WEIGHTS, BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"

# What RunEstimate adds to a CPU run's estimate of more than a day.
CPU_HINT = ("On a CPU, densenet_cifar10_cpu trains a DenseNet for CIFAR-10 in under an hour "
            "(make recipe NAME=densenet_cifar10_cpu).")


class Interrupted(UserError):
    """Ctrl-C stopped a run: what was saved, and how to go on (exit status 130)."""


def train(config, extra_callbacks=()):
    """Trains the recipe `config["recipe"]` names through its module's `run`,
    with everything this module's docstring lists (and `extra_callbacks`
    after the harness's); returns the metrics that metrics.json holds.

    Raises:
        UserError: a setting, directory or saved state that cannot work
            (`recipes.data.ConfigError`s included).
        Interrupted: Ctrl-C.
        callbacks.divergence_stop.TrainingDiverged: the loss diverged.
    """
    module = recipes.load(config["recipe"])
    strategy = prepare(config)
    if not _environment.has_tensorflow():
        print("note: no TensorBoard logs: Keras' TensorBoard callback writes through tf.summary, "
              "and TensorFlow is not installed here; history.csv has every epoch's numbers.",
              flush=True)
    run = Run.open(config)
    try:
        probe = None
        if run.initial_epoch or config["callbacks"]["diagnostics"]:
            # The recipe built once more, before its run: to check a backup
            # against the model before any file changes (fit's callbacks
            # write as soon as they are set up), and for Diagnostics' batch.
            import keras

            probe = module.build(config)
            check_backup_fits(run.dir, probe.model)
            keras.backend.clear_session()  # the run's layers get the names the backup has
        with strategy.scope():
            result = module.run(config, run.dir,
                                extra_callbacks=[*run.callbacks(probe), *extra_callbacks],
                                initial_epoch=run.initial_epoch,
                                verbose=fit_verbose(config))
        return run.finish(result, strategy)
    except KeyboardInterrupt:
        raise Interrupted(run.interrupt_note()) from None
    except Exception as error:
        if run.stop.pressed or _caused_by_interrupt(error):
            raise Interrupted(run.interrupt_note()) from None
        from recipes import data

        if isinstance(error, data.ConfigError):  # a recipe's or the data's setting
            raise UserError(str(error)) from None
        raise
    finally:
        run.close()


def prepare(config):
    """Sets the process up as `config` asks, before a recipe builds anything:
    Keras' backend and oneDNN (refused if Keras or TensorFlow started without
    them), the logical CPU devices, a clean Keras session; returns the
    `tf.distribute.Strategy` that `execution.strategy` names (a no-op scope
    for `none`, and on JAX)."""
    _environment.request_backend(config)  # refuses a backend Keras did not start on
    _environment.request_onednn(config)  # refuses a setting TensorFlow started without
    import keras

    keras.backend.clear_session()
    if config["execution"]["precision"] == "mixed_bfloat16" and _environment.backend() == "tensorflow":
        _environment.warn_if_bfloat16_is_emulated()
    if _environment.backend() != "tensorflow":
        return OneDevice()  # tf.distribute's strategies are refused on JAX
    from recipes import _distribute  # tf.distribute: imports TensorFlow

    _distribute.request_devices(config)
    return _distribute.strategy(config, worker_task())


class OneDevice:
    """What the harness uses of a strategy, for Keras on JAX: one replica, and
    a scope that changes nothing."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


def fit_verbose(config):
    """`run.verbose` for `model.fit`: `auto` is a progress bar on a terminal,
    one line per epoch in a log."""
    verbose = config["run"]["verbose"]
    if verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return verbose


class Run:
    """The run directory of one training process, from `open` to `close`.

    Attributes:
        dir: where the recipe writes (for a worker of a multi-worker run that
            is not the chief, `workers/worker-I/` below the run's).
        initial_epoch: the epoch training starts at: the finished epochs the
            backup holds.
        stop: the `StopAfterInterrupt` callback it gives the recipe.
    """

    def __init__(self, config, run_dir, created, lock, state):
        self.config, self.dir, self.created, self._lock = config, run_dir, created, lock
        self.state = state
        self.initial_epoch = state.epochs
        self.chief = is_chief(config)
        from callbacks.stop_after_interrupt import StopAfterInterrupt

        self.stop = StopAfterInterrupt()

    @classmethod
    def open(cls, config):
        """Chooses, locks and inspects the run directory; writes nothing else.

        Raises:
            UserError: the directory is locked, or holds a run this config
                cannot resume.
        """
        run_dir, created = choose(config)
        if not is_chief(config):
            run_dir = run_dir / "workers" / f"worker-{worker_task()[0]}"
            created = not run_dir.exists()
            run_dir.mkdir(parents=True, exist_ok=True)
        lock = None
        try:
            lock = _lock(run_dir)
            state = inspect(run_dir, config)
        except BaseException:
            _release(lock)
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return cls(config, run_dir, created, lock, state)

    def callbacks(self, probe=None):
        """The harness's callbacks for the recipe's `fit`, the start of
        training first; `probe`: the recipe built, for Diagnostics' batch."""
        from callbacks.divergence_stop import DivergenceStop
        from callbacks.epoch_seeds import EpochSeeds
        from callbacks.execution_mode_check import ExecutionModeCheck
        from callbacks.run_estimate import RunEstimate

        config, chosen = self.config, self.config["callbacks"]
        import keras

        gpus = _environment.gpus()
        # At the start of training: the model is built, and BackupAndRestore,
        # after these callbacks, has not read the backup yet.
        start = keras.callbacks.LambdaCallback(on_train_begin=lambda logs: self._start())
        callbacks = [
            start, self.stop,
            ExecutionModeCheck(config["execution"]["mode"]),
            EpochSeeds(config["execution"]["seed"]),
            DivergenceStop(self.dir),
            RunEstimate(config["train"]["epochs"], None if gpus else CPU_HINT),
        ]
        # Every worker of a multi-worker run, each into its own folder: under
        # MultiWorkerMirroredStrategy saving a model is collective, and a
        # save on the chief alone would wait for the others forever.
        callbacks.append(keras.callbacks.ModelCheckpoint(
            self.dir / "checkpoints" / "best.keras", monitor=chosen["monitor"],
            save_best_only=True,
            # Keras starts each process with no best value, which any epoch
            # beats: a resumed run starts from the best its history holds.
            initial_value_threshold=_best_epoch(self.state.history, chosen["monitor"]).get(
                chosen["monitor"])))
        if not self.chief:
            return callbacks
        if chosen["graph"]:
            from callbacks.graph_writer import GraphWriter

            callbacks.append(GraphWriter(self.dir / "tensorboard" / "train"))
        if chosen["profile"] is not None:
            callbacks.append(keras.callbacks.TensorBoard(
                self.dir / "tensorboard" / "profile", profile_batch=chosen["profile"]))
        if chosen["diagnostics"]:
            from callbacks.diagnostics import Diagnostics

            # The first training images, before augmentation and with the
            # recipe's labels, from a build of their own: reading the run's
            # pipeline would move on the random state that training then sees.
            callbacks.append(Diagnostics(self.dir / "tensorboard" / "diagnostics",
                                         next(iter(probe.data.train_plain))))
        return callbacks

    def _start(self):
        """Makes the changes `open` planned, and writes config.yaml."""
        self.state.apply(self.dir, self.config, print)

    def interrupt_note(self):
        """The line to print when Ctrl-C stopped this run: what was saved, and
        the command that continues it."""
        again = "the same command with run.resume=true (or the same run.dir)"
        epochs = saved_epochs(self.dir / "backup")
        if not epochs:
            return (f"interrupted before the first epoch of {self.dir} finished: no epoch "
                    f"was saved; {again} starts it again from the beginning.")
        return (f"interrupted: {epochs} finished epoch(s) are saved in {self.dir}; "
                f"run {again} to continue.")

    def finish(self, result, strategy):
        """Writes metrics.json (the chief only) once every epoch asked for is
        in history.csv, prints a summary and returns the metrics.

        Args:
            result: what the recipe's `run` returned: its `model`, `data`,
                `timing` and `test` metrics.
        """
        config = self.config
        if config["run"]["export"] and self.chief:
            # A SavedModel serves without this repository's code (TF Serving, tf.saved_model.load).
            from recipes.data import network_of

            network_of(result.model).export(self.dir / "saved_model", verbose=False)
        metrics = self._metrics(result, strategy)
        if not self.chief:
            print(f"worker {worker_task()[0]}: done, weights sha256 "
                  f"{metrics['weights_sha256']}", flush=True)
            return metrics
        epochs = [row["epoch"] for row in read_rows(self.dir / "history.csv")]
        wanted = list(range(config["train"]["epochs"]))
        if [int(float(epoch)) for epoch in epochs] != wanted:
            raise UserError(
                f"{self.dir}/history.csv holds epochs {_ranges(epochs)} where this run should "
                f"have trained {_ranges(wanted)}: no metrics.json was written, since it would "
                "not describe what ran. Run the same command again to resume, or start a new "
                "run.dir.")
        metrics = _finite_or_none(metrics)  # strict JSON: NaN becomes null
        (self.dir / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False)
                                               + "\n")
        self._print_summary(metrics)
        return metrics

    def close(self):
        """Releases the lock; removes the directory if this run created it and
        left nothing in it."""
        _release(self._lock)
        self._lock = None
        if self.created and self.dir.is_dir() and not any(
                path.name != ".lock" for path in self.dir.iterdir()):
            shutil.rmtree(self.dir, ignore_errors=True)

    def _metrics(self, result, strategy):
        """What `metrics.json` holds: the run's settings, the model, its
        history's final and best epochs, the test metrics and the timing."""
        from callbacks.timing import execution_mode

        config, model, splits = self.config, result.model, result.data
        history = read_history(self.dir / "history.csv")
        return {
            "recipe": config["recipe"],
            "run_dir": str(self.dir),
            "backend": _environment.backend(),
            "mode_requested": config["execution"]["mode"],
            "mode_used": execution_mode(model),
            "precision": config["execution"]["precision"],
            "augment_on": splits.augment_on,
            "augment_engine": splits.augment.engine if splits.augment else None,
            "strategy": config["execution"]["strategy"],
            "replicas": getattr(strategy, "num_replicas_in_sync", 1),
            "global_batch": splits.batch_size,
            "train_examples": splits.train_examples,
            "lr": config["train"]["lr"],
            # The same on every worker of a distributed run, or it went wrong.
            "weights_sha256": weights_digest(model),
            "params": model.count_params(),
            "trainable_params": sum(math.prod(w.shape) for w in model.trainable_weights),
            "epochs_completed": len(history),
            "final": history[-1] if history else {},
            "best": _best_epoch(history, config["callbacks"]["monitor"]),
            "test": {k: float(v) for k, v in result.test.items()},
            # "validation" when the data has no test split (a folder without test/).
            "evaluated_on": splits.evaluated_on,
            # "held_out" training images, or "test": every training image
            # trained (data.validation_split=0, the Keras examples' protocol).
            "validated_on": splits.validated_on,
            # Every epoch's time, from history.csv: also the epochs an
            # earlier, interrupted process of this run trained.
            "timing": {**result.timing.summary(),
                       "epoch_s": read_column(self.dir / "history.csv", "time_epoch_s")},
            "versions": _environment.versions(),
            "device": _environment.device_info(),
        }

    def _print_summary(self, metrics):
        """The test metrics and where the results are: two lines."""
        split = ("test" if metrics["evaluated_on"] == "test"
                 else "test on the validation images")
        print(f"\n{metrics['recipe']}: {split}: "
              + ", ".join(f"{k} {v:.4f}" for k, v in metrics["test"].items()))
        logs = self.dir / "tensorboard"
        print(f"results: {self.dir}/metrics.json"
              + (f"; TensorBoard: tensorboard --logdir {shlex.quote(str(logs))}"
                 if logs.is_dir() else ""),
              flush=True)


class SavedState:
    """What a run directory holds, read without changing it, and the repairs
    it needs before training goes on.

    Attributes:
        epochs: the finished epochs to resume from (0: start).
        history: history.csv's whole rows, as `read_history` gives them.
        repairs: [(note, action)] to carry out, in order, when training starts.
    """

    def __init__(self, epochs, history, repairs):
        self.epochs, self.history, self.repairs = epochs, history, repairs

    def apply(self, run_dir, config, announce):
        """Carries out the repairs, then writes config.yaml."""
        for note, action in self.repairs:
            action()
            if note:
                announce(note)
        write_config(run_dir, config)


def choose(config):
    """`(run directory, created)`: `run.dir`, the latest unfinished run with
    `run.resume`, or a new `runs/NAME/<date>-<time>` created here
    (`new_directory`) so that no other run takes its name.

    Raises:
        UserError: run.resume finds no unfinished run.
    """
    name, run = config["recipe"], config["run"]
    if run["dir"] is not None:
        run_dir = Path(run["dir"]).expanduser()
        created = not run_dir.exists()
        if created:
            _mkdir(run_dir)
        return run_dir, created
    if run["resume"]:
        unfinished = [d for d in sorted((RUNS_DIR / name).glob("*"))
                      if (d / "config.yaml").exists() and not (d / "metrics.json").exists()]
        if not unfinished:
            raise UserError(f"run.resume=true, but {RUNS_DIR / name} holds no "
                            "unfinished run to resume. Drop run.resume to start one.")
        return unfinished[-1], False
    return new_directory(RUNS_DIR / name), True


def timestamped(parent):
    """Returns `parent/<date>-<time>` (`20250131-142501`), the path of a new
    run or output directory; creating it is left to whoever writes there."""
    return Path(parent) / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def new_directory(parent):
    """Creates and returns a new directory `parent/<date>-<time>`, or
    `<date>-<time>-2`, `-3`... when another run took that name in the same
    second: created exclusively, so that two runs never share one."""
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
    raise UserError(f"{parent} has no free name for a new run directory at {path.name}; "
                    "give one with run.dir=PATH.")


def _mkdir(path):
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"Cannot create the run directory {path}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None


def _lock(run_dir):
    """An exclusive lock on `run_dir` for this process (released when it
    exits, however it exits); refused, naming the holder, if another
    process has it."""
    path = run_dir / ".lock"
    try:
        handle = open(path, "a+")
    except OSError as error:
        raise UserError(f"Cannot write in the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(f"{run_dir} is in use by {holder}: two processes must not train one "
                        "run. Wait for it to finish (or stop it), or give another run.dir."
                        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()} ({' '.join(sys.argv[:3])})\n")
    handle.flush()
    return handle


def _release(handle):
    if handle is not None:
        with contextlib.suppress(OSError):
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def inspect(run_dir, config):
    """A `SavedState`: what `run_dir` holds and whether `config` can train in
    it, read without writing.

    A new or empty directory starts at epoch 0. Otherwise config.yaml must be
    whole and differ from `config` only in `RESUMABLE_KEYS` (and keep
    train.epochs under a schedule that spans them); a finished run
    (metrics.json) can only be extended; the backup's latest state is used
    when its two files read and the metadata was written after the weights
    (a kill between the two leaves newer weights beside older metadata), else
    the previous state (`*.bkp`), said so; its epoch must be one that
    history.csv records, and within train.epochs.

    Raises:
        UserError: anything that keeps the run from resuming as it should,
            said in one line.
    """
    history_path, backup = run_dir / "history.csv", run_dir / "backup"
    saved_config = read_config(run_dir)
    repairs = []
    if saved_config is not None:
        _check_compatible(run_dir, saved_config, config)
    elif (backup / BACKUP_METADATA).exists() or history_path.exists():
        raise UserError(f"{run_dir} holds a run's backup or history but no config.yaml, so the "
                        "settings it trained with cannot be checked against these. Restore its "
                        "config.yaml, or start a new run.dir.")
    finished = read_metrics(run_dir) is not None
    if (run_dir / "metrics.json").exists() and not finished:
        repairs.append((f"repaired: {run_dir}/metrics.json was damaged (cut short); it is "
                        "written again when this run ends.",
                        lambda: (run_dir / "metrics.json").unlink(missing_ok=True)))
    rows, torn = _history_lines(history_path)
    _check_header(history_path)
    epochs, problem = _saved_state(backup, "")
    if epochs is None and backup.exists():
        previous, _ = _saved_state(backup, ".bkp")
        if previous is not None:
            repairs.append((f"repaired: {problem}; resuming from the previous backup, "
                            f"{previous} finished epochs.", lambda: _restore_previous(backup)))
            epochs = previous
    recorded = len(rows)
    if epochs is None and (backup.exists() or recorded):
        if recorded > 1 or (backup / f"{BACKUP_WEIGHTS}.bkp").exists():
            raise UserError(
                f"Cannot resume {run_dir}: {problem or f'{backup} is missing'}, and no "
                "previous state can replace it. Start a new run with another run.dir, "
                f"or delete {run_dir} to train this one from the start.")
        repairs.append((f"note: {problem or f'{backup} is missing'}; at most one epoch was "
                        "finished: starting this run from the beginning.",
                        lambda: shutil.rmtree(backup, ignore_errors=True)))
    epochs = epochs or 0
    wanted = config["train"]["epochs"]
    if epochs > wanted:
        raise UserError(f"Cannot resume {run_dir}: its backup holds {epochs} finished epochs, "
                        f"more than train.epochs={wanted}. A backup past the run's end is "
                        "damaged or from another run: start a new run.dir.")
    numbers = [int(float(row["epoch"])) for row in rows]
    if [number for number in numbers if number < epochs] != list(range(epochs)):
        raise UserError(
            f"Cannot resume {run_dir}: its backup holds {epochs} finished epoch(s), but "
            f"{history_path} records {_ranges(numbers) if numbers else 'none'}: the history "
            "that metrics.json and best.keras rest on is missing or damaged. Restore "
            "history.csv, or start a new run.dir.")
    if finished:
        if wanted <= epochs:
            raise UserError(f"{run_dir} holds a finished run of {epochs} epochs (metrics.json). "
                            f"Raise train.epochs above {epochs} to train it further, or start a "
                            "new run.")
        if epochs == 0:
            raise UserError(f"{run_dir} holds a finished run without its final training state "
                            f"(backup/{BACKUP_METADATA}), so it cannot train further: start a "
                            "new run.")
        repairs.append((f"extending the finished run in {run_dir} from {epochs} to {wanted} "
                        "epochs", lambda: (run_dir / "metrics.json").rename(
                            run_dir / f"metrics-{epochs}-epochs.json")))
    # CSVLogger appends: a last row without its newline would be joined to the next.
    text = history_path.read_bytes() if history_path.exists() else b""
    unterminated = text and not text.endswith(b"\n")
    if torn or len(rows) > epochs or unterminated:
        repairs.append(("repaired " + _torn_note(history_path, torn) if torn else "",
                        lambda: _keep_rows(history_path, epochs)))
    best = run_dir / "checkpoints" / "best.keras"
    if best.exists() and not zipfile.is_zipfile(best):
        repairs.append((f"repaired: {best} was damaged (a write that did not finish: a kill "
                        "or a full disk) and is removed; the next epoch that beats "
                        f"{config['callbacks']['monitor']}'s best writes it again.",
                        lambda: best.unlink(missing_ok=True)))
    if saved_config is not None and epochs:
        print(f"resuming the run in {run_dir} from its last finished epoch ({epochs})",
              flush=True)
    kept = [row for row in rows if int(float(row["epoch"])) < epochs]
    return SavedState(epochs, _as_history(kept), repairs)


def read_metrics(run_dir):
    """The metrics.json of a finished run in `run_dir`, or None when there is
    none or it is damaged."""
    try:
        metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) else None


def _check_compatible(run_dir, saved, config):
    changed = _changed_keys(saved, config)
    if changed:
        raise UserError(f"Cannot resume {run_dir}: its config differs in "
                        f"{', '.join(changed)}. Only run.*, train.epochs, execution.mode, "
                        "execution.steps_per_execution and execution.onednn may change; use "
                        "the same settings, or another run.dir.")
    epochs, schedule = config["train"]["epochs"], config["train"].get("schedule", "constant")
    if saved["train"]["epochs"] != epochs and schedule != "constant":
        raise UserError(f"Cannot change train.epochs from {saved['train']['epochs']} to {epochs} "
                        f"when resuming {run_dir}: its learning rate follows a '{schedule}' "
                        "schedule over all its epochs, which would jump to a new curve. "
                        "Keep the epochs, or start a new run.")


def read_config(run_dir):
    """The config a run in `run_dir` wrote, or None when there is none.

    Raises:
        UserError: config.yaml is not what the run wrote (truncated, or
            edited by hand: its digest differs).
    """
    path = run_dir / "config.yaml"
    if not path.exists():
        return None
    text = path.read_text(errors="replace")
    body, _, digest_line = text.rpartition(DIGEST_PREFIX)
    if not digest_line.strip() or _digest(body) != digest_line.strip():
        raise UserError(f"{path} is not the config this run wrote: it was cut short or edited "
                        "(its digest line differs). A run trains with what its backup holds, "
                        "whatever config.yaml says: restore the file, or start a new run.dir.")
    return yaml.safe_load(body)


# config.yaml's last line: a digest of what comes before it.
DIGEST_PREFIX = "# sha256 of the lines above, written by the harness: "


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def write_config(run_dir, config):
    """Writes the resolved `config.yaml`, with its digest line."""
    body = _config.dump(config)
    try:
        (run_dir / "config.yaml").write_text(body + DIGEST_PREFIX + _digest(body) + "\n")
    except OSError as error:
        raise UserError(f"Cannot write the run directory {run_dir}: {error.strerror}. "
                        "Give a folder you can write to with run.dir=PATH.") from None
    print(f"run directory: {run_dir}", flush=True)


def _restore_previous(backup):
    for name in (BACKUP_WEIGHTS, BACKUP_METADATA):
        shutil.copyfile(backup / f"{name}.bkp", backup / name)


def saved_epochs(backup):
    """The finished epochs a backup folder holds: its latest whole state's,
    else its previous one's (a Ctrl-C during the write leaves that whole);
    0 for none."""
    return _saved_state(backup, "")[0] or _saved_state(backup, ".bkp")[0] or 0


def check_backup_fits(run_dir, model):
    """Refuses to resume or extend the run in `run_dir` when its saved state
    holds weights of other shapes than `model`'s, or other layers.

    A backup that cannot be read is left to `inspect`.

    Raises:
        UserError: a weight's shape differs, or the layers differ.
    """
    weights = Path(run_dir) / "backup" / BACKUP_WEIGHTS
    if not weights.is_file():
        return
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        expected = Path(scratch) / "model.weights.h5"
        model.save_weights(expected)  # the layout this model saves and loads
        try:
            saved = _layer_shapes(weights)
        except (OSError, KeyError):
            return
        wanted = _layer_shapes(expected)
    differing = sorted(path for path in saved.keys() | wanted.keys()
                       if saved.get(path) != wanted.get(path))
    if differing:
        path = differing[0]
        raise UserError(
            f"Cannot resume {run_dir}: the model built now has other weights than the one its "
            f"backup holds ({len(differing)} differ; first {path}: "
            f"{saved.get(path, 'absent')} there, {wanted.get(path, 'absent')} now). A model "
            "setting or the data's classes changed, or run.dir is another recipe's run: use "
            "the settings it trained with, or another run.dir.")


def _layer_shapes(weights_file):
    """{path: shape} of every layer weight in a Keras `.weights.h5` file."""
    import h5py  # Keras' own dependency, for its .weights.h5 files

    shapes = {}
    with h5py.File(weights_file, "r") as file:
        file["layers"].visititems(lambda path, item: shapes.__setitem__(path, item.shape)
                                  if isinstance(item, h5py.Dataset) else None)
    return shapes


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


def _changed_keys(old, new, prefix=""):
    changed = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        if dotted in RESUMABLE_KEYS:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += _changed_keys(a, b, dotted + ".")
        elif a != b:
            changed.append(dotted)
    return changed


# ## history.csv: CSVLogger's one row per epoch. Read here, and only here.

def read_rows(path, announce=None):
    """The CSV history's whole rows as dicts of strings; [] if there is none yet.

    A kill while CSVLogger writes a row leaves a torn last line: one that
    does not parse to the header's fields, numbers each. Such a row is left
    out, and `announce` (e.g. `print`), if given, told so in one line;
    `inspect` also removes it from the file before training goes on.
    """
    path = Path(path)
    rows, torn = _history_lines(path)
    if torn and announce:
        announce(_torn_note(path, torn))
    return rows


def read_history(path):
    """The CSV history's epochs as dicts of the model's metrics, each with its `epoch`."""
    return _as_history(read_rows(path))


def read_column(path, column):
    """One column of the CSV history, as floats, for the epochs that have it."""
    return [float(row[column]) for row in read_rows(path)
            if row.get(column) not in (None, "", "NA")]


def _as_history(rows):
    return [{k: (int(float(v)) if k == "epoch" else float(v)) for k, v in row.items()
             if not k.startswith("time_") and v not in ("", "NA")}
            for row in rows]


def _history_lines(path):
    """(whole rows as dicts, torn lines) of the CSV at `path`."""
    if not path.exists():
        return [], []
    with path.open(newline="") as file:
        lines = file.read().splitlines(keepends=True)
    if not lines or not lines[0].endswith("\n"):  # no header yet, or a torn one
        return [], lines
    header, rows, torn = next(csv.reader(lines[:1])), [], []
    for line in lines[1:]:
        fields = next(csv.reader([line]), [])
        if len(fields) == len(header) and all(map(_is_number, fields)) and fields[0]:
            rows.append(dict(zip(header, fields)))
        elif line.strip():
            torn.append(line)
    return rows, torn


def _keep_rows(path, epochs):
    """Rewrites history.csv with the header and the whole rows of the epochs
    before `epochs`: the later ones are trained again, and a torn row goes."""
    rows, _ = _history_lines(path)
    header = _header(path)
    if not header:  # a kill while CSVLogger wrote it: it writes the header again
        path.write_text("")
        return
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(row for row in rows if int(float(row["epoch"])) < epochs)


def _header(path):
    """history.csv's column names, or [] while it has no whole header line."""
    with path.open(newline="") as file:
        first = file.readline()
    return next(csv.reader([first])) if first.endswith("\n") else []


def _check_header(path):
    """Refuses a history.csv header that CSVLogger did not write: it appends
    rows in its own column order, so rows under another header would lie."""
    names = _header(path)[1:] if path.exists() else []
    logged = [name for name in names if not name.startswith("val_")]
    # CSVLogger's order: the logged names sorted, or, without validation
    # logs, sorted and then each again with val_.
    if names and names not in (sorted(names), logged + [f"val_{n}" for n in logged]):
        raise UserError(f"{path}'s columns are not in the order CSVLogger writes them (epoch, "
                        "then the logged names sorted): a column was added or moved by hand, "
                        "and the rows this run appends would not match it. Restore the header, "
                        "or start a new run.dir.")


def _torn_note(path, torn):
    return (f"{path}: left out {len(torn)} incomplete row(s), what a kill during a write "
            f"leaves: {' | '.join(line.strip() for line in torn)}")


def _is_number(text):
    """Whether a history.csv field is a number, or empty or NA (no value)."""
    try:
        float(text)
    except ValueError:
        return text in ("", "NA")
    return True


def _best_epoch(epochs, monitor):
    """The epoch whose `monitor` is best (lowest for a loss), with its number."""
    scored = [row for row in epochs if monitor in row]
    if not scored:
        return {}
    pick = min if "loss" in monitor else max
    return dict(pick(scored, key=lambda row: row[monitor]))


def _ranges(numbers):
    """`[0, 1, 2, 5]` as "0-2, 5"."""
    numbers, spans = [int(float(n)) for n in numbers], []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"


def _finite_or_none(value):
    """`value` with every NaN or infinite float inside it replaced by None."""
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def weights_digest(model):
    """A SHA-256 of the model's weights, to compare copies of one model."""
    import numpy as np

    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


def _caused_by_interrupt(error):
    """Whether `error` is a KeyboardInterrupt, or was raised while handling
    one (library code that turns it into another exception)."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


# ## Multi-worker runs: TF_CONFIG says which process is which

def worker_task():
    """`(index, number of workers)` from `TF_CONFIG`, or None without one."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return None
    try:
        tf_config = json.loads(text)
        return tf_config["task"]["index"], len(tf_config["cluster"]["worker"])
    except (ValueError, KeyError, TypeError):
        raise UserError(f"TF_CONFIG is not a cluster spec: {text!r}. It needs "
                        '{"cluster": {"worker": [HOST:PORT, ...]}, "task": {"type": '
                        '"worker", "index": I}}.') from None


def is_chief(config):
    """Whether this process writes the run's files: worker 0 of a
    `multi_worker` run, or the only process."""
    return config["execution"]["strategy"] != "multi_worker" or worker_task()[0] == 0
