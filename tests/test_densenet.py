"""DenseNet builders: the paper's parameter counts, functional == Sequential,
and `.keras` round trips in a fresh process."""

import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import ROOT

from keras_course_recipes.models.densenet import VARIANTS, DenseBlock, TransitionBlock, densenet, densenet_variant
from keras_course_recipes.recipes.densenet_cifar100 import flip_averaged

# Parameters for 10 classes, in millions (arXiv 1608.06993, Table 2).
PAPER_PARAMS_M = {
    "densenet40_k12": 1.0,
    "densenet100_k12": 7.0,
    "densenet_bc100_k12": 0.8,
    "densenet_bc250_k24": 15.3,
    "densenet_bc190_k40": 25.6,
}


def test_every_variant_has_a_paper_count():
    # densenet_cpu is ours; its count is checked by hand below.
    assert set(PAPER_PARAMS_M) == set(VARIANTS) - {"densenet_cpu"}


@pytest.mark.parametrize("variant", sorted(PAPER_PARAMS_M))
def test_parameter_count_matches_the_paper(variant):
    """The paper counts learnable parameters (BN's moving statistics are not)
    and rounds to 0.1M: DenseNet-BC-100 k=12 has 0.769M, printed as 0.8M."""
    model = densenet_variant(variant, input_shape=(32, 32, 3), num_classes=10)
    millions = sum(int(np.prod(w.shape)) for w in model.trainable_weights) / 1e6
    assert round(millions, 1) == PAPER_PARAMS_M[variant]


def tiny(api, **overrides):
    args = dict(input_shape=(16, 16, 3), num_classes=5, depth=16, growth_rate=4,
                bottleneck=True, compression=0.5, api=api)
    return densenet(**{**args, **overrides})


def weights_by_layer(model):
    """Every weight, keyed `layer/weight` by the last two parts of its path
    (`block1/block1_layer1_3x3_conv/kernel` inside a custom block)."""
    weights = {"/".join(w.path.split("/")[-2:]): w for w in model.weights}
    assert len(weights) == len(model.weights)  # every layer's name is its own
    return weights


def layers_of(model):
    """Every layer, also inside the custom blocks (their own stacks of layers)."""
    for layer in model.layers:
        if isinstance(layer, DenseBlock):
            yield from (inner for stack in layer.composites for inner in stack)
        elif isinstance(layer, TransitionBlock):
            yield from layer.stack
        else:
            yield layer


@pytest.mark.parametrize("settings", [
    {}, {"bottleneck": False, "compression": 1.0, "depth": 13},
    {"batch_norm": False}, {"dropout": 0.2},
])
def test_sequential_equals_functional_given_the_same_weights(settings):
    functional, sequential = tiny("functional", **settings), tiny("sequential", **settings)
    assert functional.count_params() == sequential.count_params()
    sources, targets = weights_by_layer(functional), weights_by_layer(sequential)
    assert sorted(sources) == sorted(targets)  # the same layers, named alike
    rng = np.random.default_rng(0)
    for name, source in sources.items():
        assert source.shape == targets[name].shape, name
        value = rng.normal(size=source.shape).astype("float32")
        if name.endswith("/moving_variance"):
            value = np.abs(value) + 0.5  # a valid variance
        source.assign(value)
        targets[name].assign(value)
    images = rng.uniform(size=(3, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(functional(images, training=False),
                               sequential(images, training=False), rtol=1e-4, atol=1e-6)


def test_densenet_cpu_has_the_layout_and_parameters_counted_by_hand():
    model = densenet_variant("densenet_cpu", input_shape=(32, 32, 3), num_classes=10)
    bn = lambda c: 4 * c  # gamma, beta, moving mean, moving variance  # noqa: E731

    def block(channels, k):  # 3 layers of BN-ReLU-Conv3x3(k), each on all maps so far
        params = 0
        for _ in range(3):
            params += bn(channels) + 9 * channels * k
            channels += k
        return params, channels

    stem = 27 * 48 + bn(48)
    block1, c = block(48, 48)                         # 16x16 after the stem's pool: 192 maps
    transition1 = bn(c) + c * (c // 2)                # to 96 maps, max-pooled to 8x8
    block2, c = block(c // 2, 96)                     # 384 maps
    transition2 = bn(c) + c * (c // 2)                # 192 maps, 4x4
    block3, c = block(c // 2, 128)                    # 576 maps
    head = bn(c) + c * 10 + 10
    assert model.count_params() == stem + block1 + transition1 + block2 + transition2 + block3 + head
    assert model.get_layer("stem_pool").output.shape == (None, 16, 16, 48)
    assert isinstance(model.get_layer("transition1_pool"), keras.layers.MaxPooling2D)
    assert model.get_layer("block3_layer3_concat").output.shape == (None, 4, 4, 576)


def test_batch_norm_momentum_reaches_every_batch_norm():
    for api in ("functional", "sequential"):
        model = tiny(api, batch_norm_momentum=0.9, stem_pool=True)
        norms = [layer for layer in layers_of(model)
                 if isinstance(layer, keras.layers.BatchNormalization)]
        # The stem's, 2 in each bottleneck layer (2 per block at depth 16), the
        # 2 transitions' and the final one.
        assert len(norms) == 1 + 3 * 2 * 2 + 2 + 1, api
        assert {layer.momentum for layer in norms} == {0.9}, api


def test_a_growth_rate_per_block_must_name_three():
    with pytest.raises(ValueError, match="one per dense block, received: growth_rate=.8, 8."):
        tiny("functional", growth_rate=[8, 8])
    wide = tiny("functional", growth_rate=[4, 8, 12], bottleneck=False, depth=7)
    # stem 16, +4 = 20, halved to 10, +8 = 18, halved to 9, +12 = 21
    assert wide.get_layer("block3_layer1_concat").output.shape[-1] == 21


def test_flip_averaged_predicts_the_mean_over_each_image_and_its_mirror():
    network = tiny("functional")
    images = np.random.default_rng(2).uniform(size=(3, 16, 16, 3)).astype("float32")
    expected = (network.predict(images, verbose=0)
                + network.predict(images[:, :, ::-1], verbose=0)) / 2
    averaged = flip_averaged(network).predict(images, verbose=0)
    np.testing.assert_allclose(averaged, expected, rtol=1e-5, atol=1e-7)
    assert not np.allclose(averaged, network.predict(images, verbose=0), atol=1e-4)


def test_bad_depth_and_api_are_value_errors():
    with pytest.raises(ValueError, match="received: depth=17"):
        tiny("functional", depth=17)
    with pytest.raises(ValueError, match="received: api='subclass'"):
        tiny("subclass")
    with pytest.raises(ValueError, match="Unknown DenseNet variant"):
        densenet_variant("densenet121", input_shape=(32, 32, 3), num_classes=10)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["functional", "sequential"])
def test_saved_model_loads_in_a_fresh_process(api, tmp_path):
    model = tiny(api)
    images = np.random.default_rng(1).uniform(size=(2, 16, 16, 3)).astype("float32")
    path = tmp_path / "model.keras"
    model.save(path)
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "expected.npy", model.predict(images, verbose=0))
    script = (
        "import sys, numpy as np, keras; sys.path.insert(0, sys.argv[1]); import keras_course_recipes.models.densenet; "
        "m = keras.saving.load_model(sys.argv[2]); d = sys.argv[3]; "
        "np.testing.assert_allclose(m.predict(np.load(d + '/images.npy'), verbose=0), "
        "np.load(d + '/expected.npy'), rtol=1e-5); print('loaded', type(m).__name__)")
    result = subprocess.run([sys.executable, "-c", script, str(ROOT), str(path), str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded" in result.stdout
