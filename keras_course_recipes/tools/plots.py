"""PNG plots of results: matplotlib, imported only when a plot is drawn."""

from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no screen
    import matplotlib.pyplot as plt

    return plt


def modes(rows, title, path):
    """Bar chart: training images/s per mode, labelled with the speedup over
    its backend's eager mode."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 3.5))
    bars = axis.bar([row["mode"] for row in rows], [row["images_per_s"] for row in rows])
    for bar, row in zip(bars, rows):
        if row["speedup_vs_eager"] is not None:
            axis.annotate(f"{row['speedup_vs_eager']:.2f}x", (bar.get_x() + bar.get_width() / 2,
                          bar.get_height()), ha="center", va="bottom", fontsize=8)
    axis.set_ylabel("training images/s")
    axis.set_title(title, fontsize=9)
    _save(figure, path)


def sizes(rows, title, path):
    """Speedup over eager against the parameter count, one line per mode."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for mode in dict.fromkeys(row["mode"] for row in rows):
        points = sorted((row["params"], row["speedup_vs_eager"]) for row in rows
                        if row["mode"] == mode and row["speedup_vs_eager"] is not None)
        if points:
            axis.plot(*zip(*points), marker="o", label=mode)
    axis.set_xscale("log")
    counts = sorted({row["params"] for row in rows})
    axis.set_xticks(counts, [f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" for n in counts])
    axis.xaxis.set_minor_locator(plt.NullLocator())
    axis.axhline(1.0, color="gray", linewidth=0.8)
    axis.set_xlabel("parameters")
    axis.set_ylabel("speedup over its backend's eager (step time)")
    axis.set_title(title, fontsize=9)
    if axis.get_lines()[:-1]:  # a line besides the 1.0 reference
        axis.legend(fontsize=8)
    else:
        axis.text(0.5, 0.5, "no speedup to draw: add eager to modes=", ha="center",
                  transform=axis.transAxes)
    _save(figure, path)


def accuracy_vs_time(lines, path):
    """Validation accuracy against cumulative training minutes, one line per
    `(label, minutes, accuracy)`."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for label, minutes, accuracy in lines:
        axis.plot(minutes, accuracy, marker="o", markersize=3, label=label)
    axis.set_xlabel("training time, minutes (epochs and their validation)")
    axis.set_ylabel("validation accuracy")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def memory_vs_depth(rows, title, path):
    """Peak memory of a training step against depth, one line per backprop."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for backprop in dict.fromkeys(row["backprop"] for row in rows):
        points = sorted((row["depth"], row["peak_step_mb"]) for row in rows
                        if row["backprop"] == backprop)
        axis.plot(*zip(*points), marker="o", label=backprop)
    axis.set_xlabel("depth (layers)")
    axis.set_ylabel("peak memory of a training step, MiB")
    axis.set_ylim(bottom=0)
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def image_grid(rows, row_names, title, path):
    """Rows of images with their labels; a soft label shows its two largest classes."""
    plt = _pyplot()
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
    _save(figure, path)


def _label_text(label):
    label = np.asarray(label)
    if label.ndim == 0:
        return str(int(label))
    top = np.argsort(label)[::-1][:2]
    return " ".join(f"{k}:{label[k]:.2f}" for k in top if label[k] > 0.005)


def _save(figure, path):
    # A tool's output folder (curves' --out, preview's fresh run directory) may not exist yet.
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    figure.clf()
    _pyplot().close(figure)
