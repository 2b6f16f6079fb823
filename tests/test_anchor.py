"""`python -m benchmarks anchor`: cifar10-airbench's script patched for a CPU at run
time, on a stand-in that holds exactly what the published scripts hold where
the patches apply; a changed or unreadable script, refused data and a missing
PyTorch are one line each, and a refused command writes nothing. The table
names the split its accuracy is on. (The published scripts are not in this
repository: users bring their own.)"""

import json
from pathlib import Path
import sys
import types

import keras
import numpy as np
import pytest

from benchmarks.__main__ import TOOLS as BENCHMARKS
from keras_course_recipes import __main__ as cli
from keras_course_recipes.errors import UserError
from benchmarks import anchor

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
    # Training and inference, in bfloat16 where the recipe computes in it.
    assert text.count("torch.autocast('cpu', dtype=torch.bfloat16, enabled=BFLOAT16)") == 2
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
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    with pytest.raises(UserError, match="pip install -r requirements-torch.txt"):
        anchor.anchor("densenet_cifar10_cpu", script, overrides=folder(tmp_path))


def folder(path, *more):
    """The overrides that give the recipe CIFAR-10's images from the folder `path`."""
    return ["data.source=folder", f"data.path={path}", *more]


def write_images(root, splits=("train", "test"), per_class=10):
    """`root/<split>/<class>/*.png`: two classes of random 32x32 images."""
    rng = np.random.default_rng(0)
    for split in splits:
        for name in ("cat", "dog"):
            (root / split / name).mkdir(parents=True)
            for index in range(per_class):
                keras.utils.save_img(root / split / name / f"{index}.png",
                                     rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8))


def command_line(capsys, *args):
    """(exit status, stderr) of `python -m benchmarks anchor ARGS`, in this process."""
    capsys.readouterr()
    # The recipe's oneDNN setting cannot reach this process's TensorFlow, started already.
    status = cli.run_cli(["anchor", "densenet_cifar10_cpu", *map(str, args),
                          "execution.onednn=null"], BENCHMARKS)
    return status, capsys.readouterr().err


@pytest.mark.parametrize("make, message", [
    (lambda path: None, "no such file; give the path of your copy of cifar10-airbench's"),
    (lambda path: path.mkdir(), "is a folder: give the file in it, your copy of"),
    (lambda path: path.write_bytes(b"\x80\x03compiled\xff"),  # a pickle, say
     "is not UTF-8 text.*give your copy of cifar10-airbench's"),
])
def test_a_script_that_cannot_be_read_is_one_line_and_exit_2(make, message, capsys, tmp_path):
    script = tmp_path / "airbench94_muon.py"
    make(script)
    with pytest.raises(UserError, match=message):
        anchor.patched(script)
    status, err = command_line(capsys, "--script", script, "runs=1",
                               *folder(tmp_path / "images"))
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "airbench94_muon.py" in err


@pytest.mark.parametrize("data, validation_split, message", [
    (lambda root: root.mkdir(), 0.1, "expects data.path/train/<class>/"),  # no train/
    (lambda root: None, 0.1, "expects data.path/train/<class>/"),  # no folder at all
    (lambda root: write_images(root, splits=("train",)), 0, "no test/<class>/ folder"),
])
def test_refused_data_leave_nothing_behind(data, validation_split, message, monkeypatch, capsys,
                                           tmp_path):
    # As where PyTorch is installed: an empty module, since nothing may reach it.
    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    data(tmp_path / "images")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    status, err = command_line(capsys, "--script", script, "runs=1",
                               *folder(tmp_path / "images",
                                       f"data.validation_split={validation_split}"))
    assert status == 2 and message in err, err
    assert list(work.iterdir()) == []  # no runs/anchor/.../airbench/airbench94_muon_cpu.py


@pytest.mark.parametrize("splits, validation_split, evaluated_on, counts", [
    # The recipe measures on test/ where there is one, holding out part of train/ or not,
    (("train", "test"), 0, "test", (20, 20)),
    (("train", "test"), 0.1, "test", (18, 20)),
    # and on the held-out tenth of train/ where there is none: airbench too.
    (("train",), 0.1, "validation", (18, 2)),
])
def test_the_table_and_results_name_the_split_the_accuracy_is_on(
        splits, validation_split, evaluated_on, counts, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    saved = {}  # what airbench would read: cifar10/train.pt and test.pt
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        from_numpy=lambda array: array, save=lambda data, path: saved.update({path.name: data})))
    monkeypatch.setattr(anchor, "_timed", lambda what, run, *_: {
        "what": what, "run": run, "accuracy": 0.9, "wall_s": 10.0})
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    write_images(tmp_path / "images", splits)
    rows = anchor.anchor("densenet_cifar10_cpu", script, 1,
                         overrides=folder(tmp_path / "images",
                                          f"data.validation_split={validation_split}"),
                         out_dir=tmp_path / "out")
    assert (len(saved["train.pt"]["labels"]), len(saved["test.pt"]["labels"])) == counts
    table = (tmp_path / "out" / "table.md").read_text()
    assert table.splitlines()[0] == f"| run | {evaluated_on} accuracy | wall |"
    assert table in capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results == rows and {row["evaluated_on"] for row in rows} == {evaluated_on}
    assert {row["precision"] for row in rows} == {"mixed_bfloat16"}  # the recipe's own


@pytest.mark.parametrize("precision, bfloat16", [("mixed_bfloat16", True), ("float32", False)])
def test_the_script_computes_in_the_recipes_precision(precision, bfloat16, monkeypatch, tmp_path):
    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        from_numpy=lambda array: array, save=lambda data, path: None))
    given = {}  # each side's environment, as its process would get it
    monkeypatch.setattr(anchor, "_timed", lambda what, run, command, cwd, environment, *_: (
        given.update({what: environment}) or {"what": what, "run": run, "accuracy": 0.9,
                                               "wall_s": 10.0}))
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    write_images(tmp_path / "images", ("train",))
    anchor.anchor("densenet_cifar10_cpu", script, 1, out_dir=tmp_path / "out",
                  overrides=folder(tmp_path / "images", f"execution.precision={precision}"))
    environment = given["airbench94_muon.py"]
    assert environment["ANCHOR_PRECISION"] == precision
    # What the patched script's prelude makes of it: autocast on or off.
    line = next(line for line in anchor.PRELUDE.splitlines() if line.startswith("BFLOAT16 = "))
    flags = {}
    exec(line, {"os": types.SimpleNamespace(environ=environment)}, flags)
    assert flags["BFLOAT16"] is bfloat16


def test_a_precision_airbench_cannot_match_on_a_cpu_is_refused(monkeypatch, capsys, tmp_path):
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    status, err = command_line(capsys, "--script", script, "runs=1", "execution.precision="
                               "mixed_float16", *folder(tmp_path / "images"))
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "give execution.precision=mixed_bfloat16 or execution.precision=float32" in err


def runs_of(walls_and_accuracies):
    """anchor's rows, alternating as it takes them: airbench's run i, then the recipe's."""
    return [{"what": what, "run": run, "accuracy": accuracy, "wall_s": wall}
            for run, pair in enumerate(walls_and_accuracies)
            for what, (wall, accuracy) in zip(("airbench94_muon.py", "densenet_cifar10_cpu"), pair)]


def test_the_table_gives_each_sides_range_and_names_a_run_that_shared_the_machine():
    # Xeon-AMX, 2026-11-27: airbench's run 0 shared the machine with other work.
    shared = runs_of([((1264, 0.9404), (502, 0.9363)), ((561, 0.9390), (445, 0.9351))])
    table = anchor.summary(shared, "airbench94_muon.py", "densenet_cifar10_cpu", "test")
    assert "| airbench94_muon.py, mean of 2 | 93.97% (93.90% to 94.04%) | 912 s (561 s to 1264 s) |" in table
    assert "| densenet_cifar10_cpu against airbench94_muon.py | -0.40 points | 0.52x |" in table
    notes = table.split("\n\n")[1].splitlines()
    assert len(notes) == 1 and notes[0].startswith(
        "note: airbench94_muon.py run 0 took 2.25x its side's fastest run (561 s): something "
        "else likely ran beside it")
    # EPYC-oneDNN, 2026-11-27, nothing else running: the machine drifted a tenth, no note.
    quiet = runs_of([((899, 0.9380), (866, 0.9362)), ((982, 0.9394), (957, 0.9356)),
                     ((1010, 0.9362), (946, 0.9346))])
    table = anchor.summary(quiet, "airbench94_muon.py", "densenet_cifar10_cpu", "validation")
    assert "note:" not in table and table.endswith("| -0.24 points | 0.96x |")
    one = anchor.summary(runs_of([((900, 0.93), (800, 0.94))]), "airbench94_muon.py",
                         "densenet_cifar10_cpu", "test")
    assert "| densenet_cifar10_cpu, mean of 1 | 94.00% | 800 s |" in one


@pytest.mark.slow  # starts a process
def test_a_timed_run_keeps_its_output_with_each_epochs_accuracy(tmp_path):
    script = "print('epoch 1 val_acc 0.5'); print('epoch 2 val_acc 0.7'); print('Mean: 0.9350')"
    row = anchor._timed("airbench94_muon.py", 2, [sys.executable, "-c", script], tmp_path, {},
                        anchor.MEAN.findall, tmp_path)
    assert (row["what"], row["run"], row["accuracy"]) == ("airbench94_muon.py", 2, 0.935)
    assert (tmp_path / "airbench94_muon-run2.log").read_text().splitlines()[:2] == [
        "epoch 1 val_acc 0.5", "epoch 2 val_acc 0.7"]


def test_record_appends_each_side_as_a_group_of_the_results_store(monkeypatch, tmp_path):
    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        from_numpy=lambda array: array, save=lambda data, path: None))
    accuracy = iter([0.9366, 0.9402])
    monkeypatch.setattr(anchor, "_timed", lambda what, run, *_: {
        "what": what, "run": run, "accuracy": next(accuracy), "wall_s": 900.4})
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    write_images(tmp_path / "images", ("train",))
    anchor.anchor("densenet_cifar10_cpu", script, 1, overrides=folder(tmp_path / "images"),
                  out_dir=tmp_path / "out", label="muon0.2", machine="EPYC-oneDNN",
                  store=tmp_path / "store")
    from benchmarks import results

    rows = results.read("accuracy", tmp_path / "store")
    assert [(row["group"], row["recipe"], row["value"], row["seed"], row["split"]) for row in rows] == [
        ("anchor muon0.2 airbench94_muon EPYC-oneDNN", "airbench94_muon", "0.9366", "", "validation"),
        ("anchor muon0.2 densenet_cifar10_cpu EPYC-oneDNN", "densenet_cifar10_cpu", "0.9402", "0",
         "validation")]
    assert rows[0]["command"].startswith("python -m benchmarks anchor densenet_cifar10_cpu "
                                         "--script airbench94_muon.py runs=1 data.source=folder")
    assert rows[1]["wall_s"] == "900" and rows[1]["kit"] and rows[1]["epochs"]


def test_profile_tables_each_sides_phases_and_records_them(monkeypatch, tmp_path):
    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    monkeypatch.setattr(anchor.phases, "check_sampler", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        from_numpy=lambda array: array, save=lambda data, path: None))
    profiles = []

    def timed(what, run, command, cwd, environment, accuracy, out_dir, profile):
        profiles.append(profile)
        split = dict.fromkeys(anchor.phases.NAMES, 0.0)
        split.update({"training steps": 600.0, "evaluation": 200.0, "imports": 200.0})
        return {"what": what, "run": run, "accuracy": 0.94, "wall_s": 1000.0, "phases": split}

    monkeypatch.setattr(anchor, "_timed", timed)
    script = tmp_path / "airbench94_muon.py"
    script.write_text(STAND_IN)
    write_images(tmp_path / "images", ("train",))
    anchor.anchor("densenet_cifar10_cpu", script, 1, overrides=folder(tmp_path / "images"),
                  out_dir=tmp_path / "out", label="profiled", machine="EPYC-oneDNN",
                  store=tmp_path / "store", profile=True)
    # airbench's run is sampled (True), the recipe's with its run directory for trace_s
    assert profiles == [True, tmp_path / "out" / "densenet_cifar10_cpu-seed0"]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| training steps | 600 s (60%) | 600 s (60%) |" in table
    from benchmarks import results

    rows = results.read("speed", tmp_path / "store")
    assert {row["group"] for row in rows} == {"phases profiled EPYC-oneDNN"}
    steps = [row for row in rows if row["variant"] == "training steps"]
    assert [(row["recipe"], row["metric"], row["value"]) for row in steps] == [
        ("airbench94_muon", "phase_s", "600"), ("airbench94_muon", "phase_share", "0.6"),
        ("densenet_cifar10_cpu", "phase_s", "600"), ("densenet_cifar10_cpu", "phase_share", "0.6")]
    assert "--profile" in rows[0]["command"]


def test_profile_without_py_spy_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(anchor.phases.shutil, "which", lambda name: None)
    monkeypatch.setattr(anchor.phases.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(UserError, match="pip install -r requirements-torch.txt"):
        anchor.phases.sampler()


@pytest.mark.slow  # starts a process under py-spy
def test_a_profiled_run_splits_its_wall_time_into_phases(monkeypatch, tmp_path):
    try:
        anchor.phases.check_sampler()
    except UserError as refusal:  # a container without ptrace: the refusal is the line users see
        pytest.skip(str(refusal))
    # A stand-in for the patched script: its `main` trains (here, sleeps) for 2 s.
    (tmp_path / "airbench94_muon_cpu.py").write_text(
        "import time\ndef main():\n    time.sleep(2)\n    print('Mean: 0.9400')\nmain()\n")
    # Its output folder given relative to here, as anchor's runs/ is, while it runs in its own.
    here = tmp_path / "here"
    (here / "out").mkdir(parents=True)
    monkeypatch.chdir(here)
    row = anchor._timed("airbench94_muon.py", 0, [sys.executable, "airbench94_muon_cpu.py"],
                        tmp_path, {}, anchor.MEAN.findall, Path("out"), True)
    split = row["phases"]
    assert list(split) == list(anchor.phases.NAMES)
    assert sum(split.values()) == pytest.approx(row["wall_s"])
    assert split["training steps"] > 0.5 * row["wall_s"], split
    assert (here / "out" / "airbench94_muon-run0.pyspy.txt").is_file()
