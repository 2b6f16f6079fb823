"""The commands that work on a recipe without being one, and what only they use
(plots, tables, the hand-written training loops).

Each tool module declares its commands in `COMMANDS`, a tuple of `Command`:
the name, a line of help, the function it runs and the `key=value` options
it takes. `python -m keras_course_recipes` builds its parser from them, so it imports
every tool module: a tool imports TensorFlow when it runs, never at import,
so that `list` and `show` answer without it and `execution.onednn` can still
reach TensorFlow's start.
"""

import dataclasses
from typing import Callable

from keras_course_recipes.errors import UserError


@dataclasses.dataclass(frozen=True)
class Option:
    """A `name=value` item on a command's line that sets the tool, not the config.

    Args:
        name: its key, e.g. `"steps"`.
        default: its value when the item is absent.
        parse: the item's text -> its value; raises `UserError` on bad text.
    """

    name: str
    default: object
    parse: Callable[[str], object]


def count(name, default, minimum):
    """An `Option` that takes an integer of at least `minimum`."""
    return Option(name, default, lambda text: parse_count(name, text, minimum))


def parse_count(option, text, minimum):
    """`option=text` as an integer of at least `minimum`, or a UserError."""
    if not text.isdigit() or int(text) < minimum:
        raise UserError(f"{option}= expects an integer of at least {minimum}, got '{text}'.")
    return int(text)


def parse_choices(option, text, known, what):
    """`option=text`, a comma-separated list of names, each one of `known`, as
    a list, each once; a UserError names an unknown or repeated one."""
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in known]
    if unknown or not chosen:
        raise UserError(f"Unknown {what}(s) {', '.join(unknown) or '(none)'} in {option}=; "
                        f"known: {','.join(known)}.")
    # Results are kept by name: a repeat would be measured again, and one row lost.
    repeated = next((item for number, item in enumerate(chosen) if item in chosen[:number]), None)
    if repeated is not None:
        raise UserError(f"{option}= names {repeated} twice; name each {what} once.")
    return chosen


@dataclasses.dataclass(frozen=True)
class Command:
    """A command of `python -m keras_course_recipes`.

    Args:
        name: what follows `python -m keras_course_recipes`, e.g. `"compare"`.
        help: its line in `python -m keras_course_recipes -h`.
        run: the function it calls, with keyword arguments: `name`,
            `config_files` and `overrides` for a command on a recipe (or, with
            `takes_config`, the config itself), each option's value by its name,
            and each argument that `arguments` adds by its `dest`.
        options: the `Option`s it takes out of the `key=value` items.
        arguments: adds arguments of its own to its parser (sweep's `--grid`).
        on_recipe: it takes `NAME [key=value ...] [--config FILE]`.
        tensorflow_only: why it refuses `execution.backend=jax` or `torch`, for a command
            that does; None for one that runs on either backend.
        without_tensorflow: it works where TensorFlow is not installed
            (Keras on JAX alone); the others refuse there.
        names_backends: its options name each part's backend (compare's modes),
            and each part runs in a process given its own `KERAS_BACKEND`: the
            environment's does not apply to it.
        draws: it writes PNGs with matplotlib (the `plot` extra): refused without it,
            before anything runs.
        takes_config: `run` is given the config the command line resolved (and
            printed the overrides of), once, in place of what it is resolved from.
    """

    name: str
    help: str
    run: Callable
    options: tuple = ()
    arguments: Callable | None = None
    on_recipe: bool = True
    tensorflow_only: str | None = None
    without_tensorflow: bool = False
    names_backends: bool = False
    draws: bool = False
    takes_config: bool = False

    def takes(self, key):
        """Whether `key=value` is one of this command's options."""
        return any(option.name == key for option in self.options)

    def split(self, items):
        """Separates this command's options from the config overrides in
        `items`; returns ({option name: value}, overrides)."""
        texts, overrides = {}, []
        for item in items:
            key, sep, text = item.partition("=")
            if sep and self.takes(key):
                texts[key] = text
            else:
                overrides.append(item)
        values = {option.name: option.parse(texts[option.name]) if option.name in texts
                  else option.default for option in self.options}
        return values, overrides
