"""`python -m recipes copy NAME DIR`: a recipe module and the files its header
names, copied into DIR with their folders, where `python NAME.py` trains on
its own; prints each file's lines and the total a student takes along."""

import shutil
from pathlib import Path

import recipes
from recipes.runs import UserError
from recipes.tools import Command
from recipes.tools.notebooks import files_to_copy

ROOT = recipes.PACKAGE_DIR.parent
OPTIONAL = "recipes/folder.py"  # only for data.source=folder


def copy(name, folder):
    """Copies recipe module `name` and its files into `folder`; returns
    [(path in folder, lines)]. Refuses a file that is there already."""
    if name not in recipes.MODULES:
        recipes.check_name(name)
        raise UserError(f"{name} is a YAML recipe of {recipes.module_of(name)}: copy "
                        f"{recipes.module_of(name)}, and set its CONFIG as configs/{name}.yaml "
                        "says.")
    folder = Path(folder).expanduser()
    sources = {f"{name}.py": ROOT / "recipes" / f"{name}.py"}
    sources.update({path: ROOT / path for path in
                    files_to_copy(sources[f"{name}.py"].read_text())})
    there = [path for path in sources if (folder / path).exists()]
    if there:
        raise UserError(f"{folder} already holds {', '.join(there)}: copy into another folder, "
                        "or remove them first.")
    copied = []
    for path, source in sources.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, folder / path)
        copied.append((path, len(source.read_text().splitlines())))
    return copied


def main(name, folder):
    copied = copy(name, folder)
    for path, lines in copied:
        print(f"{lines:6,}  {path}")
    print(f"{sum(lines for _, lines in copied):6,}  in all: cd {folder} && python {name}.py "
          "data.source=synthetic train.epochs=1")
    optional = len((ROOT / OPTIONAL).read_text().splitlines())
    print(f"for data.source=folder, copy {OPTIONAL} too ({optional:,} lines)")


def _arguments(parser):
    parser.add_argument("name", help="recipe module (see `list`)")
    parser.add_argument("folder", help="where to copy it")


COMMANDS = (
    Command("copy", "copy a recipe and the files it needs into a folder of your own", main,
            arguments=_arguments, on_recipe=False, without_tensorflow=True),
)
