"""RunEstimate: after the first epoch, one line with the whole run's time."""

import datetime
import time

import keras

DAY_S = 24 * 3600


class RunEstimate(keras.callbacks.Callback):
    """Prints, once the first epoch of this process has finished, how long the
    epochs left will take at that epoch's pace, and when they would end.

    Keras' progress bar estimates one epoch at a time; a 300-epoch run on a
    CPU that takes a week says so nowhere. The first epoch includes tracing
    or compiling the step, so the estimate errs long, slightly.

    Args:
        epochs: the run's `epochs`, as given to `fit`.
        over_a_day: a note to add when the estimate exceeds a day (e.g. a
            faster recipe for this machine), or None.

    Example:

    ```python
    model.fit(x, y, epochs=300, callbacks=[RunEstimate(300)])
    # estimate: 299 more epochs at 33.0 min each (epoch 1's pace): 6.9 days, until 2026-12-01 17:40
    ```
    """

    def __init__(self, epochs, over_a_day=None):
        super().__init__()
        if not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"`epochs` must be a positive integer, received: epochs={epochs!r}")
        self.epochs, self.over_a_day = epochs, over_a_day
        self.line = None  # what was printed

    def on_epoch_begin(self, epoch, logs=None):
        if self.line is None:
            self._started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if self.line is not None:
            return
        epoch_s = time.monotonic() - self._started
        left = self.epochs - (epoch + 1)
        self.line = ""
        if left < 1:
            return
        total_s = left * epoch_s
        until = datetime.datetime.now() + datetime.timedelta(seconds=total_s)
        self.line = (f"estimate: {left} more epochs at {_duration(epoch_s)} each (epoch "
                     f"{epoch + 1}'s pace): {_duration(total_s)}, until {until:%Y-%m-%d %H:%M}")
        if total_s > DAY_S and self.over_a_day:
            self.line += f". {self.over_a_day}"
        print(self.line, flush=True)


def _duration(seconds):
    """`seconds` in the unit a person reads: s, min, h or days."""
    for unit, size in (("days", DAY_S), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:,.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
