"""execution.backend=jax: every portable recipe trains on Keras' JAX backend,
augmentation runs inside JAX's step, a run resumes across backends, and what
is TensorFlow's own refuses JAX in one line; without TensorFlow installed,
the recipes still train on JAX.

Keras reads its backend once per process, and this test process runs
TensorFlow's: what trains on JAX runs in a process of its own, started as a
user starts it (`python -m keras_course_recipes`), or, where a test needs only
what a run gave and wrote, in the session's one shared JAX process
(`jax_runs`), which pays JAX's start-up and the compilations its runs share once.
"""

import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
import sysconfig
import venv

import keras
import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import keras_course_recipes as kit
from conftest import ROOT, TINY, TINY_MODEL, run_once, shared_folder
from keras_course_recipes import harness, process, recipe_config
from keras_course_recipes.errors import UserError
from keras_course_recipes import data as rdata
from keras_course_recipes import folder as rfolder
from keras_course_recipes import augment as raugment
from keras_course_recipes.__main__ import main
from keras_course_recipes.data import ArrayBatches
from test_data import write_folder

JAX_ENV = {**os.environ, "KERAS_BACKEND": "jax"}
PORTABLE_MODULES = [module for module in kit.MODULES
                    if recipe_config.tensorflow_only(module) is None]


def tiny(name, tmp_path, *overrides):
    """A tiny JAX run of recipe `name`, in its own run directory."""
    return [*TINY, *TINY_MODEL.get(kit.module_of(name), []), "execution.backend=jax",
            f"run.dir={tmp_path / name}", *overrides]


# The recipes each module's process trains on JAX: the module's own, and the
# YAMLs that take other code paths (the softmax regression, keras-cv's
# RandAugment and CutMix in tf.data); the other YAMLs only change numbers.
ON_JAX = {"mnist_mlp": ["mnist_mlp", "mnist_softmax"], "mnist_cnn": ["mnist_cnn"],
          "cifar10_cnn": ["cifar10_cnn"], "densenet_cifar10_cpu": ["densenet_cifar10_cpu"],
          "densenet_cifar100": ["densenet_cifar100", "densenet_cifar100_modern"]}
# The other JAX commands of docs/backends.md, in the shared JAX process and
# checked by their module's test (tests/test_docs.py's RUN_ELSEWHERE lists
# them, so that they start no process of their own): label -> (recipe,
# overrides, the mode and augmentation placement it records).
README_RUNS = {
    "cifar10_cnn": {"cifar10_cnn eager": ("cifar10_cnn", ["execution.mode=eager"],
                                          "eager", "host")},
    "mnist_cnn": {"fashion_mnist_cnn": ("fashion_mnist_cnn", [], "xla", None)},
    "densenet_cifar10_cpu": {"densenet_cifar10_95 on sgd": (
        "densenet_cifar10_95", ["execution.seed=0", "train.optimizer=sgd", "train.schedule=triangle",
                                "data.augment=[flip, {pad_crop: {padding: 2, fill: reflect}}]"],
        "xla", "host")},
    "densenet_cifar100": {"densenet_cifar10_wide": (
        "densenet_cifar10_wide", ["data.augment_on=device", "data.augment_engine=keras"],
        "xla", "device")},
}


def test_the_recipes_listed_to_train_on_jax_are_portable_and_their_modules():
    """A module left out of ON_JAX trains its own recipe alone (`ON_JAX.get`)."""
    assert set(ON_JAX) <= set(PORTABLE_MODULES) and "graph_lessons" not in PORTABLE_MODULES
    assert all(kit.module_of(name) == module for module, names in ON_JAX.items()
               for name in names)


# Learnable synthetic data (each class a template plus noise), 3 epochs.
LEARNABLE = ["data.synthetic_examples=640", "data.batch_size=32", "train.steps_per_epoch=null",
             "train.epochs=3"]


# Builds an AugmentedModel on JAX and trains 3 jitted steps; leaves its seed
# states before and after, and whether the step was jitted, in `found`.
AUGMENTED_STEP = """
import json
import keras, numpy as np
from keras_course_recipes.augment import AugmentedModel, augmentation

augment = augmentation(["pad_crop", "flip", "cutmix"], seed=0, engine="keras", on="device")
inputs = keras.Input((8, 8, 3))
network = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(
    keras.layers.Flatten()(inputs)))
model = AugmentedModel(network, augment)
model.compile(optimizer="sgd", loss="categorical_crossentropy", jit_compile=True)
seeds = lambda: [np.array(v).tolist() for v in model.non_trainable_variables]
before = seeds()
images = np.random.default_rng(0).random((12, 8, 8, 3)).astype("float32")
labels = np.eye(10, dtype="float32")[np.arange(12) % 10]
model.fit(images, labels, batch_size=4, epochs=1, verbose=0)
found = {"before": before, "after": seeds(), "mode": model.step_jit_compile}
"""


def shared_runs(folder):
    """The shared JAX process's runs, [(label, recipe, overrides)], or
    (label, None, a script that leaves its findings in `found`), each run in
    a folder of its own under `folder`: every run of the tests that need only
    what a run gave and wrote."""
    runs = []
    for module in PORTABLE_MODULES:  # test_every_portable_recipe_trains_on_jax's
        runs += [(name, name, tiny(name, folder)) for name in ON_JAX.get(module, [module])]
        runs += [(label, name, tiny(name, folder / "more", *overrides))
                 for label, (name, overrides, _, _) in README_RUNS.get(module, {}).items()]
    runs += [(f"learns {mode}", "mnist_mlp",  # test_on_jax_a_recipe_learns_eagerly_and_jitted's
              tiny("mnist_mlp", folder / mode, *LEARNABLE, f"execution.mode={mode}"))
             for mode in ("eager", "xla")]
    # test_on_jax_augmentation_runs_in_the_jitted_step_and_its_seeds_advance's
    runs.append(("augmented step", None, AUGMENTED_STEP))
    # test_densenet_augments_in_the_jax_step_without_naming_an_engine's
    runs.append(("densenet_cifar10 on device", "densenet_cifar10",
                 tiny("densenet_cifar10", folder, "data.augment_on=device")))
    return runs


# Runs `shared_runs` in one JAX process: argv[1] holds them as JSON; what each
# gave (a run's metrics, a script's `found`, or the traceback that ended it)
# goes to the JSON file argv[2] as it ends, so that a failed run fails its own
# tests alone. Each starts in float32, as a process of its own would.
DRIVER = """
import json, sys, traceback
import keras
from keras_course_recipes import recipe_config, harness
results = {}
for label, name, overrides in json.loads(sys.argv[1]):
    keras.mixed_precision.set_global_policy("float32")
    try:
        if name is None:
            scope = {}
            exec(overrides, scope)
            results[label] = scope["found"]
        else:
            config = recipe_config.resolve(name, overrides=overrides, announce=lambda line: None)
            results[label] = harness.train(config)
    except Exception:
        results[label] = {"driver_traceback": traceback.format_exc()}
    open(sys.argv[2], "w").write(json.dumps(results))
"""


@pytest.fixture(scope="session")
def jax_runs(tmp_path_factory):
    """`shared_runs` in one JAX process per session (`conftest.run_once`):
    `jax_runs[label]` is what run `label` gave, and fails where it failed."""
    folder = shared_folder(tmp_path_factory, "shared-jax")
    return run_once(folder, "runs", DRIVER, shared_runs(folder), JAX_ENV)


@pytest.mark.slow
@pytest.mark.parametrize("module", PORTABLE_MODULES)
def test_every_portable_recipe_trains_on_jax(module, jax_runs):
    """The module's recipes, each with its own YAML, one epoch on JAX in the
    default mode, jit: the run records the backend, the mode and JAX's version."""
    for name in ON_JAX.get(module, [module]):
        metrics = jax_runs[name]
        assert metrics["backend"] == metrics["device"]["backend"] == "jax", name
        assert metrics["mode_requested"] == metrics["mode_used"] == "xla", name
        assert metrics["epochs_completed"] == 1 and math.isfinite(metrics["final"]["loss"]), name
        assert metrics["versions"]["jax"] == "0.10.2", name
        assert (jax_runs.folder / name / "checkpoints" / "best.keras").exists(), name
    for label, (_, _, mode, augment_on) in README_RUNS.get(module, {}).items():
        assert (jax_runs[label]["mode_used"], jax_runs[label]["augment_on"]) == (mode, augment_on)
        assert math.isfinite(jax_runs[label]["final"]["loss"]), label


@pytest.mark.slow
def test_on_jax_a_recipe_learns_eagerly_and_jitted(jax_runs):
    """Learnable synthetic data (`LEARNABLE`), as on TensorFlow: well above
    the 10% of chance in both of JAX's modes."""
    for mode in ("eager", "xla"):
        metrics = jax_runs[f"learns {mode}"]
        assert metrics["mode_used"] == mode
        assert metrics["test"]["accuracy"] > 0.5, (mode, metrics["test"])


@pytest.mark.slow
def test_on_jax_augmentation_runs_in_the_jitted_step_and_its_seeds_advance(jax_runs):
    """Keras core's layers and PadCrop in JAX's step: their seed states are
    the model's variables, read from the step's state and written back, so
    that each step draws new random numbers. Were they not carried, every
    step would augment as the first did."""
    found = jax_runs["augmented step"]
    assert found["mode"] is True  # one jitted step, augmentation included
    assert len(found["before"]) == 3  # pad_crop's, flip's and cutmix's seed states
    assert all(a != b for a, b in zip(found["before"], found["after"]))


@pytest.mark.slow
def test_densenet_augments_in_the_jax_step_without_naming_an_engine(jax_runs):
    """`densenet_cifar10 execution.backend=jax data.augment_on=device`, which
    was refused while the DenseNet configs named keras-cv: data.augment_engine
    left at auto takes Keras core's layers on JAX. (Here, not in
    tests/test_augment_engine.py: only this file's tests ask for the shared
    JAX process, so that no test of another file, on the other pytest-xdist
    worker, starts it while this file's tests wait for it.)"""
    metrics = jax_runs["densenet_cifar10 on device"]
    assert (metrics["backend"], metrics["augment_on"], metrics["augment_engine"]) == (
        "jax", "device", "keras")


def test_pad_crop_in_keras_ops_shifts_each_image_by_whole_pixels():
    """PadCrop, the keras.ops form of pad_crop that a JAX step runs (here on
    TensorFlow's backend, whose tensors are not what tf.data hands it)."""
    images = np.random.default_rng(0).random((32, 12, 12, 3)).astype("float32")
    cropped = np.asarray(raugment.PadCrop(4, seed=1)(images))
    padded = np.pad(images, [(0, 0), (4, 4), (4, 4), (0, 0)])
    shifts = set()
    for index in range(32):
        matches = [(dy, dx) for dy in range(9) for dx in range(9)
                   if np.array_equal(cropped[index], padded[index, dy:dy + 12, dx:dx + 12])]
        assert matches, f"image {index} is not an exact shifted crop"
        shifts.add(matches[0])
    assert len(shifts) > 5  # one offset per image, not one per batch


@pytest.mark.slow
def test_a_run_resumed_on_the_other_backend_is_refused_in_one_line(tiny_config, tmp_path):
    """The backup loads on either backend, but their random draws differ
    (dropout: docs/runs.md measured it), so the resumed run would not train
    as the uninterrupted one: refused, before anything changes."""
    run_dir = tmp_path / "run"
    harness.train(tiny_config("mnist_mlp", "train.steps_per_epoch=4"))
    (run_dir / "metrics.json").unlink()
    before = {path: path.read_bytes() for path in run_dir.rglob("*")
              if path.is_file() and path.name != ".lock"}
    result = subprocess.run(
        [sys.executable, "-m", "keras_course_recipes", "run", "mnist_mlp",
         *tiny("mnist_mlp", tmp_path, "train.steps_per_epoch=4", f"run.dir={run_dir}")],
        cwd=ROOT, env=JAX_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "its config differs in execution.backend" in result.stderr
    assert "Traceback" not in result.stderr
    assert {path: path.read_bytes() for path in run_dir.rglob("*")
            if path.is_file() and path.name != ".lock"} == before


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("name, override, feature", [
    ("graph_lessons", None, "the tf.function lessons"),
    ("revnet_cifar100", None, "RevNet's tf.custom_gradient"),
    ("mnist_mlp", "execution.strategy=mirrored", "tf.distribute"),
    ("mnist_mlp", "callbacks.graph=true", "the TensorBoard graph writer"),
    ("mnist_mlp", "callbacks.profile=2,3", "TensorFlow's profiler"),
    ("mnist_mlp", "callbacks.diagnostics=true", "tf.GradientTape"),
    ("mnist_mlp", "run.export=true", "a TensorFlow SavedModel"),
])
def test_what_is_tensorflow_s_refuses_jax_and_torch_naming_the_feature(backend, name, override,
                                                                       feature):
    overrides = [f"execution.backend={backend}", *([override] if override else [])]
    with pytest.raises(UserError, match=f"execution.backend={backend} cannot run") as error:
        recipe_config.resolve(name, overrides=overrides, announce=lambda line: None)
    assert feature in str(error.value)


@pytest.mark.parametrize("backend, compiler", [("jax", "jax.jit"), ("torch", "torch.compile")])
def test_graph_mode_a_tf_function_is_refused_on_jax_and_torch(backend, compiler):
    with pytest.raises(UserError) as error:
        recipe_config.resolve("mnist_mlp", overrides=[f"execution.backend={backend}",
                                                "execution.mode=graph"], announce=lambda line: None)
    assert str(error.value) == (f"execution.mode=graph is a tf.function, TensorFlow's; on {backend}, "
                                f"use execution.mode=xla (jit_compile: {compiler}) or eager.")


@pytest.mark.parametrize("command, reason", [
    ("graph", "a tf.function's graph"), ("profile", "TensorFlow's profiler"),
    ("memory", "RevNet's tf.custom_gradient"), ("multiworker", "MultiWorkerMirroredStrategy"),
    ("scaling", "MirroredStrategy"), ("augment-benchmark", "TensorFlow's training step"),
    ("compare", "modes=eager,graph,xla,jax_eager,jax_jit"),
])
def test_tensorflow_s_tools_refuse_jax_in_one_line(command, reason):
    with pytest.raises(UserError, match=f"{command} does not take execution.backend=jax") as error:
        main([command, "mnist_mlp", "execution.backend=jax"])
    assert reason in str(error.value)


def test_the_default_mode_is_the_backends_compiled_step():
    def mode(*overrides):
        return recipe_config.resolve("mnist_mlp", overrides=overrides,
                               announce=lambda line: None)["execution"]["mode"]

    assert mode() == "graph"
    assert mode("execution.backend=jax") == "xla"
    assert mode("execution.backend=jax", "execution.mode=eager") == "eager"


def test_a_backend_keras_did_not_start_on_is_refused(tiny_config):
    """This process's Keras runs on TensorFlow: a JAX run here cannot be."""
    with pytest.raises(UserError, match="Keras has started on tensorflow in this process"):
        harness.prepare(tiny_config("mnist_mlp", "execution.backend=jax"))


def test_a_backend_that_is_not_installed_is_one_line(tiny_config, monkeypatch):
    """Without JAX, Keras' own import would end in a traceback."""
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "jax" else found(name, *args))
    with pytest.raises(UserError, match="execution.backend=jax needs jax, which is not installed"):
        process.request_backend(tiny_config("mnist_mlp", "execution.backend=jax"))


def python_without_tensorflow(tmp_path):
    """A Python with JAX and requirements-no-tf.txt, and what they require,
    but nothing else, as on the lent GPU machine: a venv whose site-packages
    links to those packages of this environment, and to the kit's editable
    install (its finder maps recipes/, models/ and callbacks/ into the package)."""
    venv.create(tmp_path / "venv", with_pip=False)
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    wanted, todo = set(), [line.split("#")[0].strip() for name in (
        "requirements-no-tf.txt", "requirements-jax.txt")
        for line in (ROOT / name).read_text().splitlines() if line.split("#")[0].strip()]
    todo.append("keras-course-recipes")
    while todo:
        requirement = Requirement(todo.pop())
        name = canonicalize_name(requirement.name)
        if name in wanted or (requirement.marker and
                              not requirement.marker.evaluate({"extra": ""})):
            continue  # seen, or an extra's or another platform's
        wanted.add(name)
        todo += importlib.metadata.requires(name) or []
    assert "tensorflow" not in wanted and "keras" in wanted
    # This environment's own record of each (the checkout's *.egg-info, on sys.path here, is not).
    purelib = sysconfig.get_paths()["purelib"]
    for name in wanted:
        distribution = next(importlib.metadata.distributions(name=name, path=[purelib]))
        for top in {file.parts[0] for file in distribution.files} - {"..", "__pycache__"}:
            if not (site / top).exists():
                (site / top).symlink_to(distribution.locate_file(top))
    return tmp_path / "venv" / "bin" / "python"


# Keras 3.15.1's Normalization.adapt imports TensorFlow for any input but an
# array (recipes/rdata.py, `images`): when this stops failing, adapt the
# ArrayBatches themselves and drop `rdata.images`' array.
ADAPT_WITHOUT_TENSORFLOW = """
import keras, numpy as np
from keras_course_recipes.data import ArrayBatches
batches = ArrayBatches(np.zeros((8, 4, 4, 3), np.uint8), np.zeros(8, np.int64), 4)
try:
    keras.layers.Normalization().adapt(batches)
except ImportError as error:
    print("adapt needs TensorFlow:", error)
"""


@pytest.mark.slow
def test_without_tensorflow_a_recipe_decodes_a_folder_and_trains_on_jax(tmp_path, capsys):
    """Where TensorFlow is not installed: a folder of PNGs and JPEGs is decoded
    by PIL into the cache that TensorFlow reads, holding what TensorFlow
    decodes; a DenseNet trains from it through ArrayBatches, augmented in
    JAX's step, and adapts its normalization; a run resumes; a sweep over seeds runs; what needs
    TensorFlow says so in one line."""
    python = python_without_tensorflow(tmp_path)
    write_folder(tmp_path / "images", classes=("a", "b", "c"), per_class=12,
                 splits=("train",), size=(32, 32))
    rng = np.random.default_rng(1)
    for name in ("a", "b", "c"):  # a JPEG to resize down and one at size in each class
        for index, size in ((0, (40, 50)), (1, (32, 32))):
            (tmp_path / "images" / "train" / name / f"{index}.png").unlink()
            keras.utils.save_img(tmp_path / "images" / "train" / name / f"{index}.jpg",
                                 rng.integers(0, 256, size=(*size, 3), dtype=np.uint8))

    def run(*args):
        return subprocess.run([str(python), "-m", "keras_course_recipes", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    folder = ["data.source=folder", f"data.path={tmp_path / 'images'}"]
    # The device command of docs/backends.md, in mixed_bfloat16 as the YAML says.
    densenet = run("run", "densenet_cifar10_cpu", *tiny("densenet_cifar10_cpu", tmp_path),
                   *folder, "data.augment_on=device", "data.augment_engine=keras")
    assert densenet.returncode == 0, densenet.stderr[-3000:]
    assert "decoding the 36 images in" in densenet.stdout
    assert "with PIL" in densenet.stdout
    assert "note: no TensorBoard logs" in densenet.stdout
    # Read here, with TensorFlow: PIL's cache holds what TensorFlow decodes.
    train = tmp_path / "images" / "train"
    cached, _, _ = rfolder.folder_arrays(train, (32, 32, 3))
    assert "(decoded by PIL)" in capsys.readouterr().out
    np.testing.assert_array_equal(
        cached, rfolder._decode_with_tensorflow(sorted(train.glob("*/*")), (32, 32, 3)))
    metrics = json.loads((tmp_path / "densenet_cifar10_cpu" / "metrics.json").read_text())
    assert (metrics["backend"], metrics["mode_used"], metrics["augment_on"]) == (
        "jax", "xla", "device")
    assert metrics["versions"]["tensorflow"] is None
    # Evaluated on the folder's 4 held-out images (no test/): a whole number of them right.
    assert metrics["evaluated_on"] == "validation"
    assert metrics["test"]["accuracy"] * 4 == pytest.approx(round(metrics["test"]["accuracy"] * 4))

    for epochs in (1, 2):  # the second process resumes the first's run
        mlp = run("run", "mnist_mlp", *tiny("mnist_mlp", tmp_path), f"train.epochs={epochs}")
        assert mlp.returncode == 0, mlp.stderr[-3000:]
    assert json.loads((tmp_path / "mnist_mlp" / "metrics.json").read_text())[
        "epochs_completed"] == 2

    # A screen over seeds, as a GPU machine with JAX alone runs one.
    sweep = run("sweep", "mnist_mlp", "--grid", "execution.seed=[0,1]",
                "--dir", str(tmp_path / "sweep"), *tiny("mnist_mlp", tmp_path)[:-1])
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert "over the seeds:" in sweep.stdout and (tmp_path / "sweep" / "seeds.csv").exists()

    refused = run("compare", "mnist_mlp", "execution.backend=jax")
    assert refused.returncode == 2 and "compare needs TensorFlow" in refused.stderr

    adapt = subprocess.run([str(python), "-c", ADAPT_WITHOUT_TENSORFLOW], cwd=ROOT,
                           env=JAX_ENV, capture_output=True, text=True, timeout=300)
    assert "adapt needs TensorFlow" in adapt.stdout, adapt.stderr[-3000:]


def test_array_batches_shuffle_each_pass_and_keep_every_image_once():
    images = np.arange(10, dtype=np.uint8).reshape(10, 1, 1, 1)
    labels = np.arange(10) % 3
    train = ArrayBatches(images, labels, 4, num_classes=3, shuffle_seed=0)
    assert train.num_batches is None  # endless, as tf.data's repeat()
    seen = [np.round(train[index][0] * 255).astype(int).ravel() for index in range(4)]
    # Two full batches per pass, the remainder dropped; a new order each pass.
    assert all(len(batch) == 4 for batch in seen)
    assert len(set(np.concatenate(seen[:2]))) == 8
    assert not np.array_equal(np.concatenate(seen[:2]), np.concatenate(seen[2:]))
    again = ArrayBatches(images, labels, 4, num_classes=3, shuffle_seed=0)
    assert np.array_equal(again[3][0], train[3][0])  # seeded
    batch_images, batch_labels = train[0]
    assert batch_images.dtype == np.float32 and batch_labels.shape == (4, 3)
    assert np.array_equal(batch_labels.argmax(1), (np.round(batch_images * 255)
                                                   .astype(int).ravel()) % 3)
    test = ArrayBatches(images, labels, 4)
    assert test.num_batches == 3
    assert np.array_equal(np.concatenate([test[i][1] for i in range(3)]), labels)


def test_auto_places_augmentation_in_the_step_without_tensorflow(monkeypatch):
    assert raugment.placement("auto", "keras") == "host"  # a CPU with TensorFlow
    monkeypatch.setattr(rdata, "HAS_TENSORFLOW", False)
    assert raugment.placement("auto", "keras") == "device"


@pytest.mark.parametrize("overrides, message", [
    (["data.augment_engine=keras", "data.augment_on=device"],
     "data.source=tfds reads tensorflow-datasets, which needs TensorFlow"),
    (["data.source=synthetic", "data.augment_engine=keras", "data.augment_on=host"],
     "data.augment_on=host augments in tf.data"),
    (["data.source=synthetic", "data.augment_engine=keras_cv"],
     "data.augment_engine=keras_cv needs TensorFlow"),
])
def test_without_tensorflow_what_needs_it_is_one_line(overrides, message, monkeypatch):
    config = recipe_config.resolve("cifar10_cnn", overrides=overrides, announce=lambda line: None)
    monkeypatch.setattr(rdata, "HAS_TENSORFLOW", False)
    with pytest.raises(UserError, match=message):
        rdata.load(config["data"], augmentation=raugment.from_config(config["data"]))
