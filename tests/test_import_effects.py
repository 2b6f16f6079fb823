"""Importing the kit changes nothing process-wide; an entry point sets up what a run
needs (a Ctrl-C that is one line) and puts it back when it returns."""

import json
import signal
import subprocess
import sys

import pytest

from conftest import ROOT

# The libraries the kit's modules import, imported first: what they change is theirs.
LIBRARIES = ["keras", "tensorflow", "tensorflow_datasets", "keras_cv", "jax", "matplotlib.pyplot",
             "torch"]
SNAPSHOT = """
import atexit, gc, signal, sys, warnings

def snapshot():
    return {"SIGINT": repr(signal.getsignal(signal.SIGINT)),
            "SIGTERM": repr(signal.getsignal(signal.SIGTERM)),
            "excepthook": repr(sys.excepthook), "unraisablehook": repr(sys.unraisablehook),
            "stdout": repr(sys.stdout), "warnings": [repr(f) for f in warnings.filters],
            "atexit": atexit._ncallbacks(),
            "gc": [gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()]}
"""
IMPORT_EVERYTHING = SNAPSHOT + """
import importlib, json, pkgutil
for library in sys.argv[1:]:
    importlib.import_module(library)
before = snapshot()
package = importlib.import_module("keras_course_recipes")
for info in pkgutil.walk_packages(package.__path__, "keras_course_recipes."):
    importlib.import_module(info.name)
for subpackage in ("recipes", "models", "callbacks"):  # mapped from folders of their own
    found = importlib.import_module("keras_course_recipes." + subpackage)
    for info in pkgutil.walk_packages(found.__path__, found.__name__ + "."):
        importlib.import_module(info.name)
after = snapshot()
print(json.dumps({key: [before[key], after[key]] for key in before if before[key] != after[key]}))
"""
START_AND_MAIN = SNAPSHOT + """
import importlib, json
from keras_course_recipes import errors, runs
before = snapshot()
runs.start("keras_course_recipes.recipes.mnist_mlp")  # imported, not run: nothing changes
imported = snapshot()
runs.start("__main__")
started = signal.getsignal(signal.SIGINT) is errors.latch and sys.excepthook is not sys.__excepthook__
recipe = importlib.import_module("keras_course_recipes.recipes.mnist_mlp")
sys.argv = ["mnist_mlp.py", "data.source=synthetic", "data.synthetic_examples=32",
            "data.batch_size=16", "train.epochs=1", "train.steps_per_epoch=1", "run.verbose=0"]
runs.main("mnist_mlp", recipe.CONFIG, recipe.run)
after = snapshot()
print(json.dumps({"imported": imported == before, "started": started,
                  # What `start` replaced (the run imported Keras, which sets its own warnings).
                  "restored": {key: after[key] for key in ("SIGINT", "SIGTERM", "excepthook",
                                                           "unraisablehook", "stdout")
                               if before[key] != after[key]}}))
"""


def python(script, *args, cwd):
    # As a terminal starts it: Ctrl-C's default action (pytest-xdist's workers ignore SIGINT,
    # a child inherits that, and `install_interrupt_hooks` leaves a handler it did not expect).
    result = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, capture_output=True,
                            text=True, timeout=300, env={"PYTHONPATH": str(ROOT),
                                                         "TF_CPP_MIN_LOG_LEVEL": "3"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter
def test_importing_every_module_of_the_kit_changes_nothing_process_wide(tmp_path):
    """Signal handlers, sys.excepthook and sys.unraisablehook, sys.stdout, the warnings
    filters, atexit and the garbage collector, before and after every import."""
    installed = [name for name in LIBRARIES if __import__("importlib.util").util.find_spec(
        name.partition(".")[0])]
    assert python(IMPORT_EVERYTHING, *installed, cwd=tmp_path) == {}


@pytest.mark.slow  # a fresh interpreter
def test_a_recipe_files_start_sets_up_the_process_and_main_puts_it_back(tmp_path):
    found = python(START_AND_MAIN, cwd=tmp_path)
    assert found == {"imported": True, "started": True, "restored": {}}
