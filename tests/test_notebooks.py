"""A recipe runs in a notebook: notebooks/<recipe>.ipynb is its file rendered
cell by cell (`make notebooks`), and runs on a real Jupyter kernel; the
recipe pasted into one cell trains with CONFIG's values, the kernel's own
`sys.argv` notwithstanding; and `%run recipe.py key=value` is its command
line there."""

import ast
import json

import nbclient
import nbformat
import pytest

import keras_course_recipes as kit
from conftest import ROOT
from keras_course_recipes import rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import notebooks

from test_copy import copied

# What a student edits in CONFIG to train on random images for two steps.
TINY_CONFIG = ('CONFIG["data"].update(source="synthetic", synthetic_examples=64, batch_size=16)\n'
               'CONFIG["train"].update(epochs=1, steps_per_epoch=2)\n')


def check_renders(module):
    """The rule: recipe module `module` renders as a valid notebook (what `make
    notebooks` writes) whose code cells hold every line of its code; returns its cells."""
    nbformat.validate(nbformat.reads(notebooks.text(module), as_version=4))
    cells = notebooks.notebook(module)["cells"]
    code = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    source = (kit.RECIPES_DIR / f"{module}.py").read_text()
    body = source.splitlines()[ast.parse(source).body[0].end_lineno:]  # after the docstring
    for line in body:
        if line and not line.startswith("# ") and line != "#" and '"""' not in line:
            assert line in code, line
    return cells


@pytest.mark.parametrize("module", kit.MODULES)
def test_each_notebook_is_its_recipe_rendered_now(module):
    written = (ROOT / "notebooks" / f"{module}.ipynb").read_text()
    assert written == notebooks.text(module), "stale: run `make notebooks`"
    check_renders(module)


def test_a_notebook_holds_the_recipe_code_and_its_sections_as_text():
    cells = check_renders("mnist_mlp")
    headings = [cell["source"][0].strip() for cell in cells if cell["cell_type"] == "markdown"]
    assert headings[0].startswith("# MLP on MNIST")
    assert headings[1:] == ["## Setup", "## Configuration", "## The data and the compiled model",
                            "## Training and evaluation", "## Run it"]


def test_make_notebooks_never_loses_an_edit(tmp_path, capsys):
    notebooks.write(tmp_path)
    edited, older = tmp_path / "mnist_mlp.ipynb", tmp_path / "cifar10_cnn.ipynb"
    student = nbformat.reads(edited.read_text(), as_version=4)
    student.cells.append(nbformat.v4.new_code_cell("print('my own experiment')"))
    edited.write_text(nbformat.writes(student))
    # What the command wrote from an earlier cifar10_cnn.py: its own, to replace
    written = json.loads(older.read_text())
    written["cells"][0]["source"] = ["# an earlier title\n"]
    written["metadata"][notebooks.DIGEST] = notebooks._digest(written)
    older.write_text(json.dumps(written))
    capsys.readouterr()

    notebooks.write(tmp_path)
    assert (tmp_path / "mnist_mlp.ipynb.bak").read_text() == nbformat.writes(student)
    assert f"{edited} is not the notebook this command wrote (edited or run?): kept as " \
           f"{edited}.bak" in capsys.readouterr().out
    assert [path.name for path in tmp_path.glob("*.bak")] == ["mnist_mlp.ipynb.bak"]
    for module in kit.MODULES:
        assert (tmp_path / f"{module}.ipynb").read_text() == notebooks.text(module)

    # A second edit, where the first's backup is: refused, and nothing is written.
    edited.write_text(nbformat.writes(student))
    with pytest.raises(UserError, match="mnist_mlp.ipynb.bak holds an earlier one"):
        notebooks.write(tmp_path)
    assert edited.read_text() == nbformat.writes(student)


def execute(cells, folder, kernel="python3"):
    """Runs `cells` (their sources) on a fresh `kernel` in `folder`; returns
    each cell's printed text."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(notebook, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(folder)}}).execute()
    return ["".join(output.get("text", "") for output in cell.outputs) for cell in notebook.cells]


def student_notebook(module, *edits):
    """notebooks/<module>.ipynb as generated, with `edits` (cell sources) after CONFIG's cell."""
    notebook = nbformat.reads(notebooks.text(module), as_version=4)
    where = next(index for index, cell in enumerate(notebook.cells)
                 if cell.cell_type == "code" and "CONFIG = {" in cell.source)
    notebook.cells[where + 1:where + 1] = [nbformat.v4.new_code_cell(edit) for edit in edits]
    return notebook


@pytest.mark.slow
@pytest.mark.parametrize("style", ["jupyter", "vscode"])
def test_a_notebook_trains_in_a_fresh_kernel_where_the_wheel_is_installed(
        style, tmp_path, fresh_pythons, monkeypatch):
    """What a student in Colab gets: the kit's wheel installed, the notebook in an
    empty folder, CONFIG edited for random images; launched as Jupyter (and
    Colab) launch a kernel, `-f FILE`, and as VS Code does, `--ip=... --f=FILE`."""
    monkeypatch.setenv("JUPYTER_PATH", fresh_pythons.jupyter_path)
    kernel = fresh_pythons.kernel(fresh_pythons.kit, style)
    notebook = student_notebook("mnist_mlp", TINY_CONFIG)
    folder = tmp_path / "empty"
    folder.mkdir()
    nbclient.NotebookClient(notebook, timeout=600, kernel_name=kernel,
                            resources={"metadata": {"path": str(folder)}}).execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert "run directory:" in printed and ": test: accuracy" in printed, printed
    [run_dir] = (folder / "runs" / "mnist_mlp").iterdir()
    assert (run_dir / "history.csv").read_text().count("\n") == 2  # header, one epoch


@pytest.mark.slow
def test_a_notebook_in_a_kernel_without_the_kit_says_what_to_install(tmp_path, fresh_pythons,
                                                                    monkeypatch):
    """No kit, nothing to install it from (no KIT, no wheel beside it, no clone around it)."""
    monkeypatch.setenv("JUPYTER_PATH", fresh_pythons.jupyter_path)
    notebook = student_notebook("mnist_mlp")
    folder = tmp_path / "empty"
    folder.mkdir()
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name=fresh_pythons.kernel(fresh_pythons.bare),
        resources={"metadata": {"path": str(folder)}})
    with pytest.raises(nbclient.exceptions.CellExecutionError) as error:
        client.execute()
    assert error.value.ename == "SystemExit" and "ModuleNotFoundError" not in str(error.value)
    assert error.value.evalue.startswith("The kit this notebook runs on is not installed: pip "
                                         "install a clone of its repository")
    assert notebook.cells[1].source.startswith("# recipes/mnist_mlp.py, cell by cell")


@pytest.mark.slow
def test_a_key_added_to_config_in_a_cell_is_checked_like_key_value(tmp_path):
    """`CONFIG["train"]["epoch"] = 1` (meant: epochs) once trained with train.epochs."""
    recipe = (ROOT / "recipes" / "mnist_mlp.py").read_text().partition("# ## Run it")[0]
    printed = execute([recipe, 'CONFIG["train"]["epoch"] = 1\nexperiment = runs.main("mnist_mlp", '
                               'CONFIG, run, CONFIG_SCHEMA)'], tmp_path)
    assert printed[-1] == ("error: Config keys 'train.epoch' and 'train.epochs' are both set in "
                           "CONFIG, and one looks like a misspelling of the other: keep the one "
                           "the recipe reads (a key of your own needs a name unlike its "
                           "neighbours').\n"), printed
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_pasted_into_a_cell_it_trains_and_percent_run_takes_key_value(tmp_path):
    folder = copied("mnist_mlp", tmp_path / "my_project")
    source = (folder / "mnist_mlp.py").read_text()
    # The student's edit, after CONFIG; the cell is the whole file otherwise.
    source = source.replace("\n# ## The data and the compiled model",
                            "\n" + TINY_CONFIG + "\n# ## The data and the compiled model")
    pasted, percent_run = execute([
        source, "%run mnist_mlp.py data.source=synthetic data.synthetic_examples=64 "
                "data.batch_size=16 train.epochs=2 train.steps_per_epoch=2 run.dir=again"], folder)
    assert ": test: accuracy" in pasted and "error" not in pasted, pasted
    [run_dir] = (folder / "runs" / "mnist_mlp").iterdir()
    assert rundir.read_config(run_dir)["train"]["epochs"] == 1  # CONFIG's, not the kernel's -f
    assert "override: train.epochs = 2" in percent_run and ": test: accuracy" in percent_run
    assert (folder / "again" / "history.csv").read_text().count("\n") == 3



def test_an_installed_kit_writes_its_notebooks_where_it_is_run_never_into_the_package(
        tmp_path, monkeypatch, capsys):
    """From a wheel, `recipes notebooks` wrote seven notebooks into site-packages/notebooks/."""
    from keras_course_recipes.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(notebooks, "checkout", lambda: None)  # as from an installed wheel
    assert main(["notebooks"]) == 0
    assert sorted(path.name for path in (tmp_path / "notebooks").iterdir()) == sorted(
        f"{module}.ipynb" for module in kit.MODULES)
    assert main(["notebooks", "--dir", "mine"]) == 0
    assert (tmp_path / "mine" / "mnist_mlp.ipynb").is_file()
