"""CNN on MNIST: two 3x3 convolutions, a max-pool and a dense head; expect ~99.25%.

The convolutional network of the Keras example `examples/mnist_cnn.py`
(keras-team/keras, Keras 2), which "gets to 99.25% test accuracy after 12
epochs" of Adadelta at batch 128; `configs/mnist_cnn.yaml` follows it.
`fashion_mnist_cnn` trains it on Fashion-MNIST.

Measured: 99.25% on 6,000 held-out MNIST training digits after 12 epochs, in
7 min 31 s on a 2-core EPYC-oneDNN CPU (2026-11-23; docs/cpu-hour.md).

    make recipe NAME=mnist_cnn
    make recipe NAME=fashion_mnist_cnn ARGS="execution.mode=xla"
"""

import keras

import models
from callbacks import Timing
from recipes import _data, _experiment
from recipes._experiment import Experiment


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
        model = models.mnist_cnn(
            input_shape=data.input_shape,
            num_classes=data.num_classes,
            filters=config["model"]["filters"],
            dense_units=config["model"]["dense_units"],
            conv_dropout=config["model"]["conv_dropout"],
            dense_dropout=config["model"]["dense_dropout"],
        )
        # Augmentation placed on the device runs inside fit's training step.
        if data.augment_on == "device":
            model = models.AugmentedModel(model, data.augment)

        # ## Training setup
        # Adadelta adapts each weight's step; Keras 2's default rate was 1.0
        # (Keras 3's is 1e-3), so the example's rate is set explicitly.
        optimizer = keras.optimizers.Adadelta(
            learning_rate=_experiment.learning_rate(config, strategy))
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
