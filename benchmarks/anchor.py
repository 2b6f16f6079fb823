"""`python -m benchmarks anchor NAME --script AIRBENCH.py [runs=N] [key=value ...]`:
cifar10-airbench's record script run beside the recipe, on this machine's CPU,
on the same images and split; one table of accuracy, wall time and ratios.

The script is the user's own copy of `airbench94.py` or `airbench94_muon.py`
(KellerJordan/cifar10-airbench), patched at run time for what a CPU needs
and nothing else (`PATCHES`): float32 weights, computing in the recipe's
`execution.precision` (bfloat16 autocast around the forward passes and the
loss for `mixed_bfloat16`, none for float32), no `torch.compile` (nor its
warm-up run), a wall clock for its CUDA events, its tensors on the CPU, and
torchvision's `Normalize` written out (PyTorch's CPU build has no
torchvision that imports beside it). A script that differs
from the published one is refused in one line, naming what was not found.
Its data are the recipe's: the same folder (`data.path`), the same training
images and the same ones to measure on (`test/`, or the held-out split of a
folder without one: the table says which), written as the `cifar10/train.pt`
and `test.pt` it reads. The script and the data are refused, in one line,
before anything is written. Each run of
either is a process of its own, timed from start to exit; the recipe's run
`i` has `execution.seed=i`, airbench's runs are unseeded, as its own are.
PyTorch is not in the main stack: `pip install -r requirements-torch.txt`.
"""

import datetime
import importlib.util
import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, rundir, settings
from keras_course_recipes.machine import device_info, versions as kit_versions
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, count, record
from keras_course_recipes.tools.tables import markdown_table

from benchmarks import phases

# Run first in the patched script: what stands in for CUDA and torchvision.
PRELUDE = '''
# -- python -m benchmarks anchor: what a CPU needs, and nothing else ----------
import time as _anchor_time


class _WallEvent:  # a CUDA event's record and elapsed_time, by the wall clock
    def record(self):
        self.seconds = _anchor_time.perf_counter()

    def elapsed_time(self, end):
        return 1e3 * (end.seconds - self.seconds)


def _cpu_synchronize():  # a CPU's ops are done when they return: nothing to wait for
    pass


class T:  # torchvision.transforms.Normalize, on a tensor of images (N, C, H, W)
    class Normalize:
        def __init__(self, mean, std):
            self.mean = torch.as_tensor(mean).view(-1, 1, 1)
            self.std = torch.as_tensor(std).view(-1, 1, 1)

        def __call__(self, images):
            return (images - self.mean.to(images.dtype)) / self.std.to(images.dtype)


torch.set_num_threads(os.cpu_count())
RUNS = int(os.environ["ANCHOR_RUNS"])
BFLOAT16 = os.environ["ANCHOR_PRECISION"] == "mixed_bfloat16"  # the recipe's precision
# ---------------------------------------------------------------------------
'''
# (what the published script holds, what the CPU run needs instead, how many
# times it is there): each must be found that many times, or the script is refused.
# bfloat16 autocast around the forward passes and the loss, as PyTorch
# advises (backward and the optimizers under it, Muon's net did not learn),
# where the recipe computes in bfloat16: on a CPU whose bfloat16 is slower
# than its float32 (docs/machines.md), both sides run float32.
AUTOCAST = "torch.autocast('cpu', dtype=torch.bfloat16, enabled=BFLOAT16)"
COMMON = [
    ("import torchvision\nimport torchvision.transforms as T\n", "", 1),
    ("torch.cuda.Event(enable_timing=True)", "_WallEvent()", 2),
    ("torch.cuda.synchronize()", "_cpu_synchronize()", None),  # None: at least once
    ("(self.images.half() / 255)", "(self.images.float() / 255)", 1),
    ("    with torch.no_grad():\n", f"    with torch.no_grad(), {AUTOCAST}:\n", 1),
]
PATCHES = {
    "airbench94.py": COMMON + [
        ("map_location=torch.device(gpu)", "map_location='cpu'", 1),
        ("net = net.half().cuda()", "net = net.float()", 1),
        ("            outputs = model(inputs)\n            loss = loss_fn(outputs, labels).sum()\n",
         f"            with {AUTOCAST}:\n                outputs = model(inputs)\n"
         "                loss = loss_fn(outputs, labels).sum()\n", 1),
        ("range(25)])", "range(RUNS)])", 1),
    ],
    "airbench94_muon.py": COMMON + [
        ("@torch.compile\ndef zeropower_via_newtonschulz5", "def zeropower_via_newtonschulz5", 1),
        ('map_location=torch.device("cuda")', 'map_location="cpu"', 1),
        ("                mod.half()", "                mod.float()", 1),
        ("model = CifarNet().cuda().to(", "model = CifarNet().to(", 1),
        ('    model.compile(mode="max-autotune")\n', "", 1),
        ('    main("warmup", model)\n', "", 1),
        ("            outputs = model(inputs, whiten_bias_grad=(step < whiten_bias_train_steps))\n"
         '            F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum").backward()\n',
         f"            with {AUTOCAST}:\n"
         "                outputs = model(inputs, whiten_bias_grad=(step < whiten_bias_train_steps))\n"
         '                loss = F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum")\n'
         "            loss.backward()\n", 1),
        ("range(200)])", "range(RUNS)])", 1),
    ],
}
# Where the prelude goes: after the script's `import torch...` block.
AFTER = "import torch.nn.functional as F\n"
MEAN = re.compile(r"^Mean: (\d\.\d+)", re.M)
SCRIPTS = "your copy of cifar10-airbench's airbench94.py or airbench94_muon.py"
# The recipe's precisions that airbench's script can match on a CPU.
PRECISIONS = ("mixed_bfloat16", "float32")


def read(script):
    """The text of `script`, or a one-line refusal of what was given instead."""
    path = Path(script).expanduser()
    if path.is_dir():  # asked first: Windows reads a folder as a PermissionError
        raise UserError(f"--script {script} is a folder: give the file in it, {SCRIPTS}.")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--script {script}: no such file; give the path of {SCRIPTS}.") from None
    except UnicodeDecodeError as error:
        raise UserError(f"--script {script} is not UTF-8 text, as a Python script is (at byte "
                        f"{error.start}): give {SCRIPTS}.") from None
    except OSError as error:
        raise UserError(f"Cannot read --script {script}: {error.strerror}; give {SCRIPTS}, "
                        "readable by you.") from None


def patched(script):
    """The text of `script` for a CPU run, and which of `PATCHES` it is."""
    text = read(script)
    kind = ("airbench94_muon.py" if "class Muon(" in text
            else "airbench94.py" if "class LookaheadState" in text else None)
    if kind is None:
        raise UserError(f"{script} is neither cifar10-airbench's airbench94.py nor "
                        "airbench94_muon.py (no LookaheadState, no Muon): give a copy of one.")
    for old, new, times in [*PATCHES[kind], (AFTER, AFTER + PRELUDE, 1)]:
        found = text.count(old)
        if found == 0 or (times is not None and found != times):
            first = old.strip().splitlines()[0]
            raise UserError(f"{script} is not {kind} as cifar10-airbench publishes it: "
                            f"'{first}' is there {found} time(s), not {times or 'one or more'}; "
                            "the anchor patches the published script only.")
        text = text.replace(old, new)
    return text, kind


def splits(config):
    """(train, test, what `test` is) as the recipe reads them: its training
    images, and those it measures its accuracy on, with `data.source_splits`'
    name for them ("test", or "validation": held-out training images, where
    the folder has no test/). Refuses the data, in one line, as the recipe would."""
    from keras_course_recipes import data

    train, _, test, _, evaluated_on = data.source_splits(
        {**settings.module_literal(kit.PACKAGE_DIR / "data.py", "DEFAULTS"), **config["data"]},
        data.DATASETS[config["data"]["name"]][0], 10, config["execution"]["seed"])
    return train, test, evaluated_on


def prepare(folder, train, test):
    """`folder/cifar10/{train,test}.pt` as airbench's CifarLoader reads them."""
    import numpy as np
    import torch

    (folder / "cifar10").mkdir(parents=True, exist_ok=True)
    for name, (images, labels) in (("train", train), ("test", test)):
        torch.save({"images": torch.from_numpy(np.ascontiguousarray(images)),
                    "labels": torch.from_numpy(labels.astype(np.int64)), "classes": list(range(10))},
                   folder / "cifar10" / f"{name}.pt")


def torch_installed():
    return importlib.util.find_spec("torch") is not None


def anchor(name, script, runs_=3, config_files=(), overrides=(), out_dir=None, label=None,
           machine=None, store=record.STORE, profile=False):
    """Runs the patched `script` and recipe `name` `runs_` times each; returns
    the rows and writes `table.md` and `results.json` into `out_dir`; with a
    `label`, appends each run as a row of the results store (`store`), each side
    a group of its own, on `machine` (else the class the CPU tells). With
    `profile`, each run is sampled (`benchmarks.phases`) and its wall time split
    into phases: a table of them, and with a `label` rows of results/speed.csv."""
    # What a user can get wrong is refused before anything is written, so
    # that a refused command leaves nothing behind: the data last, since
    # reading them (decoding, the first time) is what takes time.
    text, kind = patched(script)
    config = recipe_config.resolve(name, config_files, overrides, announce=print)
    if config["data"]["source"] != "folder" or config["data"]["name"] != "cifar10":
        raise UserError("anchor compares on CIFAR-10's images in a folder: give "
                        "data.source=folder data.path=DIR (DIR/train/<class>/*.png).")
    precision = config["execution"]["precision"]
    if precision not in PRECISIONS:
        raise UserError(f"anchor runs airbench's script in the recipe's precision, which it "
                        f"cannot on a CPU for execution.precision={precision}: give "
                        f"{' or '.join(f'execution.precision={p}' for p in PRECISIONS)}.")
    if not torch_installed():
        raise UserError("anchor runs cifar10-airbench's PyTorch script, and PyTorch is not "
                        "installed here: pip install -r requirements-torch.txt (its CPU build).")
    if profile:
        phases.check_sampler()
    machine = machine or record.machine_class(device_info())
    if label is not None and machine is None:
        raise UserError("--record needs the machine class (docs/machines.md), which this CPU "
                        "does not tell: give --machine CLASS.")
    train, test, evaluated_on = splits(config)
    out_dir = Path(out_dir or rundir.timestamped(RUNS_DIR / "anchor" / name))
    command = shlex.join(["python", "-m", "benchmarks", "anchor", name, "--script",
                          Path(script).name, *(["--profile"] if profile else []),
                          f"runs={runs_}", *overrides])
    if label is not None:  # what the store would refuse (a group unlike these runs, a
        # damaged store), refused before hours of training: the runs' figures aside
        planned = [{"what": what, "run": run, "accuracy": float("nan"), "wall_s": 0.0,
                    "evaluated_on": evaluated_on, "precision": precision}
                   for run in range(runs_) for what in (kind, name)]
        record.check(store_rows(planned, label, name, kind, machine, command, config, out_dir),
                     store, figures=False)
        if profile:
            record.check([], store, "speed", record.SPEED_COLUMNS)
    work = out_dir / "airbench"
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{Path(kind).stem}_cpu.py").write_text(text, encoding="utf-8")
    prepare(work, train, test)
    print(f"{kind} and {name} on the same {len(train[1]):,} training and {len(test[1]):,} "
          f"{evaluated_on} images ({config['data']['path']}), {runs_} run(s) each, both in "
          f"{precision}", flush=True)
    rows = []
    for run in range(runs_):
        rows.append(_timed(kind, run, [sys.executable, f"{Path(kind).stem}_cpu.py"], work,
                           {"ANCHOR_RUNS": "1", "ANCHOR_PRECISION": precision},
                           lambda out: MEAN.findall(out), out_dir, profile))
        run_dir = out_dir / f"{name}-seed{run}"
        rows.append(_timed(name, run, [sys.executable, "-m", "keras_course_recipes", "run", name,
                                       *overrides, f"execution.seed={run}", f"run.dir={run_dir}",
                                       *(f"--config={path}" for path in config_files)],
                           Path.cwd(), {}, lambda out: [json.loads(
                               (run_dir / "metrics.json").read_text())["test"]["accuracy"]],
                           out_dir, profile and run_dir))
    # Which split each accuracy is on, as the recipe's metrics.json names it,
    # and the precision both sides computed in.
    rows = [{**row, "evaluated_on": evaluated_on, "precision": precision} for row in rows]
    table = summary(rows, kind, name, evaluated_on)
    if profile:
        table += "\n\n" + phase_table(rows, kind, name)
    (out_dir / "table.md").write_text(table)
    (out_dir / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(table + f"\nresults: {out_dir}/table.md, results.json; each run's output, with its "
          "accuracy after each epoch: *-run<N>.log", flush=True)
    if label is not None:
        path = record.append(store_rows(rows, label, name, kind, machine, command, config,
                                        out_dir), store)
        print(f"recorded {len(rows)} rows as 'anchor {label} ...': {path}")
        if profile:
            found = phase_rows(rows, label, name, kind, machine, command)
            path = record.append(found, store, "speed", record.SPEED_COLUMNS)
            print(f"recorded {len(found)} rows as '{found[0]['group']}': {path}")
    return rows


def store_rows(rows, label, name, kind, machine, command, config, out_dir=None):
    """anchor's runs as rows of the results store: each side a group of its own; a
    recipe's run (in `out_dir`) identified by its directory and its weights."""
    versions, today = kit_versions(), datetime.date.today().isoformat()
    found = []
    for row in rows:
        airbench = row["what"] == kind
        side = Path(kind).stem if airbench else name
        run_dir = (None if airbench or out_dir is None
                   else Path(out_dir) / f"{name}-seed{row['run']}")
        found.append({
            **dict.fromkeys(record.COLUMNS, ""), "group": f"anchor {label} {side} {machine}",
            "recipe": side, "command": command, "dataset": config["data"]["name"],
            "split": "test" if row["evaluated_on"] == "test" else "validation",
            "metric": "accuracy", "value": f"{row['accuracy']:.4f}",
            "epochs": "" if airbench else config["train"]["epochs"],  # airbench's own schedule
            "precision": row["precision"],  # both sides compute in it
            "wall_s": f"{row['wall_s']:.0f}", "seed": "" if airbench else row["run"],
            "run_id": record.run_id(run_dir) if run_dir else "",
            "weights": _weights(run_dir) if run_dir else "",
            "machine": machine, "tensorflow": versions.get("tensorflow") or "",
            "keras": versions.get("keras") or "", "kit": versions["keras-course-recipes"],
            "commit": versions.get("commit") or "", "date": today,
            "source": "python -m benchmarks anchor --record"})
    return found


def _weights(run_dir):
    """The first 16 hex digits of the weights' digest the recipe's run wrote, or ''."""
    try:
        digest = json.loads((Path(run_dir) / "metrics.json").read_text()).get("weights_sha256")
    except (OSError, ValueError, AttributeError):
        return ""
    return digest[:16] if isinstance(digest, str) else ""


def _timed(what, run, command, cwd, environment, accuracy, out_dir, profile=False):
    """{what, run, accuracy, wall_s} of one process, from its start to its exit;
    its output, the accuracy after each epoch among it, goes to
    `out_dir/<what>-run<run>.log`. With `profile` (the recipe's: its run
    directory, whose metrics.json has the first step's `trace_s`), sampled
    by py-spy into `<what>-run<run>.pyspy.txt`, and the row has its `phases`."""
    import os

    print(f"  {what} run {run}...", flush=True)
    log = Path(out_dir) / f"{Path(what).stem}-run{run}.log"
    raw = log.with_suffix(".pyspy.txt")
    started = time.perf_counter()
    result = subprocess.run(phases.sampled(command, raw) if profile else command, cwd=cwd,
                            env={**os.environ, **environment}, capture_output=True, text=True)
    wall = time.perf_counter() - started
    log.write_text(result.stdout + result.stderr, encoding="utf-8")
    found = accuracy(result.stdout) if result.returncode == 0 else []
    if not found:
        tail = (result.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise UserError(f"{what}'s run {run} exited {result.returncode} without an accuracy: "
                        f"{tail}")
    print(f"  {what} run {run}: accuracy {float(found[-1]):.4f} in {wall:.0f} s", flush=True)
    row = {"what": what, "run": run, "accuracy": float(found[-1]), "wall_s": wall}
    if profile:
        trace_s = (json.loads((Path(profile) / "metrics.json").read_text())["timing"]["trace_s"]
                   if isinstance(profile, Path) else 0.0)  # airbench's script compiles nothing
        row["phases"] = phases.phases(raw, wall, trace_s)
    return row


def phase_means(rows, what):
    """{phase: mean seconds} over `what`'s runs."""
    runs = [row["phases"] for row in rows if row["what"] == what]
    return {phase: statistics.mean(run[phase] for run in runs) for phase in phases.NAMES}


def phase_table(rows, kind, name):
    """The Markdown table of where each side's wall time went, its runs' means."""
    means = {what: phase_means(rows, what) for what in (kind, name)}
    walls = {what: sum(found.values()) for what, found in means.items()}
    cells = [{"phase": phase, **{what: f"{means[what][phase]:.0f} s "
                                       f"({means[what][phase] / walls[what]:.0%})"
                                 for what in means}} for phase in phases.NAMES]
    return markdown_table(["phase", kind, name], cells)


def phase_rows(rows, label, name, kind, machine, command):
    """The phases as rows of results/speed.csv: per side and phase, the mean
    seconds (each run's in `runs`) and their share of the side's wall time."""
    found, versions = [], kit_versions()
    for what in (kind, name):
        runs = [row["phases"] for row in rows if row["what"] == what]
        means = phase_means(rows, what)
        for phase in phases.NAMES:
            for metric, value, each in (
                    ("phase_s", means[phase], [run[phase] for run in runs]),
                    ("phase_share", means[phase] / sum(means.values()), [])):
                found.append({
                    **dict.fromkeys(record.SPEED_COLUMNS, ""),
                    "group": f"phases {label} {machine}", "recipe": Path(what).stem,
                    "variant": phase, "metric": metric, "value": f"{value:.4g}",
                    "runs": ";".join(f"{v:.1f}" for v in each), "command": command,
                    "machine": machine, "tensorflow": versions.get("tensorflow") or "",
                    "keras": versions.get("keras") or "",
                    "kit": versions["keras-course-recipes"], "commit": versions.get("commit") or "",
                    "date": datetime.date.today().isoformat(),
                    "source": "python -m benchmarks anchor --profile --record"})
    return found


# A run that took this much longer than its side's fastest shared the machine
# with other work (quiet runs here differ by about a tenth, from the machine's drift).
SLOW_RUN = 1.25


def summary(rows, kind, name, evaluated_on):
    """The Markdown table: every run, each side's mean (and range), and the
    recipe's over airbench's; its accuracy column names the split
    (`evaluated_on`). Below it, a line for each run much slower than its
    side's fastest: a wall ratio is only as fair as the machine was quiet."""
    accuracy = f"{evaluated_on} accuracy"  # "test accuracy", or "validation accuracy"
    sides = {what: [r for r in rows if r["what"] == what] for what in (kind, name)}
    lines = [{"run": f"{r['what']} run {r['run']}", accuracy: f"{r['accuracy']:.2%}",
              "wall": f"{r['wall_s']:.0f} s"} for r in rows]
    means, notes = {}, []
    for what, runs in sides.items():
        accuracies, walls = [r["accuracy"] for r in runs], [r["wall_s"] for r in runs]
        means[what] = statistics.mean(accuracies), statistics.mean(walls)
        lines.append({"run": f"{what}, mean of {len(runs)}",
                      accuracy: f"{means[what][0]:.2%}" + _range(accuracies, "{:.2%}"),
                      "wall": f"{means[what][1]:.0f} s" + _range(walls, "{:.0f} s")})
        notes += [f"note: {what} run {r['run']} took {r['wall_s'] / min(walls):.2f}x its "
                  f"side's fastest run ({min(walls):.0f} s): something else likely ran beside "
                  "it, and the wall ratio is not fair until the runs are taken again on a "
                  "quiet machine." for r in runs if r["wall_s"] > SLOW_RUN * min(walls)]
    (a_accuracy, a_wall), (r_accuracy, r_wall) = means[kind], means[name]
    lines.append({"run": f"{name} against {kind}",
                  accuracy: f"{100 * (r_accuracy - a_accuracy):+.2f} points",
                  "wall": f"{r_wall / a_wall:.2f}x"})
    table = markdown_table(["run", accuracy, "wall"], lines)
    return table + ("\n\n" + "\n".join(notes) if notes else "")


def _range(values, form):
    """` (lowest to highest)` of several values, in `form`; nothing for one."""
    return f" ({form.format(min(values))} to {form.format(max(values))})" if len(values) > 1 else ""


def _arguments(parser):
    parser.add_argument("--script", required=True, metavar="AIRBENCH.py",
                        help="your copy of cifar10-airbench's airbench94.py or airbench94_muon.py")
    parser.add_argument("--record", default=None, metavar="LABEL", dest="label",
                        help="append each run to results/accuracy.csv, in the groups "
                             "'anchor LABEL SIDE MACHINE'")
    parser.add_argument("--machine", default=None, metavar="CLASS",
                        help="with --record: the machine class, where the CPU does not tell it")
    parser.add_argument("--profile", action="store_true",
                        help="sample each run with py-spy and split its wall time into phases "
                             "(reading images, tracing, steps, evaluation, ...); with --record, "
                             "rows of results/speed.csv")


COMMANDS = (
    Command("anchor", "cifar10-airbench's script beside the recipe on this CPU, the same images "
            "and split: accuracy, wall time, ratios",
            lambda name, script, runs, config_files, overrides, label, machine, profile: anchor(
                name, script, runs, config_files, overrides, label=label, machine=machine,
                profile=profile),
            options=(count("runs", 3, 1),), arguments=_arguments,
            tensorflow_only="it runs the recipe on TensorFlow beside PyTorch's script"),
)
