"""Each entry point sets its process up once: `recipes run` resolves the configuration,
asks for Keras' backend and wraps standard output once, and so does a recipe file's
`runs.main` with what it does of these. Counted up to the moment the recipe's `run`
would train, where `Run.train` stops them here (the fast set trains nothing)."""

import collections
import sys

import pytest

from conftest import TINY
import keras_course_recipes as kit
from keras_course_recipes import __main__ as cli
from keras_course_recipes import process, recipe_config, rundir, runs


class Stopped(Exception):
    """Raised where the recipe's `run` would start training."""


@pytest.fixture
def counted(monkeypatch):
    """{what: calls so far} of the set-up steps, each counted where every caller finds it."""
    calls = collections.Counter()

    def counting(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counting(recipe_config, "resolve")
    counting(recipe_config, "settle")
    counting(process, "request_backend")
    counting(process, "request_onednn")
    counting(process.signals_and_output, "__enter__")

    def stop(self, lesson, extra_callbacks=()):
        raise Stopped

    monkeypatch.setattr(rundir.Run, "train", stop)
    return calls


def test_recipes_run_resolves_requests_and_wraps_once(counted, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["recipes", "run", "mnist_mlp", *TINY,
                                      f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(Stopped):
        cli.entry_point()
    assert counted == {"resolve": 1, "settle": 1, "request_backend": 1, "request_onednn": 1,
                       "__enter__": 1}


def test_a_recipe_file_settles_and_wraps_once(counted, tmp_path, monkeypatch):
    """Its Keras started with the file (`import keras`): the backend is the one it loaded."""
    recipe = kit.load("mnist_mlp")
    monkeypatch.setattr(sys, "argv", ["mnist_mlp.py", *TINY, f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(Stopped):
        runs.main("mnist_mlp", recipe.CONFIG, recipe.run, recipe.CONFIG_SCHEMA)
    assert counted == {"settle": 1, "__enter__": 1}
