"""What an entry point sets up in its process (the command line, a recipe file's
`runs.main`), once, and what only it may set: importing the kit changes nothing.
Keras' backend and TensorFlow's oneDNN, which each reads once as it starts, asked
for before they import and refused after, in one line; and while a command or a
run goes on, SIGTERM as Ctrl-C and a standard output whose reader may go."""

import os
import signal
import sys
import threading

from keras_course_recipes import errors, machine
from keras_course_recipes.errors import UserError, install_advice


def request_backend(config):
    """Sets `KERAS_BACKEND` to `execution.backend` before Keras is imported.

    Keras reads the variable once, on import: the command line calls this
    before any command imports Keras; `harness.prepare`, for a run the command
    line did not set up, to refuse one whose Keras started on another backend
    (a notebook sets `KERAS_BACKEND` itself, before `import keras`).
    """
    wanted = config["execution"]["backend"]
    require_backend(wanted)
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = wanted
        return
    started = sys.modules["keras"].backend.backend()
    if started != wanted:
        raise UserError(
            f"execution.backend={wanted}, but Keras has started on {started} in this process, "
            "and it reads its backend once, on import. Run the recipe with `python -m keras_course_recipes` "
            f"(or make), or set KERAS_BACKEND={wanted} before importing Keras.")


def require_backend(backend):
    """Refuses, in one line, a Keras backend whose package is not installed here."""
    if not machine.installed(backend):
        raise UserError(f"execution.backend={backend} needs {backend}, which is not installed "
                        f"in this environment: {install_advice(backend)}.")


def request_onednn(config):
    """Sets `TF_ENABLE_ONEDNN_OPTS` as `execution.onednn` asks (null: leave
    TensorFlow's own choice, which turns oneDNN's kernels on only for CPUs
    with AVX-512 VNNI or newer).

    TensorFlow reads the variable once, when it starts: the command line
    calls this before importing it; `harness.prepare`, for a run the command
    line did not set up, to refuse one whose TensorFlow started with another
    setting.
    """
    wanted = config["execution"]["onednn"]
    if wanted is None:
        return
    value = "1" if wanted else "0"
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS") == value:
        return
    if sys.modules.get("tensorflow") is not None:
        raise UserError(
            f"execution.onednn={str(wanted).lower()} takes effect only before TensorFlow "
            "starts, and it has started in this process without it. Run the recipe with "
            f"`python -m keras_course_recipes` (or make), or set TF_ENABLE_ONEDNN_OPTS={value} first.")
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = value


class signals_and_output:
    """While a run trains, SIGTERM (a job scheduler's stop) ends it as Ctrl-C
    does, and once standard output's reader has gone (`| head`, a closed
    stream) what is printed is dropped instead of ending the run."""

    def __enter__(self):
        main = threading.current_thread() is threading.main_thread()
        self._term = signal.signal(signal.SIGTERM, errors.latch) if main else None
        self._stdout, sys.stdout = sys.stdout, _Tolerant(sys.stdout)

    def __exit__(self, *error):
        if self._term is not None:
            signal.signal(signal.SIGTERM, self._term)
        sys.stdout = self._stdout


class _Tolerant:
    """A stream that drops what is written once its reader has gone."""

    def __init__(self, stream):
        self.stream, self._gone = stream, stream is None

    def write(self, text):
        self._try(lambda: self.stream.write(text))
        return len(text)

    def flush(self):
        self._try(lambda: self.stream.flush())

    def _try(self, action):
        if self._gone:
            return
        try:
            action()
        except (OSError, ValueError):  # a broken pipe, or a closed stream
            self._gone = True
            try:  # Python flushes stdout at exit: point it at devnull, so that cannot raise
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            except (OSError, ValueError):
                pass

    def isatty(self):
        return not self._gone and self.stream.isatty()

    def __getattr__(self, name):
        return getattr(self.stream, name)
