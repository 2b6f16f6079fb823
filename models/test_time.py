"""Test-time augmentation: a model's predictions averaged over views of each image."""

import keras
from keras import ops

# Each view's weight in the mean over 1, 2 or 6 views, in `test_time_views`' order:
# the image, its mirror, then the pairs shifted up-left and down-right
# (cifar10-airbench's: half on the image and its mirror, a quarter per pair).
VIEW_WEIGHTS = {1: [1.0], 2: [0.5, 0.5], 6: [0.25, 0.25, 0.125, 0.125, 0.125, 0.125]}


def test_time_views(network, translate=False):
    """Wraps `network` so that it predicts every view of each image at once:
    the image and its mirror; with `translate`, also the pair shifted by one
    pixel up and left, and the pair shifted down and right (edges reflected).

    Returns:
        An uncompiled `keras.Model` from `network`'s input to its
        predictions stacked per view: `(batch, 2 or 6, classes)`.
    """
    images = keras.Input(shape=network.input_shape[1:], name="image")
    shown = [images]
    if translate:
        height, width = network.input_shape[1:3]
        padded = ops.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
        shown += [padded[:, :height, :width], padded[:, 2:, 2:]]
    predictions = []
    for view in shown:
        predictions += [network(view), network(ops.flip(view, axis=2))]  # axis 2 is width
    stacked = ops.stack([ops.cast(p, "float32") for p in predictions], axis=1)
    return keras.Model(images, stacked, name=f"{network.name}_views")


def average_views(predictions, count, average="probabilities"):
    """The mean over the first `count` (1, 2 or 6) of `test_time_views`' predictions,
    weighted by `VIEW_WEIGHTS`: of the probabilities, or (`"logits"`,
    airbench's) the softmax of the mean logit. A probability's log is its
    logit less a constant per view, so the mean log-probability stands in
    for the mean logit."""
    if average not in ("probabilities", "logits"):
        raise ValueError(f"average must be 'probabilities' or 'logits'; received: {average!r}")
    weights = ops.reshape(ops.convert_to_tensor(VIEW_WEIGHTS[count], "float32"), (1, count, 1))
    chosen = predictions[:, :count]
    if average == "logits":
        return ops.softmax(ops.sum(ops.multiply(weights, ops.log(chosen)), axis=1))
    return ops.sum(ops.multiply(weights, chosen), axis=1)


def flip_averaged(network, translate=False, average="probabilities"):
    """Wraps `network` so it predicts the mean of its predictions on each
    image and on the image flipped left to right; with `translate`, on six
    views, as cifar10-airbench does (`test_time_views`, weighted by `VIEW_WEIGHTS`).

    A horizontally flipped or slightly shifted photograph is as likely as the
    original, and the predictions err differently: their mean is a little
    more accurate, at two (or six) times the cost of a prediction. Training
    is not affected; the wrapper shares `network`'s weights.

    Args:
        network: a built model that takes `(batch, height, width, channels)`
            images and outputs class probabilities.
        translate: also average over the four shifted views.
        average: `"probabilities"`, the mean of what `network` outputs, or
            `"logits"`, airbench's: the softmax of the mean logit.

    Returns:
        An uncompiled `keras.Model` with `network`'s input and output shapes.
    """
    count = 6 if translate else 2
    every_view = test_time_views(network, translate)
    images = keras.Input(shape=network.input_shape[1:], name="image")
    averaged = average_views(every_view(images), count, average)
    suffix = "six_views" if translate else "flip_averaged"
    return keras.Model(images, averaged, name=f"{network.name}_{suffix}")


def view_metrics(predictions, labels, count, average, loss, regularization=0.0):
    """What `evaluate` reports for the mean over `count` of `test_time_views`'
    `predictions`, from the predictions: `loss` (a Keras loss, plus the
    model's `regularization` penalty, as `evaluate` adds it) and accuracy,
    against one-hot `labels`. One pass of `test_time_views` gives every view count's
    and average's metrics, where `evaluate` needs a pass and a trace each."""
    averaged = average_views(ops.convert_to_tensor(predictions, "float32"), count, average)
    hits = ops.equal(ops.argmax(averaged, axis=-1), ops.argmax(labels, axis=-1))
    return {"loss": float(loss(labels, averaged)) + float(regularization),
            "accuracy": float(ops.mean(ops.cast(hits, "float32")))}
