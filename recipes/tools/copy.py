"""`python -m recipes copy NAME DIR`: a recipe module and the kit's files it imports,
copied into DIR with their folders, where `python NAME.py` trains on its own
without the kit installed; prints each file's lines and the total a student
takes along. (Where the kit is installed, the recipe's file alone is enough.)"""

import ast
import shutil
from pathlib import Path

import recipes
from recipes.errors import UserError
from recipes.tools import Command

ROOT = recipes.PACKAGE_DIR.parent
KIT_PACKAGES = ("recipes", "models", "callbacks")
OPTIONAL = "recipes/folder.py"  # recipes/data.py loads it by name, only for data.source=folder


def kit_files(path):
    """The kit's files that the Python file `path` imports (an import statement
    anywhere in it), theirs in turn, and their packages' `__init__.py`, as
    paths relative to the kit's root, sorted."""
    found, todo = set(), [Path(path)]
    while todo:
        for module in _imported_modules(todo.pop().read_text()):
            parts = module.split(".")
            if parts[0] not in KIT_PACKAGES:
                continue
            for depth in range(1, len(parts) + 1):  # each package on the way, then the module
                stem = "/".join(parts[:depth])
                relative = next((candidate for candidate in (f"{stem}/__init__.py", f"{stem}.py")
                                 if (ROOT / candidate).is_file()), None)
                if relative is not None and relative not in found:
                    found.add(relative)
                    todo.append(ROOT / relative)
    return sorted(found)


def _imported_modules(source):
    """Every module an import statement in `source` names: `from a import b`
    names `a` and, where it is a module, `a.b`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def copy(name, folder):
    """Copies recipe module `name` and its kit's files into `folder`; returns
    [(path in folder, lines)]. Refuses a file that is there already."""
    if name not in recipes.MODULES:
        recipes.check_name(name)
        raise UserError(f"{name} is a YAML recipe of {recipes.module_of(name)}: copy "
                        f"{recipes.module_of(name)}, and set its CONFIG as configs/{name}.yaml "
                        "says.")
    folder = Path(folder).expanduser()
    recipe = ROOT / "recipes" / f"{name}.py"
    sources = {f"{name}.py": recipe, **{path: ROOT / path for path in kit_files(recipe)}}
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file: give a folder to copy {name} into.")
    there = [path for path in sources if (folder / path).exists()]
    if there:
        raise UserError(f"{folder} already holds {', '.join(there)}: copy into another folder, "
                        "or remove them first.")
    copied = []
    try:
        for path, source in sources.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / path)
            copied.append((path, len(source.read_text().splitlines())))
    except OSError as error:
        raise UserError(f"Cannot copy into {folder}: {error.strerror} "
                        f"({error.filename or folder}). Give a folder you can write to.") from None
    return copied


def main(name, folder):
    copied = copy(name, folder)
    for path, lines in copied:
        print(f"{lines:6,}  {path}")
    print(f"{sum(lines for _, lines in copied):6,}  in all: cd {folder} && python {name}.py "
          "data.source=synthetic train.epochs=1")
    optional = len((ROOT / OPTIONAL).read_text().splitlines())
    print(f"for data.source=folder, copy {OPTIONAL} too ({optional:,} lines); where the kit is "
          f"installed, {name}.py alone is enough")


def _arguments(parser):
    parser.add_argument("name", help="recipe module (see `list`)")
    parser.add_argument("folder", help="where to copy it")


COMMANDS = (
    Command("copy", "copy a recipe and the kit's files it imports into a folder of your own",
            main, arguments=_arguments, on_recipe=False, without_tensorflow=True),
)
