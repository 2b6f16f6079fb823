"""tf.function lessons, run and printed, then an LSTM stepped in Python, trained.

What a course teaches about graph execution, each lesson a function that
runs it and returns what it showed (tests/test_graph_lessons.py checks every
claim):

1. `retracing`: a `tf.function` traces once per new signature. Python values
   are part of it, tensors only by dtype and shape; `reduce_retracing`
   generalizes shapes, `input_signature` fixes them.
2. `printing`: `print` runs while tracing, once; `tf.print` on every call.
3. `autograph`: a `while` on a tensor becomes a `While` op; a Python `range`
   loop is unrolled, a `tf.range` loop is a `While` op.

Then it trains its model, an LSTM reading MNIST images row by row whose
`LSTMCell` is stepped in a Python loop (`models/rnn.py`): eagerly, each of
the 28 steps dispatches its ops from Python; as a graph, the loop is
unrolled once. `make compare NAME=graph_lessons` times the difference: the
lecture reports about 10x, and the graph measured here is about that much
faster, through `fit` and as a hand-written step, on a 2-core CPU: the table
in docs/tf-function.md, generated from results/speed.csv (group
`benchmark-lessons lstm EPYC-AVX2`: its command, machine and date). The
lessons on whole-epoch functions, resuming in another mode and `model.export`
are commands; docs/tf-function.md has them and the timings.

    make recipe NAME=graph_lessons
    make compare NAME=graph_lessons ARGS="modes=eager,graph,loop_eager,loop_function,loop_epoch"

Copy this file anywhere the kit is installed (`pip install` this
repository, README), and it runs on its own, checking each
`key=value` as the repository does; `run.dir=DIR` resumes a run:

    python graph_lessons.py data.source=synthetic train.epochs=1
"""

# ## Setup
# The kit this recipe runs on, the keras-course-recipes package: its run
# directory, checks, lock and resume, the data pipeline, the model's builder
# and the Timing callback. `runs.start` before Keras loads: run as a program,
# a Ctrl-C at any moment from there on stops it with one line.
import contextlib
import io
import json
from types import SimpleNamespace

try:
    from keras_course_recipes import runs
    runs.start(__name__)  # as a program: Ctrl-C, and a missing backend, are one line
    from keras_course_recipes import data
    from keras_course_recipes.callbacks.timing import Timing
    from keras_course_recipes.models.rnn import row_lstm
except ImportError as missing:  # the kit, or a file of it, is not where this Python runs
    if str(missing.path).endswith("keras_course_recipes.py"):  # a file of that name, not the kit
        raise SystemExit(f"error: {missing.path} hides the keras_course_recipes package: "
                         "rename it.") from None
    raise SystemExit(f"error: {missing}: this recipe runs on its kit, the keras-course-recipes "
                     "package: pip install it where this Python runs, or copy the recipe with "
                     "every file of the kit it imports (recipes copy NAME DIR; its README "
                     "says how).") from None

import keras
import tensorflow as tf

# ## Configuration
# What this recipe trains with, each value with its reason. `key=value` on the
# command line overrides any of them; in a notebook, edit them here. The data
# section's other keys (`source`: tfds, folder or synthetic) are
# keras_course_recipes/data.py's `DEFAULTS`; `run.dir` (where the run writes) and the
# other sections' keys are keras_course_recipes/settings.py's `DEFAULTS`.
CONFIG = {
    "data": {"name": "mnist", "batch_size": 128},
    "model": {"units": 128},  # the LSTM's state size
    "train": {
        "epochs": 5,
        "steps_per_epoch": None,  # None: one pass over the training images
        "lr": 1.0e-3,  # Adam's default rate
    },
    "execution": {
        "mode": None,  # eager, graph (a tf.function) or xla (jit_compile); None: the backend's compiled step
        "precision": "float32",  # or mixed_bfloat16, mixed_float16
        "seed": 0,
        "steps_per_execution": 1,
    },
}
# What each key of this recipe's own takes, read with CONFIG before anything
# runs: a value outside it is one line that names the key (the words are
# keras_course_recipes/settings.py's `declarations`).
CONFIG_SCHEMA = {"model.units": {"type": "int", "at_least": 1}}
# Why this recipe trains on TensorFlow alone: `recipes run` on JAX or torch refuses it, saying so.
TENSORFLOW_ONLY = "the tf.function lessons"


# ## Lesson 1: retracing


def retracing():
    """Counts the traces of `x * x` called with different arguments.

    Returns:
        {case: number of traces}.
    """

    def square(x):
        return x * x

    def traces(function, *arguments):
        for argument in arguments:
            function(argument)
        return function.experimental_get_tracing_count()

    shapes = [tf.ones([n]) for n in (1, 2, 3, 4)]
    return {
        # Each new Python value is a new signature: 2 and 3 trace twice.
        "python ints 2, 3, 2": traces(tf.function(square), 2, 3, 2),
        # Tensors are traced by dtype and shape, not value: once.
        "tensors 2, 3": traces(tf.function(square), tf.constant(2), tf.constant(3)),
        "tensors int32 2, float32 2.0": traces(tf.function(square), tf.constant(2),
                                               tf.constant(2.0)),
        # A new shape retraces...
        "shapes [1], [2], [3], [4]": traces(tf.function(square), *shapes),
        # ...unless asked to generalize: the second shape traces for [None].
        "shapes [1]..[4], reduce_retracing": traces(
            tf.function(square, reduce_retracing=True), *shapes),
        # Or the signature is fixed up front: one trace, any length.
        "shapes [1]..[4], input_signature [None]": traces(
            tf.function(square, input_signature=[tf.TensorSpec([None], tf.float32)]), *shapes),
    }


# ## Lesson 2: print and tf.print


def printing(log_path, calls=3):
    """Calls a `tf.function` with a `print` and a `tf.print` `calls` times.

    `tf.print` writes to `log_path`, so that its lines can be counted.

    Returns:
        {"calls", "print lines", "tf.print lines"}.
    """

    @tf.function
    def double(x):
        print("print: tracing double")  # Python: runs while tracing
        tf.print("tf.print: double ran", output_stream=f"file://{log_path}")  # an op in the graph
        return 2 * x

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for _ in range(calls):
            double(tf.constant(1.0))
    return {"calls": calls,
            "print lines": printed.getvalue().count("\n"),
            "tf.print lines": log_path.read_text().count("\n")}


# ## Lesson 3: AutoGraph


def halve_until_small(x):
    while tf.reduce_sum(x) > 1:
        x = x / 2
    return x


def double_three_times_python_range(x):
    for _ in range(3):
        x = x * 2
    return x


def double_three_times_tf_range(x):
    for _ in tf.range(3):
        x = x * 2
    return x


def autograph():
    """Traces three functions and reads their graphs' top-level ops.

    Returns:
        {function name: {"ops": sorted op types, "Mul ops": count,
        "while loop": whether a While op is there}}, and "code": what
        `tf.autograph.to_code` makes of `halve_until_small`.
    """
    found = {}
    for function in (halve_until_small, double_three_times_python_range,
                     double_three_times_tf_range):
        graph = tf.function(function).get_concrete_function(tf.TensorSpec([3])).graph
        types = [op.type for op in graph.get_operations()]
        found[function.__name__] = {
            "ops": sorted(set(types)), "Mul ops": types.count("Mul"),
            "while loop": any(t in ("While", "StatelessWhile") for t in types)}
    found["code"] = tf.autograph.to_code(halve_until_small)
    return found


def report(lessons):
    """The lessons' results as text."""
    lines = ["", "== Lesson 1: traces of x * x"]
    lines += [f"  {case:<42} {count} trace{'s' * (count != 1)}"
              for case, count in lessons["retracing"].items()]
    printed = lessons["printing"]
    lines += ["", f"== Lesson 2: {printed['calls']} calls of a tf.function",
              f"  print:    {printed['print lines']} line (while tracing)",
              f"  tf.print: {printed['tf.print lines']} lines (every call)",
              "", "== Lesson 3: AutoGraph (the top level of each traced graph)"]
    lines += [f"  {name:<34} While loop: {'yes' if found['while loop'] else 'no '}  "
              f"Mul ops: {found['Mul ops']}"
              for name, found in lessons["autograph"].items() if name != "code"]
    lines += ["  AutoGraph's code for `while tf.reduce_sum(x) > 1: x = x / 2` calls:"]
    lines += [f"    {line.strip()}" for line in lessons["autograph"]["code"].splitlines()
              if "while_stmt" in line]
    return "\n".join(lines) + "\n"


# ## The model: an LSTM stepped in Python


# ## The data and the compiled model
def build(config, run=None):
    """The compiled model and its data: what `run` trains, and what the
    tools (compare, graph) time and draw.

    Args:
        run: the run it is built for (`run`'s `RecipeRun`), whose batches
            start at its `initial_epoch`, the ones an uninterrupted run
            trains on; None (the tools): a fresh start, epoch 0.
    """
    train, execution = config["train"], config["execution"]
    keras.utils.set_random_seed(execution["seed"])
    keras.mixed_precision.set_global_policy(execution["precision"])

    # MNIST's 28 rows of 28 pixels are 28 time steps of 28 features.
    splits = data.load(config["data"], seed=execution["seed"],
                       steps_per_epoch=train["steps_per_epoch"],
                       initial_epoch=run.initial_epoch if run else 0)

    model = row_lstm(splits.input_shape, splits.num_classes, units=config["model"]["units"])

    optimizer = keras.optimizers.Adam(learning_rate=train["lr"])
    loss = keras.losses.SparseCategoricalCrossentropy()  # labels are class indices
    # The execution mode is only a compile argument: op by op from Python
    # (eager), one tf.function per step (graph), or compiled by XLA (xla).
    mode = execution["mode"]
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"],
                  run_eagerly=mode == "eager", jit_compile=mode == "xla",
                  steps_per_execution=execution["steps_per_execution"])
    return SimpleNamespace(model=model, data=splits)


# ## Training and evaluation
def run(config, run):
    """Runs the lessons, writing what they showed to `run.dir/lessons.json`,
    then trains the model, writing into `run.dir`, and evaluates it.

    Args:
        run: the kit's `RecipeRun` (keras_course_recipes): the run
            directory `run.dir`, its callbacks, first in `fit`'s, the
            `initial_epoch` a resumed run starts at and `fit`'s `verbose`.

    Returns:
        The model, its data, the Timing callback and the `test` metrics.
    """
    log_path = run.dir / "tf_print.log"
    log_path.write_text("")
    lessons = {"retracing": retracing(), "printing": printing(log_path),
               "autograph": autograph()}
    (run.dir / "lessons.json").write_text(json.dumps(lessons, indent=2) + "\n")
    print(report(lessons), flush=True)

    experiment = build(config, run)
    model, splits = experiment.model, experiment.data

    timing = Timing(batch_size=splits.batch_size)  # before the logs: its numbers reach them
    callbacks = [
        *run.callbacks,  # the kit's: the run directory's (rundir.py), then the harness's
        timing,
        keras.callbacks.CSVLogger(run.dir / "history.csv", append=True),
        # tensorboard --logdir runs
        *([keras.callbacks.TensorBoard(run.dir / "tensorboard")] if runs.has_tensorboard() else []),
        keras.callbacks.ModelCheckpoint(run.dir / "checkpoints" / "last.keras"),
        # The whole training state after each epoch: run again with the same
        # run.dir, training goes on from the last finished epoch.
        keras.callbacks.BackupAndRestore(run.dir / "backup", double_checkpoint=True,
                                         delete_checkpoint=False),
    ]
    model.fit(timing.instrument(splits.train), validation_data=splits.validation,
              epochs=config["train"]["epochs"], steps_per_epoch=splits.steps_per_epoch,
              callbacks=callbacks, verbose=run.verbose)

    experiment.test = model.evaluate(splits.test, return_dict=True, verbose=0)
    experiment.timing = timing
    return experiment


# ## Run it
# `python graph_lessons.py key=value ...` in a shell; `%run graph_lessons.py key=value ...`
# in a notebook, or this cell as it is, with CONFIG's values. A wrong key or
# value is one line; `run.dir=DIR` goes on with the run in DIR.
if __name__ == "__main__":
    experiment = runs.main("graph_lessons", CONFIG, run)
