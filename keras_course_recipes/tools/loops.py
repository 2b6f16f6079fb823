"""Hand-written training loops: what `fit` does, written out with `GradientTape`.

The low-level reference that `compare` times `fit` against (`loop_eager`,
`loop_function`, `loop_epoch`) and whose AutoGraph code `graph` writes. They
train a recipe's compiled model with its own loss and optimizer.
"""

import tensorflow as tf

from keras_course_recipes.augment import AugmentedModel


def step_body(model):
    """`(images, labels) -> loss`: one training step on `model`'s compiled loss
    and optimizer, as `fit`'s step does it, minus the metrics: augmentation
    when the model runs it on the device, forward pass, loss (`compute_loss`:
    the compiled loss, reduced, plus the layers' regularization losses),
    gradients, optimizer update."""
    optimizer = model.optimizer
    augment = model.augment if isinstance(model, AugmentedModel) else None

    def step(images, labels):
        if augment:
            images, labels = augment(images, labels)
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = model.compute_loss(x=images, y=labels, y_pred=predictions)
            scaled = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled, model.trainable_weights)
        optimizer.apply_gradients(zip(gradients, model.trainable_weights))
        return loss

    return step


def train_step(model, use_function):
    """A step that reads its batch from an iterator, as `fit`'s does, so that
    a `tf.function` (`use_function=True`) reads it inside the graph."""
    body = step_body(model)

    def step(batches):
        images, labels = next(batches)
        return body(images, labels)

    return tf.function(step, jit_compile=False) if use_function else step


def train_epoch(model):
    """A whole epoch as one `tf.function`: `epoch(batches, steps)` takes
    `steps` batches from the `tf.data` iterator `batches`, trains on each, and
    returns the last loss.

    AutoGraph turns the `for` over `tf.range` into a `While` op, so the loop,
    the reads from the iterator and the steps all run inside the graph, and
    Python runs once per epoch instead of once per step. (A `for` over the
    dataset itself works too, but starts a new iterator, and refills the
    shuffle buffer, on every call.)
    """
    body = step_body(model)

    @tf.function(jit_compile=False)
    def epoch(batches, steps):
        loss = tf.constant(0.0)
        for _ in tf.range(steps):
            images, labels = next(batches)
            loss = tf.cast(body(images, labels), tf.float32)
        return loss

    return epoch
