"""Every claim of the graph_lessons recipe and of docs/tf-function.md."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_course_recipes.models.rnn import PythonLoopLSTM, row_lstm
from keras_course_recipes import harness
from keras_course_recipes.recipes import graph_lessons


# Traces per case: docs/tf-function.md, lesson 1.
RETRACING = {
    "python ints 2, 3, 2": 2,
    "tensors 2, 3": 1,
    "tensors int32 2, float32 2.0": 2,
    "shapes [1], [2], [3], [4]": 4,
    "shapes [1]..[4], reduce_retracing": 2,
    "shapes [1]..[4], input_signature [None]": 1,
}


def test_retracing_counts():
    assert graph_lessons.retracing() == RETRACING


def test_print_runs_while_tracing_and_tf_print_on_every_call(tmp_path):
    log = tmp_path / "tf_print.log"
    log.write_text("")
    assert graph_lessons.printing(log, calls=4) == {
        "calls": 4, "print lines": 1, "tf.print lines": 4}


def test_autograph_turns_tensor_loops_into_while_ops():
    found = graph_lessons.autograph()
    assert found["halve_until_small"]["while loop"]
    assert graph_lessons.halve_until_small(tf.constant([4.0, 4.0])).numpy().tolist() == [0.5, 0.5]
    # range() is unrolled: three multiplications, no loop.
    python_range = found["double_three_times_python_range"]
    assert python_range["Mul ops"] == 3 and not python_range["while loop"]
    # tf.range() is a While op; its multiplication is inside the loop body.
    tf_range = found["double_three_times_tf_range"]
    assert tf_range["Mul ops"] == 0 and tf_range["while loop"]
    assert "ag__.while_stmt(loop_test, loop_body" in found["code"]


def test_the_python_loop_lstm_unrolls_into_one_graph_with_a_cell_per_step():
    model = row_lstm((6, 5, 1), num_classes=3, units=4)
    graph = tf.function(lambda x: model(x)).get_concrete_function(
        tf.TensorSpec([2, 6, 5, 1])).graph
    # One MatMul pair (input and recurrent kernels) per time step, no loop op.
    types = [op.type for op in graph.get_operations()]
    assert not any("While" in t for t in types)
    assert types.count("MatMul") == 2 * 6 + 1  # and the classifier


def test_the_python_loop_lstm_computes_keras_lstm(tmp_path):
    """Same weights, same outputs as keras.layers.LSTM; and it saves and loads."""
    ours = PythonLoopLSTM(4)
    theirs = keras.layers.LSTM(4)
    sequences = np.random.default_rng(0).normal(size=(2, 6, 5)).astype("float32")
    ours(sequences), theirs(sequences)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(ours(sequences), theirs(sequences), rtol=1e-5, atol=1e-6)

    model = row_lstm((6, 5, 1), num_classes=3, units=4)
    model.save(tmp_path / "model.keras")
    images = sequences[..., None]
    np.testing.assert_allclose(keras.saving.load_model(tmp_path / "model.keras").predict(
        images, verbose=0), model.predict(images, verbose=0), rtol=1e-6)


@pytest.mark.slow
def test_the_recipe_writes_its_lessons_and_trains(tiny_config, tmp_path, capsys):
    metrics = harness.train(tiny_config("graph_lessons"))
    lessons = json.loads((tmp_path / "run" / "lessons.json").read_text())
    assert lessons["retracing"] == RETRACING
    assert lessons["printing"]["tf.print lines"] == 3
    assert (tmp_path / "run" / "tf_print.log").read_text().count("double ran") == 3
    printed = capsys.readouterr().out
    assert "== Lesson 1" in printed and "python ints 2, 3, 2" in printed
    assert metrics["epochs_completed"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_the_lstm_learns_in_each_mode(mode, tiny_config):
    config = tiny_config("graph_lessons", f"execution.mode={mode}", "model.units=16",
                         "data.synthetic_examples=512", "data.batch_size=32",
                         "train.steps_per_epoch=null", "train.epochs=3", "train.lr=0.01")
    metrics = harness.train(config)
    assert metrics["test"]["accuracy"] > 0.3  # chance: 0.1, on 51 test images
