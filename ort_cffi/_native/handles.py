"""One Python owner per native handle, and the process's ``OrtEnv``.

Rules every handle follows:

- ``NativeHandle`` owns exactly one native pointer and the ``Release*`` slot that frees it.
  ``close()`` is idempotent; ``closed`` says whether it was called; ``_handle()`` gives the pointer
  or raises ``OrtClosedException``. A class-level NULL makes a half-built object safe to finalize.
- A handle that needs another native object to stay alive (a training session needs its checkpoint
  state and the environment) *pins* it. A pinned handle that is closed is closed for its user at
  once, but its native release waits until the last handle pinning it is released. So no order of
  ``close()``, garbage collection or interpreter exit can free memory still in use.
- ``__del__`` is the garbage-collection safety net; at interpreter exit every live handle is
  released (pinning ones first), then the environment, last.
- ``live_handles()`` lists what is still unreleased, for leak checks.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any, Callable, Optional, Sequence

from ort_cffi._native.errors import OrtClosedException, OrtException, utf8
from ort_cffi._native.tables import check_status, ffi, get_runtime

# Guards pin counts and the closed/released transitions. Re-entrant: garbage collection may run a
# finalizer (``__del__`` → release → unpin) inside a section that already holds it. Taken with
# explicit acquire()/release() on the per-step paths: a ``with`` block costs twice as much.
_bookkeeping = threading.RLock()
_acquire_bookkeeping = _bookkeeping.acquire
_release_bookkeeping = _bookkeeping.release
# Every unreleased handle, by id, as a weak reference (id → weakref: a third cheaper than a WeakSet,
# and this runs for every output of every step). An entry leaves when its handle is released; the
# handle's own entry keeps its id from being reused while it is there.
_live: dict[int, weakref.ref[NativeHandle]] = {}


class NativeHandle:
    """Owns one native pointer. Subclasses set ``_kind`` (for messages)."""

    _kind = "native handle"
    _ptr: Any = ffi.NULL  # class-level NULL: a half-built object finalizes safely
    _closed = True
    _pins = 0
    _pinned: tuple[NativeHandle, ...] = ()
    _release: Optional[Callable[[Any], None]] = None
    _lock: Any = None  # a handle whose native calls are serialized sets its lock: close() waits for them

    def _own(self, ptr: Any, release: Callable[[Any], None], pinned: tuple[NativeHandle, ...] = ()) -> None:
        """Take ownership of ``ptr`` (call right after the native call that produced it)."""
        if pinned:
            pin_all(pinned)  # raises, owning nothing, if a parent is already closed
            self._pinned = pinned
        self._release = release
        self._ptr = ptr
        self._closed = False
        _live[id(self)] = weakref.ref(self)

    @property
    def closed(self) -> bool:
        """True once `close()` has been called (Python's spelling of `isClosed()`); never raises.

        Java: `boolean isClosed()` where the Java class has it (`OnnxTensor`); otherwise none (ort_cffi addition).
        """
        return self._closed

    def isClosed(self) -> bool:
        """True once `close()` has been called; every other call then raises `OrtClosedException`.

        Never raises.

        Java: `boolean isClosed()` where the Java class has it (`OnnxTensor`); otherwise none (ort_cffi addition).
        """
        return self._closed

    def _handle(self) -> Any:
        """The native pointer; raises if closed."""
        if self._closed:
            raise OrtClosedException(self._kind)
        return self._ptr

    def _use(self) -> Any:
        """Pin this handle for a native call that reads it and return its pointer (raises if closed);
        ``_unuse()`` after the call. A ``close()`` from another thread meanwhile is deferred."""
        _acquire_bookkeeping()
        try:
            if self._closed:
                raise OrtClosedException(self._kind)
            self._pins += 1
        finally:
            _release_bookkeeping()
        return self._ptr

    def _unuse(self) -> None:
        _acquire_bookkeeping()
        try:
            self._pins -= 1
            if not (self._closed and self._pins == 0 and self._ptr):
                return
            taken = self._take()  # closed while in use: released now
        finally:
            _release_bookkeeping()
        _release(self, taken)

    def _call(self, function: Any, *args: Any, context: str) -> None:
        """``function(ptr, *args)`` with this handle pinned for the call, its status checked."""
        ptr = self._use()
        try:
            status = function(ptr, *args)
        finally:
            self._unuse()
        if status:
            check_status(status, context)

    def close(self) -> None:
        """Release the native object, after any call in progress on it in another thread.

        Idempotent: a second `close()` does nothing (Java throws, or frees twice). Every other method then
        raises `OrtClosedException`. The native release waits while another object still needs this one
        (a training session its checkpoint state, a step its input tensors); garbage collection and
        interpreter exit release what was never closed.

        Java: `void close()` (`AutoCloseable`: a `with` block closes it as try-with-resources does).
        """
        lock = self._lock
        if lock is None:
            self._close_native()
            return
        with lock:
            self._close_native()

    def _close_native(self) -> None:
        _acquire_bookkeeping()
        try:
            if self._closed:
                return
            self._closed = True
            if self._pins:
                return  # the last unpin releases it
            taken = self._take()
        finally:
            _release_bookkeeping()
        _release(self, taken)

    def _take(self) -> tuple[Any, Optional[Callable[[Any], None]], tuple[NativeHandle, ...]]:
        """Detach the native pointer, its release and its pins (under ``_bookkeeping``)."""
        taken = (self._ptr, self._release, self._pinned)
        self._ptr, self._release, self._pinned = ffi.NULL, None, ()
        return taken

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Without the call lock: nobody can be inside a call on an unreachable object, and the
        # collector may run this while this very thread holds that lock.
        try:
            if not self._closed:  # closed: released already, or by the last unpin (a pinner holds this object)
                self._close_native()
        except Exception:  # noqa: BLE001 - nothing can be raised from a finalizer
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state}>"


def _release(handle: NativeHandle, taken: tuple[Any, Optional[Callable[[Any], None]], tuple[NativeHandle, ...]]) -> None:
    ptr, release, pinned = taken
    if ptr and release is not None:
        release(ptr)
    _live.pop(id(handle), None)
    if pinned:
        unpin_all(pinned)


def pin_all(handles: Sequence[NativeHandle]) -> None:
    """Keep ``handles`` from being released while a native call uses them (a ``close()`` meanwhile is
    deferred). Raises ``OrtClosedException``, pinning nothing, if one of them is already closed."""
    _acquire_bookkeeping()
    try:
        for handle in handles:
            if handle._closed:
                raise OrtClosedException(handle._kind)
        for handle in handles:
            handle._pins += 1
    finally:
        _release_bookkeeping()


def unpin_all(handles: Sequence[NativeHandle]) -> None:
    """Undo ``pin_all``; releases, after the fact, each handle closed while it was pinned."""
    released = []
    _acquire_bookkeeping()
    try:
        for handle in handles:
            handle._pins -= 1
            if handle._closed and handle._pins == 0 and handle._ptr:
                released.append((handle, handle._take()))
    finally:
        _release_bookkeeping()
    for handle, taken in released:
        _release(handle, taken)


def pointer(handle: NativeHandle) -> Any:
    """The native pointer of an open handle, for a call that another object makes with it; raises
    ``OrtClosedException`` when it is closed."""
    return handle._handle()


def pinned_pointer(handle: NativeHandle) -> Any:
    """The native pointer of a handle the caller has pinned for the call (``pin_all``): a close() from
    another thread meanwhile is deferred, so the pointer stays valid until the caller unpins it."""
    return handle._ptr


def close_values(handles: Sequence[NativeHandle]) -> None:
    """``close()`` each of ``handles`` (handles without a call lock: values), in one critical
    section and one call: a step's Result closes its outputs this way, every step."""
    taken = []
    _acquire_bookkeeping()
    try:
        for handle in handles:
            if handle._closed:
                continue
            handle._closed = True
            if handle._pins:
                continue  # the last unpin releases it
            taken.append((handle, handle._take()))
    finally:
        _release_bookkeeping()
    for handle, native in taken:
        _release(handle, native)


def live_handles() -> list[NativeHandle]:
    """Handles whose native object has not been released yet (the environment excluded)."""
    handles = (ref() for ref in list(_live.values()))
    return [h for h in handles if h is not None and h._ptr and not isinstance(h, _ProcessHandle)]


class _ProcessHandle(NativeHandle):
    """A handle that lives as long as the process (environment, CPU memory info)."""


class Env(_ProcessHandle):
    """The process's one ``OrtEnv``, created on first use and released at exit, after everything else."""

    _kind = "OrtEnv"

    def __init__(self, log_level: int = 2, log_id: str = "ort_cffi") -> None:
        rt = get_runtime()
        out = ffi.new("OrtEnv**")
        check_status(rt.api.CreateEnv(log_level, utf8(log_id, "the environment name"), out), "CreateEnv")
        self._own(out[0], rt.api.ReleaseEnv)


class CpuMemoryInfo(_ProcessHandle):
    """The CPU memory description that tensors over numpy memory are created with."""

    _kind = "OrtMemoryInfo"

    def __init__(self) -> None:
        rt = get_runtime()
        out = ffi.new("OrtMemoryInfo**")
        check_status(rt.api.CreateCpuMemoryInfo(0, 0, out), "CreateCpuMemoryInfo")  # arena allocator, default mem
        self._own(out[0], rt.api.ReleaseMemoryInfo)


class _Process:
    """Process-wide native objects, created on first use under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._env: Optional[Env] = None
        self._memory_info: Optional[CpuMemoryInfo] = None
        self._allocator: Any = None

    def env(self, log_level: Optional[int] = None, log_id: Optional[str] = None) -> Env:
        """The environment; the logging level and id apply when this call creates it (as in Java,
        the first ``getEnvironment`` call decides)."""
        if self._env is None:
            with self._lock:
                if self._env is None:
                    self._env = Env(2 if log_level is None else int(log_level), log_id or "ort_cffi")
        return self._env

    def memory_info(self) -> CpuMemoryInfo:
        if self._memory_info is None:
            with self._lock:
                if self._memory_info is None:
                    self._memory_info = CpuMemoryInfo()
        return self._memory_info

    def allocator(self) -> Any:
        """The runtime's default CPU allocator (owned by the runtime, never released)."""
        if self._allocator is None:
            rt = get_runtime()
            out = ffi.new("OrtAllocator**")
            check_status(rt.api.GetAllocatorWithDefaultOptions(out), "GetAllocatorWithDefaultOptions")
            self._allocator = out[0]
        return self._allocator

    def shutdown(self) -> None:
        """At exit: release every live handle (pinning ones first), then memory info, then the env."""
        for handle in [ref() for ref in list(_live.values())]:
            if handle is not None and not isinstance(handle, _ProcessHandle):
                try:
                    handle.close()
                except OrtException:
                    pass
        for process_handle in (self._memory_info, self._env):
            if process_handle is not None:
                process_handle.close()


process = _Process()
atexit.register(process.shutdown)


def read_names(ptr: Any, count_fn: Any, name_fn: Any) -> tuple[str, ...]:
    """The names a ``*Count``/``*Name`` pair of C calls lists for ``ptr`` (inputs or outputs of a model)."""
    rt = get_runtime()
    count = ffi.new("size_t*")
    check_status(count_fn(ptr, count), "reading the model's names")
    allocator = process.allocator()
    names = []
    for i in range(count[0]):  # indices < count only: a larger one aborts the process inside the runtime
        out = ffi.new("char**")
        check_status(name_fn(ptr, i, allocator, out), "reading the model's names")
        names.append(allocator_string(rt, allocator, out[0]))
    return tuple(names)


def allocator_string(rt: Any, allocator: Any, chars: Any) -> str:
    """Decode a string the runtime allocated with ``allocator`` and free it (also on a decode error)."""
    try:
        return ffi.string(chars).decode()
    finally:
        check_status(rt.api.AllocatorFree(allocator, chars), "AllocatorFree")
