"""execution.onednn reaches TensorFlow before it starts, or is refused."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, TINY
from keras_course_recipes import harness, machine, process
from keras_course_recipes.errors import UserError


def test_a_setting_tensorflow_started_without_is_refused(tiny_config, monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    with pytest.raises(UserError, match="execution.onednn=true takes effect only before TensorFlow"):
        harness.train(tiny_config("mnist_mlp", "execution.onednn=true"))


def test_the_setting_tensorflow_started_with_is_accepted(tiny_config, monkeypatch):
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    off = tiny_config("mnist_mlp", "execution.onednn=false")
    process.request_onednn(off)  # accepted: raises nothing
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert machine.device_info()["TF_ENABLE_ONEDNN_OPTS"] == "0"  # what metrics.json records
    # null leaves TensorFlow's own choice, whatever it started with.
    process.request_onednn(tiny_config("mnist_mlp", "execution.onednn=null"))
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    # The same request, against TensorFlow started the other way, is refused.
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    with pytest.raises(UserError, match="execution.onednn=false takes effect only before"):
        process.request_onednn(off)
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"


@pytest.mark.slow
def test_the_command_line_sets_it_before_tensorflow_starts(tmp_path):
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    result = subprocess.run(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp",
         *[item for item in TINY if not item.startswith("execution.onednn")],
         "execution.onednn=true", f"run.dir={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=180, env=environment)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["device"]["TF_ENABLE_ONEDNN_OPTS"] == "1"


@pytest.mark.parametrize("speedup, warned", [(0.62, True), (0.95, False), (1.3, False)])
def test_mixed_bfloat16_warns_where_it_trains_slower_than_float32(speedup, warned, monkeypatch,
                                                                   capsys):
    monkeypatch.setattr(machine, "bfloat16_speedup", lambda: speedup)
    machine.warn_if_bfloat16_is_slow()
    printed = capsys.readouterr().out
    assert ("set execution.precision=float32" in printed) == warned
    assert not warned or f"{speedup:.2f}x float32's speed" in printed


def test_the_bfloat16_probe_times_a_convolution_in_both_precisions():
    speedup = machine.bfloat16_speedup.__wrapped__()  # not the cached figure
    # Between the 15x slower of emulated bfloat16 and the 3x faster of AMX's.
    assert 0.02 < speedup < 20
