"""`recipes record` and the results store refuse what is not a figure: a run
directory the kit did not write as it expects is one line, a run already
recorded, trained on random images, with a figure that is not finite, or unlike
the group it would join is refused in one line, and `make results` names the file
and line of a damaged row. The runs here are metrics.json and config.yaml written
by hand: nothing trains (the one test that does is marked slow)."""

import csv
import hashlib
import io
import json
import shlex
import shutil

import pytest

from benchmarks import results
from keras_course_recipes import __main__ as cli
from keras_course_recipes import recipe_config, errors, rundir
from keras_course_recipes.tools import record

DEVICE = {"cpu": "AMD EPYC 7R13", "cpu_generation": "family 25, model 1",
          "cpu_features": ["avx2"], "gpus": []}


def finished_run(folder, *overrides, **metrics):
    """A finished mnist_mlp run of 2 epochs in `folder`, as the harness leaves it
    (config.yaml, metrics.json), its config `overrides` and metrics.json's
    top-level keys `metrics` changed."""
    folder.mkdir(parents=True)
    config = recipe_config.resolve("mnist_mlp", overrides=[
        "data.source=folder", f"data.path={folder.parent / 'images'}", "train.epochs=2",
        *overrides], announce=lambda line: None)
    rundir.write_config(folder, config)
    written = {"recipe": "mnist_mlp", "run_dir": str(folder), "precision": "float32",
               "weights_sha256": hashlib.sha256(str(folder).encode()).hexdigest(),
               "epochs_completed": config["train"]["epochs"], "test": {"accuracy": 0.9123},
               "evaluated_on": "test", "timing": {"epoch_s": [10.2, 9.7], "images_per_s": 612.0},
               "versions": {"tensorflow": "2.21.0", "keras": "3.15.1",
                            "keras-course-recipes": "1.0.0", "commit": "abc1234"},
               "device": DEVICE}
    written.update(metrics)
    (folder / "metrics.json").write_text(json.dumps(written))  # NaN as Python writes it
    return folder


def command_line(capsys, *args):
    """(exit status, stdout, stderr) of `recipes ARGS`, in this process."""
    capsys.readouterr()
    status = cli.run_cli([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, *args):
    """stderr's one line of `recipes ARGS`, which must exit non-zero without a traceback."""
    status, _, err = command_line(capsys, *args)
    assert status != 0 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def stored(store):
    path = store / "accuracy.csv"
    return list(csv.DictReader(path.open(newline=""))) if path.exists() else []


# ---------------------------------------------------------------- the command it records

def test_the_recorded_command_has_every_changed_training_key_the_resumable_ones_too(tmp_path):
    run = finished_run(tmp_path / "run", "train.epochs=1", "execution.mode=eager",
                       "model.hidden_units=[16, 16]", "run.verbose=0", "execution.seed=3",
                       epochs_completed=1, timing={"epoch_s": [3.0]})
    found = record.row(run)
    words = shlex.split(found["command"])
    assert words[:3] == ["recipes", "run", "mnist_mlp"]
    assert sorted(words[3:]) == sorted([
        "data.path=" + str(tmp_path / "images"), "data.source=folder", "execution.mode=eager",
        "execution.seed=3", "model.hidden_units=[16, 16]", "train.epochs=1"])
    assert (found["epochs"], found["dataset"], found["precision"]) == (1, "mnist", "float32")


def test_the_resume_checks_still_let_the_resumable_keys_change():
    old = {"train": {"epochs": 2, "lr": 0.1}, "execution": {"mode": "graph"}, "run": {"dir": "a"}}
    new = {"train": {"epochs": 5, "lr": 0.1}, "execution": {"mode": "eager"}, "run": {"dir": "b"}}
    assert rundir.changed_keys(old, new) == []
    assert record.training_keys(old, new) == ["execution.mode", "train.epochs"]


@pytest.mark.slow  # trains twice
def test_the_recorded_command_trains_the_same_run_again(tmp_path, monkeypatch, capsys):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", 12), ("test", 4)):
        for name in ("cat", "dog"):
            (tmp_path / "images" / split / name).mkdir(parents=True)
            for number in range(count):
                Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8), "L").save(
                    tmp_path / "images" / split / name / f"{number}.png")
    monkeypatch.chdir(tmp_path)
    first, again, store = tmp_path / "first", tmp_path / "again", tmp_path / "store"
    assert cli.main(["run", "mnist_mlp", "data.source=folder", f"data.path={tmp_path / 'images'}",
                     "data.batch_size=8", "data.validation_split=0.25", "train.epochs=1",
                     "execution.mode=eager", "model.hidden_units=[16, 16]", "execution.seed=3",
                     "execution.onednn=null", "run.verbose=0", f"run.dir={first}"]) == 0
    capsys.readouterr()
    assert cli.main(["record", str(first), "--group", "tiny folder", "--machine", "EPYC-AVX2",
                     "--store", str(store)]) == 0
    assert "recorded mnist_mlp (tiny folder): test accuracy" in capsys.readouterr().out
    (row,) = stored(store)
    assert row["kit"] and row["tensorflow"] and row["keras"] and len(row["weights"]) == 16
    words = shlex.split(row["command"])
    assert words[:2] == ["recipes", "run"] and "train.epochs=1" in words
    assert cli.main([*words[1:], f"run.dir={again}"]) == 0

    def training(run_dir):
        config = rundir.read_config(run_dir)
        del config["run"]
        return config

    assert training(again) == training(first)
    assert (row["dataset"], row["split"], row["epochs"], row["seed"], row["precision"]) == (
        "mnist", "test", "1", "3", "float32")
    # The same command, the same seed: the same weights, which are the same figure.
    message = refused(capsys, "record", again, "--group", "tiny folder", "--machine",
                      "EPYC-AVX2", "--store", store)
    assert "recorded already" in message and "the same weights" in message


# ---------------------------------------------------------------- a run directory it cannot read

@pytest.mark.parametrize("metrics, named", [
    ({"test": {"accuracy": "abc"}}, "test.accuracy"),
    ({"timing": {"images_per_s": 612.0}}, "timing.epoch_s"),
    ({"device": "AMD EPYC"}, "device"),
    ({"test": None}, "test"),
    ({"versions": [1, 2]}, "versions"),
    ({"epochs_completed": "two"}, "epochs_completed"),
])
def test_a_metrics_json_of_another_shape_is_one_line(metrics, named, tmp_path, capsys):
    run = finished_run(tmp_path / "run", **metrics)
    message = refused(capsys, "record", run, "--store", tmp_path / "store")
    assert "metrics.json" in message and f"`{named}`" in message, message
    assert not (tmp_path / "store").exists()


def test_a_run_without_its_config_is_one_line(tmp_path, capsys):
    run = finished_run(tmp_path / "run")
    (run / "config.yaml").unlink()
    message = refused(capsys, "record", run, "--store", tmp_path / "store")
    assert "config.yaml" in message


def test_a_store_that_is_a_file_is_one_line(tmp_path, capsys):
    run = finished_run(tmp_path / "run")
    (tmp_path / "file").write_text("x")
    message = refused(capsys, "record", run, "--store", tmp_path / "file")
    assert "--store" in message and "file" in message


def test_a_store_that_cannot_be_written_is_one_line(tmp_path, capsys):
    run = finished_run(tmp_path / "run")
    message = refused(capsys, "record", run, "--store", "/proc/recipes-store")
    assert "--store" in message and "/proc/recipes-store" in message


# ---------------------------------------------------------------- what the store refuses

def test_a_run_on_random_images_is_refused(tmp_path, capsys):
    run = finished_run(tmp_path / "run", "data.source=synthetic")
    message = refused(capsys, "record", run, "--store", tmp_path / "store")
    assert "data.source=synthetic" in message
    assert stored(tmp_path / "store") == []


@pytest.mark.parametrize("accuracy", [float("nan"), None, float("inf")])
def test_an_accuracy_that_is_not_finite_is_refused(accuracy, tmp_path, capsys):
    run = finished_run(tmp_path / "run", test={"accuracy": accuracy})
    message = refused(capsys, "record", run, "--store", tmp_path / "store")
    assert "not a finite" in message
    assert stored(tmp_path / "store") == []


def test_a_run_recorded_twice_is_refused(tmp_path, capsys):
    run, store = finished_run(tmp_path / "run"), tmp_path / "store"
    assert command_line(capsys, "record", run, "--group", "g", "--store", store)[0] == 0
    message = refused(capsys, "record", run, "--group", "g", "--store", store)
    assert "recorded already" in message and "line 2" in message and "run directory" in message
    # In one command, too: nothing is written then.
    other = finished_run(tmp_path / "other")
    message = refused(capsys, "record", other, other, "--group", "g", "--store", store)
    assert "recorded already" in message
    assert len(stored(store)) == 1


def test_a_copy_of_a_recorded_run_is_refused_by_its_weights(tmp_path, capsys):
    run, store = finished_run(tmp_path / "run"), tmp_path / "store"
    assert command_line(capsys, "record", run, "--store", store)[0] == 0
    shutil.copytree(run, tmp_path / "copy")
    message = refused(capsys, "record", tmp_path / "copy", "--store", store)
    assert "the same weights" in message
    assert len(stored(store)) == 1


@pytest.mark.parametrize("overrides, metrics, column", [
    (["train.epochs=1"], {"epochs_completed": 1, "timing": {"epoch_s": [3.0]}}, "epochs"),
    ([], {"evaluated_on": "validation"}, "split"),
    (["data.name=fashion_mnist"], {}, "dataset"),
    (["execution.precision=mixed_bfloat16"], {}, "precision"),
    ([], {"device": {**DEVICE, "cpu_features": ["avx2", "avx512_bf16"]}}, "machine"),
])
def test_a_run_unlike_its_group_is_refused(overrides, metrics, column, tmp_path, capsys):
    store = tmp_path / "store"
    assert command_line(capsys, "record", finished_run(tmp_path / "a"), "--group", "g",
                        "--store", store)[0] == 0
    other = finished_run(tmp_path / "b", *overrides, **metrics)
    message = refused(capsys, "record", other, "--group", "g", "--store", store)
    assert f"its {column} is" in message and "group 'g'" in message, message
    assert len(stored(store)) == 1
    # In a group of its own, it is a row.
    assert command_line(capsys, "record", other, "--group", "h", "--store", store)[0] == 0


def test_a_blank_cell_never_conflicts(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    with (store / "accuracy.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, record.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerow({**dict.fromkeys(record.COLUMNS, ""), "group": "g", "recipe": "mnist_mlp",
                         "command": "unrecorded", "split": "test", "metric": "accuracy",
                         "value": "0.9", "machine": "EPYC-AVX2", "date": "2026-11-25"})
    assert command_line(capsys, "record", finished_run(tmp_path / "run"), "--group", "g",
                        "--store", store)[0] == 0
    assert len(stored(store)) == 2


def test_the_probes_synthetic_run_leaves_the_readme_as_it_was(tmp_path, capsys):
    store = shutil.copytree(results.STORE, tmp_path / "store")
    run = finished_run(tmp_path / "run", "data.source=synthetic", "train.epochs=1",
                       epochs_completed=1, timing={"epoch_s": [1.0]},
                       device={**DEVICE, "cpu_features": ["avx2", "avx512_bf16"]})
    refused(capsys, "record", run, "--group", "mnist_mlp 20ep oneDNN", "--store", store)
    assert (store / "accuracy.csv").read_bytes() == (results.STORE / "accuracy.csv").read_bytes()


def test_anchors_rows_pass_the_same_checks(tmp_path):
    row = {**dict.fromkeys(record.COLUMNS, ""), "group": "anchor x", "recipe": "airbench94_muon",
           "command": "python -m benchmarks anchor", "dataset": "cifar10", "split": "validation",
           "metric": "accuracy", "value": "nan", "machine": "EPYC-oneDNN", "date": "2026-11-25"}
    with pytest.raises(record.UserError, match="not a finite"):
        record.append([row], tmp_path)
    assert not (tmp_path / "accuracy.csv").exists()


# ---------------------------------------------------------------- a wheel has no docs/

def test_record_names_the_machine_classes_not_a_page_a_wheel_lacks(monkeypatch, capsys,
                                                                    tmp_path):
    monkeypatch.setattr(errors, "checkout", lambda: None)
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at hyphens: EPYC-\noneDNN
    with pytest.raises(SystemExit):
        cli.run_cli(["record", "-h"])
    help_text = capsys.readouterr().out
    assert "docs/machines.md" not in help_text and "EPYC-oneDNN" in help_text
    run = finished_run(tmp_path / "run", device={"cpu": "Apple M2", "cpu_features": []})
    message = refused(capsys, "record", run, "--store", tmp_path / "store")
    assert "docs/machines.md" not in message and "EPYC-AVX2" in message and "--machine" in message


def test_in_a_checkout_record_names_the_page_of_classes(tmp_path, capsys):
    assert errors.checkout() is not None
    run = finished_run(tmp_path / "run", device={"cpu": "Apple M2", "cpu_features": []})
    assert "docs/machines.md" in refused(capsys, "record", run, "--store", tmp_path / "store")


# ---------------------------------------------------------------- make results reads every row

def damaged_store(tmp_path, change):
    """A copy of results/ whose accuracy.csv's lines `change` edits."""
    store = shutil.copytree(results.STORE, tmp_path / "store")
    lines = (store / "accuracy.csv").read_text().splitlines(keepends=True)
    (store / "accuracy.csv").write_text("".join(change(lines)))
    return store


def rewritten(edit):
    """A change of the file's lines: its rows as csv reads them, `edit`ed, written back."""
    def change(lines):
        rows = list(csv.reader(lines))
        edit(rows)
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        return [text.getvalue()]
    return change


def value_edited(rows):
    rows[5][rows[0].index("value")] = "abc"


def column_deleted(rows):
    gone = rows[0].index("wall_s")
    for cells in rows:
        del cells[gone]


@pytest.mark.parametrize("change, line, says", [
    (rewritten(value_edited), 6, "value"),
    (rewritten(column_deleted), 1, "header"),
    # Cut inside the command's quotes: the next line would read as the rest of the row.
    (lambda lines: [*lines[:3], lines[3][:40] + "\n", *lines[4:]], 4, "runs on to line 5"),
    (lambda lines: [*lines[:3], lines[3][:150] + "\n", *lines[4:]], 4, "field"),
    (lambda lines: [*lines, "garbage\n"], None, "1 field where the header names 22"),
])
def test_make_results_names_the_file_and_line_of_a_damaged_row(change, line, says, tmp_path):
    store = damaged_store(tmp_path, change)
    line = line or len((store / "accuracy.csv").read_text().splitlines())
    with pytest.raises(SystemExit) as raised:
        results.main(["--check", "--store", str(store)])
    message = str(raised.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert f"accuracy.csv, line {line}:" in message and says in message, message


def test_make_results_reads_an_intact_copy_of_the_store(tmp_path):
    store = shutil.copytree(results.STORE, tmp_path / "store")
    assert results.main(["--check", "--store", str(store)]) == 0


def test_make_results_checks_the_other_files_too(tmp_path):
    store = shutil.copytree(results.STORE, tmp_path / "store")
    with (store / "speed.csv").open("a") as file:
        file.write("garbage\n")
    with pytest.raises(SystemExit, match=r"speed\.csv, line \d+: "):
        results.main(["--check", "--store", str(store)])


def test_every_row_of_the_store_passes_the_checks_record_makes():
    rows = record.read_rows(results.STORE / "accuracy.csv", record.COLUMNS)
    assert all(row["dataset"] in ("mnist", "fashion_mnist", "cifar10") for row in rows)
    assert {row["precision"] for row in rows} <= {"", "float32", "mixed_bfloat16"}


def test_anchor_refuses_a_group_unlike_its_runs_before_it_trains(monkeypatch, tmp_path):
    import sys
    import types

    import test_anchor
    from benchmarks import anchor

    monkeypatch.setattr(anchor, "torch_installed", lambda: True)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        from_numpy=lambda array: array, save=lambda data, path: None))
    monkeypatch.setattr(anchor, "_timed", lambda *_: pytest.fail("anchor trained"))
    script = tmp_path / "airbench94_muon.py"
    script.write_text(test_anchor.STAND_IN)
    test_anchor.write_images(tmp_path / "images", ("train",))
    store = tmp_path / "store"
    store.mkdir()
    with (store / "accuracy.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, record.COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerow({**dict.fromkeys(record.COLUMNS, ""),
                         "group": "anchor muon0.2 densenet_cifar10_cpu EPYC-oneDNN",
                         "recipe": "densenet_cifar10_cpu", "command": "unrecorded",
                         "split": "validation", "metric": "accuracy", "value": "0.94",
                         "epochs": "20", "machine": "EPYC-oneDNN", "date": "2026-11-25"})
    with pytest.raises(record.UserError, match="its epochs is 3, and group 'anchor muon0.2"):
        anchor.anchor("densenet_cifar10_cpu", script, 1, overrides=test_anchor.folder(
            tmp_path / "images", "train.epochs=3"), out_dir=tmp_path / "out", label="muon0.2",
            machine="EPYC-oneDNN", store=store)
    assert not (tmp_path / "out").exists()
