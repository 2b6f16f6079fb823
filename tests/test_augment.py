"""Augmentation: each operation in both engines, the exact pad-crop, soft
labels, errors, training-only application on host and device, XLA kept for
the model step, seeded reproducibility, and the preview."""

import csv
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes as kit
from keras_course_recipes.callbacks.timing import execution_mode
from conftest import ROOT, TINY, measure_tensorflow_modes_here
from keras_course_recipes.augment import AugmentedModel
from keras_course_recipes import recipe_config, harness
from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes import augment as raugment
from keras_course_recipes.data import ArrayBatches
from keras_course_recipes.tools import augment_bench as _augment_bench
from keras_course_recipes.tools import record
from keras_course_recipes.tools import preview as _preview

ENGINES = list(raugment.ENGINES)


def batch(n=16, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(size=(n, 32, 32, 3)).astype("float32")
    labels = tf.one_hot(rng.integers(0, classes, n), classes)
    return tf.constant(images), labels


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("entry", list(raugment.OPERATIONS) + [{"randaugment": {"magnitude": 0.3}}])
def test_each_operation_keeps_shapes_dtypes_and_range(entry, engine):
    images, labels = batch()
    out_images, out_labels = raugment.augmentation([entry], engine=engine)(images, labels)
    assert out_images.shape == images.shape and out_images.dtype == tf.float32
    assert out_labels.shape == labels.shape and out_labels.dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(out_images)) and float(tf.reduce_max(out_images)) <= 1.0
    assert not np.array_equal(out_images, images)  # it did something


def test_shift_fills_from_the_nearest_edge_and_moves_images():
    """Keras 2's ImageDataGenerator default: shifted-in pixels repeat the
    edge, so a constant image stays constant (zero padding would darken it),
    while a varied one moves."""
    shift = raugment.augmentation(["shift"], seed=3)
    constant = tf.fill([16, 32, 32, 3], 0.7)
    shifted, _ = shift(constant, batch()[1])
    np.testing.assert_allclose(shifted, 0.7, atol=1e-5)
    zero_filled, _ = raugment.augmentation([{"shift": {"fill_mode": "constant"}}],
                                       seed=3)(constant, batch()[1])
    assert float(tf.reduce_min(zero_filled)) < 0.7 - 0.1
    images, labels = batch()
    moved, _ = shift(images, labels)
    assert not np.allclose(moved, images)


def test_pad_crop_shifts_each_image_by_whole_pixels():
    images, labels = batch(n=32)
    cropped, _ = raugment.augmentation(["pad_crop"], seed=1)(images, labels)
    padded = np.pad(images.numpy(), [(0, 0), (4, 4), (4, 4), (0, 0)])
    shifts = []
    for index in range(32):
        matches = [(dy, dx) for dy in range(9) for dx in range(9)
                   if np.array_equal(cropped[index], padded[index, dy:dy + 32, dx:dx + 32])]
        assert matches, f"image {index} is not an exact shifted crop"
        shifts.append(matches[0])
    assert len(set(shifts)) > 5  # one offset per image, not one per batch


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(raugment.NEEDS_ONE_HOT))
def test_mixing_gives_soft_labels_that_sum_to_one(name, engine):
    images, labels = batch(n=64)
    _, mixed = raugment.augmentation([name], seed=3, engine=engine)(images, labels)
    np.testing.assert_allclose(tf.reduce_sum(mixed, axis=-1), 1.0, rtol=1e-5)
    assert np.any((mixed.numpy() > 0) & (mixed.numpy() < 1))  # some labels are blends


def test_soft_labels_train_with_the_densenet_loss_and_accuracy():
    """The DenseNet recipes' compile: cross-entropy against the whole soft
    label, accuracy against its largest class."""
    images, labels = batch(n=64)
    _, soft = raugment.augmentation(["mixup"], seed=3)(images, labels)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", keras.losses.CategoricalCrossentropy(), metrics=["accuracy"])
    predicted = model.predict(images, verbose=0)
    result = model.evaluate(images, soft, return_dict=True, verbose=0)
    expected_loss = np.mean(-np.sum(soft * np.log(predicted), axis=-1))
    expected_accuracy = np.mean(predicted.argmax(-1) == soft.numpy().argmax(-1))
    assert result["loss"] == pytest.approx(expected_loss, rel=1e-4)
    assert result["accuracy"] == pytest.approx(expected_accuracy)


@pytest.mark.parametrize("entries, message", [
    (["flip", "rotate"], "Unknown augmentation 'rotate' in data.augment; known: flip, "
                         "pad_crop, shift, randaugment, random_erasing, color_jitter, mixup, cutmix"),
    ([{"pad_crop": {"pad": 4}}], "bad parameters for 'pad_crop'.*it takes padding"),
    ([{"flip": 3}], "cannot read {'flip': 3}"),
])
def test_bad_entries_are_user_errors(entries, message):
    with pytest.raises(UserError, match=message):
        raugment.augmentation(entries)


@pytest.mark.slow
def test_a_mixing_operation_turns_integer_labels_into_one_hot(tiny_config):
    """cifar10_cnn trains on class indices; with cutmix it gets one-hot labels
    and a categorical loss, and trains."""
    config = tiny_config("cifar10_cnn", "data.augment=[flip,cutmix]")
    experiment = kit.load("cifar10_cnn").build(config)
    images, labels = next(iter(experiment.data.train))
    assert labels.shape == (16, 10)
    np.testing.assert_allclose(labels.numpy().sum(axis=-1), 1.0, rtol=1e-5)
    assert isinstance(experiment.model.loss, keras.losses.CategoricalCrossentropy)
    history = experiment.model.fit(experiment.data.train, epochs=1,
                                   steps_per_epoch=experiment.data.steps_per_epoch, verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])


def load(augment, augment_on="host"):
    config = recipe_config.resolve("densenet_cifar10", overrides=[
        "data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
        f"data.augment={augment}", f"data.augment_on={augment_on}"], announce=lambda line: None)
    return rdata.load(config["data"], seed=0, one_hot=True,
                      augmentation=raugment.from_config(config["data"], seed=0))


def test_on_the_host_only_training_batches_are_augmented():
    plain, augmented = load("[]"), load("[pad_crop,flip,cutmix]")
    assert (plain.augment_on, augmented.augment_on) == (None, "host")
    for split in ("validation", "test", "train_plain"):
        for (x, y), (ax, ay) in zip(getattr(plain, split), getattr(augmented, split)):
            np.testing.assert_array_equal(x, ax)
            np.testing.assert_array_equal(y, ay)
    (x, y), (ax, ay) = next(iter(plain.train)), next(iter(augmented.train))
    np.testing.assert_array_equal(y.numpy().max(axis=-1), 1.0)  # one-hot before mixing
    assert not np.array_equal(x, ax) and not np.array_equal(y, ay)


@pytest.mark.slow
def test_on_the_device_the_pipeline_is_untouched_and_only_fit_steps_augment():
    plain, on_device = load("[]"), load("[pad_crop,flip,cutmix]", augment_on="device")
    assert on_device.augment_on == "device"
    (x, y), (dx, dy) = next(iter(plain.train)), next(iter(on_device.train))
    np.testing.assert_array_equal(x, dx)  # tf.data leaves it to the step

    calls = []

    def counting_augment(images, labels):
        calls.append(len(images))
        return on_device.augment(images, labels)

    network = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(10, activation="softmax")])
    model = AugmentedModel(network, counting_augment)
    model.compile("sgd", "categorical_crossentropy", metrics=["accuracy"], run_eagerly=True)
    model.fit(on_device.train, steps_per_epoch=3, validation_data=on_device.validation, verbose=0)
    assert calls == [16, 16, 16]  # once per training step, not for validation
    model.evaluate(on_device.test, verbose=0)
    model.predict(on_device.test, verbose=0)
    assert len(calls) == 3


def cifar_run(tiny_config, tmp_path, *overrides, run="run"):
    config = tiny_config("cifar10_cnn", "data.augment=[pad_crop,flip,randaugment,random_erasing]",
                         f"run.dir={tmp_path / run}", *overrides)
    return harness.train(config)


@pytest.mark.slow
@pytest.mark.parametrize("augment_on", ["host", "device"])
def test_under_xla_the_run_records_the_real_placement_and_mode(augment_on, tiny_config, tmp_path):
    metrics = cifar_run(tiny_config, tmp_path, "execution.mode=xla", f"data.augment_on={augment_on}")
    assert metrics["augment_on"] == augment_on and metrics["augment_engine"] == "keras_cv"
    assert metrics["mode_used"] == "xla"


@pytest.mark.slow
def test_on_the_device_under_xla_the_step_is_compiled_and_augmentation_is_not():
    """The graph fit runs holds a jit-compiled call; keras-cv's ops sit outside it."""
    data = load("[flip,randaugment]", augment_on="device")
    network = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(10, activation="softmax")])
    model = AugmentedModel(network, data.augment)
    model.compile("sgd", "categorical_crossentropy", jit_compile=True)
    assert (model.jit_compile, model.step_jit_compile) == (False, True)
    model.fit(data.train, steps_per_epoch=2, verbose=0)

    # fit traces `model.train_step` into a plain tf.function: trace it the same way.
    graph = tf.function(model.train_step).get_concrete_function(
        data.train.element_spec).graph.as_graph_def()
    functions = {f.signature.name: list(f.node_def) for f in graph.library.function}
    functions["outer"] = list(graph.node)
    # TensorFlow has no public API that says which functions of a graph XLA
    # compiles. `tf.function(jit_compile=True)` marks the call with this
    # node attribute (XLA_COMPILE in tensorflow/python/eager/
    # polymorphic_function/attributes.py), as of tensorflow==2.21.0
    # (requirements-cpu.txt); if a TensorFlow upgrade renames it, nothing is
    # found and this test fails rather than passing.
    compiled = [node.attr["f"].func.name for nodes in functions.values() for node in nodes
                if node.attr["_XlaMustCompile"].b]
    assert len(compiled) == 1

    def op_types(name, seen=()):
        types = set()
        for node in functions[name]:
            types.add(node.op)
            for value in node.attr.values():  # called functions, and If/Case branches
                for called in [value.func.name, *(f.name for f in value.list.func)]:
                    if called in functions and called not in seen:
                        types |= op_types(called, (*seen, name))
        return types

    everything = op_types("outer")
    assert "ImageProjectiveTransformV3" in everything  # RandAugment's shears and shifts
    assert "MatMul" in op_types(compiled[0])  # the model step is in the compiled function
    assert "ImageProjectiveTransformV3" not in op_types(compiled[0])  # RandAugment is not


def jit_compiled_op_types(step, input_spec):
    """The op types in each jit-compiled function that `step` calls, traced
    as fit, evaluate and predict trace it: into a plain tf.function."""
    graph = tf.function(step).get_concrete_function(input_spec).graph.as_graph_def()
    functions = {f.signature.name: list(f.node_def) for f in graph.library.function}

    def op_types(nodes, seen=()):
        types = set()
        for node in nodes:
            types.add(node.op)
            for value in node.attr.values():  # called functions, and If/Case branches
                for called in [value.func.name, *(f.name for f in value.list.func)]:
                    if called in functions and called not in seen:
                        types |= op_types(functions[called], (*seen, called))
        return types

    return [op_types(functions[node.attr["f"].func.name])
            for nodes in [graph.node, *functions.values()] for node in nodes
            if node.attr["_XlaMustCompile"].b]


@pytest.mark.parametrize("jit_compile, mode, compiled_calls", [(True, "xla", 1),
                                                              (False, "graph", 0)])
def test_evaluate_and_predict_run_in_the_mode_recorded_for_fit(jit_compile, mode,
                                                               compiled_calls):
    """Neither augments, so under XLA each keeps a jit-compiled network step,
    as fit does, and `execution_mode` (metrics.json's mode_used) holds for all
    three."""
    data = load("[flip,randaugment]", augment_on="device")
    network = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(10, activation="softmax")])
    model = AugmentedModel(network, data.augment)
    model.compile("sgd", "categorical_crossentropy", jit_compile=jit_compile)
    assert execution_mode(model) == mode
    for step in (model.train_step, model.test_step, model.predict_step):
        compiled = jit_compiled_op_types(step, data.test.element_spec)
        assert len(compiled) == compiled_calls, step.__name__
        assert all("MatMul" in types for types in compiled), step.__name__

    # And they run: the network's predictions, and the loss computed from them.
    images, labels = batch()
    labels = labels.numpy()
    predicted = model.predict(images, verbose=0)
    np.testing.assert_allclose(predicted, network(images), rtol=1e-5, atol=1e-6)
    loss = model.evaluate(images, labels, verbose=0)
    assert loss == pytest.approx(np.mean(-np.sum(labels * np.log(predicted), axis=-1)), rel=1e-4)


# Two seeded trainings in one process, with TensorFlow's ops deterministic:
# without that, TensorFlow promises no bit-exact repeat (its threads may sum
# in another order). In a process of its own: op determinism cannot be turned
# off again with a public API, and slows every tf.data map with random ops.
# It trains what `build` returns on its plain training batches, without the
# Timing callback, whose input-wait stamp (tf.timestamp) determinism refuses.
SEEDED_RUNS = """
import json, sys
import tensorflow as tf
tf.config.experimental.enable_op_determinism()
# keras-cv's layers built without a seed take TensorFlow's global generator,
# which determinism wants created from a seed first.
tf.random.set_global_generator(tf.random.Generator.from_seed(0))
import keras_course_recipes as kit
from keras_course_recipes import recipe_config
overrides, runs = json.loads(sys.argv[1]), []
for run_dir in sys.argv[2:]:
    config = recipe_config.resolve("cifar10_cnn", overrides=[*overrides, f"run.dir={run_dir}"],
                             announce=lambda line: None)
    experiment = kit.load("cifar10_cnn").build(config)
    data = experiment.data
    history = experiment.model.fit(data.train, validation_data=data.validation,
                                   epochs=config["train"]["epochs"],
                                   steps_per_epoch=data.steps_per_epoch, verbose=0)
    runs.append([history.history["loss"], history.history["val_loss"]])
print(json.dumps(runs))
"""


@pytest.mark.slow
@pytest.mark.parametrize("augment_on", ["host", "device"])
def test_seeded_runs_repeat_exactly(augment_on, tmp_path):
    overrides = [*TINY, "data.augment=[pad_crop,flip,randaugment,random_erasing]",
                 f"data.augment_on={augment_on}", "train.epochs=2", "execution.seed=7"]
    result = subprocess.run(
        [sys.executable, "-c", SEEDED_RUNS, json.dumps(overrides), str(tmp_path / "first"),
         str(tmp_path / "second")], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(first) == 2 and first == second


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_preview_writes_a_png(engine, tmp_path):
    path = _preview.preview("densenet_cifar10", overrides=[
        "data.source=synthetic", "data.synthetic_examples=32", "data.batch_size=16",
        "data.augment=[pad_crop,flip,color_jitter,cutmix]", f"data.augment_engine={engine}",
        f"run.dir={tmp_path}"])
    assert path == tmp_path / "augmentation.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_preview_without_augmentation_is_a_user_error():
    with pytest.raises(UserError, match="mnist_mlp has no data.augment to preview"):
        _preview.preview("mnist_mlp", overrides=["data.source=synthetic"])


class Clock:
    """Stands in for the `time` module in keras_course_recipes.tools.augment_bench: each
    `perf_counter` reading is one second after the one before."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now


@pytest.mark.slow
def test_augment_benchmark_writes_both_tables(tmp_path, monkeypatch):
    # Each rate is timed between two readings, one second apart: 2 batches
    # of cifar10_cnn's 32 images in that second, the warm-up batch not counted.
    # The pipeline docs/augmentation.md benchmarks (its command is not run again there).
    monkeypatch.setattr(_augment_bench, "time", Clock())
    monkeypatch.setattr(_augment_bench.compare, "measure_mode", measure_tensorflow_modes_here)
    operations, training = _augment_bench.benchmark(
        "cifar10_cnn", steps=2, batches=2, out_dir=tmp_path, overrides=[
            "data.augment=[pad_crop,flip,randaugment]",
            "data.synthetic_examples=128", "model.filters=[4]", "model.dense_units=8"])

    assert [(row["engine"], row["operation"]) for row in operations] == [
        (engine, op) for engine in ENGINES for op in [*raugment.OPERATIONS, "pipeline"]]
    assert all((row["host_images_per_s"], row["device_images_per_s"]) == (2 * 32, 2 * 32)
               for row in operations)
    assert [row["augment_on"] for row in training] == ["host", "device"]
    host, device = training
    assert host["speedup_vs_host"] == 1.0
    # Two steady steps: the median step is the mean one, so the speed-up is
    # also the ratio of images/s, measured over all of them.
    assert device["speedup_vs_host"] == pytest.approx(
        device["images_per_s"] / host["images_per_s"], rel=1e-6)
    for name in ("operations.csv", "training.csv"):
        with (tmp_path / name).open() as file:
            assert len(list(csv.DictReader(file))) == len(training if "training" in name else operations)
    assert (tmp_path / "table.md").read_text().count("| pipeline |") == len(ENGINES)
    stored = record.speed_rows(tmp_path, "tiny", "EPYC-AVX2")
    assert {(found["variant"], found["mode"]) for found in stored
            if found["metric"] == "images_per_s"} >= {("pipeline", "keras_cv host"),
                                                      ("flip", "keras device"),
                                                      ("training", "device")}
    assert stored[0]["command"].startswith("recipes augment-benchmark cifar10_cnn steps=2 ")


def test_augment_benchmark_times_the_operations_asked_for_and_refuses_others(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setattr(_augment_bench, "time", Clock())
    # Training is timed as test_augment_benchmark_writes_both_tables checks.
    monkeypatch.setattr(_augment_bench.compare, "compare", lambda *args, **kwargs: {
        "rows": [{"images_per_s": 1.0, "step_ms_median": 1.0, "input_wait_fraction": 0.0}],
        "device": {"gpus": ["a stand-in"]}, "versions": {}})
    operations, _ = _augment_bench.benchmark(
        "cifar10_cnn", batches=1, operations="flip, mixup", out_dir=tmp_path,
        overrides=["data.augment=[flip]", "data.synthetic_examples=64"])
    assert [(row["engine"], row["operation"]) for row in operations] == [
        (engine, op) for engine in ENGINES for op in ["flip", "mixup", "pipeline"]]
    with pytest.raises(UserError, match="Unknown operation.*flipp in operations=; known: flip,"):
        _augment_bench.benchmark("cifar10_cnn", operations="flipp", out_dir=tmp_path)


def _mirrored_in(batches, source):
    """For each batch image, in order: whether it is its source image
    mirrored (True) or as it is (False); `source` holds uint8 images."""
    flat = source.reshape(len(source), -1).astype(np.float32) / 255.0
    mirrored = source[:, :, ::-1].reshape(len(source), -1).astype(np.float32) / 255.0
    seen = []
    for images in batches:
        for image in np.asarray(images).reshape(len(images), -1):
            as_is = np.flatnonzero(np.abs(flat - image).max(axis=1) < 1e-6)
            flipped = np.flatnonzero(np.abs(mirrored - image).max(axis=1) < 1e-6)
            assert len(as_is) + len(flipped) == 1, "each batch image is one source image"
            seen.append((int(np.concatenate([as_is, flipped])[0]), len(flipped) == 1))
    return seen


def test_alternating_flip_shows_each_image_both_ways_in_two_passes():
    """tf.data, in order (shuffle_buffer=1): pass 0 mirrors the seeded half,
    pass 1 the other half, pass 2 the first half again; a resumed pipeline
    continues the same stream."""
    config = recipe_config.resolve("cifar10_cnn", overrides=[
        "data.source=synthetic", "data.synthetic_examples=16", "data.batch_size=4",
        "data.shuffle_buffer=1", "data.augment=[alternating_flip]"], announce=lambda line: None)
    augmentation = raugment.from_config(config["data"], seed=3)
    data = rdata.load(config["data"], seed=3, augmentation=augmentation)
    source = rdata._synthetic_splits({**rdata.DEFAULTS, **config["data"]}, (32, 32, 3), 10,
                                     seed=3)[0][0]
    assert data.augment_on is None  # no batch operation left
    stream = [images for images, _ in data.train.take(12)]
    seen = _mirrored_in(stream, source)
    first = augmentation.mirrored(16, seed=3)
    assert 0 < first.sum() < 16
    assert seen == [(i, bool(first[i])) for i in range(16)] + \
        [(i, not first[i]) for i in range(16)] + [(i, bool(first[i])) for i in range(16)]
    resumed = rdata.load(config["data"], seed=3, steps_per_epoch=5, initial_epoch=1,
                         augmentation=augmentation).train
    resumed = [images for images, _ in resumed.take(7)]
    for images, expected in zip(resumed, stream[5:]):
        np.testing.assert_array_equal(images, expected)


def test_alternating_flip_without_tensorflow_batches_alternates_too():
    """ArrayBatches, the pipeline without TensorFlow: each pass is shuffled,
    and each image is mirrored in exactly one of two consecutive passes."""
    rng = np.random.default_rng(0)
    source = rng.integers(0, 256, size=(12, 8, 8, 3), dtype=np.uint8)
    first = raugment.augmentation(["alternating_flip"]).mirrored(12, seed=0)
    batches = ArrayBatches(source, np.zeros(12, int), 4, shuffle_seed=0, mirrored=first)
    for number in range(3):
        seen = dict(_mirrored_in([batches[number * 3 + i][0] for i in range(3)], source))
        assert sorted(seen) == list(range(12))
        assert [seen[i] for i in range(12)] == [bool(f) != (number % 2 == 1) for f in first]


def test_alternating_flip_takes_no_parameters():
    with pytest.raises(UserError, match="'alternating_flip' takes no parameters"):
        raugment.augmentation([{"alternating_flip": {"mode": "vertical"}}])
