"""The protobuf wire format, as far as ort_cffi reads ONNX models without the ``onnx`` package: the fields
of a message, one after the other, each a (field number, wire type, value). The facade reads a few fields
of ``ModelProto`` with it (the graph's inputs for input checks, the tensors' external data for the
confinement check); every other field is skipped by its length without being decoded.

It follows the grammar protobuf's own parsers accept (varints, 64- and 32-bit fields, length-delimited
fields, and the deprecated groups, which a parser skips as unknown fields) and refuses what they refuse
(a truncated field, wire types 6 and 7, field number 0, an unbalanced group).
"""
from __future__ import annotations

from typing import Any, Iterator, Tuple

VARINT, FIXED64, LENGTH_DELIMITED, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5


class Malformed(Exception):
    """The bytes are not a protobuf message (what a protobuf parser would refuse too)."""


def varint(data: memoryview, pos: int) -> Tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def int64(value: int) -> int:
    """A varint read as a signed int64 (two's complement)."""
    return value - (1 << 64) if value >> 63 else value


def _skip_group(data: memoryview, pos: int, number: int) -> int:
    """The position after the group of field ``number`` that starts at ``pos`` (its fields, nested
    groups included, up to the matching end-group key)."""
    end = len(data)
    depth = [number]
    while depth:
        if pos >= end:
            raise Malformed("unterminated group")
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise Malformed("field number 0")
        if wire == VARINT:
            _, pos = varint(data, pos)
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        elif wire == LENGTH_DELIMITED:
            length, pos = varint(data, pos)
            pos += length
        elif wire == START_GROUP:
            depth.append(field)
        elif wire == END_GROUP:
            if depth.pop() != field:
                raise Malformed("mismatched end of group")
        else:
            raise Malformed(f"wire type {wire}")
        if pos > end:
            raise Malformed("truncated field")
    return pos


def fields(data: memoryview) -> Iterator[Tuple[int, int, Any]]:
    """(field number, wire type, value) of each field of a message: an int for varints, a memoryview
    of the payload for length-delimited fields; fixed-width fields and groups are skipped. One-byte
    varints (most keys and lengths) are read inline."""
    pos = 0
    end = len(data)
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed("field number 0")
        if wire == LENGTH_DELIMITED:
            length = data[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = varint(data, pos)
            if pos + length > end:
                raise Malformed("truncated field")
            yield number, wire, data[pos:pos + length]
            pos += length
        elif wire == VARINT:
            value, pos = varint(data, pos)
            yield number, wire, value
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        elif wire == START_GROUP:
            pos = _skip_group(data, pos, number)
        else:
            raise Malformed(f"wire type {wire}" if wire != END_GROUP else "end of a group that never started")
    if pos != end:
        raise Malformed("truncated fixed-width field")


def field_spans(data: memoryview) -> Iterator[Tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field of a message, the key included, so that a
    field can be copied as it is; for a length-delimited field the payload is ``payload(data, start, end)``."""
    pos = 0
    end = len(data)
    while pos < end:
        start = pos
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed("field number 0")
        if wire == LENGTH_DELIMITED:
            length, pos = varint(data, pos)
            pos += length
        elif wire == VARINT:
            _, pos = varint(data, pos)
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        elif wire == START_GROUP:
            pos = _skip_group(data, pos, number)
        else:
            raise Malformed(f"wire type {wire}" if wire != END_GROUP else "end of a group that never started")
        if pos > end:
            raise Malformed("truncated field")
        yield number, wire, start, pos


def payload(data: memoryview, start: int, end: int) -> memoryview:
    """The payload of the length-delimited field that ``field_spans`` found at ``start:end``."""
    _, pos = varint(data, start)
    _, pos = varint(data, pos)
    return data[pos:end]


def encode_varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(number: int, content: bytes) -> bytes:
    """Field ``number`` holding ``content`` (a message, bytes or a string)."""
    return encode_varint(number << 3 | LENGTH_DELIMITED) + encode_varint(len(content)) + content
