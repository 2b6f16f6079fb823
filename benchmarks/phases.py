"""Where a process's wall time goes, by phase: `anchor --profile`'s profiler.

A sampling profiler, py-spy, records the process's Python stacks 25 times a
second, idle ones too (a thread waiting on a TensorFlow or PyTorch kernel is
idle in Python's eyes, and that wait is the training). Each sample of the main
thread falls in the first phase of `PHASES` that one of its frames names, and a
phase's time is its share of the samples times the process's wall time. So
the phases add up to the wall time, and each is as exact as a sample count:
about a second at 25 samples a second.

Python frames are what a sampler sees: the graph optimizer and XLA's compiler
run inside a step function's first call, in C++, and count as training steps
(the Timing callback's `first_step_s` in metrics.json has the first step apart).
"""

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from keras_course_recipes.errors import UserError

RATE = 25  # samples a second: a second of a phase is 25 samples, and costs the run nothing seen

# The phases, in the tables' order. A stack is in the first whose frames it
# holds, in `phase_of`'s order: tracing inside an evaluation is tracing, an
# evaluation inside `fit` (validation) is evaluation, a checkpoint written
# by `fit`'s callbacks is a checkpoint.
NAMES = ("imports", "reading images", "statistics and model", "tracing and compiling",
         "training steps", "evaluation", "checkpoints and logs", "other")
CALLBACK_FILES = re.compile(
    r"keras/src/callbacks/(model_checkpoint|backup_and_restore|csv_logger|tensorboard)\.py$")
READING_FILES = ("keras_course_recipes/data.py", "keras_course_recipes/folder.py",
                 "torch/serialization.py")
AIRBENCH = re.compile(r"airbench94(_muon)?_cpu\.py$")  # the anchor's patched script
FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*?)(?::\d+)?\)$")
THREAD = re.compile(r"^thread \((?P<id>\d+)\)(?P<name>: .*)?$")


def phase_of(frames):
    """The phase of one stack, `frames` (name, file) from the outermost. The
    training step's own tracing (inside `fit`) counts as a training step here:
    `phases` moves the Timing callback's `trace_s` out of the steps."""
    def holds(test):
        return any(test(name, file) for name, file in frames)

    evaluating = holds(lambda name, file: name in ("evaluate", "predict", "infer")
                       and not file.startswith("<"))
    training = holds(lambda name, file: (name == "fit" and "keras/src/" in file)
                     or (name == "main" and AIRBENCH.search(file) is not None))
    if holds(lambda name, file: file.endswith("func_graph.py") or "/autograph/" in file
             or "torch/_dynamo/" in file) and (evaluating or not training):
        return "tracing and compiling"
    if holds(lambda name, file: CALLBACK_FILES.search(file) is not None):
        return "checkpoints and logs"
    if evaluating:
        return "evaluation"
    if holds(lambda name, file: file.endswith(READING_FILES)):
        return "reading images"
    if holds(lambda name, file: name == "init_whiten"
             or (name == "build" and re.search(r"(^|/)recipes/", file) is not None)):
        return "statistics and model"
    if training:
        return "training steps"
    if holds(lambda name, file: name == "_find_and_load"):
        return "imports"
    return "other"  # start-up, the harness's metrics.json and weights digest, a script's logs


def sampler():
    """The py-spy command beside this Python, else on PATH, else a one-line refusal."""
    found = Path(sys.executable).with_name("py-spy")
    found = str(found) if found.is_file() else shutil.which("py-spy")
    if found is None:
        raise UserError("--profile samples each run with py-spy, which is not installed: "
                        "pip install -r requirements-torch.txt (it pins py-spy).")
    return found


def check_sampler():
    """Refuses, in one line, a machine where py-spy cannot sample a child process
    (a container without ptrace), before any training starts."""
    with tempfile.TemporaryDirectory() as folder:
        command = sampled([sys.executable, "-c", "import time; time.sleep(0.5)"],
                          Path(folder) / "raw.txt")  # long enough to be found
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["(nothing)"])[-1]
        raise UserError(f"--profile: py-spy cannot sample a process here ({tail}); run "
                        "without --profile, or where ptrace is allowed.")


def sampled(command, raw_file):
    """`command` run under py-spy, its stacks written to `raw_file` (made absolute:
    the command may run in another folder, airbench's in its own)."""
    return [sampler(), "record", "--idle", "--threads", "--nonblocking", "--rate", str(RATE),
            "--format", "raw", "--output", str(Path(raw_file).resolve()), "--", *command]


def main_thread_samples(lines):
    """{phase: samples} of the main thread, from py-spy's raw lines
    (`thread (ID)[: NAME];frame;...;frame COUNT`)."""
    stacks = []
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        found = THREAD.match(thread)
        if found:
            stacks.append((found["id"], found["name"] or "", frames, int(count)))
    # Named where the process imported threading; else the thread whose stacks start
    # at the program (other threads start in threading's _bootstrap).
    main = {thread for thread, name, frames, _ in stacks if name == ": MainThread"
            or frames[:1] and frames[0].startswith(("<module> (", "_run_module_as_main ("))}
    samples = Counter()
    for thread, _, frames, count in stacks:
        if thread in main:
            parsed = [(m["name"], m["file"]) for m in map(FRAME.match, frames) if m]
            samples[phase_of(parsed)] += count
    return samples


def phases(raw_file, wall_s, trace_s=0.0):
    """{phase: seconds} of one process, in `NAMES`' order, from its py-spy
    `raw_file`: each phase's share of the main thread's samples, times `wall_s`;
    `trace_s` (the first training step beyond a steady one: its tracing, and
    the graph optimizer's or XLA's work in C++) moved from the steps to
    tracing and compiling."""
    samples = main_thread_samples(Path(raw_file).read_text(encoding="utf-8").splitlines())
    total = sum(samples.values())
    if total == 0:
        raise UserError(f"{raw_file} holds no sample of the run's main thread: py-spy "
                        "sampled nothing; run again without --profile.")
    seconds = {name: wall_s * samples[name] / total for name in NAMES}
    moved = min(trace_s or 0.0, seconds["training steps"])
    seconds["training steps"] -= moved
    seconds["tracing and compiling"] += moved
    return seconds
