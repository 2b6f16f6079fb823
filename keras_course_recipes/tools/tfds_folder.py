"""`python -m keras_course_recipes tfds-to-folder DATASET DIR`: tensorflow-datasets' train and
test splits of DATASET written once as lossless PNGs, `DIR/train/<class>/*.png`
and `DIR/test/<class>/*.png`, the folder `data.source=folder data.path=DIR`
reads: run it once where a network is, then train anywhere on the folder
(with `test/` there and `data.validation_split=0`, a run measures the test
split). Each file is `<index>_<class>.png`, its index in tfds' order.

Each split is written into a `.partial` folder and renamed when whole, so an
interrupted export starts that split again and keeps a finished one.
"""

import shutil
from pathlib import Path

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command

PROGRESS_EVERY = 10_000


def export(dataset, folder, data_dir=None):
    """Writes `dataset`'s train and test splits below `folder`; returns {split: images}."""
    from keras_course_recipes import data

    if dataset not in data.DATASETS:
        raise UserError(f"Unknown dataset '{dataset}'; known: {', '.join(data.DATASETS)}.")
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file: give a folder to write {dataset}'s images into.")
    todo = [split for split in ("train", "test") if not (folder / split).is_dir()]
    if not todo:
        raise UserError(f"{folder} holds train/ and test/ already: train on it with "
                        f"data.source=folder data.path={folder}, or give another folder.")
    # Refused in one line where tensorflow-datasets is missing or cannot download.
    # Nothing trains here: the advice is this command's, not a run's data.source= and data.dir=.
    offline = (f"Run this command on a connected machine and copy {folder} here, or copy a "
               "connected machine's ~/tensorflow_datasets folder here and pass --data-dir DIR.")
    train, _, test = data._tfds_splits({"name": dataset, "dir": data_dir, "validation_split": 0},
                                       offline)
    import tensorflow_datasets as tfds

    names = tfds.builder(dataset, data_dir=data_dir).info.features["label"].names
    # A class's folder is its name; "/" ("T-shirt/top") cannot be in a folder's name.
    classes = [name.replace("/", "_") for name in names]
    if sorted(classes) != classes:
        # data.source=folder numbers classes in their folders' sorted order.
        classes = [f"{index:0{len(str(len(names) - 1))}d}_{name}" for index, name in enumerate(classes)]
    written = {}
    for split, images in (("train", train), ("test", test)):
        if split in todo:
            written[split] = _write_split(images, folder / split, classes, f"{dataset} {split}")
        else:
            print(f"{folder / split} is there already: kept", flush=True)
    print(f"done: train with data.source=folder data.path={folder} data.name={dataset} "
          "(data.validation_split=0 to measure on test/)", flush=True)
    return written


def _write_split(examples, target, classes, what):
    """Every (image, label) of `examples` as a PNG below `target/<class>/`;
    returns how many."""
    from PIL import Image

    partial = target.with_name(f".{target.name}.partial")
    if partial.exists():
        print(f"{partial}: left by an interrupted export, started again", flush=True)
        shutil.rmtree(partial)
    try:
        count, made = 0, set()
        for count, (image, label) in enumerate(examples.as_numpy_iterator(), 1):
            pixels = image[..., 0] if image.shape[-1] == 1 else image  # grey: one channel
            name = classes[int(label)]
            if name not in made:
                (partial / name).mkdir(parents=True, exist_ok=True)
                made.add(name)
            Image.fromarray(pixels).save(partial / name / f"{count - 1}_{name}.png")
            if count % PROGRESS_EVERY == 0:
                print(f"  {what}: {count:,} images", flush=True)
        partial.rename(target)
    except OSError as error:
        raise UserError(f"Cannot write {what}'s images into {target.parent}: {error.strerror} "
                        f"({error.filename or partial}). Give a folder you can write to, with "
                        "room for them.") from None
    print(f"{what}: {count:,} images in {target}", flush=True)
    return count


def _arguments(parser):
    parser.add_argument("dataset", help="cifar10, cifar100, mnist or fashion_mnist")
    parser.add_argument("folder", help="where to write train/ and test/")
    parser.add_argument("--data-dir", metavar="DIR", default=None,
                        help="tensorflow-datasets' data_dir (default: ~/tensorflow_datasets)")


COMMANDS = (
    Command("tfds-to-folder", "write a tensorflow-datasets dataset's train and test splits as "
            "lossless PNGs, DIR/{train,test}/<class>/*.png, for data.source=folder",
            lambda dataset, folder, data_dir: export(dataset, folder, data_dir),
            arguments=_arguments, on_recipe=False),
)
