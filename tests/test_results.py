"""The results store (results/*.csv) and what is generated from it: every table of
measured figures in the README and docs/ is what `make results` writes from the
rows, a group of seeds shows its mean and spread, and `recipes record` appends a
finished run's row."""

import csv
import re

import pytest

from benchmarks import results
from conftest import ROOT
from keras_course_recipes.tools import record

CLASSES = set(re.findall(r"\*\*([\w-]+)\*\*", (ROOT / "docs" / "machines.md").read_text()))


def test_every_generated_table_is_what_the_store_gives():
    assert [page.name for page in results.stale()] == [], "run make results"


def test_the_pages_have_generated_tables():
    blocks = [kind for page in results.PAGES for _, kind, *_ in
              results.BLOCK.findall(page.read_text())]
    assert "recipes" in blocks and blocks.count("groups") >= 3, blocks


def test_every_row_of_the_store_is_complete_and_names_a_machine_class():
    rows = results.read("accuracy")
    assert len(rows) > 20
    for row in rows:
        assert list(row) == list(record.COLUMNS), row
        assert row["split"] in ("validation", "test") and 0 < float(row["value"]) <= 1, row
        assert row["machine"] in CLASSES, row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]) and row["command"], row
    assert {row["machine"] for row in results.read("ablation")} <= CLASSES
    headlines = {row["headline"] for row in results.read("references") if row["headline"]}
    assert headlines <= {row["group"] for row in rows}


def test_the_store_is_plain_lf_text_as_recipes_record_appends_it(tmp_path):
    for path in results.STORE.glob("*.csv"):
        assert b"\r" not in path.read_bytes(), f"{path.name} has CRLF line ends"
    record.append([dict.fromkeys(record.SPEED_COLUMNS, "x")], tmp_path, "speed",
                  record.SPEED_COLUMNS)
    assert (tmp_path / "speed.csv").read_bytes().count(b"\n") == 2
    assert b"\r" not in (tmp_path / "speed.csv").read_bytes()


@pytest.mark.parametrize("name", ["speed", "checks"])
def test_every_measurement_row_is_complete_and_names_a_machine_class(name):
    rows = results.read(name)
    assert len(rows) > 20
    for row in rows:
        assert list(row) == list(record.SPEED_COLUMNS), row
        assert row["machine"] in CLASSES and row["command"] and row["metric"], row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["date"]), row
    blocks = [kind for page in results.PAGES for _, kind, *_ in
              results.BLOCK.findall(page.read_text())]
    assert blocks.count("pivot") >= 3, blocks


SPEED = [("graph", "step_ms_median", "1443.2", "1393;1536;1443.2"),
         ("graph", "input_wait_fraction", "0.0051", ""), ("eager", "step_ms_median", "5.3", ""),
         ("graph", "speedup_vs_eager", "2.66", ""), ("eager", "speedup_vs_eager", "1", "")]


def write_speed(folder):
    folder.mkdir(exist_ok=True)
    with (folder / "speed.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, record.SPEED_COLUMNS)
        writer.writeheader()
        for mode, metric, value, runs in SPEED:
            writer.writerow({**dict.fromkeys(record.SPEED_COLUMNS, ""), "group": "g",
                             "recipe": "densenet_cifar100", "mode": mode, "batch": 64,
                             "params": 824027, "metric": metric, "value": value, "runs": runs})
    return folder


def test_a_pivot_shows_a_column_per_mode_or_per_metric(tmp_path):
    store = write_speed(tmp_path / "store")
    by_mode = results.pivot_table(store, "speed", "g", "recipe", "mode",
                                  metric="speedup_vs_eager", first="params")
    assert by_mode.splitlines() == ["| recipe | params | `graph` | `eager` |", "|---|---|---|---|",
                                    "| densenet_cifar100 | 824,027 | 2.7x | 1.0x |"]
    by_metric = results.pivot_table(store, "speed", "g", "recipe,mode", "metric",
                                    metrics="step_ms_median,runs,input_wait_fraction")
    assert by_metric.splitlines()[2:] == [
        "| densenet_cifar100 | graph | 1,443 | 1,393, 1,536, 1,443 | 0.5% |",
        "| densenet_cifar100 | eager | 5.30 | – | – |"]
    named = results.pivot_table(store, "speed", "g", "recipe", "mode", metric="step_ms_median",
                                labels="recipe (batch 64);graph, ms;eager, ms")
    assert named.splitlines()[0] == "| recipe (batch 64) | graph, ms | eager, ms |"
    with pytest.raises(SystemExit, match="no row of speed.csv has group 'h'"):
        results.pivot_table(store, "speed", "h", "recipe", "mode", metric="step_ms_median")


@pytest.mark.parametrize("text", [
    '{"rows": 3}', '{"rows": [5], "device": {}, "recipe": "r"}',
    '{"rows": [{"step_ms_median": "abc"}], "device": {}, "recipe": "r"}',
    '{"rows": [{"step_ms_median": 2, "step_ms_runs": [null]}], "device": {}, "recipe": "r"}',
    '{"rows": [{"size": "10", "step_ms_median": 2}], "device": {}, "recipe": "r"}'])
def test_recording_a_folder_of_someone_elses_results_json_is_one_line(text, tmp_path):
    (tmp_path / "results.json").write_text(text)
    with pytest.raises(record.UserError, match="is not what compare, compare-sizes, scaling"):
        record.speed_rows(tmp_path)


def write_store(folder, values):
    folder.mkdir(exist_ok=True)
    with (folder / "accuracy.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, record.COLUMNS)
        writer.writeheader()
        for seed, (value, wall) in enumerate(values):
            writer.writerow({**dict.fromkeys(record.COLUMNS, ""), "group": "g 20ep",
                             "recipe": "densenet_cifar10_cpu", "command": "unrecorded",
                             "split": "validation", "metric": "accuracy", "value": value,
                             "epochs": 20, "wall_s": wall, "seed": seed,
                             "machine": "EPYC-oneDNN", "date": "2026-11-25"})
    return folder


def test_a_group_of_seeds_shows_their_mean_and_spread(tmp_path):
    store = write_store(tmp_path / "store", [("0.9416", "2169"), ("0.9428", "2290")])
    page = "<!-- results: groups file=accuracy groups=g 20ep -->\nstale\n<!-- /results -->\n"
    table = results.regenerate(page, store)
    assert "| `densenet_cifar10_cpu` | g 20ep | validation | 2 | 94.22% (94.16% to 94.28%) | 20 | 37 min | EPYC-oneDNN | 2026-11-25 |" in table
    assert "stale" not in table and results.regenerate(table, store) == table
    assert results.headline(results.grouped(results.read("accuracy", store), "g 20ep")) == (
        "94.22% validation (2 seeds), 37 min, EPYC-oneDNN")


def test_a_marker_naming_a_group_the_store_lacks_is_one_line(tmp_path):
    store = write_store(tmp_path / "store", [("0.9", "60")])
    with pytest.raises(SystemExit, match="no row of the store has group 'missing'"):
        results.regenerate("<!-- results: groups file=accuracy groups=missing -->\n"
                           "<!-- /results -->", store)


def test_a_pair_shows_what_the_attempt_changed_the_difference_and_the_ratio(tmp_path):
    folder = tmp_path / "store"
    folder.mkdir()
    command = ("python -m benchmarks anchor cifar10_record --script airbench94_muon.py runs=2 "
               "data.early_size=20 data.source=folder data.path=/tmp/cifar")
    with (folder / "accuracy.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, record.COLUMNS)
        writer.writeheader()
        for side, values, wall in (("cifar10_record", ("0.9380", "0.9400"), "400"),
                                   ("airbench94_muon", ("0.9360", "0.9370"), "800")):
            for value in values:
                writer.writerow({**dict.fromkeys(record.COLUMNS, ""), "recipe": side,
                                 "group": f"anchor crop {side} EPYC-oneDNN", "command": command,
                                 "split": "validation", "metric": "accuracy", "value": value,
                                 "wall_s": wall, "machine": "EPYC-oneDNN", "date": "2026-12-07"})
    table = results.pairs_table(folder, "accuracy", "crop", "cifar10_record", "airbench94_muon",
                                "EPYC-oneDNN")
    assert table.splitlines()[2] == ("| crop | `data.early_size=20` | 2 | 93.90% (93.80% to 94.00%) "
                                     "| 93.65% (93.60% to 93.70%) | +0.25 points | 0.50x |")
    with pytest.raises(SystemExit, match="no row of the store has group 'anchor other"):
        results.pairs_table(folder, "accuracy", "other", "cifar10_record", "airbench94_muon",
                            "EPYC-oneDNN")


def test_the_plot_draws_the_store(tmp_path):
    store = write_store(tmp_path / "store", [("0.9416", "2169"), ("0.9428", "2290")])
    out = results.plot(store, tmp_path / "plot.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("device, machine", [
    ({"cpu": "AMD EPYC 9R14", "cpu_generation": "family 25, model 17",
      "cpu_features": ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]}, "EPYC-oneDNN"),
    ({"cpu": "AMD EPYC", "cpu_generation": "family 26, model 2",
      "cpu_features": ["avx2", "avx512_bf16"]}, "EPYC-Zen5"),
    ({"cpu": "AMD EPYC", "cpu_generation": "family 25, model 1", "cpu_features": ["avx2"]},
     "EPYC-AVX2"),
    ({"cpu": "Intel(R) Xeon(R) Platinum 8488C", "cpu_features": ["avx512_bf16", "amx_tile"]},
     "Xeon-AMX"),
    ({"cpu": "Intel(R) Xeon(R) Platinum", "cpu_features": ["avx512_bf16"]}, "Xeon-AVX512"),
    ({"cpu": "Apple M2", "cpu_features": []}, None),
    ({"cpu": "Intel(R) Xeon(R) Platinum 8480+", "gpus": ["NVIDIA H100 80GB HBM3"]}, "GPU-H100"),
    ({"cpu": "Intel(R) Xeon(R)", "gpus": ["NVIDIA H200"]}, "GPU-H200"),
])
def test_the_machine_class_comes_from_the_cpu_a_run_recorded(device, machine):
    assert record.machine_class(device) == machine


def test_the_classes_record_names_are_the_pages():
    assert set(record.MACHINES) == CLASSES


def test_recording_a_folder_without_metrics_is_one_line(tmp_path):
    with pytest.raises(record.UserError, match="holds no metrics.json"):
        record.row(tmp_path)


@pytest.mark.parametrize("text", ['{"x": 1}', '[1, 2]'])
def test_recording_a_metrics_json_the_kit_did_not_write_is_one_line(text, tmp_path):
    (tmp_path / "metrics.json").write_text(text)
    with pytest.raises(record.UserError, match="is not a metrics.json of this kit's"):
        record.row(tmp_path)


@pytest.mark.parametrize("results_json, variants", [
    ({"tool": "compare-sizes", "size_key": "model.depth",
      "rows": [{"size": "10", "mode": "graph", "params": 24017, "step_ms_median": 2.0}]},
     ["model.depth=10"]),
    ({"tool": "scaling", "rows": [{"strategy": "mirrored", "mode": "graph", "global_batch": 64,
                                   "images_per_s": 266.0, "scaling_efficiency": 0.269}]},
     ["mirrored", "mirrored"]),
])
def test_each_tools_rows_name_what_tells_them_apart(results_json, variants, tmp_path):
    import json

    device = {"cpu": "AMD EPYC", "cpu_features": ["avx2"], "gpus": []}
    (tmp_path / "results.json").write_text(json.dumps(
        {**results_json, "recipe": "r", "command": "recipes x r", "device": device}))
    stored = record.speed_rows(tmp_path)
    assert [found["variant"] for found in stored] == variants
    assert {found["machine"] for found in stored} == {"EPYC-AVX2"}
    assert stored[0]["group"] == f"{results_json['tool']} r EPYC-AVX2"
