"""A flatbuffer laid out byte for byte as FlatBuffers' C++ ``FlatBufferBuilder`` lays it out, without holding
the bulk data: the checkpoint writer's serializer.

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
