"""AugmentedModel: a model whose training step augments each batch first, on the device."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="models")
class AugmentedModel(keras.Model):
    """Trains `network` on batches that `augment` transforms inside `fit`'s
    training step, on the accelerator; evaluation and prediction see the
    images as they are.

    Keras runs no user code between reading a batch and the training step,
    so this overrides `train_step`, the documented way to change what `fit`
    does. Under XLA the augmentation stays out of the compiled cluster
    (RandAugment, MixUp and CutMix use ops XLA cannot compile): `compile`
    keeps `fit`'s own function a plain graph and compiles the model's step
    as a `jit_compile=True` function of its own, called after the
    augmentation. `step_jit_compile` says whether it did.

    A saved model loads back without its augmentation, which is a Python
    function: it predicts as `network` does.

    Args:
        network: the model to train, built.
        augment: `(images, labels) -> (images, labels)` on whole batches, or
            None.

    Example:

    ```python
    model = AugmentedModel(network, augment)
    model.compile(optimizer="sgd", loss="categorical_crossentropy", jit_compile=True)
    model.fit(batches)
    model.step_jit_compile  # True: the network's step ran under XLA
    ```
    """

    def __init__(self, network, augment=None, **kwargs):
        super().__init__(**kwargs)
        if not network.built:
            raise ValueError(f"`network` must be built, received: network={network.name} "
                             "(unbuilt)")
        self.network = network
        self.augment = augment
        self.step_jit_compile = False
        self.build(network.input_shape)

    def call(self, inputs, training=None):
        return self.network(inputs, training=training)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        # Resolved by Keras: False if a layer cannot be compiled.
        self.step_jit_compile, self.jit_compile = self.jit_compile, False
        step = super().train_step
        self._network_step = tf.function(step, jit_compile=True) if self.step_jit_compile else step
        # fit traces its step with AutoGraph off, and keras-cv's layers need
        # it (Python `if`s on tensors): a tf.function of their own turns it on.
        self._augment_batch = (self.augment if self.run_eagerly or self.augment is None
                               else tf.function(self.augment))

    def compile_from_config(self, config):
        # Keras leaves a loaded model with its own `compile` uncompiled, and
        # asks for this override: compile, then create the optimizer's
        # variables for the saved ones to load into.
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def train_step(self, data):
        if self.augment is not None:
            data = self._augment_batch(*data)
        return self._network_step(data)

    def get_config(self):
        return {**super().get_config(),
                "network": keras.saving.serialize_keras_object(self.network)}

    @classmethod
    def from_config(cls, config):
        network = keras.saving.deserialize_keras_object(config.pop("network"))
        return cls(network, **config)


def network_of(model):
    """The network a model trains: inside an `AugmentedModel`, or the model itself."""
    return model.network if isinstance(model, AugmentedModel) else model
