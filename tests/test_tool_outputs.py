"""Every tool that writes a file creates the folder it writes into: run as
the README shows them, from a folder with no runs/ yet."""

import os
import subprocess
import sys
import warnings

import pytest

from conftest import ROOT
from keras_course_recipes.tools import plots


def recipes_command(*args, cwd):
    """`python -m keras_course_recipes ARGS` started in `cwd`, as a user starts it there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "keras_course_recipes", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_preview_as_the_readme_shows_it_writes_its_png(tmp_path):
    # `make preview NAME=cifar10_cnn`, offline: no run.dir, so it picks its own folder.
    result = recipes_command("preview", "cifar10_cnn", "data.source=synthetic",
                             "data.synthetic_examples=32", "data.batch_size=16", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    [png] = (tmp_path / "runs" / "preview" / "cifar10_cnn").glob("*/augmentation.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"preview: {png.relative_to(tmp_path)}" in result.stdout


def test_curves_writes_into_a_new_folder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.csv").write_text("epoch,time_epoch_s,val_accuracy\n0,6.0,0.5\n1,6.0,0.7\n")
    from keras_course_recipes.tools import curves

    path = curves.curves([run], out=tmp_path / "plots" / "new" / "curve.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sizes_plot_without_eager_says_so_instead_of_an_empty_legend(tmp_path):
    rows = [{"mode": "graph", "params": 1000, "speedup_vs_eager": None},
            {"mode": "graph", "params": 2000, "speedup_vs_eager": None}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of a legend with no lines
        plots.sizes(rows, "no eager", tmp_path / "sizes.png")
    assert (tmp_path / "sizes.png").stat().st_size > 0
