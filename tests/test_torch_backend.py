"""Keras' third backend: the model-and-fit recipes train on PyTorch through Keras
(`execution.backend=torch`, or Keras' own `KERAS_BACKEND=torch`), eager by
default and under `torch.compile` with `execution.mode=xla`; what is
TensorFlow's refuses in one line (tests/test_jax_backend.py, for both)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, TINY
from keras_course_recipes import machine, process, recipe_config, rundir
from keras_course_recipes.errors import UserError

needs_torch = pytest.mark.skipif(not machine.installed("torch"),
                                 reason="PyTorch is not installed here (requirements-torch.txt)")


def test_keras_backend_sets_execution_backend_where_the_command_line_does_not(monkeypatch):
    """`KERAS_BACKEND=torch python -m keras_course_recipes compare ...` once ran every mode on
    TensorFlow without a word: execution.backend's default overwrote it."""
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    resolve = lambda *items: recipe_config.resolve("mnist_mlp", overrides=items,  # noqa: E731
                                             announce=lambda line: None)["execution"]
    assert resolve() == {**resolve(), "backend": "torch", "mode": "eager"}
    assert resolve("execution.backend=tensorflow")["backend"] == "tensorflow"
    monkeypatch.setenv("KERAS_BACKEND", "numpy")
    with pytest.raises(UserError) as error:
        resolve()
    assert str(error.value) == ("Config key 'execution.backend' must be one of tensorflow, jax, "
                                "torch; got 'numpy' in the environment variable KERAS_BACKEND.")


def test_without_pytorch_the_torch_backend_is_one_line(monkeypatch):
    monkeypatch.setattr(machine, "installed", lambda package: package != "torch")
    with pytest.raises(UserError, match="execution.backend=torch needs torch, which is not "
                                        "installed in this environment: pip install -r "
                                        "requirements-torch.txt"):
        process.require_backend("torch")


@pytest.mark.slow
@needs_torch
def test_a_recipe_trains_on_torch_and_does_not_resume_on_another_backend(tmp_path):
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp", *TINY, f"run.dir={run_dir}"]
    trained = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "KERAS_BACKEND": "torch"})
    assert trained.returncode == 0, trained.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["backend"], metrics["mode_used"]) == ("torch", "eager")
    assert metrics["versions"]["torch"].startswith("2.")
    other = subprocess.run([*command, "train.epochs=2", "execution.backend=tensorflow"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "its config differs in execution.backend" in other.stderr


@pytest.mark.slow
@needs_torch
def test_a_recipe_file_runs_on_torch(tmp_path, fresh_pythons):
    """A copy run with KERAS_BACKEND=torch stopped on `KeyError: 'torch'`
    (compare's torch_eager row: tests/test_compare.py's row per mode)."""
    shutil.copyfile(ROOT / "recipes" / "mnist_mlp.py", tmp_path / "mnist_mlp.py")
    environment = {**os.environ, "KERAS_BACKEND": "torch"}
    alone = subprocess.run([str(fresh_pythons.kit), "mnist_mlp.py",
                            *[item for item in TINY if "onednn" not in item]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300, env=environment)
    assert alone.returncode == 0 and "/metrics.json" in alone.stdout, alone.stderr[-3000:]
    [run_dir] = (tmp_path / "runs" / "mnist_mlp").iterdir()
    assert rundir.read_config(run_dir)["execution"]["mode"] == "eager"  # Keras' default on torch
