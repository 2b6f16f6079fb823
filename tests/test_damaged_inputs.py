"""Damaged or changed files a run reads are repaired, said so in one line, or
refused in one line before anything is written: never a traceback. And what
a run prints works as printed."""

import shlex

import numpy as np
import pytest

import keras_course_recipes as kit
from conftest import run_with
from keras_course_recipes import errors, harness, history_csv
from keras_course_recipes.errors import UserError
from keras_course_recipes import folder as rfolder
from keras_course_recipes.tools import curves

from test_data import write_folder
from test_faults import StopAfterEpoch, interrupted_run


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_folder_cache_is_decoded_again_and_said_so(damage, tmp_path, capsys):
    write_folder(tmp_path, splits=("train",))
    images, labels, classes = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))
    cache = tmp_path / ".cache" / "train-32x32x3.npz"
    whole = cache.read_bytes()
    cache.write_bytes(whole[:len(whole) // 2] if damage == "truncate" else b"\0" * len(whole))
    capsys.readouterr()

    again = rfolder.folder_arrays(tmp_path / "train", (32, 32, 3))

    out = capsys.readouterr().out
    assert f"{cache} is damaged" in out and "decoding the 12 images" in out
    np.testing.assert_array_equal(again[0], images)
    assert again[2] == classes and cache.read_bytes() != b"\0" * len(whole)


TORN_HISTORY = "epoch,accuracy,loss,val_accuracy,val_loss,time_epoch_s\r\n" \
               "0,0.5,1.2,0.55,1.1,6.0\r\n1,0.6,1.0,0.65,0.9,6.0\r\n2,0.7,0.8"


def test_a_torn_last_history_row_is_left_out_when_read(tmp_path):
    history = tmp_path / "history.csv"
    history.write_bytes(TORN_HISTORY.encode())
    assert [row["accuracy"] for row in history_csv.read_history(history)] == [0.5, 0.6]
    assert history.read_bytes() == TORN_HISTORY.encode()  # reading alone changes nothing


def test_curves_on_a_torn_history_leaves_the_row_out_and_says_so(tmp_path, capsys):
    (tmp_path / "history.csv").write_bytes(TORN_HISTORY.encode())
    _, minutes, accuracy = curves.read_curve(tmp_path)
    assert accuracy == [0.55, 0.65] and minutes == [0.1, 0.2]
    assert "left out 1 incomplete row(s)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_torn_history_row_is_repaired_and_the_run_resumes(tiny_config, tmp_path, capsys):
    interrupted_run(tiny_config, epochs_done=3)  # a kill while writing epoch 3's row
    history = tmp_path / "run" / "history.csv"
    with history.open("a") as file:
        file.write("3,0.1")
    capsys.readouterr()

    metrics = harness.train(tiny_config("mnist_mlp", "train.epochs=5"))

    assert "repaired" in capsys.readouterr().out
    assert [int(row["epoch"]) for row in history_csv.read_rows(history)] == [0, 1, 2, 3, 4]
    assert "3,0.1" not in history.read_text().splitlines() and metrics["epochs_completed"] == 5


@pytest.mark.slow
def test_a_class_added_to_the_folder_is_refused_before_any_file_changes(tiny_config, tmp_path):
    write_folder(tmp_path / "data")
    folder = ["data.source=folder", f"data.path={tmp_path / 'data'}", "data.validation_split=0.25",
              "data.batch_size=4"]
    harness.train(tiny_config("mnist_mlp", *folder))
    run_dir = tmp_path / "run"
    before = {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"}
    write_folder(tmp_path / "data", classes=("emu",))

    with pytest.raises(UserError, match=r"other weights than the one its backup holds.*"
                                        r"\(512, 2\) there, \(512, 3\) now"):
        harness.train(tiny_config("mnist_mlp", *folder, "train.epochs=2"))

    assert {path: path.read_bytes() for path in run_dir.rglob("*")
                 if path.is_file() and path.name != ".lock"} == before


@pytest.mark.slow
def test_the_tensorboard_hint_is_quoted_for_the_shell(tiny_config, tmp_path, capsys):
    run_dir = tmp_path / "my runs" / "it's here"
    harness.train(tiny_config("mnist_mlp", f"run.dir={run_dir}"))
    [hint] = [line for line in capsys.readouterr().out.splitlines() if "--logdir" in line]
    command = hint.split("TensorBoard: ")[1]
    assert shlex.split(command) == ["tensorboard", "--logdir", str(run_dir / "tensorboard")]


@pytest.mark.slow
def test_resuming_the_latest_run_after_a_class_was_added_is_refused(tiny_config, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is relative to where a command runs
    write_folder(tmp_path / "data")
    folder = ["data.source=folder", f"data.path={tmp_path / 'data'}", "data.validation_split=0.25",
              "data.batch_size=4", "run.dir=null"]
    interrupted = tiny_config("mnist_mlp", *folder, "train.epochs=3")
    with pytest.raises(errors.Interrupted):
        run_with(kit.load("mnist_mlp"), interrupted, StopAfterEpoch(1))
    write_folder(tmp_path / "data", classes=("emu",))

    with pytest.raises(UserError, match="other weights than the one its backup holds"):
        harness.train(tiny_config("mnist_mlp", *folder, "train.epochs=3", "run.resume=true"))
