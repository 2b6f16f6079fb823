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
"""

import keras

import models
from callbacks import Timing
from models.densenet import variant_spec
from recipes import UserError, _data, _experiment
from recipes._experiment import Experiment

# Keys of configs/densenet_cifar100.yaml that its values do not type (null
# means "the variant's"), and keys with a few allowed values. Read without
# importing this module (recipes/_config.py), so it stays a literal.
CONFIG_SCHEMA = {
    "model.depth": "int",
    "model.growth_rate": "int",
    "model.bottleneck": "bool",
    "model.compression": "float",
    "model.api": ["functional", "sequential"],
    "train.schedule": ["constant", "step", "cosine"],
}


def build(config):
    """Builds what `run` trains: the data and the compiled model.

    Returns:
        An `Experiment`: the compiled model, its data and strategy.
    """
    model_config, train_config = config["model"], config["train"]
    # Checked first, so that a wrong depth costs no data loading.
    spec = _architecture(model_config)
    # Seeds every random generator, the input pipeline's included, and sets
    # the dtype policy, before anything is built; `strategy` is
    # tf.distribute's (execution.strategy), a no-op by default.
    strategy = _experiment.prepare(config)

    # ## Data
    # `data.augment` (pad-crop and flip for the paper) runs on training
    # batches only. One-hot labels, for label smoothing.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=train_config["steps_per_epoch"], one_hot=True,
                      replicas=strategy.num_replicas_in_sync)

    # ## Model
    # Under tf.distribute, variables made in the strategy's scope are
    # mirrored on every replica: build and compile the model there.
    with strategy.scope():
        model = build_model(model_config, spec, data)

        # ## Training setup
        # train.schedule by name: step (the paper's), cosine or constant.
        schedule = _experiment.learning_rate_schedule(
            train_config, data.steps_per_epoch, _experiment.learning_rate(config, strategy))
        optimizer = keras.optimizers.SGD(learning_rate=schedule,
                                         momentum=train_config["momentum"], nesterov=True)
        # One-hot labels (data above), so that they can be smoothed.
        loss = keras.losses.CategoricalCrossentropy(label_smoothing=train_config["label_smoothing"])
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


def _architecture(model_config):
    """The DenseNet's depth, growth rate, bottleneck and compression:
    `model.variant` names the paper's settings, and the fields that are set
    override them.

    Raises:
        UserError: an unknown variant, or a depth no DenseNet has.
    """
    try:
        return variant_spec(
            model_config["variant"], depth=model_config["depth"],
            growth_rate=model_config["growth_rate"],
            bottleneck=model_config["bottleneck"],
            compression=model_config["compression"])
    except ValueError as error:
        raise UserError(f"model: {error}") from None


def build_model(model_config, spec, data):
    """The DenseNet of `spec` for `data`, normalizing its input first; wrapped
    in `models.AugmentedModel` when augmentation runs on the device."""
    # Per-channel normalization with the training images' statistics, as a
    # layer inside the model: a saved model takes plain [0, 1] images.
    # float32 under a mixed policy too: `adapt` sums float32 images.
    normalization = keras.layers.Normalization(axis=-1, dtype="float32", name="normalization")
    normalization.adapt(_data.images(data.train_plain))
    model = models.densenet(
        data.input_shape, data.num_classes, **spec,
        dropout=model_config["dropout"],
        batch_norm=model_config["batch_norm"],
        weight_decay=model_config["weight_decay"],  # an L2 penalty in each kernel
        batch_norm_momentum=model_config["batch_norm_momentum"],
        normalization=normalization,
        api=model_config["api"],
    )
    # Augmentation placed on the device runs inside fit's training step.
    if data.augment_on == "device":
        model = models.AugmentedModel(model, data.augment)
    return model


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
    # With model.test_time_flip, each image's prediction is the mean of the
    # network's on the image and on its mirror image (test-time augmentation).
    evaluated = model
    if config["model"]["test_time_flip"]:
        mode = config["execution"]["mode"]
        with experiment.strategy.scope():
            evaluated = models.flip_averaged(models.network_of(model))
            evaluated.compile(loss=model.loss, metrics=["accuracy"],
                              run_eagerly=mode == "eager", jit_compile=mode == "xla")
    test_metrics = evaluated.evaluate(data.test, return_dict=True, verbose=0)
    return experiment.finish(test_metrics, timing)
