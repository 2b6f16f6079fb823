"""FusedBatchNormalization: Keras' batch norm, trained through one TensorFlow op."""

import keras


@keras.saving.register_keras_serializable(package="models")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` whose training step is TensorFlow's
    fused kernel.

    On TensorFlow, Keras 3.15's layer casts bfloat16 activations to float32,
    takes the batch's mean and variance as separate reductions and normalizes
    with element-wise ops, each a pass over the activations, forward and
    backward. `tf.compat.v1.nn.fused_batch_norm` does the statistics and the
    normalization in one kernel (oneDNN's on a CPU), reading bfloat16 as it
    is, and its gradient is one kernel too. The moving statistics are
    updated as Keras updates them (the biased batch variance). Inference, other
    backends, masks and renormalization are Keras' own code path.

    Keras has no fused option since Keras 3 (tf.keras 2's `fused=True`).
    """

    def call(self, inputs, training=None, mask=None):
        fusable = (keras.backend.backend() == "tensorflow" and training and self.trainable
                   and mask is None and not self.renorm and len(inputs.shape) == 4
                   and self.axis in (-1, 3))
        if not fusable:
            return super().call(inputs, training=training, mask=mask)
        import tensorflow as tf

        channels = inputs.shape[-1]
        scale = tf.cast(self.gamma, "float32") if self.scale else tf.ones([channels])
        offset = tf.cast(self.beta, "float32") if self.center else tf.zeros([channels])
        outputs, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, epsilon=self.epsilon, is_training=True)
        # The kernel returns the unbiased variance (n / (n - 1)); Keras keeps the biased one.
        count = tf.cast(tf.size(inputs) // channels, "float32")
        variance = variance * (count - 1) / count
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum
                                    + variance * (1 - self.momentum))
        return tf.cast(outputs, self.compute_dtype)
