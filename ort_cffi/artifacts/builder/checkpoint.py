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

Memory: the tensors' data is never gathered. The layout is planned first (see ``flatbuffer``); each tensor's
bytes are then fetched and written one tensor at a time, from ``raw_data`` or from its external-data file,
so that writing a checkpoint costs about the largest tensor on top of what the caller already holds.

Size: a flatbuffer cannot pass 2 GiB. Past 1.8 GiB of tensors, ONNX Runtime moves their data to
``<checkpoint>.data`` beside the checkpoint; so does this writer, with the same bytes in both files.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
from onnx import TensorProto

from ort_cffi.artifacts.builder.flatbuffer import BackToFrontLayout, BulkSource, FlatbufferTooLargeError

FILE_IDENTIFIER = b"ODTC"
CHECKPOINT_VERSION = 2  # kCheckpointVersion of ONNX Runtime 1.19
PathLike = Union[str, "os.PathLike[str]"]
PropertyValue = Union[int, float, str]

# Field indices of ort_training_checkpoint.fbs and ort.fbs (their order in the schema's tables).
TENSOR_NAME, TENSOR_DOC_STRING, TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_RAW_DATA = 0, 1, 2, 3, 4
TENSOR_EXTERNAL_DATA_OFFSET = 6
MODULE_REQUIRES_GRAD, MODULE_FROZEN, MODULE_IS_NOMINAL, MODULE_HAS_EXTERNAL_DATA = 0, 1, 2, 3
PROPERTY_NAME, PROPERTY_VALUE = 0, 1
BAG_INTS, BAG_FLOATS, BAG_STRINGS = 0, 1, 2
CHECKPOINT_VERSION_FIELD, CHECKPOINT_MODULE_STATE, CHECKPOINT_OPTIMIZER_GROUPS, CHECKPOINT_PROPERTY_BAG = 0, 1, 2, 3

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
# A flatbuffer cannot pass 2 GiB. Past this many bytes of serialized TensorProtos (rounded up to MiB), ONNX
# Runtime writes the data of every tensor of at least EXTERNAL_MINIMUM bytes to the file ``<checkpoint>.data``,
# each aligned to 8 bytes (64-bit types) or 4, and keeps its offset there in the Tensor table.
EXTERNAL_DATA_THRESHOLD = 1800 * 1024 * 1024
EXTERNAL_MINIMUM = 64
_MIB = 1024 * 1024
_READ_CHUNK = 16 * 1024 * 1024  # external data is copied through a buffer of this size
FLOAT32_MAX = float(np.finfo(np.float32).max)


class CheckpointInputError(ValueError):
    """A tensor or property the checkpoint cannot hold, named with the reason."""


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
    plan = _plan(trainable, frozen, nominal, properties, external_data_dir, external_data_threshold)
    target = Path(path)
    outputs = [(target, plan.layout.write_to)]
    if plan.external is not None:
        outputs.insert(0, (target.with_name(target.name + ".data"), plan.external.write_to))
    partials = [(output.with_name(output.name + ".partial"), output, write) for output, write in outputs]
    size = 0
    try:
        for partial, _, write in partials:
            with open(partial, "wb") as stream:
                size = write(stream)
        for partial, output, _ in partials:  # only once every file is complete
            os.replace(partial, output)
    finally:
        for partial, _, _ in partials:
            if partial.exists():
                partial.unlink()
    return size


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
    return plan.layout.to_bytes()


class _ExternalData:
    """The ``<checkpoint>.data`` file: each tensor's bytes at an aligned offset, in the order the tensors come."""

    def __init__(self) -> None:
        self.size = 0
        self._pieces: List[Tuple[int, int, BulkSource]] = []  # padding, length, source

    def add(self, data_type: int, length: int, source: BulkSource) -> int:
        alignment = 8 if data_type in (TensorProto.INT64, TensorProto.DOUBLE, TensorProto.UINT64) else 4
        padding = -self.size % alignment
        offset = self.size + padding
        self._pieces.append((padding, length, source))
        self.size = offset + length
        return offset

    def write_to(self, stream: BinaryIO) -> int:
        for padding, length, source in self._pieces:
            stream.write(bytes(padding))
            for chunk in source():
                stream.write(chunk)
                del chunk
        return self.size


class _Plan(NamedTuple):
    layout: BackToFrontLayout
    external: Optional[_ExternalData]


# --- planning the layout -------------------------------------------------------------------------------------

def _plan(trainable: Sequence[TensorProto], frozen: Sequence[TensorProto], nominal: bool,
          properties: Optional[Mapping[str, PropertyValue]], external_data_dir: Optional[PathLike],
          external_data_threshold: int) -> _Plan:
    groups = {"trainable": _as_list(trainable, "trainable"), "frozen": _as_list(frozen, "frozen")}
    seen: Dict[str, str] = {}
    for group, tensors in groups.items():
        for tensor in tensors:
            name = _name_of(tensor, group)
            if name in seen:
                raise CheckpointInputError(f"the parameter {name!r} is given twice ({seen[name]} and {group})")
            seen[name] = group
    bag = _check_properties(properties)
    base = None if external_data_dir is None else Path(external_data_dir)
    data = [[_data_of(tensor, base, nominal) for tensor in tensors] for tensors in groups.values()]
    # ONNX Runtime sizes its buffer by the serialized TensorProtos, rounded up to MiB, and goes external past
    # the threshold.
    serialized = sum(_serialized_size(tensor, length) for tensors, lengths in zip(groups.values(), data)
                     for tensor, (length, _) in zip(tensors, lengths))
    external = _ExternalData() if not nominal and max(-(-serialized // _MIB), 1) * _MIB > external_data_threshold \
        else None

    try:
        return _Plan(_layout(groups, data, nominal, external, bag), external)
    except FlatbufferTooLargeError as exc:
        raise CheckpointInputError(f"{exc}: the tensors' data must go to an external file (a lower "
                                   "external_data_threshold)") from None


def _layout(groups: Dict[str, List[TensorProto]], data: List[List[Tuple[int, BulkSource]]], nominal: bool,
            external: Optional[_ExternalData], bag: Optional[List[Tuple[str, PropertyValue]]]) -> BackToFrontLayout:
    layout = BackToFrontLayout()
    # The order of creation is ONNX Runtime's: each tensor's name, dims and data, then its table; the two
    # tensor vectors; the module state; with properties, the property bag and an empty optimizer-group
    # vector (what SaveCheckpoint writes for a state without optimizer state); the checkpoint table last.
    tables = [[_add_tensor(layout, tensor, length, source, nominal, external)
               for tensor, (length, source) in zip(tensors, lengths)]
              for tensors, lengths in zip(groups.values(), data)]
    vectors = [layout.offset_vector(offsets) for offsets in tables]
    module_state = 0
    if bag is None or any(groups.values()):  # SaveCheckpoint leaves out the module state of no parameters
        layout.start_table()
        layout.add_offset(MODULE_REQUIRES_GRAD, vectors[0])
        layout.add_offset(MODULE_FROZEN, vectors[1])
        layout.add_scalar(MODULE_IS_NOMINAL, "?", nominal, False)
        layout.add_scalar(MODULE_HAS_EXTERNAL_DATA, "?", external is not None, False)
        module_state = layout.end_table()
    optimizer_groups = property_bag = 0
    if bag is not None:  # SaveCheckpoint's layout: a property bag when there are properties, no optimizer group
        property_bag = _add_property_bag(layout, bag) if bag else 0
        optimizer_groups = layout.offset_vector([])

    layout.start_table()
    layout.add_scalar(CHECKPOINT_VERSION_FIELD, "i", CHECKPOINT_VERSION)
    layout.add_offset(CHECKPOINT_MODULE_STATE, module_state)
    layout.add_offset(CHECKPOINT_OPTIMIZER_GROUPS, optimizer_groups)
    layout.add_offset(CHECKPOINT_PROPERTY_BAG, property_bag)
    layout.finish(layout.end_table(), FILE_IDENTIFIER)
    return layout


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


def _add_tensor(layout: BackToFrontLayout, tensor: TensorProto, length: int, source: BulkSource, nominal: bool,
                external: Optional[_ExternalData]) -> int:
    """SaveInitializerOrtFormat: name, doc string (when set), dims, data; then the Tensor table. A nominal
    tensor is what the runtime writes for a TensorProto holding only the name and element type."""
    name = layout.string(tensor.name.encode("utf-8"))
    doc_string = layout.string(tensor.doc_string.encode("utf-8")) \
        if tensor.HasField("doc_string") and not nominal else 0
    dims = layout.scalar_vector(b"" if nominal else np.asarray(tensor.dims, dtype="<i8").tobytes(), 8)
    offset = external.add(tensor.data_type, length, source) if external is not None and length >= EXTERNAL_MINIMUM \
        else -1
    raw_data = layout.bulk_byte_vector(length, source) if offset < 0 else 0
    layout.start_table()
    layout.add_offset(TENSOR_NAME, name)
    layout.add_offset(TENSOR_DOC_STRING, doc_string)
    layout.add_offset(TENSOR_DIMS, dims)
    layout.add_scalar(TENSOR_DATA_TYPE, "i", tensor.data_type)
    layout.add_offset(TENSOR_RAW_DATA, raw_data)
    layout.add_scalar(TENSOR_EXTERNAL_DATA_OFFSET, "q", offset, -1)
    return layout.end_table()


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


# --- properties ----------------------------------------------------------------------------------------------

def _check_properties(properties: Optional[Mapping[str, PropertyValue]]) -> Optional[List[Tuple[str, PropertyValue]]]:
    if properties is None:
        return None
    checked = []
    for name, value in properties.items():
        if not isinstance(name, str) or not name:
            raise CheckpointInputError(f"a property name must be a non-empty str, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CheckpointInputError(f"the property {name!r} must be an int, float or str, got {type(value).__name__}")
        if isinstance(value, int) and not -2**63 <= value < 2**63:
            raise CheckpointInputError(f"the property {name!r} ({value}) does not fit in a 64-bit integer")
        if isinstance(value, float) and math.isfinite(value) and abs(value) > FLOAT32_MAX:
            raise CheckpointInputError(f"the property {name!r} ({value}) does not fit in a 32-bit float, which the "
                                       "checkpoint keeps")
        checked.append((name, value))
    return sorted(checked, key=lambda item: item[0])  # the runtime sorts by name (bytewise: code-point order)


def _add_property_bag(layout: BackToFrontLayout, bag: List[Tuple[str, PropertyValue]]) -> int:
    """FromPropertyBag: for each property by name, its name (and string value) then its table; then the
    three vectors (empty ones too) and the PropertyBag table."""
    kinds: Dict[str, List[int]] = {"int": [], "float": [], "str": []}
    for name, value in bag:
        name_offset = layout.string(name.encode("utf-8"))
        value_offset = layout.string(value.encode("utf-8")) if isinstance(value, str) else 0
        layout.start_table()
        layout.add_offset(PROPERTY_NAME, name_offset)
        if isinstance(value, str):
            layout.add_offset(PROPERTY_VALUE, value_offset)
        else:
            layout.add_scalar(PROPERTY_VALUE, "q" if isinstance(value, int) else "f", value)
        kinds["str" if isinstance(value, str) else "int" if isinstance(value, int) else "float"].append(
            layout.end_table())
    vectors = [layout.offset_vector(kinds[kind]) for kind in ("int", "float", "str")]
    layout.start_table()
    for field, vector in zip((BAG_INTS, BAG_FLOATS, BAG_STRINGS), vectors):
        layout.add_offset(field, vector)
    return layout.end_table()
