"""CNN on MNIST: two 3x3 convolutions, a max-pool and a dense head; expect ~99.25%.

The convolutional network of the Keras example `examples/mnist_cnn.py`
(keras-team/keras, Keras 2), which "gets to 99.25% test accuracy after 12
epochs" of Adadelta at batch 128; `CONFIG` follows it. `fashion_mnist_cnn`
trains it on Fashion-MNIST.

Measured here on 6,000 held-out MNIST training digits after 12 epochs: the
README's recipe table, generated from results/accuracy.csv (group
`mnist_cnn 12ep oneDNN`: its command, time, machine and date).

    make recipe NAME=mnist_cnn
    make recipe NAME=fashion_mnist_cnn ARGS="execution.mode=xla"

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it trains on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python mnist_cnn.py data.source=synthetic train.epochs=1
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
    from keras_course_recipes import data
    from keras_course_recipes.callbacks.timing import Timing
    from keras_course_recipes.models.mnist_cnn import mnist_cnn
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
        "name": "mnist",
        "batch_size": 128,  # the example's batch size
    },
    "model": {
        "filters": [32, 64],  # two unpadded 3x3 convolutions, then one 2x2 max-pool
        "dense_units": 128,
        "conv_dropout": 0.25,  # after the max-pool, as in the example
        "dense_dropout": 0.5,  # after the dense layer, as in the example
    },
    "train": {
        "epochs": 12,  # the example reports 99.25% test accuracy after 12 epochs
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 1.0,  # Keras 2's Adadelta default, which the example uses (Keras 3's is 1e-3)
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
    # Every random draw (weights, dropout, the shuffle) from one seed, and the
    # dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    splits = data.load(config["data"], seed=execution["seed"],
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0)

    model = mnist_cnn(splits.input_shape, splits.num_classes, **config["model"])

    # Adadelta adapts each weight's step.
    optimizer = keras.optimizers.Adadelta(learning_rate=train["lr"])
    loss = keras.losses.SparseCategoricalCrossentropy()  # labels are class indices
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
# `python mnist_cnn.py key=value ...` in a shell; `%run mnist_cnn.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("mnist_cnn", CONFIG, run)
