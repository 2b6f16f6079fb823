"""`python -m keras_course_recipes preview NAME`: training images before and after `data.augment`.

Writes a PNG grid: the first training images as the model would see them
without augmentation (top row), and the same images through the recipe's
augmentation (bottom row), with their labels; soft labels from MixUp and
CutMix show their two largest classes.
"""

from pathlib import Path

import keras_course_recipes as kit
from keras_course_recipes import RUNS_DIR, recipe_config, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, plots


def preview(name, config_files=(), overrides=(), count=8):
    """Writes the grid for recipe `name`; returns the PNG's path."""
    config = recipe_config.resolve(name, config_files, overrides)
    if not config["data"].get("augment"):
        raise UserError(f"{name} has no data.augment to preview; add some, e.g. "
                        "data.augment=[pad_crop,flip,cutmix].")
    if config["run"]["dir"] is None:
        config["run"]["dir"] = str(rundir.timestamped(RUNS_DIR / "preview" / name))
    # The recipe as it trains: its labels (one-hot or not) and augmentation.
    data = kit.load(name).build(config).data
    images, labels = next(iter(data.train_plain))
    images, labels = images[:count], labels[:count]
    augmented, mixed = data.augment(images, labels)

    path = Path(config["run"]["dir"]).expanduser() / "augmentation.png"
    entries = ", ".join(map(str, config["data"]["augment"]))
    plots.image_grid([(images, labels), (augmented, mixed)], ["original", "augmented"],
                      f"{name}: {entries} ({data.augment.engine})", path)
    print(f"preview: {path}")
    return path


COMMANDS = (
    Command("preview", "write a PNG of training images before and after data.augment", preview,
            draws=True),
)
