"""Training-only augmentation on whole batches, for a recipe that lists it:

    data.augment=[flip,pad_crop,{randaugment: {magnitude: 0.3}},cutmix]

Each entry is an operation's name, or a one-key mapping to its parameters.
`data.augment_on` places them: `host`, a map in the tf.data pipeline;
`device`, inside `fit`'s training step, where the recipe wraps its model in
`AugmentedModel`; `auto`, the device with a GPU or without TensorFlow, else
the host (docs/augmentation.md measured why). `data.augment_engine` picks
the layers: keras-cv's (`keras_cv`) or Keras core's (`keras`); `auto` is
keras-cv on TensorFlow and Keras core on JAX. `mixup` and `cutmix` blend
labels, so with them the labels are one-hot. `alternating_flip` is done by
the input pipeline: each image is mirrored in every other pass.

    augmentation = augment.from_config(config["data"], seed=0)  # None for []
    splits = data.load(config["data"], augmentation=augmentation)
    if augmentation and augmentation.on == "device":
        model = augment.AugmentedModel(model, augmentation)
"""

import importlib.util
import inspect
import math
import sys

import keras
import numpy as np
from keras import ops

from keras_course_recipes import data, machine
from keras_course_recipes.errors import UserError, install_advice

# The data section's keys for a recipe that augments (read as a literal by
# keras_course_recipes/settings.py's `data_defaults`, before Keras starts).
DEFAULTS = {
    "augment": [],  # training-only operations, in order
    "augment_on": "auto",  # device (in the training step) or host (tf.data); auto: device on a GPU or without TensorFlow
    "augment_engine": "auto",  # keras_cv | keras (Keras core's); auto: keras_cv on TF, keras on JAX
}
ENGINES = ("keras_cv", "keras")


def from_config(data_config, seed=0):
    """The `Augmentation` a config's data section asks for, placed by its
    `augment_on`; None when `data.augment` is empty."""
    config = {**DEFAULTS, **data_config}
    return augmentation(config["augment"], seed, config["augment_engine"], config["augment_on"])


def _layers(engine):
    """The module whose layers `engine` names."""
    if engine != "keras_cv":
        return keras.layers
    if not data.HAS_TENSORFLOW:
        raise UserError("data.augment_engine=keras_cv needs TensorFlow (keras-cv's layers are "
                        "TensorFlow code), not installed here: set data.augment_engine=keras, "
                        "Keras core's layers.")
    if importlib.util.find_spec("keras_cv") is None:
        raise UserError(f"data.augment_engine=keras_cv needs keras-cv, not installed here: "
                        f"{install_advice('tensorflow')}, or set data.augment_engine=keras, Keras "
                        "core's layers.")
    import keras_cv

    return keras_cv.layers


# ## The operations: each returns (apply, layer): `(images, labels) -> (images,
# labels)` on a batch, and the Keras layer it draws random numbers with.

def flip(engine, seed, mode="horizontal"):
    """Random flips (RandomFlip)."""
    return _images_only(_layers(engine).RandomFlip(mode, seed=seed, dtype="float32"))


FILLS = ("black", "mean", "reflect")  # what pad_crop's padding holds


def pad_crop(engine, seed, padding=4, fill="black"):
    """Pads by `padding` pixels, then crops each image back at a random offset.

    `fill`: `black` (0); `mean`, the batch's mean colour per channel, what
    the DenseNet paper's code pads with (it normalizes first, then pads with
    zeros: liuzhuang13/DenseNet, `datasets/cifar10.lua`); or `reflect`, the
    edge mirrored, as cifar10-airbench's translations are.

    Our own layer, `PadCrop`, for both engines: Keras' RandomCrop shifts a
    whole batch by one offset, and keras-cv's resamples the window (some
    crops come out stretched by a pixel); the paper shifts each image by
    whole pixels. On a TensorFlow tensor under the JAX backend (tf.data on
    the host) it runs the same steps in TensorFlow's ops.
    """
    del engine  # the same code for both
    if fill not in FILLS:
        raise UserError(f"pad_crop's fill must be one of {', '.join(FILLS)}, got {fill!r}.")
    if not isinstance(padding, int) or isinstance(padding, bool) or padding < 1:
        raise UserError(f"pad_crop's padding must be a whole number of pixels, at least 1; "
                        f"got {padding!r}.")
    layer = PadCrop(padding, fill, seed=seed, dtype="float32")

    def apply(images, labels):
        tf = sys.modules.get("tensorflow")  # not imported: `images` is not its tensor
        if (tf is None or not isinstance(images, tf.Tensor)
                or keras.backend.backend() == "tensorflow"):
            return layer(images, training=True), labels
        batch, height, width = tf.unstack(tf.shape(images)[:3])
        sides = [[0, 0], [padding, padding], [padding, padding], [0, 0]]
        if fill == "reflect":
            padded = tf.pad(images, sides, mode="REFLECT")
        else:
            colour = tf.reduce_mean(images, axis=[0, 1, 2], keepdims=True) if fill == "mean" else 0.0
            padded = tf.pad(images - colour, sides) + colour
        offsets = tf.random.uniform([batch, 2], 0, 2 * padding + 1, tf.int32, seed=seed)
        return _gather_crop(padded, offsets[:, :1] + tf.range(height),
                            offsets[:, 1:] + tf.range(width)), labels

    return apply, layer


def _gather_crop(padded, rows, columns):
    """Each image of `padded` at its `rows` x `columns`, by TensorFlow's batched
    gathers: its `take_along_axis` broadcasts the indices to every pixel and
    takes 7x as long on a CPU (49 against 7 ms for 1,024 CIFAR images)."""
    import tensorflow as tf  # only ever called on TensorFlow tensors

    cropped = tf.gather(padded, rows, axis=1, batch_dims=1)
    return tf.gather(cropped, columns, axis=2, batch_dims=1)


@keras.saving.register_keras_serializable(package="recipes")
class PadCrop(keras.layers.Layer):
    """Pads a batch by `padding` pixels and crops each image back at its own
    random offset, by whole pixels, in `keras.ops`: any backend's step.

    Args:
        padding: pixels added on each side, and so the largest shift.
        fill: `black` pads with 0; `mean` with the batch's mean colour;
            `reflect` with the edge pixels mirrored.
        seed: seeds the layer's `SeedGenerator`.
    """

    def __init__(self, padding=4, fill="black", seed=None, **kwargs):
        super().__init__(**kwargs)
        self.padding, self.fill, self.seed = padding, fill, seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, images, training=True):
        if not training:
            return images
        p = self.padding
        batch, height, width = ops.shape(images)[:3]
        sides = [[0, 0], [p, p], [p, p], [0, 0]]
        if self.fill == "reflect":
            padded = ops.pad(images, sides, mode="reflect")
        else:
            colour = ops.mean(images, axis=(0, 1, 2), keepdims=True) if self.fill == "mean" else 0.0
            padded = ops.pad(images - colour, sides) + colour
        offsets = keras.random.randint((batch, 2), 0, 2 * p + 1, seed=self.seed_generator)
        rows = offsets[:, :1] + ops.arange(height)  # (batch, height)
        columns = offsets[:, 1:] + ops.arange(width)
        if keras.backend.backend() == "tensorflow":
            return _gather_crop(padded, rows, columns)
        cropped = ops.take_along_axis(padded, rows[:, :, None, None], axis=1)
        return ops.take_along_axis(cropped, columns[:, None, :, None], axis=2)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "padding": self.padding, "fill": self.fill,
                "seed": self.seed}


def shift(engine, seed, factor=0.1, fill_mode="nearest"):
    """Random shifts of up to `factor` of the height and width, by fractions of
    a pixel (bilinear), filling from the edge as `fill_mode` says: Keras 2's
    ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1). Keras
    core's RandomTranslation for both engines: that generator's shift, as a layer."""
    del engine
    return _images_only(keras.layers.RandomTranslation(
        factor, factor, fill_mode=fill_mode, interpolation="bilinear", seed=seed, dtype="float32"))


def randaugment(engine, seed, magnitude=0.5, augmentations_per_image=2):
    """RandAugment: `augmentations_per_image` random operations of strength `magnitude`."""
    if engine == "keras":
        return _images_only(keras.layers.RandAugment(
            value_range=(0, 1), factor=magnitude, num_ops=augmentations_per_image, seed=seed,
            dtype="float32"))
    layer = _layers("keras_cv").RandAugment(
        value_range=(0, 1), magnitude=magnitude, augmentations_per_image=augmentations_per_image,
        seed=seed, dtype="float32", name="rand_augment")
    import tensorflow as tf  # keras-cv's layers are TensorFlow code

    def apply(images, labels):
        # One image at a time, in order: the parallel iterations of keras-cv's
        # own batch loop draw from the layer's one seed state in a different
        # order each run, so a seeded run would not repeat. Slower
        # (docs/augmentation.md has its speed).
        return tf.map_fn(lambda image: layer(image, training=True), images,
                         parallel_iterations=1), labels

    return apply, layer


def random_erasing(engine, seed, scale=(0.02, 0.33)):
    """Sets a random rectangle of each image to 0; `scale`: its area range, as
    fractions of the image (each side is a square root of one)."""
    if engine == "keras_cv":
        sides = tuple(math.sqrt(s) for s in scale)
        layer = _layers(engine).RandomCutout(height_factor=sides, width_factor=sides,
                                             fill_value=0.0, seed=seed, dtype="float32")
    else:
        layer = keras.layers.RandomErasing(factor=(1.0, 1.0), scale=scale, fill_value=0.0,
                                           value_range=(0, 1), seed=seed, dtype="float32")
    return _images_only(layer)


def color_jitter(engine, seed, brightness_factor=0.2, contrast_factor=0.2,
                 saturation_factor=(0.3, 0.7), hue_factor=0.05):
    """Random brightness, contrast, saturation and hue (RandomColorJitter;
    saturation 0.5 leaves an image as it is)."""
    return _images_only(_layers(engine).RandomColorJitter(
        value_range=(0, 1), brightness_factor=brightness_factor, contrast_factor=contrast_factor,
        saturation_factor=saturation_factor, hue_factor=hue_factor, seed=seed, dtype="float32"))


def mixup(engine, seed, alpha=0.2):
    """MixUp: blends pairs of images and their labels, weights from Beta(alpha, alpha)."""
    return _mixing(_layers(engine).MixUp(alpha=alpha, seed=seed, dtype="float32"))


def cutmix(engine, seed, alpha=1.0):
    """CutMix: pastes a box of another image, labels mixed by its area. keras-cv
    draws the area from Beta(alpha, alpha); Keras core first draws its Beta
    parameter from U(0, alpha), with alpha at most 1."""
    if engine == "keras_cv":
        return _mixing(_layers(engine).CutMix(alpha=alpha, seed=seed, dtype="float32"))
    return _mixing(keras.layers.CutMix(factor=alpha, seed=seed, dtype="float32"))


def _images_only(layer):
    return (lambda images, labels: (layer(images, training=True), labels)), layer


def _mixing(layer):
    def apply(images, labels):
        mixed = layer({"images": images, "labels": labels}, training=True)
        return mixed["images"], mixed["labels"]

    return apply, layer


OPERATIONS = {operation.__name__: operation for operation in (
    flip, pad_crop, shift, randaugment, random_erasing, color_jitter, mixup, cutmix)}
NEEDS_ONE_HOT = {"mixup", "cutmix"}
# Not a batch operation: the input pipeline mirrors each image itself, since
# the choice depends on the image's index and the pass over the data.
ALTERNATING_FLIP = "alternating_flip"


class Augmentation:
    """`data.augment`'s operations as one function on whole batches,
    `(images, labels) -> (images, labels)`, applied in order.

    Attributes:
        layers: the Keras layers the operations draw random numbers with: a
            model that augments in its training step tracks them.
        engine: `keras_cv` or `keras`.
        on: where its operations run, `host` (the input pipeline) or `device`
            (the training step); None when it is only `alternating_flip`.
        mixes_labels: whether it blends labels, which then must be one-hot.
        alternating_flip: whether the pipeline mirrors alternate passes (`mirrored`).
    """

    def __init__(self, steps, engine, on, mixes_labels=False, alternating_flip=False):
        self._steps, self.layers = steps, [layer for _, layer in steps]
        self.engine, self.on = engine, on
        self.mixes_labels, self.alternating_flip = mixes_labels, alternating_flip

    def __call__(self, images, labels):
        for apply, _ in self._steps:
            images, labels = apply(images, labels)
        return images, labels

    def mirrored(self, count, seed):
        """With `alternating_flip`, which of `count` training images are mirrored
        in even passes (a seeded half; the others in odd ones): cifar10-airbench's
        derandomized flip, which shows every image both ways in any two
        consecutive epochs; else None."""
        if not self.alternating_flip:
            return None
        return np.random.default_rng([seed, count]).random(count) < 0.5


def augmentation(entries, seed=0, engine="auto", on="auto"):
    """An `Augmentation` applying `entries` in order with `engine`'s layers,
    placed by `on` (`placement`); None when there are none. A `UserError`
    for an unknown operation or parameter."""
    engine = resolve_engine(engine, keras.backend.backend())
    steps, names = [], []
    for index, entry in enumerate(entries):
        name, params = _parse(entry)
        names.append(name)
        if name == ALTERNATING_FLIP:
            if params:
                raise UserError(f"data.augment: '{ALTERNATING_FLIP}' takes no parameters.")
            continue
        if name not in OPERATIONS:
            raise UserError(f"Unknown augmentation '{name}' in data.augment; "
                            f"known: {', '.join([*OPERATIONS, ALTERNATING_FLIP])}.")
        try:
            steps.append(OPERATIONS[name](engine, seed + index, **params))
        except UserError:
            raise
        except (TypeError, ValueError) as error:
            accepted = list(inspect.signature(OPERATIONS[name]).parameters)[2:]
            raise UserError(f"data.augment: bad parameters for '{name}' ({error}); "
                            f"it takes {', '.join(accepted) or 'none'}.") from None
    if not names:
        return None
    return Augmentation(steps, engine, placement(on, engine) if steps else None,
                        mixes_labels=bool(NEEDS_ONE_HOT & set(names)),
                        alternating_flip=ALTERNATING_FLIP in names)


def resolve_engine(engine, backend):
    """`data.augment_engine` on `backend`: `auto` is keras-cv on TensorFlow, where it
    is installed (else Keras core's layers, said so), and Keras core's layers on
    JAX and torch, where keras-cv's cannot run in the step."""
    if engine != "auto":
        return engine
    if backend != "tensorflow":
        return "keras"
    if importlib.util.find_spec("keras_cv") is None:
        print("note: keras-cv is not installed: augmentation runs on Keras core's layers "
              f"(data.augment_engine=keras); {install_advice('tensorflow')} brings keras-cv's.",
              flush=True)
        return "keras"
    return "keras_cv"


def _parse(entry):
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        (name, params), = entry.items()
        if params is None or isinstance(params, dict):
            return name, params or {}
    raise UserError(f"data.augment: cannot read {entry!r}; write a name, or "
                    "{name: {parameter: value}}, e.g. {randaugment: {magnitude: 0.3}}.")


def placement(augment_on, engine):
    """Where `data.augment_on` runs augmentation here: `device` or `host`; keras-cv's
    layers, TensorFlow code, are refused in a JAX training step."""
    if augment_on == "auto":
        augment_on = "host" if data.HAS_TENSORFLOW and not machine.gpus() else "device"
    backend = keras.backend.backend()
    if augment_on == "device" and engine == "keras_cv" and backend != "tensorflow":
        raise UserError(f"keras-cv's layers are TensorFlow code: they cannot run in a {backend} "
                        "training step (data.augment_on=device). Set data.augment_engine=keras, "
                        "Keras core's layers, or data.augment_on=host (tf.data).")
    return augment_on


# ## Augmentation in the training step

JAX, TENSORFLOW = (keras.backend.backend() == name for name in ("jax", "tensorflow"))


@keras.saving.register_keras_serializable(package="models")  # the name saved files hold
class AugmentedModel(keras.Model):
    """Trains `network` on batches that `augment` transforms inside `fit`'s
    training step, on the accelerator; evaluation and prediction see the
    images as they are.

    Keras runs no user code between reading a batch and the training step,
    so this overrides `train_step`, the documented way to change what `fit`
    does (its signature is the backend's). On JAX the step is a pure
    function of every variable, and `jit_compile=True` compiles augmentation
    and network together: the augmentation's layers are tracked as
    `augment_layers`, so that their seed states travel in the step's state.
    On TensorFlow, under XLA, augmentation stays out of the compiled cluster
    (RandAugment, MixUp and CutMix use ops XLA cannot compile): `compile`
    keeps fit's functions plain graphs and compiles Keras' own training, test
    and prediction steps as functions of their own, which the overridden
    steps call; `step_jit_compile` says whether it did. A saved model loads
    without its augmentation, a Python function: it predicts as `network`.

    Args:
        network: the model to train, built.
        augment: an `Augmentation` (batches to batches, with its `layers`), or None.
    """

    def __init__(self, network, augment=None, **kwargs):
        super().__init__(**kwargs)
        if not network.built:
            raise ValueError(f"`network` must be built, received: network={network.name} "
                             "(unbuilt)")
        self.network, self.augment = network, augment
        self._augment_batch = augment  # on TensorFlow, a tf.function of it once compiled
        if JAX and augment is not None:
            self.augment_layers = list(augment.layers)
        self.step_jit_compile = False
        # `predict` needs no `compile`: until then the steps are Keras' own.
        self._set_network_steps(jit_compile=False)
        self.build(network.input_shape)

    @property
    def augmentation_layers(self):
        """The layers the augmentation draws with: the ones seeded each epoch."""
        return self.augment.layers if self.augment is not None else []

    def call(self, inputs, training=None):
        return self.network(inputs, training=training)

    def compile(self, *args, **kwargs):
        super().compile(*args, **kwargs)
        self.step_jit_compile = self.jit_compile  # as Keras resolved it
        if not TENSORFLOW:
            return  # one step (jax.jit, torch.compile), augmentation included: Keras core's layers compile
        # Compiled again with jit_compile=False, fit's functions stay plain
        # graphs, and call the network's steps compiled.
        super().compile(*args, **{**kwargs, "jit_compile": False})
        self._set_network_steps(self.step_jit_compile)
        # fit traces its step with AutoGraph off, and keras-cv's layers need
        # it (Python `if`s on tensors): a tf.function of their own turns it on.
        import tensorflow as tf

        self._augment_batch = (self.augment if self.run_eagerly or self.augment is None
                               else tf.function(self.augment))

    def compile_from_config(self, config):
        # Keras leaves a loaded model with its own `compile` uncompiled and asks
        # for this: compile, then build the optimizer's variables to load into.
        self.compile(**keras.saving.deserialize_keras_object(config))
        self.optimizer.build(self.trainable_variables)

    def _set_network_steps(self, jit_compile):
        steps = (super().train_step, super().test_step, super().predict_step)
        if jit_compile and TENSORFLOW:
            import tensorflow as tf

            steps = [tf.function(step, jit_compile=True) for step in steps]
        self._network_train, self._network_test, self._network_predict = steps

    def train_step(self, *step_args):
        # TensorFlow and torch call train_step(data); JAX calls train_step(state, data).
        if JAX:
            return self._jax_train_step(*step_args)
        data, = step_args
        if self.augment is not None:
            data = self._augment_batch(*data)
        return self._network_train(data)

    def _jax_train_step(self, state, data):
        trainable, non_trainable, optimizer_variables, metrics_variables = state
        if self.augment is not None:
            # The layers read their seed states from the step's state, and write
            # the advanced ones into the scope instead of the variables.
            values = list(zip(self.non_trainable_variables, non_trainable))
            with keras.StatelessScope(state_mapping=values) as scope:
                data = self.augment(*data)
            non_trainable = [scope.get_current_value(variable)
                             for variable in self.non_trainable_variables]
        return self._network_train(
            (trainable, non_trainable, optimizer_variables, metrics_variables), data)

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
