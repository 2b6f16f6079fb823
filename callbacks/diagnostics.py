"""Diagnostics: activations, gradients and inputs in TensorBoard, to see why a network does not train.

TensorFlow's own (tf.summary, tf.GradientTape): imported when the callback
runs, so that `callbacks` imports without it.
"""

from pathlib import Path

import keras


class Diagnostics(keras.callbacks.Callback):
    """Writes, after each epoch, what a network does with one fixed training
    batch: a histogram of every layer's activations, every layer's gradient
    norm (a scalar) and a histogram of its gradients, and, once, the batch's
    images.

    Keras' TensorBoard callback writes histograms of the weights
    (`histogram_freq`), not of activations or gradients, which are what show
    dead ReLUs, saturated units and vanishing or exploding gradients; so this
    callback does. The forward pass runs in training mode, as the step does,
    and the state it changes (batch norm's moving statistics, dropout's
    random state) is put back afterwards: training goes on as without it.

    Args:
        log_dir: a TensorBoard log directory, e.g. `<run>/tensorboard/diagnostics`.
        batch: `(images, labels)`, one training batch (before augmentation:
            augmenting it here would move on the random state training uses).
        max_images: how many of its images to write.

    Example:

    ```python
    batch = next(iter(train))
    model.fit(train, callbacks=[Diagnostics("logs/diagnostics", batch)])
    ```
    """

    def __init__(self, log_dir, batch, max_images=8):
        super().__init__()
        if max_images < 1:
            raise ValueError(f"`max_images` must be at least 1, received: max_images={max_images}")
        self.log_dir = Path(log_dir)
        self.images, self.labels = batch
        self.max_images = max_images
        self._writer = None

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        network = getattr(self.model, "network", self.model)
        # Every layer's output; the last layer's is the network's prediction.
        self._layers = [layer for layer in network.layers
                        if not isinstance(layer, keras.layers.InputLayer)]
        self._probe = keras.Model(network.inputs, [layer.output for layer in self._layers])
        self._writer = tf.summary.create_file_writer(str(self.log_dir))
        with self._writer.as_default(step=0):
            tf.summary.image("inputs", tf.cast(self.images[:self.max_images], tf.float32),
                             max_outputs=self.max_images)

    def on_epoch_end(self, epoch, logs=None):
        import tensorflow as tf

        network = getattr(self.model, "network", self.model)
        state = [variable.numpy() for variable in network.non_trainable_variables]
        with tf.GradientTape() as tape:
            outputs = self._probe(self.images, training=True)
            loss = self.model.compute_loss(x=self.images, y=self.labels, y_pred=outputs[-1])
        gradients = tape.gradient(loss, network.trainable_variables)
        for variable, value in zip(network.non_trainable_variables, state):
            variable.assign(value)
        by_variable = {id(v): g for v, g in zip(network.trainable_variables, gradients)}

        with self._writer.as_default(step=epoch):
            for layer, output in zip(self._layers, outputs):
                tf.summary.histogram(f"activations/{layer.name}", tf.cast(output, tf.float32))
                layer_gradients = [tf.reshape(tf.cast(by_variable[id(v)], tf.float32), [-1])
                                   for v in layer.trainable_variables
                                   if by_variable.get(id(v)) is not None]
                if layer_gradients:
                    flat = tf.concat(layer_gradients, axis=0)
                    tf.summary.scalar(f"gradient_norm/{layer.name}", tf.norm(flat))
                    tf.summary.histogram(f"gradients/{layer.name}", flat)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
