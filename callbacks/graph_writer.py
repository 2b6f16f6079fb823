"""GraphWriter: the graph of fit's training step, for TensorBoard's Graphs tab.

Keras 3's TensorBoard callback writes no graphs (`write_graph` is documented
as unsupported: `fit`'s train function is no longer a `tf.function` itself),
so this callback does: it traces the first training step with
`tf.summary.trace_on` and exports what TensorFlow ran. TensorFlow is
imported when the callback runs, so that `callbacks` imports without it.
"""

from pathlib import Path

import keras


class GraphWriter(keras.callbacks.Callback):
    """Writes the graph of the first training step into `log_dir`.

    In eager mode there is no graph, since the step runs op by op: the
    callback says so and writes nothing. `written` tells whether it wrote.

    Args:
        log_dir: a TensorBoard log directory, e.g. `<run>/tensorboard/train`.
    """

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = Path(log_dir)
        self.written = False
        self._tracing = False

    def on_train_begin(self, logs=None):
        if self.model.run_eagerly:
            print("callbacks.graph: no graph in eager mode, where the step runs op by op "
                  "and TensorFlow builds none; use execution.mode=graph or xla to see it.",
                  flush=True)

    def on_train_batch_begin(self, batch, logs=None):
        if not (self.model.run_eagerly or self.written):
            import tensorflow as tf

            # The step is traced on its first call, just after this.
            tf.summary.trace_on(graph=True, profiler=False)
            self._tracing = True

    def on_train_batch_end(self, batch, logs=None):
        if not self._tracing:
            return
        import tensorflow as tf

        writer = tf.summary.create_file_writer(str(self.log_dir))
        with writer.as_default():
            tf.summary.trace_export("train_step", step=0)
        writer.close()
        self._tracing, self.written = False, True
        print(f"graph of the training step: {self.log_dir} (TensorBoard, Graphs tab)",
              flush=True)
