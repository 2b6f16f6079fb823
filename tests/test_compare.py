"""`python -m recipes compare`: the output contract, and what each loop mode is."""

import csv
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from recipes import UserError, _compare


def test_compare_writes_one_row_per_mode(tmp_path):
    modes = _compare.MODES
    results = _compare.compare("mnist_mlp", modes, steps=3, overrides=[
        "data.synthetic_examples=256", "data.batch_size=32", "model.hidden_units=[32]"],
        out_dir=tmp_path)

    assert results == json.loads((tmp_path / "results.json").read_text())
    assert [row["mode"] for row in results["rows"]] == modes
    assert {"device", "versions", "params"} <= set(results)
    for row in results["rows"]:
        assert set(_compare.COLUMNS) - {"peak_gpu_mb", "input_wait_fraction"} <= {k for k, v in row.items() if v is not None}
        assert row["step_ms_p10"] <= row["step_ms_median"] <= row["step_ms_p90"]
        # Images/s is over every steady step, the median one step: with 3
        # steps on a shared machine they can differ by 2x, not by 10x.
        assert 0.1 < row["images_per_s"] * row["step_ms_median"] / (32 * 1000) < 10
        assert row["trace_s"] >= 0 and row["peak_rss_mb"] > 100
        # 32 images x 3 x the forward pass of a 784-32-10 MLP (2 FLOPs per multiply-add).
        assert row["flops_per_step"] >= 3 * 32 * 2 * (784 * 32 + 32 * 10)
        assert 0 < row["mfu"] < 1 and row["matmul_flops_per_s"] > 1e9
    rows = {row["mode"]: row for row in results["rows"]}
    assert rows["eager"]["speedup_vs_eager"] == 1.0 == rows["loop_function"]["step_vs_loop_function"]
    assert rows["graph_spe"]["input_wait_fraction"] is None
    assert rows["graph"]["mode_used"] == "graph" == rows["graph_ready"]["mode_used"]
    assert rows["xla"]["mode_used"] == "xla"
    with (tmp_path / "results.csv").open() as file:
        assert [row["mode"] for row in csv.DictReader(file)] == modes
    assert (tmp_path / "table.md").read_text().count("\n") == 2 + len(modes)
    assert (tmp_path / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    # Each mode ran the recipe in its own run directory.
    assert all((tmp_path / "modes" / mode / "config.yaml").exists() for mode in modes)


def test_repeats_run_every_mode_in_turns_and_keep_the_median_run(tmp_path):
    results = _compare.compare("mnist_mlp", ["graph", "loop_function"], steps=2, repeats=3,
                               overrides=["data.synthetic_examples=128", "data.batch_size=16",
                                          "model.hidden_units=[8]"], out_dir=tmp_path, quiet=True)
    for row in results["rows"]:
        runs = row["step_ms_runs"]
        assert len(runs) == 3 and row["step_ms_median"] == sorted(runs)[1]
        assert all((tmp_path / "modes" / name / "config.yaml").exists()
                   for name in (row["mode"], f"{row['mode']}-2", f"{row['mode']}-3"))


def tiny_compiled_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def test_loop_function_is_a_tf_function_and_loop_eager_is_not():
    model = tiny_compiled_model()
    batches = iter(tf.data.Dataset.from_tensors(
        (np.ones((2, 4), "float32"), np.array([0, 1]))).repeat())
    graph_step = _compare.train_step(model, use_function=True)
    eager_step = _compare.train_step(model, use_function=False)
    assert isinstance(graph_step, tf.types.experimental.PolymorphicFunction)
    assert not isinstance(eager_step, tf.types.experimental.PolymorphicFunction)
    before = model.get_weights()[0].copy()
    eager_step(batches)
    graph_step(batches)
    graph_step(batches)
    assert graph_step.experimental_get_tracing_count() == 1
    assert not np.allclose(before, model.get_weights()[0])  # both steps train


@pytest.mark.parametrize("text, message", [("fast,graph", "Unknown mode(s) fast"), ("", "(none)")])
def test_bad_modes_are_user_errors(text, message):
    with pytest.raises(UserError, match=message.replace("(", "\\(").replace(")", "\\)")):
        _compare.parse_modes(text)


@pytest.mark.parametrize("option, text, minimum", [("steps", "1", 2), ("repeats", "0", 1),
                                                   ("repeats", "two", 1)])
def test_bad_counts_are_user_errors(option, text, minimum):
    with pytest.raises(UserError, match=f"{option}= expects an integer of at least {minimum}"):
        _compare.parse_count(option, text, minimum)
