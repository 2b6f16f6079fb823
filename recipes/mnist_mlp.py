"""MLP on MNIST: two dense layers of 512 units with dropout; expect ~98.4%.

The classic first model of a deep-learning course, rebuilt from the Keras
example `examples/mnist_mlp.py` (keras-team/keras, Keras 2), which reports
98.40% test accuracy after 20 epochs of RMSprop at batch 128; `CONFIG`
follows it. Small enough that per-step overhead, not arithmetic, dominates:
the recipe where graph execution shows its largest speed-up over eager.
With no hidden layer it is a softmax regression, the model before it in a
course: `mnist_softmax` and `fashion_mnist_softmax` run it so;
`fashion_mnist_mlp` runs this MLP on Fashion-MNIST.

Measured: 98.47% on 6,000 held-out MNIST training digits after 20 epochs, in
1 min 29 s on a 2-core EPYC-oneDNN CPU (2026-11-23); the softmax regression
91.65% after 2 epochs, in 10 s (docs/cpu-hour.md).

    make recipe NAME=mnist_mlp
    make recipe NAME=mnist_mlp ARGS="execution.mode=eager train.epochs=2"
    make recipe NAME=mnist_softmax

Copy it out: this file, with models/mlp.py, recipes/data.py and
callbacks/timing.py in those folders beside it, trains on its own:

    python mnist_mlp.py data.source=synthetic train.epochs=1
"""

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import keras
import yaml

from callbacks.timing import Timing
from models.mlp import mlp
from recipes import data

# What this recipe trains with, each value with its reason; `key=value` on
# the command line overrides any of them. The data section's other keys
# (data.source: tfds, a folder or synthetic images) are recipes/data.py's.
CONFIG = {
    "data": {
        "name": "mnist",
        "batch_size": 128,  # the example's batch size
    },
    "model": {
        "hidden_units": [512, 512],  # two hidden layers of 512 ReLU units; [] is a softmax regression
        "dropout": 0.2,  # after each hidden layer, as in the example
    },
    "train": {
        "epochs": 20,  # the example reports 98.40% test accuracy after 20 epochs
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 1.0e-3,  # RMSprop's default rate, which the example uses
        "optimizer": "rmsprop",  # rmsprop, as the example; sgd for the softmax regressions
    },
    "execution": {
        "mode": None,  # eager, graph (a tf.function) or xla (jit_compile); None: Keras' default
        "precision": "float32",  # or mixed_bfloat16, mixed_float16
        "seed": 0,
        "steps_per_execution": 1,
    },
}
# Keys of CONFIG that take one of a few values.
CONFIG_SCHEMA = {"train.optimizer": ["rmsprop", "sgd"]}


def build(config, initial_epoch=0):
    """The compiled model and its data: what `run` trains, and what the
    tools (compare, graph, preview) time, draw and show.

    Args:
        initial_epoch: where a resumed run starts, so that its batches are
            the ones an uninterrupted run trains on.
    """
    train, execution = config["train"], config["execution"]
    # Every random draw (weights, dropout, the shuffle) from one seed, and the
    # dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # ## Data
    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    splits = data.load(config["data"], seed=execution["seed"],
                       steps_per_epoch=train["steps_per_epoch"], initial_epoch=initial_epoch)

    # ## Model
    model = mlp(splits.input_shape, splits.num_classes,
                hidden_units=config["model"]["hidden_units"], dropout=config["model"]["dropout"])
    if splits.augment_on == "device":  # data.augment inside fit's training step
        model = data.AugmentedModel(model, splits.augment)

    # ## Training setup
    optimizer = {"rmsprop": keras.optimizers.RMSprop, "sgd": keras.optimizers.SGD}[
        train["optimizer"]](learning_rate=train["lr"])
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


def run(config, run_dir, extra_callbacks=(), initial_epoch=0, verbose="auto"):
    """Trains the model `config` describes, writing into `run_dir`, and
    evaluates it on the test split.

    Args:
        extra_callbacks: more callbacks for `fit` (the harness's).
        initial_epoch: the epoch a resumed run starts at (`build`'s).
        verbose: `fit`'s.

    Returns:
        The model, its data, the Timing callback and the `test` metrics.
    """
    experiment = build(config, initial_epoch)
    model, splits, run_dir = experiment.model, experiment.data, Path(run_dir)

    # ## Training
    timing = Timing(batch_size=splits.batch_size)  # before the logs: its numbers reach them
    callbacks = [
        *extra_callbacks,  # the harness's, when it runs this recipe: its checks come first
        timing,
        keras.callbacks.CSVLogger(run_dir / "history.csv", append=True),
        # Scalars for `tensorboard --logdir runs`, written through TensorFlow.
        *([keras.callbacks.TensorBoard(run_dir / "tensorboard")] if data.HAS_TENSORFLOW else []),
        keras.callbacks.ModelCheckpoint(run_dir / "checkpoints" / "last.keras"),
        # The whole training state after each epoch, and the one before: run
        # again with the same run_dir, training goes on from the last epoch.
        keras.callbacks.BackupAndRestore(run_dir / "backup", double_checkpoint=True,
                                         delete_checkpoint=False),
    ]
    model.fit(timing.instrument(splits.train), validation_data=splits.validation,
              epochs=config["train"]["epochs"], steps_per_epoch=splits.steps_per_epoch,
              callbacks=callbacks, verbose=verbose)

    # ## Evaluation
    experiment.test = model.evaluate(splits.test, return_dict=True, verbose=0)
    experiment.timing = timing
    return experiment


if __name__ == "__main__":  # python mnist_mlp.py key=value ...
    for item in sys.argv[1:]:
        key, equals, value = item.partition("=")
        section, _, name = key.partition(".")
        known = data.DEFAULTS if section == "data" else CONFIG.get(section, {})
        if not equals or name not in known:  # a typo would otherwise be ignored
            sys.exit(f"error: '{item}': expected key=value, with a key of CONFIG "
                     "(e.g. train.epochs=1)")
        CONFIG[section][name] = yaml.safe_load(value)
    result = run(CONFIG, Path("runs", "mnist_mlp", time.strftime("%Y%m%d-%H%M%S")))
    print("test:", result.test)
