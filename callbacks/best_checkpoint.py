"""BestCheckpoint: Keras' ModelCheckpoint of the best epoch, passing over the
epochs that `fit` does not validate."""

import keras


class BestCheckpoint(keras.callbacks.ModelCheckpoint):
    """`ModelCheckpoint(save_best_only=True)` for `fit(validation_freq=n)`.

    An epoch `fit` does not validate has no `val_` metric, and Keras'
    ModelCheckpoint warns "Can save best model only with val_accuracy
    available." on it; this one passes over it, and compares on the epochs
    `fit` validates, as ModelCheckpoint does.

    Args:
        filepath: where the best model goes, a `.keras` file.
        monitor: the metric that decides it, as ModelCheckpoint's.
        validation_freq: `fit`'s: it validates the epochs whose number
            (from 1) it divides.
        **kwargs: the rest of ModelCheckpoint's arguments.

    Example:

    ```python
    best = BestCheckpoint("best.keras", monitor="val_accuracy", validation_freq=8)
    model.fit(dataset, validation_data=held_out, validation_freq=8, epochs=8, callbacks=[best])
    ```
    """

    def __init__(self, filepath, monitor, validation_freq=1, **kwargs):
        super().__init__(filepath, monitor=monitor, save_best_only=True, **kwargs)
        self.validation_freq = validation_freq

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor.startswith("val_") and (epoch + 1) % self.validation_freq:
            return  # fit did not validate this epoch
        super().on_epoch_end(epoch, logs)
