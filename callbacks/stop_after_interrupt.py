"""StopAfterInterrupt: one Ctrl-C always stops training, whatever library code does with it."""

import signal
import threading

import keras


class StopAfterInterrupt(keras.callbacks.Callback):
    """Stops `fit` at the first batch end after Ctrl-C, even when library code
    swallowed the KeyboardInterrupt that the signal raised.

    Python prints and drops an exception raised in a garbage-collector
    callback or a `__del__` (JAX registers a gc callback even under
    TensorFlow, and a CI run trained on after its SIGINT landed there), and an
    `except BaseException` in a library keeps it. This callback installs a
    SIGINT handler while training runs that raises KeyboardInterrupt and
    remembers that it did (`pressed`); the next batch end raises it again.
    The handler that was there before comes back at the first Ctrl-C, or when
    training ends. Keras' own callbacks have no such guard.

    Example:

    ```python
    stop = StopAfterInterrupt()
    try:
        model.fit(x, y, epochs=100, callbacks=[stop])
    except KeyboardInterrupt:
        print("stopped; pressed:", stop.pressed)
    ```
    """

    def __init__(self):
        super().__init__()
        self.pressed = False
        self._previous = None

    def _on_interrupt(self, signum, frame):
        self.pressed = True
        self._restore()  # a second Ctrl-C is the process's own again
        raise KeyboardInterrupt

    def on_train_begin(self, logs=None):
        # Signal handlers belong to the main thread; elsewhere Python refuses them.
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)

    def on_train_end(self, logs=None):
        self._restore()

    def on_train_batch_end(self, batch, logs=None):
        if self.pressed:
            self._restore()
            raise KeyboardInterrupt

    def _restore(self):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    on_test_batch_end = on_predict_batch_end = on_train_batch_end
