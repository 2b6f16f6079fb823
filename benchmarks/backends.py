"""`python -m benchmarks backends densenet_cifar10_cpu [variants=...] [steps=N]
[repeats=N] [--script airbench94_muon.py]`: the recipe's training step on each
of Keras 3's backends, side by side, at its batch and precision.

compare asks how much graph execution and XLA buy on TensorFlow; this asks
the same across backends, for the network the CPU hour trains. Each variant
is one of compare's modes (`keras_course_recipes/tools/measure.py`, a process each, the
same `fit`, input and timing) with a few settings:

- TensorFlow graph and XLA, with the recipe's own TensorFlow kernels
  (`model.fused_batch_norm`, `fused_activation`, `matmul_filter_gradient`)
  and with Keras' own layers in their place (`_plain`);
- JAX, its step under `jax.jit`;
- torch eager and compiled (`torch.compile`), channels-last (Keras' layout)
  and channels-first (`_first`: `model.data_format=channels_first`,
  PyTorch's own layout);
- with `--script`, `pytorch_airbench`: PyTorch's own step on
  airbench94_muon's network and optimizers (`benchmarks/torch_step.py`),
  at the same batch, timed the same way.

A variant whose backend is not installed is left out with a line saying so.
Every variant runs `repeats` times, in turns; its row is its run of median
step time. Writes `results.json` and `table.md` into
`runs/backends/NAME/<timestamp>`.
"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from keras_course_recipes import RUNS_DIR, machine, process, recipe_config, rundir

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, Option, count, parse_choices
from keras_course_recipes.tools.compare import (BACKEND_MODES, WARMUP_STEPS, measure_mode, median_run,
                                   step_line)
from keras_course_recipes.tools.tables import markdown_table, number_cell

PLAIN = ("model.fused_batch_norm=false", "model.fused_activation=false",
         "model.matmul_filter_gradient=false")
FIRST = ("model.data_format=channels_first",)
# name: (what it is, compare's mode, its settings); None: PyTorch's own step.
VARIANTS = {
    "tf_graph": ("TensorFlow graph, the recipe's kernels", "graph", ()),
    "tf_graph_plain": ("TensorFlow graph, Keras' own layers", "graph", PLAIN),
    "tf_xla": ("TensorFlow XLA, the recipe's kernels", "xla", ()),
    "tf_xla_plain": ("TensorFlow XLA, Keras' own layers", "xla", PLAIN),
    "jax": ("JAX, jax.jit", "jax_jit", ()),
    "torch_eager": ("torch eager, channels-last", "torch_eager", ()),
    "torch_eager_first": ("torch eager, channels-first", "torch_eager", FIRST),
    "torch_compile": ("torch.compile, channels-last", "torch_compile", ()),
    "torch_compile_first": ("torch.compile, channels-first", "torch_compile", FIRST),
    "pytorch_airbench": ("PyTorch's own step, airbench94_muon's network", None, ()),
}
DEFAULT_STEPS = 20
COLUMNS = ["variant", "what", "images_per_s", "vs_first", "step_ms_median", "step_ms_p10",
           "step_ms_p90", "first_step_s", "mode_used"]


def parse_variants(text):
    return parse_choices("variants", text, VARIANTS, "variant")


def benchmark(name, variants=tuple(VARIANTS), steps=DEFAULT_STEPS, repeats=1, script=None,
              config_files=(), overrides=(), out_dir=None):
    """Measures each of `variants` on recipe `name`; returns the rows."""
    overrides = ["data.source=synthetic", *overrides]  # speed does not depend on pixels
    variants = _available(name, variants, script, config_files, overrides)
    out_dir = Path(out_dir or rundir.timestamped(RUNS_DIR / "backends" / name))
    out_dir.mkdir(parents=True, exist_ok=True)
    config = recipe_config.resolve(name, config_files, overrides, announce=lambda line: None)
    batch, precision = config["data"]["batch_size"], config["execution"]["precision"]
    print(f"{name}'s step on {', '.join(variants)}: batch {batch}, {precision}, {steps} steady "
          f"steps each after {1 + WARMUP_STEPS}, {repeats} turn(s); results in {out_dir}",
          flush=True)
    runs = {variant: [] for variant in variants}
    jobs = [(turn, variant) for turn in range(repeats) for variant in variants]
    for number, (turn, variant) in enumerate(jobs, 1):
        label = variant if turn == 0 else f"{variant}-{turn + 1}"
        _, mode, settings = VARIANTS[variant]
        if mode is None:
            row = _pytorch_step(script, batch, precision, steps, out_dir / "variants", label)
        else:
            row = measure_mode(name, mode, steps, config_files, [*overrides, *settings],
                               out_dir / "variants", label)["row"]
        runs[variant].append(row)
        print(f"[{number}/{len(jobs)}] {label:<20} {step_line(row)}", flush=True)
    rows = []
    for variant, measured in runs.items():
        row = median_run(measured)
        rows.append({"variant": variant, "what": VARIANTS[variant][0],
                     "mode": VARIANTS[variant][1] or "pytorch",
                     # Of the median step, as PyTorch's own row is: a slow step
                     # or two (a recompile, the machine) moves neither.
                     "images_per_s": batch * 1000 / row["step_ms_median"],
                     "step_ms_median": row["step_ms_median"],
                     "step_ms_p10": row["step_ms_p10"], "step_ms_p90": row["step_ms_p90"],
                     "first_step_s": row["trace_s"], "mode_used": row["mode_used"],
                     "step_ms_runs": row["step_ms_runs"]})
    for row in rows:
        row["vs_first"] = row["images_per_s"] / rows[0]["images_per_s"]
    table = markdown_table(COLUMNS, rows, number_cell)
    (out_dir / "table.md").write_text(table + "\n")
    (out_dir / "results.json").write_text(json.dumps(
        {"tool": "backends", "command": shlex.join(
            ["python", "-m", "benchmarks", "backends", name, f"variants={','.join(variants)}",
             f"steps={steps}", f"repeats={repeats}", *overrides[1:],
             *([f"--script={Path(script).name}"] if script else []),
             *(f"--config={path}" for path in config_files)]),
         "recipe": name, "batch": batch, "precision": precision, "steps": steps,
         "repeats": repeats, "rows": rows, "device": machine.device_info(),
         "versions": machine.versions()}, indent=2) + "\n")
    print(f"\n{table}\n\nimages_per_s: the batch over the median step; first_step_s: the "
          f"first step less a steady one (tracing, compiling); vs_first: images/s over "
          f"{rows[0]['variant']}'s\n"
          f"results: {out_dir}/results.json, table.md", flush=True)
    return rows


def _available(name, variants, script, config_files, overrides):
    """`variants` less those whose backend is not installed (a line each),
    and refused in one line where the recipe cannot take their settings."""
    kept = []
    for variant in variants:
        _, mode, settings = VARIANTS[variant]
        backend = "torch" if mode is None else BACKEND_MODES.get(mode, ("tensorflow",))[0]
        try:
            process.require_backend(backend)
        except UserError as missing:
            print(f"{variant}: left out: {missing}", flush=True)
            continue
        if mode is None:
            if script is None:
                print(f"{variant}: left out: give --script airbench94_muon.py (your copy of "
                      "cifar10-airbench's) to time PyTorch's own step beside Keras'", flush=True)
                continue
            from benchmarks import anchor

            if "class Muon(" not in anchor.read(script):
                raise UserError(f"--script {script} is not airbench94_muon.py: {variant} times "
                                "its network and optimizers; give your copy of that file.")
            anchor.patched(script)  # refuses a script that differs from the published one
        else:
            recipe_config.resolve(name, config_files, [*overrides, *settings,
                                                 f"execution.backend={backend}"],
                            announce=lambda line: None)
        kept.append(variant)
    if not kept:
        raise UserError("None of the variants asked for can run here: see the lines above.")
    return kept


def _pytorch_step(script, batch, precision, steps, folder, label):
    """`benchmarks/torch_step.py`'s row, measured in a process of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    job = {"script": str(Path(script).expanduser().resolve()), "batch": batch,
           "precision": precision, "steps": steps, "warmup_steps": WARMUP_STEPS,
           "out": str(folder / f"{label}.json")}
    # benchmarks/ is the checkout's, not installed: its root on the path finds it from any folder.
    path = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                         os.environ.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-m", "benchmarks.torch_step", json.dumps(job)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    if result.returncode != 0:
        raise UserError(f"PyTorch's own step failed (exit {result.returncode}):\n"
                        + result.stderr[-3000:])
    return json.loads(Path(job["out"]).read_text())


def _arguments(parser):
    parser.add_argument("--script", metavar="AIRBENCH94_MUON.py", default=None,
                        help="your copy of cifar10-airbench's airbench94_muon.py: adds PyTorch's "
                             "own step on its network")


COMMANDS = (
    Command("backends", "the recipe's training step on TensorFlow (with and without its own "
                        "kernels), JAX and torch, side by side (options variants=, steps=, "
                        "repeats=)",
            lambda name, config_files, overrides, script, **options: benchmark(
                name, script=script, config_files=config_files, overrides=overrides, **options),
            (Option("variants", tuple(VARIANTS), parse_variants),
             count("steps", DEFAULT_STEPS, minimum=2), count("repeats", 1, minimum=1)),
            arguments=_arguments,
            tensorflow_only="each variant names its backend", names_backends=True),
)
