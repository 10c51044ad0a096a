"""What every kind of dataset source shares: the options that shape a dataset (``DataOptions``), what the
model wants fed (``ModelFeed``, read from its inputs), what a source hands the trainer (``Loaded``), label
strings turned into class ids, and the seeded, stratified validation split."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi import TensorInfo
from ort_cffi.trainer.errors import SetupError

Arrays = Dict[str, np.ndarray]

# What --data accepts, said by every refusal of a path that is none of them.
ACCEPTED = ("--data accepts an .npz file (arrays train_<input> and val_<input>, or train_ only), a CSV or TSV file "
            "(a header row; --label-column, default the last column; --text-column for text), or a folder of images "
            "with one subfolder per class (or train/ and val/ folders that each hold such subfolders)")
DEFAULT_VAL_SPLIT = 0.2  # held out of the training data when the data has no validation part and no --val-split


@dataclass
class DataOptions:
    """The options that decide what the dataset is, besides its path; stored with the run, so that a resumed
    run loads the same split, vocabulary and standardisation. None: the default."""

    val_split: Optional[float] = None  # the fraction held out for validation where the data has no validation part
    label_column: Optional[str] = None  # CSV/TSV: the labels' column (default: the last one)
    text_column: Optional[str] = None  # CSV/TSV: a column of text, fed as token ids (makes it a text dataset)
    tokenizer: Optional[str] = None  # a Hugging Face tokenizers tokenizer.json for the text column
    normalize: Optional[List[List[float]]] = None  # images: [mean per channel, std per channel], after scaling to 0-1

    def given(self) -> Dict[str, Any]:
        """The options that were given, by name."""
        return {key: value for key, value in asdict(self).items() if value is not None}


FLAGS = {"val_split": "--val-split", "label_column": "--label-column", "text_column": "--text-column",
         "tokenizer": "--tokenizer", "normalize": "--normalize"}


@dataclass
class ModelFeed:
    """What the model wants: its data inputs (name -> dtype and shape, the batch first), the one that takes the
    labels, the number of classes its scores hold (None when unknown or not a classification), and every input
    of the eval model with the parameters (to find, say, an embedding table's size)."""

    inputs: Dict[str, TensorInfo]
    labels: Optional[str]
    classes: Optional[int]
    eval_model: Path
    all_inputs: Dict[str, TensorInfo] = field(default_factory=dict)

    def features(self, where: str, kind: str) -> Tuple[str, TensorInfo]:
        """The one input a non-.npz source feeds, besides the labels; a SetupError otherwise."""
        names = [name for name in self.inputs if name != self.labels]
        if len(names) != 1:
            listed = ", ".join(f"{n} {self.inputs[n].dtype} {shape_text(self.inputs[n].shape)}" for n in names)
            raise SetupError(f"{where} is {kind}, which feeds one input besides the labels, but the model takes "
                             f"{len(names)} ({listed or 'none'}): give such a model an .npz dataset with one array "
                             "per input (train_<input>, val_<input>)")
        return names[0], self.inputs[names[0]]

    def label_info(self, where: str, kind: str) -> Tuple[str, TensorInfo]:
        """The labels input; a SetupError when the model has none (its loss reads no labels)."""
        if self.labels is None or self.labels not in self.inputs:
            raise SetupError(f"{where} is {kind}, with labels, but the model takes no labels input (its inputs: "
                             f"{', '.join(self.inputs)}): train it with the cross-entropy or a regression loss "
                             "(--loss), or give an .npz dataset")
        return self.labels, self.inputs[self.labels]


@dataclass
class Loaded:
    """A dataset ready to train on: the arrays per split (``train``, ``val``) and input, what it is (one line, or
    "" for arrays as they were given),
    what to tell the user, and what the exported model carries (``metadata``: the ONNX ``metadata_props``,
    ``classes`` first, each value a string)."""

    splits: Dict[str, Arrays]
    description: str
    notes: List[str] = field(default_factory=list)
    classes: Optional[List[str]] = None
    metadata: Dict[str, str] = field(default_factory=dict)


def shape_text(dims: Sequence[int]) -> str:
    """A shape as the trainer prints it, symbolic dimensions as N: ``[N, 64]``."""
    return "[" + ", ".join("N" if d < 0 else str(d) for d in dims) + "]"


def sorted_classes(values: Sequence[str]) -> List[str]:
    """The class names in id order: sorted, numerically when every name is an integer (so that "10" comes after
    "2", and labels 0..K-1 keep their ids)."""
    unique = set(values)
    try:
        return sorted(unique, key=int)
    except ValueError:
        return sorted(unique)


def label_array(values: Sequence[str], info: TensorInfo, name: str, where: str) -> Tuple[np.ndarray, Optional[List[str]]]:
    """The labels as the model's labels input takes them: class ids in the order of ``sorted_classes`` for an
    integer input (and the class names), numbers for a floating-point one (a regression; no classes)."""
    dtype = info.dtype
    if dtype is None or dtype.kind not in "iuf":
        raise SetupError(f"the model's labels input {name!r} is {dtype}: {where} gives class ids or numbers")
    if dtype.kind == "f":
        shape = (-1,) + tuple(d if d > 0 else 1 for d in info.shape[1:])
        try:
            return np.array([float(v) for v in values], dtype=dtype).reshape(shape), None
        except ValueError as exc:
            names = sorted_classes(values)
            if len(names) == 2 and int(np.prod(shape[1:])) == 1:  # two names for one probability: a binary classifier
                return np.array([names.index(v) for v in values], dtype=dtype).reshape(shape), names
            raise SetupError(f"{where}: the model's labels input {name!r} is {dtype} (a regression), but a label is not "
                             f"a number ({exc})") from None
    classes = sorted_classes(values)
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index[v] for v in values], dtype=dtype), classes


def check_class_count(classes: List[str], feed: ModelFeed, where: str) -> None:
    """Refuse more classes than the model's scores hold, naming both."""
    if feed.classes is not None and feed.classes > 1 and len(classes) > feed.classes:
        shown = ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
        raise SetupError(f"{where} has {len(classes)} classes ({shown}), but the model scores {feed.classes}: export "
                         f"the model with {len(classes)} outputs, or leave classes out of the data")


def split_indices(count: int, labels: Optional[np.ndarray], fraction: float, seed: int,
                  where: str) -> Tuple[np.ndarray, np.ndarray]:
    """(train, val) indices: ``fraction`` of the samples held out, chosen by ``seed``; stratified by class when
    ``labels`` are class ids (each class with two samples or more gives at least one to validation and keeps
    one), so that validation sees every class the data has in the proportions it has them."""
    rng = np.random.default_rng(seed)
    if labels is None:
        order = rng.permutation(count)
        held = min(max(1, round(count * fraction)), count - 1)
        val = order[:held]
    else:
        chosen: List[np.ndarray] = []
        for value in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == value))
            if len(members) < 2:
                continue
            chosen.append(members[:min(max(1, round(len(members) * fraction)), len(members) - 1)])
        val = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    if count < 2 or not len(val):
        raise SetupError(f"{where} has {count} sample{'s' if count != 1 else ''}{' per class' if labels is not None else ''}"
                         ", too few to hold some out for validation: give it more samples, or a validation part")
    mask = np.zeros(count, dtype=bool)
    mask[val] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def held_out_note(options: DataOptions, stratified: bool, seed: int, n_val: int) -> str:
    """The line that says a validation split was made, and how."""
    fraction = options.val_split if options.val_split is not None else DEFAULT_VAL_SPLIT
    how = "stratified by class, " if stratified else ""
    given = "" if options.val_split is not None else " (the default; set it with --val-split)"
    return f"validation: {n_val} samples held out of the training data, --val-split {fraction:g}{given}, {how}seed {seed}"


def val_fraction(options: DataOptions) -> float:
    return options.val_split if options.val_split is not None else DEFAULT_VAL_SPLIT


def as_json(value: Any) -> str:
    """A metadata value: compact JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
