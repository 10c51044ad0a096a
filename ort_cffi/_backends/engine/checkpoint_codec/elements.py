"""The element types a checkpoint tensor may have (``TensorDataType`` of ONNX Runtime's ``ort.fbs``, ONNX's
numbers) and the numpy arrays that hold them.

numpy stores most of them natively. Those it has no dtype for are held in a carrier and named in
``Checkpoint.element_types``: bfloat16 as its uint16 bits, the float8 types as their uint8 bits, the 4-bit
types one element per byte (int8 for INT4, uint8 for UINT4; the file packs two per byte, low nibble first).
Strings are object arrays of ``str`` (bytes that are not UTF-8 survive as surrogate escapes).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

STRING = 8
BFLOAT16, UINT4, INT4 = 16, 21, 22
FLOAT8_TYPES = (17, 18, 19, 20)  # FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ
FOUR_BIT_TYPES = (UINT4, INT4)

NAMES: Dict[int, str] = {
    1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64", 8: "STRING", 9: "BOOL",
    10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16",
    17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
}
# The element types whose dtype says them (little-endian, as the file stores them).
NATIVE: Dict[int, np.dtype] = {
    1: np.dtype("<f4"), 2: np.dtype("u1"), 3: np.dtype("i1"), 4: np.dtype("<u2"), 5: np.dtype("<i2"),
    6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 10: np.dtype("<f2"), 11: np.dtype("<f8"),
    12: np.dtype("<u4"), 13: np.dtype("<u8"), 14: np.dtype("<c8"), 15: np.dtype("<c16"),
}
# The carriers of the others (see the module's notes).
CARRIERS: Dict[int, np.dtype] = {BFLOAT16: np.dtype("<u2"), UINT4: np.dtype("u1"), INT4: np.dtype("i1"),
                                 **{kind: np.dtype("u1") for kind in FLOAT8_TYPES}}
# The element types ONNX Runtime 1.19's checkpoint loader takes (its tensor loader dispatches on these only).
RUNTIME_LOADS = (1, 2, 3, 4, 5, 6, 7, 9, 11, 12, 13)


def name_of(data_type: int) -> str:
    return NAMES.get(data_type, f"element type {data_type}")


def type_of(dtype: np.dtype) -> Optional[int]:
    """The element type a native dtype stores; None for a dtype no checkpoint type has."""
    if dtype.kind == "O":
        return STRING
    plain = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    for data_type, native in NATIVE.items():
        if native == plain:
            return data_type
    return None


def stored_size(data_type: int, count: int) -> int:
    """Bytes of raw data that ``count`` elements take in the file."""
    if data_type in FOUR_BIT_TYPES:
        return (count + 1) // 2
    return count * (NATIVE.get(data_type) or CARRIERS[data_type]).itemsize


def unpack_four_bit(packed: np.ndarray, count: int, signed: bool) -> np.ndarray:
    """One element per byte from two per byte (low nibble first); signed nibbles are sign-extended."""
    pairs = np.empty((packed.size, 2), dtype=np.uint8)
    pairs[:, 0] = packed & 0x0F
    pairs[:, 1] = packed >> 4
    values = pairs.reshape(-1)[:count]
    if signed:
        return ((values.astype(np.int8) ^ 0x08) - 0x08).astype(np.int8)
    return values.copy()


def pack_four_bit(values: np.ndarray) -> bytes:
    nibbles = (values.reshape(-1).astype(np.int16) & 0x0F).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.concatenate([nibbles, np.zeros(1, np.uint8)])
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()
