"""Lookahead: every few steps, pull the weights to their moving average (cifar10-airbench)."""

import keras
import numpy as np


class Lookahead(keras.callbacks.Callback):
    """Keeps an exponential moving average of the model's weights and, every
    `every` steps, moves the weights to it: the Lookahead optimizer's
    "slow weights", as cifar10-airbench does it.

    The average's decay grows over training, `decay ** every * (step /
    total_steps) ** power`: early on it follows the weights closely, at the
    end it averages strongly. It starts at `start_epoch`; batch-norm moving
    statistics are averaged too (every float weight is). On the last step of
    each epoch the weights become the average, so that validation, the
    checkpoints and the backup all see the averaged model.

    Keras' `use_ema=True, ema_overwrite_frequency=N` on an optimizer is close,
    but its decay is constant and it leaves batch norm's statistics alone.

    A resumed run is exact: at every epoch's end the weights equal the
    average, which is all the state there is, so a process that starts at an
    epoch boundary starts the average from the restored weights.

    Args:
        total_steps: the run's training steps (epochs x steps per epoch).
        start_epoch: the first epoch that averages (0-based).
        every: steps between two updates.
        decay: the per-step decay at the end of training.
        power: how the decay grows with the fraction of training done.

    Example:

    ```python
    lookahead = Lookahead(total_steps=10 * steps_per_epoch, start_epoch=3)
    model.fit(data, epochs=10, steps_per_epoch=steps_per_epoch, callbacks=[lookahead])
    ```
    """

    def __init__(self, total_steps, start_epoch=3, every=5, decay=0.95, power=3.0):
        super().__init__()
        if total_steps < 1 or every < 1 or start_epoch < 0 or not 0 < decay < 1:
            raise ValueError("Lookahead needs total_steps >= 1, every >= 1, start_epoch >= 0 "
                             f"and 0 < decay < 1, received: total_steps={total_steps}, "
                             f"every={every}, start_epoch={start_epoch}, decay={decay}")
        self.total_steps, self.start_epoch, self.every = total_steps, start_epoch, every
        self.decay, self.power = decay, power
        self._epoch, self._average = 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        if epoch >= self.start_epoch and self._average is None:
            self._average = [np.array(w.numpy()) for w in self._weights()]

    def on_train_batch_end(self, batch, logs=None):
        if self._average is None:
            return
        steps = self.params["steps"]
        step = self._epoch * steps + batch + 1  # counted from the run's start
        if step % self.every == 0:
            self._update(self.rate(step))
        if batch + 1 == steps:
            self._update(1.0)  # the weights become the average

    @property
    def average(self):
        """The moving average of the float weights (a list of arrays), or
        None before `start_epoch`."""
        return self._average

    def rate(self, step):
        """The average's decay at `step`: how much of the old average it keeps."""
        return self.decay ** self.every * (step / self.total_steps) ** self.power

    def _weights(self):
        return [w for w in self.model.weights if "float" in str(w.dtype)]

    def _update(self, keep):
        for average, weight in zip(self._average, self._weights()):
            average += (1.0 - keep) * (weight.numpy() - average)
            weight.assign(average)
