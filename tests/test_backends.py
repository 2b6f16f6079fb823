"""`python -m benchmarks backends`: the recipe's step on each installed backend,
two steps each on synthetic data, with PyTorch's own step on a stand-in of
airbench94_muon.py; an absent backend is one line, and its rows are left out."""

import json
import os
import subprocess
import sys

import pytest

import keras_course_recipes as kit
from keras_course_recipes import machine, recipe_config
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import record
from benchmarks import backends

from conftest import ROOT
from test_anchor import STAND_IN

# The stand-in with a Muon and a CifarNet that train: a small network with
# the attributes airbench94_muon's main uses.
RUNNABLE = STAND_IN.replace("class Muon(torch.optim.Optimizer):\n    pass", '''
class Muon(torch.optim.SGD):
    pass

BatchNorm = nn.BatchNorm2d''').replace('''class CifarNet(nn.Module):
    def __init__(self):
''', '''class CifarNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.whiten = nn.Conv2d(3, 8, 2)
        self.conv = nn.Conv2d(8, 8, 3, padding="same", bias=False)
        self.norm = BatchNorm(8)
        self.head = nn.Linear(8, 10, bias=False)
''') + '''

def _reset(self):
    for module in (self.whiten, self.conv, self.norm, self.head):
        module.reset_parameters()

def _init_whiten(self, images):
    pass

def _forward(self, x, whiten_bias_grad=True):
    x = F.gelu(self.norm(self.conv(self.whiten(x))))
    return self.head(x.amax(dim=(2, 3)))

CifarNet.reset, CifarNet.init_whiten, CifarNet.forward = _reset, _init_whiten, _forward
'''
TINY = ["data.batch_size=8", "data.synthetic_examples=64", "model.widths=[8,8,8]",
        "model.growth_rates=[8,8,8]", "model.whitening_images=16", "model.test_time_views=1",
        "execution.onednn=null", "execution.precision=float32"]


@pytest.mark.benchmark  # a record tool's run: make test-benchmarks
@pytest.mark.slow
def test_each_installed_backend_takes_its_steps_beside_pytorchs_own(tmp_path, capsys):
    script = tmp_path / "airbench94_muon.py"
    script.write_text(RUNNABLE)
    asked = ["tf_graph", "jax", "torch_eager_first", "pytorch_airbench"]
    rows = backends.benchmark("densenet_cifar10_cpu", asked, steps=2, script=script,
                              overrides=TINY, out_dir=tmp_path / "out")
    torch = machine.installed("torch")
    expected = asked if torch else asked[:2]
    assert [row["variant"] for row in rows] == expected
    for row in rows:
        assert row["images_per_s"] > 0 and row["first_step_s"] >= 0
        assert row["step_ms_p10"] <= row["step_ms_median"] <= row["step_ms_p90"]
    assert rows[0]["vs_first"] == 1.0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["batch"] == 8 and results["precision"] == "float32" and results["rows"] == rows
    assert results["command"].startswith("python -m benchmarks backends densenet_cifar10_cpu "
                                         f"variants={','.join(expected)} steps=2 repeats=1 ")
    stored = record.speed_rows(tmp_path / "out", "tiny", "EPYC-AVX2")
    assert [found["variant"] for found in stored if found["metric"] == "vs_first"] == expected
    assert (tmp_path / "out" / "table.md").read_text().count("\n") == 2 + len(expected)
    if torch:
        # The torch row trained the network channels-first: its config says so.
        config = (tmp_path / "out" / "variants" / "torch_eager_first" / "config.yaml").read_text()
        assert "data_format: channels_first" in config
    else:
        assert "torch_eager_first: left out: execution.backend=torch needs torch" in (
            capsys.readouterr().out)


def test_an_absent_backend_is_left_out_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(machine, "installed", lambda package: package != "torch")
    kept = backends._available("densenet_cifar10_cpu", ["tf_graph", "torch_compile"], None, (),
                               ["data.source=synthetic"])
    assert kept == ["tf_graph"]
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(
        "torch_compile: left out: execution.backend=torch needs torch, which is not installed")
    with pytest.raises(UserError, match="None of the variants asked for can run here"):
        backends._available("densenet_cifar10_cpu", ["torch_eager"], None, (), [])


def test_pytorchs_own_step_without_torch_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(machine, "installed", lambda name: name != "torch")
    assert backends._available("densenet_cifar10_cpu", ["tf_graph", "pytorch_airbench"], None,
                               (), []) == ["tf_graph"]
    assert "needs torch, which is not installed" in capsys.readouterr().out


@pytest.mark.skipif(not machine.installed("torch"),
                    reason="PyTorch is not installed (make test installs requirements-torch.txt)")
def test_pytorchs_own_step_needs_the_script_and_the_muon_one(tmp_path, capsys):
    assert backends._available("densenet_cifar10_cpu", ["tf_graph", "pytorch_airbench"], None,
                               (), []) == ["tf_graph"]
    assert "give --script airbench94_muon.py" in capsys.readouterr().out
    other = tmp_path / "airbench94.py"
    other.write_text("class LookaheadState:\n    pass\n")
    with pytest.raises(UserError, match="is not airbench94_muon.py"):
        backends._available("densenet_cifar10_cpu", ["pytorch_airbench"], other, (), [])


def test_channels_first_is_refused_on_tensorflow_in_one_line():
    config = recipe_config.resolve("densenet_cifar10_cpu", (), [*TINY, "data.source=synthetic",
                                                         "model.data_format=channels_first"],
                             announce=lambda line: None)
    with pytest.raises(UserError, match="channels_first is for execution.backend=torch or jax"):
        kit.load("densenet_cifar10_cpu").build(config)


def test_unknown_variants_are_refused():
    with pytest.raises(UserError, match="Unknown variant.*tf_grph"):
        backends.parse_variants("tf_graph,tf_grph")


# Builds the network both ways on torch, the same weights in each, and prints
# the largest difference between their predictions for the same images.
SAME_NETWORK = """
import numpy as np
from keras_course_recipes.models.densenet_whitened import densenet_whitened
images = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype("float32")
built = [densenet_whitened((32, 32, 3), 10, images, widths=(8, 8, 8), growth_rates=(4, 4, 4),
                           data_format=data_format)
         for data_format in ("channels_last", "channels_first")]
built[1].set_weights(built[0].get_weights())
last, first = (model.predict(images, verbose=0) for model in built)
print(float(np.abs(last - first).max()))
"""


@pytest.mark.slow
@pytest.mark.skipif(not machine.installed("torch"), reason="requirements-torch.txt")
def test_channels_first_is_the_same_network():
    result = subprocess.run([sys.executable, "-c", SAME_NETWORK], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert float(result.stdout.split()[-1]) < 1e-5
