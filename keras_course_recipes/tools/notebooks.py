"""`python -m keras_course_recipes notebooks`: every recipe module as notebooks/<name>.ipynb.

keras-io renders each example's `.py` into a notebook the same way: the
`.py` stays the source. The recipe's header docstring is the first markdown
cell; each top-level `# ## Title` comment starts a section, whose comment
lines are a markdown cell and whose code, up to the next section, a code
cell. A first code cell installs the kit the recipe imports (`KIT_CELL`)
where the kernel lacks it, or says in one line what to install. Its last cell
trains with CONFIG's values, as the file does when pasted into one cell.
Written as nbformat 4's JSON with fixed cell ids (nbformat's own writer
draws new ones each time), so that the same source gives the same file.

A notebook is overwritten only where it is still what this command wrote
(its metadata's digest says so); one a student edited, ran or saved is kept
as `<name>.ipynb.bak`, with a line saying so.
"""

import ast
import hashlib
import json
import re
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes.errors import UserError
from keras_course_recipes.errors import checkout
from keras_course_recipes.tools import Command

NOTEBOOKS_DIR = kit.PACKAGE_DIR.parent / "notebooks"  # a checkout's, which tests keep fresh
SECTION = re.compile(r"^# ## (.+)$")
DIGEST = "recipes_written_sha256"  # a notebook's metadata key: the digest of the rest


def notebook(module):
    """Recipe module `module` as a notebook (nbformat 4's JSON, as a dict)."""
    source = (kit.RECIPES_DIR / f"{module}.py").read_text()
    docstring = ast.parse(source).body[0]
    title, _, text = ast.get_docstring(ast.parse(source)).partition("\n")
    body = "".join(source.splitlines(keepends=True)[docstring.end_lineno:])
    cells = [_cell("markdown", f"# {title.strip()}\n{text.rstrip()}"),
             _cell("code", KIT_CELL.format(module=module))]
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
    written = {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    written["metadata"][DIGEST] = _digest(written)
    return written


def _digest(notebook):
    """The sha256 of `notebook` less its own digest: any change but the order of keys shows."""
    rest = {**notebook, "metadata": {key: value for key, value in notebook["metadata"].items()
                                     if key != DIGEST}}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def _as_written(path):
    """Whether the notebook at `path` is still what `write` wrote there."""
    try:
        found = json.loads(path.read_text())
        return found["metadata"][DIGEST] == _digest(found)
    except (ValueError, TypeError, KeyError):  # not JSON, or not a notebook this command wrote
        return False


# The notebook's first code cell. pip needs a source: no package index holds the kit, so the cell
# takes what it finds where the notebook is opened.
KIT_CELL = '''# recipes/{module}.py, cell by cell (`make notebooks` writes it). It runs on its kit, the
# keras-course-recipes package (keras_course_recipes). Where this kernel lacks it, this
# cell installs it from KIT if you set it (a clone's folder, a git URL or a wheel), else from a
# wheel of it beside this notebook (`make wheel` builds one; in Colab, upload it with the
# notebook), else from the clone this notebook sits in.
KIT = ""
import glob, importlib, importlib.util, os, pathlib, subprocess, sys

if importlib.util.find_spec("keras_course_recipes") is None:
    source = KIT or next(iter(sorted(glob.glob("keras_course_recipes-*.whl"))), "")
    source = source or (".." if os.path.isfile("../pyproject.toml") else "")
    where = source if "://" in source else pathlib.Path(source).resolve().as_uri()
    if not source or subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                                     f"keras-course-recipes[tensorflow] @ {{where}}"]).returncode:
        raise SystemExit("The kit this notebook runs on is not installed: pip install a clone of "
                         "its repository (or a wheel that make wheel builds) where this kernel "
                         "runs, or set KIT in this cell to where pip finds it.")
    importlib.invalidate_caches()'''


def _cell(kind, text):
    cell = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def text(module):
    """The notebook of `module` as the text `notebooks/<module>.ipynb` holds."""
    return json.dumps(notebook(module), indent=1, ensure_ascii=False) + "\n"


def write(out_dir=NOTEBOOKS_DIR):
    """Writes every recipe module's notebook into `out_dir`, keeping an edited
    one as `<name>.ipynb.bak`; refused, writing nothing, where that is taken."""
    out_dir = Path(out_dir).expanduser()
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} is a file: give a folder to write the notebooks into with "
                        "--dir DIR.")
    try:
        _write(out_dir)
    except OSError as error:
        raise UserError(f"Cannot write the notebooks into {out_dir}: {error.strerror} "
                        f"({error.filename or out_dir}). Give a folder you can write to with "
                        "--dir DIR.") from None


def _write(out_dir):
    """`write`'s work, into the folder `out_dir` (made if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {module: out_dir / f"{module}.ipynb" for module in kit.MODULES}
    edited = [path for path in paths.values() if path.exists() and not _as_written(path)]
    for path in edited:  # all checked before any is written: a refusal changes nothing
        backup = path.with_name(f"{path.name}.bak")
        if backup.exists():
            raise UserError(f"{path} is not the notebook this command wrote (edited or run?), "
                            f"and {backup} holds an earlier one: move either away, then run "
                            "it again.")
    for module, path in paths.items():
        if path in edited:
            backup = path.replace(path.with_name(f"{path.name}.bak"))
            print(f"{path} is not the notebook this command wrote (edited or run?): kept as "
                  f"{backup}", flush=True)
        path.write_text(text(module))
        print(f"wrote {path}", flush=True)


def _write_where_asked(dir=None):
    """`write` into `dir`; without it, a checkout's notebooks/, or an installed kit's
    ./notebooks in the current folder: never into the installed package."""
    write(dir or (NOTEBOOKS_DIR if checkout() else Path("notebooks")))


def _add_arguments(parser):
    parser.add_argument("--dir", metavar="DIR", help="where to write them (default: a "
                        "checkout's notebooks/, else ./notebooks)")


COMMANDS = (
    Command("notebooks", "write notebooks/<recipe>.ipynb from each recipe module's file",
            _write_where_asked, arguments=_add_arguments, on_recipe=False,
            without_tensorflow=True),
)
