"""ExecutionModeCheck: records the execution mode a model really trains in."""

import sys

import keras

from keras_course_recipes.callbacks.timing import MODES, execution_mode


class ExecutionModeCheck(keras.callbacks.Callback):
    """Records the execution mode a model really trains in, and warns loudly
    when it is not the one asked for.

    Keras turns `jit_compile=True` off, with only a one-line warning, when a
    layer does not support XLA; a run must not claim XLA it did not get.

    Args:
        requested: the mode asked for: `"eager"`, `"graph"` or `"xla"`.

    Example:

    ```python
    check = ExecutionModeCheck("xla")
    model.fit(dataset, callbacks=[check])
    check.mode_used  # "graph" if Keras dropped XLA
    ```
    """

    def __init__(self, requested):
        super().__init__()
        if requested not in MODES:
            raise ValueError(f"`requested` must be one of {MODES}, "
                             f"received: requested={requested!r}")
        self.requested = requested
        self.mode_used = None

    def on_train_begin(self, logs=None):
        self.mode_used = execution_mode(self.model)
        if self.mode_used != self.requested:
            print(
                f"\n*** WARNING: execution.mode={self.requested} was requested "
                f"but the model trains in '{self.mode_used}' mode: a layer does "
                "not support it (see the Keras warning above). Timings of this "
                f"run are '{self.mode_used}' timings. ***\n",
                file=sys.stderr, flush=True)
