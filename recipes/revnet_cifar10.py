"""RevNet-38 on CIFAR-10, trained without storing activations: expect ~93.1% (the paper).

Gomez et al., "The Reversible Residual Network: Backpropagation Without
Storing Activations" (arXiv 1707.04585): RevNet-38, -110 and -164 reach
93.1%, 94.0% and 94.6% on CIFAR-10 and 71.2%, 74.0% and 76.4% on CIFAR-100
(`revnet_cifar100` runs this code on it). The protocol of the TensorFlow
RevNet example: SGD with momentum 0.9, batch 100, learning rate 0.1 divided
by 10 after 40,000 and 60,000 of 80,000 steps (half and three quarters of
the run), weight decay 2e-4, pad-4 crops
and flips. Its accuracy is not measured here: that takes a GPU for hours,
and no GPU that runs TensorFlow has been available.

`model.backprop` picks the gradient: `reversible` (the default) rebuilds
each stage's activations from its output in the backward pass;
`standard` keeps them, as ordinary backpropagation does; `remat` recomputes
each unit with `keras.remat`. `make memory NAME=revnet_cifar10` measures what
each costs: the table in docs/revnet.md, generated from results/speed.csv
(group `memory revnet_cifar10 EPYC-AVX2`), shows how little memory the
reversible step keeps as the network deepens, and the time it pays for it.

    make recipe NAME=revnet_cifar10
    make recipe NAME=revnet_cifar100 ARGS="model.variant=revnet110"
    make memory NAME=revnet_cifar10

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it trains on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python revnet_cifar10.py data.source=synthetic train.epochs=1 model.variant=revnet38
"""

# ## Setup
# The kit this recipe runs on, the keras-course-recipes package: its run
# directory, checks, lock and resume, the data pipeline, the model's builder
# and the Timing callback. `runs.start` before Keras loads: run as a program,
# a Ctrl-C at any moment from there on stops it with one line.
from types import SimpleNamespace

try:
    from keras_course_recipes import runs
    runs.start(__name__)  # as a program: Ctrl-C, and a missing backend, are one line
    from keras_course_recipes import augment, data
    from keras_course_recipes.errors import UserError
    from keras_course_recipes.callbacks.timing import Timing
    from keras_course_recipes.models.revnet import revnet, variant_spec
except ImportError as missing:  # the kit, or a file of it, is not where this Python runs
    if str(missing.path).endswith("keras_course_recipes.py"):  # a file of that name, not the kit
        raise SystemExit(f"error: {missing.path} hides the keras_course_recipes package: "
                         "rename it.") from None
    raise SystemExit(f"error: {missing}: this recipe runs on its kit, the keras-course-recipes "
                     "package: pip install it where this Python runs, or copy the recipe with "
                     "every file of the kit it imports (recipes copy NAME DIR; its README "
                     "says how).") from None

import keras

# ## Configuration
# What this recipe trains with, each value with its reason. `key=value` on the
# command line overrides any of them; in a notebook, edit them here. The data
# section's other keys (`source`: tfds, folder or synthetic) are
# keras_course_recipes/data.py's `DEFAULTS`; `run.dir` (where the run writes) and the
# other sections' keys are keras_course_recipes/settings.py's `DEFAULTS`.
CONFIG = {
    "data": {
        "name": "cifar10",
        "batch_size": 100,  # the example's batch
        "augment": ["pad_crop", "flip"],  # pad 4, random 32x32 crop, horizontal flip
    },
    "model": {
        "variant": "revnet38",  # revnet38 | revnet110 | revnet164 (models/revnet.py)
        "init_filters": None,  # the stem convolution's width; None: the variant's
        "units": None,  # units per stage; None: the variant's
        "filters": None,  # each stage's width; None: the variant's
        "backprop": "reversible",  # reversible | standard | remat: how the stages get their gradients
        "weight_decay": 2.0e-4,  # the example's, as an L2 penalty on every kernel
    },
    "train": {
        "epochs": 178,  # 80,000 steps of 100 over the 45,000 training images (10% held out)
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 0.1,  # divided by 10 at 50% and 75% of the steps: the example's 40,000 and 60,000 of 80,000
        "momentum": 0.9,
    },
    "execution": {
        "mode": None,  # eager, graph (a tf.function) or xla (jit_compile); None: the backend's compiled step
        "precision": "float32",  # or mixed_bfloat16, mixed_float16
        "seed": 0,
        "steps_per_execution": 1,
    },
}
# What each key of this recipe's own takes, read with CONFIG before anything
# runs: a value outside it is one line that names the key (the words are
# keras_course_recipes/settings.py's `declarations`; "null": None, the variant's).
CONFIG_SCHEMA = {
    "model.variant": ["revnet38", "revnet110", "revnet164"],  # a list: its choices
    "model.init_filters": {"type": ["int", "null"], "at_least": 1},
    "model.units": {"type": ["list", "null"], "items": "int", "at_least": 1},
    "model.filters": {"type": ["list", "null"], "items": "int", "at_least": 1},
    "model.backprop": ["reversible", "standard", "remat"],
    "model.weight_decay": {"type": "float", "at_least": 0},
    "train.momentum": {"type": "float", "at_least": 0, "below": 1},
}
# Why this recipe trains on TensorFlow alone: `recipes run` on JAX or torch refuses it, saying so.
TENSORFLOW_ONLY = "RevNet's tf.custom_gradient"


# ## The data and the compiled model
def build(config, run=None):
    """The compiled model and its data: what `run` trains, and what the
    tools (compare, graph, memory) time, draw and measure.

    Args:
        run: the run it is built for (`run`'s `RecipeRun`), whose batches
            start at its `initial_epoch`, the ones an uninterrupted run
            trains on; None (the tools): a fresh start, epoch 0.
    """
    model_config, train, execution = config["model"], config["train"], config["execution"]
    # A variant names the paper's network; units and filters that are set
    # override it. Checked first, so that a mistake costs no data loading.
    try:
        spec = variant_spec(model_config["variant"], init_filters=model_config["init_filters"],
                            units=model_config["units"], filters=model_config["filters"])
    except ValueError as error:
        raise UserError(f"model: {error}") from None
    # Every random draw (weights, the shuffle, augmentation) from one seed,
    # and the dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # `data.augment` (pad-crop and flip) runs on training batches only.
    augmentation = augment.from_config(config["data"], seed=execution["seed"])
    splits = data.load(config["data"], seed=execution["seed"],
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0, augmentation=augmentation)

    # Per-channel normalization with the training images' statistics, inside
    # the model: a saved model takes plain [0, 1] images. float32 under a
    # mixed policy too: `adapt` sums float32 images.
    normalization = keras.layers.Normalization(axis=-1, dtype="float32", name="normalization")
    normalization.adapt(data.images(splits.train_plain))
    model = revnet(splits.input_shape, splits.num_classes, **spec,
                   weight_decay=model_config["weight_decay"],  # an L2 penalty in each kernel
                   backprop=model_config["backprop"], normalization=normalization)
    if splits.augment_on == "device":  # data.augment inside fit's training step
        model = augment.AugmentedModel(model, splits.augment)

    # The example's steps: lr/10 at half the run, lr/100 at three quarters.
    total, lr = train["epochs"] * splits.steps_per_epoch, train["lr"]
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay(
        boundaries=[total // 2 - 1, total * 3 // 4 - 1], values=[lr, lr / 10, lr / 100])
    optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=train["momentum"])
    # Class indices, or one-hot labels once MixUp or CutMix blend them.
    loss = (keras.losses.CategoricalCrossentropy() if splits.one_hot
            else keras.losses.SparseCategoricalCrossentropy())
    # The execution mode is only a compile argument: op by op from Python
    # (eager), one tf.function per step (graph), or compiled by XLA (xla).
    mode = execution["mode"]
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"],
                  run_eagerly=mode == "eager", jit_compile=mode == "xla",
                  steps_per_execution=execution["steps_per_execution"])
    return SimpleNamespace(model=model, data=splits)


# ## Training and evaluation
def run(config, run):
    """Trains the model `config` describes, writing into `run.dir`, and
    evaluates it on the test split.

    Args:
        run: the kit's `RecipeRun` (keras_course_recipes): the run
            directory `run.dir`, its callbacks, first in `fit`'s, the
            `initial_epoch` a resumed run starts at and `fit`'s `verbose`.

    Returns:
        The model, its data, the Timing callback and the `test` metrics.
    """
    experiment = build(config, run)
    model, splits = experiment.model, experiment.data

    timing = Timing(batch_size=splits.batch_size)  # before the logs: its numbers reach them
    callbacks = [
        *run.callbacks,  # the kit's: the run directory's (rundir.py), then the harness's
        timing,
        keras.callbacks.CSVLogger(run.dir / "history.csv", append=True),
        # Scalars for `tensorboard --logdir runs`, written through TensorFlow.
        *([keras.callbacks.TensorBoard(run.dir / "tensorboard")] if runs.has_tensorboard() else []),
        keras.callbacks.ModelCheckpoint(run.dir / "checkpoints" / "last.keras"),
        # The whole training state after each epoch, and the one before: run
        # again with the same run.dir, training goes on from the last epoch.
        keras.callbacks.BackupAndRestore(run.dir / "backup", double_checkpoint=True,
                                         delete_checkpoint=False),
    ]
    model.fit(timing.instrument(splits.train), validation_data=splits.validation,
              epochs=config["train"]["epochs"], steps_per_epoch=splits.steps_per_epoch,
              callbacks=callbacks, verbose=run.verbose)

    experiment.test = model.evaluate(splits.test, return_dict=True, verbose=0)
    experiment.timing = timing
    return experiment


# ## Run it
# `python revnet_cifar10.py key=value ...` in a shell; `%run revnet_cifar10.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("revnet_cifar10", CONFIG, run, CONFIG_SCHEMA)
