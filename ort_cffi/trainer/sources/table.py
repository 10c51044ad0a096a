"""CSV and TSV files: a header row, then one sample per row. ``read_table`` reads them with Python's ``csv``
module (quoted fields, a delimiter sniffed from the file or a tab for ``.tsv``), refusing a ragged row by its
line number. ``load_table`` makes a tabular dataset: the label column (``--label-column``, default the last),
and every other column a numeric feature, in order, standardised with the training split's mean and standard
deviation; label strings become class ids, sorted.

What was done is the ``preprocessing`` of the exported model's metadata; ``prepare_rows`` applies it again
(``ort-cffi-predict``)."""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi.trainer.data import check_splits
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.sources.common import (
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

TABLE_SUFFIXES = (".csv", ".tsv", ".tab", ".txt")


@dataclass
class Table:
    """A CSV file read: its column names, its rows (strings) and the line each row starts on."""

    path: Path
    delimiter: str
    columns: List[str]
    rows: List[List[str]]
    lines: List[int]

    def column(self, name: Optional[str], flag: str, default_last: bool = False) -> int:
        """The index of the column ``name`` (the last one when None and ``default_last``); a SetupError naming
        the columns there are."""
        if name is None and default_last:
            return len(self.columns) - 1
        if name in self.columns:
            return self.columns.index(name)
        raise SetupError(f"{flag} {name!r} is not a column of {str(self.path)!r}; its columns are "
                         f"{', '.join(repr(c) for c in self.columns)}")


def read_table(path: Path, delimiter: Optional[str] = None, header: Optional[List[str]] = None) -> Table:
    """The rows of a CSV or TSV file; the first row is the header unless ``header`` is given (the columns the
    file must have, for ``ort-cffi-predict``). A SetupError for a file that is not text, has no rows, or has a
    row with another number of fields than the header."""
    where = f"{str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise SetupError(f"{where} is not a text file (UTF-8): a CSV or TSV file is text, one row per line") from None
    except OSError as error:
        raise SetupError(f"cannot read {where}: {error.strerror}") from None
    if delimiter is None:
        delimiter = "\t" if path.suffix.lower() in (".tsv", ".tab") else sniff_delimiter(text)
    reader = csv.reader(text.splitlines(keepends=True), delimiter=delimiter)
    rows: List[List[str]] = []
    lines: List[int] = []
    columns = header
    start = 1
    try:
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if columns is None:
                columns = [cell.strip() for cell in row]
            else:
                if len(row) != len(columns):
                    raise SetupError(f"{where}, line {start}: {len(row)} field{'s' if len(row) != 1 else ''}, but the "
                                     f"header has {len(columns)} ({', '.join(columns)}): every row needs one value per "
                                     "column (a field with the delimiter in it needs quotes)")
                rows.append(row)
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise SetupError(f"{where}, line {reader.line_num}: not valid CSV ({exc})") from None
    if columns is None or not rows:
        raise SetupError(f"{where} has no data rows: a CSV or TSV file has a header row, then one row per sample")
    if header is None and all(is_number(c) for c in columns):
        raise SetupError(f"{where}: its first row ({', '.join(columns[:6])}) holds numbers, not column names: the first "
                         "row of a CSV or TSV file names the columns")
    return Table(path, delimiter, columns, rows, lines)


def sniff_delimiter(text: str) -> str:
    """The delimiter of a CSV file's first lines (comma, semicolon, tab or pipe); a comma when unclear."""
    sample = "\n".join(text.splitlines()[:20])
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def numbers(table: Table, columns: Sequence[int], what: str) -> np.ndarray:
    """The cells of ``columns`` as float64 [rows, columns]; a SetupError naming the line, column and value of
    the first cell that is no finite number."""
    values = np.empty((len(table.rows), len(columns)), dtype=np.float64)
    for r, row in enumerate(table.rows):
        for c, column in enumerate(columns):
            cell = row[column].strip()
            try:
                value = float(cell)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):
                shown = "empty" if not cell else f"{cell!r}, not a number"
                raise SetupError(f"{str(table.path)!r}, line {table.lines[r]}, column {table.columns[column]!r}: {shown}; "
                                 f"{what}")
            values[r, c] = value
    return values


def feature_count(name: str, info: Any, where: str) -> Optional[int]:
    """How many features the input takes per sample ([N, F], or [N] for one), None when not fixed."""
    dims = list(info.shape)
    if info.dtype is None or info.dtype.kind != "f" or len(dims) not in (1, 2):
        raise SetupError(f"{where} is a table of numbers, but the model's input {name!r} is {info.dtype} "
                         f"{shape_text(dims)}: a table feeds a floating-point [N, features] input (an .npz dataset "
                         "feeds any other)")
    if len(dims) == 1:
        return 1
    return dims[1] if dims[1] > 0 else None


def prepare_rows(values: np.ndarray, record: Dict[str, Any], dims: int) -> np.ndarray:
    """Feature values [rows, features] standardised as the record says, in the input's dtype and rank."""
    batch = (values - np.array(record["mean"])) / np.array(record["std"])
    batch = batch.astype(np.dtype(record["dtype"]))
    return np.ascontiguousarray(batch[:, 0] if dims == 1 else batch)


def load_table(path: Path, feed: ModelFeed, options: DataOptions, seed: int) -> Loaded:
    """A CSV or TSV file of numeric features and a label column, split, standardised on the training split."""
    where = f"dataset {str(path)!r}"
    name, info = feed.features(where, "a table (CSV)")
    labels_name, labels_info = feed.label_info(where, "a table (CSV)")
    table = read_table(path)
    label = table.column(options.label_column, "--label-column", default_last=True)
    if len(table.columns) < 2:
        raise SetupError(f"{where} has one column ({table.columns[0]!r}): a table needs feature columns and a label column")
    feature_columns = [i for i in range(len(table.columns)) if i != label]
    names = [table.columns[i] for i in feature_columns]
    wanted = feature_count(name, info, where)
    if wanted is not None and wanted != len(names):
        raise SetupError(f"{where} has {len(names)} feature column{'s' if len(names) != 1 else ''} ({', '.join(names)}; "
                         f"labels in {table.columns[label]!r}), but the model's input {name!r} is {info.dtype} "
                         f"{shape_text(info.shape)}: {wanted} features per sample")
    features = numbers(table, feature_columns, f"every column but the label column ({table.columns[label]!r}) is a "
                                               "numeric feature (choose the labels with --label-column)")
    label_values = [row[label].strip() for row in table.rows]
    empty = next((i for i, v in enumerate(label_values) if not v), None)
    if empty is not None:
        raise SetupError(f"{str(path)!r}, line {table.lines[empty]}: the label column {table.columns[label]!r} is empty")
    labels, classes = label_array(label_values, labels_info, labels_name, where)
    if classes is not None:
        check_class_count(classes, feed, where)
    train, val = split_indices(len(labels), labels if classes is not None else None, val_fraction(options), seed, where)
    mean = features[train].mean(axis=0)
    std = features[train].std(axis=0)
    std[std == 0] = 1.0  # a constant column: centred, not scaled
    record = {"kind": "table", "input": name, "dtype": str(info.dtype), "delimiter": table.delimiter,
              "columns": names, "label_column": table.columns[label], "mean": mean.tolist(), "std": std.tolist()}
    prepared = prepare_rows(features, record, len(info.shape))
    data = check_splits({split: {name: prepared[idx], labels_name: labels[idx]}
                         for split, idx in (("train", train), ("val", val))}, feed.inputs, where)
    what = f"{len(classes)} classes" if classes is not None else "numeric labels"
    description = (f"table: {len(names)} features standardised on the training split; labels in "
                   f"{table.columns[label]!r}, {what}")
    metadata = {"preprocessing": as_json(record)}
    if classes is not None:
        metadata = {"classes": as_json(classes), **metadata}
    return Loaded(data, description, [held_out_note(options, classes is not None, seed, len(val))], classes, metadata)


def predict_rows(paths: Sequence[Path], record: Dict[str, Any], dims: int) -> Tuple[List[str], np.ndarray]:
    """(what each prediction is of, the batch) for ``ort-cffi-predict``: the rows of CSV files with the
    training's feature columns (a label column, or others, may be there too: they are not read)."""
    where_rows: List[str] = []
    blocks: List[np.ndarray] = []
    for path in paths:
        table = read_table(path, record.get("delimiter") if path.suffix.lower() not in (".tsv", ".tab") else None)
        missing = [c for c in record["columns"] if c not in table.columns]
        if missing:
            raise SetupError(f"{str(path)!r} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)} the "
                             f"model was trained on (its features: {', '.join(record['columns'])})")
        blocks.append(numbers(table, [table.columns.index(c) for c in record["columns"]], "the features are numbers"))
        where_rows += [f"{path}:{line}" for line in table.lines]
    return where_rows, prepare_rows(np.concatenate(blocks), record, dims)
