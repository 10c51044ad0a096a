"""Java's ``java.util.Optional``, for the facade's methods that return one (``Result.get(name)``,
``OnnxTensor.getBufferRef()``). Imports nothing from ort_cffi."""
from __future__ import annotations

from typing import Any, Generic, Optional, TypeVar

T = TypeVar("T")


class Optional_(Generic[T]):
    """A value or nothing, as `Result.get(name)` and `OnnxTensor.getBufferRef()` return; falsy when empty.

    It holds the value itself, not a copy, and owns nothing.

    Java: `java.util.Optional<T>` (`Optional<OnnxValue>`, `Optional<Buffer>`).
    """

    __slots__ = ("_value",)

    def __init__(self, value: Optional[T]) -> None:
        self._value = value

    def isPresent(self) -> bool:
        """True when a value is present; also `bool(optional)`.

        Java: `boolean isPresent()`.
        """
        return self._value is not None

    def isEmpty(self) -> bool:
        """True when no value is present.

        Java: `boolean isEmpty()`.
        """
        return self._value is None

    def get(self) -> T:
        """The value.

        Java: `T get()`.

        Returns:
            The value itself, owned by whoever owned it before (a `Result` its outputs, the caller its
                own array).

        Raises:
            KeyError: There is no value (Java: `NoSuchElementException`).
        """
        if self._value is None:
            raise KeyError("no value present")
        return self._value

    def orElse(self, other: Any) -> Any:
        """The value, or `other` when there is none.

        Java: `T orElse(T other)`.

        Returns:
            The value itself (owned as for `get()`), or `other`.
        """
        return self._value if self._value is not None else other

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return f"Optional[{self._value!r}]" if self._value is not None else "Optional.empty"
