"""Reading a checkpoint file or buffer into a ``Checkpoint``: every table ONNX Runtime 1.19 reads, followed
with bounds-checked offsets (``flatbuffer.FlatbufferReader``), so that a damaged or foreign file gives
``CheckpointFormatError`` naming the path and what was wrong.

Memory: the file's bytes are read once; each array is a read-only view of them (``np.frombuffer``), so
reading holds one copy of the data. The bytes are read into memory rather than memory-mapped: a mapped file
that another writer truncates in place (ONNX Runtime's own save does) would crash the process on the next
read of an array (SIGBUS).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from ort_cffi._backends.engine.checkpoint_codec import elements
from ort_cffi._backends.engine.checkpoint_codec.flatbuffer import FlatbufferFormatError, FlatbufferReader
from ort_cffi._backends.engine.checkpoint_codec.layout import (
    BAG_FLOATS,
    BAG_INTS,
    BAG_STRINGS,
    CHECKPOINT_MODULE_STATE,
    CHECKPOINT_OPTIMIZER_GROUPS,
    CHECKPOINT_PROPERTY_BAG,
    CHECKPOINT_VERSION,
    CHECKPOINT_VERSION_FIELD,
    FILE_IDENTIFIER,
    GROUP_LEARNING_RATE,
    GROUP_NAME,
    GROUP_STATES,
    GROUP_STEP,
    MODULE_FROZEN,
    MODULE_HAS_EXTERNAL_DATA,
    MODULE_IS_NOMINAL,
    MODULE_REQUIRES_GRAD,
    PROPERTY_NAME,
    PROPERTY_VALUE,
    STATE_MOMENTUMS,
    STATE_PARAM_NAME,
    TENSOR_DATA_TYPE,
    TENSOR_DIMS,
    TENSOR_EXTERNAL_DATA_OFFSET,
    TENSOR_NAME,
    TENSOR_RAW_DATA,
    TENSOR_STRING_DATA,
)
from ort_cffi._backends.engine.checkpoint_codec.state import (
    Checkpoint,
    CheckpointFormatError,
    OptimizerGroup,
    PropertyValue,
)

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]
_IDENTIFIERS = {b"ORTM": "an ORT-format model"}  # files that share the flatbuffer container


class StoredTensor(NamedTuple):
    """One tensor as the file stores it: its element type, dims, and where its data lies: ``(offset, length)``
    in the checkpoint (``external`` False) or in ``<checkpoint>.data`` (``external`` True); None for string
    tensors (``strings``)."""

    name: str
    data_type: int
    dims: Tuple[int, ...]
    data_at: Optional[Tuple[int, int]]
    external: bool
    strings: Optional[List[bytes]]


class StoredGroup(NamedTuple):
    name: str
    learning_rate: float
    step: int
    states: List[Tuple[str, List[StoredTensor]]]


class CheckpointIndex(NamedTuple):
    """Where everything lies in a checkpoint, without its data: what ``index_checkpoint`` finds."""

    trainable: List[StoredTensor]
    frozen: List[StoredTensor]
    nominal: bool
    has_external_data: bool
    groups: List[StoredGroup]
    properties: List[Tuple[str, PropertyValue]]


def read_bytes(source: Source) -> Tuple[Union[bytes, bytearray, memoryview], Optional[Path], str]:
    """(the bytes, the path or None, how messages name the source)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return source, None, "the checkpoint buffer"
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"read_checkpoint takes a path or bytes, not {type(source).__name__}")
    path = Path(os.fspath(source))
    return path.read_bytes(), path, str(path)


def index_checkpoint(data: Union[bytes, bytearray, memoryview], label: str) -> CheckpointIndex:
    """The layout of the checkpoint in ``data``; ``CheckpointFormatError`` (naming ``label``) when it is not
    one ONNX Runtime 1.19 reads."""
    size = len(data)
    if size == 0:
        raise CheckpointFormatError(f"{label} is empty: it is not a checkpoint")
    if size < 8:
        raise CheckpointFormatError(f"{label} holds {size} bytes: too short to be a checkpoint")
    buffer = FlatbufferReader(data)
    identifier = buffer.identifier()
    if identifier != FILE_IDENTIFIER:
        kind = _IDENTIFIERS.get(identifier, "not an ONNX Runtime training checkpoint")
        raise CheckpointFormatError(f"{label} is {kind}: its file identifier (bytes 4-7) is {identifier!r}, a "
                                    f"checkpoint's is {FILE_IDENTIFIER!r}")
    try:
        return _index(buffer)
    except FlatbufferFormatError as exc:
        raise CheckpointFormatError(f"{label} is damaged or truncated: {exc}") from None
    except CheckpointFormatError as exc:
        raise CheckpointFormatError(f"{label}: {exc}") from None


def read_checkpoint(source: Source) -> Checkpoint:
    """The checkpoint in the file at ``source`` (a path) or in ``source`` (bytes). Arrays are read-only views
    of the bytes read (see the module's notes); with external data, of ``<checkpoint>.data`` too."""
    data, path, label = read_bytes(source)
    index = index_checkpoint(data, label)
    external = _ExternalFile(path, label) if index.has_external_data or _any_external(index) else None
    checkpoint_buffer = FlatbufferReader(data)

    def array(tensor: StoredTensor) -> np.ndarray:
        return _array(tensor, checkpoint_buffer, external, index.nominal, label)

    trainable = {tensor.name: array(tensor) for tensor in index.trainable}
    frozen = {tensor.name: array(tensor) for tensor in index.frozen}
    groups = {group.name: OptimizerGroup(group.learning_rate, group.step,
                                         {parameter: {moment.name: array(moment) for moment in moments}
                                          for parameter, moments in group.states})
              for group in index.groups}
    element_types = {tensor.name: tensor.data_type for tensor in index.trainable + index.frozen
                     if tensor.data_type in elements.CARRIERS}
    return Checkpoint(trainable, frozen, groups, dict(index.properties), index.nominal, element_types,
                      index.has_external_data)


# --- the tables ----------------------------------------------------------------------------------------------

def _index(buffer: FlatbufferReader) -> CheckpointIndex:
    root = buffer.root()
    version = buffer.scalar(root, CHECKPOINT_VERSION_FIELD, "i", 0)
    if version != CHECKPOINT_VERSION:
        raise CheckpointFormatError(f"checkpoint version {version} is not supported: ONNX Runtime 1.19 reads "
                                    f"version {CHECKPOINT_VERSION} only")
    trainable: List[StoredTensor] = []
    frozen: List[StoredTensor] = []
    nominal = has_external_data = False
    module_state = buffer.table(root, CHECKPOINT_MODULE_STATE, "the module state")
    if module_state is not None:
        nominal = bool(buffer.scalar(module_state, MODULE_IS_NOMINAL, "B", 0))
        has_external_data = bool(buffer.scalar(module_state, MODULE_HAS_EXTERNAL_DATA, "B", 0))
        for field, group, found in ((MODULE_REQUIRES_GRAD, "trainable", trainable), (MODULE_FROZEN, "frozen", frozen)):
            tables = buffer.tables(module_state, field, f"the {group} parameters")
            if tables is None:  # the runtime refuses a module state without either vector
                raise CheckpointFormatError(f"the module state has no vector of {group} parameters")
            found.extend(_tensor(buffer, table, f"{group} parameter {index}") for index, table in enumerate(tables))
    seen: Dict[str, str] = {}
    for group, tensors in (("trainable", trainable), ("frozen", frozen)):
        for tensor in tensors:
            if tensor.name in seen:
                raise CheckpointFormatError(f"the parameter {tensor.name!r} is stored twice ({seen[tensor.name]} "
                                            f"and {group})")
            seen[tensor.name] = group
    groups = [_group(buffer, table, index)
              for index, table in enumerate(buffer.tables(root, CHECKPOINT_OPTIMIZER_GROUPS, "the optimizer groups")
                                            or ())]
    if len({group.name for group in groups}) != len(groups):
        raise CheckpointFormatError("an optimizer group name is stored twice")
    bag = buffer.table(root, CHECKPOINT_PROPERTY_BAG, "the property bag")
    properties = _properties(buffer, bag) if bag is not None else []
    return CheckpointIndex(trainable, frozen, nominal, has_external_data, groups, properties)


def _text(buffer: FlatbufferReader, table: int, field: int, what: str) -> str:
    raw = buffer.string(table, field, what)
    if raw is None:
        raise CheckpointFormatError(f"{what} is missing")
    return raw.decode("utf-8", "surrogateescape")


def _tensor(buffer: FlatbufferReader, table: int, what: str) -> StoredTensor:
    name = _text(buffer, table, TENSOR_NAME, f"the name of {what}")
    what = f"the tensor {name!r}"
    dims_at = buffer.vector(table, TENSOR_DIMS, 8, f"the dims of {what}")
    if dims_at is None:
        raise CheckpointFormatError(f"{what} has no dims")
    dims = tuple(int(dim) for dim in buffer.array(dims_at[0], dims_at[1], np.dtype("<i8")))
    if any(dim < 0 for dim in dims):
        raise CheckpointFormatError(f"{what} has a negative dimension: {list(dims)}")
    data_type = int(buffer.scalar(table, TENSOR_DATA_TYPE, "i", 0))
    if data_type not in elements.NAMES:
        raise CheckpointFormatError(f"{what} has the unknown element type {data_type}")
    if data_type == elements.STRING:
        strings = buffer.strings(table, TENSOR_STRING_DATA, f"the strings of {what}")
        if strings is None:
            raise CheckpointFormatError(f"{what} is a string tensor without string data")
        return StoredTensor(name, data_type, dims, None, False, strings)
    raw = buffer.vector(table, TENSOR_RAW_DATA, 1, f"the data of {what}")
    if raw is not None:
        return StoredTensor(name, data_type, dims, raw, False, None)
    offset = int(buffer.scalar(table, TENSOR_EXTERNAL_DATA_OFFSET, "q", -1))
    if offset < 0:
        raise CheckpointFormatError(f"{what} holds neither raw data nor an offset into external data")
    return StoredTensor(name, data_type, dims, (offset, elements.stored_size(data_type, math.prod(dims))), True, None)


def _group(buffer: FlatbufferReader, table: int, index: int) -> StoredGroup:
    name = _text(buffer, table, GROUP_NAME, f"the name of optimizer group {index}")
    step = int(buffer.scalar(table, GROUP_STEP, "q", 0))
    learning_rate = float(buffer.scalar(table, GROUP_LEARNING_RATE, "f", 0.0))
    state_tables = buffer.tables(table, GROUP_STATES, f"the parameter states of optimizer group {name!r}")
    if state_tables is None:
        raise CheckpointFormatError(f"the optimizer group {name!r} has no parameter states")
    states = []
    for position, state in enumerate(state_tables):
        parameter = _text(buffer, state, STATE_PARAM_NAME, f"the parameter name of state {position} of {name!r}")
        moments = buffer.tables(state, STATE_MOMENTUMS, f"the moments of {parameter!r} in {name!r}")
        if moments is None:
            raise CheckpointFormatError(f"the optimizer state of {parameter!r} in {name!r} has no moments")
        states.append((parameter, [_tensor(buffer, moment, f"moment {i} of {parameter!r}")
                                   for i, moment in enumerate(moments)]))
    return StoredGroup(name, learning_rate, step, states)


def _properties(buffer: FlatbufferReader, bag: int) -> List[Tuple[str, PropertyValue]]:
    found: List[Tuple[str, PropertyValue]] = []
    for field, kind in ((BAG_INTS, "int"), (BAG_FLOATS, "float"), (BAG_STRINGS, "str")):
        for index, table in enumerate(buffer.tables(bag, field, f"the {kind} properties") or ()):
            name = _text(buffer, table, PROPERTY_NAME, f"the name of {kind} property {index}")
            value: PropertyValue
            if kind == "str":
                value = _text(buffer, table, PROPERTY_VALUE, f"the value of the property {name!r}")
            elif kind == "int":
                value = int(buffer.scalar(table, PROPERTY_VALUE, "q", 0))
            else:
                value = float(buffer.scalar(table, PROPERTY_VALUE, "f", 0.0))
            found.append((name, value))
    return found


# --- the data ------------------------------------------------------------------------------------------------

def _any_external(index: CheckpointIndex) -> bool:
    tensors = index.trainable + index.frozen + [moment for group in index.groups
                                               for _, moments in group.states for moment in moments]
    return any(tensor.external for tensor in tensors)


class _ExternalFile:
    """``<checkpoint>.data``, read once, when a tensor first needs it."""

    def __init__(self, path: Optional[Path], label: str) -> None:
        self.path = None if path is None else path.with_name(path.name + ".data")
        self.label = label
        self._reader: Optional[FlatbufferReader] = None

    def reader(self) -> FlatbufferReader:
        if self._reader is None:
            if self.path is None:
                raise CheckpointFormatError(f"{self.label} keeps its data in an external file, which only a "
                                            "checkpoint read from a path has (beside it, as <checkpoint>.data)")
            try:
                self._reader = FlatbufferReader(self.path.read_bytes())
            except FileNotFoundError:
                raise CheckpointFormatError(f"{self.label} keeps its data in {self.path}, which is missing") from None
        return self._reader


def _array(tensor: StoredTensor, buffer: FlatbufferReader, external: Optional[_ExternalFile], nominal: bool,
           label: str) -> np.ndarray:
    data_type = tensor.data_type
    if data_type == elements.STRING:
        assert tensor.strings is not None
        count = math.prod(tensor.dims)
        if len(tensor.strings) != count:
            raise CheckpointFormatError(f"{label}: the string tensor {tensor.name!r} holds {len(tensor.strings)} "
                                        f"strings; its dims {list(tensor.dims)} take {count}")
        values = np.empty(count, dtype=object)
        values[:] = [text.decode("utf-8", "surrogateescape") for text in tensor.strings]
        return values.reshape(tensor.dims)
    dtype = elements.NATIVE.get(data_type) or elements.CARRIERS[data_type]
    if nominal:  # names and shapes only: nothing is allocated
        return np.broadcast_to(np.zeros((), dtype=dtype), tensor.dims)
    assert tensor.data_at is not None
    offset, length = tensor.data_at
    count = math.prod(tensor.dims)
    expected = elements.stored_size(data_type, count)
    source = buffer
    where = label
    if tensor.external:
        assert external is not None
        source = external.reader()
        where = str(external.path)
        if offset + length > source.size:
            raise CheckpointFormatError(f"{label}: the data of {tensor.name!r} ({length} bytes at offset {offset}) "
                                        f"runs past the end of {where} ({source.size} bytes)")
    if length != expected:
        raise CheckpointFormatError(f"{label}: the tensor {tensor.name!r} holds {length} bytes of data; its dims "
                                    f"{list(tensor.dims)} and type {elements.name_of(data_type)} take {expected}")
    if data_type in elements.FOUR_BIT_TYPES:
        packed = source.array(offset, length, np.dtype("u1"))
        unpacked = elements.unpack_four_bit(packed, count, data_type == elements.INT4).reshape(tensor.dims)
        unpacked.flags.writeable = False
        return unpacked
    return source.array(offset, count, dtype).reshape(tensor.dims)
