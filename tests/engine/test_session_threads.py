"""The intra-op thread count reaches the engine's lowering (ort_cffi/_backends/session_threads.py): noted from
the facade's SessionOptions, ONNX Runtime's default where unset, and part of the lowered-model cache's key."""
from __future__ import annotations

import gc
import os

from ort_cffi import SessionOptions
from ort_cffi._backends import session_threads
from ort_cffi._backends.engine import prepared
from ort_cffi._native.tables import ffi


def test_the_count_set_on_the_facade_options_is_read_back() -> None:
    with SessionOptions() as options:
        options.setIntraOpNumThreads(3)
        assert session_threads.intra_op_threads(options._ptr) == 3
        options.setIntraOpNumThreads(1)
        assert session_threads.intra_op_threads(options._ptr) == 1


def test_unset_or_zero_is_one_thread_per_cpu() -> None:
    cpus = len(os.sched_getaffinity(0))
    with SessionOptions() as options:
        assert session_threads.intra_op_threads(options._ptr) == cpus
        options.setIntraOpNumThreads(0)
        assert session_threads.intra_op_threads(options._ptr) == cpus
    assert session_threads.intra_op_threads(ffi.NULL) == cpus
    assert session_threads.intra_op_threads(None) == cpus


def test_the_count_is_part_of_the_cache_key(monkeypatch, tmp_path) -> None:
    """prepare() keys its cache on the request, and the request holds the thread count."""
    requests = []

    class Stop(Exception):
        pass

    def key(version, request, sources):
        requests.append(request)
        raise Stop

    monkeypatch.setenv(prepared.CACHE_SWITCH_ENV, "1")
    monkeypatch.setattr(prepared, "_cache_folder", lambda: tmp_path)
    monkeypatch.setattr(prepared, "code_version", lambda: "v")
    monkeypatch.setattr(prepared, "_key", key)
    for threads in (1, 2):
        try:
            prepared.prepare((None, b"model"), None, None, ["w"], ["w"], None, threads)
        except Stop:
            pass
    assert [r["intra_op_threads"] for r in requests] == [1, 2]


def test_the_count_is_forgotten_when_the_options_are_released() -> None:
    """Options made below the facade may reuse a released address: they must not inherit its count."""
    options = SessionOptions()
    options.setIntraOpNumThreads(3)
    address = int(ffi.cast("uintptr_t", options._ptr))
    options.close()
    assert address not in session_threads._counts
    options.close()  # idempotent
    dropped = SessionOptions()
    dropped.setIntraOpNumThreads(5)
    address = int(ffi.cast("uintptr_t", dropped._ptr))
    del dropped  # released by the garbage collector, not by close()
    gc.collect()
    assert address not in session_threads._counts
