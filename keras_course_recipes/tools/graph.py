"""`python -m keras_course_recipes graph NAME`: the graph of one training step, without training.

Builds the recipe, traces `fit`'s training step (`model.train_step`, as `fit`
compiles it) on the training data's shapes and writes it for TensorBoard's
Graphs tab. It also writes the Python code AutoGraph generates from the
hand-written training step of `compare`'s loop modes
(`keras_course_recipes/tools/loops.py:step_body`), which shows how Python control flow becomes
graph ops.
"""

import shlex
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command


def write_graph(name, config_files=(), overrides=()):
    """Writes recipe `name`'s training-step graph; returns the output directory."""
    out_dir = rundir.timestamped(RUNS_DIR / "graph" / name)
    # Random images unless asked otherwise: the graph depends on shapes only.
    config = recipe_config.resolve(name, config_files, [
        "data.source=synthetic", *overrides, f"run.dir={out_dir}", "run.verbose=0",
        "callbacks.graph=false",
    ], announce=lambda line: None)
    if config["execution"]["mode"] == "eager":
        raise UserError("execution.mode=eager builds no graph: the step runs op by op. "
                        "Use execution.mode=graph or xla.")
    import tensorflow as tf

    from keras_course_recipes.tools import loops

    experiment = kit.load(name).build(config)
    model, out_dir = experiment.model, Path(config["run"]["dir"])
    step = tf.function(model.train_step, jit_compile=model.jit_compile)
    graph = step.get_concrete_function(experiment.data.train.element_spec).graph
    log_dir = out_dir / "tensorboard" / "train"
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        tf.summary.graph(graph)
    writer.close()

    code_path = out_dir / "autograph" / "train_step.py"
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.write_text(
        "# What AutoGraph makes of keras_course_recipes/tools/loops.py:step_body's `step` "
        "(tf.autograph.to_code).\n" + tf.autograph.to_code(loops.step_body(model)))
    print(f"graph of {name}'s training step ({config['execution']['mode']} mode, "
          f"{len(graph.get_operations())} ops): {log_dir}\n"
          f"  open it: tensorboard --logdir {shlex.quote(str(out_dir / 'tensorboard'))}  (Graphs tab)\n"
          f"AutoGraph's code for the hand-written step: {code_path}")
    return out_dir


COMMANDS = (
    Command("graph", "write the training step's graph for TensorBoard, and AutoGraph's code, "
                     "without training", write_graph,
            tensorflow_only="it writes a tf.function's graph"),
)
