"""`python -m keras_course_recipes curves`: validation accuracy against wall time, from history.csv."""

import csv

import pytest

import numpy as np

from keras_course_recipes import rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import curves as _curves


def write_run(run_dir, epoch_seconds, accuracies):
    run_dir.mkdir(parents=True)
    rundir.write_config(run_dir, {"recipe": "cifar10_cnn"})
    with (run_dir / "history.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["epoch", "accuracy", "time_epoch_s", "val_accuracy"])
        for epoch, (seconds, accuracy) in enumerate(zip(epoch_seconds, accuracies)):
            writer.writerow([epoch, 0.5, seconds, accuracy])


def test_minutes_accumulate_the_epochs_wall_time(tmp_path):
    write_run(tmp_path / "a", [60, 120, 30], [0.4, 0.6, 0.55])
    label, minutes, accuracy = _curves.read_curve(tmp_path / "a")
    assert label == "cifar10_cnn (a)"
    assert minutes == pytest.approx([1.0, 3.0, 3.5]) and accuracy == [0.4, 0.6, 0.55]


def test_the_plot_has_a_line_per_run(tmp_path, capsys):
    write_run(tmp_path / "a", [60, 60], [0.4, 0.6])
    write_run(tmp_path / "b", [30, 30, 30], [0.3, 0.5, 0.7])
    path = _curves.curves([tmp_path / "a", tmp_path / "b"])
    assert path == tmp_path / "a" / "accuracy_vs_time.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "best val_accuracy 0.6000 at 2.0 min (epoch 2 of 2" in printed
    assert "best val_accuracy 0.7000 at 1.5 min (epoch 3 of 3" in printed


def test_a_directory_without_a_history_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="holds no history.csv"):
        _curves.curves([tmp_path])


def test_time_to_accuracy_names_the_first_epoch_past_each_threshold(tmp_path, capsys):
    write_run(tmp_path / "a", [60, 60, 60], [0.84, 0.91, 0.93])
    write_run(tmp_path / "b", [30, 30], [0.86, 0.88])
    path = _curves.curves([tmp_path / "a", tmp_path / "b"], thresholds=(0.85, 0.90, 0.94))
    table = (path.parent / "time_to_accuracy.md").read_text().splitlines()
    assert table[0] == "| run | 85% | 90% | 94% | epochs | last |"
    assert table[2] == "| cifar10_cnn (a) | 2.0 | 2.0 | - | 3 | 93.00% |"
    assert table[3] == "| cifar10_cnn (b) | 0.5 | - | - | 2 | 88.00% |"
    assert table[2] in capsys.readouterr().out


def test_thresholds_outside_zero_to_one_are_refused():
    import argparse
    with pytest.raises(argparse.ArgumentTypeError, match="accuracies in"):
        _curves._fractions("85,90")
    assert _curves._fractions("0.85,0.9") == (0.85, 0.9)


RANDOM_BYTES = np.random.default_rng(0).bytes(300)


@pytest.mark.parametrize("damage, message", [
    (lambda run: (run / "history.csv").write_bytes(RANDOM_BYTES), "is not text"),
    (lambda run: (run / "history.csv").write_text(
        "epoch,time_epoch_s,val_accuracy\n0,60,0.5\n1,NA,0.6\n"), "epoch 1 has no time_epoch_s"),
    (lambda run: (run / "history.csv").write_text(
        "epoch,time_epoch_s,val_accuracy\n0,,0.5\n"), "epoch 0 has no time_epoch_s"),
    (lambda run: (run / "config.yaml").write_bytes(RANDOM_BYTES),
     "config.yaml is not the config this run wrote"),
])
def test_a_damaged_run_is_one_line(damage, message, tmp_path):
    write_run(tmp_path / "a", [60, 60], [0.4, 0.6])
    damage(tmp_path / "a")
    with pytest.raises(UserError, match=message):
        _curves.curves([tmp_path / "a"])


def test_an_out_path_that_cannot_be_written_is_one_line(tmp_path):
    write_run(tmp_path / "a", [60], [0.4])
    (tmp_path / "a_file").write_text("not a folder")  # unwritable below, even for root
    with pytest.raises(UserError, match="Cannot write .*a_file.*--out"):
        _curves.curves([tmp_path / "a"], out=tmp_path / "a_file" / "plot.png")
