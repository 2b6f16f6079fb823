"""`make results` (`python -m benchmarks.results [--check]`): the README's and the
docs' tables of measured figures, generated from the results store, `results/*.csv`,
and the plot of CIFAR-10 accuracy against wall time.

A page marks each generated table with two comments, and the text between them is
this module's to write:

    <!-- results: groups file=accuracy groups=LABEL A;LABEL B -->
    <!-- /results -->

- `groups`: one row per group of `results/FILE.csv` (the seeds of one configuration),
  in the order given: its mean and spread over seeds, epochs, mean wall time, class;
- `rows`: the rows of `results/FILE.csv` whose `where=COLUMN:VALUE`, the `columns=` given;
- `recipes`: the README's recipe table, `results/references.csv` with each recipe's
  headline group from `results/accuracy.csv` as one cell;
- `pairs`: the anchor's side-by-side measurements, one row per `labels=A;B;...`: the
  groups `anchor LABEL RECIPE MACHINE` and `anchor LABEL ANCHOR MACHINE` (`recipe=`,
  `anchor=`, `machine=`), with the recipe's overrides beyond the data, each side's mean,
  the difference in points and the ratio of their mean wall times;
- `pivot`: the figures of one `group=` of `results/speed.csv` (one measurement: a
  compare, a benchmark), a row per distinct `rows=COLUMN[,COLUMN]` and a column per
  `mode` (`columns=mode metric=NAME`, `values=` to choose and order them) or per
  metric (`columns=metric metrics=NAME,...`; `runs` lists the step's runs); `first=`
  adds columns of the row itself (`params`, `batch`) after its label, and `labels=A;B;...`
  names every column of the header in place of the store's names.

`--check` writes nothing and exits 1, naming each block that differs from what the
store gives (tests/test_results.py runs it); `--store DIR` reads another copy of the
store. Every row read is checked first (`recipes record`'s `read_rows`): a damaged one,
a value that is no number, a line cut short, a column missing, a stray line, is one
line naming the file and the line's number, and exit status 1; never skipped.
"""

import argparse
import re
import statistics
import sys
from pathlib import Path

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import record

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLOT = ROOT / "docs" / "cifar10_accuracy_vs_time.png"
BLOCK = re.compile(r"(<!-- results: (\w+)(.*?) -->\n)(.*?)(<!-- /results -->)", re.DOTALL)


# Each file's columns (results/README.md says what they hold), and what its rows must be.
FILES = {"accuracy": (record.COLUMNS, None), "speed": (record.SPEED_COLUMNS, None),
         "checks": (record.SPEED_COLUMNS, None),
         "ablation": (("study", "variant", "description", "runs", "mean", "spread", "epochs",
                       "machine", "date", "command", "source"),
                      lambda row: None if not row["mean"] or record._finite(row["mean"]) is not None
                      else f"its mean is {row['mean']!r}, not a number"),
         "references": (("recipe", "model", "data", "reference", "headline"), None)}


def read(name, store=STORE):
    """The rows of `store/NAME.csv`, as dicts, each checked (`record.read_rows`)."""
    path = Path(store) / f"{name}.csv"
    if not path.is_file():
        raise SystemExit(f"error: {path} is missing: the results store holds accuracy.csv, "
                         "speed.csv, checks.csv, ablation.csv and references.csv "
                         "(results/README.md).")
    columns, check = FILES[name]
    try:
        return record.read_rows(path, columns, check)
    except UserError as error:
        raise SystemExit(f"error: {error}") from None


def parameters(text):
    """`key=value` items of a marker, where a value may hold spaces (group labels)."""
    return {key: value.strip() for key, value in
            re.findall(r"(\w+)=(.*?)(?=\s+\w+=|$)", text.strip())}


def percent(fraction):
    return f"{100 * fraction:.2f}%"


def minutes(seconds):
    """A wall time as a reader takes it in: seconds to a minute, then minutes and seconds
    to ten minutes, then minutes."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60} s" if seconds < 600 else f"{round(seconds / 60)} min"


def summary(rows):
    """{runs, mean, low, high, epochs, wall_s, split, machine, dates} of one group's rows."""
    values = [float(row["value"]) for row in rows]
    walls = [float(row["wall_s"]) for row in rows if row["wall_s"]]
    return {"runs": len(rows), "mean": statistics.mean(values), "low": min(values),
            "high": max(values), "epochs": "/".join(dict.fromkeys(row["epochs"] for row in rows)),
            "wall_s": statistics.mean(walls) if walls else None, "split": rows[0]["split"],
            "machine": rows[0]["machine"], "recipe": rows[0]["recipe"],
            "jpeg": "JPEG" in rows[0]["group"],  # the older, lossy export of CIFAR-10
            "dates": ", ".join(sorted(dict.fromkeys(row["date"] for row in rows)))}


def grouped(rows, label):
    found = [row for row in rows if row["group"] == label]
    if not found:
        raise SystemExit(f"error: no row of the store has group '{label}': add its rows, or "
                         "drop it from the page's marker.")
    return summary(found)


def accuracy_cell(found):
    spread = (f" ({percent(found['low'])} to {percent(found['high'])})"
              if found["runs"] > 1 else "")
    return f"{percent(found['mean'])}{spread}"


def groups_table(store, file, groups):
    rows = read(file, store)
    lines = ["| recipe | configuration | split | runs | accuracy: mean (lowest to highest) "
             "| epochs | wall time (mean) | machine | date |", "|---|---|---|---|---|---|---|---|---|"]
    for label in groups.split(";"):
        found = grouped(rows, label.strip())
        wall = minutes(found["wall_s"]) if found["wall_s"] else "–"
        lines.append(f"| `{found['recipe']}` | {label.strip()} | {found['split']} | "
                     f"{found['runs']} | {accuracy_cell(found)} | {found['epochs']} | {wall} | "
                     f"{found['machine']} | {found['dates']} |")
    return "\n".join(lines) + "\n"


# The anchor's own arguments and the data's place: the same in every pair, not what it tried.
NOT_AN_ATTEMPT = ("runs=", "data.source=", "data.path=", "data.validation_split=")


def pairs_table(store, file, labels, recipe, anchor, machine):
    rows = read(file, store)
    lines = [f"| attempt | overrides | runs a side | `{recipe}` | `{anchor}` | difference "
             "| wall-time ratio |", "|---|---|---|---|---|---|---|"]
    for label in labels.split(";"):
        ours = grouped(rows, f"anchor {label} {recipe} {machine}")
        theirs = grouped(rows, f"anchor {label} {anchor} {machine}")
        command = next(row["command"] for row in rows
                       if row["group"] == f"anchor {label} {recipe} {machine}")
        tried = [word for word in command.split(" ") if "=" in word
                 and not word.startswith(NOT_AN_ATTEMPT)]
        runs = str(ours["runs"]) if ours["runs"] == theirs["runs"] else (
            f"{ours['runs']} and {theirs['runs']}")
        lines.append(f"| {label} | {' '.join(f'`{word}`' for word in tried) or '–'} | {runs} | "
                     f"{accuracy_cell(ours)} | {accuracy_cell(theirs)} | "
                     f"{100 * (ours['mean'] - theirs['mean']):+.2f} points | "
                     f"{ours['wall_s'] / theirs['wall_s']:.2f}x |")
    return "\n".join(lines) + "\n"


def rows_table(store, file, columns, where=None):
    rows = read(file, store)
    names = columns.split(",")
    asked = [*names, where.partition(":")[0]] if where else names
    unknown = [name for name in asked if name not in FILES[file][0]]
    if unknown:
        raise SystemExit(f"error: a rows block of {file}.csv names {', '.join(unknown)}, which "
                         f"is none of its columns ({', '.join(FILES[file][0])}).")
    if where:
        column, _, value = where.partition(":")
        rows = [row for row in rows if row[column] == value]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for row in rows:
        cells = [percent(float(row[name])) if name in ("mean", "value") and row[name] else row[name]
                 for name in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def significant(value):
    """A time or a rate as a reader compares it: three figures below 100 (a whole
    number as stored: an "about 20 ms" stays 20), whole numbers with thousands
    separators above."""
    if abs(value) >= 99.95 or value.is_integer():
        return f"{round(value):,}"
    return f"{value:#.3g}".rstrip(".")


# How each figure of results/speed.csv shows; a metric not named here shows as stored.
FORMATS = {
    "step_ms_median": significant, "step_ms": significant, "images_per_s": significant,
    "step_ms_median_first_time": significant,
    "peak_step_mb": lambda value: f"{value:,.1f}",
    "speedup_vs_eager": lambda value: f"{value:.1f}x",
    "step_vs_loop_function": lambda value: f"{value:.2f}",
    "vs_first": lambda value: f"{value:.2f}",
    "scaling_efficiency": lambda value: f"{value:.3f}",
    "input_wait_fraction": lambda value: f"{100 * value:.1f}%",
    "trace_s": lambda value: f"{value:.1f} s", "first_step_s": lambda value: f"{value:.1f} s",
    "mfu": lambda value: f"{value:.2f}", "peak_rss_mb": lambda value: f"{value:,.0f}",
    "params": lambda value: f"{value:,.0f}", "import_lines": lambda value: f"{value:,.0f}",
    "run_lines": lambda value: f"{value:,.0f}",
    "test_s": lambda value: f"{value:.1f}",
    "phase_s": lambda value: f"{value:,.0f} s", "phase_share": lambda value: f"{100 * value:.0f}%",
    # A suite's time against its budget: to the second.
    **dict.fromkeys(("test_fast_s", "test_slow_s", "ci_run_s"),
                    lambda value: f"{int(value) // 60} min {int(value) % 60} s"),
}
HEADERS = {"step_ms_median": "ms/step (median)", "runs": "each run's ms/step",
           "images_per_s": "images/s", "speedup_vs_eager": "speed-up over eager",
           "step_vs_loop_function": "against the hand-written step",
           "vs_first": "against the first", "scaling_efficiency": "scaling efficiency",
           "input_wait_fraction": "input wait", "trace_s": "first step (tracing)",
           "first_step_s": "first step", "peak_rss_mb": "peak RSS (MB)"}


def shown(metric, value):
    try:
        return FORMATS[metric](float(value)) if metric in FORMATS else value
    except ValueError:  # a figure stored as text ("–")
        return value


def pivot_table(store, file, group, rows, columns, metric=None, metrics=None, values=None,
                first=None, labels=None):
    found = [row for row in read(file, store) if row["group"] == group]
    if not found:
        raise SystemExit(f"error: no row of {file}.csv has group '{group}': add its rows, or "
                         "drop it from the page's marker.")
    keys, extra = rows.split(","), first.split(",") if first else []
    if columns != "metric":  # a column's values across (`mode`, `recipe`), one metric's figures
        found = [row for row in found if row["metric"] == metric]
        heads = values.split(",") if values else list(dict.fromkeys(row[columns] for row in found))
        shown_heads = [f"`{head}`" for head in heads]
    else:
        heads = metrics.split(",")
        shown_heads = [HEADERS.get(head, head) for head in heads]
    cells = {}
    for row in found:
        key = tuple(row[name] for name in keys)
        entry = cells.setdefault(key, {name: shown(name, row[name]) for name in extra})
        if columns != "metric":
            entry[row[columns]] = shown(metric, row["value"])
        else:
            entry[row["metric"]] = shown(row["metric"], row["value"])
            if row["runs"]:
                entry["runs"] = ", ".join(shown(row["metric"], run)
                                          for run in row["runs"].split(";"))
    header = [*keys, *extra, *shown_heads]
    if labels:
        if len(labels.split(";")) != len(header):
            raise SystemExit(f"error: labels= names {len(labels.split(';'))} columns of the "
                             f"table of group '{group}', which has {len(header)}.")
        header = labels.split(";")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, entry in cells.items():
        lines.append("| " + " | ".join([*key, *(entry[name] for name in extra),
                                       *(entry.get(head, "–") for head in heads)]) + " |")
    return "\n".join(lines) + "\n"


def headline(found):
    """One figure a README cell shows: `94.22% validation (2 seeds), 37 min, EPYC-oneDNN`."""
    seeds = f" ({found['runs']} seeds)" if found["runs"] > 1 else ""
    wall = f", {minutes(found['wall_s'])}" if found["wall_s"] else ""
    images = " on the JPEG export" if found["jpeg"] else ""
    return f"{percent(found['mean'])} {found['split']}{images}{seeds}{wall}, {found['machine']}"


def recipes_table(store):
    """Every recipe `recipes list` knows, in references.csv's order (then the rest by
    name): a recipe with no row there shows its docstring's first line, unmeasured."""
    import keras_course_recipes as kit

    accuracy, references = read("accuracy", store), read("references", store)
    known = {row["recipe"]: row for row in references}
    lines = ["| name | model | data | reference (test split) | measured here |",
             "|---|---|---|---|---|"]
    for name in [*known, *sorted(set(kit.names()) - set(known))]:
        if name not in kit.names():
            continue  # a recipe that was removed
        recipe = known.get(name) or {"model": kit.description(name), "data": "", "reference": "–",
                                     "headline": ""}
        cell = headline(grouped(accuracy, recipe["headline"])) if recipe["headline"] else "–"
        lines.append(f"| `{name}` | {recipe['model']} | {recipe['data']} | "
                     f"{recipe['reference']} | {cell} |")
    return "\n".join(lines) + "\n"


def render(kind, text, store=STORE):
    """What a `kind` block with the marker's `text` holds."""
    given = parameters(text)
    if kind == "groups":
        return groups_table(store, given["file"], given["groups"])
    if kind == "rows":
        return rows_table(store, given["file"], given["columns"], given.get("where"))
    if kind == "recipes":
        return recipes_table(store)
    if kind == "pairs":
        return pairs_table(store, **given)
    if kind == "pivot":  # results/speed.csv's columns: speed.csv, or checks.csv (the suite's)
        return pivot_table(store, **given)
    raise SystemExit(f"error: unknown results block '{kind}': groups, rows, recipes, pairs or pivot.")


def regenerate(text, store=STORE):
    """`text` with every block written from the store."""
    return BLOCK.sub(lambda match: match[1] + render(match[2], match[3], store) + match[5], text)


def stale(pages=PAGES, store=STORE):
    """The pages whose blocks differ from what the store gives."""
    return [page for page in pages if regenerate(page.read_text(), store) != page.read_text()]


def plot(store=STORE, out=PLOT):
    """CIFAR-10 accuracy against wall time, one point per group, on the machine class
    where cifar10-airbench ran most: the recipes and the anchor side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in read("accuracy", store) if row["wall_s"] and (
        "cifar10" in row["recipe"] or row["recipe"].startswith("airbench")) and "JPEG" not in
        row["group"]]
    anchors = [row["machine"] for row in rows if row["recipe"].startswith("airbench")]
    machine = statistics.mode(anchors or [row["machine"] for row in rows])
    labels = list(dict.fromkeys(row["group"] for row in rows if row["machine"] == machine))
    figure, axes = plt.subplots(figsize=(9, 5.5))
    markers, below = iter("osD^v<>pP*Xhd8H" * 3), []
    for label in labels:
        found = grouped(rows, label)
        if found["mean"] < 0.9:  # the course's CNN, far below: named under the plot instead
            below.append(f"{label} ({percent(found['mean'])}, {minutes(found['wall_s'])})")
            continue
        anchor = found["recipe"].startswith("airbench")
        axes.scatter(found["wall_s"] / 60, 100 * found["mean"], marker=next(markers), s=40,
                     edgecolors="tab:red" if anchor else "tab:blue", facecolors="none",
                     label=f"{label} ({found['runs']})")
    axes.set_xlabel("wall time (minutes)")
    axes.set_ylabel("accuracy on held-out images (%), mean over seeds")
    axes.set_title(f"CIFAR-10 on {machine}: the recipes (blue) and cifar10-airbench (red)"
                   + (f"; not shown: {', '.join(below)}" if below else ""), fontsize=8)
    axes.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5),
                title="group (runs)", title_fontsize=7)
    axes.grid(alpha=0.3)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results",
                                     description="Generate the tables and the plot from results/.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each page whose tables are stale")
    parser.add_argument("--store", type=Path, default=STORE,
                        help="the store's folder (results/)")
    args = parser.parse_args(argv)
    if args.check:
        found = stale(store=args.store)
        for page in found:
            print(f"{page.relative_to(ROOT)}: its results tables differ from results/*.csv: "
                  "run make results", file=sys.stderr)
        return 1 if found else 0
    for page in PAGES:
        text = page.read_text()
        new = regenerate(text, args.store)
        if new != text:
            page.write_text(new)
            print(f"wrote {page.relative_to(ROOT)}")
    print(f"wrote {plot(args.store).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
