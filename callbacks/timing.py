"""Timing: wall time per epoch and step, trace time, images/s, input wait."""

import statistics
import sys
import time

import keras
import numpy as np

MODES = ("eager", "graph", "xla")


def execution_mode(model):
    """Returns the mode a compiled `model` trains, evaluates and predicts in:
    eager, graph or xla.

    A model that compiles its network's steps apart from the functions of
    `fit`, `evaluate` and `predict` (`keras_course_recipes.augment.AugmentedModel`) says so in
    `step_jit_compile`. On JAX and torch a step that is not jit-compiled runs
    op by op: eager (on torch, `xla` is Keras' jit_compile: torch.compile).
    """
    if model.run_eagerly:
        return "eager"
    if getattr(model, "step_jit_compile", model.jit_compile):
        return "xla"
    return "graph" if keras.backend.backend() == "tensorflow" else "eager"


# Keys this callback adds to the epoch logs, so that TensorBoard, the CSV
# history and `History` record them next to the losses.
EPOCH_KEYS = ("time_epoch_s", "time_step_ms", "time_images_per_s",
              "time_input_wait_fraction")


class Timing(keras.callbacks.Callback):
    """Measures epoch and step wall time, the first step's trace/compile time,
    images/s and the fraction of step time spent waiting for input.

    Keras reports steps per second at most: it neither separates the first
    step's tracing or XLA compilation from the steady state nor measures input
    wait, so this callback does. `instrument` adds a last pipeline stage that
    stamps when the train step receives its batch; input wait is the time from
    the step's start to that stamp. It therefore also counts Keras' dispatch
    before the graph asks for data, which shows as wait even with an
    always-ready input on steps of a few milliseconds: read it as an upper
    bound, meaningful when steps are long against the dispatch. It is
    measured only with `steps_per_execution=1`, where each call of the train
    function takes exactly one batch, and only on TensorFlow: Keras' JAX
    trainer fetches two batches ahead of the step, so the stamp does not
    mark when the step waits.

    When training ends, it prints the timing line (unless `fit` ran with
    `verbose=0`): the execution mode, the median step, images/s and the
    first step's trace time.

    Args:
        batch_size: examples per training step, for images/s.

    Example:

    ```python
    timing = Timing(batch_size=128)
    model.fit(timing.instrument(train), epochs=2, callbacks=[timing])
    timing.summary()["step_ms_median"]
    ```
    """

    def __init__(self, batch_size):
        super().__init__()
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError("`batch_size` must be a positive integer, "
                             f"received: batch_size={batch_size!r}")
        self.batch_size = batch_size
        self._waited = None  # seconds of input wait, a tf.Variable once instrumented
        self.first_step_s = None
        self.step_s = []  # steady-state seconds per step, every epoch
        self.epoch_s = []
        self._waited_steady = 0.0

    def instrument(self, dataset):
        """Returns `dataset` with a last stage that measures input wait: a
        tf.data.Dataset; any other input (a PyDataset) comes back as it is."""
        tf = sys.modules.get("tensorflow")  # not imported: `dataset` is not tf.data
        if tf is None or not isinstance(dataset, tf.data.Dataset):
            return dataset
        # On the CPU, where tf.data runs, whatever device the model uses.
        with tf.device("/CPU:0"):
            self._step_started = tf.Variable(0.0, dtype=tf.float64, trainable=False)
            self._waited = tf.Variable(0.0, dtype=tf.float64, trainable=False)

        def stamp(*element):
            waited = tf.timestamp() - self._step_started
            self._waited.assign_add(tf.maximum(waited, 0.0))
            return element

        return dataset.map(stamp)

    def _measures_wait(self):
        return (self._waited is not None and self.model.steps_per_execution == 1
                and keras.backend.backend() == "tensorflow")

    def _waited_s(self):
        return float(self._waited.numpy()) if self._waited is not None else 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_started = time.perf_counter()
        self._epoch_step_s = []
        self._epoch_waited_from = self._waited_s()

    def on_train_batch_begin(self, batch, logs=None):
        self._execution_begin = batch
        if self._measures_wait():
            self._step_started.assign(time.time())
        self._batch_started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        # Reading a result waits for the step to finish on the device.
        np.asarray(logs.get("loss", 0.0))
        elapsed = time.perf_counter() - self._batch_started
        steps = batch - self._execution_begin + 1
        if self.first_step_s is None:
            self.first_step_s = elapsed
            self._epoch_waited_from = self._waited_s()
            return
        self._epoch_step_s.extend([elapsed / steps] * steps)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}  # updated in place for later callbacks
        self.epoch_s.append(time.perf_counter() - self._epoch_started)
        self.step_s.extend(self._epoch_step_s)
        epoch_train_s = sum(self._epoch_step_s)
        epoch_waited = self._waited_s() - self._epoch_waited_from
        self._waited_steady += epoch_waited
        # Every epoch logs every key, NaN where there is nothing to measure:
        # CSVLogger fixes history.csv's columns at the first epoch a process
        # logs, and a resumed process appends under the first one's header.
        stats = dict.fromkeys(EPOCH_KEYS, float("nan"))
        stats["time_epoch_s"] = self.epoch_s[-1]
        if self._epoch_step_s:  # else the epoch had only the tracing step
            stats["time_step_ms"] = 1000 * statistics.median(self._epoch_step_s)
            stats["time_images_per_s"] = (self.batch_size * len(self._epoch_step_s)
                                          / epoch_train_s)
            if self._measures_wait():
                stats["time_input_wait_fraction"] = epoch_waited / epoch_train_s
        logs.update(stats)

    def on_train_end(self, logs=None):
        # Quiet with fit(verbose=0), like Keras' own output.
        if self.params.get("verbose") and self.step_s:
            print(self.line(), flush=True)

    def line(self):
        """The timing line: the mode the step ran in, its median time, images/s and the trace."""
        t = self.summary()
        return (f"timing: mode {execution_mode(self.model)}, {t['step_ms_median']:.1f} ms/step, "
                f"{t['images_per_s']:,.0f} images/s, trace {t['trace_s']:.2f} s")

    def summary(self, warmup_steps=0):
        """Returns the whole run's timing as a dict of plain numbers.

        `trace_s` is the first step's time beyond a steady step: the cost of
        tracing (graph) or compiling (XLA) the train function.

        Args:
            warmup_steps: steps after the first left out of the steady-state
                statistics (caches and allocators settling).
        """
        step_s = self.step_s[warmup_steps:]
        if not step_s:
            return {"first_step_s": self.first_step_s, "trace_s": None,
                    "step_ms_median": None, "step_ms_p10": None,
                    "step_ms_p90": None, "images_per_s": None,
                    "input_wait_fraction": None, "epoch_s": self.epoch_s}
        median_s = statistics.median(step_s)
        p10, p90 = np.percentile(step_s, [10, 90])
        # Input wait is only summed per epoch, so it covers every steady step.
        return {
            "first_step_s": self.first_step_s,
            "trace_s": max(self.first_step_s - median_s, 0.0),
            "step_ms_median": 1000 * median_s,
            "step_ms_p10": 1000 * float(p10),
            "step_ms_p90": 1000 * float(p90),
            "images_per_s": self.batch_size * len(step_s) / sum(step_s),
            "input_wait_fraction": (self._waited_steady / sum(self.step_s)
                                    if self._measures_wait() else None),
            "epoch_s": self.epoch_s,
        }
