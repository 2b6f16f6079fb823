"""AugmentedModel decides its compilation through `compile`'s arguments, not
by setting Keras' attributes after it."""

import ast

import keras
import numpy as np
import pytest

from conftest import ROOT
from keras_course_recipes.augment import AugmentedModel


def test_nothing_sets_keras_jit_compile_attribute():
    found = []
    for path in sorted(p for folder in ("models", "recipes", "callbacks")
                       for p in (ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for item in ast.walk(target):
                    if isinstance(item, ast.Attribute) and item.attr == "jit_compile":
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def network(*layers):
    return keras.Sequential([keras.Input((8, 8, 1)), *layers, keras.layers.Flatten(),
                             keras.layers.Dense(2)])


@pytest.mark.slow
@pytest.mark.parametrize("layers, compiled", [([], True), ([keras.layers.RandomCrop(6, 6)], False)])
def test_fit_runs_plain_graphs_around_the_network_steps_keras_compiled(layers, compiled):
    model = AugmentedModel(network(*layers), augment=lambda images, labels: (images, labels))
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    # fit's own function stays a plain graph; the network's steps are XLA
    # functions where Keras could compile the network (RandomCrop: it cannot).
    assert model.jit_compile is False and model.step_jit_compile is compiled
    history = model.fit(np.ones((8, 8, 8, 1)), np.zeros((8, 2)), batch_size=4, verbose=0)
    assert len(history.history["loss"]) == 1
