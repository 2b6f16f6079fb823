"""`python -m keras_course_recipes data-benchmark NAME`: the input pipeline alone, without training.

Builds the recipe (its data source, batch size and host-side augmentation,
as it trains) and reports how long building took, data loading included (an
image folder prints its own decoding or cache time), then the training
images per second the pipeline delivers with no model consuming them. That
rate has to stay well above the training step's, or the step waits for
input. Keras has no input-pipeline benchmark, hence this module.
"""

import time

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, rundir
from keras_course_recipes.tools import Command, count

DEFAULT_STEPS = 200


def benchmark(name, steps=DEFAULT_STEPS, config_files=(), overrides=(), warmup=10):
    """Times recipe `name`'s training pipeline over `steps` batches; returns the numbers."""
    config = recipe_config.resolve(name, config_files, [
        *overrides, f"run.dir={rundir.timestamped(RUNS_DIR / 'data-benchmark' / name)}"])
    started = time.perf_counter()
    experiment = kit.load(name).build(config)
    build_s = time.perf_counter() - started

    data = experiment.data
    batches = iter(data.train)
    for _ in range(warmup):  # fills the shuffle buffer and starts the prefetching
        next(batches)
    started = time.perf_counter()
    for _ in range(steps):
        next(batches)
    seconds = time.perf_counter() - started
    result = {"recipe": name, "build_s": build_s, "batch_size": data.batch_size,
              "steps": steps, "images_per_s": steps * data.batch_size / seconds,
              "augment_on": data.augment_on, "train_examples": data.train_examples}
    print(f"\n{name}: built in {build_s:.1f} s (data loading included); the training "
          f"pipeline delivers {result['images_per_s']:,.0f} images/s "
          f"({steps} batches of {data.batch_size}, augmentation: "
          f"{data.augment_on or 'none'}, no model)")
    return result


COMMANDS = (
    Command("data-benchmark", "time the input pipeline alone: loading, then training "
                              "batches/s (option steps=N)",
            benchmark, (count("steps", DEFAULT_STEPS, minimum=2),)),
)
