"""`python -m keras_course_recipes profile NAME`: where a training step's time goes.

Trains the recipe for a few steps with TensorBoard's profiler on
(`callbacks.profile`), then sums the per-op table that the Profile tab shows
(xprof's `framework_op_stats`, read from the trace) by kind of work:
convolutions, batch norm, concatenation, and so on. TensorBoard shows the
table op by op; nothing in it adds it up by kind, so this does.
"""

import json
import shlex
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, harness, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.errors import install_advice
from keras_course_recipes.tools import Command, tables

WARMUP_STEPS, PROFILED_STEPS = 5, 3

# Kind of work by TensorFlow kernel name (oneDNN's carry an _Mkl prefix),
# first match wins. The backward pass of each layer counts with its kind.
# Keras 3's BatchNormalization runs on the TensorFlow backend as reductions and
# element-wise ops, not TensorFlow's fused kernel: its cost shows in those two rows.
KINDS = [
    # A convolution's three kernels apart: the same arithmetic, not the same speed.
    ("convolution, filter gradient", ("BackpropFilter",)),
    ("convolution, input gradient", ("BackpropInput",)),
    ("convolution, forward", ("Conv2D", "Conv3D", "DepthwiseConv")),
    ("batch norm, fused", ("BatchNorm",)),
    ("concatenation (forward; its gradient is slices)", ("Concat", "Slice")),
    ("ReLU", ("Relu",)),
    ("pooling", ("Pool",)),
    ("matmul (dense layers; MatmulFilterGradientConv2D's filter gradients)", ("MatMul",)),
    ("reductions and broadcasts (batch norm's statistics and their gradients)",
     ("Mean", "Sum", "Tile")),
    ("element-wise (batch norm's scaling, the optimizer, weight decay)",
     ("Assign", "Mul", "Add", "Sub", "Sqrt", "Div", "Neg", "Square", "Cast", "Maximum",
      "Minimum", "Select")),
    ("input pipeline", ("Dataset", "Iterator")),
]


def kind_of(kernel):
    """The kind of work that TensorFlow kernel `kernel` does."""
    for kind, markers in KINDS:
        if any(marker in kernel for marker in markers):
            return kind
    return "other"


def profile(name, config_files=(), overrides=()):
    """Profiles recipe `name`'s training steps; prints and returns the table's path."""
    out_dir = rundir.timestamped(RUNS_DIR / "profile" / name)
    first = WARMUP_STEPS + 1
    forced = ["train.epochs=1", f"train.steps_per_epoch={WARMUP_STEPS + PROFILED_STEPS}",
              f"run.dir={out_dir}", "run.verbose=0"]
    config = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
    if config["train"].get("warmup_epochs"):  # one epoch leaves no room for a warm-up
        forced.append("train.warmup_epochs=0")
    config = recipe_config.resolve(name, config_files, [*overrides, *forced], announce=print)
    if config["execution"]["mode"] == "eager":
        raise UserError("profile times graph ops; execution.mode=eager runs op by op "
                        "from Python. Use execution.mode=graph or xla.")
    import keras  # imports TensorFlow: only once the command runs

    with harness.prepare(config).scope():
        experiment = kit.load(name).build(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_config(out_dir, config)  # says what this profile measured
    data = experiment.data
    # Keras' TensorBoard profiler; no validation: the profile covers
    # training steps only.
    profiler = keras.callbacks.TensorBoard(out_dir / "tensorboard",
                                           profile_batch=(first, first + PROFILED_STEPS - 1))
    experiment.model.fit(data.train, epochs=config["train"]["epochs"],
                         steps_per_epoch=data.steps_per_epoch, callbacks=[profiler],
                         verbose=rundir.fit_verbose(config))
    traces = sorted((out_dir / "tensorboard" / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    if not traces:
        raise UserError(f"The profiler wrote no trace under {out_dir}: is tensorboard-plugin-profile "
                        f"installed ({install_advice('profile')})?")
    rows = by_kind(op_times(traces[-1]))
    columns = ["kind of work", "ms per step", "share"]
    table = tables.markdown_table(columns, [
        dict(zip(columns, (kind, f"{ms / PROFILED_STEPS:.1f}", f"{share:.1%}")))
        for kind, ms, share in rows])
    path = out_dir / "profile_table.md"
    path.write_text(f"{name}: self time of the host's ops, summed over its threads, per "
                    f"step of {PROFILED_STEPS} profiled training steps ({config['execution']['mode']} mode, batch "
                    f"{experiment.data.batch_size}, {config['execution']['precision']})\n\n"
                    + table + "\n")
    print(path.read_text() + f"\nwritten to {path}; the trace: tensorboard --logdir "
          f"{shlex.quote(str(out_dir / 'tensorboard'))} (Profile tab)")
    return path


def op_times(trace):
    """{kernel type: self time in ms} from the trace's per-op table."""
    from xprof.convert import raw_to_tool_data

    op_stats, _ = raw_to_tool_data.xspace_to_tool_data([Path(trace)], "framework_op_stats", {})
    times = {}
    for table in json.loads(op_stats):
        columns = [column["id"] for column in table["cols"]]
        kind, self_time = columns.index("type"), columns.index("total_self_time")
        for row in table["rows"]:
            cells = row["c"]
            if cells[kind]["v"] == "IDLE":
                continue
            times[cells[kind]["v"]] = times.get(cells[kind]["v"], 0.0) + cells[self_time]["v"] / 1e3
    return times


def by_kind(times):
    """[(kind, ms, share)] from {kernel: ms}, the largest first."""
    total = sum(times.values())
    kinds = {}
    for kernel, ms in times.items():
        kinds[kind_of(kernel)] = kinds.get(kind_of(kernel), 0.0) + ms
    return sorted(((kind, ms, ms / total) for kind, ms in kinds.items()),
                  key=lambda row: -row[1])


COMMANDS = (
    Command("profile", "profile a few training steps; a table of where their time goes, "
                       "by kind of op", profile,
            tensorflow_only="it reads TensorFlow's profiler"),
)
