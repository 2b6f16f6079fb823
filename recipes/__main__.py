"""Command line: `python -m recipes COMMAND ...`; `python -m recipes -h` says what
each command does.

The commands are a table, `COMMANDS`: `list`, `run` and `show` here, and
what each tool module in `recipes/tools/` declares in its `COMMANDS`, with
its options. Each command imports what it needs when it runs: `list` and
`show` answer without importing TensorFlow.
"""

import argparse
import errno
import os
import sys

import recipes
from recipes import UserError, _config, _environment
from recipes.tools import (Command, augment_bench, compare, curves, data_bench, graph, memory,
                           multiworker, preview, profile, soak, sweep)

# TensorFlow's C++ start-up notices are noise to a reader of a training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def list_recipes():
    width = max(map(len, recipes.names()))
    for name in recipes.names():
        print(f"{name:<{width}}  {recipes.description(name)}")


def train(name, config_files, overrides):
    config = _config.resolve(name, config_files, overrides, announce=print)
    from recipes import harness

    harness.train(config)


def show(name, config_files, overrides):
    config = _config.resolve(name, config_files, overrides, announce=lambda line: None)
    print(_config.dump(config), end="")


COMMANDS = {command.name: command for command in (
    Command("list", "every recipe, with a one-line description", list_recipes, on_recipe=False,
            without_tensorflow=True),
    *curves.COMMANDS,
    Command("run", "train a recipe", train, without_tensorflow=True),
    Command("show", "print a recipe's resolved config as YAML", show, without_tensorflow=True),
    *sweep.COMMANDS, *compare.COMMANDS, *preview.COMMANDS, *graph.COMMANDS,
    *profile.COMMANDS, *soak.COMMANDS, *augment_bench.COMMANDS, *data_bench.COMMANDS,
    *memory.COMMANDS, *multiworker.COMMANDS,
)}


def build_parser():
    """The command line's parser: a subcommand for each of `COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="python -m recipes",
        description="Train Keras 3 recipes in eager, graph or XLA mode.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS.values():
        sub = subparsers.add_parser(command.name, help=command.help)
        if command.on_recipe:
            sub.add_argument("name", help="recipe name (see `list`)")
            sub.add_argument("overrides", nargs="*", metavar="key=value",
                             help="config overrides, e.g. train.epochs=2")
            sub.add_argument("--config", action="append", default=[], metavar="FILE",
                             dest="config_files",
                             help="extra YAML config, applied after the recipe's (repeatable)")
        if command.arguments:
            command.arguments(sub)
    return parser


def main(argv=None):
    cli = build_parser()
    # key=value items may also follow options (`sweep NAME --grid ... k=v`),
    # which argparse leaves over.
    args, extra = cli.parse_known_args(argv)
    arguments = dict(vars(args))
    command = COMMANDS[arguments.pop("command")]
    if not (command.without_tensorflow or _environment.has_tensorflow()):
        raise UserError(f"{command.name} needs TensorFlow, which is not installed here; "
                        "without it, `run NAME execution.backend=jax` trains the recipes "
                        "that run on JAX (docs/backends.md).")
    if extra and (not command.on_recipe or any(item.startswith("-") for item in extra)):
        cli.error(f"unrecognized arguments: {' '.join(extra)}")
    if not command.on_recipe:
        command.run(**arguments)
        return 0

    items = [*args.overrides, *extra]
    for key in (item.partition("=")[0] for item in items):
        owners = [other.name for other in COMMANDS.values() if other.takes(key)]
        if owners and not command.takes(key):
            cli.error(f"{key}= belongs to {', '.join(owners)}")
    # The command's options are split off first: the rest is the config,
    # resolved now, before any command imports TensorFlow, so that a typo
    # fails at once, and execution.backend and execution.onednn can still
    # reach Keras' and TensorFlow's start.
    options, arguments["overrides"] = command.split(items)
    config = _config.resolve(args.name, args.config_files, arguments["overrides"],
                             announce=lambda line: None)
    if command.jax_refusal and config["execution"]["backend"] == "jax":
        raise UserError(f"{command.name} does not take execution.backend=jax: "
                        f"{command.jax_refusal}.")
    _environment.request_backend(config)
    _environment.request_onednn(config)
    command.run(**arguments, **options)
    return 0


class ClosedOutputTolerant:
    """Standard output that, once its reader has gone (`| head`), drops what
    is written instead of raising BrokenPipeError in the middle of training:
    a run then trains to its end, and its files and exit status say what it
    did."""

    def __init__(self, stream):
        self._stream, self._closed = stream, False

    def write(self, text):
        if not self._closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self):
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self):
        self._closed = True
        # Python flushes stdout at exit: point its file at devnull, so that cannot raise.
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name):
        return getattr(self._stream, name)


def on_unraisable(unraisable):
    # A Ctrl-C that Python dropped (raised in a gc callback or a __del__)
    # stops training at the next batch (StopAfterInterrupt): no need to print it.
    error = unraisable.exc_value
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return
        error = error.__context__
    sys.__unraisablehook__(unraisable)


def exit_status(error):
    """(exit status, message for stderr) for an exception a command raised, or
    None for one that is a bug, to be shown with its traceback."""
    from recipes import harness

    if isinstance(error, harness.Interrupted):
        return 130, str(error)
    if isinstance(error, UserError):
        return 2, f"error: {error}"
    data = sys.modules.get("recipes.data")
    if data is not None and isinstance(error, data.ConfigError):
        return 2, f"error: {error}"
    divergence = sys.modules.get("callbacks.divergence_stop")
    if divergence is not None and isinstance(error, divergence.TrainingDiverged):
        return 3, f"error: {error}"
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return 2, (f"error: the disk is full ({error.filename or 'writing the run'}): finished "
                   "epochs are saved; free some space and run the same command with "
                   "run.resume=true (or the same run.dir) to go on.")
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.UnavailableError):
        # A multi-worker run whose peer stopped: a situation, not a bug.
        return 2, ("error: a worker of this multi-worker run stopped answering; finished "
                   "epochs are saved: run the same command again to resume.")
    if isinstance(error, KeyboardInterrupt):
        return 130, "interrupted."
    return None


def run_cli(argv=None):
    """`main`, as the command line runs it: what a user can fix is one
    message on stderr and an exit status (`exit_status`); returns it."""
    try:
        return main(argv)
    except (Exception, KeyboardInterrupt) as error:
        found = exit_status(error)
        if found is None:
            raise
        status, message = found
        print(message, file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.stdout = ClosedOutputTolerant(sys.stdout)
    sys.unraisablehook = on_unraisable
    sys.exit(run_cli())
