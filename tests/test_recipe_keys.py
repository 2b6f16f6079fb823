"""Each recipe owns its keys: a recipe's file declares its own keys' types,
bounds, choices and cross-checks in its CONFIG_SCHEMA, beside its CONFIG, and
the kit names no recipe and none of a recipe's own keys, so adding a recipe is
adding a file."""

import ast
import inspect
import re

import pytest

import keras_course_recipes as kit
from conftest import ROOT
from keras_course_recipes import recipe_config, settings

# The kit's modules (its commands in tools/ aside, which work on given recipes).
from keras_course_recipes.errors import UserError
KIT_MODULES = sorted(kit.PACKAGE_DIR.glob("*.py"))


def recipe_own_keys():
    """Every recipe's own keys, from their CONFIGs: those neither the shared
    sections' defaults nor the kit's tables (`settings.TYPES`, `LIMITS`,
    `CHOICES`: the train keys every recipe has) hold."""
    kit_keys = {*settings.TYPES, *settings.LIMITS, *settings.CHOICES}
    own = set()
    for module in kit.MODULES:
        shared = settings.flatten(recipe_config.defaults(module))
        own |= {key for key in settings.flatten(recipe_config.recipe_values(module)[0])
                if key not in shared and key not in kit_keys}
    return own


def named(source, recipes, keys):
    """What of `recipes` (names) and `keys` (dotted) the Python `source` names: a
    recipe's name or a dotted key anywhere in it, comments and docstrings too,
    or a key's last part as a string of its own (`config["model"]["dropout"]`)."""
    strings = {node.value for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    found = [name for name in recipes if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", source)]
    found += [key for key in keys if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", source)
              or key.rpartition(".")[2] in strings]
    return sorted(set(found))


def test_the_recipes_own_keys_are_found_in_their_configs():
    own = recipe_own_keys()
    assert len(own) > 30 and {key.partition(".")[0] for key in own} == {"model", "train"}
    assert not {f"train.{key}" for key in settings.TRAIN_KEYS} & own


@pytest.mark.parametrize("path", KIT_MODULES, ids=lambda path: path.name)
def test_no_kit_module_names_a_recipe_or_a_recipes_own_key(path):
    assert named(path.read_text(), kit.names(), recipe_own_keys()) == [], (
        f"{path.name} names these: a recipe declares its own keys in its CONFIG_SCHEMA")


def test_the_guard_finds_what_it_looks_for():
    keys = {"model.dropout", "train.warmup_epochs"}
    assert named('rate = config["model"]["dropout"]', ["mnist_mlp"], keys) == ["model.dropout"]
    assert named('"""Refuses train.warmup_epochs above..."""', [], keys) == ["train.warmup_epochs"]
    assert named("# as mnist_mlp does\nx = 1\n", ["mnist_mlp"], keys) == ["mnist_mlp"]
    assert named('x = "dropout_rate"  # mnist_mlps\n', ["mnist_mlp"], keys) == []


def test_the_kit_keeps_the_shared_train_keys_and_no_recipe_keeps_the_kits():
    """train.epochs, steps_per_epoch and lr are in every recipe's CONFIG, typed by the kit."""
    for module in kit.MODULES:
        train = recipe_config.recipe_values(module)[0]["train"]
        assert {"epochs", "steps_per_epoch", "lr"} <= set(train), module
    assert {f"train.{key}" for key in settings.TRAIN_KEYS} <= set(settings.TYPES)


# ## A new recipe with a key of its own

NEW_RECIPE = '''
"""A recipe of a student's own."""

CONFIG = {
    "data": {"name": "mnist", "batch_size": 32},
    "model": {"blocks": 3, "stage_widths": [16, 32], "stage_strides": [1, 2]},
    "train": {"epochs": 4, "steps_per_epoch": None, "lr": 0.1, "schedule": "constant",
              "ramp_epochs": 0},
    "execution": {"seed": 0},
}
CONFIG_SCHEMA = {
    "model.blocks": {"type": "int", "at_least": 1, "at_most": 8},
    "model.stage_widths": {"type": "list", "items": "int", "at_least": 1,
                           "same_length_as": "model.stage_strides"},
    "train.schedule": ["constant", "cosine", "step"],
    "train.ramp_epochs": {"type": "int", "at_least": 0, "below": "train.epochs",
                          "needs": {"train.schedule": ["constant", "cosine"]}},
}

# Its keys are read from the literals above, without running the file.
raise SystemExit("the kit ran the recipe's file to read its settings")
'''


@pytest.fixture
def new_recipe(tmp_path, monkeypatch):
    """`my_recipe`, a file the kit has never seen, as a recipe of the repository's."""
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "my_recipe.py").write_text(NEW_RECIPE)
    monkeypatch.setattr(kit, "MODULES", (*kit.MODULES, "my_recipe"))
    monkeypatch.setattr(recipe_config, "RECIPES_DIR", folder)

    def resolve(*overrides):
        return recipe_config.resolve("my_recipe", overrides=overrides, announce=lambda line: None)
    return resolve


def test_a_new_recipes_own_key_takes_a_value_within_its_declared_bounds(new_recipe):
    config = new_recipe("model.blocks=8", "train.schedule=cosine", "train.ramp_epochs=3")
    assert config["model"]["blocks"] == 8 and config["train"]["ramp_epochs"] == 3


@pytest.mark.parametrize("overrides, message", [
    (["model.blocks=9"], "Config key 'model.blocks' must be at least 1 and at most 8, got 9 on "
                         "the command line."),
    (["model.blocks=0"], "Config key 'model.blocks' must be at least 1 and at most 8, got 0"),
    (["model.blocks=2.5"], "Config key 'model.blocks' expects an integer, got 2.5"),
    (["model.blocks=null"], "Config key 'model.blocks' expects an integer, got None"),
    (["model.stage_widths=[16,0]", "model.stage_strides=[1,1]"],
     "'model.stage_widths' must be a list of integers, each at least 1, got [16, 0]"),
    (["model.stage_widths=[16]"],
     "model.stage_widths and model.stage_strides need the same number of entries; got [16] "
     "and [1, 2]."),
    (["train.ramp_epochs=4"], "train.ramp_epochs=4 must be below train.epochs=4"),
    (["train.ramp_epochs=1", "train.schedule=step"],
     "train.ramp_epochs works with train.schedule=constant or cosine, not train.schedule=step"),
    (["model.blcks=2"], "Unknown config key 'model.blcks' on the command line. Did you mean "
                        "model.blocks?"),
])
def test_a_new_recipes_own_key_is_refused_out_of_its_declared_bounds(new_recipe, overrides,
                                                                     message):
    with pytest.raises(UserError) as refused:
        new_recipe(*overrides)
    assert message in str(refused.value)


def test_a_new_recipes_config_out_of_its_bounds_is_refused_where_it_is_written(new_recipe):
    source = recipe_config.RECIPES_DIR / "my_recipe.py"
    source.write_text(NEW_RECIPE.replace('"blocks": 3', '"blocks": 12'))
    with pytest.raises(UserError, match=r"'model.blocks' must be at least 1 and at most 8, got "
                                        rf"12 in {re.escape(str(source))}'s CONFIG"):
        new_recipe()


@pytest.mark.parametrize("rule, message", [
    ({"range": [1, 8]}, "CONFIG_SCHEMA's 'model.blocks' must be a type's name, a list of "
                        "choices or a mapping of the words"),
    ({"type": "integer"}, "CONFIG_SCHEMA's 'model.blocks' has the type 'integer'"),
    ({"below": [8]}, "CONFIG_SCHEMA's 'model.blocks''s 'below' takes a number or a dotted key"),
    ({"below": "model.size"}, "CONFIG_SCHEMA's 'model.blocks' names 'model.size', which the "
                              "settings lack"),
])
def test_a_schema_the_kit_cannot_read_is_one_line_naming_the_key(new_recipe, rule, message):
    source = recipe_config.RECIPES_DIR / "my_recipe.py"
    source.write_text(NEW_RECIPE.replace(
        '"model.blocks": {"type": "int", "at_least": 1, "at_most": 8}',
        f'"model.blocks": {rule!r}'))
    with pytest.raises(UserError) as refused:
        new_recipe()
    assert message in str(refused.value)


def test_the_kits_example_declaration_is_one_it_reads():
    """`settings.declarations`' docstring, where the words are documented."""
    doc = inspect.cleandoc(settings.declarations.__doc__)
    example = re.search(r"\n *CONFIG_SCHEMA = (\{.*?\n *\})", doc, re.S).group(1)
    rules = settings.declarations(ast.literal_eval(example))
    words = {word for rule in rules.values() for word in rule}
    assert words == settings.WORDS, "the example shows every word"


def test_the_add_a_recipe_pages_example_declares_its_key(tmp_path, monkeypatch):
    """docs/add-a-recipe.md's recipe refuses `model.hidden_units=[0]`, as the page says."""
    page = (ROOT / "docs" / "add-a-recipe.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    (tmp_path / "my_softmax.py").write_text(code)
    monkeypatch.setattr(kit, "MODULES", (*kit.MODULES, "my_softmax"))
    monkeypatch.setattr(recipe_config, "RECIPES_DIR", tmp_path)
    config = recipe_config.resolve("my_softmax", announce=lambda line: None)
    assert config["model"]["hidden_units"] == []
    with pytest.raises(UserError, match="'model.hidden_units' must be a list of integers, each "
                                        "at least 1, got \\[0\\] on the command line"):
        recipe_config.resolve("my_softmax", overrides=["model.hidden_units=[0]"])
