"""A recipe runs in a notebook: notebooks/<recipe>.ipynb is its file rendered
cell by cell (`make notebooks`), and runs on a real Jupyter kernel; the
recipe pasted into one cell trains with CONFIG's values, the kernel's own
`sys.argv` notwithstanding; and `%run recipe.py key=value` is its command
line there."""

import ast
import shutil

import nbclient
import nbformat
import pytest

import recipes
from conftest import ROOT
from recipes.tools import notebooks

from test_copy import copied

# What a student edits in CONFIG to train on random images for two steps.
TINY_CONFIG = ('CONFIG["data"].update(source="synthetic", synthetic_examples=64, batch_size=16)\n'
               'CONFIG["train"].update(epochs=1, steps_per_epoch=2)\n')


@pytest.mark.parametrize("module", recipes.MODULES)
def test_each_notebook_is_its_recipe_rendered_now(module):
    written = (ROOT / "notebooks" / f"{module}.ipynb").read_text()
    assert written == notebooks.text(module), "stale: run `make notebooks`"
    nbformat.validate(nbformat.reads(written, as_version=4))


def test_a_notebook_holds_the_recipe_code_and_its_sections_as_text():
    cells = notebooks.notebook("mnist_mlp")["cells"]
    code = "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    source = (ROOT / "recipes" / "mnist_mlp.py").read_text()
    body = source.splitlines()[ast.parse(source).body[0].end_lineno:]  # after the docstring
    for line in body:
        if line and not line.startswith("# ") and line != "#" and '"""' not in line:
            assert line in code, line
    headings = [cell["source"][0].strip() for cell in cells if cell["cell_type"] == "markdown"]
    assert headings[0].startswith("# MLP on MNIST")
    assert headings[1:] == ["## Setup", "## Configuration", "## The data and the compiled model",
                            "## Training and evaluation", "## Run it"]


def execute(cells, folder):
    """Runs `cells` (their sources) on a fresh python3 kernel in `folder`;
    returns each cell's printed text."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return ["".join(output.get("text", "") for output in cell.outputs) for cell in notebook.cells]


@pytest.mark.slow
def test_the_notebook_trains_on_a_jupyter_kernel(tmp_path):
    """As a student runs notebooks/mnist_mlp.ipynb, with CONFIG edited for random images."""
    notebook = nbformat.reads(notebooks.text("mnist_mlp"), as_version=4)
    where = next(index for index, cell in enumerate(notebook.cells)
                 if cell.cell_type == "code" and "CONFIG = {" in cell.source)
    notebook.cells.insert(where + 1, nbformat.v4.new_code_cell(
        TINY_CONFIG + f'CONFIG["run"] = {{"dir": "{tmp_path / "run"}"}}'))
    shutil.copytree(ROOT / "notebooks", tmp_path / "repository" / "notebooks")
    for folder in ("recipes", "models", "callbacks"):
        shutil.copytree(ROOT / folder, tmp_path / "repository" / folder)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path / "repository" / "notebooks")}}).execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert "run directory:" in printed and "test: {'accuracy'" in printed, printed
    assert (tmp_path / "run" / "history.csv").read_text().count("\n") == 2  # header, one epoch


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
    assert "test: {'accuracy'" in pasted and "error" not in pasted, pasted
    [run_dir] = (folder / "runs" / "mnist_mlp").iterdir()
    assert runs_config(run_dir)["train"]["epochs"] == 1  # CONFIG's, not the kernel's -f
    assert "override: train.epochs = 2" in percent_run and "test: {'accuracy'" in percent_run
    assert (folder / "again" / "history.csv").read_text().count("\n") == 3


def runs_config(run_dir):
    from recipes import runs

    return runs.read_config(run_dir)
