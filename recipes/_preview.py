"""`python -m recipes preview NAME`: training images before and after `data.augment`.

Writes a PNG grid: the first training images as the model would see them
without augmentation (top row), and the same images through the recipe's
augmentation (bottom row), with their labels; soft labels from MixUp and
CutMix show their two largest classes.
"""

import datetime
from pathlib import Path

import numpy as np

import recipes
from recipes import RUNS_DIR, UserError, _config, _data, _runner


def preview(name, config_files=(), overrides=(), count=8):
    """Writes the grid for recipe `name`; returns the PNG's path."""
    config = _config.resolve(name, config_files, overrides)
    if not config["data"]["augment"]:
        raise UserError(f"{name} has no data.augment to preview; add some, e.g. "
                        "data.augment=[pad_crop,flip,cutmix].")
    one_hot = getattr(recipes.load(name), "ONE_HOT_LABELS", False)
    _runner.prepare(config)  # the same seed draws the same preview
    data = _data.load(config["data"], seed=config["execution"]["seed"], one_hot=one_hot)
    images, labels = next(iter(data.train_plain))
    images, labels = images[:count], labels[:count]
    augmented, mixed = data.augment(images, labels)

    run_dir = config["run"]["dir"]
    if run_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = RUNS_DIR / "preview" / name / stamp
    path = Path(run_dir).expanduser() / "augmentation.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = ", ".join(map(str, config["data"]["augment"]))
    _plot([(images, labels), (augmented, mixed)], ["original", "augmented"],
          f"{name}: {entries} ({config['data']['augment_engine']})", path)
    print(f"preview: {path}")
    return path


def _label_text(label):
    label = np.asarray(label)
    if label.ndim == 0:
        return str(int(label))
    top = np.argsort(label)[::-1][:2]
    return " ".join(f"{k}:{label[k]:.2f}" for k in top if label[k] > 0.005)


def _plot(rows, row_names, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(rows[0][0])
    figure, axes = plt.subplots(len(rows), count, figsize=(1.4 * count, 1.6 * len(rows) + 0.4),
                                squeeze=False)
    for axes_row, (images, labels), row_name in zip(axes, rows, row_names):
        for index, axis in enumerate(axes_row):
            image = np.clip(np.asarray(images[index], dtype=np.float32), 0, 1)
            axis.imshow(image[..., 0] if image.shape[-1] == 1 else image,
                        cmap="gray" if image.shape[-1] == 1 else None, vmin=0, vmax=1)
            axis.set_title(_label_text(labels[index]), fontsize=7)
            axis.set_xticks([])
            axis.set_yticks([])
        axes_row[0].set_ylabel(row_name, fontsize=8)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
