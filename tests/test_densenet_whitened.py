"""The fast-training building blocks of densenet_cifar10_cpu (cifar10-airbench's
method): patch whitening, identity initialization, the triangular schedule,
Lookahead, Muon for the convolutions, six-view test-time augmentation,
reflected translations, and the recipe end to end."""

import csv
import json

import keras
import numpy as np
import pytest

import keras_course_recipes as kit
import keras_course_recipes.models.densenet_whitened as whitened
from keras_course_recipes.models.densenet_whitened import (PartialIdentity, PatchWhitening, average_views,
                                      densenet_whitened, view_metrics)
from keras_course_recipes import harness, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes import augment as raugment
from keras_course_recipes.recipes.densenet_cifar10_cpu import (CONFIG, ConvMuon, Lookahead, PiecewiseLinear, _optimizer,
                                          orthogonalize)


def averaged_over_views(network, views, average):
    """`network` predicting the mean over `views` (2 or 6) of its views, as one model."""
    every_view = whitened.test_time_views(network, translate=views == 6)
    images = keras.Input(shape=network.input_shape[1:])
    return keras.Model(images, average_views(every_view(images), views, average))

def test_whitening_decorrelates_the_patches_it_was_fitted_to():
    rng = np.random.default_rng(0)
    # Correlated channels: each pixel's colour is mostly one random value.
    base = rng.normal(size=(200, 12, 12, 1))
    images = (base + 0.3 * rng.normal(size=(200, 12, 12, 3))).astype("float32")
    layer = PatchWhitening(size=2)
    layer.adapt(images)
    outputs = np.asarray(layer(images)) - np.asarray(layer.bias)
    assert outputs.shape == (200, 11, 11, 24)
    half = outputs[..., :12].reshape(-1, 12)
    np.testing.assert_allclose(half.T @ half / len(half), np.eye(12), atol=0.02)
    np.testing.assert_allclose(outputs[..., 12:], -outputs[..., :12], atol=1e-5)
    # The filters are frozen, the bias trains.
    assert [w.name for w in layer.trainable_weights] == ["bias"]


def test_whitening_filters_survive_saving(tmp_path):
    layer = PatchWhitening(size=2)
    layer.adapt(np.random.default_rng(1).random((20, 8, 8, 3)))
    model = keras.Sequential([keras.Input((8, 8, 3)), layer])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.layers[0].kernel.numpy(), layer.kernel.numpy())


def test_partial_identity_forwards_its_input_channels():
    conv = keras.layers.Conv2D(6, 3, padding="same", use_bias=False,
                               kernel_initializer=PartialIdentity(seed=3))
    images = np.random.default_rng(2).random((2, 5, 5, 4)).astype("float32")
    outputs = np.asarray(conv(images))
    np.testing.assert_allclose(outputs[..., :4], images, atol=1e-6)  # the identity filters
    assert np.abs(outputs[..., 4:]).max() > 0  # the others are drawn
    limit = (3 * 3 * 4) ** -0.5
    assert np.abs(conv.kernel.numpy()[..., 4:]).max() <= limit


def test_piecewise_linear_interpolates_and_reloads():
    schedule = PiecewiseLinear([0, 23, 100], [0.2, 1.0, 0.07])
    values = [float(schedule(step)) for step in (0, 10, 23, 50, 100, 150)]
    np.testing.assert_allclose(values, [0.2, 0.2 + 0.8 * 10 / 23, 1.0,
                                        1.0 - 0.93 * 27 / 77, 0.07, 0.07], rtol=1e-6)
    again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert float(again(50)) == float(schedule(50))
    stopped = PiecewiseLinear([0, 23, 100], [0.2, 1.0, 0.07], stop=40)
    assert float(stopped(39)) == float(schedule(39)) and float(stopped(40)) == 0.0
    with pytest.raises(ValueError, match="increasing steps"):
        PiecewiseLinear([0, 10, 10], [1.0, 2.0, 3.0])


def test_linear_schedule_falls_from_each_peak_to_zero():
    """train.schedule=linear, airbench94_muon's: no warm-up, every rate from its peak down to 0."""
    train = {**CONFIG["train"], "schedule": "linear", "optimizer": "muon", "epochs": 4}
    peaks = []
    for optimizer in _optimizer(train, steps_per_epoch=10).optimizers:
        schedule = keras.optimizers.schedules.deserialize(optimizer.get_config()["learning_rate"])
        peak = float(schedule(0))
        np.testing.assert_allclose([float(schedule(20)), float(schedule(40))], [peak / 2, 0.0],
                                   rtol=1e-6, atol=1e-7)
        peaks.append(peak)
    lr = train["lr"]
    assert sorted(peaks) == pytest.approx(sorted([lr, lr * train["bias_lr_scale"], lr, train["muon_lr"]]))


@pytest.mark.parametrize("shape", [(16, 72), (72, 16)])
def test_orthogonalize_brings_every_singular_value_near_one(shape):
    rng = np.random.default_rng(0)
    # Singular values spread over two orders of magnitude.
    u, _ = np.linalg.qr(rng.normal(size=(shape[0], shape[0])))
    v, _ = np.linalg.qr(rng.normal(size=(shape[1], shape[1])))
    spread = np.zeros(shape)
    np.fill_diagonal(spread, np.geomspace(1e-2, 1, min(shape)))
    matrix = (u @ spread @ v.T).astype("float32")
    result = np.asarray(orthogonalize(keras.ops.convert_to_tensor(matrix), steps=5))
    assert result.shape == shape
    singular = np.linalg.svd(result, compute_uv=False)
    assert singular.min() > 0.5 and singular.max() < 1.5, singular
    # The same directions: U V^T's, up to those singular values.
    np.testing.assert_allclose(result / np.linalg.norm(result),
                               (u[:, :min(shape)] @ v[:, :min(shape)].T)
                               / np.sqrt(min(shape)), atol=0.1)


def test_conv_muon_fixes_the_kernel_norm_and_steps_every_direction_alike():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(3, 3, 4, 8)).astype("float32")
    kernel = keras.Variable(start)
    optimizer = ConvMuon(learning_rate=0.1, momentum=0.5, ns_steps=5)
    gradients = [rng.normal(size=start.shape).astype("float32") * scale for scale in (1.0, 0.01)]
    optimizer.apply([keras.ops.convert_to_tensor(gradients[0])], [kernel])
    after_one = kernel.numpy()
    optimizer.apply([keras.ops.convert_to_tensor(gradients[1])], [kernel])
    # Nesterov on the running sum: the second step's direction is g2 + 0.5 (0.5 g1 + g2).
    running = 0.5 * gradients[0] + gradients[1]
    np.testing.assert_allclose(optimizer.momentums[0].numpy(), running, rtol=1e-5)
    # Before each step the kernel is scaled to norm sqrt(8); the step is 0.1 x
    # an update whose 8 singular values are all near 1, however small the gradient.
    step = (after_one * np.sqrt(8) / np.linalg.norm(after_one) - kernel.numpy()) / 0.1
    singular = np.linalg.svd(step.reshape(-1, 8), compute_uv=False)
    assert singular.min() > 0.5 and singular.max() < 1.5, singular
    direction = (gradients[1] + 0.5 * running).reshape(-1, 8)
    assert np.sum(step.reshape(-1, 8) * direction) > 0  # downhill


def _tiny_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                              keras.layers.BatchNormalization(), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


@pytest.mark.slow
def test_lookahead_moves_the_weights_to_their_average():
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 4)), rng.random((40, 2))
    plain, averaged = _tiny_model(), _tiny_model()
    plain.fit(x, y, batch_size=10, epochs=2, verbose=0, shuffle=False)
    # Starting after the last epoch: nothing changes.
    late = _tiny_model()
    late.fit(x, y, batch_size=10, epochs=2, verbose=0, shuffle=False,
             callbacks=[Lookahead(total_steps=8, start_epoch=2)])
    for a, b in zip(plain.get_weights(), late.get_weights()):
        np.testing.assert_array_equal(a, b)
    lookahead = Lookahead(total_steps=8, start_epoch=0, every=2, decay=0.9)
    averaged.fit(x, y, batch_size=10, epochs=2, verbose=0, shuffle=False, callbacks=[lookahead])
    # The weights end as the average (BN's moving statistics included), and differ from plain SGD's.
    for average, weight in zip(lookahead.average, averaged.weights):
        np.testing.assert_array_equal(average, weight.numpy())
    assert not np.allclose(plain.get_weights()[0], averaged.get_weights()[0])
    assert lookahead.rate(8) == pytest.approx(0.9 ** 2)
    assert lookahead.rate(4) == pytest.approx(0.9 ** 2 * 0.5 ** 3)


def test_lookahead_rejects_impossible_settings():
    with pytest.raises(ValueError, match="decay"):
        Lookahead(total_steps=10, decay=1.0)


def _probe(size):
    """A network whose output is a few of its input's pixels, softmaxed: it tells views apart."""
    images = keras.Input((size, size, 3))
    picked = keras.layers.Flatten()(images[:, :2, :1, :1])
    return keras.Model(images, keras.layers.Softmax()(picked))


def _softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("average", ["probabilities", "logits"])
def test_six_views_weight_the_mirror_pairs_half_and_quarters(average):
    network = _probe(6)
    images = np.random.default_rng(0).random((3, 6, 6, 3)).astype("float32")
    # The probe's logits are its pixels: airbench averages those, then softmaxes.
    view = ((lambda batch: np.asarray(network(batch))) if average == "probabilities"
            else lambda batch: batch[:, :2, 0, 0])
    pair = lambda batch: (view(batch) + view(batch[:, :, ::-1])) / 2
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)], mode="reflect")
    expected = 0.5 * pair(images) + 0.25 * pair(padded[:, :6, :6]) + 0.25 * pair(padded[:, 2:, 2:])
    if average == "logits":
        expected = _softmax(expected)
    six_views = averaged_over_views(network, 6, average)
    np.testing.assert_allclose(six_views.predict(images, verbose=0), expected, rtol=1e-5)
    # An image that every view leaves unchanged is predicted as without views.
    flat = np.ones((2, 6, 6, 3), "float32") * [[[[0.2, 0.5, 0.9]]]]
    np.testing.assert_allclose(six_views.predict(flat, verbose=0), network(flat), rtol=1e-5)


def test_one_pass_over_the_views_reports_what_evaluate_reports():
    """The recipe's metrics for 1, 2 and 6 views, both averages, from one
    prediction of every view: `evaluate`'s on each averaged model, its
    weight decay penalty included, over batches that do not divide the data."""
    rng = np.random.default_rng(0)
    images = rng.random((20, 16, 16, 3)).astype("float32")
    labels = np.eye(10, dtype="float32")[rng.integers(0, 10, 20)]
    network = densenet_whitened((16, 16, 3), 10, images, widths=(8, 8, 8),
                                       growth_rates=(4, 4, 4), weight_decay=0.1)
    loss = keras.losses.CategoricalCrossentropy(label_smoothing=0.2)
    batches = [(images[i:i + 8], labels[i:i + 8]) for i in range(0, 20, 8)]
    predictions = np.concatenate([whitened.test_time_views(network, translate=True)(x)
                                  for x, _ in batches])
    regularization = sum(float(penalty) for penalty in network.losses)
    assert regularization > 0
    for views in (1, 2, 6):
        for average in ("probabilities", "logits"):
            averaged = (network if views == 1 else
                        averaged_over_views(network, views, average))
            averaged.compile(loss=loss, metrics=["accuracy"])
            expected = averaged.evaluate(images, labels, batch_size=8, return_dict=True, verbose=0)
            measured = view_metrics(predictions, labels, views, average, loss, regularization)
            assert measured == pytest.approx(expected, rel=1e-5), (views, average)


@pytest.mark.parametrize("engine", ["keras", "keras_cv"])
def test_reflected_pad_crop_brings_in_no_black(engine):
    images = np.random.default_rng(0).uniform(0.5, 1.0, (16, 8, 8, 3)).astype("float32")
    apply, _ = raugment.pad_crop(engine, seed=1, padding=2, fill="reflect")
    import tensorflow as tf
    shifted, _ = apply(tf.constant(images), None)
    assert np.asarray(shifted).min() >= 0.5  # a zero pad would bring in zeros
    assert not np.array_equal(np.asarray(shifted), images)


@pytest.mark.slow
def test_recipe_trains_saves_and_reloads(tiny_config, tmp_path, capsys, recwarn, monkeypatch):
    config = tiny_config("densenet_cifar10_cpu", "train.epochs=2", "train.optimizer=muon",
                         "train.lookahead_start_epoch=1", "train.lookahead_decay=0.9",
                         "train.validation_freq=2", "execution.precision=float32")
    built = []  # the recipe's Lookahead callbacks, to see the settings reach them
    monkeypatch.setattr(kit.load("densenet_cifar10_cpu"), "Lookahead",
                        lambda **settings: built.append(Lookahead(**settings)) or built[-1])
    metrics = harness.train(config)
    assert [(b.start_epoch, b.decay) for b in built] == [(1, 0.9)]
    run_dir = tmp_path / "run"
    assert metrics["epochs_completed"] == 2
    # train.validation_freq=2: the first epoch skips the validation images, the second does not.
    history = list(csv.DictReader((run_dir / "history.csv").open()))
    assert [row["val_accuracy"] == "NA" for row in history] == [True, False]
    # ... and the best checkpoint passes over the first quietly, where Keras' would warn.
    assert not [w for w in recwarn if "Can save best model only" in str(w.message)]
    # The reported accuracy is the six views' (the YAML's), printed beside one and two views'.
    views = capsys.readouterr().out.split("test-time views: ")[1].splitlines()[0]
    assert views.startswith("1 ") and f"6 {metrics['test']['accuracy']:.4f}" in views
    assert "(probabilities averaged); 6 with logits averaged 0." in views
    assert json.loads((run_dir / "metrics.json").read_text())["test"] == metrics["test"]
    best = keras.saving.load_model(run_dir / "checkpoints" / "best.keras")
    assert best.get_layer("whitening").kernel.shape == (2, 2, 3, 24)
    # With train.optimizer=muon the 3x3 convolutions' kernels train with ConvMuon, undecayed.
    optimizers = best.optimizer.optimizers
    assert sorted(type(o).__name__ for o in optimizers) == ["ConvMuon", "SGD", "SGD", "SGD"]
    muon, = (o for o in optimizers if isinstance(o, ConvMuon))
    kernels = [v for v in best.trainable_variables if v.path.endswith("_conv/kernel")]
    assert [m.shape for m in muon.momentums] == [k.shape for k in kernels]
    network = raugment.network_of(best)
    assert network.get_layer("block1_conv").kernel_regularizer is None
    assert network.get_layer("logits").kernel_regularizer is not None


def test_the_ablation_switches_change_what_they_name():
    images = np.random.default_rng(0).random((8, 16, 16, 3)).astype("float32")
    build = lambda **switches: densenet_whitened(
        (16, 16, 3), 10, images, widths=(8, 8, 8), growth_rates=(4, 4, 4), **switches)
    whitened, plain = build(), build(whitening=False, identity_init=False)
    assert not whitened.get_layer("whitening").kernel.trainable
    assert plain.get_layer("whitening").kernel.trainable
    identity = whitened.get_layer("block2_conv").kernel.numpy()
    np.testing.assert_array_equal(identity[1, 1, :8, :8], np.eye(8))
    assert not np.array_equal(plain.get_layer("block2_conv").kernel.numpy()[1, 1, :8, :8], np.eye(8))
    # Every layer of a block reads the block's input and every earlier layer's output.
    assert whitened.get_layer("block1_layer1_concat").output.shape[-1] == 8 + 4
    # Without dense connections the layer's output is all the next block reads: airbench's network.
    chain = build(dense_connections=False)
    assert not any("concat" in layer.name for layer in chain.layers)
    assert chain.get_layer("block2_conv").input.shape[-1] == 4


@pytest.mark.slow
@pytest.mark.parametrize("epochs", [0, 1])
def test_a_whitening_bias_trained_for_no_epoch_is_frozen(tiny_config, epochs):
    """With train.whitening_bias_epochs=0 nothing below the first convolution
    trains, so the training step has no gradient to compute there."""
    from keras_course_recipes.recipes.densenet_cifar10_cpu import build

    experiment = build(tiny_config("densenet_cifar10_cpu", f"train.whitening_bias_epochs={epochs}",
                                   "execution.precision=float32"))
    whitening = raugment.network_of(experiment.model).get_layer("whitening")
    before = whitening.bias.numpy().copy()
    experiment.model.fit(experiment.data.train, steps_per_epoch=1, verbose=0)
    trained = [v.path for v in experiment.model.trainable_variables if v.path.startswith("whitening")]
    assert trained == ([] if epochs == 0 else ["whitening/bias"])
    assert np.array_equal(whitening.bias.numpy(), before) == (epochs == 0)


def test_extending_a_run_on_the_triangle_is_refused(tiny_config, tmp_path):
    """The triangle spans all epochs: more of them would restart its curve."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_config(run_dir, tiny_config("densenet_cifar10_cpu"))
    with pytest.raises(UserError, match="'triangle' schedule over all its epochs"):
        harness.open_run(tiny_config("densenet_cifar10_cpu", "train.epochs=5"))
