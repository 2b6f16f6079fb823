"""DenseNet-BC (L=100, k=12) on CIFAR-100 with the paper's protocol: expect ~77.7% (C100+).

Huang et al., "Densely Connected Convolutional Networks" (arXiv 1608.06993),
Table 2: DenseNet-BC with depth 100 and growth rate 12 (0.8M parameters)
reaches 22.27% test error on CIFAR-100 with standard augmentation, i.e. 77.73%
accuracy, and 4.51% error (95.49%) on CIFAR-10, which `densenet_cifar10` runs
with this same code. The protocol: SGD with Nesterov momentum 0.9, learning
rate 0.1 divided by 10 at 50% and 75% of 300 epochs, batch 64, weight decay
1e-4, per-channel normalization, pad-4 random crops (padded with the mean
colour, as the reference code's zero padding of normalized images is) and
horizontal flips, batch-norm momentum 0.9 (Torch's 0.1), and all 50,000
training images trained (no held-out split); docs/densenet.md lists what
still differs. Not measured here: the full protocol takes hours on a GPU,
and no GPU that runs TensorFlow has been available; expect the paper's
figures on one. The DenseNet measured on a CPU is `densenet_cifar10_cpu`
(docs/cpu-hour.md).

    make recipe NAME=densenet_cifar100                 # the full protocol: hours on a GPU
    make recipe NAME=densenet_cifar100 ARGS="model.variant=densenet40_k12 model.api=sequential"
    make recipe NAME=densenet_cifar100_modern          # cosine, label smoothing, RandAugment, CutMix

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it trains on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python densenet_cifar100.py data.source=synthetic train.epochs=1 model.depth=40
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
    from keras_course_recipes.models.densenet import densenet, variant_spec
except ImportError as missing:  # the kit, or a file of it, is not where this Python runs
    if str(missing.path).endswith("keras_course_recipes.py"):  # a file of that name, not the kit
        raise SystemExit(f"error: {missing.path} hides the keras_course_recipes package: "
                         "rename it.") from None
    raise SystemExit(f"error: {missing}: this recipe runs on its kit, the keras-course-recipes "
                     "package: pip install it where this Python runs, or copy the recipe with "
                     "every file of the kit it imports (recipes copy NAME DIR; its README "
                     "says how).") from None

import keras
from keras import ops

# ## Configuration
# What this recipe trains with, each value with its reason. `key=value` on the
# command line overrides any of them; in a notebook, edit them here. The data
# section's other keys (`source`: tfds, folder or synthetic) are
# keras_course_recipes/data.py's `DEFAULTS`; `run.dir` (where the run writes) and the
# other sections' keys are keras_course_recipes/settings.py's `DEFAULTS`.
CONFIG = {
    "data": {
        "name": "cifar100",
        "batch_size": 64,  # the paper's batch
        "validation_split": 0,  # the paper trains on all 50,000 images (validation: the test split)
        # The paper's "+": pad 4, random 32x32 crop, horizontal flip. Its code
        # pads normalized images with 0, the mean colour: fill mean, where
        # ours pads before the model normalizes.
        "augment": [{"pad_crop": {"fill": "mean"}}, "flip"],
    },
    "model": {
        "variant": "densenet_bc100_k12",  # a row of VARIANTS in models/densenet.py
        "depth": None,  # None: the variant's value; a number overrides it
        "growth_rate": None,  # k, feature maps added per layer
        "bottleneck": None,  # the "B": 1x1 convolutions to 4k maps first
        "compression": None,  # the "C": transitions keep this fraction of the maps
        "dropout": 0.0,  # the paper: 0.2 only when training without augmentation
        "batch_norm": True,  # False: the course exercise without batch norm
        "weight_decay": 1.0e-4,  # the paper's, as an L2 penalty on every kernel
        "batch_norm_momentum": 0.9,  # the paper's code's Torch 0.1 (Keras' default is 0.99)
        "test_time_flip": False,  # True: evaluate on the mean prediction of each image and its mirror
        "api": "functional",  # sequential: the same network from the DenseBlock/TransitionBlock layers
    },
    "train": {
        "epochs": 300,
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 0.1,
        "schedule": "step",  # step: lr/10 at 50% and 75% of training; cosine: decay to 0; constant
        "warmup_epochs": 0,  # a linear rise from 0 before a cosine or constant rate; the paper has none
        "momentum": 0.9,  # Nesterov, as in the paper
        "label_smoothing": 0.0,
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
    "model.depth": {"type": ["int", "null"], "at_least": 1},
    "model.growth_rate": {"type": ["int", "null"], "at_least": 1},
    "model.bottleneck": {"type": ["bool", "null"]},
    "model.compression": {"type": ["float", "null"], "above": 0, "at_most": 1},
    "model.dropout": {"type": "float", "at_least": 0, "below": 1},
    "model.weight_decay": {"type": "float", "at_least": 0},
    "model.batch_norm_momentum": {"type": "float", "at_least": 0, "below": 1},
    "model.api": ["functional", "sequential"],  # a list: its choices
    "train.schedule": ["constant", "step", "cosine"],
    # A warm-up rises to the rate a cosine or constant schedule starts from (the
    # paper's step schedule has none), and leaves epochs to train after it.
    "train.warmup_epochs": {"type": "int", "at_least": 0, "below": "train.epochs",
                            "needs": {"train.schedule": ["cosine", "constant"]}},
    "train.momentum": {"type": "float", "at_least": 0, "below": 1},
    "train.label_smoothing": {"type": "float", "at_least": 0, "below": 1},
}


# ## The data and the compiled model
def build(config, run=None):
    """The compiled model and its data: what `run` trains, and what the
    tools (compare, graph, preview) time, draw and show.

    Args:
        run: the run it is built for (`run`'s `RecipeRun`), whose batches
            start at its `initial_epoch`, the ones an uninterrupted run
            trains on; None (the tools): a fresh start, epoch 0.
    """
    model_config, train, execution = config["model"], config["train"], config["execution"]
    # The DenseNet's depth, growth rate, bottleneck and compression:
    # `model.variant` names the paper's, and the fields that are set override
    # them. Checked first, so that a depth no DenseNet has costs no data loading.
    try:
        spec = variant_spec(model_config["variant"], depth=model_config["depth"],
                            growth_rate=model_config["growth_rate"],
                            bottleneck=model_config["bottleneck"],
                            compression=model_config["compression"])
    except ValueError as error:
        raise UserError(f"model: {error}") from None
    # Every random draw (weights, dropout, the shuffle, augmentation) from
    # one seed, and the dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # `data.augment` (pad-crop and flip for the paper) runs on training
    # batches only. One-hot labels, for label smoothing.
    augmentation = augment.from_config(config["data"], seed=execution["seed"])
    splits = data.load(config["data"], seed=execution["seed"], one_hot=True,
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0, augmentation=augmentation)

    # Per-channel normalization with the training images' statistics, as a
    # layer inside the model: a saved model takes plain [0, 1] images.
    # float32 under a mixed policy too: `adapt` sums float32 images.
    normalization = keras.layers.Normalization(axis=-1, dtype="float32", name="normalization")
    normalization.adapt(data.images(splits.train_plain))
    model = densenet(splits.input_shape, splits.num_classes, **spec,
                     dropout=model_config["dropout"], batch_norm=model_config["batch_norm"],
                     weight_decay=model_config["weight_decay"],  # an L2 penalty in each kernel
                     batch_norm_momentum=model_config["batch_norm_momentum"],
                     normalization=normalization, api=model_config["api"])
    if splits.augment_on == "device":  # data.augment inside fit's training step
        model = augment.AugmentedModel(model, splits.augment)

    optimizer = keras.optimizers.SGD(learning_rate=_schedule(train, splits.steps_per_epoch),
                                     momentum=train["momentum"], nesterov=True)
    # One-hot labels (data above), so that they can be smoothed.
    loss = keras.losses.CategoricalCrossentropy(label_smoothing=train["label_smoothing"])
    # The execution mode is only a compile argument: op by op from Python
    # (eager), one tf.function per step (graph), or compiled by XLA (xla).
    mode = execution["mode"]
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"],
                  run_eagerly=mode == "eager", jit_compile=mode == "xla",
                  steps_per_execution=execution["steps_per_execution"])
    return SimpleNamespace(model=model, data=splits)


def _schedule(train, steps_per_epoch):
    """The learning rate per optimizer step that `train.schedule` names, over
    the whole run (the optimizer counts its steps, which a resumed run
    restores): `step`, the paper's, divides it by 10 at 50% and again at 75%;
    `cosine` decays it to 0 after `train.warmup_epochs` of linear rise from
    0; `constant` keeps it, after the same rise."""
    lr, total = train["lr"], train["epochs"] * steps_per_epoch
    if train["schedule"] == "step":
        # The rate moves on once `step` passes a boundary; step n is the (n+1)th.
        return keras.optimizers.schedules.PiecewiseConstantDecay(
            boundaries=[total // 2 - 1, total * 3 // 4 - 1], values=[lr, lr / 10, lr / 100])
    warmup = train["warmup_epochs"] * steps_per_epoch
    if train["schedule"] == "constant" and not warmup:
        return lr
    # alpha is the floor of the decay, as a fraction of lr: 1 keeps it constant.
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else lr, decay_steps=total - warmup,
        alpha=1.0 if train["schedule"] == "constant" else 0.0,
        warmup_target=lr if warmup else None, warmup_steps=warmup)


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

    # With model.test_time_flip, each image's prediction is the mean of the
    # network's on the image and on its mirror image (test-time augmentation).
    evaluated = model
    if config["model"]["test_time_flip"]:
        mode = config["execution"]["mode"]
        evaluated = flip_averaged(augment.network_of(model))
        evaluated.compile(loss=model.loss, metrics=["accuracy"],
                          run_eagerly=mode == "eager", jit_compile=mode == "xla")
    experiment.test = evaluated.evaluate(splits.test, return_dict=True, verbose=0)
    experiment.timing = timing
    return experiment


def flip_averaged(network):
    """`network` predicting the mean of its predictions on each image and on
    the image flipped left to right: a mirrored photograph is as likely as
    the original, and the two predictions err differently. It shares
    `network`'s weights."""
    images = keras.Input(shape=network.input_shape[1:], name="image")
    mirrored = ops.flip(images, axis=2)  # axis 2 is the width
    mean = (ops.cast(network(images), "float32") + ops.cast(network(mirrored), "float32")) / 2
    return keras.Model(images, mean, name=f"{network.name}_flip_averaged")


# ## Run it
# `python densenet_cifar100.py key=value ...` in a shell; `%run densenet_cifar100.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("densenet_cifar100", CONFIG, run, CONFIG_SCHEMA)
