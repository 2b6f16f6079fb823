"""What a user is told when a run cannot go on: the errors, each one line with
its exit status (`exit_status`), and Ctrl-C and SIGTERM, which stop a run
with one line at any moment once an entry point has called
`install_interrupt_hooks` (importing this module changes nothing)."""

import errno
import os
import signal
import sys
import threading
from pathlib import Path


class UserError(Exception):
    """A problem the user can fix: one line, exit status 2."""


class Interrupted(UserError):
    """Ctrl-C (exit status 130) or SIGTERM (143) stopped a run: what is saved."""

    def __init__(self, note, status=130):
        super().__init__(note)
        self.status = status


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite (exit status 3)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, as job schedulers and container runtimes stop a process."""


def exit_status(error):
    """(exit status, one line) for what a user can act on, (None, None) for a bug."""
    if isinstance(error, Interrupted):
        return error.status, str(error)
    if isinstance(error, (UserError, TrainingDiverged)):
        return 2 if isinstance(error, UserError) else 3, f"error: {error}"
    if disk_full(error):  # outside a run's training
        return 2, (f"error: the disk is full ({getattr(error, 'filename', None) or 'writing'}): free some space "
                   "and run the same command again.")
    if isinstance(error, KeyboardInterrupt):  # before training started: nothing to save
        return 143 if isinstance(error, Terminated) else 130, "interrupted."
    return None, None


# What brings each optional part inside a checkout (`make setup` installs the pinned stack
# into .venv); elsewhere, the distribution's extra of the same name.
CHECKOUT_INSTALL = {"torch": "pip install -r requirements-torch.txt -c constraints.txt "
                             "(into .venv: PyTorch's CPU build)"}


def checkout():
    """The repository the kit runs from (a clone, or its editable install), or None
    where it is installed from a wheel."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "Makefile").is_file() and (root / "pyproject.toml").is_file() else None


def install_advice(extra):
    """How to install the optional part `extra` (an extra of pyproject.toml) here:
    from a checkout, its requirements; from an installed kit, pip and the extra."""
    if checkout():
        return CHECKOUT_INSTALL.get(extra, "make setup")
    return f'pip install "keras-course-recipes[{extra}]"'


def disk_full(error):
    """Whether `error` (or what it was raised from) is a full disk: an OSError's
    ENOSPC, or TensorFlow's ResourceExhaustedError from a file it writes (the
    TensorBoard writer's), whose text is the only place that says so."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        if type(error).__name__ == "ResourceExhaustedError" and "No space left" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


# ## A Ctrl-C or SIGTERM at any moment of a program's start-up

_pending = None  # an interrupt Python dropped, until a run raises it (`raise_pending`)


def latch(number, frame):
    """Ctrl-C's and SIGTERM's handler from `install_interrupt_hooks` until a run's
    own takes over (`Run._start`): the interrupt, raised. Python drops one raised
    in a garbage collector's callback (TensorFlow's run while it loads):
    `_on_unraisable` keeps that one for `raise_pending`, which a run checks
    before it trains and after every batch. One the user's code caught is theirs."""
    raise Terminated() if number == signal.SIGTERM else KeyboardInterrupt()


def raise_pending():
    """Raises the interrupt that came and was dropped, once."""
    global _pending
    if _pending is not None:
        error, _pending = _pending, None
        raise error


def _interrupt_hook(kind, error, trace):
    # An interrupt nothing caught (a copied recipe stopped while `import keras`
    # runs): its one line, and the exit status of the signal, not a traceback.
    if not isinstance(error, KeyboardInterrupt):
        return sys.__excepthook__(kind, error, trace)
    print(exit_status(error)[1], file=sys.stderr, flush=True)
    if isinstance(error, Terminated):  # else Python ends the process by SIGINT, as Ctrl-C's
        sys.stdout.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


reported_interrupt = False  # set once an interrupt's line is printed


def note_reported(error):
    """After `error`'s line is printed: an interrupt is reported, no longer pending."""
    global _pending, reported_interrupt
    if isinstance(error, (KeyboardInterrupt, Interrupted)):
        _pending, reported_interrupt = None, True


def _on_unraisable(unraisable):
    # A dropped Ctrl-C is remembered (`raise_pending`), not printed; nor what an
    # interrupt left half-built and fails as it is collected (TensorFlow's graph
    # of a function it was tracing), once the interrupt was reported.
    global _pending
    error = unraisable.exc_value
    while error is not None and not isinstance(error, KeyboardInterrupt):
        error = error.__context__
    if error is not None:
        _pending = error
        return
    if reported_interrupt:
        return
    sys.__unraisablehook__(unraisable)


_replaced = {}  # what `install_interrupt_hooks` replaced, for `restore_interrupt_hooks`


def install_interrupt_hooks():
    """Installs `latch` for Ctrl-C and SIGTERM, and the hooks that keep an
    interrupt to one line, in a program's main thread; not inside a notebook's
    kernel, nor over handlers that are not Python's defaults. An entry point
    calls it (the command line; a recipe file run as a program, through
    `runs.start`), never an import; `restore_interrupt_hooks` undoes it."""
    if (_replaced or "ipykernel" in sys.modules
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return
    _replaced.update(signals={number: signal.getsignal(number)
                              for number in (signal.SIGINT, signal.SIGTERM)},
                     excepthook=sys.excepthook, unraisablehook=sys.unraisablehook)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, latch)
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _interrupt_hook
    if sys.unraisablehook is sys.__unraisablehook__:
        sys.unraisablehook = _on_unraisable


def restore_interrupt_hooks():
    """Puts back what `install_interrupt_hooks` replaced, where it is still ours."""
    if not _replaced or threading.current_thread() is not threading.main_thread():
        return
    for number, handler in _replaced["signals"].items():
        if signal.getsignal(number) is latch:
            signal.signal(number, handler)
    if sys.excepthook is _interrupt_hook:
        sys.excepthook = _replaced["excepthook"]
    if sys.unraisablehook is _on_unraisable:
        sys.unraisablehook = _replaced["unraisablehook"]
    _replaced.clear()
