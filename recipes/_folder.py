"""The image-folder source: `data.path/train/<class>/*.png|jpg` (and
`test/<class>/*`), decoded once into uint8 arrays and cached beside the
folder, so that each run, and each run of a sweep, does not decode every
file again.

TensorFlow decodes where it is installed; without it, PIL does, through
Keras' `load_img`. The two give the same arrays (tests/test_data_cache.py
and tests/test_jax_backend.py compare them), so a cache written by either is
read by both; it records which wrote it. They differ only where a colour
file is read into a one-channel recipe: each turns colour into grey its own
way (docs/backends.md).
"""

import hashlib
import os
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np

from recipes import UserError, _environment
from recipes._data import held_out_count

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
# Bump when the cached arrays' layout or their decoding changes (3: JPEG's
# accurate IDCT, as PIL's, and the decoder's name).
CACHE_VERSION = 3


def splits(data_config, input_shape):
    """(train, validation, test, number of classes): (uint8 images, int
    labels) arrays of `data.path/train/<class>/*`, and of `test/<class>/*` if
    there is one (else the test split is None), resized to `input_shape`; the
    validation images are a seeded random `data.validation_split` of train."""
    if data_config["path"] is None:
        raise UserError("data.source=folder needs data.path=DIR, a folder "
                        "with train/<class>/*.png or *.jpg (and optionally test/<class>/).")
    root = Path(data_config["path"]).expanduser()
    if data_config["validation_split"] == 0 and not (root / "test").is_dir():
        raise UserError(f"data.validation_split=0 validates on the test split, and {root} "
                        "has no test/<class>/ folder: hold out part of train/ instead "
                        "(data.validation_split=0.1).")
    images, labels, classes = arrays(root / "train", input_shape)
    order = np.random.default_rng(0).permutation(len(labels))
    split = data_config["validation_split"]
    held_out = held_out_count(len(labels), split, f"the {len(labels):,} images in "
                              f"{root / 'train'}") if split else 0
    kept, validation = order[held_out:], order[:held_out]
    found = [(images[part], labels[part]) for part in (kept, validation)]
    if (root / "test").is_dir():
        test_images, test_labels, test_classes = arrays(root / "test", input_shape)
        if test_classes != classes:
            raise UserError(f"{root}/test has classes {test_classes} but "
                            f"{root}/train has {classes}; they must match.")
        found.append((test_images, test_labels))
    else:
        print(f"{root} has no test/ folder: the run evaluates on its "
              f"{held_out:,} validation images.", flush=True)
        found.append(None)
    return (*found, len(classes))


def arrays(folder, input_shape):
    """A folder of `<class>/*` images as uint8 arrays of `input_shape`, their
    labels (class folders in sorted order) and the class names.

    Decoding thousands of small files costs far more than training reads
    them, so the arrays are cached in `<folder>/../.cache/`. The cache holds
    the folder's fingerprint, a SHA-256 of every image's path below `folder`
    (so its class), size and modification time, and is decoded again when
    any of these changes: a file moved to another class is a new dataset.
    """
    files, classes = _listing(folder)
    fingerprint = _fingerprint(folder, files)
    height, width, channels = input_shape
    cache = folder.parent / ".cache" / f"{folder.name}-{height}x{width}x{channels}.npz"
    started = time.perf_counter()
    cached = _read_cache(cache, fingerprint)
    if cached is not None:
        images, labels, classes, decoder = cached
        print(f"loaded the {len(files):,} images of {folder} from {cache} (decoded by "
              f"{decoder}) in {time.perf_counter() - started:.1f} s", flush=True)
        return images, labels, classes

    labels = np.array([classes.index(path.parent.name) for path in files], dtype=np.int64)
    decoder = "TensorFlow" if _environment.has_tensorflow() else "PIL"
    print(f"decoding the {len(files):,} images in {folder} with {decoder} (once: they are "
          "cached)...", flush=True)
    decode = _decode_with_tensorflow if decoder == "TensorFlow" else _decode_with_pil
    images = decode(files, input_shape)
    seconds = time.perf_counter() - started
    try:
        _write_atomically(cache, images=images, labels=labels, classes=np.array(classes),
                          fingerprint=fingerprint, decoder=np.array(decoder))
        where = f"cached in {cache}"
    except OSError as error:
        where = f"not cached ({error}): they will be decoded again next time"
    print(f"decoded {len(files):,} images in {seconds:.1f} s "
          f"({len(files) / seconds:,.0f} images/s); {where}", flush=True)
    return images, labels, classes


def _listing(folder):
    """The image files below `folder/<class>/`, sorted, and the class names;
    refused in one message when there is nothing a classifier can learn."""
    files = sorted(p for p in folder.glob("*/*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UserError(f"{folder} is missing or holds no <class>/*.png or *.jpg images; "
                        "data.source=folder expects data.path/train/<class>/.")
    classes = sorted({path.parent.name for path in files})
    empty = sorted(d.name for d in folder.iterdir() if d.is_dir() and d.name not in classes)
    if empty:
        raise UserError(f"{folder} has class folders without images: {', '.join(empty)}. "
                        "Add images to them, or remove them.")
    if len(classes) < 2:
        raise UserError(f"{folder} holds one class ({classes[0]}); a classifier needs at "
                        "least two <class>/ folders of images.")
    return files, classes


def _fingerprint(folder, files):
    """A SHA-256 of the cache's version and every file's path, size and
    modification time, as a numpy string to store in the cache."""
    listing = hashlib.sha256(str(CACHE_VERSION).encode())
    for path in files:
        stat = path.stat()
        listing.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return np.array(listing.hexdigest())


def _read_cache(cache, fingerprint):
    """The cached (images, labels, classes, decoder) if `cache` holds them
    for `fingerprint`; None when it is missing, stale or damaged (said so)."""
    try:
        with np.load(cache) as cached:
            if np.array_equal(cached["fingerprint"], fingerprint):
                return (cached["images"], cached["labels"], list(cached["classes"]),
                        str(cached["decoder"]))
    except FileNotFoundError:
        pass  # no cache yet: decode
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        # A kill or a full disk while copying it leaves a truncated file.
        print(f"{cache} is damaged ({type(error).__name__}: {error}); decoding the images "
              "again.", flush=True)
    return None


def _decode_with_tensorflow(files, input_shape):
    """The images of `files` as one uint8 array of `input_shape` each,
    decoded by TensorFlow and resized bilinearly."""
    import tensorflow as tf

    height, width, channels = input_shape

    def decode(path):
        contents = tf.io.read_file(path)
        # JPEG with the accurate integer IDCT, PIL's, so that both write one
        # cache: TensorFlow's default, the fast IDCT, gives other pixels.
        image = tf.cond(
            tf.io.is_jpeg(contents),
            lambda: tf.io.decode_jpeg(contents, channels=channels,
                                      dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(contents, channels=channels, expand_animations=False))
        image = tf.image.resize(image, (height, width))  # bilinear; the same size is a no-op
        return tf.cast(tf.round(image), tf.uint8)

    paths = tf.data.Dataset.from_tensor_slices([str(path) for path in files])
    try:
        return np.concatenate(list(paths.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
                                   .batch(1024).as_numpy_iterator()))
    except tf.errors.InvalidArgumentError:
        # TensorFlow's error does not name the file: find it, one at a time.
        for path in files:
            try:
                decode(str(path))
            except tf.errors.InvalidArgumentError:
                raise UserError(f"{path} is not an image TensorFlow can decode (PNG, JPEG, "
                                "GIF or BMP): replace or remove it.") from None
        raise


def _decode_with_pil(files, input_shape):
    """The images of `files` as one uint8 array of `input_shape` each,
    decoded by PIL through Keras, without TensorFlow, into the arrays that
    `_decode_with_tensorflow` gives: resized by `keras.ops.image.resize` as
    TensorFlow resizes (bilinear, half-pixel centres, no antialiasing;
    `load_img`'s own resize is PIL's, which antialiases), all the images of
    one size in one call."""
    import keras

    height, width, channels = input_shape
    color_mode = {1: "grayscale", 3: "rgb", 4: "rgba"}[channels]
    images = np.empty((len(files), height, width, channels), np.uint8)
    by_size = {}  # (height, width): [(index, image)] of the images to resize
    for index, path in enumerate(files):
        try:
            image = keras.utils.img_to_array(keras.utils.load_img(path, color_mode=color_mode),
                                             dtype="uint8")
        except OSError:  # PIL's UnidentifiedImageError, or a truncated file
            raise UserError(f"{path} is not an image PIL can decode (PNG or JPEG): replace "
                            "or remove it.") from None
        if image.shape[:2] == (height, width):
            images[index] = image
        else:
            by_size.setdefault(image.shape[:2], []).append((index, image))
    for group in by_size.values():
        indices, originals = zip(*group)
        resized = keras.ops.image.resize(np.stack(originals).astype(np.float32),
                                         (height, width), interpolation="bilinear",
                                         antialias=False)
        images[list(indices)] = np.round(keras.ops.convert_to_numpy(resized))
    return images


def _write_atomically(cache, **named_arrays):
    """Saves `named_arrays` as the .npz file `cache`, through a temporary file of
    this process's own in the same folder, renamed when complete: a reader
    never sees a partial cache, and two processes decoding one folder at
    once never write into the same file."""
    cache.parent.mkdir(exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=cache.parent, prefix=f"{cache.stem}.",
                                       suffix=".partial.npz")
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **named_arrays)
        os.chmod(partial, 0o644)  # mkstemp's file is private; a cache is not
        os.replace(partial, cache)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
