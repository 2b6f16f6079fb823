"""RevNet: reversible gradients against autodiff (float32, mixed bfloat16,
weights given as values), reconstruction, batch norm statistics, memory
against depth, and the recipe's errors and memory tool."""

import csv
import gc
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_course_recipes.models.revnet import (VARIANTS, EntryUnit, ReversibleStage, depth, revnet, revnet_variant,
                           variant_spec)
from keras_course_recipes import harness
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import memory as _memory
from keras_course_recipes.tools import record

# The paper's parameter counts (millions, CIFAR-10), and the depths in the names.
PAPER_PARAMS_M = {"revnet38": 0.46, "revnet110": 1.73}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_depths_and_parameter_counts(variant):
    model = revnet_variant(variant, input_shape=(32, 32, 3), num_classes=10)
    # Every convolution and the classifier have one kernel: 4-D and 2-D.
    convolutions_and_dense = sum(len(w.shape) in (2, 4) for w in model.trainable_weights)
    assert depth(**VARIANTS[variant]) == int(variant[len("revnet"):]) == convolutions_and_dense
    millions = sum(int(np.prod(w.shape)) for w in model.trainable_weights) / 1e6
    # RevNet-164: 1.66M here against the paper's 1.75M (docs/revnet.md).
    assert round(millions, 2) == PAPER_PARAMS_M.get(variant, 1.66)


def stage_and_input(backprop, bottleneck=False, units=2, seed=0):
    keras.utils.set_random_seed(seed)
    stage = ReversibleStage(units, 16, bottleneck=bottleneck, weight_decay=1e-3,
                            backprop=backprop)
    x = tf.random.normal([4, 8, 8, 16], seed=1)
    stage.build(x.shape)
    return stage, x


def gradients(stage, x, function):
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.cast(stage(x, training=True), "float32")  # bfloat16 sums lose digits
            loss = tf.reduce_sum(tf.sin(y) * y)
        return y, tape.gradient(loss, [x, *stage.trainable_variables])

    return (tf.function(step) if function else step)(x)


@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("bottleneck", [False, True], ids=["basic", "bottleneck"])
def test_reversible_gradients_equal_autodiff(function, bottleneck):
    standard, x = stage_and_input("standard", bottleneck)
    reversible, _ = stage_and_input("reversible", bottleneck)
    y_standard, expected = gradients(standard, x, function)
    y_reversible, found = gradients(reversible, x, function)
    np.testing.assert_allclose(y_reversible, y_standard, rtol=1e-6, atol=1e-6)
    assert len(found) == 1 + len(reversible.trainable_variables) == 1 + 2 * 2 * (9 if bottleneck else 6)
    for name, a, b in zip(["input", *(v.path for v in standard.trainable_variables)],
                          found, expected):
        assert a is not None, name
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(tf.reduce_max(tf.abs(b))),
                                   err_msg=name)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_the_input_is_rebuilt_from_the_output(training):
    """The reversible backward pass rebuilds each unit's input with this
    code, in training mode (batch statistics)."""
    stage, x = stage_and_input("reversible", units=3)
    y = stage(x, training=training)
    assert not np.allclose(y, x)
    np.testing.assert_allclose(stage.inverse(y, training=training), x, rtol=1e-4, atol=1e-4)


def relative_errors(found, expected):
    return [float(tf.norm(a - b) / tf.norm(b)) for a, b in zip(found, expected)]


@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
def test_reversible_gradients_under_mixed_bfloat16_are_as_close_as_autodiffs(function):
    """bfloat16 keeps 8 significant bits: even autodiff's gradients are
    several percent off float32's here, and rebuilding the inputs adds
    rounding of its own. Both are measured against float32 autodiff, on the
    same weights and input."""
    found = {}
    for policy, backprop in [("float32", "standard"), ("mixed_bfloat16", "standard"),
                             ("mixed_bfloat16", "reversible")]:
        keras.mixed_precision.set_global_policy(policy)  # the fixture restores float32
        stage, x = stage_and_input(backprop)
        assert stage.compute_dtype == policy.removeprefix("mixed_")
        grads = gradients(stage, x, function)[1]
        assert None not in grads, (policy, backprop)
        found[policy, backprop] = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
    exact = found["float32", "standard"]
    autodiff, reversible = (relative_errors([found["mixed_bfloat16", backprop]], [exact])[0]
                            for backprop in ("standard", "reversible"))
    assert 0 < autodiff < 0.2 and reversible < 2 * autodiff, (autodiff, reversible)


def test_reversible_gradients_reach_weights_given_as_values():
    """`stateless_call` runs the stage on values in place of its variables (as
    `keras.StatelessScope` does): the gradient reaches those values."""
    grads = {}
    for backprop in ("standard", "reversible"):
        stage, x = stage_and_input(backprop)
        trainable = [tf.convert_to_tensor(v.value) for v in stage.trainable_variables]
        others = [tf.convert_to_tensor(v.value) for v in stage.non_trainable_variables]
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            y, _ = stage.stateless_call(trainable, others, x, training=True)
            loss = tf.reduce_sum(tf.sin(y) * y)
        grads[backprop] = tape.gradient(loss, trainable)
    assert None not in grads["reversible"]
    assert max(relative_errors(grads["reversible"], grads["standard"])) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_a_reversible_revnet_trains_under_mixed_bfloat16(jit_compile):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    model = revnet((8, 8, 3), 2, units=(3,), filters=(16,), init_filters=16)
    stage = model.get_layer("stage1")
    before = [w.numpy().copy() for w in stage.trainable_weights]
    images = np.random.default_rng(0).uniform(size=(32, 8, 8, 3)).astype("float32")
    labels = (images.mean(axis=(1, 2, 3)) > 0.5).astype("int32")
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  jit_compile=jit_compile)
    history = model.fit(images, labels, batch_size=8, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.all(np.isfinite(history.history["loss"]))
    # Every weight of the reversible stage got a gradient and moved.
    assert all(not np.array_equal(a, w.numpy()) for a, w in zip(before, stage.trainable_weights))


def test_one_reversible_step_moves_batch_norm_statistics_as_one_standard_step():
    """The backward pass runs F and G again, statelessly: no second update."""
    moved = {}
    for backprop in ("standard", "reversible"):
        stage, x = stage_and_input(backprop)
        before = [v.numpy().copy() for v in stage.non_trainable_variables]
        gradients(stage, x, function=True)
        moved[backprop] = [v.numpy() for v in stage.non_trainable_variables]
        assert any(not np.allclose(a, b) for a, b in zip(before, moved[backprop]))
    for a, b in zip(moved["standard"], moved["reversible"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def peak_step_memory(backprop, units, function):
    """Peak allocator bytes of one training step of a stage: the least of
    three steps, since the peak is the whole process's, and whatever else
    runs in it (an earlier test's tf.data prefetch thread) only adds."""
    stage, _ = stage_and_input(backprop, units=units)
    x = tf.random.normal([32, 32, 32, 16])
    step = lambda x: gradients(stage, x, function=False)[1]  # noqa: E731
    step = tf.function(step) if function else step
    step(x)  # trace and warm up
    gc.collect()  # earlier tests' iterators, and their threads
    peaks = []
    for _ in range(3):
        tf.config.experimental.reset_memory_stats("CPU:0")
        step(x)
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"])
    return min(peaks)


@pytest.mark.slow  # a training step at five depths, twice
@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
def test_reversible_memory_grows_much_slower_with_depth(function):
    """Eagerly, an outer tape must record nothing of the forward pass; in a
    graph, each unit's reconstruction must wait for the gradients after it."""
    growth = {backprop: peak_step_memory(backprop, 12, function)
              - peak_step_memory(backprop, 2, function) for backprop in ("standard", "reversible")}
    # Standard backprop keeps ~10 more units of activations; reversible keeps none.
    assert growth["standard"] > 10 * 32 * 32 * 32 * 16 * 4  # 10 units' inputs at least
    assert growth["reversible"] < 0.2 * growth["standard"]


@pytest.mark.parametrize("override, message", [
    ("model.variant=revnet50", "'model.variant' must be one of revnet38, revnet110, revnet164"),
    ("model.units=[3,3]", "one entry per stage"),
    ("model.filters=[7,8,16]", "every width must be even"),
    ("model.filters=[4,8,16]", r"must not shrink from the stem's \(init_filters=8\)"),
])
def test_model_errors_are_user_errors(override, message, tiny_config):
    with pytest.raises(UserError, match=message):
        harness.train(tiny_config("revnet_cifar10", override))


def test_bad_layer_arguments_are_value_errors():
    with pytest.raises(ValueError, match="received: backprop='checkpoint'"):
        ReversibleStage(2, 16, backprop="checkpoint")
    with pytest.raises(ValueError, match="received: filters=15"):
        EntryUnit(15)
    assert variant_spec("revnet38", units=[2, 2, 2])["units"] == (2, 2, 2)


@pytest.mark.slow
@pytest.mark.parametrize("backprop", ["reversible", "remat"])
def test_the_recipe_trains_and_its_checkpoint_loads(backprop, tiny_config, tmp_path):
    metrics = harness.train(tiny_config(
        "revnet_cifar10", f"model.backprop={backprop}", "execution.mode=graph"))
    model = keras.saving.load_model(tmp_path / "run" / "checkpoints" / "last.keras")
    stages = [layer for layer in model.layers if isinstance(layer, ReversibleStage)]
    assert [stage.settings["backprop"] for stage in stages] == [backprop] * 3
    assert metrics["trainable_params"] == TINY_REVNET_PARAMS


def residual_params(channels_in, filters):
    """F or G, counted by hand: BN (gamma, beta) and a 3x3 convolution
    without bias, twice."""
    return 2 * channels_in + 9 * channels_in * filters + 2 * filters + 9 * filters * filters


# conftest's tiny RevNet: stem 8 maps, stages of 2 units (an EntryUnit and one
# reversible unit) at widths 8, 8, 16, each unit's F and G on half the width.
TINY_REVNET_PARAMS = (
    27 * 8 + 2 * 8                                         # stem convolution and BN
    + 2 * 2 * 2 * residual_params(4, 4)                    # stages 1 and 2: F, G of 2 units
    + residual_params(4, 8) + residual_params(8, 8)        # stage 3's entry: F from 4 maps, G
    + 2 * residual_params(8, 8)                            # stage 3's reversible unit
    + 2 * 16 + 16 * 10 + 10)                               # final BN, classifier


@pytest.mark.slow
def test_the_memory_tool_writes_its_table_and_plot(tmp_path):
    # Eager: the tool times and measures whatever fit runs, and tracing the
    # RevNet's graph step took half of each setting's process (31 s against
    # 17 s in all); the graph step's memory is test_reversible_memory_grows_much_slower_with_depth's.
    rows = _memory.measure_all("revnet_cifar10", ["standard", "reversible"], steps=1, overrides=[
        "data.synthetic_examples=64", "data.batch_size=16", "model.units=[2,4,2]",
        "model.init_filters=8", "model.filters=[8,8,16]", "model.variant=revnet38",
        "execution.mode=eager"], out_dir=tmp_path)
    assert [(row["variant"], row["backprop"]) for row in rows] == [
        ("revnet38", "standard"), ("revnet38", "reversible")]
    assert rows[0]["depth"] == depth(units=[2, 4, 2], bottleneck=False) == 2 + 8 * 4
    assert rows[1]["memory_vs_standard"] == pytest.approx(
        rows[1]["peak_step_mb"] / rows[0]["peak_step_mb"])
    assert rows[1]["peak_step_mb"] < rows[0]["peak_step_mb"]
    with (tmp_path / "results.csv").open() as file:
        assert len(list(csv.DictReader(file))) == 2
    assert json.loads((tmp_path / "results.json").read_text())["memory_of"] == "CPU:0"
    assert (tmp_path / "memory_vs_depth.png").read_bytes()[:4] == b"\x89PNG"
    stored = record.speed_rows(tmp_path, "tiny", "EPYC-AVX2")
    assert {(found["variant"], found["mode"], found["metric"]) for found in stored} >= {
        ("revnet38", "reversible", "memory_vs_standard"), ("revnet38", "standard", "peak_step_mb")}
    assert stored[0]["command"].startswith("recipes memory revnet_cifar10 "
                                           "backprop=standard,reversible steps=1 ")
