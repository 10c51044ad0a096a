"""The intra-op thread count set on session options, as the engine needs it when it lowers a training model.

ONNX Runtime's C API sets the count (``SetIntraOpNumThreads``) but has no call that reads it back, and the
engine picks some gradient forms by it (a form that splits across threads where another cannot:
``engine.lowering.convolution.input_gradient_by_conv``). The facade's ``SessionOptions`` notes the count here,
keyed by the native options' address, when it is made (0: ONNX Runtime's default) and when it is set, and
forgets it when they are released; the engine reads it when it makes a session. Options made below the facade
(``ort_cffi.capi``) are not seen: they count as the default."""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict

from ort_cffi._native.tables import ffi

_lock = threading.Lock()
_counts: Dict[int, int] = {}


def _address(options: Any) -> int:
    return int(ffi.cast("uintptr_t", options))


def note(options: Any, count: int) -> None:
    """``count`` intra-op threads set on the native options ``options`` (0: ONNX Runtime's default)."""
    with _lock:
        _counts[_address(options)] = int(count)


def forget(options: Any) -> None:
    """The native options ``options`` are being released: their address may be reused by options that the
    facade does not see, which must not inherit this count."""
    with _lock:
        _counts.pop(_address(options), None)


def intra_op_threads(options: Any) -> int:
    """How many intra-op threads a session made with ``options`` runs: the count set on them, else ONNX
    Runtime's default (one per core; this process's CPUs stand for that)."""
    if options is None or options == ffi.NULL:
        count = 0
    else:
        with _lock:
            count = _counts.get(_address(options), 0)
    if count > 0:
        return count
    if sys.platform == "linux":  # the CPUs this process may run on (macOS and Windows have no such call)
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)
