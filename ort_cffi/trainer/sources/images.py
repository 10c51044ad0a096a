"""Folders of images, one subfolder per class (the layout of Keras' ``image_dataset_from_directory`` and
torchvision's ``ImageFolder``), or ``train/`` and ``val/`` folders that each hold such subfolders. Each image
is read with Pillow, converted to the model's channels, resized to its input size, scaled to 0-1 (optionally
normalised per channel) and laid out as the model's input says: ``[N, C, H, W]``, ``[N, H, W, C]``,
``[N, H, W]``, or ``[N, H*W]`` for a square grey image flattened.

What was done is the ``preprocessing`` of the exported model's metadata; ``prepare_files`` applies it again
(``ort-cffi-predict``)."""
from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi import TensorInfo
from ort_cffi.trainer.data import check_splits
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.sources.common import (
    ACCEPTED,
    DataOptions,
    Loaded,
    ModelFeed,
    as_json,
    check_class_count,
    held_out_note,
    label_array,
    shape_text,
    split_indices,
    val_fraction,
)

VAL_FOLDERS = ("val", "validation", "valid", "test")  # beside train/: the validation part (test/ when no other)
MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # Pillow's mode for a channel count
PILLOW_MISSING = ("image folders are read with Pillow, which is not installed: it comes with ort_cffi's images extra "
                  '(pip install ".[images]" in ort_cffi\'s checkout), or pip install Pillow')


def pillow() -> Any:
    """Pillow's Image module, or a SetupError that names the extra that installs it."""
    try:
        return importlib.import_module("PIL.Image")
    except ImportError:
        raise SetupError(PILLOW_MISSING) from None


def image_suffixes() -> frozenset:
    """The file suffixes Pillow reads (``.png``, ``.jpg``, ...), lower case."""
    return frozenset(suffix.lower() for suffix in pillow().registered_extensions())


def layout(name: str, info: TensorInfo, options: DataOptions) -> Dict[str, Any]:
    """How images feed the input ``name``: the ``preprocessing`` record (size, channels, layout, scale, dtype,
    normalisation), from the input's shape and dtype; a SetupError saying what the input wants otherwise."""
    dims, dtype = list(info.shape), info.dtype
    wants = f"the model's input {name!r} is {dtype} {shape_text(dims)}"
    if dtype is None or dtype.kind not in "fu":
        raise SetupError(f"{wants}: images feed a floating-point input (pixels scaled to 0-1) or a uint8 one")
    if len(dims) == 4 and dims[1] in MODES and dims[3] not in MODES:
        order, channels, size = "NCHW", dims[1], dims[2:4]
    elif len(dims) == 4 and dims[3] in MODES:
        order, channels, size = "NHWC", dims[3], dims[1:3]
    elif len(dims) == 4 and dims[1] in MODES:
        order, channels, size = "NCHW", dims[1], dims[2:4]
    elif len(dims) == 3:
        order, channels, size = "NHW", 1, dims[1:3]
    elif len(dims) == 2 and dims[1] > 0 and math.isqrt(dims[1]) ** 2 == dims[1]:
        side = math.isqrt(dims[1])
        order, channels, size = "N(H*W)", 1, [side, side]
    else:
        raise SetupError(f"{wants}: images feed [N, C, H, W] or [N, H, W, C] with 1, 3 or 4 channels, [N, H, W] "
                         "(grey), or [N, H*W] (a square grey image, flattened)")
    if any(d <= 0 for d in size):
        raise SetupError(f"{wants}: its height and width are not fixed, so images cannot be resized to them; export "
                         "the model with a fixed image size")
    record: Dict[str, Any] = {"kind": "image", "input": name, "dtype": str(dtype), "layout": order,
                              "channels": channels, "mode": MODES[channels], "size": [int(size[0]), int(size[1])],
                              "resample": "bilinear", "scale": 1 / 255 if dtype.kind == "f" else 1}
    if options.normalize is not None:
        if dtype.kind != "f":
            raise SetupError(f"--normalize needs a floating-point input, but {wants}")
        mean, std = options.normalize
        for values, what in ((mean, "MEAN"), (std, "STD")):
            if len(values) not in (1, channels):
                raise SetupError(f"--normalize {what} has {len(values)} values; the model's input {name!r} has "
                                 f"{channels} channel{'s' if channels > 1 else ''}: give one value, or one per channel")
        if any(s <= 0 for s in std):
            raise SetupError("--normalize STD values must be positive")
        record["mean"] = [float(v) for v in mean] * (channels if len(mean) == 1 else 1)
        record["std"] = [float(v) for v in std] * (channels if len(std) == 1 else 1)
    return record


def read_image(path: Path, record: Dict[str, Any]) -> np.ndarray:
    """One image file in the record's mode and size: its pixels [H, W, C], before scaling and layout."""
    image_module = pillow()
    try:
        with image_module.open(path) as image:
            image = image.convert(record["mode"])
            height, width = record["size"]
            if image.size != (width, height):
                image = image.resize((width, height), image_module.Resampling.BILINEAR)
            pixels = np.asarray(image)
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's UnidentifiedImageError is an OSError
        raise SetupError(f"cannot read image {str(path)!r}: not an image Pillow reads, or a damaged one ({exc}); "
                         "replace or remove it") from None
    return pixels.reshape(pixels.shape[0], pixels.shape[1], -1)


def prepare_image(pixels: np.ndarray, record: Dict[str, Any]) -> np.ndarray:
    """One image's pixels [H, W, C] as the input takes a sample: scaled, normalised, in the record's layout and
    dtype (float32 arithmetic for floating-point inputs)."""
    dtype = np.dtype(record["dtype"])
    sample = pixels.astype(np.float32 if dtype.itemsize <= 4 else np.float64) * record["scale"]
    if "mean" in record:
        sample = (sample - np.array(record["mean"], sample.dtype)) / np.array(record["std"], sample.dtype)
    order = record["layout"]
    if order == "NCHW":
        sample = sample.transpose(2, 0, 1)
    elif order == "NHW":
        sample = sample[..., 0]
    elif order == "N(H*W)":
        sample = sample.reshape(-1)
    if dtype.kind == "u":
        sample = np.clip(np.rint(sample), 0, np.iinfo(dtype).max)
    return sample.astype(dtype)


def prepare_files(files: Sequence[Path], record: Dict[str, Any]) -> np.ndarray:
    """The images of ``files`` as one batch for the input, read one at a time into the batch (a large folder
    needs the memory of the batch only)."""
    batch: Optional[np.ndarray] = None
    for index, file in enumerate(files):
        sample = prepare_image(read_image(file, record), record)
        if batch is None:
            batch = np.empty((len(files),) + sample.shape, dtype=sample.dtype)
        batch[index] = sample
    return batch if batch is not None else np.zeros((0,), dtype=np.dtype(record["dtype"]))


def class_folders(root: Path, where: str) -> List[Path]:
    """The class subfolders of ``root``, sorted; a SetupError saying what ``root`` holds when there are none."""
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        files = [p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")]
        held = f"{len(files)} file{'s' if len(files) != 1 else ''} and no subfolders" if files else "nothing"
        raise SetupError(f"{where} is a folder that holds {held}, not an image dataset: {ACCEPTED}")
    return folders


def list_images(root: Path, where: str) -> Tuple[List[Path], List[str]]:
    """(image files, their class names) of a folder with one subfolder per class; a SetupError for a class
    folder without images, or for fewer than two classes."""
    suffixes = image_suffixes()
    files: List[Path] = []
    names: List[str] = []
    folders = class_folders(root, where)
    for folder in folders:
        found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in suffixes
                       and not any(part.startswith(".") for part in p.relative_to(folder).parts))
        if not found:
            raise SetupError(f"class folder {str(folder)!r} holds no images: every subfolder of {str(root)!r} is a "
                             "class and needs at least one image (PNG, JPEG or another format Pillow reads); remove "
                             "the folder, or add its images")
        files += found
        names += [folder.name] * len(found)
    if len(folders) < 2:
        raise SetupError(f"{where} holds one class folder ({folders[0].name}): a classifier needs two classes or more, "
                         "one subfolder of images each")
    return files, names


def load_images(path: Path, feed: ModelFeed, options: DataOptions, seed: int) -> Loaded:
    """An image folder as the model's input and labels: its own train/ and val/ folders, or a split of it."""
    where = f"dataset {str(path)!r}"
    name, info = feed.features(where, "an image folder")
    labels_name, labels_info = feed.label_info(where, "an image folder")
    record = layout(name, info, options)
    subfolders = {p.name.lower(): p for p in path.iterdir() if p.is_dir()}
    train_root = subfolders.get("train")
    val_root = next((subfolders[n] for n in VAL_FOLDERS if n in subfolders), None)
    notes: List[str] = []
    if train_root is not None and val_root is not None:
        if options.val_split is not None:
            raise SetupError(f"{where} has its own validation folder ({val_root.name}/): --val-split applies only to "
                             "data without a validation part; leave it out")
        train_files, train_names = list_images(train_root, f"{where}'s {train_root.name}/ folder")
        val_files, val_names = list_images(val_root, f"{where}'s {val_root.name}/ folder")
        unknown = sorted(set(val_names) - set(train_names))
        if unknown:
            raise SetupError(f"{where}: {val_root.name}/ has classes that {train_root.name}/ lacks ({', '.join(unknown)}): "
                             "the model learns only the training classes")
        files, names = train_files + val_files, train_names + val_names
        train_idx, val_idx = np.arange(len(train_files)), np.arange(len(train_files), len(files))
        kind = f"image folder with {train_root.name}/ and {val_root.name}/"
    else:
        root = train_root if train_root is not None else path
        files, names = list_images(root, where)
        train_idx = val_idx = np.zeros(0, dtype=np.int64)  # split below, once the classes have ids
        kind = "image folder"
    labels, classes = label_array(names, labels_info, labels_name, where)
    if classes is None:
        raise SetupError(f"{where} is an image folder, whose labels are classes, but the model's labels input "
                         f"{labels_name!r} is {labels_info.dtype}: a classifier takes integer class ids")
    check_class_count(classes, feed, where)
    if not len(val_idx):
        train_idx, val_idx = split_indices(len(files), labels, val_fraction(options), seed, where)
        notes.append(held_out_note(options, True, seed, len(val_idx)))
    pixels = prepare_files(files, record)
    data = check_splits({split: {name: pixels[idx], labels_name: labels[idx]}
                         for split, idx in (("train", train_idx), ("val", val_idx))}, feed.inputs, where)
    height, width = record["size"]
    scaling = "0-1" + (f", normalised (mean {record['mean']}, std {record['std']})" if "mean" in record else "") \
        if record["scale"] != 1 else "0-255"
    description = (f"{kind}: {len(classes)} classes ({', '.join(classes[:8])}{', ...' if len(classes) > 8 else ''}); "
                   f"{record['mode']} {height}x{width}, {scaling}, {record['layout']}")
    return Loaded(data, description, notes, classes, {"classes": as_json(classes), "preprocessing": as_json(record)})


def image_files(paths: Sequence[Path]) -> List[Path]:
    """The image files named, folders expanded to the images they hold (sorted)."""
    suffixes = image_suffixes()
    found: List[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        else:
            found.append(path)
    return found


def predict_inputs(paths: Sequence[Path], record: Dict[str, Any]) -> Tuple[List[str], np.ndarray]:
    """(what each prediction is of, the batch) for ``ort-cffi-predict``: image files (or folders of them)."""
    files = image_files(paths)
    missing: Optional[Path] = next((f for f in files if not f.is_file()), None)
    if missing is not None:
        raise SetupError(f"image {str(missing)!r} does not exist")
    return [str(f) for f in files], prepare_files(files, record)
