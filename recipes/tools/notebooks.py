"""`python -m recipes notebooks`: every recipe module as notebooks/<name>.ipynb.

keras-io renders each example's `.py` into a notebook the same way: the
`.py` stays the source. The recipe's header docstring is the first markdown
cell; each top-level `# ## Title` comment starts a section, whose comment
lines are a markdown cell and whose code, up to the next section, a code
cell. A first code cell moves a notebook opened in notebooks/ to the
repository's root, where the files the recipe imports are. Its last cell
trains with CONFIG's values, as the file does when pasted into one cell.
Written as nbformat 4's JSON with fixed cell ids (nbformat's own writer
draws new ones each time), so that the same source gives the same file.
"""

import ast
import json
import re
from pathlib import Path

import recipes
from recipes.tools import Command

NOTEBOOKS_DIR = recipes.PACKAGE_DIR.parent / "notebooks"
SECTION = re.compile(r"^# ## (.+)$")
# The files a recipe's header says to copy beside it ("Copy it out with A, B and C in ...").
COPIED = re.compile(r"Copy it\s+out with(.*?)\s+in\s+those\s+folders", re.S)
FILE = re.compile(r"\b(?:models|recipes|callbacks)/\w+\.py\b")


def files_to_copy(source):
    """The files a recipe's source says to copy beside it."""
    found = COPIED.search(source)
    return FILE.findall(found.group(1)) if found else []


def notebook(module):
    """Recipe module `module` as a notebook (nbformat 4's JSON, as a dict)."""
    source = (recipes.PACKAGE_DIR / f"{module}.py").read_text()
    docstring = ast.parse(source).body[0]
    title, _, text = ast.get_docstring(ast.parse(source)).partition("\n")
    body = "".join(source.splitlines(keepends=True)[docstring.end_lineno:])
    cells = [_cell("markdown", f"# {title.strip()}\n{text.rstrip()}"),
             _cell("code", _SETUP.format(module=module, files=", ".join(files_to_copy(source))))]
    section, lines = None, []
    for line in [*body.strip("\n").splitlines(), "# ## (end)"]:
        match = SECTION.match(line)
        if not match:
            lines.append(line)
            continue
        if section is not None:
            comments = []
            while lines and lines[0].startswith("#"):
                comments.append(lines.pop(0)[2:])
            cells.append(_cell("markdown", f"## {section}\n\n" + "\n".join(comments)))
            cells.append(_cell("code", "\n".join(lines).strip("\n")))
        section, lines = match.group(1), []
    for index, cell in enumerate(cells):
        cell["id"] = f"{module}-{index}"  # fixed ids: the same source gives the same file
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


_SETUP = '''# The recipe's file, recipes/{module}.py, cell by cell (`make notebooks` writes it).
# It imports {files}:
# run it from the repository's root, or a folder holding those files.
import os

if not os.path.isdir("recipes") and os.path.isdir("../recipes"):
    os.chdir("..")  # opened in notebooks/'''


def _cell(kind, text):
    cell = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def text(module):
    """The notebook of `module` as the text `notebooks/<module>.ipynb` holds."""
    return json.dumps(notebook(module), indent=1, ensure_ascii=False) + "\n"


def write(out_dir=NOTEBOOKS_DIR):
    """Writes every recipe module's notebook into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for module in recipes.MODULES:
        (out_dir / f"{module}.ipynb").write_text(text(module))
        print(f"wrote {out_dir / module}.ipynb", flush=True)


COMMANDS = (
    Command("notebooks", "write notebooks/<recipe>.ipynb from each recipe module's file",
            lambda: write(), on_recipe=False, without_tensorflow=True),
)
