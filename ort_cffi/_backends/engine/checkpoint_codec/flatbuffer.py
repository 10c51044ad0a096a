"""Flatbuffers, written and read: ``BackToFrontLayout`` lays one out byte for byte as FlatBuffers' C++
``FlatBufferBuilder`` does, without holding the bulk data (the checkpoint writer's serializer);
``FlatbufferReader`` follows a finished one with every offset bounds-checked (the checkpoint reader's).

The C++ builder (which ONNX Runtime uses to write checkpoints) fills its buffer from the back: the first
object created ends up last in the file, and every offset or padding depends only on what was created
before it. This class replays the builder's rules (alignment, vtables shared between equal tables,
default scalars left out) on a list of pieces kept in creation order, so that the layout is known before a
byte is written. Small pieces are bytes; a bulk piece (a tensor's data) is only its length and a way to fetch
it, asked for when the file is written. The whole buffer therefore never exists in memory at once.

The ``flatbuffers`` package's ``Builder`` writes the same bytes, but into one buffer that must hold the
whole file (and is copied on every growth): for a 100M-parameter model that is one more copy of the weights.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

# A piece of the buffer: bytes, or the length of bulk data and a function that yields it in chunks.
BulkSource = Callable[[], Iterator[Union[bytes, memoryview]]]
Piece = Union[bytes, bytearray, Tuple[int, BulkSource]]

UOFFSET = 4  # uoffset_t / soffset_t
VOFFSET = 2  # voffset_t
MAX_BUFFER_SIZE = 2**31 - 1  # FLATBUFFERS_MAX_BUFFER_SIZE: offsets are 32-bit signed


class FlatbufferTooLargeError(ValueError):
    """The flatbuffer would pass FlatBuffers' 2 GiB limit."""


class BackToFrontLayout:
    """Objects are created as with ``FlatBufferBuilder``; each creation returns the object's offset, counted
    (as the C++ builder counts it) from the end of the buffer."""

    def __init__(self) -> None:
        self._pieces: List[Piece] = []  # in creation order: the file holds them in reverse
        self._size = 0  # bytes from the end of the buffer: FlatBufferBuilder::GetSize()
        self._min_align = 1
        self._vtables: Dict[bytes, int] = {}  # vtable bytes -> its offset, for sharing equal vtables
        self._table_start: Optional[int] = None
        self._fields: List[Tuple[int, int]] = []  # (field index, offset) of the open table

    # --- low level -----------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size

    def _push(self, piece: Piece, length: int) -> None:
        self._pieces.append(piece)
        self._size += length
        if self._size > MAX_BUFFER_SIZE:
            raise FlatbufferTooLargeError(
                f"the flatbuffer would hold more than {MAX_BUFFER_SIZE} bytes, FlatBuffers' limit")

    def _pad(self, length: int, alignment: int) -> None:
        self._min_align = max(self._min_align, alignment)
        padding = -(self._size + length) % alignment
        if padding:
            self._push(bytes(padding), padding)

    def _pre_align(self, length: int, alignment: int) -> None:
        """Pad so that ``length`` bytes pushed next end aligned (``PreAlign``). Nothing at all for 0 bytes: an
        empty vector does not even raise the buffer's final alignment (the C++ builder returns early there,
        the Python package's ``Prep`` does not)."""
        if length:
            self._pad(length, alignment)

    def _align(self, alignment: int) -> None:
        self._pad(0, alignment)

    def _push_scalar(self, fmt: str, value: Union[int, float]) -> int:
        data = struct.pack("<" + fmt, value)
        self._align(len(data))
        self._push(data, len(data))
        return self._size

    def _refer_to(self, offset: int) -> int:
        """The uoffset that, written next, points at ``offset`` (``ReferTo``)."""
        self._align(UOFFSET)
        return self._size + UOFFSET - offset

    # --- objects ---------------------------------------------------------------------------------------------
    def string(self, text: bytes) -> int:
        self._not_nested()
        self._pre_align(len(text) + 1, UOFFSET)
        self._push(b"\0", 1)
        self._push(bytes(text), len(text))
        return self._push_scalar("I", len(text))

    def scalar_vector(self, data: bytes, element_size: int) -> int:
        """A vector of little-endian scalars, given as its bytes."""
        self._not_nested()
        self._pre_align(len(data), max(UOFFSET, element_size))
        self._push(data, len(data))
        return self._push_scalar("I", len(data) // element_size)

    def bulk_byte_vector(self, length: int, source: BulkSource) -> int:
        """A ``[ubyte]`` vector whose bytes are fetched from ``source`` only when the buffer is written."""
        self._not_nested()
        self._pre_align(length, UOFFSET)
        self._push((length, source), length)
        return self._push_scalar("I", length)

    def offset_vector(self, offsets: Sequence[int]) -> int:
        self._not_nested()
        self._pre_align(len(offsets) * UOFFSET, UOFFSET)
        for offset in reversed(offsets):
            self._push_scalar("I", self._refer_to(offset))
        return self._push_scalar("I", len(offsets))

    # --- tables ----------------------------------------------------------------------------------------------
    def _not_nested(self) -> None:
        if self._table_start is not None:
            raise AssertionError("an object was created inside a table (FlatBuffers' NotNested)")

    def start_table(self) -> None:
        self._not_nested()
        self._table_start = self._size
        self._fields = []

    def add_scalar(self, field: int, fmt: str, value: Union[int, float], default: Union[int, float] = 0) -> None:
        """A scalar field; left out when it equals its default, as the builder does without force_defaults."""
        if struct.unpack("<" + fmt, struct.pack("<" + fmt, value))[0] == default:
            return
        self._fields.append((field, self._push_scalar(fmt, value)))

    def add_offset(self, field: int, offset: int) -> None:
        """A field pointing at an object created before the table; a null offset (0) is left out."""
        if offset == 0:
            return
        self._fields.append((field, self._push_scalar("I", self._refer_to(offset))))

    def end_table(self) -> int:
        if self._table_start is None:
            raise AssertionError("end_table without start_table")
        self._align(UOFFSET)
        placeholder = bytearray(UOFFSET)  # the soffset to the vtable, known once the vtable is placed
        self._push(placeholder, UOFFSET)
        table = self._size
        vtable_size = max(max((UOFFSET + VOFFSET * field for field, _ in self._fields), default=0) + VOFFSET,
                          2 * VOFFSET)
        entries = [0] * (vtable_size // VOFFSET)
        entries[0], entries[1] = vtable_size, table - self._table_start
        for field, location in self._fields:
            entries[2 + field] = table - location
        vtable = struct.pack(f"<{len(entries)}H", *entries)
        self._table_start = None
        shared = self._vtables.get(vtable)
        if shared is None:
            self._push(vtable, len(vtable))
            shared = self._vtables[vtable] = self._size
        struct.pack_into("<i", placeholder, 0, shared - table)
        return table

    def finish(self, root: int, file_identifier: bytes) -> None:
        self._not_nested()
        self._pre_align(UOFFSET + len(file_identifier), self._min_align)
        self._push(bytes(file_identifier), len(file_identifier))
        self._push_scalar("I", self._refer_to(root))

    # --- output ----------------------------------------------------------------------------------------------
    def chunks(self) -> Iterator[Union[bytes, bytearray, memoryview]]:
        """The finished buffer, front to back, bulk data fetched piece by piece."""
        for piece in reversed(self._pieces):
            if isinstance(piece, tuple):
                length, source = piece
                delivered = 0
                for chunk in source():
                    delivered += len(chunk)
                    yield chunk
                    del chunk  # before the next one is fetched: one tensor's bytes at a time
                if delivered != length:
                    raise ValueError(f"bulk data gave {delivered} bytes where {length} were laid out")
            else:
                yield piece

    def write_to(self, stream: BinaryIO) -> int:
        for chunk in self.chunks():
            stream.write(chunk)
            del chunk
        return self._size

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())


# --- reading ---------------------------------------------------------------------------------------------------

class FlatbufferFormatError(ValueError):
    """A flatbuffer that cannot be followed: an offset, a vector or a string that leaves the buffer."""


Buffer = Union[bytes, bytearray, memoryview]


class FlatbufferReader:
    """Reads the tables of a finished flatbuffer by field index (their order in the schema), as the generated
    accessors do, but every position is checked against the buffer first, as FlatBuffers' ``Verifier`` checks
    them: a damaged or foreign file gives ``FlatbufferFormatError`` saying what did not fit, never a read
    outside the buffer. Bulk data is returned as views of the buffer, not copies."""

    def __init__(self, data: Buffer) -> None:
        self.data = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
        self.size = len(self.data)

    def _unpack(self, fmt: str, at: int, what: str) -> int:
        if at < 0 or at + struct.calcsize(fmt) > self.size:
            raise FlatbufferFormatError(f"{what} at byte {at} lies outside the {self.size} bytes of the buffer")
        return struct.unpack_from("<" + fmt, self.data, at)[0]

    def root(self) -> int:
        """The position of the root table."""
        return self._indirect(0, "the root table")

    def identifier(self) -> bytes:
        return bytes(self.data[4:8])

    def _indirect(self, at: int, what: str) -> int:
        target = at + self._unpack("I", at, f"the offset to {what}")
        if target >= self.size:
            raise FlatbufferFormatError(f"{what} (byte {target}) lies outside the {self.size} bytes of the buffer")
        return target

    def _field(self, table: int, field: int) -> Optional[int]:
        """The position of field ``field`` of the table at ``table``; None when the table leaves it out."""
        vtable = table - self._unpack("i", table, "a table")
        vtable_size = self._unpack("H", vtable, "a table's vtable")
        if vtable_size < 4 or vtable_size % 2:
            raise FlatbufferFormatError(f"the vtable at byte {vtable} has a size of {vtable_size} bytes")
        entry = 4 + 2 * field
        if entry + 2 > vtable_size:
            return None
        relative = self._unpack("H", vtable + entry, "a vtable entry")
        table_size = self._unpack("H", vtable + 2, "a table's size")
        if relative == 0:
            return None
        if relative >= table_size:
            raise FlatbufferFormatError(f"field {field} of the table at byte {table} lies past the table's end")
        return table + relative

    def table(self, table: int, field: int, what: str) -> Optional[int]:
        at = self._field(table, field)
        return None if at is None else self._indirect(at, what)

    def scalar(self, table: int, field: int, fmt: str, default: Union[int, float]) -> Union[int, float]:
        at = self._field(table, field)
        return default if at is None else self._unpack(fmt, at, f"field {field} of the table at byte {table}")

    def vector(self, table: int, field: int, element_size: int, what: str) -> Optional[Tuple[int, int]]:
        """(position of the first element, element count) of a vector field; None when absent."""
        at = self._field(table, field)
        if at is None:
            return None
        start = self._indirect(at, what)
        count = self._unpack("I", start, f"the length of {what}")
        if start + 4 + count * element_size > self.size:
            raise FlatbufferFormatError(f"{what} ({count} elements of {element_size} bytes from byte {start + 4}) "
                                        f"runs past the {self.size} bytes of the buffer")
        return start + 4, count

    def tables(self, table: int, field: int, what: str) -> Optional[List[int]]:
        """The tables of a vector of tables; None when the vector is absent."""
        found = self.vector(table, field, UOFFSET, what)
        if found is None:
            return None
        start, count = found
        return [self._indirect(start + UOFFSET * index, f"{what}[{index}]") for index in range(count)]

    def _string_at(self, start: int, what: str) -> bytes:
        length = self._unpack("I", start, f"the length of {what}")
        end = start + 4 + length
        if end >= self.size or self.data[end] != 0:
            raise FlatbufferFormatError(f"{what} ({length} bytes from byte {start + 4}) runs past the buffer or "
                                        "lacks its terminating zero")
        return bytes(self.data[start + 4:end])

    def string(self, table: int, field: int, what: str) -> Optional[bytes]:
        at = self._field(table, field)
        return None if at is None else self._string_at(self._indirect(at, what), what)

    def strings(self, table: int, field: int, what: str) -> Optional[List[bytes]]:
        found = self.vector(table, field, UOFFSET, what)
        if found is None:
            return None
        start, count = found
        return [self._string_at(self._indirect(start + UOFFSET * index, f"{what}[{index}]"), f"{what}[{index}]")
                for index in range(count)]

    def array(self, start: int, count: int, dtype: np.dtype) -> np.ndarray:
        """``count`` elements of ``dtype`` from ``start``: a read-only view of the buffer, no copy."""
        view = np.frombuffer(self.data, dtype=dtype, count=count, offset=start) if count else np.empty(0, dtype)
        view.flags.writeable = False
        return view
