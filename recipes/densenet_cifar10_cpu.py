"""A DenseNet trained the way the fastest CIFAR-10 runs train: expect ~91.5% in 20 epochs on a 2-core CPU.

cifar10-airbench (KellerJordan/cifar10-airbench, arXiv 2404.00498) reaches
94% on CIFAR-10 in under 4 seconds of an A100, with 0.36 PFLOP of training:
an hour's arithmetic on two CPU cores. This recipe is its method, in Keras,
on a DenseNet (`models/densenet_whitened.py`: every layer of a block reads
the concatenation of all earlier ones):

- a first layer of frozen filters that whiten 2x2 patches, fitted to the
  training images (`models.PatchWhitening`), and identity-initialized
  convolutions (`models.PartialIdentity`);
- batch 1024, Nesterov SGD with momentum 0.85, a triangular learning rate
  (`models.PiecewiseLinear`), the batch norms' offsets at 64x the learning
  rate (`keras.optimizers.MultiOptimizer`), label smoothing 0.2;
- Lookahead: from the fourth epoch, every 5 steps the weights move to their
  moving average (`callbacks.Lookahead`);
- 2-pixel translations with reflected edges and flips;
- a final prediction averaged over six views of each image: mirror x
  {no shift, one pixel up-left, one down-right}.

Measured on Xeon-AMX (2 cores, AVX-512 with BF16 and AMX), 2026-11-24: 91.72%
and 91.28% (seeds 0 and 1) of 5,000 held-out CIFAR-10 training JPEGs after
20 epochs with six test-time views (90.38% and 89.78% without); seed 1 took
30 minutes, the first nine epochs with other work on the machine, and 66 to
69 s of training per epoch on the quiet machine. 40 epochs reached 91.90%
(seed 0, 41 minutes): the network memorizes its training images, so more
epochs buy little. Not yet airbench's 94%: docs/cpu-hour.md says what was
measured and what differs.

    make recipe NAME=densenet_cifar10_cpu ARGS="data.source=folder data.path=DATA"
"""

import keras
import numpy as np

import models
from callbacks import Lookahead, Timing
from recipes import _data, _experiment
from recipes._experiment import Experiment

# Keys of configs/densenet_cifar10_cpu.yaml with a few allowed values. Read
# without importing this module (recipes/_config.py), so it stays a literal.
CONFIG_SCHEMA = {"model.test_time_views": [1, 2, 6],
                 "model.test_time_average": ["probabilities", "logits"],
                 "train.schedule": ["triangle"]}


def build(config):
    """Builds what `run` trains: the data and the compiled model.

    Returns:
        An `Experiment`: the compiled model, its data and strategy.
    """
    model_config, train_config = config["model"], config["train"]
    # Seeds every random generator and sets the dtype policy first.
    strategy = _experiment.prepare(config)

    # ## Data
    # `data.augment`: flips and 2-pixel translations with reflected edges.
    # One-hot labels, for label smoothing.
    data = _data.load(config["data"], seed=config["execution"]["seed"],
                      steps_per_epoch=train_config["steps_per_epoch"], one_hot=True,
                      replicas=strategy.num_replicas_in_sync)

    # ## Model
    with strategy.scope():
        model = build_model(model_config, train_config, data)

        # ## Training setup
        optimizer = _optimizer(train_config, data.steps_per_epoch,
                               _experiment.learning_rate(config, strategy))
        mode = config["execution"]["mode"]
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(
                label_smoothing=train_config["label_smoothing"]),
            metrics=["accuracy"],
            run_eagerly=mode == "eager",
            jit_compile=mode == "xla",
            steps_per_execution=config["execution"]["steps_per_execution"],
        )
    return Experiment(config, model, data, strategy)


def build_model(model_config, train_config, data):
    """The whitened DenseNet for `data`, normalizing its input first; wrapped
    in `models.AugmentedModel` when augmentation runs on the device."""
    # Per-channel normalization with the training images' statistics,
    # inside the model: a saved model takes plain [0, 1] images.
    normalization = keras.layers.Normalization(axis=-1, dtype="float32", name="normalization")
    normalization.adapt(_data.images(data.train_plain))
    # The whitening filters are fitted to a few thousand normalized
    # training images, before any training.
    sample = _first_images(data.train_plain, model_config["whitening_images"])
    network = models.densenet_whitened(
        data.input_shape, data.num_classes,
        whitening_images=keras.ops.convert_to_numpy(normalization(sample)),
        widths=model_config["widths"], growth_rates=model_config["growth_rates"],
        layers_per_block=model_config["layers_per_block"],
        dense_connections=model_config["dense_connections"],
        normalization=normalization,
        whitening=model_config["whitening"], identity_init=model_config["identity_init"],
        batch_norm_momentum=model_config["batch_norm_momentum"],
        fused_batch_norm=model_config["fused_batch_norm"],
        fused_activation=model_config["fused_activation"],
        weight_decay=model_config["weight_decay"],
        # The offsets train at bias_lr_scale x the rate: the same decay per step.
        beta_weight_decay=model_config["weight_decay"] / train_config["bias_lr_scale"],
    )
    return models.AugmentedModel(network, data.augment) if data.augment_on == "device" else network


def _optimizer(train_config, steps_per_epoch, lr):
    """Nesterov SGD on a triangle: from 0.2 x lr up to lr at 23% of the
    steps, down to 0.07 x lr."""
    total = train_config["epochs"] * steps_per_epoch
    top = max(1, round(0.23 * total))  # a step of its own, however short the run

    def sgd(peak, stop=None):
        schedule = models.PiecewiseLinear([0, top, max(total, top + 1)],
                                          [0.2 * peak, peak, 0.07 * peak], stop=stop)
        return keras.optimizers.SGD(schedule, momentum=train_config["momentum"], nesterov=True)

    # Batch norm's offsets at bias_lr_scale x the learning rate (airbench's
    # 64); the whitening layer's bias stops training after a few epochs.
    stop = train_config["whitening_bias_epochs"] * steps_per_epoch
    return keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
        sgd(lr), {".*_bn/beta": sgd(lr * train_config["bias_lr_scale"]),
                  "whitening/bias": sgd(lr, stop=stop)}))


def _first_images(batches, count):
    """The first `count` images of a split's ordered batches, as one array."""
    images = _data.images(batches)  # an array, or a tf.data.Dataset of image batches
    if isinstance(images, np.ndarray):
        return images[:count]
    return np.asarray(next(iter(images.unbatch().take(count).batch(count))))


def run(config):
    """Trains and evaluates the model that `config` describes.

    Returns:
        The run's metrics, also written to `<run dir>/metrics.json`.
    """
    experiment = build(config)
    model, data, train_config = experiment.model, experiment.data, config["train"]
    if config["run"]["verbose"]:
        model.summary()

    # ## Training
    run_dir = experiment.open_run_dir()
    timing = Timing(batch_size=data.batch_size)
    # Lookahead before the standard callbacks: the checkpoints, the logs and
    # the backup record the averaged weights.
    lookahead = Lookahead(total_steps=train_config["epochs"] * data.steps_per_epoch,
                          start_epoch=train_config["lookahead_start_epoch"])
    callbacks = [timing, lookahead, *_experiment.standard_callbacks(config, run_dir, data)]
    model.fit(
        timing.instrument(data.train),
        validation_data=data.validation,
        epochs=train_config["epochs"],
        steps_per_epoch=data.steps_per_epoch,
        callbacks=callbacks,
        verbose=_experiment.fit_verbose(config),
    )

    # ## Evaluation
    # The mean prediction over 1, 2 (mirror) or 6 views (mirror x three
    # shifts), of probabilities or of logits (model.test_time_average):
    # model.test_time_views is the one reported; the line printed gives all
    # three, and six views with the other average, to show what each buys.
    average = config["model"]["test_time_average"]
    other = {"probabilities": "logits", "logits": "probabilities"}[average]
    metrics = _evaluate_views(experiment, [(1, average), (2, average), (6, average), (6, other)])
    print("test-time views: " + ", ".join(f"{views} {metrics[views, average]['accuracy']:.4f}"
                                          for views in (1, 2, 6))
          + f" ({average} averaged); 6 with {other} averaged "
          + f"{metrics[6, other]['accuracy']:.4f}", flush=True)
    return experiment.finish(metrics[config["model"]["test_time_views"], average], timing)


def _evaluate_views(experiment, wanted):
    """{(views, average): `evaluate`'s metrics on the test split} for each
    pair in `wanted`, from one prediction of the six views of each image."""
    model, mode = experiment.model, experiment.config["execution"]["mode"]
    network = models.network_of(model)
    with experiment.strategy.scope():
        every_view = models.test_time_views(network, translate=True)
        every_view.compile(run_eagerly=mode == "eager", jit_compile=mode == "xla")
    predictions = every_view.predict(experiment.data.test, verbose=0)
    labels = np.concatenate([np.asarray(labels) for _, labels in experiment.data.test])
    regularization = sum(float(loss) for loss in network.losses)
    return {(views, average): models.view_metrics(predictions, labels, views, average,
                                                  model.loss, regularization)
            for views, average in wanted}
