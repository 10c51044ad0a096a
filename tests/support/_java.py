"""What ported Java tests need beside ort_cffi: ``java.util.SplittableRandom`` (reimplemented
exactly: the Java tests' seeded random data are reproduced bit for bit), JUnit's ``Assertions``
with Java's equality, the few ``Float``/``Integer`` constants and conversions the tests use, and
the single-``Cast``-node models of ONNX Runtime's Java test resources, built with ``onnx``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

# --- java.util.SplittableRandom --------------------------------------------------------------------

_MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _mix32(z: int) -> int:
    z = ((z ^ (z >> 33)) * 0x62A9D9ED799705F5) & _MASK64
    return (((z ^ (z >> 28)) * 0xCB24D0A5C88C35B3) & _MASK64) >> 32


class SplittableRandom:
    """``new SplittableRandom(seed)``: the same sequence as Java's for the same seed (Java's 64-bit
    two's complement arithmetic, taken modulo 2**64 here)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed & _MASK64
        self._gamma = GOLDEN_GAMMA

    def _next_seed(self) -> int:
        self._seed = (self._seed + self._gamma) & _MASK64
        return self._seed

    def nextInt(self) -> int:
        """The next Java ``int`` (-2**31 .. 2**31 - 1)."""
        return _signed(_mix32(self._next_seed()), 32)

    def nextLong(self) -> int:
        """The next Java ``long``."""
        return _signed(_mix64(self._next_seed()), 64)


def to_short(value: int) -> np.int16:
    """Java's ``(short) value``: the low 16 bits, signed."""
    return np.int16(_signed(int(value), 16))


# --- java.lang constants and conversions ---------------------------------------------------------

INTEGER_MAX_VALUE, INTEGER_MIN_VALUE = 2**31 - 1, -(2**31)
LONG_MAX_VALUE, LONG_MIN_VALUE = 2**63 - 1, -(2**63)
FLOAT_MAX_VALUE = np.finfo(np.float32).max
FLOAT_MIN_VALUE = np.float32(np.finfo(np.float32).smallest_subnormal)  # Java's Float.MIN_VALUE: the least positive
DOUBLE_MAX_VALUE = np.finfo(np.float64).max
DOUBLE_MIN_VALUE = np.float64(np.finfo(np.float64).smallest_subnormal)


def int_bits_to_float(bits: int) -> np.float32:
    """``Float.intBitsToFloat``: the float32 with these 32 bits (NaN payloads kept)."""
    return np.array([bits & 0xFFFFFFFF], np.uint32).view(np.float32)[0]


# --- JUnit Assertions, with Java's equality --------------------------------------------------------


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, (bytes, bytearray)):
        return np.frombuffer(bytes(value), dtype=np.uint8)  # Java's byte[]
    return np.asarray(value)


def _java_equal(expected: Any, actual: Any) -> bool:
    """Java's equality of boxed values and arrays: floats compare as ``Float.floatToIntBits`` does
    (-0.0 differs from 0.0, every NaN equals every NaN), strings and objects by value, shapes must
    match, and a numpy scalar's dtype must be the actual value's (a Float is not a Double)."""
    want, got = _as_array(expected), _as_array(actual)
    if isinstance(expected, (np.generic, np.ndarray)) and want.dtype.kind not in "USO" and want.dtype != got.dtype:
        return False
    if want.shape != got.shape:
        return False
    if want.dtype.kind in "USO" or got.dtype.kind in "USO":
        return want.tolist() == got.tolist()
    if want.dtype.kind == "f" or got.dtype.kind == "f":
        return bool(np.array_equal(want, got, equal_nan=True) and np.array_equal(np.signbit(want), np.signbit(got)))
    return bool(np.array_equal(want, got))


class Assertions:
    """``org.junit.jupiter.api.Assertions``: the calls the ported tests make."""

    @staticmethod
    def assertEquals(expected: Any, actual: Any, message: Optional[str] = None) -> None:
        assert _java_equal(expected, actual), message or f"expected {expected!r} but was {actual!r}"

    @staticmethod
    def assertArrayEquals(expected: Any, actual: Any, message: Optional[str] = None) -> None:
        assert _java_equal(expected, actual), message or f"arrays differ: expected {expected!r} but was {actual!r}"

    @staticmethod
    def assertTrue(condition: Any, message: Optional[str] = None) -> None:
        assert condition is True or condition is np.True_, message or f"expected true, was {condition!r}"

    @staticmethod
    def assertFalse(condition: Any, message: Optional[str] = None) -> None:
        assert condition is False or condition is np.False_, message or f"expected false, was {condition!r}"

    @staticmethod
    def assertThrows(exception: type, executable: Callable[[], Any]) -> BaseException:
        with pytest.raises(exception) as info:
            executable()
        return info.value


assertArrayEquals = Assertions.assertArrayEquals
assertFalse = Assertions.assertFalse
assertThrows = Assertions.assertThrows


# --- the Java tests' resource models ---------------------------------------------------------------


def cast_model(path: Path, source: int, target: int, shape: Any = (10, 5)) -> Path:
    """A model of one ``Cast`` node from ``input`` (element type ``source``, an ``onnx.TensorProto``
    number) to ``output`` (``target``), as ONNX Runtime's ``java-*-to-*.onnx`` test resources are."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["input"], ["output"], to=target)],
        path.stem,
        [helper.make_tensor_value_info("input", source, list(shape))],
        [helper.make_tensor_value_info("output", target, list(shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
