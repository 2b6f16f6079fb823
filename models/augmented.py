"""AugmentedModel: a model whose training step augments each batch first, on the device."""

import keras

JAX = keras.backend.backend() == "jax"


@keras.saving.register_keras_serializable(package="models")
class AugmentedModel(keras.Model):
    """Trains `network` on batches that `augment` transforms inside `fit`'s
    training step, on the accelerator; evaluation and prediction see the
    images as they are.

    Keras runs no user code between reading a batch and the training step,
    so this overrides `train_step`, the documented way to change what `fit`
    does, whose signature is the backend's.

    On JAX the step is a pure function of every variable's value, and
    `jit_compile=True` compiles augmentation and network together: Keras
    core's layers run there. The augmentation's layers are tracked as
    `augment_layers`, so that their seed states are among the model's
    non-trainable variables: the step reads them, and returns them advanced.

    On TensorFlow, under XLA the augmentation stays out of the compiled cluster
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
        augment: `(images, labels) -> (images, labels)` on whole batches,
            with the Keras layers it draws random numbers with as its
            `layers` (`recipes._augment.Augmentation`), or None.

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
        if JAX and augment is not None:
            self.augment_layers = list(augment.layers)
        self.step_jit_compile = False
        # `predict` needs no `compile`: until then the steps are Keras' own,
        # jit-compiled or not as Keras decides.
        self._set_network_steps(jit_compile=False)
        self.build(network.input_shape)

    def call(self, inputs, training=None):
        return self.network(inputs, training=training)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        # Resolved by Keras ("auto"; False if a layer cannot be compiled).
        self.step_jit_compile = self.jit_compile
        if JAX:
            return  # one jitted step, augmentation included: Keras core's layers compile
        # With it on, fit's function would take the augmentation into XLA:
        # compiled again, with jit_compile=False, Keras' own functions stay
        # plain graphs, and call the network's steps compiled.
        super().compile(*args, **{**kwargs, "jit_compile": False})
        self._set_network_steps(self.step_jit_compile)
        # fit traces its step with AutoGraph off, and keras-cv's layers need
        # it (Python `if`s on tensors): a tf.function of their own turns it on.
        import tensorflow as tf

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
        if jit_compile and not JAX:
            import tensorflow as tf

            steps = [tf.function(step, jit_compile=True) for step in steps]
        self._network_train, self._network_test, self._network_predict = steps

    def train_step(self, *step_args):
        # TensorFlow calls train_step(data); JAX calls train_step(state, data).
        if JAX:
            return self._jax_train_step(*step_args)
        data, = step_args
        if self.augment is not None:
            data = self._augment_batch(*data)
        return self._network_train(data)

    def _jax_train_step(self, state, data):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        if self.augment is not None:
            # The layers read their seed states from the step's state, and
            # write the advanced ones into the scope instead of the variables.
            values = list(zip(self.non_trainable_variables, non_trainable))
            with keras.StatelessScope(state_mapping=values) as scope:
                data = self.augment(*data)
            non_trainable = [scope.get_current_value(variable)
                             for variable in self.non_trainable_variables]
        state = trainable, non_trainable, optimizer_variables, metrics_variables
        return self._network_train(state, data)

    def test_step(self, *step_args):
        return self._network_test(*step_args)

    def predict_step(self, *step_args):
        return self._network_predict(*step_args)

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
