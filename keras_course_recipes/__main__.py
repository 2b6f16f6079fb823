"""Command line: `python -m keras_course_recipes COMMAND ...`; `python -m keras_course_recipes -h` says what
each command does.

The commands: `list`, `run` and `show` here (`BUILT_IN`), and what each
tool module in `keras_course_recipes/tools/` declares in its `COMMANDS`, with its
options (`TOOLS` says which module; `commands()` gathers them). Each
command imports what it needs when it runs: `run` loads no tool, and `list`
and `show` answer without importing TensorFlow.
"""

import argparse
import importlib
import os
import sys

import keras_course_recipes as kit
from keras_course_recipes import errors, machine, process, recipe_config, runs
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command


def list_recipes():
    width = max(map(len, kit.names()))
    for name in kit.names():
        print(f"{name:<{width}}  {kit.description(name)}")


def train(config):
    """`recipes run`: the config as `main` resolved it, in a process `main` has set up."""
    from keras_course_recipes import harness

    harness.train(config, requested=True)


def show(name, config_files, overrides):
    config = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
    print(recipe_config.dump(config), end="")


BUILT_IN = (
    Command("list", "every recipe, with a one-line description", list_recipes, on_recipe=False,
            without_tensorflow=True),
    Command("run", "train a recipe", train, without_tensorflow=True, takes_config=True),
    Command("show", "print a recipe's resolved config as YAML", show, without_tensorflow=True),
)
# The module in keras_course_recipes/tools/ that declares each other command, in its
# COMMANDS: imported only when that command runs (or for -h), so that `run`
# loads what training needs, and no tool.
TOOLS = {name: f"keras_course_recipes.tools.{module}" for name, module in {
    "curves": "curves", "sweep": "sweep", "compare": "compare", "compare-sizes": "compare",
    "scaling": "compare", "preview": "preview", "graph": "graph", "profile": "profile",
    "soak": "soak", "augment-benchmark": "augment_bench", "data-benchmark": "data_bench",
    "memory": "memory", "multiworker": "multiworker", "notebooks": "notebooks", "copy": "copy",
    "tfds-to-folder": "tfds_folder", "record": "record"}.items()}


def commands(names=None, tools=None):
    """{name: Command} of the built-in commands and of the tools `names` (all: None);
    `tools`: {command: module} in place of `TOOLS` (the checkout's benchmarks/)."""
    tools = tools or TOOLS
    found = {command.name: command for command in BUILT_IN}
    for module in dict.fromkeys(tools[name] for name in (names or tools) if name in tools):
        for command in importlib.import_module(module).COMMANDS:
            found[command.name] = command
    return found


def build_parser(found=None, prog=None):
    """The command line's parser: a subcommand for each of `found` (every command's)."""
    parser = argparse.ArgumentParser(
        # `recipes` where the kit's command runs it, `python -m keras_course_recipes` otherwise.
        prog=prog or ("python -m keras_course_recipes" if sys.argv[0].endswith("__main__.py")
                      else None),
        description="Train Keras 3 recipes in eager, graph or XLA mode.")
    parser.add_argument("--version", action="version",
                        version=f"keras-course-recipes {kit.__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (found or commands()).values():
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


def main(argv=None, tools=None, prog=None):
    """Runs the command `argv` names; `tools` and `prog` as `entry_point`'s."""
    argv = sys.argv[1:] if argv is None else argv
    tools = tools or TOOLS
    hidden = runs.hidden_package([os.getcwd()])  # python -m imports the working folder's keras.py
    if hidden:
        raise UserError(hidden)
    # The parser of the command named first; of every command for -h or a typo.
    named = argv[0] if argv and argv[0] in {*tools, *(c.name for c in BUILT_IN)} else None
    found = commands([named] if named else None, tools)
    cli = build_parser(found, prog)
    # key=value items may also follow options (`sweep NAME --grid ... k=v`),
    # which argparse leaves over.
    args, extra = cli.parse_known_args(argv)
    arguments = dict(vars(args))
    command = found[arguments.pop("command")]
    if not (command.without_tensorflow or machine.has_tensorflow()):
        raise UserError(f"{command.name} needs TensorFlow, which is not installed here: "
                        f"{errors.install_advice('tensorflow')}"
                        + ("; without it, `recipes run NAME execution.backend=jax` trains the "
                           "recipes that run on JAX" if machine.installed("jax") else "")
                        + ".")
    if command.draws and not machine.installed("matplotlib"):
        raise UserError(f"{command.name} draws its PNGs with matplotlib, which is not installed "
                        f"here: {errors.install_advice('plot')}.")
    if extra and (not command.on_recipe or any(item.startswith("-") for item in extra)):
        cli.error(f"unrecognized arguments: {' '.join(extra)}")
    if not command.on_recipe:
        command.run(**arguments)
        return 0

    items = [*args.overrides, *extra]
    for key in (item.partition("=")[0] for item in items):
        if "." in key or command.takes(key):
            continue  # a config key, or this command's option
        owners = [other.name for other in commands(tools=tools).values() if other.takes(key)]
        if owners:
            cli.error(f"{key}= belongs to {', '.join(owners)}")
    # The command's options are split off first: the rest is the config,
    # resolved now, before any command imports TensorFlow, so that a typo
    # fails at once, and execution.backend and execution.onednn can still
    # reach Keras' and TensorFlow's start: requested here, once. `run` trains
    # with this config; another command resolves its own from the same items.
    options, arguments["overrides"] = command.split(items)
    # KERAS_BACKEND sets the backend unless the command line's execution.backend= does.
    from_environment = bool(os.environ.get("KERAS_BACKEND")) and not any(
        item.partition("=")[0].strip() == "execution.backend" for item in arguments["overrides"])
    unused = from_environment and command.names_backends  # each part's process sets its own
    config = recipe_config.resolve(args.name, args.config_files, arguments["overrides"],
                             announce=print if command.takes_config else lambda line: None,
                             environment=not unused)
    backend = config["execution"]["backend"]
    if unused:
        print(f"note: {command.name} does not use KERAS_BACKEND={os.environ['KERAS_BACKEND']}: "
              f"{command.tensorflow_only}.", flush=True)
    else:
        if command.tensorflow_only and backend != "tensorflow":
            setting = "KERAS_BACKEND" if from_environment else "execution.backend"
            raise UserError(f"{command.name} does not take {setting}={backend}: "
                            f"{command.tensorflow_only}.")
        process.request_backend(config)
    process.request_onednn(config)
    if command.takes_config:
        command.run(config=config, **options)
    else:
        command.run(**arguments, **options)
    return 0


def exit_status(error):
    """(exit status, message for stderr) for an exception a command raised, or
    None for one that is a bug, to be shown with its traceback."""
    status, message = errors.exit_status(error)
    if message is not None:
        return status, message
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.UnavailableError):
        # A multi-worker run whose peer stopped: a situation, not a bug.
        return 2, ("error: a worker of this multi-worker run stopped answering; finished "
                   "epochs are saved: run the same command again to resume.")
    return None


def run_cli(argv=None, tools=None, prog=None):
    """`main`, as the command line runs it: what a user can fix is one
    message on stderr and an exit status (`exit_status`); returns it."""
    try:
        return main(argv, tools, prog)
    except (Exception, KeyboardInterrupt) as error:
        found = exit_status(error)
        if found is None:
            raise
        status, message = found
        print(message, file=sys.stderr)
        errors.note_reported(error)
        return status


def entry_point(tools=None, prog=None):
    """`python -m keras_course_recipes` and the `recipes` command that installing the kit adds: the
    process is the command's, set up here (never on import): a Ctrl-C or SIGTERM is one
    line from now on, and TensorFlow's C++ start-up notices, noise to a reader of a
    training log, are off unless asked for. `tools`: {command: module declaring it}
    in place of the kit's `TOOLS`, with `prog` its name (`python -m benchmarks`)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    errors.install_interrupt_hooks()
    runs.freeze_at_exit()
    try:
        with process.signals_and_output():
            status = run_cli(tools=tools, prog=prog)
    finally:
        errors.restore_interrupt_hooks()
    sys.exit(status)


if __name__ == "__main__":
    entry_point()
