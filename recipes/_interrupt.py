"""Ctrl-C on the command line: a KeyboardInterrupt, and a flag that outlives it.

Library code can swallow the exception. Python prints and drops one raised in
a garbage-collector callback or a `__del__` (JAX registers a gc callback even
under TensorFlow, and a CI run trained on after its SIGINT landed there), and
an `except BaseException` in a library keeps it. The flag stays set, and
`_experiment.StopAfterInterrupt` raises again at the next batch, so that one
Ctrl-C always stops a training run.
"""

import signal
import sys

pressed = False


def on_interrupt(signum, frame):
    global pressed
    pressed = True
    raise KeyboardInterrupt


def caused_by_interrupt(error):
    """Whether `error` is a KeyboardInterrupt, or was raised while handling
    one (library code that turns it into another exception)."""
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return True
        error = error.__context__
    return False


def on_unraisable(unraisable):
    # A dropped Ctrl-C is raised again at the next batch: no need to print it.
    if not caused_by_interrupt(unraisable.exc_value):
        sys.__unraisablehook__(unraisable)


def install():
    signal.signal(signal.SIGINT, on_interrupt)
    sys.unraisablehook = on_unraisable
