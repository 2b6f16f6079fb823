"""tf.distribute: MirroredStrategy in this process on two logical CPU
devices, MultiWorkerMirroredStrategy on two local worker processes."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import keras_course_recipes as kit
from conftest import ROOT, TINY
from keras_course_recipes import _distribute, harness
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import multiworker as _multiworker

MODULES = sorted({kit.module_of(name) for name in kit.names()})
MIRRORED = ["execution.strategy=mirrored", "execution.devices=cpu:2"]


def one_step_weights(tiny_config, tmp_path, label, *overrides):
    # SGD: RMSprop's first step is about lr * sign(gradient), which turns
    # float rounding in near-zero gradients into whole steps.
    config = tiny_config("mnist_mlp", "model.dropout=0.0", "train.steps_per_epoch=1",
                         "train.optimizer=sgd", "train.lr=0.1",
                         # A training split of exactly one batch: under a strategy, fit
                         # draws a batch to build the model and restarts the shuffled
                         # dataset, whose next pass comes in another order.
                         "data.synthetic_examples=32",
                         f"run.dir={tmp_path / label}", *overrides)
    strategy = harness.prepare(config)
    with strategy.scope():
        experiment = kit.load("mnist_mlp").build(config)
    experiment.strategy = strategy
    before = experiment.model.get_weights()
    experiment.model.fit(experiment.data.train, epochs=1, steps_per_epoch=1, verbose=0)
    return experiment, before, experiment.model.get_weights()


@pytest.mark.slow
def test_one_mirrored_step_equals_one_step_on_the_whole_batch(tiny_config, tmp_path):
    """Two replicas of 16 images each, against one device with 32."""
    single, initial, expected = one_step_weights(tiny_config, tmp_path, "single",
                                                 "data.batch_size=32")
    mirrored, same_start, found = one_step_weights(tiny_config, tmp_path, "mirrored",
                                                   "data.batch_size=16", *MIRRORED)
    assert (single.strategy.num_replicas_in_sync, mirrored.strategy.num_replicas_in_sync) == (1, 2)
    assert single.data.batch_size == mirrored.data.batch_size == 32
    assert all(np.array_equal(a, b) for a, b in zip(initial, same_start))  # seeded alike
    assert any(not np.allclose(a, b) for a, b in zip(initial, expected))  # the step moved them
    for a, b in zip(expected, found):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_every_recipe_trains_mirrored(name, tiny_config):
    metrics = harness.train(tiny_config(name, *MIRRORED, "data.batch_size=8"))
    assert (metrics["strategy"], metrics["replicas"], metrics["global_batch"]) == ("mirrored", 2, 16)
    assert metrics["mode_used"] == "graph" and metrics["epochs_completed"] == 1


@pytest.mark.slow
def test_device_augmentation_runs_in_each_replica(tiny_config):
    metrics = harness.train(tiny_config(
        "cifar10_cnn", *MIRRORED, "data.batch_size=8", "data.augment=[pad_crop,flip]",
        "data.augment_on=device"))
    assert (metrics["augment_on"], metrics["mode_used"], metrics["global_batch"]) == (
        "device", "graph", 16)


@pytest.mark.parametrize("examples", [512, 2050])
def test_a_split_smaller_than_a_batch_is_evaluated_whole_and_right_when_mirrored(
        examples, tiny_config, tmp_path):
    """51 or 205 validation images, fewer than a global batch of 256 and odd:
    Keras' symbolic build under a strategy once failed on such a batch (an
    AddN of 26 and 25 images); every image is evaluated, as one device would."""
    config = tiny_config("mnist_mlp", *MIRRORED, f"data.synthetic_examples={examples}",
                         "data.batch_size=128", f"run.dir={tmp_path / 'run'}")
    strategy = harness.prepare(config)
    with strategy.scope():
        experiment = kit.load("mnist_mlp").build(config)
    model, validation = experiment.model, experiment.data.validation
    labels = np.concatenate([y for _, y in validation])
    assert len(labels) == round(examples * 0.1) and len(labels) % 2 == 1
    result = model.evaluate(validation, return_dict=True, verbose=0)
    images = np.concatenate([x for x, _ in validation])
    probabilities = model.predict(images, verbose=0)
    assert result["accuracy"] == pytest.approx(np.mean(probabilities.argmax(1) == labels))
    loss = -np.mean(np.log(probabilities[np.arange(len(labels)), labels]))
    assert result["loss"] == pytest.approx(loss, rel=1e-5)


@pytest.mark.parametrize("devices", ["gpu:2", "cpu:0", "cpu"])
def test_bad_devices_are_user_errors(devices, tiny_config):
    with pytest.raises(UserError, match="execution.devices takes cpu:N"):
        _distribute.request_devices(tiny_config("mnist_mlp", f"execution.devices={devices}"))


def cli(*args, env=None, timeout=240):
    return subprocess.run([sys.executable, "-m", "keras_course_recipes", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_multi_worker_without_tf_config_is_a_one_line_error():
    result = cli("run", "mnist_mlp", *TINY, "execution.strategy=multi_worker",
                 env={"TF_CONFIG": ""})
    assert result.returncode == 2
    # TensorFlow's C++ start-up lines (absl's "WARNING: All log messages...",
    # oneDNN's "I0000 ... port.cc") print before any log level applies, on
    # oneDNN machines: everything else is ours.
    ours = [line for line in result.stderr.strip().splitlines()
            if not re.match(r"WARNING: All log messages before absl|[IWE]\d{4} ", line)]
    assert len(ours) == 1 and "Traceback" not in result.stderr
    assert ours[0].startswith("error: execution.strategy=multi_worker needs TF_CONFIG")


# A worker of a multi-worker mnist_mlp run, as `python -m keras_course_recipes run` trains
# it (through the harness), with one more callback where argv[2] names a step [epoch, batch]
# (0-based): there the worker SIGKILLs itself, as a crash or `kill -9` would.
WORKER = """
import json, os, signal, sys
import keras
import keras_course_recipes as kit
from keras_course_recipes import recipe_config, harness

overrides, kill_at = json.loads(sys.argv[1]), json.loads(sys.argv[2])


class KillAt(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if [self.epoch, batch] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)


config = recipe_config.resolve("mnist_mlp", overrides=overrides, announce=print)
harness.train(config, extra_callbacks=[KillAt()] if kill_at else [])
"""


@pytest.mark.slow
def test_two_workers_train_one_model_resume_after_a_kill_and_only_the_chief_writes(
        tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["mnist_mlp", *TINY, "train.epochs=3", "train.steps_per_epoch=25",
            "data.synthetic_examples=512", "model.hidden_units=[16]", "run.verbose=2", f"run.dir={run_dir}"]
    # Worker 1 dies at step 21 of epoch 2's 25: after both workers backed up
    # epoch 1, before either finishes epoch 2 (every step waits for both).
    (run_dir / "workers").mkdir(parents=True)
    cluster = [f"localhost:{port}" for port in _multiworker.free_ports(2)]
    overrides = json.dumps([*args[1:], "execution.strategy=multi_worker"])
    with (run_dir / "workers" / "worker-1.log").open("a") as log:
        workers = [subprocess.Popen(
            [sys.executable, "-c", WORKER, overrides, json.dumps(kill_at)], cwd=ROOT,
            stdout=log if index else subprocess.DEVNULL, stderr=subprocess.STDOUT,
            env={**os.environ, "TF_CONFIG": _multiworker.tf_config(cluster, index)})
            for index, kill_at in enumerate([None, [1, 20]])]
        try:
            assert workers[1].wait(timeout=240) == -signal.SIGKILL
        finally:
            for worker in workers:  # the chief waits for its lost peer: stop it as the launcher would
                worker.kill()
                worker.wait()
    history = run_dir / "history.csv"
    assert [line.split(",")[0] for line in history.read_text().splitlines()[1:]] == ["0"]
    # Worker 1's own backup, not the chief's, holds the one finished epoch.
    backup = run_dir / "workers" / "worker-1" / "backup"
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 1

    _multiworker.launch(args[0], 2, overrides=args[1:])  # the command that resumes
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["strategy"], metrics["replicas"], metrics["epochs_completed"]) == (
        "multi_worker", 2, 3)
    assert [line.split(",")[0] for line in history.read_text().splitlines()[1:]] == [
        "0", "1", "2"]
    assert (run_dir / "checkpoints" / "last.keras").exists()
    worker = run_dir / "workers"
    # A worker saves its checkpoints into its own folder (saving is collective), no metrics.json.
    assert (worker / "worker-1" / "checkpoints" / "last.keras").exists()
    assert not (worker / "worker-1" / "metrics.json").exists()
    log = (worker / "worker-1.log").read_text()
    assert log.count("Epoch 1/3") == 1  # the restarted worker went on from epoch 2
    assert f"worker 1: done, weights sha256 {metrics['weights_sha256']}" in log
    assert "TF_CONFIG='" in capsys.readouterr().out  # how to run it on hosts


@pytest.mark.slow
def test_the_launcher_stops_the_other_workers_when_one_fails():
    """The launcher's wait: the first worker to fail is reported with its
    exit status, and the others are interrupted rather than left waiting."""
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                               stderr=subprocess.DEVNULL)
    failing = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert _multiworker._wait([waiting, failing]) == (1, 3)
    assert waiting.poll() is not None


@pytest.mark.slow
def test_a_worker_without_peers_fails_within_its_timeout(tmp_path):
    lonely = _multiworker.tf_config([f"localhost:{port}" for port in _multiworker.free_ports(2)], 0)
    result = cli("run", "mnist_mlp", *TINY, "execution.strategy=multi_worker",
                 "execution.timeout_s=3", f"run.dir={tmp_path}", env={"TF_CONFIG": lonely})
    assert result.returncode != 0, result.stderr[-2000:]
    # The watchdog that ended the wait was set to the run's timeout, not the default 120 s.
    assert ("error: worker 0 could not reach its peers within execution.timeout_s=3 s"
            in result.stderr) and "Traceback" not in result.stderr


PLAIN_STRATEGY_WORKER = """
import json, os, sys
import numpy as np, tensorflow as tf, keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy")
data = tf.data.Dataset.from_tensor_slices((np.ones((16, 4), "float32"), np.zeros(16))).batch(8)
try:
    model.fit(data.repeat(), steps_per_epoch=2, verbose=0)
    print("plain strategy trained")
except Exception as error:
    print("plain strategy failed:", type(error).__name__)
"""


@pytest.mark.slow
def test_keras_still_needs_the_multi_worker_workaround():
    """keras-team/keras#20585: when this fails, Keras trains with the plain
    strategy; drop keras_course_recipes._distribute.MultiWorkerStrategy."""
    cluster = [f"localhost:{port}" for port in _multiworker.free_ports(2)]
    workers = [subprocess.Popen(
        [sys.executable, "-c", PLAIN_STRATEGY_WORKER], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, "TF_CONFIG": _multiworker.tf_config(cluster, index)})
        for index in range(2)]
    outputs = [worker.communicate(timeout=240)[0] for worker in workers]
    assert all("plain strategy failed: ValueError" in output for output in outputs), outputs
