"""Command line: `python -m recipes list | show NAME | run NAME [key=value ...]`."""

import argparse
import os
import signal
import sys

import recipes
from recipes import UserError, _config

# TensorFlow's C++ start-up notices are noise to a reader of a training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m recipes",
        description="Train Keras 3 recipes in eager, graph or XLA mode.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="every recipe, with a one-line description")
    for command, help_text in (("run", "train a recipe"),
                               ("show", "print a recipe's resolved config as YAML")):
        sub = commands.add_parser(command, help=help_text)
        sub.add_argument("name", help="recipe name (see `list`)")
        sub.add_argument("overrides", nargs="*", metavar="key=value",
                         help="config overrides, e.g. train.epochs=2")
        sub.add_argument("--config", action="append", default=[], metavar="FILE",
                         help="extra YAML config, applied after the recipe's (repeatable)")
    args = parser.parse_args(argv)

    if args.command == "list":
        width = max(map(len, recipes.names()))
        for name in recipes.names():
            print(f"{name:<{width}}  {recipes.description(name)}")
        return 0

    quiet = args.command == "show"
    config = _config.resolve(args.name, args.config, args.overrides,
                             announce=(lambda line: None) if quiet else print)
    if args.command == "show":
        print(_config.dump(config), end="")
        return 0
    recipes.load(args.name).run(config)
    return 0


interrupted = False


def on_interrupt(signum, frame):
    global interrupted
    interrupted = True
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGINT, on_interrupt)
    try:
        status = main()
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        status = 2
    except Exception:
        # Ctrl-C can land inside library code (a checkpoint being written,
        # say) that turns it into another exception: it is still Ctrl-C.
        if not interrupted:
            raise
        status = 130
    except KeyboardInterrupt:
        status = 130
    if status == 130:
        print("\ninterrupted: finished epochs are saved; run the same command "
              "with run.resume=true (or the same run.dir) to continue.",
              file=sys.stderr)
    sys.exit(status)
