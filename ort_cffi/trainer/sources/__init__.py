"""Where ``ort-cffi-train``'s data comes from, decided by what ``--data`` is: an ``.npz`` file (``npz``), a folder of
images with one subfolder per class (``images``), a CSV or TSV file of numeric features (``table``) or of text
(``text``, with ``--text-column``). Each source reads its data, shapes it as the model's inputs say (name, dtype,
shape), holds out a validation split where the data has none (``--val-split``, seeded, stratified by class), and
says what the exported model must carry (``metadata``: the class names, the preprocessing, the vocabulary or
tokenizer), so that ``ort-cffi-predict`` can prepare new inputs the same way."""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any, Dict, List

from ort_cffi._facade.files import file_sha256
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.sources.common import ACCEPTED, FLAGS, DataOptions, Loaded, ModelFeed
from ort_cffi.trainer.sources.images import load_images
from ort_cffi.trainer.sources.metadata import RUN_FILE, class_names, decoded, read_metadata, write_metadata
from ort_cffi.trainer.sources.npz import load_npz
from ort_cffi.trainer.sources.table import TABLE_SUFFIXES, load_table
from ort_cffi.trainer.sources.text import load_text


def check_exists(path: Path) -> Path:
    """``path`` when there is something there; "does not exist" only when there is not."""
    if not path.exists():
        raise SetupError(f"dataset {str(path)!r} does not exist")
    return path


def load_data(path: Path, splits: Dict[str, List[str]], feed: ModelFeed, options: DataOptions, seed: int) -> Loaded:
    """The dataset at ``path`` for the model's inputs ``splits`` (``train``/``val`` input names), whatever kind of
    source it is; a SetupError saying what ``path`` is and what ``--data`` accepts when it is none of them."""
    check_exists(path)
    where = f"dataset {str(path)!r}"
    if options.text_column is None and options.tokenizer is not None:
        raise SetupError("--tokenizer applies to text: name the text's column with --text-column")
    if path.is_dir():
        refuse_options(options, ("label_column", "text_column", "tokenizer"), where, "an image folder")
        return load_images(path, feed, options, seed)
    if path.suffix.lower() == ".npz" or zipfile.is_zipfile(path):
        refuse_options(options, ("label_column", "text_column", "tokenizer", "normalize"), where, "an .npz file")
        return load_npz(path, splits, feed, options, seed)
    if path.suffix.lower() in TABLE_SUFFIXES or options.text_column is not None or options.label_column is not None:
        refuse_options(options, ("normalize",), where, "a CSV/TSV file")
        if options.text_column is not None:
            return load_text(path, feed, options, seed)
        return load_table(path, feed, options, seed)
    raise SetupError(f"{where} is a {path.suffix or 'suffix-less'} file, not a dataset ort-cffi-train reads: {ACCEPTED}")


def refuse_options(options: DataOptions, names: Any, where: str, kind: str) -> None:
    given = [FLAGS[name] for name in names if getattr(options, name) is not None]
    if given:
        raise SetupError(f"{where} is {kind}: {', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to it")


def data_identity(path: Path) -> Dict[str, Any]:
    """Where the dataset is and what it holds: the sha256 of a file, or of a folder's files (their paths
    relative to it and their digests, in order)."""
    if not path.is_dir():
        return {"path": str(path.resolve()), "sha256": file_sha256(path)}
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode("utf-8") + b"\0")
        digest.update(file_sha256(file).encode("ascii") + b"\0")
    return {"path": str(path.resolve()), "sha256": digest.hexdigest()}


__all__ = ["ACCEPTED", "DataOptions", "Loaded", "ModelFeed", "RUN_FILE", "check_exists", "class_names", "data_identity",
           "decoded", "load_data", "read_metadata", "write_metadata"]
