"""TensorBoard: graphs, scalars and profiles, read back with TensorBoard's own event reader."""

import csv
import json
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorflow.core.protobuf import config_pb2
from xprof.convert import raw_to_tool_data

import keras_course_recipes as kit
from keras_course_recipes import recipe_config, harness
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import graph as _graph
from keras_course_recipes.tools import profile as _profile

from conftest import run_with


def events(log_dir):
    accumulator = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def op_types(graph_def):
    return ({node.op for node in graph_def.node}
            | {node.op for function in graph_def.library.function for node in function.node_def})


def train(tiny_config, *overrides):
    config = tiny_config("mnist_mlp", "train.steps_per_epoch=4", *overrides)
    harness.train(config)
    return Path(config["run"]["dir"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_the_training_step_graph_is_written(mode, tiny_config, capsys):
    logs = train(tiny_config, f"execution.mode={mode}", "callbacks.graph=true") / "tensorboard"
    written = events(logs / "train")
    assert written.SummaryMetadata("train_step").plugin_data.plugin_name == "graph_run_metadata_graph"
    run = config_pb2.RunMetadata.FromString(written.Tensors("train_step")[0].tensor_proto.string_val[0])
    assert any("MatMul" in op_types(graph.pre_optimization_graph) for graph in run.function_graphs)
    assert "(TensorBoard, Graphs tab)" in capsys.readouterr().out


@pytest.mark.slow
def test_an_eager_run_says_why_there_is_no_graph(tiny_config, capsys):
    logs = train(tiny_config, "execution.mode=eager", "callbacks.graph=true") / "tensorboard"
    assert "no graph in eager mode" in capsys.readouterr().out
    assert "train_step" not in events(logs / "train").Tags()["tensors"]


@pytest.mark.slow
def test_the_epoch_scalars_are_written(tiny_config):
    run_dir = train(tiny_config, "train.epochs=2")
    train_events, validation = (events(run_dir / "tensorboard" / split)
                                for split in ("train", "validation"))
    assert {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "epoch_time_step_ms",
            "epoch_time_input_wait_fraction"} <= set(train_events.Tags()["tensors"])
    assert {"epoch_loss", "epoch_accuracy"} <= set(validation.Tags()["tensors"])
    with (run_dir / "history.csv").open() as file:
        history = list(csv.DictReader(file))
    for split, prefix in ((train_events, ""), (validation, "val_")):
        logged = [tf.make_ndarray(event.tensor_proto) for event in split.Tensors("epoch_loss")]
        assert logged == pytest.approx([float(row[prefix + "loss"]) for row in history], rel=1e-5)


@pytest.mark.slow
def test_a_profile_trace_is_written(tiny_config):
    logs = train(tiny_config, "callbacks.profile=2,3") / "tensorboard"
    # The harness's profiling TensorBoard writes beside the recipe's scalars.
    traces = list((logs / "profile" / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1
    # What the Profile tab's per-op table reads from it. xprof, the tab's
    # backend, documents no Python API for its tables: this is the converter
    # its server calls (xprof/profile_plugin.py imports xprof.convert.
    # raw_to_tool_data, and its own integration tests call this function),
    # as of xprof==2.21.6, which tensorboard-plugin-profile==2.21.6 pins
    # (requirements.txt, constraints.txt). recipes/_profile.py reads it too.
    op_stats, _ = raw_to_tool_data.xspace_to_tool_data(traces, "framework_op_stats", {})
    # Types are TensorFlow's kernels: MatMul, or _MklMatMul where oneDNN is on.
    kernels = set()
    for table in json.loads(op_stats):
        type_column = [column["id"] for column in table["cols"]].index("type")
        kernels |= {row["c"][type_column]["v"] for row in table["rows"]}
    assert any(kernel.endswith("MatMul") for kernel in kernels)


@pytest.mark.parametrize("value, message", [
    ("x,y", "callbacks.profile takes the first and last training step"),
    ("[3,2]", "callbacks.profile takes the first and last training step"),
    ("[1,2,3]", "callbacks.profile takes the first and last training step"),
])
def test_bad_profile_ranges_are_user_errors(value, message):
    with pytest.raises(UserError, match=message):
        recipe_config.resolve("mnist_mlp", overrides=[f"callbacks.profile={value}"],
                        announce=lambda line: None)


@pytest.mark.slow
def test_the_graph_command_writes_the_step_without_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    out_dir = _graph.write_graph("mnist_mlp", overrides=[
        "model.hidden_units=[16]", "data.synthetic_examples=64", "data.batch_size=16"])
    assert "MatMul" in op_types(events(out_dir / "tensorboard" / "train").Graph())
    code = (out_dir / "autograph" / "train_step.py").read_text()
    assert "def tf__step(images, labels):" in code and "ag__.if_stmt(" in code
    assert not list(out_dir.glob("**/*.keras")) and not (out_dir / "history.csv").exists()
    assert "(Graphs tab)" in capsys.readouterr().out


def test_the_graph_command_refuses_eager_mode():
    with pytest.raises(UserError, match="execution.mode=eager builds no graph"):
        _graph.write_graph("mnist_mlp", overrides=["execution.mode=eager"])


@pytest.mark.parametrize("kernel, kind", [
    ("_MklNativeFusedConv2D", "convolution, forward"),
    ("_MklNativeConv2DBackpropFilter", "convolution, filter gradient"),
    ("Conv2DBackpropInput", "convolution, input gradient"),
    ("DepthwiseConv2dNativeBackpropFilter", "convolution, filter gradient"),
    ("FusedBatchNormGradV3", "batch norm, fused"),
    ("_MklConcatV2", "concatenation (forward; its gradient is slices)"),
    ("ReluGrad", "ReLU"), ("MaxPoolGrad", "pooling"),
    ("_MklMatMul", "matmul (dense layers; MatmulFilterGradientConv2D's filter gradients)"),
    ("Tile", "reductions and broadcasts (batch norm's statistics and their gradients)"),
    ("SquaredDifference", "element-wise (batch norm's scaling, the optimizer, weight decay)"),
    ("IteratorGetNext", "input pipeline"), ("GatherV2", "other"),
])
def test_kernels_are_sorted_into_kinds_of_work(kernel, kind):
    assert _profile.kind_of(kernel) == kind


@pytest.mark.slow
def test_the_profile_command_tables_where_the_step_time_goes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    # A recipe with a warm-up, which one profiled epoch has no room for.
    path = _profile.profile("densenet_cifar10_wide", overrides=[
        "data.source=synthetic", "data.synthetic_examples=256", "data.batch_size=16",
        "model.depth=10", "model.growth_rate=8", "execution.onednn=null"])
    rows = [line.split("|")[1:4] for line in path.read_text().splitlines()[4:] if line.startswith("| ")]
    kinds = {kind.strip(): float(share.strip().rstrip("%")) for kind, _, share in rows}
    assert {"convolution, forward", "convolution, input gradient", "convolution, filter gradient",
            "concatenation (forward; its gradient is slices)",
            "reductions and broadcasts (batch norm's statistics and their gradients)"} <= set(kinds)
    assert sum(kinds.values()) == pytest.approx(100, abs=0.1 * len(kinds))


@pytest.mark.slow
def test_without_the_tensorboard_package_a_run_goes_on_without_its_logs(tiny_config, monkeypatch,
                                                                        capsys):
    """TensorFlow 2.21 no longer installs tensorboard: a kit installed without it
    stopped every run on Keras' TBNotInstalledError traceback."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # not importable, as if not installed
    config = tiny_config("mnist_mlp")
    metrics = run_with(kit.load("mnist_mlp"), config)
    assert metrics["epochs_completed"] == 1
    assert not (Path(config["run"]["dir"]) / "tensorboard").exists()
    assert ("note: no TensorBoard logs: Keras' TensorBoard callback writes through tf.summary, "
            "and tensorboard is not installed here (make setup)") in capsys.readouterr().out
