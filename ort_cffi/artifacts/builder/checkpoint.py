"""The training checkpoint, written as ONNX Runtime 1.19's generator writes it, byte for byte.

The format is ONNX Runtime's flatbuffer ``ort_training_checkpoint.fbs`` (file identifier ``ODTC``, version 2):
a ``Checkpoint`` table holding a ``ModuleState`` with the trainable (``requires_grad_params``) and frozen
(``frozen_params``) tensors, each a ``Tensor`` with its name, dims, ONNX element type and raw little-endian
data. The generator's writer keeps the tensors in the order it is given them. A nominal checkpoint marks the
module state nominal and keeps only each tensor's name and element type (no dims, empty data): the runtime
learns the shapes from the training model. Given properties (a mapping, even an empty one), the checkpoint
is laid out as the runtime's own ``SaveCheckpoint`` lays out a state without optimizer state: an empty
optimizer-group vector, and a property bag (properties sorted by name) unless there are none. Given the
tensors sorted by name, it is then the file the runtime writes after ``AddProperty``.

The layout is the one writer ort_cffi's training engine uses too (``ort_cffi._facade.checkpoint_format`` hands
it up from the backend layer's checkpoint codec); this module turns TensorProtos into its tensor records.

Memory: the tensors' data is never gathered. The layout is planned first; each tensor's bytes are then fetched
and written one tensor at a time, from ``raw_data`` or from its external-data file, so that writing a
checkpoint costs about the largest tensor on top of what the caller already holds.

Size: a flatbuffer cannot pass 2 GiB. Past 1.8 GiB of tensors, ONNX Runtime moves their data to
``<checkpoint>.data`` beside the checkpoint; so does this writer, with the same bytes in both files.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from onnx import TensorProto

from ort_cffi._facade.checkpoint_format import EXTERNAL_DATA_THRESHOLD as _RUNTIME_THRESHOLD
from ort_cffi._facade.checkpoint_format import (
    GENERATOR_EXTERNAL_MINIMUM,
    MIB,
    BulkSource,
    CheckpointInputError,
    CheckpointPlan,
    ExternalData,
    PropertyValue,
    TensorRecord,
    check_properties,
    plan_checkpoint,
    write_plan,
)

PathLike = Union[str, "os.PathLike[str]"]
__all__ = ["ELEMENT_TYPES", "EXTERNAL_DATA_THRESHOLD", "CheckpointInputError", "checkpoint_bytes", "write_checkpoint"]

# The element types ONNX Runtime 1.19 loads from a checkpoint (its loader refuses float16, bfloat16, the
# float8 and 4-bit types and strings with "Unsupported data type", though its generator writes them), with
# the size of one element and the typed field that holds the values when raw_data does not.
ELEMENT_TYPES: Dict[int, Tuple[str, np.dtype, str]] = {
    TensorProto.FLOAT: ("FLOAT", np.dtype("<f4"), "float_data"),
    TensorProto.UINT8: ("UINT8", np.dtype("u1"), "int32_data"),
    TensorProto.INT8: ("INT8", np.dtype("i1"), "int32_data"),
    TensorProto.UINT16: ("UINT16", np.dtype("<u2"), "int32_data"),
    TensorProto.INT16: ("INT16", np.dtype("<i2"), "int32_data"),
    TensorProto.INT32: ("INT32", np.dtype("<i4"), "int32_data"),
    TensorProto.INT64: ("INT64", np.dtype("<i8"), "int64_data"),
    TensorProto.BOOL: ("BOOL", np.dtype("?"), "int32_data"),
    TensorProto.DOUBLE: ("DOUBLE", np.dtype("<f8"), "double_data"),
    TensorProto.UINT32: ("UINT32", np.dtype("<u4"), "uint64_data"),
    TensorProto.UINT64: ("UINT64", np.dtype("<u8"), "uint64_data"),
}
# Past this many bytes of serialized TensorProtos (rounded up to MiB) the generator writes the tensors' data to
# ``<checkpoint>.data``; a module attribute, so that a test can lower it.
EXTERNAL_DATA_THRESHOLD = _RUNTIME_THRESHOLD
_READ_CHUNK = 16 * 1024 * 1024  # external data is copied through a buffer of this size


def write_checkpoint(path: PathLike, trainable: Sequence[TensorProto], frozen: Sequence[TensorProto] = (), *,
                     nominal: bool = False, properties: Optional[Mapping[str, PropertyValue]] = None,
                     external_data_dir: Optional[PathLike] = None,
                     external_data_threshold: int = EXTERNAL_DATA_THRESHOLD) -> int:
    """Write the checkpoint of ``trainable`` and ``frozen`` parameters to ``path`` and return its size in
    bytes.

    The tensors keep the order given. Their data is read from ``raw_data``, from the typed field of their
    element type (``float_data``, ``int64_data``...), or, for a tensor whose data is external (as
    ``onnx.load(..., load_external_data=False)`` leaves it), from its file under ``external_data_dir``. Only
    one tensor's data is in memory at a time. ``nominal``: write the nominal checkpoint (names and element
    types, no dims, no data) instead. ``properties``: user properties (int, float or str values), as
    ``OrtCheckpointState.addProperty`` adds them; a mapping, even empty, lays the file out as the runtime's
    ``SaveCheckpoint`` does (see the module's notes). Past ``external_data_threshold`` bytes of tensors (ONNX
    Runtime's 1.8 GiB by default) the data goes to ``<path>.data`` beside the checkpoint, as ONNX Runtime
    writes it; the runtime reads it from there.
    Raises ``CheckpointInputError`` for what the checkpoint cannot hold; nothing is written then.
    """
    return write_plan(_plan(trainable, frozen, nominal, properties, external_data_dir, external_data_threshold), path)


def checkpoint_bytes(trainable: Sequence[TensorProto], frozen: Sequence[TensorProto] = (), *,
                     nominal: bool = False, properties: Optional[Mapping[str, PropertyValue]] = None,
                     external_data_dir: Optional[PathLike] = None) -> bytes:
    """The checkpoint ``write_checkpoint`` writes, as bytes (for ``OrtCheckpointState.loadCheckpointFromBuffer``);
    this holds the whole checkpoint in memory once. A checkpoint whose data would go to an external file (past
    1.8 GiB) has no bytes form: the runtime reads external data only beside a checkpoint file."""
    plan = _plan(trainable, frozen, nominal, properties, external_data_dir, EXTERNAL_DATA_THRESHOLD)
    if plan.external is not None:
        raise CheckpointInputError("the checkpoint's data passes 1.8 GiB, so it goes to an external data file "
                                   "beside the checkpoint: use write_checkpoint")
    return plan.to_bytes()


# --- planning the layout -------------------------------------------------------------------------------------

def _plan(trainable: Sequence[TensorProto], frozen: Sequence[TensorProto], nominal: bool,
          properties: Optional[Mapping[str, PropertyValue]], external_data_dir: Optional[PathLike],
          external_data_threshold: int) -> CheckpointPlan:
    groups = {"trainable": _as_list(trainable, "trainable"), "frozen": _as_list(frozen, "frozen")}
    seen: Dict[str, str] = {}
    for group, tensors in groups.items():
        for tensor in tensors:
            name = _name_of(tensor, group)
            if name in seen:
                raise CheckpointInputError(f"the parameter {name!r} is given twice ({seen[name]} and {group})")
            seen[name] = group
    bag = check_properties(properties) if properties is not None else None
    base = None if external_data_dir is None else Path(external_data_dir)
    data = [[_data_of(tensor, base, nominal) for tensor in tensors] for tensors in groups.values()]
    # ONNX Runtime sizes its buffer by the serialized TensorProtos, rounded up to MiB, and goes external past
    # the threshold.
    serialized = sum(_serialized_size(tensor, length) for tensors, lengths in zip(groups.values(), data)
                     for tensor, (length, _) in zip(tensors, lengths))
    external = ExternalData(GENERATOR_EXTERNAL_MINIMUM) \
        if not nominal and max(-(-serialized // MIB), 1) * MIB > external_data_threshold else None
    records = [[_record(tensor, length, source, nominal) for tensor, (length, source) in zip(tensors, lengths)]
               for tensors, lengths in zip(groups.values(), data)]
    return plan_checkpoint(records[0], records[1], nominal=nominal, properties=bag, external=external)


def _record(tensor: TensorProto, length: int, source: BulkSource, nominal: bool) -> TensorRecord:
    """What SaveInitializerOrtFormat writes of a TensorProto; a nominal tensor is what it writes for one holding
    only the name and element type (no doc string, no dims, no data)."""
    doc_string = tensor.doc_string if tensor.HasField("doc_string") and not nominal else None
    dims = () if nominal else tuple(int(dim) for dim in tensor.dims)
    return TensorRecord(tensor.name, tensor.data_type, dims, length, source, doc_string)


def _as_list(tensors: Sequence[TensorProto], group: str) -> List[TensorProto]:
    if isinstance(tensors, TensorProto):
        raise CheckpointInputError(f"{group}: expected a sequence of onnx.TensorProto, got one TensorProto")
    listed = list(tensors)
    for index, tensor in enumerate(listed):
        if not isinstance(tensor, TensorProto):
            raise CheckpointInputError(f"{group}[{index}]: expected an onnx.TensorProto, got {type(tensor).__name__}")
    return listed


def _name_of(tensor: TensorProto, group: str) -> str:
    if not tensor.name:
        raise CheckpointInputError(f"a {group} parameter has no name")
    return tensor.name


def _no_data() -> Iterator[bytes]:
    return iter(())


# --- tensor data ---------------------------------------------------------------------------------------------

def _data_of(tensor: TensorProto, base: Optional[Path], nominal: bool) -> Tuple[int, BulkSource]:
    """The length of the tensor's data and a source that yields it when the file is written. What costs no copy
    of the data is checked here (element type, dims, typed values, an external file); the length of raw_data
    when it is written. A nominal tensor has no data."""
    element = ELEMENT_TYPES.get(tensor.data_type)
    if element is None:
        kind = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in TensorProto.DataType.values() \
            else str(tensor.data_type)
        raise CheckpointInputError(
            f"the parameter {tensor.name!r} is of element type {kind}, which ONNX Runtime 1.19 cannot load from "
            f"a checkpoint (it loads {', '.join(name for name, _, _ in ELEMENT_TYPES.values())})")
    if nominal:
        return 0, _no_data
    type_name, dtype, typed_field = element
    if any(dim < 0 for dim in tensor.dims):
        raise CheckpointInputError(f"the parameter {tensor.name!r} has a negative dimension: {list(tensor.dims)}")
    if tensor.HasField("segment"):
        raise CheckpointInputError(f"the parameter {tensor.name!r} is a segment of a tensor, which ONNX Runtime "
                                   "does not take")
    expected = math.prod(tensor.dims) * dtype.itemsize
    if tensor.data_location == TensorProto.EXTERNAL:
        return _external_data(tensor, expected, base)
    if tensor.HasField("raw_data"):
        # protobuf copies the bytes on every access: they are read once, when written, and checked then (a
        # failed write leaves no file)
        def raw() -> Iterator[bytes]:
            data = tensor.raw_data
            if len(data) != expected:
                raise CheckpointInputError(f"the parameter {tensor.name!r} holds {len(data)} bytes of raw data; its "
                                           f"dims {list(tensor.dims)} and type {type_name} take {expected}")
            yield data

        return expected, raw
    values = getattr(tensor, typed_field)
    count = math.prod(tensor.dims)
    if len(values) != count:
        raise CheckpointInputError(f"the parameter {tensor.name!r} holds {len(values)} values in {typed_field}; "
                                   f"its dims {list(tensor.dims)} take {count}")
    # Typed fields hold small tensors in practice; ONNX Runtime casts each value to the element type (an
    # int32_data entry to int8, a nonzero one to true for BOOL), as numpy's astype does.
    wide = np.uint64 if typed_field == "uint64_data" else np.float64 if dtype.kind == "f" else np.int64
    return expected, lambda: iter((np.asarray(values, dtype=wide).astype(dtype).tobytes(),))


def _serialized_size(tensor: TensorProto, length: int) -> int:
    """TensorProto.ByteSizeLong() of the tensor with its data loaded as raw_data, as ONNX Runtime's generator
    holds it. Counted field by field for raw or external data (protobuf's own ByteSize would serialize the
    bytes: a copy of each tensor); the fields counted are those a parameter has."""
    if tensor.data_location != TensorProto.EXTERNAL and not tensor.HasField("raw_data"):
        return tensor.ByteSize()  # typed fields: a small tensor
    size = sum(1 + _varint_size(dim) for dim in tensor.dims)  # dims (field 1, unpacked int64)
    size += 1 + _varint_size(tensor.data_type)
    for text in ([tensor.name] + ([tensor.doc_string] if tensor.HasField("doc_string") else [])):
        encoded = len(text.encode("utf-8"))
        size += 1 + _varint_size(encoded) + encoded
    if tensor.data_location == TensorProto.EXTERNAL or tensor.HasField("data_location"):
        size += 2  # data_location, DEFAULT once onnx.load_external_data_for_model has loaded it
    return size + 1 + _varint_size(length) + length  # raw_data: tag, length, bytes


def _varint_size(value: int) -> int:
    return max(1, -(-value.bit_length() // 7))


def _external_data(tensor: TensorProto, expected: int, base: Optional[Path]) -> Tuple[int, BulkSource]:
    entries = {entry.key: entry.value for entry in tensor.external_data}
    if base is None:
        raise CheckpointInputError(
            f"the parameter {tensor.name!r} keeps its data in an external file ({entries.get('location')!r}): "
            "pass external_data_dir= (the model's folder) or load the data first (onnx.load_external_data_for_model)")
    location = entries.get("location")
    if not location:
        raise CheckpointInputError(f"the parameter {tensor.name!r} is external but names no location")
    file = base / location
    if not file.is_file():
        raise CheckpointInputError(f"the external data of the parameter {tensor.name!r} is missing: {file}")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else file.stat().st_size - offset
    except ValueError:
        raise CheckpointInputError(f"the parameter {tensor.name!r} has an external offset or length that is no "
                                   f"integer: {entries}") from None
    if length != expected or offset < 0 or offset + length > file.stat().st_size:
        raise CheckpointInputError(
            f"the external data of the parameter {tensor.name!r} ({file}, offset {offset}, length {length}) does "
            f"not hold the {expected} bytes its dims {list(tensor.dims)} take")

    def read() -> Iterator[bytes]:
        with open(file, "rb") as stream:
            stream.seek(offset)
            left = length
            while left:
                chunk = stream.read(min(left, _READ_CHUNK))
                if not chunk:
                    raise CheckpointInputError(f"{file} ended while the parameter {tensor.name!r} was read")
                left -= len(chunk)
                yield chunk

    return length, read
