"""Java's ``java.util.Optional``, for the facade's methods that return one (``Result.get(name)``,
``OnnxTensor.getBufferRef()``). Imports nothing from ort_cffi."""
from __future__ import annotations

from typing import Any, Generic, Optional, TypeVar

T = TypeVar("T")


class Optional_(Generic[T]):
    """Java's ``Optional``: a value or nothing; also falsy when empty."""

    __slots__ = ("_value",)

    def __init__(self, value: Optional[T]) -> None:
        self._value = value

    def isPresent(self) -> bool:
        """True when a value is present."""
        return self._value is not None

    def isEmpty(self) -> bool:
        """True when no value is present."""
        return self._value is None

    def get(self) -> T:
        """The value; raises ``KeyError`` when there is none (Java's NoSuchElementException)."""
        if self._value is None:
            raise KeyError("no value present")
        return self._value

    def orElse(self, other: Any) -> Any:
        """The value, or ``other`` when there is none."""
        return self._value if self._value is not None else other

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return f"Optional[{self._value!r}]" if self._value is not None else "Optional.empty"
