"""`python -m recipes anchor`: cifar10-airbench's script patched for a CPU at run
time, on a stand-in that holds exactly what the published scripts hold where
the patches apply; a changed script and a missing PyTorch are one line each.
(The published scripts are not in this repository: users bring their own.)"""

import pytest

from recipes.runs import UserError
from recipes.tools import anchor

# What airbench94_muon.py holds around each patch, and nothing else of it.
STAND_IN = '''import os
import sys
import torch
from torch import nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T

@torch.compile
def zeropower_via_newtonschulz5(G, steps=3, eps=1e-7):
    return G

class Muon(torch.optim.Optimizer):
    pass

class CifarLoader:
    def __init__(self, path, train=True):
        data = torch.load(path, map_location=torch.device("cuda"))
        self.images = (self.images.half() / 255).permute(0, 3, 1, 2)

def infer(model, loader, tta_level=0):
    with torch.no_grad():
        return model(loader.images)

class CifarNet(nn.Module):
    def __init__(self):
        for mod in self.modules():
            if isinstance(mod, BatchNorm):
                mod.float()
            else:
                mod.half()


def main(run, model):
    starter = torch.cuda.Event(enable_timing=True)
    ender = torch.cuda.Event(enable_timing=True)
    for inputs, labels in train_loader:
        for step in range(1):
            outputs = model(inputs, whiten_bias_grad=(step < whiten_bias_train_steps))
            F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum").backward()
    torch.cuda.synchronize()

if __name__ == "__main__":
    model = CifarNet().cuda().to(memory_format=torch.channels_last)
    model.compile(mode="max-autotune")
    main("warmup", model)
    accs = torch.tensor([main(run, model) for run in range(200)])
'''


def test_the_patches_make_the_script_a_cpu_run_and_change_nothing_else(tmp_path):
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    text, kind = anchor.patched(script)
    assert kind == "airbench94_muon.py"
    for gone in ("torch.compile", ".cuda()", "torch.cuda", 'torch.device("cuda")', "mod.half()",
                 'main("warmup", model)', "import torchvision", "range(200)"):
        assert gone not in text, gone
    assert text.count("torch.autocast('cpu', dtype=torch.bfloat16)") == 2  # training, inference
    assert text.count("_WallEvent()") == 2 and "(self.images.float() / 255)" in text
    assert text.index("class _WallEvent") > text.index("import torch.nn.functional as F")
    # Every line the patches do not name is as it was.
    kept = [line for line in STAND_IN.splitlines() if not any(
        old.strip() and (line.strip() in old or old.strip() in line)
        for old, _, _ in anchor.PATCHES[kind])]
    assert all(line in text for line in kept)
    compile(text, str(script), "exec")  # still Python


@pytest.mark.parametrize("change, message", [
    (lambda text: text.replace("range(200)", "range(100)"), "is there 0 time"),
    (lambda text: text + "    torch.cuda.Event(enable_timing=True)\n", "is there 3 time"),
    (lambda text: "print('hello')\n", "is neither cifar10-airbench's airbench94.py nor"),
])
def test_a_script_that_is_not_the_published_one_is_refused_in_one_line(change, message, tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(change(STAND_IN))
    with pytest.raises(UserError, match=message):
        anchor.patched(script)


def test_without_pytorch_it_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(anchor, "torch_installed", lambda: False)
    with pytest.raises(UserError, match="pip install -r requirements-anchor.txt"):
        anchor.anchor("densenet_cifar10_cpu", tmp_path / "airbench94_muon.py")
