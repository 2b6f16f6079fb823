"""RevNet-38 on CIFAR-10, trained without storing activations: expect ~93.1% (the paper).

Gomez et al., "The Reversible Residual Network: Backpropagation Without
Storing Activations" (arXiv 1707.04585): RevNet-38, -110 and -164 reach
93.1%, 94.0% and 94.6% on CIFAR-10 and 71.2%, 74.0% and 76.4% on CIFAR-100
(`revnet_cifar100` runs this code on it). The protocol of the TensorFlow
RevNet example: SGD with momentum 0.9, batch 100, learning rate 0.1 divided
by 10 after 40,000 and 60,000 of 80,000 steps, weight decay 2e-4, pad-4 crops
and flips. Its accuracy is not measured here: that takes a GPU for hours,
and no GPU that runs TensorFlow has been available.

`model.backprop` picks the gradient: `reversible` (the default) rebuilds
each stage's activations from its output in the backward pass;
`standard` keeps them, as ordinary backpropagation does; `remat` recomputes
each unit with `keras.remat`. `make memory NAME=revnet_cifar10` measures what
each costs: on RevNet-164 the reversible step needs 25% of the standard
step's memory for 1.08x its time, on a 2-core EPYC-AVX2 CPU (2026-11-23;
docs/revnet.md).

    make recipe NAME=revnet_cifar10
    make recipe NAME=revnet_cifar100 ARGS="model.variant=revnet110"
    make memory NAME=revnet_cifar10
"""

import keras

import models
from callbacks import Timing
from models.revnet import variant_spec
from recipes import UserError, _data, _experiment
from recipes._experiment import Experiment

# Keys of configs/revnet_cifar10.yaml with a few allowed values. Read without
# importing this module (recipes/_config.py), so it stays a literal.
CONFIG_SCHEMA = {
    "model.variant": ["revnet38", "revnet110", "revnet164"],
    "model.init_filters": "int",
    "model.units": "list",
    "model.filters": "list",
    "model.backprop": ["reversible", "standard", "remat"],
    "train.schedule": ["constant", "step", "cosine"],
}


def build(config):
    """Builds what `run` trains: the data and the compiled model.

    Returns:
        An `Experiment`: the compiled model, its data and strategy.
    """
    model_config, train_config = config["model"], config["train"]
    # A variant names the paper's network; units and filters that are set
    # override it. Checked first, so that a mistake costs no data loading.
    try:
        spec = variant_spec(model_config["variant"], init_filters=model_config["init_filters"],
                            units=model_config["units"], filters=model_config["filters"])
    except ValueError as error:
        raise UserError(f"model: {error}") from None
    # Seeds every random generator, the input pipeline's included, and sets
    # the dtype policy, before anything is built; `strategy` is
    # tf.distribute's (execution.strategy), a no-op by default.
    strategy = _experiment.prepare(config)

    # ## Data
    # `data.augment` (pad-crop and flip) runs on training batches only.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=train_config["steps_per_epoch"],
                      replicas=strategy.num_replicas_in_sync)

    # ## Model
    # Under tf.distribute, variables made in the strategy's scope are
    # mirrored on every replica: build and compile the model there.
    with strategy.scope():
        # Per-channel normalization with the training images' statistics, inside
        # the model: a saved model takes plain [0, 1] images.
        # float32 under a mixed policy too: `adapt` sums float32 images.
        normalization = keras.layers.Normalization(axis=-1, dtype="float32",
                                                   name="normalization")
        normalization.adapt(data.train_plain.map(lambda images, labels: images))
        model = models.revnet(
            data.input_shape, data.num_classes, **spec,
            weight_decay=model_config["weight_decay"],  # an L2 penalty in each kernel
            backprop=model_config["backprop"], normalization=normalization)
        # Augmentation placed on the device runs inside fit's training step.
        if data.augment_on == "device":
            model = models.AugmentedModel(model, data.augment)

        # ## Training setup
        # train.schedule by name: step (the paper's), cosine or constant.
        schedule = _experiment.learning_rate_schedule(
            train_config, data.steps_per_epoch, _experiment.learning_rate(config, strategy))
        optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=train_config["momentum"])
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
