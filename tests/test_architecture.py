"""The recipe shape: tools reach recipes through `build`, nothing patches
Keras or reads its private attributes, and the cheap commands stay cheap."""

import ast
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_course_recipes as kit
from keras_course_recipes.errors import UserError
from conftest import ROOT
from keras_course_recipes import recipe_config, settings
from keras_course_recipes.augment import AugmentedModel

OURS = ("keras_course_recipes", "benchmarks", "tests")
SOURCES = sorted(p for folder in OURS for p in (ROOT / folder).rglob("*.py"))

# Assigning to an attribute of a Keras or TensorFlow class or module, or to a
# model's training methods, or setattr/monkeypatch on them.
PATCHING = re.compile(
    r"^\s*(keras|tf|tensorflow|keras_cv)(\.\w+)+\s*=[^=]"
    r"|\.(train_step|test_step|predict_step|fit|evaluate|predict|compile)\s*=[^=]"
    r"|setattr\((keras|tf|tensorflow|keras_cv)\b")


def test_nothing_replaces_a_method_of_keras_or_tensorflow():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in SOURCES
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if PATCHING.search(line) and path.name != "test_architecture.py"]
    assert found == []


def test_the_grep_finds_what_it_looks_for():
    assert PATCHING.search("keras.Model.fit = stop_at_fit")
    assert PATCHING.search("    model.train_step = augmented_train_step")
    assert PATCHING.search("setattr(keras.Model, 'fit', f)")
    assert not PATCHING.search("model.fit(timing.instrument(data.train), callbacks=callbacks)")
    assert not PATCHING.search("self.step_jit_compile, self.jit_compile = self.jit_compile, False")


# The library internals code or tests may read, each with why and where it
# is pinned (as keras_course_recipes/_distribute.py pins its keras#20585 workaround). An
# entry is a file and the expression as `ast.unparse` writes it.
PRIVATE_ALLOWED = {
    ("tests/test_augment.py", "node.attr['_XlaMustCompile']"):
        "TensorFlow has no public API that says which functions of a graph XLA compiles; "
        "tf.function(jit_compile=True) marks the call with this attribute, XLA_COMPILE in "
        "https://github.com/tensorflow/tensorflow/blob/v2.21.0/tensorflow/python/eager/"
        "polymorphic_function/attributes.py, pinned by tensorflow-cpu==2.21.0 "
        "(requirements-cpu.txt). Renamed, it is found nowhere and the test fails.",
}
ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}  # also monkeypatch.setattr/delattr


def private_accesses(source):
    """Yields `(line, expression)` for each private attribute of an object
    that is neither `self`/`cls` nor a module of ours in Python `source`:
    `obj._name`, `getattr(obj, "_name")` (and setattr, hasattr, delattr,
    monkeypatch's) and `obj["_name"]`."""
    tree = ast.parse(source)
    own = {"self", "cls"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
                node.level or node.module.split(".")[0] in OURS + ("conftest",)
                or node.module.startswith("test_")):
            own |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            own |= {(alias.asname or alias.name).split(".")[0] for alias in node.names
                    if alias.name.split(".")[0] in OURS}

    def private(name):
        return isinstance(name, str) and name.startswith("_") and not name.startswith("__")

    def library(obj):
        return not (isinstance(obj, ast.Name) and obj.id in own)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            obj, name = node.value, node.attr
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            obj, name = node.value, node.slice.value
        elif (isinstance(node, ast.Call) and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant)
              and (getattr(node.func, "id", None) in ACCESSORS
                   or getattr(node.func, "attr", None) in ACCESSORS)):
            obj, name = node.args[0], node.args[1].value
        else:
            continue
        if private(name) and library(obj):
            yield node.lineno, ast.unparse(node)


def test_nothing_reads_a_private_attribute_of_a_library_object_without_a_reason():
    found = {(str(path.relative_to(ROOT)), expression): line for path in SOURCES
             for line, expression in private_accesses(path.read_text())}
    assert sorted(f"{path}:{line}: {expression}" for (path, expression), line in found.items()
                  if (path, expression) not in PRIVATE_ALLOWED) == []
    assert set(PRIVATE_ALLOWED) <= set(found)  # an allowance nothing needs goes
    assert all("https://" in reason for reason in PRIVATE_ALLOWED.values())


def test_the_private_attribute_guard_finds_what_it_looks_for():
    def found(source):
        return [expression for _, expression in private_accesses(source)]

    assert found("model._flatten_layers(include_self=False)") == ["model._flatten_layers"]
    assert found("if not layer._layers: pass") == ["layer._layers"]
    assert found("super()._build()") == ["super()._build"]
    assert found("getattr(model, '_jit_compile')") == ["getattr(model, '_jit_compile')"]
    assert found("monkeypatch.setattr(keras.Model, '_train', f)") == [
        "monkeypatch.setattr(keras.Model, '_train', f)"]
    assert found("node.attr['_XlaMustCompile'].b") == ["node.attr['_XlaMustCompile']"]
    assert found("self.model._private") == ["self.model._private"]
    ours = ("from keras_course_recipes import data\nimport keras_course_recipes\n"
            "import keras_course_recipes.callbacks.timing as timing\n"
            "self._step = cls._count = 1\ndata._split_names(0)\nkeras_course_recipes.data.load\n"
            "monkeypatch.setattr(data, '_reachable', f)\ntiming._clock\ntf.__version__\n")
    assert found(ours) == []


@pytest.mark.slow  # a process of its own
def test_list_and_show_import_no_tensorflow():
    script = ("import sys; from keras_course_recipes.__main__ import main; "
              "main(['list']); main(['show', 'densenet_cifar100', 'model.depth=40']); "
              "heavy = sorted({m.split('.')[0] for m in sys.modules} "
              "& {'tensorflow', 'keras', 'keras_cv', 'matplotlib', 'tensorflow_datasets'}); "
              "print('imported:', heavy)")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "imported: []"
    assert "depth: 40" in result.stdout


def test_a_recipe_schema_types_its_own_keys():
    schema = recipe_config.recipe_schema("densenet_cifar100")
    assert schema["model.depth"] == {"type": ["int", "null"], "at_least": 1}
    assert "cosine" in schema["train.schedule"]
    assert recipe_config.recipe_schema("cifar10_cnn")["model.conv_dropout"] == {
        "type": "float", "at_least": 0, "below": 1}
    config = recipe_config.resolve("densenet_cifar100", overrides=["model.depth=40"],
                             announce=lambda line: None)
    assert config["model"]["depth"] == 40
    with pytest.raises(UserError, match="'model.depth' expects an integer"):
        recipe_config.resolve("densenet_cifar100", overrides=["model.depth=deep"])
    with pytest.raises(UserError, match="'train.schedule' must be one of constant"):
        recipe_config.resolve("densenet_cifar100", overrides=["train.schedule=linear"])


def tiny_network():
    return keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                             keras.layers.Dense(10, activation="softmax")])


def augments(module):
    """Whether recipe module `module`'s CONFIG lists `data.augment`."""
    return "augment" in settings.module_literal(kit.RECIPES_DIR / f"{module}.py", "CONFIG")["data"]


AUGMENTING = [module for module in kit.MODULES if augments(module)]


def check_augmentation_is_honoured_or_refused(module, tiny_config):
    """The rule: a recipe that augments wraps its model when augmentation runs on
    the device; one that does not refuses `data.augment` as an unknown key (its
    model is never wrapped for the step: data.augment would be ignored)."""
    if not augments(module):
        with pytest.raises(UserError, match="Unknown config key 'data.augment'"):
            recipe_config.resolve(module, overrides=["data.augment=[flip]"],
                                  announce=lambda line: None)
        return
    config = tiny_config(module, "data.augment=[flip]", "data.augment_on=device",
                         "data.name=cifar10")
    experiment = kit.load(module).build(config)
    assert isinstance(experiment.model, AugmentedModel)
    assert experiment.model.augment is experiment.data.augment


@pytest.mark.parametrize("module", AUGMENTING)
def test_every_recipe_wraps_its_model_when_augmentation_runs_on_the_device(module, tiny_config):
    check_augmentation_is_honoured_or_refused(module, tiny_config)


@pytest.mark.parametrize("module", sorted(set(kit.MODULES) - set(AUGMENTING)))
def test_a_recipe_that_does_not_augment_refuses_augmentation_as_an_unknown_key(module,
                                                                              tiny_config):
    check_augmentation_is_honoured_or_refused(module, tiny_config)


@pytest.mark.filterwarnings("error:`compile\\(\\)` was not called")
def test_an_augmented_model_saves_and_loads_as_its_network(tmp_path):
    network = tiny_network()
    model = AugmentedModel(network, augment=lambda images, labels: (1 - images, labels))
    model.compile("sgd", "sparse_categorical_crossentropy")
    images = np.random.default_rng(0).uniform(size=(4, 32, 32, 3)).astype("float32")
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded, AugmentedModel) and loaded.augment is None
    np.testing.assert_allclose(loaded.predict(images, verbose=0),
                               network.predict(images, verbose=0), rtol=1e-6)
    labels = np.arange(4)
    assert loaded.evaluate(images, labels, verbose=0) == pytest.approx(
        model.evaluate(images, labels, verbose=0), rel=1e-5)
    assert model.count_params() == network.count_params()


@pytest.mark.slow  # a process of its own
def test_a_reader_that_stops_early_gets_no_traceback():
    """`python -m keras_course_recipes list | head -1`: the pipe closes before the list is written."""
    process = subprocess.Popen([sys.executable, "-m", "keras_course_recipes", "list"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # before the child, still importing, writes a line
    assert process.wait(timeout=60) == 0
    assert "Traceback" not in process.stderr.read()


def imports_of(path):
    """The modules of ours that the Python file at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return {name for name in found if name.split(".")[0] == "keras_course_recipes"}


# The package's modules by folder: the kit's own, and the folders mapped into it.
FOLDERS = {"keras_course_recipes": "keras_course_recipes",
           "recipes": "keras_course_recipes.recipes", "models": "keras_course_recipes.models",
           "callbacks": "keras_course_recipes.callbacks"}


def test_no_module_of_ours_imports_itself_through_others():
    """No import cycle, not even through a function-local import."""
    modules = {".".join([package, *path.relative_to(ROOT / folder).with_suffix("").parts])
               .removesuffix(".__init__"): path
               for folder, package in FOLDERS.items() for path in (ROOT / folder).rglob("*.py")}
    graph = {name: {other for other in imports_of(path) if other in modules and other != name}
             for name, path in modules.items()}
    # A package's __init__ runs before any of its modules: importing one imports
    # it too. A module that imports nothing of ours (keras_course_recipes.runs, which
    # recipes/__init__ imports) never reads a half-run __init__, so its own
    # import of the package closes no cycle.
    for name in modules:
        parent = name.rpartition(".")[0]
        if parent in modules and graph[name]:
            graph[name].add(parent)

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    assert [cycle for cycle in map(cycle_from, graph) if cycle] == []
    # The package's __init__ imports errors, which imports nothing of ours: the errors
    # come from one module, which the data pipeline imports without the run.
    kit = "keras_course_recipes"
    ours = {name: {other.removeprefix(f"{kit}.") for other in found}
            for name, found in graph.items()}
    assert ours[f"{kit}.harness"] > {kit} and ours[f"{kit}.errors"] == set()
    # One way a run happens: a recipe file's `runs.main` goes through the harness, as
    # `recipes run` does, and the harness opens the run in rundir without the file's way in.
    assert ours[f"{kit}.runs"] == {kit, "errors", "harness", "process", "recipe_config", "rundir",
                                  "settings"}
    assert "runs" not in ours[f"{kit}.harness"] | ours[f"{kit}.rundir"]
    assert ours[f"{kit}.data"] == {kit, "errors"}  # folder.py: by importlib
    assert ours[f"{kit}.folder"] == {kit, "errors"}
    assert ours[f"{kit}.augment"] == {kit, "errors", "data", "machine"}
    # A builder or callback imports nothing of the kit's: a copy takes its file alone.
    assert all(other == kit or other.startswith(("models", "callbacks"))
               for name in ours if name.startswith((f"{kit}.models.", f"{kit}.callbacks."))
               for other in ours[name]), ours


# The kit's modules from the bottom up: each imports only modules before it in this list
# (the package's __init__ is "keras_course_recipes"). A new module takes its place here.
KIT_ORDER = ["errors", "keras_course_recipes", "settings", "machine", "history_csv", "data",
             "folder", "process", "augment", "rundir", "recipe_config", "_distribute", "harness",
             "runs", "__main__"]


def test_the_kits_modules_import_downward_only():
    package = ROOT / "keras_course_recipes"
    assert sorted(KIT_ORDER) == sorted(["keras_course_recipes", *(
        path.stem for path in package.glob("*.py") if path.stem != "__init__")])
    upward = []
    for place, name in enumerate(KIT_ORDER):
        path = package / ("__init__.py" if name == "keras_course_recipes" else f"{name}.py")
        for other in imports_of(path):
            parts = other.split(".")
            imported = parts[1] if len(parts) > 1 and parts[1] in KIT_ORDER else parts[0]
            if imported in KIT_ORDER and KIT_ORDER.index(imported) >= place and imported != name:
                upward.append(f"{name} imports {imported}")
    assert upward == []
