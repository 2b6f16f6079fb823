"""EpochSeeds: each epoch's random draws in the model come from (seed, epoch)."""

import keras
import numpy as np


class EpochSeeds(keras.callbacks.Callback):
    """Sets the state of every Keras `SeedGenerator` in the model (dropout,
    augmentation layers in the training step) from (seed, epoch, its index)
    as each epoch begins.

    Keras' `BackupAndRestore` saves the trainable and non-trainable weights,
    not the seed generators' states, so a resumed run would draw its dropout
    masks and device augmentation from the start again. Keyed on the epoch,
    an epoch draws the same numbers whether its run resumed before it or not.

    Args:
        seed: the run's seed (`execution.seed`).
        layers: more layers whose generators to set, besides the model's
            own and those it lists as `augmentation_layers`
            (`recipes.data.AugmentedModel`): augmentation layers that the
            training step calls but the model does not track.

    Example:

    ```python
    model.fit(batches, epochs=4, callbacks=[EpochSeeds(seed=0)])
    ```
    """

    def __init__(self, seed, layers=()):
        super().__init__()
        if not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, received: seed={seed!r}")
        self.seed, self.layers = seed, list(layers)

    def on_epoch_begin(self, epoch, logs=None):
        for index, state in enumerate(self._seed_states()):
            derived = np.random.default_rng([self.seed, epoch, index]).integers(2**31)
            # [seed, draws so far]: the layout SeedGenerator starts from.
            state.assign(np.array([derived, 0]).astype(state.dtype))

    def _seed_states(self):
        """The seed generators' state variables, each once, in a fixed order."""
        found = {}
        # A model that augments in its training step names the layers it draws with.
        augmenting = getattr(self.model, "augmentation_layers", [])
        for owner in [self.model, *self.layers, *augmenting]:
            for variable in owner.variables:
                if variable.name == "seed_generator_state":
                    found.setdefault(id(variable), variable)
        return list(found.values())
