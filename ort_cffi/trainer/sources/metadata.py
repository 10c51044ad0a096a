"""What an exported model carries for its users: ONNX ``ModelProto.metadata_props`` (key-value strings that
``onnx.load(...).metadata_props`` and ONNX Runtime's ``custom_metadata_map`` show), written and read here on the
protobuf wire, without the ``onnx`` package: ``metadata_props`` is field 14 of ``ModelProto``, each entry a
``StringStringEntryProto`` (key = 1, value = 2). Setting a key rewrites the file with every other field copied as
it is and the entries of the keys set appended.

The keys ort-cffi-train writes: ``classes`` (the class names in id order, a JSON list), ``preprocessing`` (a JSON
object: what the input was made from and how), and ``vocabulary`` (the tokens in id order, a JSON list) or
``tokenizer`` (the tokenizer.json text). docs/guides/bring-your-data.md describes them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from ort_cffi._facade.files import atomic_write
from ort_cffi._facade.protobuf_wire import Malformed, field_spans, fields, length_delimited, payload

METADATA_FIELD = 14  # ModelProto.metadata_props
RUN_FILE = "preprocessing.json"  # the run folder's copy of the metadata


def _entry_key(payload: memoryview) -> Optional[str]:
    for number, wire, value in fields(payload):
        if number == 1 and wire == 2:
            return bytes(value).decode("utf-8")
    return None


def write_metadata(model: Path, values: Dict[str, str]) -> None:
    """Set the ``metadata_props`` entries ``values`` in the ONNX model file ``model`` (replacing entries of the
    same keys), crash-safe: the new file is written beside it and renamed over it."""
    data = memoryview(model.read_bytes())
    kept = bytearray()
    for number, wire, start, end in field_spans(data):
        if number == METADATA_FIELD and wire == 2:
            if _entry_key(payload(data, start, end)) in values:
                continue
        kept += data[start:end]
    for key, value in values.items():
        entry = length_delimited(1, key.encode("utf-8")) + length_delimited(2, value.encode("utf-8"))
        kept += length_delimited(METADATA_FIELD, entry)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as file:
            file.write(kept)

    atomic_write(str(model), write, "inference model")


def read_metadata(model: Union[str, Path]) -> Dict[str, str]:
    """The ``metadata_props`` of an ONNX model file, key to value (a later entry of a key wins, as in onnx)."""
    found: Dict[str, str] = {}
    with open(model, "rb") as file:
        data = memoryview(file.read())
    for number, wire, value in fields(data):
        if number == METADATA_FIELD and wire == 2:
            key, text = "", ""
            for n, w, v in fields(value):
                if n == 1 and w == 2:
                    key = bytes(v).decode("utf-8")
                elif n == 2 and w == 2:
                    text = bytes(v).decode("utf-8")
            found[key] = text
    return found


def decoded(values: Dict[str, str]) -> Dict[str, Any]:
    """The metadata with its JSON values decoded (``classes``, ``preprocessing``, ``vocabulary``); the tokenizer
    stays the text it is."""
    out: Dict[str, Any] = {}
    for key, value in values.items():
        if key == "tokenizer":
            out[key] = value
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def class_names(values: Dict[str, str]) -> Optional[List[str]]:
    """The ``classes`` entry as a list of names, or None."""
    if "classes" not in values:
        return None
    names = json.loads(values["classes"])
    return [str(name) for name in names]


__all__ = ["Malformed", "RUN_FILE", "class_names", "decoded", "read_metadata", "write_metadata"]
