"""DivergenceStop: ends training at the first NaN or infinite loss, keeping its backup."""

import json
import math
from pathlib import Path

import keras


class TrainingDiverged(RuntimeError):
    """Raised by `DivergenceStop`: the loss stopped being a finite number."""


class DivergenceStop(keras.callbacks.Callback):
    """Stops training with `TrainingDiverged` when the loss is NaN or infinite,
    and warns once when it grows a thousandfold over its lowest value.

    Keras' `TerminateOnNaN` only sets `stop_training`: `fit` then returns as
    if it had finished, and the caller evaluates a broken model and records
    it as a finished run. Raising instead leaves the run unfinished, to be
    resumed from the backup of the last finished epoch; `status.json` in
    `run_dir` records where it diverged.

    Args:
        run_dir: the run directory; None writes nothing.
        growth_warning: warn when the loss exceeds its lowest value so far
            by this factor.

    Example:

    ```python
    try:
        model.fit(x, y, callbacks=[DivergenceStop("runs/mine")])
    except TrainingDiverged as error:
        print(error)  # the training loss became nan at epoch 3, step 17: ...
    ```
    """

    def __init__(self, run_dir=None, growth_warning=1e3):
        super().__init__()
        if not growth_warning > 1:
            raise ValueError(f"growth_warning must exceed 1, received: {growth_warning}")
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.growth_warning = growth_warning
        self.epoch = 0
        self.lowest = math.inf
        self.warned = False

    def on_train_begin(self, logs=None):
        # A resumed run that diverged before is no longer diverged.
        if self.run_dir is not None:
            (self.run_dir / "status.json").unlink(missing_ok=True)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        loss = logs.get("loss")
        if loss is None:
            return
        loss = float(loss)
        if not math.isfinite(loss):
            where = f"epoch {self.epoch + 1}, step {batch + 1}"
            if self.run_dir is not None:
                (self.run_dir / "status.json").write_text(json.dumps(
                    {"status": "diverged", "epoch": self.epoch, "step": batch,
                     "loss": str(loss)}) + "\n")
            raise TrainingDiverged(
                f"the training loss became {loss} at {where}: the run diverged and stops "
                "here, its last finished epoch kept. Lower train.lr (or check the data) and "
                "start a new run; the same command would resume into the same divergence.")
        if loss > self.lowest * self.growth_warning and not self.warned:
            self.warned = True
            print(f"warning: the training loss is {loss:.3g} at epoch {self.epoch + 1}, "
                  f"step {batch + 1}, over {self.growth_warning:g}x its lowest so far "
                  f"({self.lowest:.3g}): the run may be diverging; lower train.lr if it "
                  "does not recover.", flush=True)
        self.lowest = min(self.lowest, loss)
