"""The harness: how every run of a recipe happens, in one call,
`harness.train(config)`, for `python -m keras_course_recipes run` (and `make
recipe`) and for a recipe file (`runs.main`: `python NAME.py`, `%run`, a
notebook cell) alike; the two differ only in where the settings come from.

The run itself, keras_course_recipes/rundir.py's `Run`: its run directory (locked,
resumed at its last finished epoch, repaired where a kill cut a history row)
and its callbacks (config.yaml as training starts, one Ctrl-C or SIGTERM stops
it, each epoch's random draws from (seed, epoch), a diverged loss stops it).
Around it, the harness adds:

- the process set up as the config asks: Keras' backend, oneDNN, logical
  CPU devices, and the `tf.distribute` strategy whose scope `run` is called
  in (execution.strategy, docs/distributed.md);
- `run.resume=true`: the newest unfinished run of these settings;
- more checks before anything changes (`inspect`): history.csv records
  every epoch the backup holds, in CSVLogger's columns; a finished run
  (metrics.json) is only extended, its metrics.json kept as
  metrics-N-epochs.json; a damaged best.keras or metrics.json is removed;
  and when resuming, the recipe built once more, so that the backup's
  weights are checked against the model's before fit's callbacks write;
- callbacks after the run's own: `callbacks.ExecutionModeCheck` (warns when
  the mode asked for is not the mode the model runs in),
  `callbacks.RunEstimate` (the whole run's time, after its first epoch),
  `callbacks.BestCheckpoint` (Keras' ModelCheckpoint, quiet on the epochs
  `train.validation_freq` skips) for `checkpoints/best.keras` by
  `callbacks.monitor`, from the best epoch history.csv holds, and as
  `callbacks.*` asks, `callbacks.GraphWriter`, a profiling TensorBoard
  (`tensorboard/profile`) and `callbacks.Diagnostics`;
- after training, `metrics.json` (what ran, the final and best epochs, the
  test metrics, timing, versions, the machine), a summary, and with
  `run.export` a SavedModel.
"""

import contextlib
import csv
import hashlib
import importlib
import json
import math
import os
import shlex
import zipfile
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, history_csv, machine, process, rundir

# What RunEstimate adds to a CPU run's estimate of more than a day.
from keras_course_recipes.errors import UserError
CPU_HINT = ("On a CPU, the recipes made for one train CIFAR-10 in under an hour: "
            "`recipes list` says which.")


def train(config, extra_callbacks=(), recipe=None, requested=False):
    """Trains the recipe `config["recipe"]` names through its module's `run`, as
    this module's docstring says (with `extra_callbacks` after the harness's);
    returns the metrics that metrics.json holds. `recipe`: a recipe file's own
    `build` and `run` (`runs.main`), in a process whose Keras it started; its
    run returns, with `metrics` added. `requested`: the command line asked for
    the backend and oneDNN of `config` already (`prepare`). SIGTERM and a
    standard output whose reader has gone are the entry point's
    (`signals_and_output`), set up once, around everything it does.

    Raises:
        UserError: a setting, directory or saved state that cannot work;
            `errors.Interrupted` after Ctrl-C or SIGTERM.
        errors.TrainingDiverged: the loss diverged.
    """
    strategy = prepare(config, requested=requested or recipe is not None)
    module = recipe or kit.load(config["recipe"])  # which imports Keras: after `prepare`
    with open_run(config) as run:
        probe = None
        if module.build and (run.initial_epoch or config["callbacks"]["diagnostics"]):
            # The recipe built once more, before its run: to check a backup
            # against the model before any file changes (fit's callbacks,
            # TensorBoard's among them, write as soon as they are set up), and
            # for Diagnostics' batch (reading the run's pipeline would move on
            # the random state that training then sees).
            import keras

            probe = module.build(config)
            check_backup_fits(run.dir, probe.model)
            keras.backend.clear_session()  # the run's layers get the names the backup has
        with strategy.scope():
            result = run.train(module.run, [*callbacks(run, probe), *extra_callbacks])
        metrics = finish(run, result, strategy)
    if recipe is None:
        return metrics
    result.metrics = metrics
    return result


def open_run(config):
    """`rundir.Run.open` for this repository's run of `config`: with `run.resume`,
    the newest unfinished run of these settings (`choose`); a worker of a
    multi-worker run, its own folder below the run's; checked by `inspect`."""
    run_dir = choose(config)[0] if config["run"]["resume"] and config["run"]["dir"] is None else None
    if not is_chief(config):  # multiworker gives every worker run.dir
        run_dir = Path(config["run"]["dir"]).expanduser() / "workers" / f"worker-{worker_task()[0]}"
    return rundir.Run.open(config, run_dir, inspect)


def prepare(config, requested=False):
    """Sets the process up as `config` asks, before a recipe builds anything:
    Keras' backend and oneDNN (refused if Keras or TensorFlow started without
    them; `requested`: asked for already, by the command line before anything
    imported Keras, or by a recipe file as it imported Keras), the logical CPU
    devices, a clean Keras session; returns the `tf.distribute.Strategy` that
    `execution.strategy` names (a no-op scope for `none`, and on JAX)."""
    if not requested:
        process.request_backend(config)
        process.request_onednn(config)
    import keras

    keras.backend.clear_session()
    if machine.backend() != "tensorflow":
        return OneDevice()  # tf.distribute's strategies are refused on JAX
    from keras_course_recipes import _distribute  # tf.distribute: imports TensorFlow

    _distribute.request_devices(config)
    strategy = _distribute.strategy(config, worker_task())
    if config["execution"]["precision"] == "mixed_bfloat16":
        # After the devices and the strategy, which must come before any op: the probe runs some.
        machine.warn_if_bfloat16_is_slow()
    return strategy


class OneDevice:
    """What the harness uses of a strategy, for Keras on JAX: one replica, and
    a scope that changes nothing."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


def callbacks(run, probe=None):
    """The harness's callbacks for the recipe's `fit`, after the run's own;
    `probe`: the recipe built, for Diagnostics' batch."""
    import keras

    from keras_course_recipes.callbacks.best_checkpoint import BestCheckpoint
    from keras_course_recipes.callbacks.execution_mode_check import ExecutionModeCheck
    from keras_course_recipes.callbacks.run_estimate import RunEstimate

    config, chosen = run.config, run.config["callbacks"]
    found = [ExecutionModeCheck(config["execution"]["mode"]),
             RunEstimate(config["train"]["epochs"], None if machine.gpus() else CPU_HINT)]
    # Every worker of a multi-worker run, each into its own folder: under
    # MultiWorkerMirroredStrategy saving a model is collective, and a save
    # on the chief alone would wait for the others forever.
    found.append(BestCheckpoint(
        run.dir / "checkpoints" / "best.keras", monitor=chosen["monitor"],
        validation_freq=config["train"].get("validation_freq", 1),
        # Keras starts each process with no best value, which any epoch beats.
        initial_value_threshold=_best_epoch(history_csv.as_history(run.state.rows), chosen["monitor"]).get(
            chosen["monitor"])))
    if not is_chief(config):
        return found
    if chosen["graph"]:
        GraphWriter = asked_callback("graph_writer", "callbacks.graph").GraphWriter
        found.append(GraphWriter(run.dir / "tensorboard" / "train"))
    if chosen["profile"] is not None:
        found.append(keras.callbacks.TensorBoard(run.dir / "tensorboard" / "profile",
                                                 profile_batch=chosen["profile"]))
    if chosen["diagnostics"]:
        Diagnostics = asked_callback("diagnostics", "callbacks.diagnostics").Diagnostics
        found.append(Diagnostics(run.dir / "tensorboard" / "diagnostics",
                                 next(iter(probe.data.train_plain))))
    return found


def asked_callback(module, setting):
    """keras_course_recipes/callbacks/`module`.py, which a run imports only when
    `setting` asks for it: by name, so that `recipes copy` leaves it out of a
    copy (as it leaves folder.py), where it is one line saying to copy it."""
    name = f"keras_course_recipes.callbacks.{module}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        raise UserError(f"{setting}=true writes with keras_course_recipes/callbacks/{module}.py: "
                        "copy it from the repository beside keras_course_recipes/callbacks/"
                        "timing.py.") from None


def finish(run, result, strategy):
    """Writes metrics.json (the chief only) once every epoch asked for is in
    history.csv, prints a summary and returns the metrics."""
    config = run.config
    if config["run"]["export"] and is_chief(config):
        # A SavedModel serves without this repository's code (TF Serving, tf.saved_model.load).
        network = getattr(result.model, "network", result.model)  # inside an AugmentedModel
        network.export(run.dir / "saved_model", verbose=False)
    metrics = _metrics(run, result, strategy)
    if not is_chief(config):
        print(f"worker {worker_task()[0]}: done, weights sha256 {metrics['weights_sha256']}",
              flush=True)
        return metrics
    epochs = [row["epoch"] for row in history_csv.read_rows(run.dir / "history.csv")]
    wanted = list(range(config["train"]["epochs"]))
    if [int(float(epoch)) for epoch in epochs] != wanted:
        raise UserError(
            f"{run.dir}/history.csv holds epochs {_ranges(epochs)} where this run should "
            f"have trained {_ranges(wanted)}: no metrics.json was written, since it would "
            "not describe what ran. Run the same command again to resume, or start a new "
            "run.dir.")
    metrics = _finite_or_none(metrics)  # strict JSON: NaN becomes null
    (run.dir / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    split = "test" if metrics["evaluated_on"] == "test" else "test on the validation images"
    print(f"\n{metrics['recipe']}: {split}: "
          + ", ".join(f"{k} {v:.4f}" for k, v in metrics["test"].items()))
    logs = run.dir / "tensorboard"
    print(f"results: {run.dir}/metrics.json"
          + (f"; TensorBoard: tensorboard --logdir {shlex.quote(str(logs))}"
             if logs.is_dir() else ""), flush=True)
    return metrics


def _metrics(run, result, strategy):
    """What metrics.json holds: the run's settings, the model, its history's
    final and best epochs, the test metrics and the timing."""
    from keras_course_recipes.callbacks.timing import execution_mode

    config, model, splits = run.config, result.model, result.data
    history = history_csv.read_history(run.dir / "history.csv")
    return {
        "recipe": config["recipe"],
        "run_dir": str(run.dir),
        "backend": machine.backend(),
        "mode_requested": config["execution"]["mode"],
        "mode_used": execution_mode(model),
        "precision": config["execution"]["precision"],
        "augment_on": splits.augment_on,
        "augment_engine": splits.augment.engine if splits.augment_on else None,
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
        # Every epoch's time, from history.csv: also the epochs an earlier,
        # interrupted process of this run trained.
        "timing": {**result.timing.summary(),
                   "epoch_s": history_csv.read_column(run.dir / "history.csv", "time_epoch_s")},
        "versions": machine.versions(),
        "device": machine.device_info(),
    }


def choose(config):
    """`(run directory, created)`: with `run.resume` and no `run.dir`, the newest
    unfinished run in runs/NAME/ of these settings; else `rundir.choose`'s.

    Raises:
        UserError: run.resume finds no unfinished run of these settings; it
            says which runs it found, and why none fits.
    """
    name, run = config["recipe"], config["run"]
    if run["dir"] is not None or not run["resume"]:
        return rundir.choose(config)
    found = []
    for candidate in sorted((RUNS_DIR / name).glob("*"), reverse=True):
        if not (candidate / "config.yaml").exists() or (candidate / "metrics.json").exists():
            continue
        try:
            changed = rundir.changed_keys(rundir.read_config(candidate), config)
        except UserError:
            changed = ["config.yaml, which is damaged"]
        if not changed:
            return candidate, False
        found.append(f"{candidate.name} differs in {', '.join(changed[:3])}")
    raise UserError(f"run.resume=true, but {RUNS_DIR / name} holds no unfinished run of these "
                    "settings" + (f" ({'; '.join(found)})" if found else "") + ". Drop "
                    "run.resume to start one, or name a run to go on with run.dir=DIR.")


def inspect(run_dir, config):
    """`rundir.inspect`, and before it the checks a run of this repository's
    needs: a finished run (metrics.json) is extended only to more epochs;
    history.csv is in CSVLogger's columns and records every epoch the backup
    holds; a damaged metrics.json or best.keras is removed (said so)."""
    if config["run"]["resume"] and not (run_dir / "config.yaml").exists():
        raise UserError(f"run.resume=true, but {run_dir} holds no run to resume (no config.yaml): "
                        "drop run.resume to start a run there, or give the run.dir of the run "
                        "to go on with.")
    history = run_dir / "history.csv"
    _check_header(history)
    metrics_path, best = run_dir / "metrics.json", run_dir / "checkpoints" / "best.keras"
    finished = read_metrics(run_dir) is not None
    state = rundir.inspect(run_dir, config)
    epochs, wanted = state.epochs, config["train"]["epochs"]
    numbers = [int(float(row["epoch"])) for row in history_csv.history_rows(history)[0]]
    if [number for number in numbers if number < epochs] != list(range(epochs)):
        raise UserError(
            f"Cannot resume {run_dir}: its backup holds {epochs} finished epoch(s), but "
            f"{history} records {_ranges(numbers)}: the history that metrics.json and best.keras "
            "rest on is missing or damaged. Restore history.csv, or start a new run.dir.")
    if metrics_path.exists() and not finished:
        state.repairs.append((f"repaired: {metrics_path} was damaged (cut short); it is written "
                              "again when this run ends.",
                              lambda: metrics_path.unlink(missing_ok=True)))
    if finished:
        if wanted <= epochs:
            raise UserError(f"{run_dir} holds a finished run of {epochs} epochs (metrics.json). "
                            f"Raise train.epochs above {epochs} to train it further, or start a "
                            "new run.")
        if epochs == 0:
            raise UserError(f"{run_dir} holds a finished run without its final training state "
                            f"(backup/{rundir.BACKUP_METADATA}), so it cannot train further: "
                            "start a new run.")
        state.repairs.append((f"extending the finished run in {run_dir} from {epochs} to "
                              f"{wanted} epochs", lambda: metrics_path.rename(
                                  run_dir / f"metrics-{epochs}-epochs.json")))
    if best.exists() and not zipfile.is_zipfile(best):
        state.repairs.append((f"repaired: {best} was damaged (a write that did not finish: a "
                              "kill or a full disk) and is removed; the next epoch that beats "
                              f"{config['callbacks']['monitor']}'s best writes it again.",
                              lambda: best.unlink(missing_ok=True)))
    return state


def check_backup_fits(run_dir, model):
    """Refuses to resume when the backup holds other weights than `model`'s:
    a model setting, or the data's classes (a folder's), changed.

    Raises:
        UserError: a weight's shape differs, or the layers differ.
    """
    weights = Path(run_dir) / "backup" / rundir.BACKUP_WEIGHTS
    if not weights.is_file():
        return
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        expected = Path(scratch) / "model.weights.h5"
        model.save_weights(expected)  # the layout this model saves and loads
        try:
            saved = _layer_shapes(weights)
        except (OSError, KeyError):
            return  # unreadable: `rundir.inspect` has said what to do
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


def read_metrics(run_dir):
    """The metrics.json of a finished run in `run_dir`, or None when there is
    none or it is damaged."""
    try:
        metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) else None


def _check_header(path):
    """Refuses a history.csv header that CSVLogger did not write: it appends
    rows in its own column order (the logged names sorted, or, without
    validation logs, sorted and then each again with val_)."""
    if not path.exists():
        return
    with path.open(newline="", errors="replace") as file:
        first = file.readline()
    names = next(csv.reader([first]))[1:] if first.endswith("\n") else []
    logged = [name for name in names if not name.startswith("val_")]
    if names and names not in (sorted(names), logged + [f"val_{n}" for n in logged]):
        raise UserError(f"{path}'s columns are not in the order CSVLogger writes them (epoch, "
                        "then the logged names sorted): a column was added or moved by hand, "
                        "and the rows this run appends would not match it. Restore the header, "
                        "or start a new run.dir.")


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
