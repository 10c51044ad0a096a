"""Text in a CSV or TSV file: a text column (``--text-column``) and a label column (``--label-column``, default
the last), fed to the model as token ids padded or truncated to its sequence length (its input's second
dimension when fixed, else the longest training text). The tokens come from a Hugging Face ``tokenizers``
``tokenizer.json`` (``--tokenizer``, read with that library), or from a vocabulary built on the training split:
lower-cased words and punctuation marks, id 0 the padding, id 1 the unknown token, then the most frequent
tokens, as many as the model's embedding table has rows (found in the eval model: the Gather that the text
input indexes).

What was done is the ``preprocessing`` of the exported model's metadata, with the ``vocabulary`` or the
``tokenizer``; ``TextEncoder`` applies it again (``ort-cffi-predict``)."""
from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from ort_cffi import TensorInfo
from ort_cffi._facade.protobuf_wire import Malformed, fields, varint
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
from ort_cffi.trainer.sources.table import read_table

PAD, UNKNOWN = "<pad>", "<unk>"
WORDS = r"\w+|[^\w\s]"  # the built vocabulary's tokens: words, and each punctuation mark on its own
TOKENIZERS_MISSING = ("tokenizer.json is read with the tokenizers package, which is not installed: it comes with "
                      "ort_cffi's text extra (pip install \".[text]\" in ort_cffi's checkout), or pip install tokenizers")
PAD_TOKENS = ("[PAD]", "<pad>", "<PAD>", "<|padding|>", "[pad]")
# Ops an index tensor passes through unchanged in value on its way to the embedding's Gather.
PASSTHROUGH = {"Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Clip", "Transpose"}


def tokenizers_module() -> Any:
    try:
        return importlib.import_module("tokenizers")
    except ImportError:
        raise SetupError(TOKENIZERS_MISSING) from None


class TextEncoder:
    """Texts to token ids [N, length] as a ``preprocessing`` record says: with the tokenizer (its JSON text)
    or the vocabulary (tokens in id order)."""

    def __init__(self, record: Dict[str, Any], vocabulary: Optional[List[str]] = None,
                 tokenizer_json: Optional[str] = None) -> None:
        self.record = record
        self.tokenizer: Any = None
        self.index: Dict[str, int] = {}
        if record["tokens"] == "tokenizer":
            if tokenizer_json is None:
                raise SetupError("the model's preprocessing names a tokenizer, but its metadata holds none")
            self.tokenizer = tokenizers_module().Tokenizer.from_str(tokenizer_json)
            self.tokenizer.no_padding()  # padded and truncated here, to the model's length, with the pad id found
            self.tokenizer.no_truncation()
        else:
            if vocabulary is None:
                raise SetupError("the model's preprocessing names a vocabulary, but its metadata holds none")
            self.index = {token: i for i, token in enumerate(vocabulary)}

    def ids(self, texts: Sequence[str]) -> List[List[int]]:
        """The token ids of each text, before padding."""
        if self.tokenizer is not None:
            return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]
        unknown = self.record["unknown_id"]
        return [[self.index.get(token, unknown) for token in words(text)] for text in texts]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """[N, length] ids, each text truncated or padded with the pad id to the record's length."""
        return pad(self.ids(texts), self.record["length"], self.record["pad_id"], np.dtype(self.record["dtype"]))


def words(text: str) -> List[str]:
    return re.findall(WORDS, text.lower())


def pad(sequences: Sequence[Sequence[int]], length: int, pad_id: int, dtype: np.dtype) -> np.ndarray:
    out = np.full((len(sequences), length), pad_id, dtype=dtype)
    for row, ids in enumerate(sequences):
        kept = list(ids)[:length]
        out[row, :len(kept)] = kept
    return out


def build_vocabulary(texts: Iterable[str], size: int) -> List[str]:
    """The padding and unknown tokens, then the most frequent tokens of ``texts`` (ties alphabetically), ``size``
    tokens in all at most."""
    counts = Counter(token for text in texts for token in words(text))
    ranked = sorted(counts, key=lambda token: (-counts[token], token))
    return [PAD, UNKNOWN] + ranked[:max(0, size - 2)]


def _dims(tensor: memoryview) -> Tuple[str, List[int]]:
    """(name, dims) of a TensorProto."""
    name, dims = "", []
    for number, wire, value in fields(tensor):
        if number == 8 and wire == 2:
            name = bytes(value).decode("utf-8")
        elif number == 1 and wire == 0:
            dims.append(value)
        elif number == 1 and wire == 2:  # packed
            pos = 0
            while pos < len(value):
                number_value, pos = varint(value, pos)
                dims.append(number_value)
    return name, dims


def embedding_rows(eval_model: Path, input_name: str, inputs: Dict[str, TensorInfo]) -> Optional[int]:
    """The rows of the embedding table the input ``input_name`` indexes (the data of the Gather its ids reach,
    through casts and reshapes), read from the eval model's graph; None when there is no such Gather."""
    nodes: List[Tuple[str, List[str], List[str]]] = []
    initializers: Dict[str, List[int]] = {}
    try:
        data = memoryview(eval_model.read_bytes())
        for number, wire, graph in fields(data):
            if number != 7 or wire != 2:
                continue
            for field, field_wire, value in fields(graph):
                if field == 1 and field_wire == 2:
                    node_in: List[str] = []
                    node_out: List[str] = []
                    op = ""
                    for n, w, v in fields(value):
                        if w != 2:
                            continue
                        if n == 1:
                            node_in.append(bytes(v).decode("utf-8"))
                        elif n == 2:
                            node_out.append(bytes(v).decode("utf-8"))
                        elif n == 4:
                            op = bytes(v).decode("utf-8")
                    nodes.append((op, node_in, node_out))
                elif field == 5 and field_wire == 2:
                    name, dims = _dims(value)
                    initializers[name] = dims
    except (OSError, Malformed, UnicodeDecodeError):
        return None
    reached: Set[str] = {input_name}
    rows: List[int] = []
    changed = True
    while changed:
        changed = False
        for op, node_in, node_out in nodes:
            if op == "Gather" and len(node_in) > 1 and node_in[1] in reached:
                table = node_in[0]
                dims = list(inputs[table].shape) if table in inputs else initializers.get(table, [])
                if dims and dims[0] > 0 and dims[0] not in rows:
                    rows.append(int(dims[0]))
            elif op in PASSTHROUGH and node_in and node_in[0] in reached and not set(node_out) <= reached:
                reached.update(node_out)
                changed = True
    return min(rows) if rows else None


def tokenizer_pad_id(tokenizer: Any) -> int:
    """The padding id a tokenizer declares, else that of a usual padding token, else 0."""
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in PAD_TOKENS:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def load_text(path: Path, feed: ModelFeed, options: DataOptions, seed: int) -> Loaded:
    """A CSV or TSV file with a text column and a label column, as token ids and class ids."""
    where = f"dataset {str(path)!r}"
    name, info = feed.features(where, "a text table (--text-column)")
    labels_name, labels_info = feed.label_info(where, "a text table (--text-column)")
    dims = list(info.shape)
    rows = embedding_rows(feed.eval_model, name, feed.all_inputs)
    # Token ids are integers; a floating-point input only when it is cast to an embedding's indices (as Keras
    # models converted by tf2onnx take them).
    if info.dtype is None or info.dtype.kind not in ("iuf" if rows is not None else "iu") or len(dims) != 2:
        raise SetupError(f"{where} is text (--text-column), fed as token ids, but the model's input {name!r} is "
                         f"{info.dtype} {shape_text(dims)}: text feeds an integer [N, sequence length] input (an "
                         "embedding's indices)")
    table = read_table(path)
    text_column = table.column(options.text_column, "--text-column")
    label = table.column(options.label_column, "--label-column", default_last=True)
    if label == text_column:
        raise SetupError(f"{where}: the label column would be the text column {table.columns[label]!r} (the last one): "
                         "name the labels with --label-column")
    texts = [row[text_column] for row in table.rows]
    label_values = [row[label].strip() for row in table.rows]
    empty = next((i for i, v in enumerate(label_values) if not v), None)
    if empty is not None:
        raise SetupError(f"{str(path)!r}, line {table.lines[empty]}: the label column {table.columns[label]!r} is empty")
    labels, classes = label_array(label_values, labels_info, labels_name, where)
    if classes is not None:
        check_class_count(classes, feed, where)
    train, val = split_indices(len(texts), labels if classes is not None else None, val_fraction(options), seed, where)
    record: Dict[str, Any] = {"kind": "text", "input": name, "dtype": str(info.dtype),
                              "text_column": table.columns[text_column], "label_column": table.columns[label],
                              "delimiter": table.delimiter}
    metadata: Dict[str, str] = {}
    if options.tokenizer is not None:
        tokenizer_path = Path(options.tokenizer)
        try:
            tokenizer_json = tokenizer_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SetupError(f"--tokenizer {str(tokenizer_path)!r} cannot be read: {getattr(error, 'strerror', error)}") from None
        try:
            tokenizer = tokenizers_module().Tokenizer.from_str(tokenizer_json)
        except SetupError:
            raise
        except Exception as exc:  # tokenizers raises a plain Exception for a file it cannot parse
            raise SetupError(f"--tokenizer {str(tokenizer_path)!r} is not a tokenizers tokenizer.json: {exc}") from None
        record.update(tokens="tokenizer", pad_id=tokenizer_pad_id(tokenizer), tokenizer=tokenizer_path.name)
        metadata["tokenizer"] = tokenizer_json
        encoder = TextEncoder({**record, "length": 1}, tokenizer_json=tokenizer_json)
        vocabulary_size = tokenizer.get_vocab_size()
        what = f"tokenizer {tokenizer_path.name} ({vocabulary_size} tokens)"
    else:
        if rows is None:
            raise SetupError(f"{where}: no embedding table found that the model's input {name!r} indexes (a Gather "
                             "whose indices it is), so the vocabulary's size is unknown: give the tokenizer the model "
                             "was made for with --tokenizer tokenizer.json")
        vocabulary = build_vocabulary((texts[i] for i in train), rows)
        record.update(tokens="vocabulary", pad_id=0, unknown_id=1, lowercase=True, pattern=WORDS)
        metadata["vocabulary"] = as_json(vocabulary)
        encoder = TextEncoder({**record, "length": 1}, vocabulary=vocabulary)
        what = f"vocabulary of {len(vocabulary)} tokens built on the training split"
    sequences = encoder.ids(texts)
    if rows is not None:
        largest = max((max(ids) for ids in sequences if ids), default=0)
        if largest >= rows:
            raise SetupError(f"{where}: the tokenizer gives ids up to {largest}, but the model's embedding table has "
                             f"{rows} rows: use the tokenizer the model was made for")
    length = dims[1] if dims[1] > 0 else max(1, max(len(sequences[i]) for i in train))
    record["length"] = int(length)
    ids = pad(sequences, length, record["pad_id"], np.dtype(record["dtype"]))
    data = check_splits({split: {name: ids[idx], labels_name: labels[idx]}
                         for split, idx in (("train", train), ("val", val))}, feed.inputs, where)
    kinds = f"{len(classes)} classes" if classes is not None else "numeric labels"
    description = (f"text in {record['text_column']!r}: {what}, {length} tokens per text; labels in "
                   f"{record['label_column']!r}, {kinds}")
    metadata = {**({"classes": as_json(classes)} if classes is not None else {}), "preprocessing": as_json(record),
                **metadata}
    return Loaded(data, description, [held_out_note(options, classes is not None, seed, len(val))], classes, metadata)


def predict_texts(inputs: Sequence[str], record: Dict[str, Any], encoder: TextEncoder) -> Tuple[List[str], np.ndarray]:
    """(what each prediction is of, the batch) for ``ort-cffi-predict``: each argument a text, or a file: a CSV/TSV
    file's text column, or a text file's non-empty lines."""
    shown: List[str] = []
    texts: List[str] = []
    for item in inputs:
        path = Path(item)
        if len(item) < 4096 and path.is_file():
            if path.suffix.lower() in (".csv", ".tsv", ".tab"):
                table = read_table(path)
                column = table.column(record["text_column"], "the text column")
                texts += [row[column] for row in table.rows]
                shown += [f"{path}:{line}" for line in table.lines]
            else:
                try:
                    lines = path.read_text(encoding="utf-8").splitlines()
                except (OSError, UnicodeDecodeError) as error:
                    raise SetupError(f"cannot read {str(path)!r} as text: {error}") from None
                for number, line in enumerate(lines, 1):
                    if line.strip():
                        texts.append(line)
                        shown.append(f"{path}:{number}")
        else:
            texts.append(item)
            shown.append(item if len(item) <= 60 else item[:57] + "...")
    return shown, encoder.encode(texts)
