"""Small CNN on CIFAR-10: two stages of two 3x3 convolutions, then a dense head (the Keras example's).

The classic convolutional course model, rebuilt from the Keras example
`examples/cifar10_cnn.py` (keras-team/keras, Keras 2): RMSprop at 1e-4 with
Keras 2's time decay of 1e-6, batch 32, shifts of up to 10% that fill from
the nearest edge pixel, and horizontal flips. That example reports 75%
validation accuracy after 25 epochs and 79% after 50, trained on all 50,000
training images and validated on the 10,000 test images
(`data.validation_split=0` does the same where the data has a test split).

Measured here on 5,000 held-out lossless CIFAR-10 training images after 25
epochs, still rising, short of the example's 75% on 10% fewer training
images: the README's recipe table, generated from results/accuracy.csv
(group `cifar10_cnn 25ep oneDNN`; docs/cpu-hour.md has the JPEG export's).

    make recipe NAME=cifar10_cnn
    make recipe NAME=cifar10_cnn ARGS="execution.mode=xla data.source=synthetic train.epochs=1"

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it trains on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python cifar10_cnn.py data.source=synthetic train.epochs=1
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
    from keras_course_recipes.callbacks.timing import Timing
    from keras_course_recipes.models.simple_cnn import simple_cnn
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
        "batch_size": 32,  # the example's batch size
        # The example's ImageDataGenerator: shifts of up to 10% (3.2 px),
        # filled from the nearest edge pixel, and horizontal flips.
        "augment": ["shift", "flip"],
    },
    "model": {
        "filters": [32, 64],  # two stages: 32 then 64 filters, each two 3x3 convs and a 2x2 max-pool
        "dense_units": 512,
        "conv_dropout": 0.25,  # after each stage, as in the example
        "dense_dropout": 0.5,  # after the dense layer, as in the example
    },
    "train": {
        "epochs": 50,  # the example reports 79% validation accuracy after 50 epochs (with augmentation)
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 1.0e-4,  # the example's RMSprop rate
        "lr_decay": 1.0e-6,  # the example's decay: lr / (1 + 1e-6 * step), an InverseTimeDecay
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
# keras_course_recipes/settings.py's `declarations`).
CONFIG_SCHEMA = {
    "model.filters": {"type": "list", "items": "int", "at_least": 1},
    "model.dense_units": {"type": "int", "at_least": 1},
    "model.conv_dropout": {"type": "float", "at_least": 0, "below": 1},
    "model.dense_dropout": {"type": "float", "at_least": 0, "below": 1},
    "train.lr_decay": {"type": "float", "at_least": 0},
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
    train, execution = config["train"], config["execution"]
    # Every random draw (weights, dropout, the shuffle, augmentation) from
    # one seed, and the dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    # `data.augment` (shifts and flips, as in the example) applies to
    # training batches only.
    augmentation = augment.from_config(config["data"], seed=execution["seed"])
    splits = data.load(config["data"], seed=execution["seed"],
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0, augmentation=augmentation)

    model = simple_cnn(splits.input_shape, splits.num_classes, **config["model"])
    if splits.augment_on == "device":  # data.augment inside fit's training step
        model = augment.AugmentedModel(model, splits.augment)

    # Keras 2's RMSprop(lr, decay=d) lowered the rate to lr / (1 + d * step);
    # InverseTimeDecay with decay_steps=1 is exactly that.
    learning_rate = keras.optimizers.schedules.InverseTimeDecay(
        train["lr"], decay_steps=1, decay_rate=train["lr_decay"])
    # Keras 2's RMSprop divided by sqrt(v) + 1e-7, Keras 3's divides by
    # sqrt(v + epsilon): epsilon=1e-14 puts Keras 2's floor under the
    # square root, where the default 1e-7 would damp every weight whose
    # gradients are small (sqrt(1e-7) is 3e-4).
    optimizer = keras.optimizers.RMSprop(learning_rate=learning_rate, epsilon=1e-14)
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
# `python cifar10_cnn.py key=value ...` in a shell; `%run cifar10_cnn.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("cifar10_cnn", CONFIG, run)
