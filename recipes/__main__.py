"""Command line: `python -m recipes COMMAND ...`; `python -m recipes -h` says what
each command does.

The commands are a table, `COMMANDS`: `list`, `run` and `show` here, and
what each tool module in `recipes/tools/` declares in its `COMMANDS`, with
its options. Each command imports what it needs when it runs: `list` and
`show` answer without importing TensorFlow.
"""

import argparse
import os
import sys

import recipes
from recipes import UserError, _config, _environment, _interrupt, _rundir
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
    recipes.load(name).run(config)


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


if __name__ == "__main__":
    _interrupt.install()
    try:
        status = main()
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        status = 2
    except BrokenPipeError:
        # The reader stopped (`list | head`): not an error of ours. Python's
        # documented recipe: point stdout at devnull so its flush at exit
        # cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 0
    except Exception as error:
        divergence = sys.modules.get("callbacks.divergence_stop")
        if divergence is not None and isinstance(error, divergence.TrainingDiverged):
            print(f"error: {error}", file=sys.stderr)
            sys.exit(3)
        tf = sys.modules.get("tensorflow")
        if tf is not None and isinstance(error, tf.errors.UnavailableError):
            # A multi-worker run whose peer stopped: a situation, not a bug.
            print("error: a worker of this multi-worker run stopped answering; finished "
                  "epochs are saved: run the same command again to resume.", file=sys.stderr)
            sys.exit(2)
        # Ctrl-C can land inside library code (a checkpoint being written,
        # say) that turns it into another exception: it is still Ctrl-C.
        if not _interrupt.pressed:
            raise
        status = 130
    except KeyboardInterrupt:
        status = 130
    if status == 130:
        again = ("the same command" if "sweep" in sys.argv[1:2] else
                 "the same command with run.resume=true (or the same run.dir)")
        print("\n" + _rundir.interrupt_note(again), file=sys.stderr)
    sys.exit(status)
