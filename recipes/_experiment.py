"""What every recipe shares around `compile` and `fit`: the execution mode,
the standard callbacks, and `Experiment`, the built recipe that `run` and the
tools train."""

import contextlib
import hashlib
import json
import math
import shlex
import sys
import warnings

import keras
import numpy as np

from callbacks import (Diagnostics, DivergenceStop, EpochSeeds, ExecutionModeCheck, GraphWriter,
                       RunEstimate, execution_mode)
from models import AugmentedModel, network_of
from recipes import UserError, _environment, _interrupt, _rundir


def prepare(config):
    """Starts a recipe from a clean slate: sets up the devices, clears Keras'
    session, seeds every random generator with `execution.seed` and sets the
    global dtype policy.

    Call it before building anything random, the input pipeline included:
    tf.data fixes its random ops' seeds when it traces them.

    Returns:
        The `tf.distribute.Strategy` that `execution.strategy` names, to
        build and compile the model in (TensorFlow's default one, a no-op,
        for `none`); `ONE_DEVICE` on JAX.
    """
    _environment.request_backend(config)  # refuses a backend Keras did not start on
    _environment.request_onednn(config)  # refuses a setting TensorFlow started without
    on_tensorflow = _environment.backend() == "tensorflow"
    if on_tensorflow:
        from recipes import _distribute  # tf.distribute: imports TensorFlow

        _distribute.request_devices(config)
    # Our pipelines shuffle themselves; fit's shuffle=True warns for nothing.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    keras.backend.clear_session()
    keras.utils.set_random_seed(config["execution"]["seed"])
    keras.mixed_precision.set_global_policy(config["execution"]["precision"])
    if config["execution"]["precision"] == "mixed_bfloat16" and on_tensorflow:
        _environment.warn_if_bfloat16_is_emulated()
    return _distribute.strategy(config) if on_tensorflow else ONE_DEVICE


class OneDevice:
    """What a recipe uses of a strategy, for Keras on JAX, which trains on
    one device here (tf.distribute's strategies are refused there): one
    replica, and a scope that changes nothing."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


ONE_DEVICE = OneDevice()


def learning_rate(config, strategy):
    """`train.lr`, times the replicas with `train.scale_lr_with_batch`: the
    linear scaling rule, since each step then averages over that many more
    images."""
    scale = strategy.num_replicas_in_sync if config["train"]["scale_lr_with_batch"] else 1
    return config["train"]["lr"] * scale


def learning_rate_schedule(train_config, steps_per_epoch, lr):
    """The learning rate per optimizer step that `train.schedule` names,
    peaking at `lr`, after a linear warm-up from 0 over `train.warmup_epochs`
    if there is one.

    `step`: the paper's, `lr` divided by 10 at 50% and again at 75% of the
    steps. `cosine`: cosine decay to 0. `constant`: `lr` throughout.
    The schedules count optimizer steps, which a resumed run restores.
    """
    total = train_config["epochs"] * steps_per_epoch
    warmup = train_config["warmup_epochs"] * steps_per_epoch
    if warmup and warmup >= total:
        raise UserError(f"train.warmup_epochs={train_config['warmup_epochs']} leaves "
                        f"no epoch of the {train_config['epochs']} to train after it; lower it.")
    if train_config["schedule"] == "step":
        # The rate moves on once `step` passes a boundary; step n is the (n+1)th.
        steps = keras.optimizers.schedules.PiecewiseConstantDecay(
            boundaries=[total // 2 - 1, total * 3 // 4 - 1], values=[lr, lr / 10, lr / 100])
        return LinearWarmup(steps, warmup, lr) if warmup else steps
    if train_config["schedule"] == "constant" and not warmup:
        return lr
    # alpha is the floor of the decay, as a fraction of lr: 1 keeps it constant.
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else lr, decay_steps=total - warmup,
        alpha=1.0 if train_config["schedule"] == "constant" else 0.0,
        warmup_target=lr if warmup else None, warmup_steps=warmup)


@keras.saving.register_keras_serializable(package="recipes")
class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """A linear rise from 0 to `target` over `warmup_steps`, then `after`,
    which counts steps from the start of training, as CosineDecay's
    `warmup_steps` does. For schedules that have no warm-up of their own.

    Args:
        after: the `LearningRateSchedule` to follow from `warmup_steps` on.
        warmup_steps: how many optimizer steps the rise takes.
        target: the rate it reaches, `after`'s first.
    """

    def __init__(self, after, warmup_steps, target):
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be at least 1, got {warmup_steps}.")
        self.after, self.warmup_steps, self.target = after, warmup_steps, target

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        rising = self.target * step / self.warmup_steps
        return keras.ops.where(step < self.warmup_steps, rising, self.after(step))

    def get_config(self):
        return {"after": keras.optimizers.schedules.serialize(self.after),
                "warmup_steps": self.warmup_steps, "target": self.target}

    @classmethod
    def from_config(cls, config):
        return cls(keras.optimizers.schedules.deserialize(config.pop("after")), **config)


class Experiment:
    """A recipe, built: the compiled model, its data and its strategy.

    Every recipe's `build(config)` returns one; its `run(config)` then opens
    the run directory, calls `model.fit` with the standard callbacks, evaluates
    and calls `finish`. The tools (`compare`, `graph`, `preview`, `sweep`)
    start from `build` too, so they train exactly what the recipe trains.
    Creating one writes nothing: `open_run_dir` does.

    Args:
        config: the resolved config.
        model: the compiled model; an `AugmentedModel` when augmentation runs
            on the device.
        data: the `recipes._data.Data` it trains on.
        strategy: the `tf.distribute.Strategy` the model was built in
            (`ONE_DEVICE` on JAX).

    Attributes:
        chief: whether this process writes the run's files (worker 0 of a
            multi-worker run, or the only process).
        run_dir: where this process writes, once `open_run_dir` has run.
    """

    def __init__(self, config, model, data, strategy):
        if (data.augment_on == "device") != isinstance(model, AugmentedModel):
            raise ValueError("Augmentation placed on the device needs the model wrapped in "
                             f"models.AugmentedModel, and only then; data.augment_on="
                             f"{data.augment_on!r}, model: {type(model).__name__}.")
        self.config, self.model, self.data, self.strategy = config, model, data, strategy
        self.chief = _rundir.is_chief(config)
        self.run_dir = None

    def open_run_dir(self):
        """Creates the run directory, or reopens `run.dir`'s to resume it, and
        writes the resolved `config.yaml` there; returns its path.

        A damaged or partial backup in it is repaired or refused first, and
        `data.train` then starts at the step the run resumes at. Under
        `multi_worker`, only the chief writes the run's files; each other
        worker keeps its own training state in `workers/worker-I/` beside them.
        """
        # A saved state the model no longer fits is refused before choose()
        # changes anything in run.dir (it reopens a finished run there).
        named = self.config["run"]["dir"]
        if named is not None:
            _rundir.check_backup_fits(named, self.model)
        run_dir = _rundir.choose(self.config)
        if named is None:  # run.resume's pick, or a new directory
            _rundir.check_backup_fits(run_dir, self.model)
        if not self.chief:
            run_dir = run_dir / "workers" / f"worker-{_rundir.worker_task()[0]}"
        # BackupAndRestore resumes after the epochs its backup holds: the data
        # goes on from there too, with the batches an uninterrupted run sees.
        # (A new pipeline traces its augmentation again: only when resuming.)
        finished_epochs = _rundir.check_backup(run_dir)
        if finished_epochs:
            self.data.train = self.data.train_from(finished_epochs * self.data.steps_per_epoch)
        self.run_dir = _rundir.create(run_dir, self.config)
        return self.run_dir

    @property
    def augment_on(self):
        """Where augmentation runs: "device" (in the model's step), "host" (tf.data) or None."""
        if isinstance(self.model, AugmentedModel):
            return "device"
        return "host" if self.data.augment_on == "host" else None

    def finish(self, test_metrics, timing):
        """Writes `metrics.json` into the run directory (the chief only),
        prints a summary and returns the metrics; exports the model first if
        `run.export` asks.

        Args:
            test_metrics: `model.evaluate(..., return_dict=True)`'s result.
            timing: the `Timing` callback that `fit` ran with.
        """
        if self.config["run"]["export"] and self.chief:
            # A SavedModel serves without this repository's code (TF Serving, tf.saved_model.load).
            network_of(self.model).export(self.run_dir / "saved_model", verbose=False)
        metrics = self._metrics(test_metrics, timing)
        if not self.chief:
            print(f"worker {_rundir.worker_task()[0]}: done, weights sha256 "
                  f"{metrics['weights_sha256']}", flush=True)
            return metrics
        # Strict JSON: a value that is not a finite number is null, not NaN.
        metrics = _finite_or_none(metrics)
        (self.run_dir / "metrics.json").write_text(
            json.dumps(metrics, indent=2, allow_nan=False) + "\n")
        self._print_summary(metrics)
        return metrics

    def _metrics(self, test_metrics, timing):
        """What `metrics.json` holds: the run's settings, the model, its
        history's final and best epochs, the test metrics and the timing."""
        config, model, run_dir = self.config, self.model, self.run_dir
        epochs = _rundir.read_history(run_dir / "history.csv")
        return {
            "recipe": config["recipe"],
            "run_dir": str(run_dir),
            "backend": _environment.backend(),
            "mode_requested": config["execution"]["mode"],
            "mode_used": execution_mode(model),
            "precision": config["execution"]["precision"],
            "augment_on": self.augment_on,
            "augment_engine": self.data.augment.engine if self.data.augment else None,
            "strategy": config["execution"]["strategy"],
            "replicas": self.strategy.num_replicas_in_sync,
            "global_batch": self.data.batch_size,
            "lr": learning_rate(config, self.strategy),
            # The same on every worker of a distributed run, or it went wrong.
            "weights_sha256": weights_digest(model),
            "params": model.count_params(),
            "trainable_params": sum(math.prod(w.shape) for w in model.trainable_weights),
            "epochs_completed": len(epochs),
            "final": epochs[-1] if epochs else {},
            "best": _best_epoch(epochs, config["callbacks"]["monitor"]),
            "test": {k: float(v) for k, v in test_metrics.items()},
            # "validation" when the data has no test split (a folder without test/).
            "evaluated_on": self.data.evaluated_on,
            # "held_out" training images, or "test": every training image
            # trained (data.validation_split=0, the Keras examples' protocol).
            "validated_on": self.data.validated_on,
            # Every epoch's time, from history.csv: also the epochs an
            # earlier, interrupted process of this run trained.
            "timing": {**timing.summary(),
                       "epoch_s": _rundir.read_column(run_dir / "history.csv", "time_epoch_s")},
            "versions": _environment.versions(),
            "device": _environment.device_info(),
        }

    def _print_summary(self, metrics):
        """The test metrics, the step time and where the results are: three lines."""
        t = metrics["timing"]
        split = "test" if self.data.evaluated_on == "test" else "test on the validation images"
        print(f"\n{metrics['recipe']}: {split}: "
              + ", ".join(f"{k} {v:.4f}" for k, v in metrics["test"].items()))
        if t["step_ms_median"] is not None:
            print(f"mode {metrics['mode_used']}, {t['step_ms_median']:.1f} ms/step, "
                  f"{t['images_per_s']:.0f} images/s, trace {t['trace_s']:.2f} s")
        logs = self.run_dir / "tensorboard"
        print(f"results: {self.run_dir}/metrics.json"
              + (f"; TensorBoard: tensorboard --logdir {shlex.quote(str(logs))}"
                 if logs.is_dir() else ""),
              flush=True)


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
    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


# What RunEstimate adds to a CPU run's estimate of more than a day.
CPU_HINT = ("On a CPU, densenet_cifar10_cpu trains a DenseNet for CIFAR-10 in about an hour "
            "(make recipe NAME=densenet_cifar10_cpu).")


def fit_verbose(config):
    """`run.verbose` for `model.fit`: a progress bar only on a terminal."""
    verbose = config["run"]["verbose"]
    if verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return verbose


class StopAfterInterrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the first batch end after Ctrl-C, in case
    library code swallowed the one the signal raised (recipes/_interrupt.py)."""

    def on_train_batch_end(self, batch, logs=None):
        if _interrupt.pressed:
            raise KeyboardInterrupt

    on_test_batch_end = on_predict_batch_end = on_train_batch_end


def standard_callbacks(config, run_dir, data):
    """Returns the callbacks every recipe trains with, as `config` asks:
    StopAfterInterrupt, ExecutionModeCheck, EpochSeeds, DivergenceStop,
    CSVLogger, GraphWriter, TensorBoard, Diagnostics, ModelCheckpoint, and
    BackupAndRestore last. A worker that is not the chief gets only those that
    write nothing shared.

    Put a `Timing` callback before these, so the TensorBoard and CSV logs
    record its numbers. `data` gives Diagnostics its first training batch
    and EpochSeeds the augmentation layers on the device; None when neither
    is used.
    """
    chosen = config["callbacks"]
    on_device = data is not None and data.augment_on == "device"
    device_augmentation = data.augment.layers if on_device else []
    callbacks = [
        StopAfterInterrupt(),
        ExecutionModeCheck(config["execution"]["mode"]),
        # Dropout masks and device augmentation from (seed, epoch): a resumed
        # epoch draws what it would have drawn without the interruption.
        EpochSeeds(config["execution"]["seed"], device_augmentation),
        # Not TerminateOnNaN, after which fit returns as if it had finished.
        DivergenceStop(run_dir),
        RunEstimate(config["train"]["epochs"], None if _environment.gpus() else CPU_HINT),
    ]
    # Saves the whole training state each epoch, and restores it when the
    # same run directory trains again: a kill loses one epoch at most. The
    # previous state is kept too (double_checkpoint), for a kill during the
    # write; _rundir.check_backup picks the state to resume from. Last, so
    # that an epoch is backed up only once every other callback has
    # recorded it. One directory per worker: Keras 3's is not multi-worker aware.
    # The final state stays too (delete_checkpoint=False): a finished run can
    # be trained further by raising train.epochs.
    backup = keras.callbacks.BackupAndRestore(run_dir / "backup", double_checkpoint=True,
                                              delete_checkpoint=False)
    if not _rundir.is_chief(config):
        return [*callbacks, backup]
    callbacks.append(keras.callbacks.CSVLogger(run_dir / "history.csv", append=True))
    if chosen["graph"]:
        callbacks.append(GraphWriter(run_dir / "tensorboard" / "train"))
    callbacks += _tensorboard(chosen, run_dir)
    if chosen["diagnostics"]:
        # The first training images, before augmentation: not from `train`,
        # whose every new iterator (and augmentation call) moves on the
        # random state that training then sees.
        callbacks.append(Diagnostics(run_dir / "tensorboard" / "diagnostics",
                                     next(iter(data.train_plain))))
    if chosen["checkpoint"]:
        checkpoints = run_dir / "checkpoints"
        callbacks += [
            # Keras starts each process with no best value, which any epoch
            # beats: a resumed run starts from the best its history holds.
            keras.callbacks.ModelCheckpoint(
                checkpoints / "best.keras", monitor=chosen["monitor"],
                save_best_only=True,
                initial_value_threshold=_best_so_far(run_dir, chosen["monitor"])),
            keras.callbacks.ModelCheckpoint(checkpoints / "last.keras"),
        ]
    return [*callbacks, backup]


def _tensorboard(chosen, run_dir):
    """[Keras' TensorBoard callback] as `callbacks.tensorboard` and
    `callbacks.profile` ask; [] without TensorFlow, said so."""
    if chosen["profile"] is not None and not chosen["tensorboard"]:
        raise UserError("callbacks.profile writes into the TensorBoard logs: "
                        "it needs callbacks.tensorboard=true.")
    if not chosen["tensorboard"]:
        return []
    if not _environment.has_tensorflow():
        print("callbacks.tensorboard: skipped, Keras' TensorBoard callback writes through "
              "tf.summary and TensorFlow is not installed here; history.csv has every "
              "epoch's numbers.", flush=True)
        return []
    try:
        return [keras.callbacks.TensorBoard(run_dir / "tensorboard",
                                            profile_batch=chosen["profile"] or 0)]
    except ValueError:
        raise UserError("callbacks.profile takes the first and last training step to "
                        f"profile, e.g. callbacks.profile=5,8; got {chosen['profile']!r}."
                        ) from None


def _best_so_far(run_dir, monitor):
    """The best `monitor` value in the run's history.csv (the epochs earlier
    processes of this run trained, which best.keras holds), or None."""
    return _best_epoch(_rundir.read_history(run_dir / "history.csv"), monitor).get(monitor)


def _best_epoch(epochs, monitor):
    """The epoch whose `monitor` is best (lowest for a loss), with its number."""
    scored = [(number, row) for number, row in enumerate(epochs) if monitor in row]
    if not scored:
        return {}
    pick = min if "loss" in monitor else max
    number, row = pick(scored, key=lambda item: item[1][monitor])
    return {"epoch": number, **row}
