"""Facade: ``Fp16Conversions`` (Java's ``ai.onnxruntime.platform.Fp16Conversions``): conversions
between IEEE half precision (fp16), bfloat16 and float32, bit-exact to Java's.

Every function takes a scalar or a numpy array and works on whole arrays at once (integer bit
operations in numpy, no per-element Python). 16-bit values are their raw bits, as Java's ``short``:
``np.int16`` out, any integer in (only its low 16 bits count). Floats out are ``np.float32``.

Java's semantics, kept exactly:

- ``fp16ToFloat`` is MLAS's conversion (``mlasFp16ToFloat``, what Java up to 19 uses), exact for
  every value, subnormals included; NaN payloads are kept. On Java 20+ Java's ``fp16ToFloat`` calls
  ``Float.float16ToFloat`` instead, which (measured with OpenJDK 25 on x86-64) gives the same bits
  for all inputs but the 1022 signaling NaNs (0x7c01-0x7dff and 0xfc01-0xfdff), which it quiets.
- ``floatToFp16`` is MLAS's rounding (``mlasFloatToFp16``, what Java up to 19 uses): round to
  nearest even, overflow to infinity, and every NaN to the one fp16 NaN 0x7e00 (Java reads the
  float with ``floatToIntBits``, which makes every NaN the canonical one). Java 20+'s
  ``Float.floatToFloat16`` differs only on NaNs, whose sign and payload it keeps.
- ``bf16ToFloat`` puts the 16 bits on top of a float (exact); ``floatToBf16`` rounds to nearest
  even by adding ``0x7fff + lsb`` (every NaN → 0x7fc0; subnormals are not special-cased, as in Java).
"""
from __future__ import annotations

from typing import Any

import numpy as np

_U32 = np.uint32
_SHIFTED_EXP = _U32(0x7C00 << 13)  # fp16 exponent mask, moved to a float's exponent position
_EXP_ADJUST = _U32((127 - 15) << 23)
_INF_NAN_ADJUST = _U32((128 - 16) << 23)
_MAGIC = np.array([113 << 23], _U32).view(np.float32)[0]  # 2^-14: renormalizes fp16 subnormals
_F16_MAX = _U32((127 + 16) << 23)  # floats at or above 2^16 become infinity
_F32_INFINITY = _U32(0x7F800000)
_DENORM_MAGIC_BITS = _U32(((127 - 15) + (23 - 10) + 1) << 23)
_DENORM_MAGIC = np.array([_DENORM_MAGIC_BITS], _U32).view(np.float32)[0]
_ROUNDING_CONST = _U32((((15 - 127) << 23) + 0xFFF) & 0xFFFFFFFF)  # negative in Java: wraps the same in uint32
_CANONICAL_NAN = _U32(0x7FC00000)  # Float.floatToIntBits(NaN)


def _bits16(values: Any) -> np.ndarray:
    """The low 16 bits of integers, as uint32 (a fresh array; 1-D at least)."""
    array = np.asarray(values)
    if array.dtype.kind not in "iub":
        raise TypeError(f"16-bit values are given as integers (their bits), not {array.dtype}")
    return np.atleast_1d(array).astype(np.uint32) & _U32(0xFFFF)


def _float_bits(values: Any) -> np.ndarray:
    """``Float.floatToIntBits`` of float32 values (every NaN made 0x7fc00000), as uint32 (1-D at least)."""
    floats = np.atleast_1d(np.asarray(values, dtype=np.float32))
    bits = floats.view(np.uint32).copy()
    bits[np.isnan(floats)] = _CANONICAL_NAN
    return bits


def _shaped(result: np.ndarray, like: Any) -> Any:
    """``result`` in the shape of the input: a numpy scalar for a scalar input."""
    shape = np.shape(like)
    return result.reshape(shape) if shape else result[0]


def mlas_fp16_to_float(values: Any) -> Any:
    """fp16 bits → float32 (MLAS_Half2Float); array in, array out."""
    half = _bits16(values)
    bits = (half & _U32(0x7FFF)) << _U32(13)
    exponent = bits & _SHIFTED_EXP
    bits += _EXP_ADJUST
    bits[exponent == _SHIFTED_EXP] += _INF_NAN_ADJUST  # infinity and NaN keep an all-ones exponent
    low = exponent == 0  # zero and subnormals: renormalize through a float subtraction
    if low.any():
        renormalized = (bits[low] + _U32(1 << 23)).view(np.float32) - _MAGIC
        bits[low] = renormalized.view(np.uint32)
    bits |= (half & _U32(0x8000)) << _U32(16)
    return _shaped(bits.view(np.float32), values)


def mlas_float_to_fp16(values: Any) -> Any:
    """float32 → fp16 bits (MLAS_Float2Half, as Java ports it): array in, int16 array out."""
    bits = _float_bits(values)
    sign = bits & _U32(0x80000000)
    bits ^= sign
    out = np.empty_like(bits)
    special = bits >= _F16_MAX  # infinity, NaN, or too large
    out[special] = np.where(bits[special] > _F32_INFINITY, _U32(0x7E00), _U32(0x7C00))
    small = ~special & (bits < _U32(113 << 23))  # becomes a subnormal or zero: round by a float addition
    total = bits[small].view(np.float32) + _DENORM_MAGIC
    out[small] = total.view(np.uint32) - _DENORM_MAGIC_BITS
    normal = ~(special | small)
    rounded = bits[normal] + _ROUNDING_CONST + ((bits[normal] >> _U32(13)) & _U32(1))
    out[normal] = rounded >> _U32(13)
    out = (out & _U32(0xFFFF)) | (sign >> _U32(16))
    return _shaped(out.astype(np.uint16).view(np.int16), values)


def bf16_to_float(values: Any) -> Any:
    """bfloat16 bits → float32 (the bits on top of a float: exact)."""
    return _shaped((_bits16(values) << _U32(16)).view(np.float32), values)


def float_to_bf16(values: Any) -> Any:
    """float32 → bfloat16 bits, rounding to nearest even as Java does: int16 array out."""
    bits = _float_bits(values)
    bits += _U32(0x7FFF) + ((bits >> _U32(16)) & _U32(1))
    return _shaped((bits >> _U32(16)).astype(np.uint16).view(np.int16), values)


class Fp16Conversions:
    """Static conversions between fp16, bfloat16 and float32, bit-exact to Java's.

    Each takes a scalar or a numpy array (of bits, as integers, for the 16-bit side) and returns the
    same kind: `np.float32` values, or `np.int16` bits (Java's `short`). Whole arrays are converted at
    once. The results are new: the input is never changed and never shared.

    Java: `ai.onnxruntime.platform.Fp16Conversions`.
    """

    @staticmethod
    def fp16ToFloat(input: Any) -> Any:
        """fp16 bits → float32, exact (MLAS's conversion, as Java up to version 19).

        Java 20 and later quiet the 1022 signaling NaNs; the other values agree.

        Java: `static float fp16ToFloat(short input)`.

        Args:
            input: fp16 bits: an integer or an integer numpy array (only the low 16 bits count).

        Returns:
            A new `np.float32` value, or a new float32 array of the input's shape, that the caller owns.

        Raises:
            TypeError: `input` is not integers (e.g. floats, which are no bits).
        """
        return mlas_fp16_to_float(input)

    @staticmethod
    def floatToFp16(input: Any) -> Any:
        """float32 → fp16 bits, rounded to nearest even (MLAS's rounding, as Java up to version 19).

        Overflow gives infinity and every NaN the one fp16 NaN 0x7e00 (Java 20 and later keep NaN
        payloads).

        Java: `static short floatToFp16(float input)`.

        Args:
            input: A number or a numpy array of numbers, read as float32.

        Returns:
            A new `np.int16` value (the bits), or a new int16 array of the input's shape, that the
                caller owns.

        Raises:
            ValueError: `input` cannot be read as float32 (numpy's error).
        """
        return mlas_float_to_fp16(input)

    @staticmethod
    def mlasFp16ToFloat(input: Any) -> Any:
        """fp16 bits → float32, MLAS's conversion (exact; the same as `fp16ToFloat`).

        Java: `static float mlasFp16ToFloat(short input)`.

        Args:
            input: fp16 bits: an integer or an integer numpy array (only the low 16 bits count).

        Returns:
            A new `np.float32` value, or a new float32 array of the input's shape, that the caller owns.

        Raises:
            TypeError: `input` is not integers (e.g. floats, which are no bits).
        """
        return mlas_fp16_to_float(input)

    @staticmethod
    def mlasFloatToFp16(input: Any) -> Any:
        """float32 → fp16 bits, MLAS's rounding to nearest even (the same as `floatToFp16`).

        Java: `static short mlasFloatToFp16(float input)`.

        Args:
            input: A number or a numpy array of numbers, read as float32.

        Returns:
            A new `np.int16` value (the bits), or a new int16 array of the input's shape, that the
                caller owns.

        Raises:
            ValueError: `input` cannot be read as float32 (numpy's error).
        """
        return mlas_float_to_fp16(input)

    @staticmethod
    def bf16ToFloat(input: Any) -> Any:
        """bfloat16 bits → float32, exact: the 16 bits on top of a float.

        Java: `static float bf16ToFloat(short input)`.

        Args:
            input: bfloat16 bits: an integer or an integer numpy array (only the low 16 bits count).

        Returns:
            A new `np.float32` value, or a new float32 array of the input's shape, that the caller owns.

        Raises:
            TypeError: `input` is not integers (e.g. floats, which are no bits).
        """
        return bf16_to_float(input)

    @staticmethod
    def floatToBf16(input: Any) -> Any:
        """float32 → bfloat16 bits, rounded to nearest even; every NaN gives 0x7fc0.

        Java: `static short floatToBf16(float input)`.

        Args:
            input: A number or a numpy array of numbers, read as float32.

        Returns:
            A new `np.int16` value (the bits), or a new int16 array of the input's shape, that the
                caller owns.

        Raises:
            ValueError: `input` cannot be read as float32 (numpy's error).
        """
        return float_to_bf16(input)

    @staticmethod
    def convertFp16BufferToFloatBuffer(buf: Any) -> np.ndarray:
        """fp16 bits → float32, for a whole buffer, flattened.

        Java: `static FloatBuffer convertFp16BufferToFloatBuffer(ShortBuffer buf)`.

        Args:
            buf: fp16 bits: an integer numpy array (any shape) or sequence.

        Returns:
            A new flat float32 numpy array the caller owns.

        Raises:
            TypeError: `buf` is not integers.
        """
        return np.asarray(mlas_fp16_to_float(np.ravel(buf)), dtype=np.float32)

    @staticmethod
    def convertFloatBufferToFp16Buffer(buf: Any) -> np.ndarray:
        """float32 → fp16 bits, for a whole buffer, flattened.

        Java: `static ShortBuffer convertFloatBufferToFp16Buffer(FloatBuffer buf)`.

        Args:
            buf: A numpy array (any shape) or sequence of numbers, read as float32.

        Returns:
            A new flat int16 numpy array of fp16 bits the caller owns.

        Raises:
            ValueError: `buf` cannot be read as float32.
        """
        return np.asarray(mlas_float_to_fp16(np.ravel(buf)), dtype=np.int16)

    @staticmethod
    def convertBf16BufferToFloatBuffer(buf: Any) -> np.ndarray:
        """bfloat16 bits → float32, for a whole buffer, flattened.

        Java: `static FloatBuffer convertBf16BufferToFloatBuffer(ShortBuffer buf)`.

        Args:
            buf: bfloat16 bits: an integer numpy array (any shape) or sequence.

        Returns:
            A new flat float32 numpy array the caller owns.

        Raises:
            TypeError: `buf` is not integers.
        """
        return np.asarray(bf16_to_float(np.ravel(buf)), dtype=np.float32)

    @staticmethod
    def convertFloatBufferToBf16Buffer(buf: Any) -> np.ndarray:
        """float32 → bfloat16 bits, for a whole buffer, flattened.

        Java: `static ShortBuffer convertFloatBufferToBf16Buffer(FloatBuffer buf)`.

        Args:
            buf: A numpy array (any shape) or sequence of numbers, read as float32.

        Returns:
            A new flat int16 numpy array of bfloat16 bits the caller owns.

        Raises:
            ValueError: `buf` cannot be read as float32.
        """
        return np.asarray(float_to_bf16(np.ravel(buf)), dtype=np.int16)
