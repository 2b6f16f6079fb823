"""`data.source=folder`: images in `data.path/train/<class>/*` (and optionally
`test/<class>/*`) as uint8 arrays, decoded once and cached beside them.

`keras.utils.image_dataset_from_directory` reads such a tree too, but decodes
every file again in every process, and `tf.data.Dataset.cache(filename)`,
which would keep them, never notices that the folder changed: the cache
here holds the folder's fingerprint. TensorFlow decodes where it is
installed, PIL (through Keras) where it is not; both give the same arrays,
so a cache written by either is read by both.
"""

import hashlib
import importlib.util
import os
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

import keras
import numpy as np
from keras import ops

from keras_course_recipes.errors import UserError

HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
# Bump when the cached arrays' layout or their decoding changes (3: JPEG's
# accurate IDCT, as PIL's, and the decoder's name).
CACHE_VERSION = 3


def read(config, input_shape):
    """(train, test, class names): (uint8 images, int labels) arrays of
    `data.path/train/` and `data.path/test/` (None without one), resized to
    `input_shape`."""
    if config["path"] is None:
        raise UserError("data.source=folder needs data.path=DIR, a folder with "
                        "train/<class>/*.png or *.jpg (and optionally test/<class>/).")
    root = Path(config["path"]).expanduser()
    if config["validation_split"] == 0 and not (root / "test").is_dir():
        raise UserError(f"data.validation_split=0 validates on the test split, and {root} has "
                        "no test/<class>/ folder: hold out part of train/ instead "
                        "(data.validation_split=0.1).")
    images, labels, classes = folder_arrays(root / "train", input_shape)
    if not (root / "test").is_dir():
        return (images, labels), None, classes
    test_images, test_labels, test_classes = folder_arrays(root / "test", input_shape)
    if test_classes != classes:
        raise UserError(f"{root}/test has classes {test_classes} but {root}/train has "
                        f"{classes}; they must match.")
    return (images, labels), (test_images, test_labels), classes


def folder_arrays(folder, input_shape):
    """A folder of `<class>/*` images as uint8 arrays of `input_shape`, their
    labels (class folders in sorted order) and the class names. Cached in
    `<folder>/../.cache/` with a SHA-256 of every image's path (so its
    class), size and modification time: decoded again when one changes."""
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

    _refuse_16_bit(files)
    labels = np.array([classes.index(path.parent.name) for path in files], dtype=np.int64)
    decoder = "TensorFlow" if HAS_TENSORFLOW else "PIL"
    print(f"decoding the {len(files):,} images in {folder} with {decoder} (once: they are "
          "cached)...", flush=True)
    images = (_decode_with_tensorflow if HAS_TENSORFLOW else _decode_with_pil)(files, input_shape)
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


def shown(path):
    """`path` as text that prints, whatever bytes its name holds."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _listing(folder):
    """The image files below `folder/<class>/`, sorted, and the class names;
    refused in one line when a classifier could not learn from them."""
    if not folder.is_dir():
        raise UserError(f"{shown(folder)} is missing or holds no <class>/*.png or *.jpg images; "
                        "data.source=folder expects data.path/train/<class>/.")
    try:
        files = sorted(p for p in folder.glob("*/*") if p.suffix.lower() in IMAGE_SUFFIXES)
        for path in files:
            if not path.is_file():  # a folder named x.png, a dangling or looping link
                raise UserError(f"{shown(path)} is not an image file (a folder, or a link to "
                                "nothing): rename or remove it.")
        empty = sorted(d.name for d in folder.iterdir() if d.is_dir()
                       and not any(p.parent == d for p in files))
    except OSError as error:
        raise UserError(f"Cannot read {shown(error.filename or folder)}: {error.strerror}.") from None
    if not files:
        raise UserError(f"{shown(folder)} is missing or holds no <class>/*.png or *.jpg images; "
                        "data.source=folder expects data.path/train/<class>/.")
    classes = sorted({path.parent.name for path in files})
    if empty:
        raise UserError(f"{shown(folder)} has class folders without images: "
                        f"{', '.join(map(shown, empty))}. Add images to them, or remove them.")
    if len(classes) < 2:
        raise UserError(f"{shown(folder)} holds one class ({shown(classes[0])}); a classifier "
                        "needs at least two <class>/ folders of images.")
    return files, classes


def _refuse_16_bit(files):
    """Refuses 16-bit PNGs: TensorFlow scales them to 8 bits and PIL clips them."""
    for path in files:
        if path.suffix.lower() == ".png":
            with path.open("rb") as file:
                header = file.read(25)  # the signature, then IHDR: width, height, bit depth
            if len(header) == 25 and header[1:4] == b"PNG" and header[24] == 16:
                raise UserError(f"{shown(path)} is a 16-bit PNG; the recipes read 8-bit images. "
                                "Convert the folder to 8 bits first (e.g. PIL's "
                                "Image.point(lambda v: v // 256)), or remove it.")


def _fingerprint(folder, files):
    """A SHA-256 of the cache's version and every file's path, size and
    modification time, as a numpy string to store in the cache."""
    listing = hashlib.sha256(str(CACHE_VERSION).encode())
    for path in files:
        stat = path.stat()
        listing.update(os.fsencode(path.relative_to(folder))
                       + f"\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return np.array(listing.hexdigest())


def _read_cache(cache, fingerprint):
    """The cached (images, labels, classes, decoder) for `fingerprint`; None when
    missing, stale or damaged (said so: a kill or a full disk cuts a file short)."""
    try:
        with np.load(cache) as cached:
            if np.array_equal(cached["fingerprint"], fingerprint):
                return (cached["images"], cached["labels"], list(cached["classes"]),
                        str(cached["decoder"]))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        print(f"{cache} is damaged ({type(error).__name__}: {error}); decoding the images "
              "again.", flush=True)
    return None


def _decode_with_tensorflow(files, input_shape):
    """The images of `files` as one uint8 array, decoded by TensorFlow and
    resized bilinearly."""
    import tensorflow as tf

    height, width, channels = input_shape

    def decode(path):
        contents = tf.io.read_file(path)
        # JPEG with the accurate integer IDCT, PIL's, so that both write one
        # cache: TensorFlow's default, the fast IDCT, gives other pixels.
        image = tf.cond(
            tf.io.is_jpeg(contents),
            lambda: tf.io.decode_jpeg(contents, channels=channels, dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(contents, channels=channels, expand_animations=False))
        image = tf.image.resize(image, (height, width))  # bilinear; the same size is a no-op
        return tf.cast(tf.round(image), tf.uint8)

    paths = tf.data.Dataset.from_tensor_slices([os.fsencode(path) for path in files])
    # Into one array, a batch at a time: a list of batches, concatenated,
    # would hold every image twice.
    images = np.empty((len(files), height, width, channels), np.uint8)
    try:
        start = 0
        for batch in (paths.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
                      .batch(1024).as_numpy_iterator()):
            images[start:start + len(batch)] = batch
            start += len(batch)
        return images
    except tf.errors.InvalidArgumentError:
        for path in files:  # TensorFlow's error does not name the file: find it
            try:
                decode(os.fsencode(path))
            except tf.errors.InvalidArgumentError:
                raise UserError(f"{shown(path)} is not an image TensorFlow can decode (PNG, "
                                "JPEG, GIF or BMP): replace or remove it.") from None
        raise


def _decode_with_pil(files, input_shape):
    """The arrays `_decode_with_tensorflow` gives, decoded by PIL through Keras:
    resized by `keras.ops.image.resize` as TensorFlow resizes (bilinear,
    half-pixel centres, no antialiasing, where `load_img`'s own resize
    antialiases), all the images of one size in one call."""
    height, width, channels = input_shape
    color_mode = {1: "grayscale", 3: "rgb", 4: "rgba"}[channels]
    images = np.empty((len(files), height, width, channels), np.uint8)
    by_size = {}  # (height, width): [(index, image)] of the images to resize
    for index, path in enumerate(files):
        try:
            image = keras.utils.img_to_array(keras.utils.load_img(path, color_mode=color_mode),
                                             dtype="uint8")
        except OSError:  # PIL's UnidentifiedImageError, or a truncated file
            raise UserError(f"{shown(path)} is not an image PIL can decode (PNG or JPEG): "
                            "replace or remove it.") from None
        if image.shape[:2] == (height, width):
            images[index] = image
        else:
            by_size.setdefault(image.shape[:2], []).append((index, image))
    for group in by_size.values():
        indices, originals = zip(*group)
        resized = ops.image.resize(np.stack(originals).astype(np.float32), (height, width),
                                   interpolation="bilinear", antialias=False)
        images[list(indices)] = np.round(ops.convert_to_numpy(resized))
    return images


def _write_atomically(cache, **named_arrays):
    """Saves `named_arrays` as the .npz file `cache` through a temporary file of
    this process's own, renamed when whole: no reader sees a partial cache."""
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
