"""`python -m keras_course_recipes copy NAME DIR`: a recipe module and the kit's files it imports,
copied into DIR with their folders, where `python NAME.py` trains on its own
without the kit installed; prints each file's lines and the total a student
takes along. (Where the kit is installed, the recipe's file alone is enough.)"""

import ast
import importlib.util
import shutil
from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import errors
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command

PACKAGE = "keras_course_recipes"
# What a run loads by name, only where a setting asks for it (data.py's folder reader, the
# harness's callbacks.graph and callbacks.diagnostics): left out, and named after the copy's
# files. A copy needs what a default run imports, and nothing more.
OPTIONAL = {f"{PACKAGE}/folder.py": "data.source=folder",
            f"{PACKAGE}/callbacks/graph_writer.py": "callbacks.graph=true",
            f"{PACKAGE}/callbacks/diagnostics.py": "callbacks.diagnostics=true"}
# The copy's keras_course_recipes/ comes first on `python -m`'s path in its folder and
# hides an installed kit's command line: its __main__ says so, in one line.
SHADOW = f"{PACKAGE}/__main__.py"
SHADOW_TEXT = '''"""Written by `recipes copy`: this folder's keras_course_recipes/ holds the kit's
files its recipe imports, and nothing of the command line."""

raise SystemExit("error: this folder's keras_course_recipes/ is the part of the kit that "
                 "`recipes copy` copied for its recipe, and it hides an installed kit from "
                 "`python -m keras_course_recipes` here: run the `recipes` command, or run "
                 "python -m from another folder (python NAME.py trains the copy).")
'''


def kit_files(path):
    """{path in a copy: its source file} of the kit's modules that the Python file
    `path` imports (an import statement anywhere in it), theirs in turn, and their
    packages' `__init__.py`, by module path (`keras_course_recipes/models/mlp.py`,
    from models/ in a checkout), sorted."""
    found, todo = {}, [Path(path)]
    while todo:
        for module in _imported_modules(todo.pop().read_text()):
            parts = module.split(".")
            if parts[0] != PACKAGE:
                continue
            for depth in range(1, len(parts) + 1):  # each package on the way, then the module
                spec = _spec(".".join(parts[:depth]))
                if spec is None:
                    break  # a name the module defines (`from errors import UserError`)
                package = spec.submodule_search_locations is not None
                relative = "/".join(parts[:depth]) + ("/__init__.py" if package else ".py")
                if relative not in found:
                    found[relative] = Path(spec.origin)
                    todo.append(Path(spec.origin))
                if not package:
                    break  # what follows is a name it defines: looking would import it
    return dict(sorted(found.items()))


def _spec(module):
    """The import spec of `module` (its package imported, never the module), or None."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # a name inside a module, not a module
        return None
    return spec if spec is not None and spec.origin else None


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
    if name not in kit.MODULES:
        kit.check_name(name)
        module = kit.module_of(name)
        where = f" (configs/{name}.yaml)" if errors.checkout() else ""
        raise UserError(f"{name} is a YAML recipe of {module}: copy {module}, and set in its "
                        f"CONFIG (or give as key=value) what {name} changes{where}: "
                        f"{' '.join(_settings(name))}.")
    folder = Path(folder).expanduser()
    recipe = kit.RECIPES_DIR / f"{name}.py"
    sources = {f"{name}.py": recipe, **kit_files(recipe)}
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file: give a folder to copy {name} into.")
    there = [path for path in [*sources, SHADOW] if (folder / path).exists()]
    if there:
        raise UserError(f"{folder} already holds {', '.join(there)}: copy into another folder, "
                        "or remove them first.")
    copied = []
    try:
        for path, source in sources.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, folder / path)
            copied.append((path, len(source.read_text().splitlines())))
        (folder / SHADOW).write_text(SHADOW_TEXT)
    except OSError as error:
        raise UserError(f"Cannot copy into {folder}: {error.strerror} "
                        f"({error.filename or folder}). Give a folder you can write to.") from None
    return copied


def _settings(name):
    """What the YAML recipe `name` sets over its module's CONFIG, as `key=value` items
    quoted for a shell."""
    import shlex

    import yaml

    def items(values, prefix=""):
        for key, value in values.items():
            if isinstance(value, dict):
                yield from items(value, f"{prefix}{key}.")
            elif f"{prefix}{key}" != "recipe":
                shown = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
                shown = shown.removesuffix("\n...").strip()  # a scalar's document end
                yield shlex.quote(f"{prefix}{key}={shown}")

    return list(items(yaml.safe_load((kit.CONFIGS_DIR / f"{name}.yaml").read_text()) or {}))


def main(name, folder):
    copied = copy(name, folder)
    for path, lines in copied:
        print(f"{lines:6,}  {path}")
    print(f"{sum(lines for _, lines in copied):6,}  in all: cd {folder} && python {name}.py "
          "data.source=synthetic train.epochs=1")
    for path, setting in OPTIONAL.items():
        source = _spec(path.removesuffix(".py").replace("/", ".")).origin
        lines = len(Path(source).read_text().splitlines())
        print(f"for {setting}, copy {path} too ({lines:,} lines)")
    print(f"where the kit is installed, {name}.py alone is enough")


def _arguments(parser):
    parser.add_argument("name", help="recipe module (see `list`)")
    parser.add_argument("folder", help="where to copy it")


COMMANDS = (
    Command("copy", "copy a recipe and the kit's files it imports into a folder of your own",
            main, arguments=_arguments, on_recipe=False, without_tensorflow=True),
)
