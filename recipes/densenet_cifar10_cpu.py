"""A DenseNet trained the way the fastest CIFAR-10 runs train: airbench94's 94% mark in 20 epochs on a 2-core CPU.

cifar10-airbench (KellerJordan/cifar10-airbench, arXiv 2404.00498) reaches
94% on CIFAR-10 in under 4 seconds of an A100, with 0.36 PFLOP of training:
an hour's arithmetic on two CPU cores. This recipe is its method, in Keras,
on a DenseNet (`models/densenet_whitened.py`: every layer of a block reads
the concatenation of all earlier ones):

- a first layer of frozen filters that whiten 2x2 patches, fitted to the
  training images (`PatchWhitening`), and identity-initialized
  convolutions (`PartialIdentity`);
- batch 1024, Nesterov SGD with momentum 0.85, a triangular learning rate
  (`PiecewiseLinear`, below), the batch norms' offsets at 64x the learning
  rate (`keras.optimizers.MultiOptimizer`), label smoothing 0.2;
- Lookahead: from the fourth epoch, every 5 steps the weights move to their
  moving average (`Lookahead`, below);
- 2-pixel translations with reflected edges and flips;
- a final prediction averaged over six views of each image: mirror x
  {no shift, one pixel up-left, one down-right};
- optionally (`train.optimizer=muon`), airbench94_muon's Muon for the
  convolutions (`ConvMuon`, below): a point more at 4 epochs, nothing more
  at 10, on EPYC-Zen5; on airbench94_muon's schedule (`train.schedule=linear`)
  8 epochs read what SGD's 10 do (docs/cpu-hour.md's tables).

Measured here on 5,000 held-out lossless CIFAR-10 training images after 20
epochs with six test-time views, two seeds: airbench94's 94% mark in twice its
9.9 epochs, within the hour on a 2-core CPU. Its 95% configuration,
configs/densenet_cifar10_95.yaml (airbench95's widths and rate, Muon on the
linear schedule, 11 epochs), reads 95% in about half an hour on EPYC-Zen5.
Its record configuration, configs/cifar10_record.yaml, is not a DenseNet:
airbench94's own network trained as airbench94_muon trains it, 8 epochs,
which `make anchor` sets beside airbench94_muon's script (groups
`anchor ... cifar10_record ...`). The figures are the README's recipe table
and docs/cpu-hour.md, generated from results/accuracy.csv (groups
`dense_cpu 20ep oneDNN` and `dense_95 11ep Zen5`).

    make recipe NAME=densenet_cifar10_cpu ARGS="data.source=folder data.path=DATA"

airbench keeps its whole method in one file; so does this recipe, but for
the network, whose module holds its layers and the test-time views.

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it trains on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python densenet_cifar10_cpu.py data.source=synthetic train.epochs=1
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
    from keras_course_recipes import augment, data
    from keras_course_recipes.errors import UserError
    from keras_course_recipes.callbacks.timing import Timing
    from keras_course_recipes.models.densenet_whitened import densenet_whitened, test_time_views, view_metrics
except ImportError as missing:  # the kit, or a file of it, is not where this Python runs
    if str(missing.path).endswith("keras_course_recipes.py"):  # a file of that name, not the kit
        raise SystemExit(f"error: {missing.path} hides the keras_course_recipes package: "
                         "rename it.") from None
    raise SystemExit(f"error: {missing}: this recipe runs on its kit, the keras-course-recipes "
                     "package: pip install it where this Python runs, or copy the recipe with "
                     "every file of the kit it imports (recipes copy NAME DIR; its README "
                     "says how).") from None

import keras
import numpy as np
from keras import ops

# ## Configuration
# What this recipe trains with, each value with its reason. `key=value` on the
# command line overrides any of them; in a notebook, edit them here. The data
# section's other keys (`source`: tfds, folder or synthetic) are
# keras_course_recipes/data.py's `DEFAULTS`; `run.dir` (where the run writes) and the
# other sections' keys are keras_course_recipes/settings.py's `DEFAULTS`.
CONFIG = {
    "data": {
        "name": "cifar10",
        "batch_size": 1024,  # airbench's: few, large steps use the CPU's wide kernels well
        "augment": ["flip", {"pad_crop": {"padding": 2, "fill": "reflect"}}],  # airbench's 2-pixel translations, edges reflected
        "augment_engine": "keras",  # Keras core's layers: seeded per epoch, so a resumed run is exact (keras-cv's are not)
        "early_size": None,  # progressive resizing: the first early_epochs on images this many pixels a side
        "early_epochs": 0,
        "early_crop": False,  # true: a random early_size window of each image, at full scale, not shrunk
    },
    "model": {
        "widths": [64, 192, 192],  # each block's first convolution (airbench94: 64, 256, 256)
        "growth_rates": [64, 192, 192],  # maps each dense layer adds
        "layers_per_block": 1,  # dense layers after each block's first convolution
        "dense_connections": True,  # False, with widths = growth_rates = [64, 256, 256]: airbench94's own network, a control
        "batch_norm_momentum": 0.6,  # airbench's (Torch's 0.4)
        "fused_batch_norm": True,  # one TensorFlow kernel per batch norm; False: Keras' layer
        "fused_activation": True,  # XLA fuses each GELU's element-wise ops; False: Keras' layer
        "matmul_filter_gradient": True,  # 7x7 and 3x3 maps: the filter gradient as matmuls; False: oneDNN's kernel
        "weight_decay": 1.33e-3,  # airbench's 0.0153 per 1024 examples, coupled L2 on a mean loss
        "whitening": True,  # False: an ordinary trainable first convolution
        "whitening_images": 5000,  # training images the whitening filters are fitted to
        "identity_init": True,  # False: every convolution filter drawn at random
        "test_time_views": 6,  # 1, 2 (mirror) or 6 (mirror x three shifts)
        "test_time_average": "probabilities",  # or logits, airbench's: the softmax of the views' mean logit
        "data_format": "channels_last",  # TensorFlow's CPU kernels' layout; channels_first: PyTorch's (torch, JAX only)
    },
    "train": {
        "epochs": 20,  # airbench94 trains 9.9 on 50,000 images
        "steps_per_epoch": None,  # None: one pass over the training images
        "validation_freq": 1,  # validate every this many epochs (fit's validation_freq); the epochs' count: only the last
        "lr": 1.5,  # airbench's 11.5 per 1024 examples over 1 + 1/(1 - momentum), on a mean loss
        "schedule": "triangle",  # 0.2 x lr up to lr at 23% of the steps, then down to 0.07 x lr; or linear: lr down to 0 (airbench94_muon's)
        "momentum": 0.85,  # Nesterov
        "bias_lr_scale": 64.0,  # batch norm's offsets learn 64x faster
        "label_smoothing": 0.2,
        "whitening_bias_epochs": 3,  # the whitening layer's bias trains this many epochs, then stops; 0: the layer is frozen
        "lookahead_start_epoch": 3,  # the weights move to their average every 5 steps from this epoch on
        "lookahead_decay": 0.95,  # the average's per-step decay at the end (airbench's); higher: a longer memory
        "optimizer": "sgd",  # or muon: the 3x3 convolutions' kernels by ConvMuon (airbench94_muon's), the rest as above
        "muon_lr": 0.24,  # ConvMuon's peak rate on the same schedule (airbench94_muon's 0.24)
        "muon_momentum": 0.6,  # airbench94_muon's, Nesterov
    },
    "execution": {
        "mode": None,  # eager, graph (a tf.function) or xla (jit_compile); None: the backend's compiled step
        "precision": "mixed_bfloat16",  # faster with AMX or AMD's AVX512_BF16; a run warns where float32 is faster
        "onednn": True,  # oneDNN's kernels, set before TensorFlow starts (by the harness; a copied file: TF_ENABLE_ONEDNN_OPTS=1)
        "seed": 0,
        "steps_per_execution": 1,
    },
}
# What each key of this recipe's own takes, read with CONFIG before anything
# runs: a value outside it is one line that names the key (the words are
# keras_course_recipes/settings.py's `declarations`).
CONFIG_SCHEMA = {
    # One entry per block in each.
    "model.widths": {"type": "list", "items": "int", "at_least": 1, "min_length": 1,
                     "same_length_as": "model.growth_rates"},
    "model.growth_rates": {"type": "list", "items": "int", "at_least": 1, "min_length": 1},
    "model.layers_per_block": {"type": "int", "at_least": 0},
    "model.batch_norm_momentum": {"type": "float", "at_least": 0, "below": 1},
    "model.weight_decay": {"type": "float", "at_least": 0},
    "model.whitening_images": {"type": "int", "at_least": 1},
    "model.test_time_views": [1, 2, 6],  # a list: its choices
    "model.test_time_average": ["probabilities", "logits"],
    "model.data_format": ["channels_last", "channels_first"],
    "train.schedule": ["triangle", "linear"],
    "train.momentum": {"type": "float", "at_least": 0, "below": 1},
    "train.bias_lr_scale": {"type": "float", "above": 0},
    "train.label_smoothing": {"type": "float", "at_least": 0, "below": 1},
    "train.whitening_bias_epochs": {"type": "int", "at_least": 0},
    "train.lookahead_start_epoch": {"type": "int", "at_least": 0},
    "train.lookahead_decay": {"type": "float", "above": 0, "below": 1},
    "train.optimizer": ["sgd", "muon"],
    "train.muon_lr": {"type": "float", "above": 0},
    "train.muon_momentum": {"type": "float", "at_least": 0, "below": 1},
}


# ## The data and the compiled model
def build(config, run=None):
    """The compiled model and its data: what `run` trains, and what the
    tools (compare, graph, profile) time, draw and profile.

    Args:
        run: the run it is built for (`run`'s `RecipeRun`), whose batches
            start at its `initial_epoch`, the ones an uninterrupted run
            trains on; None (the tools): a fresh start, epoch 0.
    """
    model_config, train, execution = config["model"], config["train"], config["execution"]
    if model_config["data_format"] == "channels_first" and keras.backend.backend() == "tensorflow":
        raise UserError("model.data_format=channels_first is for execution.backend=torch or "
                             "jax: TensorFlow's CPU kernels take channels_last only.")
    # Every random draw from one seed, and the dtype policy, before anything is built.
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # `data.augment`: flips and 2-pixel translations with reflected edges.
    # One-hot labels, for label smoothing.
    augmentation = augment.from_config(config["data"], seed=execution["seed"])
    splits = data.load(config["data"], seed=execution["seed"], one_hot=True,
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0, augmentation=augmentation)

    # Per-channel normalization with the training images' statistics,
    # inside the model: a saved model takes plain [0, 1] images.
    normalization = keras.layers.Normalization(axis=-1, dtype="float32", name="normalization")
    normalization.adapt(data.images(splits.train_plain))
    # The whitening filters are fitted to a few thousand normalized
    # training images, before any training.
    sample = data.first_images(splits.train_plain, model_config["whitening_images"])
    model = densenet_whitened(
        splits.input_shape, splits.num_classes,
        whitening_images=ops.convert_to_numpy(normalization(sample)),
        widths=model_config["widths"], growth_rates=model_config["growth_rates"],
        layers_per_block=model_config["layers_per_block"],
        dense_connections=model_config["dense_connections"], normalization=normalization,
        whitening=model_config["whitening"], identity_init=model_config["identity_init"],
        batch_norm_momentum=model_config["batch_norm_momentum"],
        fused_batch_norm=model_config["fused_batch_norm"],
        fused_activation=model_config["fused_activation"],
        matmul_filter_gradient=model_config["matmul_filter_gradient"],
        data_format=model_config["data_format"], weight_decay=model_config["weight_decay"],
        # Muon fixes the kernels' norm each step: decay would only pull against it.
        conv_weight_decay=0.0 if train["optimizer"] == "muon" else None,
        # The offsets train at bias_lr_scale x the rate: the same decay per step.
        beta_weight_decay=model_config["weight_decay"] / train["bias_lr_scale"])
    if model_config["whitening"] and train["whitening_bias_epochs"] == 0:
        # No weight below the first convolution trains, so TensorFlow skips its
        # input gradient (PyTorch's airbench skips it once the bias stops).
        model.get_layer("whitening").trainable = False
    if splits.augment_on == "device":  # data.augment inside fit's training step
        model = augment.AugmentedModel(model, splits.augment)

    mode = execution["mode"]
    model.compile(
        optimizer=_optimizer(train, splits.steps_per_epoch),
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=train["label_smoothing"]),
        metrics=["accuracy"], run_eagerly=mode == "eager", jit_compile=mode == "xla",
        steps_per_execution=execution["steps_per_execution"])
    return SimpleNamespace(model=model, data=splits)


def _optimizer(train, steps_per_epoch):
    """Nesterov SGD on a triangle: from 0.2 x lr up to lr at 23% of the
    steps, down to 0.07 x lr (`train.schedule=linear`: from lr straight down
    to 0, airbench94_muon's). Batch norm's offsets at `bias_lr_scale` x the
    rate (airbench's 64); the whitening layer's bias stops training after
    `whitening_bias_epochs`. With `train.optimizer=muon`, the 3x3
    convolutions' kernels train with `ConvMuon` on the same schedule, peaking
    at `muon_lr`."""
    total, lr = train["epochs"] * steps_per_epoch, train["lr"]
    top = max(1, round(0.23 * total))  # a step of its own, however short the run

    def schedule(peak, stop=None):
        if train["schedule"] == "linear":
            return PiecewiseLinear([0, max(total, 1)], [peak, 0.0], stop=stop)
        return PiecewiseLinear([0, top, max(total, top + 1)],
                               [0.2 * peak, peak, 0.07 * peak], stop=stop)

    def sgd(peak, stop=None):
        return keras.optimizers.SGD(schedule(peak, stop), momentum=train["momentum"], nesterov=True)

    stop = train["whitening_bias_epochs"] * steps_per_epoch
    by_path = {".*_bn/beta": sgd(lr * train["bias_lr_scale"]), "whitening/bias": sgd(lr, stop=stop)}
    if train["optimizer"] == "muon":
        by_path[".*_conv/kernel"] = ConvMuon(schedule(train["muon_lr"]), momentum=train["muon_momentum"])
    return keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(sgd(lr), by_path))


@keras.saving.register_keras_serializable(package="recipes")
class ConvMuon(keras.optimizers.Optimizer):
    """Muon for convolution kernels, as airbench94_muon trains its filters.

    Each step: Nesterov momentum on the gradient; the kernel rescaled to a
    norm of sqrt(output channels), since batch norm follows it and only its
    direction matters; then the momentum, as a matrix of one column per
    output channel, orthogonalized by `ns_steps` Newton-Schulz iterations
    (every direction the same step size), times the learning rate, is
    subtracted. Keras' own `keras.optimizers.Muon` orthogonalizes 2-D
    weights only and trains a convolution's 4-D kernel with AdamW, hence
    this class.

    Args:
        learning_rate: a float or a schedule.
        momentum: of the gradient's running sum.
        nesterov: step along the gradient plus momentum x the running sum.
        ns_steps: Newton-Schulz iterations (airbench94_muon: 3).
    """

    def __init__(self, learning_rate=0.24, momentum=0.6, nesterov=True, ns_steps=3,
                 name="conv_muon", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum, self.nesterov, self.ns_steps = momentum, nesterov, ns_steps

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = [self.add_variable_from_reference(v, "momentum") for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        gradient = ops.cast(gradient, variable.dtype)
        # The lookup keras.optimizers.Optimizer's own custom-optimizer example uses.
        running = self.momentums[self._get_variable_index(variable)]
        self.assign(running, running * self.momentum + gradient)
        direction = gradient + self.momentum * running if self.nesterov else running
        outputs = variable.shape[-1]
        update = orthogonalize(ops.reshape(direction, (-1, outputs)), self.ns_steps)
        rescaled = variable * (outputs ** 0.5 / ops.norm(ops.reshape(variable, (-1,))))
        self.assign(variable, rescaled - ops.cast(learning_rate, variable.dtype)
                    * ops.reshape(update, variable.shape))

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov,
                "ns_steps": self.ns_steps}


def orthogonalize(matrix, steps):
    """`matrix` with every singular value moved near 1 (about U V^T of its
    SVD), by Muon's quintic Newton-Schulz iteration, whose coefficients
    push small singular values up fast rather than converge exactly."""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = matrix.shape[0] > matrix.shape[1]  # the Gram matrix of the shorter side is smaller
    x = ops.transpose(matrix) if tall else matrix
    x = x / (ops.norm(x) + 1e-7)  # every singular value at most 1
    for _ in range(steps):
        gram = x @ ops.transpose(x)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return ops.transpose(x) if tall else x


@keras.saving.register_keras_serializable(package="recipes")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """The learning rate interpolated linearly between `(step, value)` points,
    and held at the last value after the last point.

    Keras has `PiecewiseConstantDecay` (steps) and warm-up plus cosine decay,
    not this. cifar10-airbench's schedule is a triangle: from 0.2 of the peak
    up to the peak at 23% of the steps, then down to 0.07 of it at the end.

    Args:
        steps: the points' optimizer steps, increasing, the first 0.
        values: the learning rate at each point.
        stop: from this step on, the rate is 0 (airbench stops training its
            whitening layer's bias after 3 epochs); None never stops.
    """

    def __init__(self, steps, values, stop=None):
        steps, values = [int(s) for s in steps], [float(v) for v in values]
        if (len(steps) != len(values) or len(steps) < 2 or steps[0] != 0
                or any(b <= a for a, b in zip(steps, steps[1:]))):
            raise ValueError("PiecewiseLinear needs two or more points with increasing steps "
                             f"from 0, received: steps={steps}, values={values}")
        self.steps, self.values, self.stop = steps, values, stop

    def __call__(self, step):
        step = ops.cast(step, "float32")
        rate = ops.convert_to_tensor(self.values[-1], "float32")
        # From the last segment back, so that the segment `step` is in wins.
        for start, end, low, high in reversed(list(zip(self.steps, self.steps[1:],
                                                       self.values, self.values[1:]))):
            along = (step - start) / (end - start)
            rate = ops.where(step < end, low + (high - low) * along, rate)
        return rate if self.stop is None else ops.where(step < self.stop, rate, 0.0)

    def get_config(self):
        return {"steps": self.steps, "values": self.values, "stop": self.stop}


class Lookahead(keras.callbacks.Callback):
    """Keeps an exponential moving average of the model's weights and, every
    `every` steps, moves the weights to it: the Lookahead optimizer's
    "slow weights", as cifar10-airbench does it.

    The average's decay grows over training, `decay ** every * (step /
    total_steps) ** power`: early on it follows the weights closely, at the
    end it averages strongly. It starts at `start_epoch`; batch-norm moving
    statistics are averaged too (every float weight is). On the last step of
    each epoch the weights become the average, so that validation, the
    checkpoints and the backup all see the averaged model. Keras'
    `use_ema=True, ema_overwrite_frequency=N` on an optimizer is close, but
    its decay is constant and it leaves batch norm's statistics alone.

    A resumed run is exact: at every epoch's end the weights equal the
    average, which is all the state there is, so a process that starts at an
    epoch boundary starts the average from the restored weights.

    Args:
        total_steps: the run's training steps (epochs x steps per epoch).
        start_epoch: the first epoch that averages (0-based).
        every: steps between two updates.
        decay: the per-step decay at the end of training.
        power: how the decay grows with the fraction of training done.
    """

    def __init__(self, total_steps, start_epoch=3, every=5, decay=0.95, power=3.0):
        super().__init__()
        if total_steps < 1 or every < 1 or start_epoch < 0 or not 0 < decay < 1:
            raise ValueError("Lookahead needs total_steps >= 1, every >= 1, start_epoch >= 0 "
                             f"and 0 < decay < 1, received: total_steps={total_steps}, "
                             f"every={every}, start_epoch={start_epoch}, decay={decay}")
        self.total_steps, self.start_epoch, self.every = total_steps, start_epoch, every
        self.decay, self.power = decay, power
        self.epoch, self.average = 0, None  # the average: a list of arrays, None before start_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        if epoch >= self.start_epoch and self.average is None:
            self.average = [np.array(w.numpy()) for w in self._weights()]

    def on_train_batch_end(self, batch, logs=None):
        if self.average is None:
            return
        steps = self.params["steps"]
        step = self.epoch * steps + batch + 1  # counted from the run's start
        if step % self.every == 0:
            self._update(self.rate(step))
        if batch + 1 == steps:
            self._update(1.0)  # the weights become the average

    def rate(self, step):
        """The average's decay at `step`: how much of the old average it keeps."""
        return self.decay ** self.every * (step / self.total_steps) ** self.power

    def _weights(self):
        return [w for w in self.model.weights if "float" in str(w.dtype)]

    def _update(self, keep):
        for average, weight in zip(self.average, self._weights()):
            average += (1.0 - keep) * (weight.numpy() - average)
            weight.assign(average)


# ## Training and evaluation
def run(config, run):
    """Trains the model `config` describes, writing into `run.dir`, and
    evaluates it on the test split over 1, 2 and 6 views of each image.

    Args:
        run: the kit's `RecipeRun` (keras_course_recipes): the run
            directory `run.dir`, its callbacks, first in `fit`'s, the
            `initial_epoch` a resumed run starts at and `fit`'s `verbose`.

    Returns:
        The model, its data, the Timing callback and the `test` metrics of
        `model.test_time_views` views.
    """
    experiment = build(config, run)
    model, splits = experiment.model, experiment.data
    train = config["train"]

    timing = Timing(batch_size=splits.batch_size)  # before the logs: its numbers reach them
    callbacks = [
        *run.callbacks,  # the kit's: the run directory's (rundir.py), then the harness's
        timing,
        # Before the logs, the checkpoints and the backup: they record the averaged weights.
        Lookahead(total_steps=train["epochs"] * splits.steps_per_epoch,
                  start_epoch=train["lookahead_start_epoch"], decay=train["lookahead_decay"]),
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
              validation_freq=train["validation_freq"], epochs=train["epochs"],
              steps_per_epoch=splits.steps_per_epoch, callbacks=callbacks, verbose=run.verbose)

    # The mean prediction over 1, 2 (mirror) or 6 views (mirror x three
    # shifts), of probabilities or of logits (model.test_time_average), from
    # one prediction of every view: model.test_time_views is the one
    # reported; the line printed gives all three, and six views with the
    # other average, to show what each buys.
    average = config["model"]["test_time_average"]
    other = {"probabilities": "logits", "logits": "probabilities"}[average]
    mode = config["execution"]["mode"]
    network = augment.network_of(model)
    every_view = test_time_views(network, translate=True)
    every_view.compile(run_eagerly=mode == "eager", jit_compile=mode == "xla")
    predictions = every_view.predict(splits.test, verbose=0)
    labels = np.concatenate([np.asarray(labels) for _, labels in splits.test])
    regularization = sum(float(loss) for loss in network.losses)
    metrics = {(views, kind): view_metrics(predictions, labels, views, kind, model.loss,
                                           regularization)
               for views, kind in [(1, average), (2, average), (6, average), (6, other)]}
    print("test-time views: " + ", ".join(f"{views} {metrics[views, average]['accuracy']:.4f}"
                                          for views in (1, 2, 6))
          + f" ({average} averaged); 6 with {other} averaged "
          + f"{metrics[6, other]['accuracy']:.4f}", flush=True)
    experiment.test = metrics[config["model"]["test_time_views"], average]
    experiment.timing = timing
    return experiment


# ## Run it
# `python densenet_cifar10_cpu.py key=value ...` in a shell; `%run densenet_cifar10_cpu.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("densenet_cifar10_cpu", CONFIG, run, CONFIG_SCHEMA)
