"""Small CNN on CIFAR-10: two stages of two 3x3 convolutions, then a dense head.

The classic convolutional course model, rebuilt from the Keras example
`examples/cifar10_cnn.py` (keras-team/keras, Keras 2): RMSprop at 1e-4, batch
32, shifts of up to 3 pixels and horizontal flips. That example reports 75%
validation accuracy after 25 epochs and 79% after 50. Not yet measured here:
this machine cannot download CIFAR-10.

    make recipe NAME=cifar10_cnn
    make recipe NAME=cifar10_cnn ARGS="execution.mode=xla data.source=synthetic train.epochs=1"
"""

import keras

import models
from callbacks import Timing
from recipes import _augment, _data, _runner


def run(config):
    """Trains and evaluates the model that `config` describes.

    Returns:
        The run's metrics, also written to `<run dir>/metrics.json`.
    """
    # Seeds every random generator, the input pipeline's included, and sets
    # the dtype policy, before anything is built.
    _runner.prepare(config)

    # ## Data
    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=config["train"]["steps_per_epoch"])
    # The run directory is made once the data is there.
    run_dir = _runner.start_run(config)

    # ## Model
    model = models.simple_cnn(
        input_shape=data.input_shape,
        num_classes=data.num_classes,
        filters=config["model"]["filters"],
        dense_units=config["model"]["dense_units"],
        conv_dropout=config["model"]["conv_dropout"],
        dense_dropout=config["model"]["dense_dropout"],
    )
    if config["run"]["verbose"]:
        model.summary()

    # ## Training
    # The execution mode (eager, graph or XLA) is only a compile argument.
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=config["train"]["lr"]),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        **_runner.compile_options(config),
    )
    # Augmentation placed on the device runs inside fit's training step.
    if data.augment_on == "device":
        _augment.on_device(model, data.augment)
    timing = Timing(batch_size=data.batch_size)
    model.fit(
        timing.instrument(data.train),
        validation_data=data.validation,
        epochs=config["train"]["epochs"],
        steps_per_epoch=data.steps_per_epoch,
        callbacks=[timing, *_runner.standard_callbacks(config, run_dir)],
        verbose=_runner.fit_verbose(config),
    )

    # ## Evaluation
    test_metrics = model.evaluate(data.test, return_dict=True, verbose=0)
    return _runner.finish_run(config, run_dir, model, test_metrics, timing, data)
