"""MLP on MNIST: two dense layers of 512 units with dropout.

The classic first model of a deep-learning course, rebuilt from the Keras
example `examples/mnist_mlp.py` (keras-team/keras, Keras 2), which reports
98.40% test accuracy after 20 epochs of RMSprop at batch 128. The defaults in
`configs/mnist_mlp.yaml` follow it. Small enough that per-step overhead, not
arithmetic, dominates: the recipe where graph execution shows its largest
speed-up over eager.

    make recipe NAME=mnist_mlp
    make recipe NAME=mnist_mlp ARGS="execution.mode=eager train.epochs=2"
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
    model = models.mlp(
        input_shape=data.input_shape,
        num_classes=data.num_classes,
        hidden_units=config["model"]["hidden_units"],
        dropout=config["model"]["dropout"],
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
