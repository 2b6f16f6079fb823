"""Command line: `python -m recipes list | show | run | sweep | compare | compare-sizes |
preview | augment-benchmark | data-benchmark | memory | scaling | multiworker | graph |
curves`;
`python -m recipes -h` says what each does.

Each command imports what it needs when it runs: `list` and `show` answer
without importing TensorFlow.
"""

import argparse
import os
import signal
import sys

import recipes
from recipes import UserError, _config, _environment

# TensorFlow's C++ start-up notices are noise to a reader of a training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m recipes",
        description="Train Keras 3 recipes in eager, graph or XLA mode.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("list", help="every recipe, with a one-line description")
    curves = commands.add_parser("curves", help="plot validation accuracy against training "
                                                "time for one or more runs")
    curves.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="runs/NAME/<timestamp>")
    curves.add_argument("--out", metavar="PNG", help="default: RUN_DIR/accuracy_vs_time.png "
                                                     "of the first run")
    for command, help_text in (("run", "train a recipe"),
                               ("show", "print a recipe's resolved config as YAML"),
                               ("sweep", "train every combination of --grid values; "
                                         "write a results table"),
                               ("compare", "time the training step in each execution mode "
                                           "(options modes=..., steps=N, repeats=N)"),
                               ("compare-sizes", "compare the modes at four or more model "
                                                 "sizes (options size=KEY=[...], modes=, steps=, repeats=)"),
                               ("preview", "write a PNG of training images before and after "
                                           "data.augment"),
                               ("graph", "write the training step's graph for TensorBoard, "
                                         "and AutoGraph's code, without training"),
                               ("profile", "profile a few training steps; a table of where "
                                           "their time goes, by kind of op"),
                               ("soak", "SIGKILL a training N times at random moments and "
                                        "resume it each time; a table of what survived "
                                        "(option kills=N)"),
                               ("augment-benchmark", "time each augmentation, and training with "
                                                     "it on host and device (option steps=N)"),
                               ("data-benchmark", "time the input pipeline alone: loading, "
                                                  "then training batches/s (option steps=N)"),
                               ("memory", "peak memory and time of a training step for each "
                                          "model.backprop and variant (options backprop=, "
                                          "steps=)"),
                               ("scaling", "images/s with no strategy and with "
                                           "execution.strategy=mirrored, and the scaling "
                                           "efficiency (options steps=, repeats=)"),
                               ("multiworker", "train on N local worker processes with "
                                               "MultiWorkerMirroredStrategy (option workers=N)")):
        sub = commands.add_parser(command, help=help_text)
        sub.add_argument("name", help="recipe name (see `list`)")
        sub.add_argument("overrides", nargs="*", metavar="key=value",
                         help="config overrides, e.g. train.epochs=2")
        sub.add_argument("--config", action="append", default=[], metavar="FILE",
                         help="extra YAML config, applied after the recipe's (repeatable)")
        if command == "sweep":
            sub.add_argument("--grid", action="append", required=True, metavar="KEY=[V,...]",
                             help='values to try, e.g. "train.lr=[0.05,0.1]" (repeatable)')
            sub.add_argument("--dir", metavar="DIR",
                             help="where the runs and tables go; default: "
                                  "runs/sweeps/NAME/<id of the command>")
            sub.add_argument("--one-at-a-time", action="store_true",
                             help="vary one key at a time from the recipe's settings, instead "
                                  "of every combination")
    # key=value items may also follow options (`sweep NAME --grid ... k=v`),
    # which argparse leaves over.
    args, extra = parser.parse_known_args(argv)
    if extra and (args.command in ("list", "curves")
                  or any(item.startswith("-") for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra

    if args.command == "list":
        width = max(map(len, recipes.names()))
        for name in recipes.names():
            print(f"{name:<{width}}  {recipes.description(name)}")
        return 0

    if args.command not in ("list", "curves"):
        # Resolved now, before any command imports TensorFlow: a typo fails at
        # once, and execution.onednn can still reach TensorFlow's start.
        tool_options = {"modes", "steps", "repeats", "size", "backprop", "workers", "kills"}
        _environment.request_onednn(_config.resolve(
            args.name, args.config,
            [item for item in args.overrides if item.partition("=")[0] not in tool_options],
            announce=lambda line: None))

    if args.command == "curves":
        from recipes.tools import curves

        curves.curves(args.run_dirs, args.out)
        return 0
    if args.command == "sweep":
        from recipes.tools import sweep

        sweep.sweep(args.name, args.grid, args.config, args.overrides, args.dir,
                     one_at_a_time=args.one_at_a_time)
        return 0
    if args.command in ("compare", "compare-sizes", "augment-benchmark", "data-benchmark",
                        "memory", "scaling", "multiworker"):
        from recipes.tools import compare
    if args.command in ("compare", "compare-sizes"):
        options, overrides = compare.split_options(args.overrides,
                                                    {"modes", "steps", "repeats", "size"})
        modes = compare.parse_modes(options.get("modes", ",".join(compare.DEFAULT_MODES)))
        steps = compare.parse_count("steps", options.get("steps", str(compare.DEFAULT_STEPS)), 2)
        repeats = compare.parse_count("repeats", options.get("repeats", "1"), 1)
        if args.command == "compare":
            if "size" in options:
                parser.error("size= belongs to compare-sizes")
            compare.compare(args.name, modes, steps, args.config, overrides, repeats=repeats)
        else:
            from recipes.tools.sweep import parse_grid

            key, values = (parse_grid(options["size"], "size=") if "size" in options
                           else (None, None))
            compare.compare_sizes(args.name, key, values, modes, steps, args.config, overrides,
                                   repeats=repeats)
        return 0
    if args.command == "augment-benchmark":
        from recipes.tools import augment_bench

        options, overrides = compare.split_options(args.overrides, {"steps"})
        steps = compare.parse_count("steps", options.get("steps", str(compare.DEFAULT_STEPS)), 2)
        augment_bench.benchmark(args.name, steps, args.config, overrides)
        return 0
    if args.command == "data-benchmark":
        from recipes.tools import data_bench

        options, overrides = compare.split_options(args.overrides, {"steps"})
        steps = compare.parse_count("steps", options.get("steps", "200"), 2)
        data_bench.benchmark(args.name, steps, args.config, overrides)
        return 0
    if args.command == "scaling":
        options, overrides = compare.split_options(args.overrides, {"steps", "repeats"})
        steps = compare.parse_count("steps", options.get("steps", str(compare.DEFAULT_STEPS)), 2)
        repeats = compare.parse_count("repeats", options.get("repeats", "1"), 1)
        compare.scaling(args.name, steps, args.config, overrides, repeats)
        return 0
    if args.command == "multiworker":
        from recipes.tools import multiworker

        options, overrides = compare.split_options(args.overrides, {"workers"})
        workers = compare.parse_count("workers", options.get("workers", "2"), 2)
        multiworker.launch(args.name, workers, args.config, overrides)
        return 0
    if args.command == "memory":
        from recipes.tools import memory

        options, overrides = compare.split_options(args.overrides, {"steps", "backprop"})
        steps = compare.parse_count("steps", options.get("steps", str(memory.DEFAULT_STEPS)), 1)
        backprops = memory.parse_backprops(options.get("backprop", ",".join(memory.BACKPROPS)))
        memory.measure_all(args.name, backprops, steps, args.config, overrides)
        return 0
    if args.command == "graph":
        from recipes.tools import graph

        graph.write_graph(args.name, args.config, args.overrides)
        return 0
    if args.command == "soak":
        from recipes.tools import compare, soak

        options, overrides = compare.split_options(args.overrides, {"kills"})
        kills = compare.parse_count("kills", options.get("kills", "20"), 1)
        soak.soak(args.name, kills, args.config, overrides)
        return 0
    if args.command == "profile":
        from recipes.tools import profile

        profile.profile(args.name, args.config, args.overrides)
        return 0
    if args.command == "preview":
        from recipes.tools import preview

        preview.preview(args.name, args.config, args.overrides)
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
        if not interrupted:
            raise
        status = 130
    except KeyboardInterrupt:
        status = 130
    if status == 130:
        again = ("the same command" if "sweep" in sys.argv[1:2] else
                 "the same command with run.resume=true (or the same run.dir)")
        print(f"\ninterrupted: finished epochs are saved; run {again} to continue.",
              file=sys.stderr)
    sys.exit(status)
