"""A recipe's command line and run. `main` is a recipe file's way in (`python
NAME.py key=value`, `%run`, a notebook cell): it checks every setting
(keras_course_recipes/settings.py), then trains through the same path as `python -m
keras_course_recipes run` (keras_course_recipes/harness.py), which opens a `Run`
here: a run directory that is locked and resumes at its last finished epoch
(keras_course_recipes/rundir.py), training through the recipe's `run`; what a user
can fix is one line. A Ctrl-C or SIGTERM at any moment, from `start` on, stops
the run with one line that says what was saved.

    if __name__ == "__main__":  # python NAME.py key=value, %run, or a notebook cell
        experiment = runs.main("NAME", CONFIG, run, CONFIG_SCHEMA)

Keras is imported only when training starts: the repository checks a config
before Keras starts, to choose its backend.
"""

import atexit
import gc
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import SimpleNamespace

from keras_course_recipes import recipe_config, errors, harness
from keras_course_recipes.errors import UserError, exit_status, note_reported
from keras_course_recipes.process import signals_and_output
# has_tensorboard: what a recipe's `run` asks before it adds Keras' TensorBoard callback.
from keras_course_recipes.rundir import has_tensorboard  # noqa: F401
from keras_course_recipes.settings import BACKEND_MODES, parse_override, written_keys


# ## A copied recipe's command line, and a notebook cell's

# The backends a recipe trains on: Keras has others (numpy, openvino) that cannot train.
KERAS_BACKENDS = tuple(BACKEND_MODES)
# The packages a recipe and its kit import, which a student's file of the same name
# (keras.py beside the recipe, or in the folder Python runs in) would stand in for.
PACKAGES = ("keras", "numpy", "yaml", "tensorflow", "jax", "torch", "tensorflow_datasets",
            "PIL", "h5py", "matplotlib")


def start(name):
    """A recipe file's first call, with its `__name__`, before `import keras`. Run as
    a program (`python NAME.py`), from here on a Ctrl-C or SIGTERM stops it with one
    line, a KERAS_BACKEND no recipe trains on is refused in one, and the collector
    skips what Keras loaded at exit; `main` puts the handlers back as it returns.
    As a program or a notebook's cell, a student's keras.py (`hidden_package`) is
    one line before the imports that follow fail on it. Imported (by the command
    line, a test), it changes nothing."""
    in_kernel = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)() is not None
    if name == "__main__":
        # (a kernel's argv[0] is its launcher's, in site-packages: not the student's folder)
        folders = [Path.cwd()] if in_kernel else [Path.cwd(), Path(sys.argv[0]).resolve().parent]
        hidden = hidden_package(folders)
        if hidden and in_kernel:  # stops the cell, as the recipe's own import guard does
            raise SystemExit(f"error: {hidden}")
        if hidden:
            print(f"error: {hidden}", file=sys.stderr)
            sys.exit(2)
    if name != "__main__" or in_kernel:
        return
    if "keras" not in sys.modules:
        problem = backend_problem(os.environ.get("KERAS_BACKEND"), Path(sys.argv[0]).name)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
    errors.install_interrupt_hooks()
    freeze_at_exit()


def backend_problem(asked, script):
    """Why Keras cannot start on backend `asked` (KERAS_BACKEND; None: Keras' default,
    tensorflow) for `python script`, in one line, or None."""
    if asked and asked not in KERAS_BACKENDS:
        return (f"KERAS_BACKEND={asked} is not a backend a recipe trains on: use "
                f"{', '.join(KERAS_BACKENDS)} (unset, Keras uses tensorflow).")
    backend = asked or "tensorflow"
    if importlib.util.find_spec(backend) is not None:
        return None
    named = f"KERAS_BACKEND={backend}" if asked else "tensorflow, Keras' default backend,"
    others = [other for other in KERAS_BACKENDS
              if other != backend and importlib.util.find_spec(other) is not None]
    return (f"{named} is not installed here: {errors.install_advice(backend)}"
            + (f", or run KERAS_BACKEND={others[0]} python {script}" if others else "") + ".")


def hidden_package(folders, names=PACKAGES):
    """Which of the packages `names` a file NAME.py in one of `folders` (the
    recipe's, the working folder) stands in for, imported or next to be, as one
    line (`./keras.py hides the keras package: rename it.`), or None."""
    folders = {Path(folder).resolve() for folder in folders}
    for name in names:
        module = sys.modules.get(name)
        if module is not None:
            origin = getattr(module, "__file__", None)
        else:
            try:
                origin = getattr(importlib.util.find_spec(name), "origin", None)
            except (ImportError, ValueError):
                origin = None
        path = Path(origin).resolve() if origin else None
        if path and path.name == f"{name}.py" and path.parent in folders:
            shown = f"./{path.name}" if path.parent == Path.cwd().resolve() else str(path)
            return f"{shown} hides the {name} package: rename it."
    return None


def freeze_at_exit():
    """TensorFlow and Keras load about 400,000 objects that live as long as the
    process, and Python's last full garbage collection, at exit, walks them all
    (about 1 s on 2 cores): frozen, they are left out of it (registered before
    Keras loads, the freeze runs after its exit handlers). Raising the
    collector's thresholds would save about 0.7 s of their import too, but a
    Ctrl-C while TensorFlow loaded then crashed the process (SIGSEGV) in 2 of 15
    tries. For a process of the kit's own: the command line, a recipe file."""
    atexit.unregister(gc.freeze)  # once
    atexit.register(gc.freeze)


def main(name, config, run, schema=None):
    """Trains recipe `name` as `python NAME.py key=value ...`, `%run NAME.py
    key=value ...` or a notebook cell does, through the same path as `recipes
    run NAME` (`harness.train`: the same checks, run directory, files and
    metrics.json), and returns what `run` returns, with `metrics`, what
    metrics.json holds. The settings are `config`, the recipe's CONFIG (with its
    `schema`, else the caller's CONFIG_SCHEMA), under the command line's
    overrides; `build`, where the caller defines it, checks a resumed run's
    backup before training. What a user can fix is one line on stderr and
    `exit_status`'s exit status; in a notebook, the line and None."""
    import keras

    caller = inspect.currentframe().f_back.f_globals  # the recipe's file, or a notebook's
    # An IPython shell runs this (a kernel's cell), not ipykernel merely imported (by jupyter_client).
    in_kernel = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)() is not None
    # A kernel's argv is its own (Jupyter's -f FILE, VS Code's --f=FILE, Colab's
    # launcher): overrides come from the command line of the file that calls this.
    ran_as_file = "__file__" in caller and Path(sys.argv[0]).name == Path(caller["__file__"]).name
    overrides = sys.argv[1:] if ran_as_file or not in_kernel else []
    folders = [Path.cwd(), *([Path(caller["__file__"]).parent] if "__file__" in caller else [])]
    try:
        with signals_and_output():
            hidden = hidden_package(folders)
            if hidden:  # a notebook's keras.py or yaml.py: keras.backend an AttributeError
                raise UserError(hidden)
            started = keras.backend.backend()
            recipe_config.check_sections(config)
            config, overrides = _without_backend(
                config, overrides, started,
                Path(caller["__file__"]).name if ran_as_file else f"{name}.py")
            config = recipe_config.settle(
                name, config, caller.get("CONFIG_SCHEMA") if schema is None else schema, [(
                    "by the backend Keras loaded", {"execution": {"backend": started}})],
                overrides, announce=print, only=caller.get("TENSORFLOW_ONLY"),
                declared=written_keys(caller["__file__"], "CONFIG") if "__file__" in caller else (),
                backend_setting=_backend_setting(started))
            onednn = config["execution"]["onednn"]
            if onednn is not None and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != str(int(onednn)):
                print(f"note: execution.onednn is read as TensorFlow starts: run with "
                      f"TF_ENABLE_ONEDNN_OPTS={int(onednn)} to be sure of it.")
            keras.backend.clear_session()  # a notebook's earlier runs: the layers' names start over
            recipe = SimpleNamespace(build=caller.get("build"), run=run)
            return harness.train(config, recipe=recipe)
    except (Exception, KeyboardInterrupt) as error:  # exit_status tells a bug, re-raised
        status, message = exit_status(error)
        if message is None:
            raise
        print(message, file=sys.stderr)
        note_reported(error)
        if not in_kernel:
            sys.exit(status)
    finally:
        errors.restore_interrupt_hooks()  # `start`'s, once the run is over


def _backend_setting(started):
    """(What asked for backend `started`, how to undo it), for `recipe_config.settle`: a
    recipe file's backend is the one Keras loaded, KERAS_BACKEND's or its own
    setting's (~/.keras/keras.json)."""
    if os.environ.get("KERAS_BACKEND") == started:
        return (f"KERAS_BACKEND={started} (the environment variable)",
                f"Run it without KERAS_BACKEND={started} (TensorFlow is the default)")
    return (f"Keras' backend, {started} (set in ~/.keras/keras.json)",
            "Run it with KERAS_BACKEND=tensorflow")


def _without_backend(config, overrides, started, script):
    """(`config`, `overrides`) less an `execution.backend` that names the backend
    Keras `started` on; any other backend, in CONFIG or on the command line, is a
    `UserError`: a recipe file's backend is KERAS_BACKEND's, read once, as its
    `import keras` runs."""
    asked = [(f"'{item}' on the command line", parse_override(item)[1]) for item in overrides
             if item.partition("=")[0].strip() == "execution.backend"]
    execution = config.get("execution", {})
    if "backend" in execution:
        asked.insert(0, ("execution.backend in CONFIG", execution["backend"]))
    for where, backend in asked:
        if backend != started:
            raise UserError(f"{where}: a recipe file trains on the backend Keras loaded when it "
                            f"was imported ({started} here); to train on {backend}, run "
                            f"KERAS_BACKEND={backend} python {script} ...")
    if "backend" in execution:  # said, and true: nothing else reads it
        config = {**config, "execution": {k: v for k, v in execution.items() if k != "backend"}}
    return config, [item for item in overrides
                    if item.partition("=")[0].strip() != "execution.backend"]
