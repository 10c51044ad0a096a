"""``java.util.SplittableRandom``, reimplemented exactly: the Java tests' random data (seeded) is
reproduced bit for bit, so ported tests feed the runtime the same values as the originals.

Only what the ported tests call: the seeded constructor and ``nextInt()`` (plus ``nextLong()``,
the same generator's 64-bit form). Java's arithmetic is 64-bit two's complement: every step is
taken modulo 2**64 here.
"""
from __future__ import annotations

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
    """``new SplittableRandom(seed)``: the same sequence as Java's for the same seed."""

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


def to_short(value: int) -> int:
    """Java's ``(short) value``: the low 16 bits, signed."""
    return _signed(value, 16)
