"""The README and docs/ stay true: their links resolve, the tables that
document the code list what it has, and every command they show runs.

A command shown is a line of a ```sh block that starts with `make`,
`python -m keras_course_recipes` or the checkout's `python -m benchmarks`, or an inline `make ... NAME=...` or
`python -m keras_course_recipes COMMAND RECIPE ...` in the prose. `make` expands it through
the Makefile itself (with `PY` standing in for Python), so that a target and
its variables are checked as a reader would type them.
"""

import dataclasses
import functools
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys

import pytest

import keras_course_recipes as kit
from benchmarks.__main__ import TOOLS as BENCHMARKS
from conftest import ROOT, TINY, TINY_MODEL, measure_tensorflow_modes_here
from keras_course_recipes import __main__ as cli, harness
from keras_course_recipes import machine, process, recipe_config as _config
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import compare as _compare
from keras_course_recipes.tools import memory as _memory
from keras_course_recipes.tools import notebooks as _notebooks
from keras_course_recipes.tools.sweep import parse_grid

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The commands of `python -m keras_course_recipes` and of `python -m benchmarks`.
TOOLS = {**cli.TOOLS, **BENCHMARKS}
PROGRAMS = (["python", "-m", "keras_course_recipes"], ["python", "-m", "benchmarks"])
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.MULTILINE | re.DOTALL)


def page_id(page):
    return str(page.relative_to(ROOT))


def prose(page):
    """The page without its code blocks and inline code."""
    return re.sub(r"`[^`]*`", "", FENCE.sub("", page.read_text()))


# ---------------------------------------------------------------- links

def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_`
    dropped, spaces as hyphens (after links and code marks are undone)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(page):
    """Every heading anchor of `page`, with GitHub's -1, -2 for repeats."""
    seen, found = {}, set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE):
        slug = anchor(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_anchors_follow_githubs_rules():
    assert anchor("Where a step's time goes, and how close to the CPU's peak it runs") == (
        "where-a-steps-time-goes-and-how-close-to-the-cpus-peak-it-runs")
    assert anchor("`fit` against a hand-written step") == "fit-against-a-hand-written-step"
    assert anchor("Two backends: TensorFlow and JAX") == "two-backends-tensorflow-and-jax"


def links(page):
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", prose(page))


def test_the_link_search_finds_the_links():
    assert sum(len(links(page)) for page in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_and_image_resolves(page):
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target} does not exist"
        if fragment:
            assert linked.suffix == ".md", f"{page.name}: {target}: an anchor into a non-page"
            assert fragment in anchors(linked), f"{page.name}: {target}: no such heading"


def test_every_docs_page_is_linked_from_the_readme_and_has_a_title():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"](docs/{page.name}" in readme, f"the README does not link {page.name}"
        assert page.read_text().startswith("# "), f"{page.name}: no title"


def test_the_readme_stays_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
    assert "make recipe NAME=" in (ROOT / "README.md").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_every_png_in_docs_is_shown_on_a_page():
    shown = {image for page in PAGES
             for image in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", page.read_text())}
    for png in (ROOT / "docs").glob("*.png"):
        assert png.name in {os.path.basename(image) for image in shown}, png.name


# ---------------------------------------------------------------- tables

def tables(page, heading):
    """The tables under `heading` of `page`: lists of rows, each a list of cells."""
    section = page.read_text().split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    found = [block.splitlines() for block in re.findall(r"(?:^\|.*\n)+", section, re.MULTILINE)]
    return [[[cell.strip() for cell in line.strip("|").split(" | ")] for line in table[2:]]
            for table in found]


def first_column_keys(table):
    return {key for row in table for key in re.findall(r"`(\w+)`", row[0])}


@pytest.mark.slow
def test_the_metrics_tables_list_every_field_a_run_writes(tiny_config):
    """docs/runs.md's tables of `metrics.json` and its `timing` against a tiny run's file."""
    fields, timing = tables(ROOT / "docs" / "runs.md", "## What a run writes")
    metrics = harness.train(tiny_config("mnist_mlp"))
    assert first_column_keys(fields) == set(metrics)
    assert first_column_keys(timing) == set(metrics["timing"])


def check_the_recipe_table_lists_every_recipe_and_no_other(readme=ROOT / "README.md"):
    """The rule, on the README at `readme`, against every recipe `recipes list` knows."""
    table, = tables(readme, "## Recipes")
    listed = [row[0].strip("`") for row in table]
    assert sorted(listed) == sorted(kit.names())


def test_the_readmes_recipe_table_lists_every_recipe_and_no_other():
    check_the_recipe_table_lists_every_recipe_and_no_other()


def layout_block():
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## Layout\n", 1)[1].split("```", 2)[1]


def test_the_layout_names_every_module_and_callback():
    layout = layout_block()
    helpers = [path.stem.lstrip("_") for path in (ROOT / "keras_course_recipes").glob("_*.py")
               if not path.stem.startswith("__")]
    tools = [path.stem for folder in (ROOT / "keras_course_recipes" / "tools", ROOT / "benchmarks")
             for path in folder.glob("*.py") if not path.stem.startswith("__")]
    public = ["runs", "data", "folder", "augment", "harness"]
    # One class per module in callbacks/, named after it.
    classes = ["".join(part.title() for part in path.stem.split("_"))
               for path in (ROOT / "callbacks").glob("*.py") if path.stem != "__init__"]
    for name in [*helpers, *public, *tools, *classes]:
        assert re.search(rf"\b_?{name}\b", layout), f"the README's layout does not name {name}"


# ---------------------------------------------------------------- commands

# Targets that are not a command on a recipe, or need what CI has not: shown,
# never run here (`battery` runs a case in tests/test_trust.py; `anchor` needs
# PyTorch and a user's copy of cifar10-airbench, tests/test_anchor.py patches a
# stand-in).
# `tfds-to-folder` needs a network: tests/test_tfds_folder.py runs it on tfds' mock data.
# `results` rewrites the pages themselves: tests/test_results.py runs its --check.
NOT_RECIPE_COMMANDS = {"setup", "test", "test-fast", "test-slow", "test-benchmarks", "tensorboard",
                       "battery", "anchor", "wheel", "tfds-to-folder", "results"}


# Recipes a page shows how to add, which this checkout has not: the test that adds each.
EXAMPLE_RECIPES = {"my_softmax": "tests/test_add_a_recipe.py::"
                                 "test_a_recipe_file_added_to_a_copy_of_the_checkout_is_a_recipe"}


def not_run(words):
    """Whether a shown command is one of NOT_RECIPE_COMMANDS, as make or python -m
    keras_course_recipes, or names one of EXAMPLE_RECIPES."""
    words = list(words)  # all_commands() gives tuples, which never equal a list
    if set(words) & set(EXAMPLE_RECIPES):
        return True
    return ((words[0] == "make" and words[1] in NOT_RECIPE_COMMANDS)
            or (words[:3] in PROGRAMS and words[3] in NOT_RECIPE_COMMANDS)
            or (words[0] == "recipes" and words[1] in NOT_RECIPE_COMMANDS))
# What `make` passes to Python stands in for the interpreter: it prints the
# arguments, one JSON list per line.
ECHO = f'{sys.executable} -c "import json, sys; print(json.dumps(sys.argv[1:]))"'


def shown_commands(page):
    """Every command the page shows, as its list of words."""
    text = page.read_text()
    for match in FENCE.finditer(text):
        if match[1] == "sh":
            for line in match[2].replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words[:1] in (["make"], ["recipes"]) or words[:3] in PROGRAMS:
                    yield words  # `recipes`: the command the installed kit adds
    for span in re.findall(r"`((?:make|python -m keras_course_recipes) [^`]*)`", FENCE.sub("", text)):
        words = shlex.split(span)
        names_a_recipe = (any(word.startswith("NAME=") for word in words)
                          or words[:3] == ["python", "-m", "keras_course_recipes"] and len(words) > 4
                          and words[4] in kit.names())
        if names_a_recipe and "..." not in span:
            yield words


@functools.cache
def expand(words):
    """The `python -m keras_course_recipes` arguments a shown command runs: a list of lists."""
    if words[0] == "python":
        return [list(words[3:])]
    if words[0] == "recipes":
        return [list(words[1:])]
    result = subprocess.run(["make", "-s", "--no-print-directory", *words[1:], "INSTALLED=",
                             f"PY={ECHO}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{' '.join(words)}: {result.stdout}{result.stderr}"
    return [json.loads(line)[2:] for line in result.stdout.splitlines()]


def all_commands():
    return [(page, tuple(words)) for page in PAGES for words in shown_commands(page)]


def test_the_pages_show_commands_the_search_finds():
    found = all_commands()
    assert len(found) > 80, len(found)
    assert {words[1] for _, words in found if words[0] == "make"} >= {
        "recipe", "compare", "sweep", "memory", "soak", "benchmark", "graph"}


@pytest.mark.slow  # `make` expands the commands
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_shown_command_resolves_as_the_command_line_would(page, monkeypatch):
    """Each command through `python -m keras_course_recipes`' own `main`, up to the call of
    its tool: the make target, the recipe, the options and the overrides."""
    reached = []
    patched = {name: dataclasses.replace(command, run=lambda **arguments: reached.append(arguments))
               for name, command in cli.commands(tools=TOOLS).items()}
    monkeypatch.setattr(cli, "commands", lambda names=None, tools=None: patched)
    # Only resolving: this process' Keras and TensorFlow are already started.
    monkeypatch.setattr(process, "request_backend", lambda config: None)
    monkeypatch.setattr(process, "request_onednn", lambda config: None)
    for words in shown_commands(page):
        if not_run(words):
            assert words[0] != "make" or re.search(
                rf"^{re.escape(words[1])}:", (ROOT / "Makefile").read_text(), re.MULTILINE), words
            continue
        for argv in expand(tuple(words)):
            reached.clear()
            assert cli.main(argv, TOOLS) == 0 and len(reached) == 1, argv


# Shown commands that need what came before them (a run interrupted by hand),
# or that a test of their own runs, tiny, with more checks: the test that runs each.
RUN_ELSEWHERE = {
    'make recipe NAME=mnist_mlp ARGS=run.resume=true':
        "tests/test_resume.py::test_resume_finds_the_newest_unfinished_run_of_these_settings",
    "make recipe NAME=graph_lessons 'ARGS=execution.mode=xla run.resume=true'":
        "tests/test_resume.py::test_rerun_continues_at_epoch_2_with_saved_state",
    "make recipe NAME=densenet_cifar100 'ARGS=execution.mode=xla execution.precision=mixed_bfloat16'":
        "tests/test_recipes.py::test_recipe_trains_in_each_mode_and_precision",
    "make soak": "tests/test_faults.py::test_the_soak_kills_and_resumes_a_run_to_its_end",
    "make benchmark-augment NAME=cifar10_cnn 'ARGS=data.augment=[pad_crop,flip,randaugment]'":
        "tests/test_augment.py::test_augment_benchmark_writes_both_tables",
    # docs/backends.md's recipes on JAX and torch: in the processes of the tests
    # that train every recipe there (test_jax_backend.py's README_RUNS).
    **dict.fromkeys([
        "make recipe NAME=mnist_mlp ARGS=execution.backend=jax",
        "make recipe NAME=cifar10_cnn 'ARGS=execution.backend=jax execution.mode=eager'",
        "make recipe NAME=densenet_cifar10_wide 'ARGS=execution.backend=jax "
        "data.augment_on=device data.augment_engine=keras'",
        "python -m keras_course_recipes run densenet_cifar10_wide execution.backend=jax data.source=folder "
        "data.path=DATA data.augment_engine=keras",
        "python -m keras_course_recipes run densenet_cifar10_95 execution.backend=jax data.source=folder "
        "data.path=DATA execution.seed=0 train.optimizer=sgd train.schedule=triangle "
        "train.epochs=17 'data.augment=[flip, {pad_crop: {padding: 2, fill: reflect}}]'",
        "python -m keras_course_recipes run densenet_cifar10_cpu execution.backend=jax data.source=folder "
        "data.path=DATA",
        "python -m keras_course_recipes run fashion_mnist_cnn execution.backend=jax data.source=folder "
        "data.path=DATA",
        "make recipe NAME=mnist_mlp 'ARGS=execution.backend=jax data.source=folder data.path=DATA'",
        "python -m keras_course_recipes run mnist_mlp execution.backend=jax data.source=folder data.path=DATA",
    ], "tests/test_jax_backend.py::test_every_portable_recipe_trains_on_jax"),
    # PyTorch's own step needs the user's airbench94_muon.py; the test runs a stand-in.
    **dict.fromkeys([
        "make benchmark-backends SCRIPT=airbench94_muon.py ARGS=steps=10",
        "make benchmark-backends 'ARGS=variants=tf_graph,tf_xla,jax,torch_eager_first steps=5 "
        "execution.precision=float32'",
    ], "tests/test_backends.py::test_each_installed_backend_takes_its_steps_beside_pytorchs_own"),
    "make memory NAME=revnet_cifar10":
        "tests/test_revnet.py::test_the_memory_tool_writes_its_table_and_plot",
    "make recipe NAME=mnist_mlp ARGS=execution.backend=torch":
        "tests/test_torch_backend.py::test_a_recipe_trains_on_torch_and_does_not_resume_on_another_backend",
}


@pytest.mark.slow  # `make` expands the commands
def test_each_command_run_elsewhere_is_shown_and_its_test_exists():
    shown = {shlex.join(words) for _, words in all_commands()}
    for recipe in EXAMPLE_RECIPES:
        assert any(recipe in command for command in shown), f"{recipe}: no longer shown"
    for command, test in RUN_ELSEWHERE.items():
        assert command in shown, f"{command}: no longer shown; drop it here"
    for test in [*RUN_ELSEWHERE.values(), *EXAMPLE_RECIPES.values()]:
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), test


# Per tool: its options and overrides for a few steps on a little data, after
# the command's own. `compare` times the first of the command's modes only;
# `compare-sizes` the first of its sizes, shown or default, and the first two
# for mnist_mlp, whose steps cost least: each size is the same code path, and
# two sizes exercise the table and plot across sizes
# (test_every_shown_grid_value_resolves resolves every shown size,
# test_compare.py builds every default size).
TINY_OPTIONS = {
    "compare": ["steps=2", "repeats=1"],
    "compare-sizes": ["steps=2", "repeats=1"],
    "scaling": ["steps=2", "repeats=1"],
    "memory": ["steps=1", "backprop=standard", "model.variant=revnet38"],
    "soak": ["kills=2", "train.epochs=8", "train.steps_per_epoch=40"],
    # Every operation alone: tests/test_augment.py's benchmark test.
    "augment-benchmark": ["steps=2", "batches=2", "operations=flip"],
    "data-benchmark": ["steps=2"],
    "profile": ["data.synthetic_examples=256"],
}
SIZES_TIMED_TWICE = "mnist_mlp"
# A command that goes on with a run (run.dir=, run.resume=) keeps its own
# train.epochs, up to this: one that raises them to train a finished run
# further still raises them. Elsewhere the tiny single epoch wins, so that
# commands that differ only in epochs run once.
KEEP_EPOCHS_UP_TO = 4


def tiny(argv):
    """`argv` made tiny: random images, batches of 16, two steps an epoch."""
    if not cli.commands(tools=TOOLS)[argv[0]].on_recipe:
        return argv
    command, name, *items = argv
    epochs = [int(item.split("=")[1]) for item in items if item.startswith("train.epochs=")]
    more = [*TINY, *TINY_MODEL.get(kit.module_of(name), []), *TINY_OPTIONS.get(command, [])]
    if epochs and any(item.startswith(("run.dir=", "run.resume=")) for item in items):
        more.append(f"train.epochs={min(epochs[-1], KEEP_EPOCHS_UP_TO)}")
    validation_freq = [int(item.split("=")[1]) for item in items
                       if item.startswith("train.validation_freq=")]
    if validation_freq:  # validated after the tiny run's last epoch, as after the command's
        tiny_epochs = int([item for item in more if item.startswith("train.epochs=")][-1][13:])
        more.append(f"train.validation_freq={min(validation_freq[-1], tiny_epochs)}")
    if command in ("compare", "compare-sizes"):
        modes = next((item for item in items if item.startswith("modes=")), "modes=graph")
        more.append(modes.split(",")[0])
    if command == "compare-sizes":
        shown = [parse_grid(item[5:], "size=") for item in items if item.startswith("size=")]
        key, values = shown[-1] if shown else _compare.SIZES[kit.module_of(name)]
        timed = values[:2] if name == SIZES_TIMED_TWICE else values[:1]
        more.append(f"size={key}={json.dumps(timed)}")
        if key == "data.batch_size":
            more.append(f"data.synthetic_examples={max(timed)}")  # a batch at each size
    # The tiny values win; the command's own go, so that commands that
    # differ only in them run once. A sweep's grid over a key they set (a
    # model size) keeps that key with the tiny value alone
    # (test_every_shown_grid_value_resolves checks the values shown).
    tiny_values = dict(item.partition("=")[::2] for item in more)
    kept = []
    for before, item in zip(["", *items], items):
        key = item.partition("=")[0]
        if before == "--grid" and key in tiny_values:
            kept.append(f"{key}=[{tiny_values[key]}]")
        elif before in ("--grid", "--config") or key not in {*tiny_values, "data.path"}:
            kept.append(item)
    if command == "sweep" and "--one-at-a-time" in kept:
        # Each value alone is a run as the first is: the recipe's settings
        # and its first key's values train (test_sweep.py varies several).
        later_grids = [index for index, item in enumerate(kept) if item == "--grid"][1:]
        for index in reversed(later_grids):
            del kept[index:index + 2]
    return [command, name, *kept, *more]


def what_runs(argv):
    """What `argv` runs, as the command line resolves it: its command, recipe,
    options and resolved config, as text. Commands that differ only in
    writing a recipe's own setting again run the same."""
    found = cli.commands(tools=TOOLS)
    args, extra = cli.build_parser(found).parse_known_args(argv)
    arguments = dict(vars(args))
    command = found[arguments.pop("command")]
    if not command.on_recipe:
        return shlex.join(argv)
    options, overrides = command.split([*arguments.pop("overrides"), *extra])
    try:
        config = _config.resolve(args.name, args.config_files, overrides,
                                 announce=lambda line: None)
    except UserError:  # the run says why, as the command line would
        return shlex.join(argv)
    return json.dumps([command.name, arguments, options, config], sort_keys=True, default=str)


def runs():
    """[(id, [tiny argv, ...])]: every distinct command, once; the commands
    of one block that share a `run.dir` run together, in order, and so do a
    page's commands on JAX."""
    cases, seen = {}, set()
    for page, words in all_commands():
        shown = shlex.join(words)
        if not_run(words) or shown in RUN_ELSEWHERE:
            continue
        for argv in expand(words):
            argv = tiny(argv)
            run_dir = next((item for item in argv if item.startswith("run.dir=")), None)
            runs_the_same = shlex.join(argv) if run_dir else what_runs(argv)
            if runs_the_same in seen:
                continue
            seen.add(runs_the_same)
            if run_dir:
                group = f"{page.name}: {run_dir}"
            elif on_other_backend(argv):  # a page's commands on one backend share a process
                group = f"{page.name}: {on_other_backend(argv)}"
            else:
                group = f"{page.name}: {shlex.join(argv)}"
            cases.setdefault(group, []).append(argv)
    return sorted(cases.items())


@pytest.mark.slow  # `make` expands the commands
def test_every_shown_grid_value_resolves():
    """Each value of a shown sweep's grid or compare-sizes' sizes, as they
    resolve it: `tiny` runs a grid over a model size at the tiny size only,
    and the first two sizes."""
    checked = 0
    for _, words in all_commands():
        if not_run(words):
            continue
        for argv in expand(words):
            grids = [item for before, item in zip(argv, argv[1:]) if before == "--grid"]
            sizes = [item[5:] for item in argv if item.startswith("size=")]
            grids = grids if argv[0] == "sweep" else sizes if argv[0] == "compare-sizes" else []
            for key, values in map(parse_grid, grids):
                for value in values:
                    _config.resolve(argv[1], overrides=[f"{key}={json.dumps(value)}"],
                                    announce=lambda line: None)
                    checked += 1
    assert checked >= 16, checked


def on_other_backend(argv):
    """`execution.backend=jax` or `=torch` where `argv` names one, else None."""
    return next((item for item in argv if item in ("execution.backend=jax",
                                                   "execution.backend=torch")), None)


# Runs the command lines in argv[1], a JSON list, one after the other, each
# as `python -m keras_course_recipes` runs it: one process pays the backend's start-up once.
ON_OTHER_BACKEND = """
import json, sys
from keras_course_recipes.__main__ import main
for argv in json.loads(sys.argv[1]):
    assert main(argv) == 0, argv
"""


def pytest_generate_tests(metafunc):
    """The shown commands' cases, found by expanding them through `make`:
    not under `make test-fast`, which starts no process and runs none of them."""
    if metafunc.function.__name__ == "test_every_shown_command_runs_for_a_few_steps":
        fast = metafunc.config.getoption("markexpr") == "not slow"
        metafunc.parametrize("case", [] if fast else runs(), ids=lambda case: case[0][:150])


@pytest.mark.slow
def test_every_shown_command_runs_for_a_few_steps(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/ is relative to where the command runs
    monkeypatch.setattr(_compare, "measure_mode", measure_tensorflow_modes_here)
    # The processes tools start import this repository from elsewhere now.
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setitem(_memory.WORKER_ENVIRONMENT, "PYTHONPATH", str(ROOT))
    # `make notebooks` writes here, not over the checkout's notebooks, whose
    # freshness tests/test_notebooks.py checks.
    monkeypatch.setattr(_notebooks, "NOTEBOOKS_DIR", tmp_path / "notebooks")
    for other_backend, argvs in itertools.groupby(case[1], key=on_other_backend):
        if other_backend == "execution.backend=torch" and not machine.installed("torch"):
            pytest.skip("PyTorch is not installed here (requirements-torch.txt)")
        if other_backend:
            # Keras' backend is chosen once per process: a process of their own.
            argvs = list(argvs)
            result = subprocess.run([sys.executable, "-c", ON_OTHER_BACKEND, json.dumps(argvs)],
                                    capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, f"{argvs}: {result.stderr[-3000:]}"
            continue
        for argv in argvs:
            assert cli.main(argv, TOOLS) == 0, argv
    metrics = sorted(tmp_path.glob("runs/**/metrics.json"))
    for path in metrics:
        loss = json.loads(path.read_text())["final"].get("loss")
        assert loss is None or math.isfinite(loss), path


# A recipe file's command line: `python NAME.py ...`, `KERAS_BACKEND=jax python
# NAME.py ...`, or a notebook's `%run NAME.py ...`, which reads the same argv.
FILE_COMMAND = re.compile(r"^(?:KERAS_BACKEND=(\w+) )?(?:python|%run) (\w+\.py)(?: (.*))?$")
# A recipe file's keys for a few steps on random images (a file has no execution.onednn).
TINY_FILE = ["data.source=synthetic", "data.synthetic_examples=64", "data.batch_size=16",
             "train.epochs=1", "train.steps_per_epoch=2", "run.verbose=0"]


def shown_lines(page):
    """The lines of a page's ```sh blocks, and its inline code spans, one space apart."""
    text = page.read_text()
    lines = [line for match in FENCE.finditer(text) if match[1] == "sh"
             for line in match[2].replace("\\\n", " ").splitlines()]
    return [" ".join(line.split()) for line in
            [*lines, *re.findall(r"`([^`]+)`", FENCE.sub("", text))]]


def recipe_file_commands():
    """{(backend or None, file, args): page} of every recipe file command shown whole."""
    found = {}
    for page in PAGES:
        for line in shown_lines(page):
            match = FILE_COMMAND.match(line)
            if match and "..." not in line and match[2][:-3] in kit.MODULES:
                words = shlex.split(match[3] or "", comments=True)
                found.setdefault((match[1], match[2], tuple(words)), page.name)
    return found


def test_the_recipe_file_commands_shown_are_found():
    shown = {(backend, file) for backend, file, _ in recipe_file_commands()}
    assert {(None, "mnist_mlp.py"), ("jax", "mnist_mlp.py")} <= shown, shown


@pytest.mark.slow  # a process per command, each training a few steps
@pytest.mark.parametrize("command", sorted(recipe_file_commands(), key=str),
                         ids=lambda command: " ".join(filter(None, [command[0], command[1],
                                                                   *command[2]])))
def test_every_shown_recipe_file_command_trains_a_few_steps(command, tmp_path):
    """The recipe file copied into an empty folder, run as shown with the kit importable
    (as where it is installed), on a few steps of random images."""
    backend, file, words = command
    (tmp_path / file).write_text((ROOT / "recipes" / file).read_text())
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": backend or "tensorflow"}
    result = subprocess.run([sys.executable, file, *words, *TINY_FILE], cwd=tmp_path,
                            env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "test:" in result.stdout, result.stderr[-3000:]
    assert list(tmp_path.glob("**/history.csv"))


def test_every_pip_install_shown_names_what_exists():
    """`pip install` needs the registries: each shown line is checked against what
    it names instead, a requirements file or an extra of pyproject.toml."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    checked = 0
    for page in PAGES:
        for line in shown_lines(page):
            if not line.startswith("pip install "):
                continue
            words = shlex.split(line, comments=True)[2:]
            for flag, value in zip(words, words[1:]):
                if flag == "-r":
                    assert (ROOT / value).is_file(), f"{page.name}: {line}"
                    checked += 1
            for extra in re.findall(r"\[([\w,-]+)\]", " ".join(words)):
                assert set(extra.split(",")) <= set(extras), f"{page.name}: {line}"
                checked += 1
    assert checked >= 3, checked
