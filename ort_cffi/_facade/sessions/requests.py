"""What a run or a step is asked for, parsed the same way for ``OrtSession.run`` and the training steps:
Java's overloads told apart by type, and the requested output names in the order a ``Result`` gives them."""
from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from ort_cffi._facade.sessions.options import RunOptions
from ort_cffi._native.errors import OrtException


def split_overloads(
    args: Tuple[Any, ...], requested: Any, pinned: Any, run_options: Any, what: str, pinning: bool = True
) -> Tuple[Any, Any, Optional[RunOptions]]:
    """Java's overloads folded: each positional argument is dispatched on its type (None is skipped): a set,
    list or tuple is the requested outputs, a mapping the pinned outputs (where ``pinning``), a RunOptions
    the run options. Returns (requested, pinned, run_options); raises naming an argument of another type."""
    for arg in args:
        if arg is None:
            continue
        if pinning and type(arg) is dict:  # the common case first: the ABC check below is slower
            pinned = arg
        elif isinstance(arg, RunOptions):
            run_options = arg
        elif pinning and isinstance(arg, Mapping):
            pinned = arg
        elif isinstance(arg, (set, frozenset, list, tuple)):
            requested = arg
        else:
            expected = "requested output names, a dict of pinned outputs or RunOptions" if pinning else \
                "requested output names or RunOptions (pinned outputs are for training steps)"
            raise OrtException.invalid_argument(f"unexpected {what} argument of type {type(arg).__name__}: expected {expected}")
    if run_options is not None and not isinstance(run_options, RunOptions):
        raise OrtException.invalid_argument(f"runOptions must be RunOptions, not {type(run_options).__name__}")
    return requested, pinned, run_options


def check_names(names: Iterable[Any], what: str = "requested output names") -> None:
    """Refuse a name that is not a ``str`` (an unhashable one would raise a bare TypeError)."""
    for name in names:
        if not isinstance(name, str):
            raise OrtException.invalid_argument(f"the {what} must be str, not {type(name).__name__}: {name!r}")


def check_collection(requested: Any) -> None:
    """Refuse requested outputs that are not a collection of names (a lone ``str`` included)."""
    if isinstance(requested, str) or not isinstance(requested, Iterable):
        raise OrtException.invalid_argument(f"requestedOutputs is a collection of output names, not {type(requested).__name__}")


def ordered_names(requested: Sequence[str], unordered: bool, output_names: Iterable[str]) -> List[str]:
    """The requested outputs in the Result's order: a set has no order of its own (it varies per process),
    so it takes the model's; a list or tuple keeps its own, repeats dropped."""
    if unordered:
        return [n for n in output_names if n in requested]
    return list(dict.fromkeys(requested))
