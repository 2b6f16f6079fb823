"""Small CNN on CIFAR-10: two stages of two 3x3 convolutions, then a dense head.

The classic convolutional course model, rebuilt from the Keras example
`examples/cifar10_cnn.py` (keras-team/keras, Keras 2): RMSprop at 1e-4 with
Keras 2's time decay of 1e-6, batch 32, shifts of up to 10% that fill from
the nearest edge pixel, and horizontal flips. That example reports 75%
validation accuracy after 25 epochs and 79% after 50, trained on all 50,000
training images and validated on the 10,000 test images
(`data.validation_split=0` does the same where the data has a test split).

    make recipe NAME=cifar10_cnn
    make recipe NAME=cifar10_cnn ARGS="execution.mode=xla data.source=synthetic train.epochs=1"
"""

import keras

import models
from recipes import _data, _experiment
from recipes._experiment import Experiment


def build(config):
    """Builds what `run` trains: the data, the compiled model, fit's arguments.

    Returns:
        An `Experiment`; its run directory exists and holds `config.yaml`.
    """
    # Seeds every random generator, the input pipeline's included, and sets
    # the dtype policy, before anything is built; `strategy` is
    # tf.distribute's (execution.strategy), a no-op by default.
    strategy = _experiment.prepare(config)

    # ## Data
    # uint8 images scaled to [0, 1] on whole batches; 10% of the training
    # split is held out for validation, the test split is only for the end.
    # `data.augment` (shifts and flips, as in the example) applies to training
    # batches only.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=config["train"]["steps_per_epoch"],
                      replicas=strategy.num_replicas_in_sync)

    # ## Model
    # Under tf.distribute, variables made in the strategy's scope are
    # mirrored on every replica: build and compile the model there.
    with strategy.scope():
        model = models.simple_cnn(
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
        # Keras 2's RMSprop(lr, decay=d) lowered the rate to lr / (1 + d * step);
        # InverseTimeDecay with decay_steps=1 is exactly that.
        learning_rate = keras.optimizers.schedules.InverseTimeDecay(
            _experiment.learning_rate(config, strategy), decay_steps=1,
            decay_rate=config["train"]["lr_decay"])
        # Keras 2's RMSprop divided by sqrt(v) + 1e-7, Keras 3's divides by
        # sqrt(v + epsilon): epsilon=1e-14 puts Keras 2's floor under the
        # square root, where the default 1e-7 would damp every weight whose
        # gradients are small (sqrt(1e-7) is 3e-4).
        optimizer = keras.optimizers.RMSprop(learning_rate=learning_rate, epsilon=1e-14)
        # The execution mode (eager, graph or XLA) is only a compile argument.
        model.compile(
            optimizer=optimizer,
            loss=_experiment.crossentropy(data),
            metrics=["accuracy"],
            **_experiment.compile_options(config),
        )
    return Experiment(config, model, data, strategy)


def run(config):
    """Trains and evaluates the model that `config` describes.

    Returns:
        The run's metrics, also written to `<run dir>/metrics.json`.
    """
    experiment = build(config)
    model = experiment.model
    if config["run"]["verbose"]:
        model.summary()

    # ## Training
    model.fit(**experiment.fit_args)

    # ## Evaluation
    test_metrics = model.evaluate(experiment.data.test, return_dict=True, verbose=0)
    return experiment.finish(test_metrics)
