"""``.npz`` datasets: one array per model input and split (``train_<input>``, ``val_<input>``), as
``numpy.savez`` writes them; a file with only ``train_`` arrays gets a validation split (``--val-split``)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List


from ort_cffi.trainer.data import check_splits, load_dataset, read_npz
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.sources.common import DataOptions, Loaded, ModelFeed, held_out_note, split_indices, val_fraction


def load_npz(path: Path, splits: Dict[str, List[str]], feed: ModelFeed, options: DataOptions, seed: int) -> Loaded:
    """The arrays of ``path``; those of a file without ``val_`` arrays split into training and validation."""
    where = f"dataset {str(path)!r}"
    stored = read_npz(path)
    has_val = any(key.startswith("val_") for key in stored)
    if has_val:
        if options.val_split is not None:
            raise SetupError(f"{where} has its own validation arrays (val_*): --val-split applies only to data "
                             "without a validation part; leave it out")
        return Loaded(load_dataset(path, splits, feed.inputs), "")
    names = sorted(set(splits["train"]) | set(splits["val"]))
    missing = [f"train_{name}" for name in names if f"train_{name}" not in stored]
    if missing:
        raise SetupError(f"{where} lacks {', '.join(missing)}: the model's inputs are {', '.join(names)}, so the arrays "
                         f"must be train_<input> (and val_<input>, or --val-split makes them); the file has "
                         f"{', '.join(stored) or 'no arrays'}")
    arrays = {name: stored[f"train_{name}"] for name in names}
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1:
        raise SetupError(f"{where}: the train arrays need the same number of samples "
                         f"({', '.join(f'train_{n}: {len(a)}' for n, a in arrays.items())})")
    labels = arrays.get(feed.labels) if feed.labels is not None else None
    per_sample = labels is not None and labels.dtype.kind in "iu" and labels.ndim == 1
    train, val = split_indices(counts.pop(), labels if per_sample else None, val_fraction(options), seed, where)
    data = check_splits({"train": {n: arrays[n][train] for n in splits["train"]},
                         "val": {n: arrays[n][val] for n in splits["val"]}}, feed.inputs, where)
    return Loaded(data, "", [held_out_note(options, per_sample, seed, len(val))])


