"""Data-parallel training with `tf.distribute`: `execution.strategy` and `execution.devices`.

- `none`: TensorFlow's default strategy, one device.
- `mirrored`: `tf.distribute.MirroredStrategy` over this machine's devices:
  every GPU by default, or the CPU split into N logical devices with
  `execution.devices=cpu:N` (a laptop can then train data-parallel).
- `multi_worker`: `tf.distribute.MultiWorkerMirroredStrategy` across the
  processes that `TF_CONFIG` describes (`python -m keras_course_recipes multiworker`
  starts them on this machine; docs/distributed.md, on hosts).

`data.batch_size` is the batch of one replica; each step takes
`data.batch_size * num_replicas_in_sync` images. Keras' own
`keras.distribution` API is a prototype on the TensorFlow backend, so this
module uses `tf.distribute`, which `fit` supports. Which process of a
multi-worker run writes the run's files is the harness's (`is_chief`).
"""

import os
import subprocess
import sys

import tensorflow as tf

from keras_course_recipes.errors import UserError


class MultiWorkerStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` as Keras 3.15's `fit` calls it.

    The workaround for keras-team/keras#20585 ("Does Keras 3 work with
    tf.distribute.MultiWorkerMirroredStrategy?"), pinned to keras==3.15.1.
    `fit` asks the strategy's public `reduce` for two things it refuses
    across workers: a whole `(images, labels)` structure of per-replica
    values (to build the model before training), and the mean of per-replica
    scalars (the logs) over `axis=0`, which scalars do not have. This
    subclass reduces a structure element by element and a scalar over no
    axis, and leaves every other call to `MultiWorkerMirroredStrategy`.
    `tests/test_distribute.py` checks that the plain strategy still fails, so
    the workaround goes when Keras no longer needs it.
    """

    def reduce(self, reduce_op, value, axis):
        if isinstance(value, (tuple, list, dict)):
            return tf.nest.map_structure(lambda v: self.reduce(reduce_op, v, axis), value)
        if axis is not None and self.experimental_local_results(value)[0].shape.rank == 0:
            axis = None
        return super().reduce(reduce_op, value, axis)


def request_devices(config):
    """Splits the CPU into the logical devices `execution.devices=cpu:N` asks
    for, before TensorFlow initializes them; refuses a process whose devices
    are already set up otherwise."""
    count = _cpu_count(config["execution"]["devices"])
    if count is None:
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    wanted = [tf.config.LogicalDeviceConfiguration()] * count
    try:
        tf.config.set_logical_device_configuration(cpu, wanted)
    except RuntimeError:  # TensorFlow has initialized its devices already
        found = len(tf.config.list_logical_devices("CPU"))
        if found != count:
            raise UserError(
                f"execution.devices=cpu:{count} must be set before TensorFlow initializes its "
                f"devices, and this process has {found} CPU device(s) already. Run the recipe "
                "with `python -m keras_course_recipes` (or make).") from None


def _cpu_count(devices):
    """N of `cpu:N`, None for null; a UserError for anything else."""
    if devices is None:
        return None
    kind, _, count = str(devices).partition(":")
    if kind != "cpu" or not count.isdigit() or int(count) < 1:
        raise UserError(f"execution.devices takes cpu:N (N logical CPU devices, e.g. cpu:2) "
                        f"or null (every GPU, else the CPU); got {devices!r}.")
    return int(count)


def strategy(config, task=None):
    """The `tf.distribute.Strategy` that `execution.strategy` names; call it
    after `request_devices`. `task`: this process's `(index, workers)` in a
    multi-worker cluster (`TF_CONFIG`), or None."""
    name, timeout = config["execution"]["strategy"], config["execution"]["timeout_s"]
    if name == "none":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if config["execution"]["devices"] is not None:
            # Logical CPU devices share memory: a plain sum on one of them
            # beats collectives, whose keys also clash between strategies
            # made in one process.
            devices = [device.name for device in tf.config.list_logical_devices("CPU")]
            return tf.distribute.MirroredStrategy(
                devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
        devices = [device.name for device in tf.config.list_logical_devices("GPU")] or None
        return tf.distribute.MirroredStrategy(devices)
    if task is None:
        raise UserError(
            "execution.strategy=multi_worker needs TF_CONFIG, the cluster and this "
            "worker's place in it: start the workers with `python -m keras_course_recipes multiworker "
            "NAME workers=N` (make recipe-multiworker), or set TF_CONFIG on each host "
            "(docs/distributed.md).")
    options = tf.distribute.experimental.CommunicationOptions(
        # RING: collectives over gRPC, which the CPU supports (NCCL is GPUs only).
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    # The strategy's constructor waits for every worker with no time limit,
    # holding Python's lock: no thread can end the wait, another process can.
    index, workers = task
    watchdog = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(timeout),
         f"error: worker {index} could not reach its peers within execution.timeout_s="
         f"{timeout} s: all {workers} workers of TF_CONFIG must be started (python -m "
         "recipes multiworker starts them)."], stdin=subprocess.PIPE)
    try:
        return MultiWorkerStrategy(communication_options=options)
    finally:
        watchdog.stdin.close()  # the cluster is up: the watchdog exits
        watchdog.wait()


# Kills process argv[1] with message argv[3] unless its stdin closes within argv[2] s.
WATCHDOG = """
import os, select, signal, sys
parent, timeout, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if not select.select([sys.stdin], [], [], timeout)[0]:
    print(message, file=sys.stderr, flush=True)
    os.kill(parent, signal.SIGKILL)
"""
