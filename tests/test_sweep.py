"""`python -m keras_course_recipes sweep`: every combination, the results table, resuming."""

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, TINY, TINY_MODEL
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import sweep as _sweep


def batch_norm(channels):
    return 2 * channels  # gamma and beta train; the moving statistics do not


def bottleneck_layer(channels, k):
    """BN-ReLU-Conv1x1(4k)-BN-ReLU-Conv3x3(k), convolutions without bias."""
    return batch_norm(channels) + channels * 4 * k + batch_norm(4 * k) + 9 * 4 * k * k


# conftest's tiny DenseNet-BC for 10 classes, counted by hand: depth 10 is one
# bottleneck layer per block, k=4, a stem of 2k maps, transitions halving the maps.
TINY_DENSENET_PARAMS = (
    27 * 8                                                 # stem: 3x3 from 3 maps to 8
    + bottleneck_layer(8, 4) + batch_norm(12) + 12 * 6     # block 1, 8 -> 12; transition to 6
    + bottleneck_layer(6, 4) + batch_norm(10) + 10 * 5     # block 2, 6 -> 10; transition to 5
    + bottleneck_layer(5, 4) + batch_norm(9)               # block 3, 5 -> 9; final BN
    + 9 * 10 + 10)                                         # classifier


@pytest.mark.slow
def test_two_combination_sweep_writes_the_table_and_resumes(tmp_path, capsys):
    overrides = [*TINY, *TINY_MODEL["densenet_cifar100"], "train.epochs=2"]
    rows = _sweep.sweep("densenet_cifar10", ["train.lr=[0.05,0.1]"],
                        overrides=overrides, sweep_dir=tmp_path)

    assert [(row["train.lr"], row["params"], row["mode"]) for row in rows] == [
        (0.05, TINY_DENSENET_PARAMS, "graph"), (0.1, TINY_DENSENET_PARAMS, "graph")]
    for row in rows:
        metrics = json.loads((Path(row["run_dir"]) / "metrics.json").read_text())
        with (Path(row["run_dir"]) / "history.csv").open() as file:
            history = list(csv.DictReader(file))
        # The run's own results, as its files hold them.
        assert row["best_val_accuracy"] == round(max(float(e["val_accuracy"]) for e in history), 4)
        assert row["test_accuracy"] == round(metrics["test"]["accuracy"], 4)
    with (tmp_path / "results.csv").open() as file:
        table = list(csv.DictReader(file))
    assert list(table[0]) == ["train.lr", *_sweep.COLUMNS]
    assert [(r["train.lr"], r["params"], r["mode"]) for r in table] == [
        ("0.05", str(TINY_DENSENET_PARAMS), "graph"), ("0.1", str(TINY_DENSENET_PARAMS), "graph")]
    markdown = (tmp_path / "results.md").read_text().splitlines()
    assert markdown[0] == "| train.lr | " + " | ".join(_sweep.COLUMNS) + " |"
    assert len(markdown) == 4
    assert markdown[2].startswith(f"| 0.05 | {TINY_DENSENET_PARAMS:,} | ")
    assert markdown[3].startswith(f"| 0.1 | {TINY_DENSENET_PARAMS:,} | ")
    assert "| train.lr |" in capsys.readouterr().out  # printed at the end

    finished = sorted(tmp_path.glob("*/metrics.json"))
    stamps = [path.stat().st_mtime_ns for path in finished]
    assert _sweep.sweep("densenet_cifar10", ["train.lr=[0.05,0.1]"],
                        overrides=overrides, sweep_dir=tmp_path) == rows
    assert capsys.readouterr().out.count("finished before, skipped") == 2
    assert [path.stat().st_mtime_ns for path in finished] == stamps


def test_the_row_has_the_best_val_accuracy_and_the_median_epoch_time(tmp_path):
    (tmp_path / "history.csv").write_text(
        "epoch,val_accuracy,val_loss\n0,0.5,1.0\n1,0.8,1.2\n2,0.7,0.9\n")
    metrics = {"timing": {"epoch_s": [5.0, 1.0, 3.0]}, "trainable_params": 10,
               "test": {"accuracy": 0.75}, "mode_used": "graph", "run_dir": str(tmp_path),
               # callbacks.monitor=val_loss picked epoch 2 for best.keras
               "best": {"epoch": 2, "val_accuracy": 0.7, "val_loss": 0.9}}
    row = _sweep._row(metrics)
    assert row["best_val_accuracy"] == 0.8 and row["s_per_epoch"] == 3.0


def test_seed_means_group_the_rows_by_every_key_but_the_seed():
    rows = [{"execution.seed": seed, "train.lr": lr, "test_accuracy": accuracy, "s_per_epoch": time}
            for seed, lr, accuracy, time in [(0, 0.1, 0.90, 2.0), (0, [1, 2], 0.80, 4.0),
                                             (1, 0.1, 0.94, 3.0), (1, [1, 2], 0.84, None),
                                             (2, 0.1, 0.92, 9.0)]]
    assert _sweep.seed_means(["train.lr"], rows) == [
        {"train.lr": 0.1, "seeds": 3, "mean_test_accuracy": 0.92, "lowest": 0.90,
         "highest": 0.94, "s_per_epoch": 3.0},
        {"train.lr": [1, 2], "seeds": 2, "mean_test_accuracy": 0.82, "lowest": 0.80,
         "highest": 0.84, "s_per_epoch": 4.0}]
    assert _sweep.seed_means([], rows[:3])[0]["seeds"] == 3  # the seed the only key


@pytest.mark.slow
def test_a_grid_over_seeds_writes_their_mean(tmp_path, capsys):
    rows = _sweep.sweep("mnist_mlp", ["execution.seed=[0,1]"],
                        overrides=[*TINY, "model.hidden_units=[8]"], sweep_dir=tmp_path)
    accuracies = [row["test_accuracy"] for row in rows]
    with (tmp_path / "seeds.csv").open() as file:
        assert list(csv.DictReader(file)) == [{
            "seeds": "2", "mean_test_accuracy": str(round(statistics.mean(accuracies), 4)),
            "lowest": str(min(accuracies)), "highest": str(max(accuracies)),
            "s_per_epoch": str(round(statistics.median(row["s_per_epoch"] for row in rows), 2))}]
    assert (tmp_path / "seeds.md").read_text().startswith("| seeds | mean_test_accuracy |")
    assert "over the seeds:" in capsys.readouterr().out


@pytest.mark.slow
def test_one_at_a_time_varies_each_key_alone_from_the_recipe_settings(tmp_path):
    rows = _sweep.sweep("mnist_mlp", ["train.lr=[0.001,0.01]", "model.dropout=[0.0]"],
                        overrides=[*TINY, "model.hidden_units=[8]"], sweep_dir=tmp_path,
                        one_at_a_time=True)
    # The recipe's own lr (0.001) and dropout (0.2) first; each change alone.
    assert [(row["train.lr"], row["model.dropout"]) for row in rows] == [
        (0.001, 0.2), (0.01, 0.2), (0.001, 0.0)]
    assert len(list(tmp_path.glob("*/metrics.json"))) == 3


@pytest.mark.parametrize("grid, message", [
    (["train.lr=0.1"], "--grid expects key=\\[value,...\\]"),
    (["train.lr=[]"], "--grid expects key=\\[value,...\\]"),
    (["train.lr=[0.1]", "train.lr=[0.2]"], "A key appears in more than one --grid"),
    (["train.lrate=[0.1]"], "Unknown config key 'train.lrate'"),
    # one run directory twice: the second would report the first's run again
    (["train.lr=[0.001,0.01,0.001]"], "--grid gives train.lr=0.001 more than once"),
])
def test_bad_grids_fail_before_training(grid, message, tmp_path):
    with pytest.raises(UserError, match=message):
        _sweep.sweep("mnist_mlp", grid, sweep_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_unwritable_sweep_folder_is_refused_naming_dir(tmp_path):
    (tmp_path / "a file").write_text("")
    with pytest.raises(UserError, match="Give a folder you can write to with --dir DIR") as error:
        _sweep.sweep("mnist_mlp", ["train.lr=[0.001]"], overrides=TINY,
                     sweep_dir=tmp_path / "a file" / "sweep")
    assert "run.dir" not in str(error.value)  # sweep sets each run's run.dir itself


@pytest.mark.slow
def test_cli_sweep_error_exits_2_without_a_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "keras_course_recipes", "sweep", "mnist_mlp", "--grid", "train.epochs=[1,x]",
         "data.source=synthetic"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "'train.epochs' expects an integer, got 'x'" in result.stderr
    assert "Traceback" not in result.stderr
