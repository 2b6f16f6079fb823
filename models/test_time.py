"""Test-time augmentation: a model's predictions averaged over views of each image."""

import keras
from keras import ops


def flip_averaged(network, translate=False, average="probabilities"):
    """Wraps `network` so it predicts the mean of its predictions on each
    image and on the image flipped left to right; with `translate`, on six
    views, as cifar10-airbench does: half the weight on the image and its
    mirror, a quarter each on the pair shifted by one pixel up and left, and
    on the pair shifted down and right (edges reflected).

    A horizontally flipped or slightly shifted photograph is as likely as the
    original, and the predictions err differently: their mean is a little
    more accurate, at two (or six) times the cost of a prediction. Training
    is not affected; the wrapper shares `network`'s weights.

    Args:
        network: a built model that takes `(batch, height, width, channels)`
            images and outputs class probabilities.
        translate: also average over the four shifted views.
        average: `"probabilities"`, the mean of what `network` outputs, or
            `"logits"`, airbench's: the softmax of the mean logit. A
            probability's log is its logit less a constant per view, so the
            mean log-probability stands in for the mean logit.

    Returns:
        An uncompiled `keras.Model` with `network`'s input and output shapes.
    """
    if average not in ("probabilities", "logits"):
        raise ValueError(f"average must be 'probabilities' or 'logits'; received: {average!r}")
    on_logits = average == "logits"
    images = keras.Input(shape=network.input_shape[1:], name="image")

    def predict(views):
        probabilities = network(views)
        return ops.log(probabilities) if on_logits else probabilities

    def mirror_pair(views, name):
        return keras.layers.Average(name=name, dtype="float32")(
            [predict(views), predict(ops.flip(views, axis=2))])  # axis 2 is width

    if not translate:
        averaged, name = mirror_pair(images, "flip_average"), f"{network.name}_flip_averaged"
    else:
        height, width = network.input_shape[1:3]
        padded = ops.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
        shifted = [mirror_pair(padded[:, :height, :width], "up_left_average"),
                   mirror_pair(padded[:, 2:, 2:], "down_right_average")]
        averaged = 0.5 * mirror_pair(images, "flip_average") + 0.25 * (shifted[0] + shifted[1])
        name = f"{network.name}_six_views"
    return keras.Model(images, ops.softmax(averaged) if on_logits else averaged, name=name)
