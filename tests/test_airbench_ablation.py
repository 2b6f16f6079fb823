"""benchmarks/airbench_ablation.py: airbench94_muon's loop in PyTorch with
the recipe's differences as variants. It trains a variant on random images
for a step, writes each run as a JSON line and the table, reads an image
folder in the official order its names give, and refuses an unknown variant
in one line. (The figures docs/cpu-hour.md gives came from a GPU: a run here
only checks that the code runs.)"""

import json
import shlex

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # PyTorch is optional: requirements-torch.txt

from conftest import ROOT  # noqa: E402  (after the skip)
from benchmarks import airbench_ablation  # noqa: E402


@pytest.mark.benchmark  # a record tool's run: make test-benchmarks
@pytest.mark.slow  # trains a PyTorch network
def test_a_variant_trains_a_step_and_writes_its_line_and_the_table(tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    # 1,200 random images: 1,080 to train on, one batch of 1,024; 120 held out.
    assert airbench_ablation.main(["--synthetic", "1200", "--epochs", "1", "--runs", "1",
                                   "--variants", "recipe-airbench-net", "--out", str(out)]) == 0
    (line,) = out.read_text().splitlines()
    run = json.loads(line)
    assert run["variant"] == "recipe-airbench-net" and 0 <= run["six_views"] <= 1
    assert "| recipe-airbench-net | 1 |" in capsys.readouterr().out


def test_an_unknown_variant_is_one_line_naming_the_variants(capsys):
    with pytest.raises(SystemExit) as stopped:
        airbench_ablation.main(["--synthetic", "100", "--variants", "recipe,densenet"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown variant(s) densenet" in error and "recipe-airbench-net" in error


def test_a_folder_is_read_in_the_order_its_file_names_give(tmp_path):
    from PIL import Image
    # Indices out of class order, as the lossless CIFAR-10 archive's names are.
    for index, name in [(2, "cat"), (0, "dog"), (1, "cat")]:
        (tmp_path / "train" / name).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((32, 32, 3), index, np.uint8)).save(
            tmp_path / "train" / name / f"{index}_{name}.png")
    images, labels = airbench_ablation.read_folder(tmp_path)
    assert images[:, 0, 0, 0].tolist() == [0, 1, 2] and labels.tolist() == [1, 0, 0]


def test_a_folder_without_images_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        airbench_ablation.parse(["--data", str(tmp_path)])
    assert stopped.value.code == 2
    assert "holds neither train/<class>/* images" in capsys.readouterr().err


def test_every_command_the_docs_show_parses_with_its_variants(tmp_path):
    (tmp_path / "train").mkdir()  # DATA stands for the user's folder of train/<class>/*
    shown = [line for page in (ROOT / "docs").glob("*.md") for line in page.read_text().splitlines()
             if line.startswith("python -m benchmarks.airbench_ablation ")]
    assert len(shown) >= 2
    for line in shown:
        words = shlex.split(line)[3:]
        folder = words.index("--data") + 1
        words[folder] = str(tmp_path)
        assert airbench_ablation.parse(words).names


@pytest.mark.parametrize("argv", [["--runs", "0"], ["--epochs", "0"]])
def test_a_count_below_one_is_one_line(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        airbench_ablation.main(["--synthetic", "100", *argv])
    assert stopped.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_fewer_images_than_a_batch_is_one_line():
    with pytest.raises(SystemExit, match="fewer than one batch of 2,000"):
        airbench_ablation.main(["--synthetic", "1200", "--variants", "airbench"])
