"""What every recipe does around `compile` and `fit`: the run directory, the
execution mode, the standard callbacks and `metrics.json`."""

import csv
import datetime
import importlib.metadata
import json
import math
import os
import platform
import sys
import warnings
from pathlib import Path

import keras
import tensorflow as tf
import yaml

from callbacks import ExecutionModeCheck, GraphWriter
from recipes import RUNS_DIR, UserError
from recipes._config import dump

# Keys that may change between a run and its resumption.
RESUMABLE_KEYS = {"run", "train.epochs"}


def prepare(config):
    """Starts a recipe from a clean slate: clears Keras' session, seeds every
    random generator with `execution.seed` and sets the global dtype policy.

    Call it before building anything random, the input pipeline included:
    tf.data fixes its random ops' seeds when it traces them.
    """
    # Our pipelines shuffle themselves; fit's shuffle=True warns for nothing.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    keras.backend.clear_session()
    keras.utils.set_random_seed(config["execution"]["seed"])
    keras.mixed_precision.set_global_policy(config["execution"]["precision"])


class _FitReached(Exception):
    """Stops a recipe at its `fit` call (`until_fit`)."""


def until_fit(name, config):
    """Runs recipe `name` with `config` up to its `model.fit` call, and stops there.

    Returns `(model, x, fit_kwargs)`: the compiled, untrained model, its
    training data and the rest of the call, for `compare` and `graph` to use
    as they need. Keras has no hook between compile and fit, so
    `keras.Model.fit` is swapped out for that call.
    """
    import recipes

    reached = {}

    def stop_at_fit(model, x, **kwargs):
        reached.update(model=model, x=x, kwargs=kwargs)
        raise _FitReached

    original_fit, keras.Model.fit = keras.Model.fit, stop_at_fit
    try:
        recipes.load(name).run(config)
    except _FitReached:
        pass
    finally:
        keras.Model.fit = original_fit
    return reached["model"], reached["x"], reached["kwargs"]


def start_run(config):
    """Creates (or, to resume, reuses) the directory of a run of
    `config["recipe"]`, writes the resolved `config.yaml` into it and returns it.
    """
    run_dir = _run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump(config))
    print(f"run directory: {run_dir}", flush=True)
    return run_dir


def _run_dir(config):
    name, run = config["recipe"], config["run"]
    if run["dir"] is not None:
        run_dir = Path(run["dir"]).expanduser()
    elif run["resume"]:
        unfinished = [d for d in sorted((RUNS_DIR / name).glob("*"))
                      if (d / "config.yaml").exists() and not (d / "metrics.json").exists()]
        if not unfinished:
            raise UserError(f"run.resume=true, but {RUNS_DIR / name} holds no "
                            "unfinished run to resume. Drop run.resume to start one.")
        run_dir = unfinished[-1]
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        return RUNS_DIR / name / stamp

    if (run_dir / "metrics.json").exists():
        raise UserError(f"{run_dir} holds a finished run (metrics.json). "
                        "Start a new run, or give another run.dir.")
    if (run_dir / "config.yaml").exists():
        changed = _changed_keys(yaml.safe_load((run_dir / "config.yaml").read_text()), config)
        if changed:
            raise UserError(f"Cannot resume {run_dir}: its config differs in "
                            f"{', '.join(changed)}. Use the same settings, or "
                            "another run.dir.")
        print(f"resuming the run in {run_dir} from its last finished epoch")
    return run_dir


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


def compile_options(config):
    """Returns the `model.compile` arguments of `config`'s execution mode."""
    execution = config["execution"]
    mode = execution["mode"]
    return {
        "run_eagerly": mode == "eager",
        "jit_compile": mode == "xla",
        "steps_per_execution": execution["steps_per_execution"],
    }


def fit_verbose(config):
    """`run.verbose` for `model.fit`: a progress bar only on a terminal."""
    verbose = config["run"]["verbose"]
    if verbose == "auto":
        return 1 if sys.stdout.isatty() else 2
    return verbose


def standard_callbacks(config, run_dir):
    """Returns the callbacks every recipe trains with, as `config` asks.

    Put a `Timing` callback before these, so the TensorBoard and CSV logs
    record its numbers.
    """
    run_dir = Path(run_dir)
    chosen = config["callbacks"]
    callbacks = [
        ExecutionModeCheck(config["execution"]["mode"]),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.CSVLogger(run_dir / "history.csv", append=True),
        # Saves the whole training state each epoch, and restores it when the
        # same run directory trains again: a kill loses one epoch at most.
        keras.callbacks.BackupAndRestore(run_dir / "backup"),
    ]
    if chosen["graph"]:
        callbacks.append(GraphWriter(run_dir / "tensorboard" / "train"))
    if chosen["profile"] is not None and not chosen["tensorboard"]:
        raise UserError("callbacks.profile writes into the TensorBoard logs: "
                        "it needs callbacks.tensorboard=true.")
    if chosen["tensorboard"]:
        try:
            callbacks.append(keras.callbacks.TensorBoard(
                run_dir / "tensorboard", profile_batch=chosen["profile"] or 0))
        except ValueError:
            raise UserError("callbacks.profile takes the first and last training step to "
                            f"profile, e.g. callbacks.profile=5,8; got {chosen['profile']!r}."
                            ) from None
    if chosen["checkpoint"]:
        checkpoints = run_dir / "checkpoints"
        callbacks += [
            keras.callbacks.ModelCheckpoint(
                checkpoints / "best.keras", monitor=chosen["monitor"],
                save_best_only=True),
            keras.callbacks.ModelCheckpoint(checkpoints / "last.keras"),
        ]
    return callbacks


def finish_run(config, run_dir, model, test_metrics, timing, data):
    """Writes `metrics.json` into `run_dir`, prints a summary, returns the dict."""
    name = config["recipe"]
    run_dir = Path(run_dir)
    epochs = _read_history(run_dir / "history.csv")
    metrics = {
        "recipe": name,
        "run_dir": str(run_dir),
        "mode_requested": config["execution"]["mode"],
        "mode_used": ExecutionModeCheck.mode_of(model),
        "precision": config["execution"]["precision"],
        # Where augmentation really ran: in tf.data, in the step that
        # _augment.on_device wrapped, or nowhere (null).
        "augment_on": ("device" if hasattr(model.train_step, "augment")
                       else "host" if data.augment_on == "host" else None),
        "augment_engine": config["data"]["augment_engine"] if data.augment else None,
        "params": model.count_params(),
        "trainable_params": sum(math.prod(w.shape) for w in model.trainable_weights),
        "epochs_completed": len(epochs),
        "final": epochs[-1] if epochs else {},
        "best": _best_epoch(epochs, config["callbacks"]["monitor"]),
        "test": {k: float(v) for k, v in test_metrics.items()},
        "timing": timing.summary(),
        "versions": {package: _version(package)
                     for package in ("tensorflow", "keras", "keras-cv")},
        "device": device_info(),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")

    t = metrics["timing"]
    print(f"\n{name}: test " + ", ".join(f"{k} {v:.4f}" for k, v in metrics["test"].items()))
    if t["step_ms_median"] is not None:
        print(f"mode {metrics['mode_used']}, {t['step_ms_median']:.1f} ms/step, "
              f"{t['images_per_s']:.0f} images/s, trace {t['trace_s']:.2f} s")
    print(f"results: {run_dir}/metrics.json; TensorBoard: "
          f"tensorboard --logdir {run_dir / 'tensorboard'}", flush=True)
    return metrics


def _best_epoch(epochs, monitor):
    """The epoch whose `monitor` is best (lowest for a loss), with its number."""
    scored = [(number, row) for number, row in enumerate(epochs) if monitor in row]
    if not scored:
        return {}
    pick = min if "loss" in monitor else max
    number, row = pick(scored, key=lambda item: item[1][monitor])
    return {"epoch": number, **row}


def _read_history(path):
    """The CSV history's epochs as dicts of the model's metrics."""
    if not path.exists():
        return []
    with path.open() as file:
        return [{k: float(v) for k, v in row.items()
                 if k != "epoch" and not k.startswith("time_") and v != ""}
                for row in csv.DictReader(file)]


def _version(package):
    if package == "tensorflow":
        return tf.__version__  # installed as tensorflow-cpu or tensorflow
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# CPU features that decide TensorFlow's kernels: with AVX-512 VNNI, BF16 or
# AMX it runs oneDNN's (_Mkl*) instead of Eigen's.
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")


def device_info():
    """The accelerators TensorFlow sees, and the CPU's name, cores and features."""
    gpus = [tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name)
            for gpu in tf.config.list_physical_devices("GPU")]
    name, flags = _cpu()
    return {"gpus": gpus, "cpu": name,
            "cpu_cores": len(os.sched_getaffinity(0)),
            "cpu_features": [feature for feature in CPU_FEATURES if feature in flags],
            "platform": platform.platform()}


def _cpu():
    """The CPU's model name and its feature flags, from /proc/cpuinfo where there is one."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    return name, flags
