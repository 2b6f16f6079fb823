"""MLP on MNIST: two dense layers of 512 units with dropout; expect ~98.4%.

The classic first model of a deep-learning course, rebuilt from the Keras
example `examples/mnist_mlp.py` (keras-team/keras, Keras 2), which reports
98.40% test accuracy after 20 epochs of RMSprop at batch 128. The defaults in
`configs/mnist_mlp.yaml` follow it. Small enough that per-step overhead, not
arithmetic, dominates: the recipe where graph execution shows its largest
speed-up over eager. With no hidden layer it is a softmax regression, the
model before it in a course: `mnist_softmax` and `fashion_mnist_softmax` run
it so; `fashion_mnist_mlp` runs this MLP on Fashion-MNIST.

Measured: 98.47% on 6,000 held-out MNIST training digits after 20 epochs, in
1 min 29 s on a 2-core EPYC-oneDNN CPU (2026-11-23); the softmax regression
91.65% after 2 epochs, in 10 s (docs/cpu-hour.md).

    make recipe NAME=mnist_mlp
    make recipe NAME=mnist_mlp ARGS="execution.mode=eager train.epochs=2"
    make recipe NAME=mnist_softmax
"""

import keras

import models
from callbacks import Timing
from recipes import _data, _experiment
from recipes._experiment import Experiment

# Keys of configs/mnist_mlp.yaml with a few allowed values. Read without
# importing this module (recipes/_config.py), so it stays a literal.
CONFIG_SCHEMA = {"train.optimizer": ["rmsprop", "sgd"]}


def build(config):
    """Builds what `run` trains: the data and the compiled model.

    Returns:
        An `Experiment`: the compiled model, its data and strategy.
    """
    # Seeds every random generator, the input pipeline's included, and sets
    # the dtype policy, before anything is built; `strategy` is
    # tf.distribute's (execution.strategy), a no-op by default.
    strategy = _experiment.prepare(config)

    # ## Data
    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=config["train"]["steps_per_epoch"],
                      replicas=strategy.num_replicas_in_sync)

    # ## Model
    # Under tf.distribute, variables made in the strategy's scope are
    # mirrored on every replica: build and compile the model there.
    with strategy.scope():
        model = models.mlp(
            input_shape=data.input_shape,
            num_classes=data.num_classes,
            hidden_units=config["model"]["hidden_units"],
            dropout=config["model"]["dropout"],
        )
        # Augmentation placed on the device runs inside fit's training step.
        if data.augment_on == "device":
            model = models.AugmentedModel(model, data.augment)

        # ## Training setup
        optimizer = {"rmsprop": keras.optimizers.RMSprop, "sgd": keras.optimizers.SGD}[
            config["train"]["optimizer"]](learning_rate=_experiment.learning_rate(config, strategy))
        # Class indices, or one-hot labels once MixUp or CutMix blend them.
        loss = (keras.losses.CategoricalCrossentropy() if data.one_hot
                else keras.losses.SparseCategoricalCrossentropy())
        # The execution mode is only a compile argument: op by op from Python
        # (eager), one tf.function per step (graph), or compiled by XLA (xla).
        mode = config["execution"]["mode"]
        model.compile(
            optimizer=optimizer,
            loss=loss,
            metrics=["accuracy"],
            run_eagerly=mode == "eager",
            jit_compile=mode == "xla",
            steps_per_execution=config["execution"]["steps_per_execution"],
        )
    return Experiment(config, model, data, strategy)


def run(config):
    """Trains and evaluates the model that `config` describes.

    Returns:
        The run's metrics, also written to `<run dir>/metrics.json`.
    """
    experiment = build(config)
    model, data = experiment.model, experiment.data
    if config["run"]["verbose"]:
        model.summary()

    # ## Training
    # runs/NAME/<timestamp>, or run.dir's earlier run to resume it: the
    # resolved config.yaml, history.csv, TensorBoard logs and the backup.
    run_dir = experiment.open_run_dir()
    # Timing first, so that the logs record its step time, images/s and input
    # wait; then standard_callbacks: ExecutionModeCheck, DivergenceStop,
    # CSVLogger and, as callbacks.* asks, TensorBoard, GraphWriter,
    # Diagnostics and ModelCheckpoint; BackupAndRestore last.
    timing = Timing(batch_size=data.batch_size)
    callbacks = [timing, *_experiment.standard_callbacks(config, run_dir, data)]
    model.fit(
        timing.instrument(data.train),
        validation_data=data.validation,
        epochs=config["train"]["epochs"],
        steps_per_epoch=data.steps_per_epoch,
        callbacks=callbacks,
        verbose=_experiment.fit_verbose(config),
    )

    # ## Evaluation
    test_metrics = model.evaluate(data.test, return_dict=True, verbose=0)
    return experiment.finish(test_metrics, timing)
