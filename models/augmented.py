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
    (RandAugment, MixUp and CutMix use ops XLA cannot compile), and Keras
    compiles a whole step or none of it: `compile` keeps the functions of
    `fit`, `evaluate` and `predict` plain graphs and compiles Keras' own
    training, test and prediction steps as `jit_compile=True` functions of
    their own, which the overridden steps call (the training step after
    the augmentation). `step_jit_compile` says whether it did.

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
    model.step_jit_compile  # True: the network's steps run under XLA
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
        # `predict` needs no `compile`: until then the steps are Keras' own,
        # jit-compiled or not as Keras decides.
        self._set_network_steps(jit_compile=False)
        self.build(network.input_shape)

    def call(self, inputs, training=None):
        return self.network(inputs, training=training)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        # Resolved by Keras: False if a layer cannot be compiled. With it on,
        # fit's function would take the augmentation into XLA: Keras' own
        # functions stay plain graphs, and call the network's steps compiled.
        self.step_jit_compile, self.jit_compile = self.jit_compile, False
        self._set_network_steps(self.step_jit_compile)
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

    def _set_network_steps(self, jit_compile):
        # Keras' own steps; none of them augments, so XLA can compile each.
        steps = (super().train_step, super().test_step, super().predict_step)
        if jit_compile:
            steps = [tf.function(step, jit_compile=True) for step in steps]
        self._network_train, self._network_test, self._network_predict = steps

    def train_step(self, data):
        if self.augment is not None:
            data = self._augment_batch(*data)
        return self._network_train(data)

    def test_step(self, data):
        return self._network_test(data)

    def predict_step(self, data):
        return self._network_predict(data)

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
