"""What steps and runs return: ``Result`` (Java's ``OrtSession.Result``) with its ``Entry`` pairs, and the
``NameSet`` that name getters return (Java's ``Set<String>``). Shared by ``OrtSession`` and
``OrtTrainingSession``."""
from __future__ import annotations

import operator
from typing import AbstractSet, Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from ort_cffi._facade.tensors.optional import Optional_
from ort_cffi._facade.tensors.tensor import OnnxValue
from ort_cffi._native.errors import OrtClosedException, OrtException
from ort_cffi._native.handles import close_values


class NameSet(AbstractSet[str]):
    """An ordered, read-only set of names, iterated in the model's order.

    Equal to any set with the same names, whatever their order; also indexable like the tuple of
    names it keeps. Plain Python data: it stays valid after the session that gave it closes.

    Java: `Set<String>` (an unmodifiable `LinkedHashSet`).
    """

    __slots__ = ("_names", "_members")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names: Tuple[str, ...] = tuple(names)
        self._members = frozenset(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: Any) -> Any:
        return self._names[index]

    def __hash__(self) -> int:
        return hash(self._members)

    def contains(self, name: object) -> bool:
        """True when `name` is in the set; also `name in names`.

        Java: `boolean contains(Object o)`.
        """
        return name in self._members

    def isEmpty(self) -> bool:
        """True when the set has no names; also `not names`.

        Java: `boolean isEmpty()`.
        """
        return not self._names

    def size(self) -> int:
        """How many names the set holds; also `len(names)`.

        Java: `int size()`.
        """
        return len(self._names)

    def __repr__(self) -> str:
        return f"NameSet({list(self._names)!r})"


class Entry(NamedTuple):
    """One output of a `Result`: a (name, value) pair, with Java's `getKey()` and `getValue()`.

    Java: `Map.Entry<String, OnnxValue>`.
    """

    key: str
    value: OnnxValue

    def getKey(self) -> str:
        """The output's name; also `entry.key` or `entry[0]`.

        Java: `String getKey()`.
        """
        return self.key

    def getValue(self) -> OnnxValue:
        """The output's value; also `entry.value` or `entry[1]`.

        Java: `OnnxValue getValue()`.

        Returns:
            The value itself, owned by the `Result` it came from (closed with it), or the caller's own
                tensor for a pinned output.
        """
        return self.value


class Result:
    """The outputs of a training step or an inference run, by name and by position.

    `trainStep`, `evalStep` and `OrtSession.run` return one; the caller owns it and closes it (or uses
    a `with` block). Closing it closes the values it owns, those the runtime allocated: values taken
    from it are then unusable (copy them out with `getValue()` first). Pinned outputs belong to the
    caller and stay open. `result[0]`, `result["name"]`, `len(result)`, `name in result` and iteration
    work as a Python user expects. Also reachable as `OrtSession.Result`.

    Java: `OrtSession.Result`.
    """

    __slots__ = ("_names", "_values", "_owned", "_index", "_closed")

    def __init__(
        self,
        names: Sequence[str],
        values: Sequence[OnnxValue],
        owned: Optional[int] = None,
        index: Optional[Dict[str, int]] = None,
    ) -> None:
        """Made by the steps and runs; not for users.

        Args:
            names: The outputs' names, in order.
            values: The outputs' values, in the same order.
            owned: How many of the values, from the first, closing the Result closes (None: all; the
                rest are the caller's pinned outputs).
            index: Name → position, when the caller has it already.
        """
        self._names = names
        self._values = values
        self._owned = owned
        self._index = index
        self._closed = False

    def _position(self, name: str) -> Optional[int]:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self._names)}
        return self._index.get(name)

    def _check_open(self) -> None:
        if self._closed:
            raise OrtClosedException("Result")

    def get(self, key: Union[int, str]) -> Any:
        """The value at a position, or an Optional of the value of a name.

        `result[index]` gives the same value; `result[name]` gives the value itself, or a `KeyError`
        that lists the outputs.

        Java: `OnnxValue get(int index)`, `Optional<OnnxValue> get(String key)`.

        Args:
            key: An int (numpy integers too; a negative one counts from the end), or an output name.

        Returns:
            For an int, the value itself; for a name, an Optional (`isPresent()`, `get()`, `orElse()`)
                of it, empty for a name the Result lacks. The value is owned by the Result and closed
                with it (a pinned output is the caller's own tensor).

        Raises:
            OrtClosedException: The Result is closed.
            IndexError: The index is out of range (Java: `IndexOutOfBoundsException`).
            OrtInvalidArgumentException: `key` is neither an int nor a `str` (a `bool` included).
        """
        if type(key) is int and not self._closed and 0 <= key < len(self._values):
            return self._values[key]  # the common case, first
        self._check_open()
        if isinstance(key, str):
            position = self._position(key)
            return Optional_(None if position is None else self._values[position])
        if isinstance(key, bool):
            raise OrtException.invalid_argument("Result.get takes an int or a str, not bool")
        try:
            index = operator.index(key)  # numpy integers too
        except TypeError:
            raise OrtException.invalid_argument(f"Result.get takes an int or a str, not {type(key).__name__}") from None
        count = len(self._values)
        if not -count <= index < count:
            raise IndexError(f"output index {index} out of range: this Result has {count} outputs")
        return self._values[index]

    def __getitem__(self, key: Union[int, str]) -> OnnxValue:
        if isinstance(key, str):
            self._check_open()
            position = self._position(key)
            if position is None:
                raise KeyError(f"no output named {key!r}; outputs: {list(self._names)}")
            return self._values[position]
        value: OnnxValue = self.get(key)
        return value

    def size(self) -> int:
        """How many outputs this Result holds; also `len(result)`. It answers after `close()` too.

        Java: `int size()`.
        """
        return len(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def keys(self) -> List[str]:
        """The output names, in order; it answers after `close()` too.

        Java: none (ort_cffi addition, as a dict's `keys()`).

        Returns:
            A new list of `str` the caller owns.
        """
        return list(self._names)

    def values(self) -> List[OnnxValue]:
        """The values, in order.

        Java: none (ort_cffi addition, as a dict's `values()`).

        Returns:
            A new list the caller owns, of values the Result owns (closed with it; pinned outputs are
                the caller's own tensors).

        Raises:
            OrtClosedException: The Result is closed.
        """
        self._check_open()
        return list(self._values)

    def items(self) -> List[Tuple[str, OnnxValue]]:
        """The outputs' names and values as pairs, in order.

        Java: none (ort_cffi addition, as a dict's `items()`).

        Returns:
            A new list of (name, value) tuples the caller owns; the values are the Result's (closed
                with it; pinned outputs are the caller's own tensors).

        Raises:
            OrtClosedException: The Result is closed.
        """
        self._check_open()
        return list(zip(self._names, self._values))

    def __iter__(self) -> Iterator[Entry]:
        """The entries, in order: ``Entry(name, value)``, with Java's ``getKey()``/``getValue()``."""
        self._check_open()
        return iter([Entry(n, v) for n, v in zip(self._names, self._values)])

    def close(self) -> None:
        """Close the values this Result owns (those the runtime allocated); pinned outputs stay open.

        Idempotent: a second `close()` does nothing (Java logs a warning). Afterwards, what hands out
        values raises `OrtClosedException`; `size()`, `keys()` and `name in result` still answer.

        Java: `void close()` (`AutoCloseable`: a `with` block closes it as try-with-resources does).
        """
        if self._closed:
            return
        self._closed = True
        owned = self._owned
        if owned is None:
            close_values(self._values)
        elif owned:
            close_values(self._values[:owned])

    @property
    def closed(self) -> bool:
        """True once `close()` has been called; never raises.

        Java: none (ort_cffi addition).
        """
        return self._closed

    def __enter__(self) -> Result:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Result {list(self._names)}{' closed' if self._closed else ''}>"
