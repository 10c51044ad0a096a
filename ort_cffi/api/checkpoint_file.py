"""What a checkpoint file holds, read without the runtime: parameter names, shapes and element types, which
are trainable, whether it is nominal, and the names of its properties.

ONNX Runtime's Python layer lists a checkpoint's parameters and properties (``CheckpointState.parameters``,
``properties``, their ``len`` and iteration) from its C++ objects; the training C API has no call that lists
them (it reads one parameter or property by name, and a parameter only through a session). So
``ort_cffi.api`` reads the names from the file the runtime loaded, once, after the runtime accepted it.

The file is a flatbuffer (identifier ``ODTC``; schema ``ort_training_checkpoint.fbs`` in ONNX Runtime's
source, docs/internals/runtime.md): a root table ``Checkpoint`` {version, module_state, optimizer_groups,
property_bag}; ``ModuleState`` {requires_grad_params, frozen_params, is_nominal_state, has_external_data};
``Tensor`` {name, doc_string, dims, data_type, raw_data, ...}; ``PropertyBag`` {ints, floats, strings}, each a
vector of {name, value}. This reader follows only those fields, by their slots, with every offset
bounds-checked: a file it cannot follow gives ``None`` (the names are then unknown), never an exception from
deep inside.
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from ort_cffi import OnnxTensorType
from ort_cffi._facade.tensors.element_types import NUMPY_DTYPES

_IDENTIFIER = b"ODTC"


class StoredParameter(NamedTuple):
    """One parameter as the file stores it; ``data_at`` is (offset, length) of its raw bytes in the file, or
    None (a nominal checkpoint, or data kept outside the file)."""

    name: str
    requires_grad: bool
    dims: Tuple[int, ...]
    onnx_type: int
    data_at: Optional[Tuple[int, int]]


class FileStamp(NamedTuple):
    """Enough of a file's identity to tell it was replaced or rewritten since it was read."""

    inode: int
    size: int
    mtime_ns: int

    @staticmethod
    def of(path: str) -> Optional[FileStamp]:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return FileStamp(stat.st_ino, stat.st_size, stat.st_mtime_ns)


class CheckpointLayout(NamedTuple):
    """What ``read_layout`` found in a checkpoint file."""

    path: str
    stamp: Optional[FileStamp]
    parameters: Dict[str, StoredParameter]
    nominal: bool
    property_kinds: Tuple[Tuple[str, str], ...]  # (name, "int" | "float" | "str")

    def read_parameter(self, name: str) -> Optional[np.ndarray]:
        """The parameter's values as the file stores them, read again from the file; None when the file
        changed since it was read, holds no data for it, or its type has no numpy dtype."""
        stored = self.parameters[name]
        dtype = NUMPY_DTYPES.get(OnnxTensorType.mapFromInt(stored.onnx_type)) if stored.onnx_type else None
        if stored.data_at is None or dtype is None or self.stamp is None or FileStamp.of(self.path) != self.stamp:
            return None
        offset, length = stored.data_at
        count = int(np.prod(stored.dims)) if stored.dims else 1
        if count * dtype.itemsize != length:
            return None
        with open(self.path, "rb") as file:
            file.seek(offset)
            raw = file.read(length)
        if len(raw) != length:
            return None
        return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(stored.dims)


class _Buffer:
    """Bounds-checked little-endian reads of a flatbuffer: every failure is ``ValueError``."""

    def __init__(self, data: Union[bytes, mmap.mmap]) -> None:
        self.data = data

    def _unpack(self, fmt: str, at: int) -> int:
        if at < 0 or at + struct.calcsize(fmt) > len(self.data):
            raise ValueError("offset out of the buffer")
        return int(struct.unpack_from(fmt, self.data, at)[0])

    def field(self, table: int, slot: int) -> Optional[int]:
        """The absolute position of field ``slot`` of the table at ``table``, or None when absent."""
        vtable = table - self._unpack("<i", table)
        vtable_size = self._unpack("<H", vtable)
        entry = 4 + 2 * slot
        if entry + 2 > vtable_size:
            return None
        relative = self._unpack("<H", vtable + entry)
        return table + relative if relative else None

    def indirect(self, at: int) -> int:
        return at + self._unpack("<I", at)

    def table(self, table: int, slot: int) -> Optional[int]:
        at = self.field(table, slot)
        return None if at is None else self.indirect(at)

    def vector(self, table: int, slot: int) -> Tuple[int, int]:
        """(position of the first element, element count) of a vector field; (0, 0) when absent."""
        at = self.field(table, slot)
        if at is None:
            return 0, 0
        start = self.indirect(at)
        count = self._unpack("<I", start)
        if count > len(self.data):
            raise ValueError("vector longer than the buffer")
        return start + 4, count

    def tables(self, table: int, slot: int) -> List[int]:
        start, count = self.vector(table, slot)
        return [self.indirect(start + 4 * i) for i in range(count)]

    def string(self, table: int, slot: int) -> str:
        start, count = self.vector(table, slot)
        if start + count > len(self.data):
            raise ValueError("string past the buffer")
        return self.data[start:start + count].decode("utf-8")

    def scalar(self, table: int, slot: int, fmt: str, default: int = 0) -> int:
        at = self.field(table, slot)
        return default if at is None else self._unpack(fmt, at)


def _parameters(buffer: _Buffer, module_state: int) -> Dict[str, StoredParameter]:
    found: Dict[str, StoredParameter] = {}
    for slot, requires_grad in ((0, True), (1, False)):
        for tensor in buffer.tables(module_state, slot):
            name = buffer.string(tensor, 0)
            dims_at, rank = buffer.vector(tensor, 2)
            if dims_at + 8 * rank > len(buffer.data):
                raise ValueError("dims past the buffer")
            dims = tuple(int(struct.unpack_from("<q", buffer.data, dims_at + 8 * i)[0]) for i in range(rank))
            data_start, data_length = buffer.vector(tensor, 4)
            data_at = (data_start, data_length) if data_length and data_start + data_length <= len(buffer.data) else None
            found[name] = StoredParameter(name, requires_grad, dims, buffer.scalar(tensor, 3, "<i"), data_at)
    return found


def read_layout(path: str) -> Optional[CheckpointLayout]:
    """The layout of the checkpoint file at ``path``; None when the file cannot be read or followed."""
    stamp = FileStamp.of(path)
    try:
        # Mapped, not read: only the pages of the tables and names are touched, so that reading the layout
        # of a checkpoint of hundreds of MB costs kilobytes (an empty file cannot be mapped: ValueError).
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[4:8] != _IDENTIFIER:
                return None
            buffer = _Buffer(data)
            root = buffer.indirect(0)
            module_state = buffer.table(root, 1)
            parameters = _parameters(buffer, module_state) if module_state is not None else {}
            nominal = bool(buffer.scalar(module_state, 2, "<B")) if module_state is not None else False
            kinds: List[Tuple[str, str]] = []
            bag = buffer.table(root, 3)
            if bag is not None:
                for slot, kind in ((0, "int"), (1, "float"), (2, "str")):
                    kinds.extend((buffer.string(entry, 0), kind) for entry in buffer.tables(bag, slot))
    except (OSError, ValueError, UnicodeDecodeError, struct.error):
        return None
    return CheckpointLayout(path, stamp, parameters, nominal, tuple(kinds))
