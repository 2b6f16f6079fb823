"""`python -m keras_course_recipes compare`: the output contract, and the hand-written loops it times."""

import csv
import json
import shlex

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes.callbacks.timing as timing_module
from conftest import MEASURE_IN_A_PROCESS, measure_tensorflow_modes_here
import keras_course_recipes as kit
from keras_course_recipes import machine
from keras_course_recipes.errors import UserError
from keras_course_recipes.__main__ import main
from keras_course_recipes.tools import compare as _compare
from keras_course_recipes.tools import loops as _loops
from keras_course_recipes.tools import measure as _measure
from keras_course_recipes.tools import parse_count
from test_callbacks import StepClock

TINY_MLP = ["data.synthetic_examples=256", "data.batch_size=32", "model.hidden_units=[32]"]


# The forward pass of a 784-32-10 MLP, counted by hand: a multiply-add is 2
# FLOPs; the bias adds (42) and the softmax are the profiler's remainder.
MLP_FORWARD_FLOPS = 2 * (784 * 32 + 32 * 10)


@pytest.mark.slow
def measure_loop_function_in_a_process(name, mode, *job):
    """compare's worker in a process of its own for `loop_function` (and
    Keras' other backends), whose peak memory is the process's; in this
    process for TensorFlow's other modes, which that process's code
    path (`python -m keras_course_recipes.tools.measure`) measures the same way."""
    if mode == "loop_function":
        return MEASURE_IN_A_PROCESS(name, mode, *job)
    return measure_tensorflow_modes_here(name, mode, *job)


@pytest.mark.slow  # starts compare's worker process
def test_compare_writes_one_row_per_mode(tmp_path, monkeypatch):
    # torch_compile is torch_eager's process with jit_compile=True, whose
    # torch.compile takes a minute or more on 2 cores: too long for the suite.
    modes = [mode for mode in _compare.MODES if mode != "torch_compile"
             and (machine.installed("torch") or not mode.startswith("torch"))]
    monkeypatch.setattr(_compare, "measure_mode", measure_loop_function_in_a_process)
    measure_modes, groups = _compare.measure_modes, []

    def recording_groups(name, group, *job):
        groups.append(group)
        return measure_modes(name, group, *job)

    monkeypatch.setattr(_compare, "measure_modes", recording_groups)
    results = _compare.compare("mnist_mlp", modes, steps=2, overrides=TINY_MLP, out_dir=tmp_path)

    assert results == json.loads((tmp_path / "results.json").read_text())
    assert [row["mode"] for row in results["rows"]] == modes
    assert {"device", "versions", "params"} <= set(results)
    assert results["params"] == 784 * 32 + 32 + 32 * 10 + 10
    for row in results["rows"]:
        assert set(_compare.COLUMNS) - {"peak_gpu_mb", "input_wait_fraction"} <= {
            k for k, v in row.items() if v is not None}
        assert row["step_ms_p10"] <= row["step_ms_median"] <= row["step_ms_p90"]
        # Two steady steps: their median is their mean, so images/s, counted
        # over them, is the batch of 32 over the median step.
        assert row["images_per_s"] == pytest.approx(32 * 1000 / row["step_ms_median"], rel=1e-9)
        # A training step is 3 forward passes (forward, and two for the
        # backward) for each of the batch's 32 images.
        assert row["flops_per_step"] == pytest.approx(3 * 32 * MLP_FORWARD_FLOPS, rel=0.01)
    rows = {row["mode"]: row for row in results["rows"]}
    assert rows["eager"]["speedup_vs_eager"] == 1.0
    assert rows["loop_function"]["step_vs_loop_function"] == 1.0
    # Not measured: over calls of several steps, or behind JAX's prefetch.
    for mode in modes:
        measured = rows[mode]["input_wait_fraction"]
        assert (measured is None) == (mode in ("graph_spe", "loop_epoch", *_compare.BACKEND_MODES))
    assert rows["graph"]["mode_used"] == "graph" == rows["graph_ready"]["mode_used"]
    assert rows["xla"]["mode_used"] == "xla" == rows["jax_jit"]["mode_used"]
    assert rows["jax_eager"]["mode_used"] == "eager"
    # JAX's two modes in one process, each TensorFlow mode in its own; jax_jit's
    # peak memory (above, not None) counted from the end of jax_eager's.
    assert [group for group in groups if len(group) > 1] == [["jax_eager", "jax_jit"]]
    if "torch_eager" in rows:
        assert rows["torch_eager"]["mode_used"] == "eager"
    with (tmp_path / "results.csv").open() as file:
        assert [row["mode"] for row in csv.DictReader(file)] == modes
    assert (tmp_path / "table.md").read_text().count("\n") == 2 + len(modes)
    assert (tmp_path / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    # Each mode built the recipe in its own run directory.
    assert all((tmp_path / "modes" / mode / "config.yaml").exists() for mode in modes)

    # Peak memory is the measuring process's, in MiB: a model with 16384
    # hidden units holds 13M more float32 weights (50 MiB), as much again in
    # RMSprop's slot, and their gradients during a step (measured: 5.6x the
    # weights). Smaller models can hide in memory TensorFlow touched anyway.
    big = _compare.compare("mnist_mlp", ["loop_function"], steps=2, quiet=True,
                           overrides=[*TINY_MLP, "model.hidden_units=[16384]"],
                           out_dir=tmp_path / "big")
    weights_mb = 4 * (big["params"] - results["params"]) / 2**20
    grown = big["rows"][0]["peak_rss_mb"] - rows["loop_function"]["peak_rss_mb"]
    assert 1.5 * weights_mb < grown < 16 * weights_mb


def test_each_backend_but_tensorflow_measures_its_modes_in_one_process():
    assert _compare.process_groups(["eager", "jax_jit", "graph", "torch_eager", "jax_eager",
                                    "torch_compile"]) == [
        ["eager"], ["jax_jit", "jax_eager"], ["graph"], ["torch_eager", "torch_compile"]]


def test_speedups_are_ratios_of_median_step_times():
    rows = [{"mode": "eager", "step_ms_median": 10.0}, {"mode": "graph", "step_ms_median": 2.0},
            {"mode": "loop_function", "step_ms_median": 4.0}]
    _compare.add_speedups(rows)
    assert [(row["speedup_vs_eager"], row["step_vs_loop_function"]) for row in rows] == [
        (1.0, 2.5), (5.0, 0.5), (2.5, 1.0)]
    without_eager = [{"mode": "graph", "step_ms_median": 2.0}]
    _compare.add_speedups(without_eager)
    assert without_eager[0]["speedup_vs_eager"] is None


def test_each_modes_speedup_is_against_its_own_backends_eager_mode():
    rows = [{"mode": mode, "step_ms_median": ms} for mode, ms in [
        ("eager", 10.0), ("xla", 5.0), ("torch_eager", 30.0), ("torch_compile", 10.0),
        ("jax_jit", 1.0)]]
    _compare.add_speedups(rows)
    # jax_eager was not measured: jax_jit has no speedup, not one against TensorFlow's eager
    assert [row["speedup_vs_eager"] for row in rows] == [1.0, 2.0, 1.0, 3.0, None]


def test_the_printed_table_says_what_each_rate_is_computed_from(tmp_path, monkeypatch, capsys):
    def measure_mode(name, mode, *job):
        # three steady steps of 10, 10 and 40 ms at a batch of 32: median 10 ms, mean 20 ms
        return {"row": {"mode": mode, "trace_s": 0.1, "step_ms_median": 10.0,
                        "step_ms_p10": 10.0, "step_ms_p90": 40.0, "images_per_s": 32 / 0.02},
                "device": {"gpus": ["a GPU"]}, "versions": {}, "config": {}, "params": 1}

    monkeypatch.setattr(_compare, "measure_mode", measure_mode)
    _compare.compare("mnist_mlp", ["eager"], steps=2, overrides=TINY_MLP, out_dir=tmp_path)
    out = capsys.readouterr().out
    assert "images_per_s: the batch over the mean steady step, not the median" in out
    assert "speedup_vs_eager: the median step of the same backend's eager mode" in out


@pytest.mark.slow
def test_a_rows_rates_follow_from_its_step_times_and_the_counted_flops(monkeypatch, tmp_path):
    """measure's row under a scripted clock: the first step traces for 2 s,
    the 3 warm-up steps take 0.5 s, the 4 measured ones 0.1, 0.1, 0.3 and
    0.1 s; the matmul peak is set to 1 GFLOP/s, asked for over the steps' span."""
    monkeypatch.setattr(timing_module, "time", StepClock([[2.0, 0.5, 0.5, 0.5, 0.1, 0.1, 0.3, 0.1]]))
    windows = []
    monkeypatch.setattr(_measure, "matmul_flops_per_s",
                        lambda dtype, min_seconds: windows.append(min_seconds) or 1e9)
    job = {"name": "mnist_mlp", "mode": "graph", "steps": 4, "config_files": [],
           "overrides": ["data.source=synthetic", *TINY_MLP], "out": str(tmp_path / "row.json"),
           "run_dir": str(tmp_path / "run")}
    _measure.measure(job)
    row = json.loads((tmp_path / "row.json").read_text())["row"]
    assert row["step_ms_median"] == pytest.approx(100)
    assert row["images_per_s"] == pytest.approx(4 * 32 / 0.6)
    assert row["trace_s"] == pytest.approx(2.0 - 0.1)
    step_flops = 3 * 32 * MLP_FORWARD_FLOPS  # the profiler's count is within 1% of it
    assert row["achieved_flops_per_s"] == pytest.approx(step_flops / 0.1, rel=0.01)
    assert row["mfu"] == pytest.approx(step_flops / 0.1 / 1e9, rel=0.01)
    assert windows == [pytest.approx(4 * 0.1)]  # the peak, timed as long as the 4 steps


@pytest.mark.slow
def test_repeats_run_a_mode_in_turns_and_keep_the_median_run(tmp_path, monkeypatch):
    # The worker's process is test_compare_writes_one_row_per_mode's to check.
    monkeypatch.setattr(_compare, "measure_mode", measure_tensorflow_modes_here)
    results = _compare.compare("mnist_mlp", ["loop_function"], steps=2, repeats=3,
                               overrides=TINY_MLP, out_dir=tmp_path, quiet=True)
    row, = results["rows"]
    runs = row["step_ms_runs"]
    assert len(runs) == 3 and row["step_ms_median"] == sorted(runs)[1]
    assert all((tmp_path / "modes" / name / "config.yaml").exists()
               for name in ("loop_function", "loop_function-2", "loop_function-3"))

    # The folder becomes rows of the results store, with the command that measures it again.
    assert main(["record", str(tmp_path), "--group", "tiny", "--machine", "EPYC-AVX2",
                 "--store", str(tmp_path / "store")]) == 0
    with (tmp_path / "store" / "speed.csv").open() as file:
        stored = {found["metric"]: found for found in csv.DictReader(file)}
    step = stored["step_ms_median"]
    assert step["command"] == shlex.join(["recipes", "compare", "mnist_mlp", "modes=loop_function",
                                          "steps=2", "repeats=3", *TINY_MLP])
    assert [float(run) for run in step["runs"].split(";")] == pytest.approx(runs, rel=1e-5)
    assert (step["group"], step["mode"], step["batch"], step["machine"]) == (
        "tiny", "loop_function", "32", "EPYC-AVX2")
    assert float(stored["step_vs_loop_function"]["value"]) == 1.0


def tiny_compiled_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(3, activation="softmax",
                                                 kernel_regularizer=keras.regularizers.L2(0.1))])
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy())
    return model


def batches(count=4):
    rng = np.random.default_rng(0)
    return tf.data.Dataset.from_tensor_slices(
        (rng.normal(size=(8 * count, 4)).astype("float32"), rng.integers(0, 3, 8 * count))
    ).batch(8)


def test_the_hand_written_step_uses_the_compiled_loss():
    """Its loss is the one `evaluate` reports: reduced, regularization included."""
    model = tiny_compiled_model()
    images, labels = next(iter(batches()))
    expected = model.evaluate(images, labels, verbose=0)
    loss = _loops.step_body(model)(images, labels)
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_loop_function_is_a_tf_function_and_loop_eager_is_not():
    model = tiny_compiled_model()
    iterator = iter(batches().repeat())
    graph_step = _loops.train_step(model, use_function=True)
    eager_step = _loops.train_step(model, use_function=False)
    assert isinstance(graph_step, tf.types.experimental.PolymorphicFunction)
    assert not isinstance(eager_step, tf.types.experimental.PolymorphicFunction)
    before = model.get_weights()[0].copy()
    eager_step(iterator)
    graph_step(iterator)
    graph_step(iterator)
    assert graph_step.experimental_get_tracing_count() == 1
    assert not np.allclose(before, model.get_weights()[0])  # both steps train


def test_the_epoch_function_trains_as_the_steps_do_in_one_call():
    """loop_epoch: the same weights as four loop_function steps, from one
    traced function called twice."""
    stepped, whole = tiny_compiled_model(), tiny_compiled_model()
    step = _loops.train_step(stepped, use_function=True)
    iterator = iter(batches())
    for _ in range(4):
        step(iterator)
    epoch = _loops.train_epoch(whole)
    iterator = iter(batches())
    epoch(iterator, tf.constant(1))
    epoch(iterator, tf.constant(3))
    assert epoch.experimental_get_tracing_count() == 1
    for a, b in zip(stepped.get_weights(), whole.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert int(whole.optimizer.iterations) == 4


@pytest.mark.parametrize("text, message", [("fast,graph", "Unknown mode(s) fast"), ("", "(none)"),
                                           ("eager,graph,eager", "modes= names eager twice")])
def test_bad_modes_are_user_errors(text, message):
    with pytest.raises(UserError, match=message.replace("(", "\\(").replace(")", "\\)")):
        _compare.parse_modes(text)


@pytest.mark.skipif(not machine.installed("torch"), reason="torch is not installed")
def test_keras_backend_in_the_environment_lets_compare_measure_the_modes_it_names(
        tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    monkeypatch.chdir(tmp_path)
    measured = []

    def measure_mode(name, mode, *job):
        measured.append(mode)
        raise UserError("measured")  # what compare asked for is all this test reads

    monkeypatch.setattr(_compare, "measure_mode", measure_mode)
    # torch's two modes share a process: compare asks for both at once.
    monkeypatch.setattr(_compare, "measure_modes", lambda name, modes, *job: [
        measure_mode(name, mode) for mode in modes])
    with pytest.raises(UserError, match="measured"):
        main(["compare", "mnist_mlp", "modes=torch_eager,torch_compile", "steps=2", *TINY_MLP])
    assert measured == ["torch_eager"]


def test_a_tensorflow_tool_refuses_keras_backend_naming_it(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    with pytest.raises(UserError, match="scaling does not take KERAS_BACKEND=torch: "
                                        "it runs tf.distribute's MirroredStrategy"):
        main(["scaling", "mnist_mlp"])


def test_an_unwritable_results_folder_is_one_line_before_measuring(tmp_path, monkeypatch):
    (tmp_path / "a file").write_text("")
    monkeypatch.setattr(_compare, "measure_mode", lambda *args: pytest.fail("measured"))
    # where runs/ cannot be made: compare's default folder, from a read-only folder
    monkeypatch.setattr(_compare, "RUNS_DIR", tmp_path / "a file" / "runs")
    with pytest.raises(UserError, match="run it from a folder you can write to"):
        _compare.compare("mnist_mlp", ["eager"], steps=2, overrides=TINY_MLP)


@pytest.mark.parametrize("option, text, minimum", [("steps", "1", 2), ("repeats", "0", 1),
                                                   ("repeats", "two", 1)])
def test_bad_counts_are_user_errors(option, text, minimum):
    with pytest.raises(UserError, match=f"{option}= expects an integer of at least {minimum}"):
        parse_count(option, text, minimum)


class Clock:
    """Stands in for the `time` module in keras_course_recipes.tools.measure: `perf_counter`
    returns the given readings in turn."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def perf_counter(self):
        return self.readings.pop(0)


def test_the_matmul_rate_counts_every_multiply_add_of_the_calls_it_timed(monkeypatch):
    """Two calls of two 64x64 matmuls in 1.2 s: 2 x 64^3 FLOPs each."""
    monkeypatch.setattr(_measure, "time", Clock(0.0, 0.6, 1.2))
    rate = _measure.matmul_flops_per_s(tf.float32, size=64, chain=2, min_seconds=1.0)
    assert rate == pytest.approx(2 * 2 * (2 * 64**3) / 1.2)


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(_compare.SIZES))
def test_every_default_size_builds(module, tiny_config):
    """compare-sizes' default sizes, each built as its recipe builds it (the
    docs' compare-sizes commands time the first two only)."""
    key, values = _compare.SIZES[module]
    params = [kit.load(module).build(tiny_config(module, f"{key}={json.dumps(value)}"))
              .model.count_params() for value in values]
    assert params == sorted(params) and len(set(params)) == len(values)
