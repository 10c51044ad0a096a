"""ONNX Runtime's C API tables, loaded once per process, and the one status chokepoint
(``check_status``). ``ort_cffi.capi`` is their public face; its docstring shows a raw call.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Optional

from ort_cffi._native.errors import (
    OrtException,
    RuntimeLoadError,
    StaleCacheError,
    UnsupportedRuntimeError,
)
from ort_cffi._native.ffi import API_VERSION, ffi
from ort_cffi._native.loader import LoadedImage, find_and_load

__all__ = ["ffi", "get_runtime", "load_runtime", "Runtime", "check_status", "API_VERSION"]

# The table layouts declared in include/ are those of API version 19, which ONNX Runtime 1.19 first
# offers. OrtApi is append-only: every later 1.x release hands out the same first slots for
# GetApi(19) (checked on 1.20.1 and 1.31.1). OrtTrainingApi was not append-only before 1.17
# (CreateTrainingSessionFromBuffer moved in 1.16), and no training build after 1.19 was published: a
# training table is used only from 1.19.x; later builds train on ort_cffi's engine.
OLDEST_LAYOUT = (1, 19)
TRAINING_LAYOUTS = {(1, 19)}


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_layout(version: str, library: str) -> tuple[int, ...]:
    """The runtime's (major, minor), where ort_cffi's declared tables fit it; else UnsupportedRuntimeError."""
    found = _version_tuple(version)[:2]
    if found < OLDEST_LAYOUT or found[0] != OLDEST_LAYOUT[0]:
        raise UnsupportedRuntimeError(
            f"ONNX Runtime {version} (from {library}) has C API tables whose layout ort_cffi does not know: it "
            f"declares the API version {API_VERSION} tables, which ONNX Runtime 1.19 and later 1.x releases offer, "
            "and refuses to guess offsets. Use onnxruntime 1.19 or later (pip install onnxruntime), or "
            "onnxruntime-training-cpu==1.19.2"
        )
    return found


class Runtime:
    """The loaded runtime and its C API tables, for direct calls through cffi.

    `get_runtime()` and `load_runtime()` make the process's one instance; it lives, with the library it
    keeps loaded, until the process ends. Each slot of a table is a cffi function: calling it returns
    what the C function returns (an `OrtStatus*` for most: NULL on success, else the caller's to
    release, e.g. with `check_status`).

    Java: none (the raw C API; Java's binding has no equivalent).

    Attributes:
        api: The `const OrtApi*` table (API version 19).
        training_api: The training build's `const OrtTrainingApi*` table (all 33 slots), or None where the
            runtime has none (an inference build: ort_cffi's engine trains there, `ort_cffi.backend()`).
        api_base: The `const OrtApiBase*`.
        version: The runtime's version, e.g. "1.19.2".
        library: The file it came from.
        image: The file mapped: a private copy for a wheel's extension module.
        kind: "wheel", "fetched", "extension" or "library".
        renamed: The CPython imports renamed in the private copy.
        known_as: The published wheel the file is known from.

    Args:
        loaded: The loader's result (`loader.find_and_load`); ort_cffi makes the instance.

    Raises:
        UnsupportedRuntimeError: The runtime is older than 1.19, or it lacks C API version 19.
    """

    def __init__(self, loaded: LoadedImage) -> None:
        self._loaded = loaded  # keeps the dlopen handle referenced
        self.library = loaded.library
        self.image = loaded.image
        self.kind = loaded.kind
        self.renamed = loaded.renamed
        self.known_as = loaded.known_as
        self.api_base: Any = ffi.cast("const OrtApiBase*", loaded.api_base_address)
        self.version = ffi.string(self.api_base.GetVersionString()).decode()
        if loaded.expected_version is not None and self.version != loaded.expected_version:
            raise StaleCacheError(
                f"the runtime image {loaded.image} reports version {self.version!r} but its source claims "
                f"{loaded.expected_version!r}: refusing to use it"
            )
        version = check_layout(self.version, self.library)
        self.api: Any = self.api_base.GetApi(API_VERSION)
        if self.api == ffi.NULL:
            raise UnsupportedRuntimeError(
                f"ONNX Runtime {self.version} (from {self.library}) does not provide C API version {API_VERSION}"
            )
        # The training build's table, or None: an inference build (GetTrainingApi returns NULL there), or a
        # build whose training table's layout was never checked. ort_cffi's engine trains on those.
        self.training_api: Any = None
        if version in TRAINING_LAYOUTS:
            table = self.api.GetTrainingApi(API_VERSION)
            self.training_api = table if table != ffi.NULL else None

    def __repr__(self) -> str:
        return f"<ort_cffi Runtime {self.version} ({self.kind}) from {self.library}>"


_runtime: Optional[Runtime] = None
_runtime_lock = threading.Lock()


def _load(library: str | os.PathLike[str] | None) -> Runtime:
    try:
        return Runtime(find_and_load(library))
    except StaleCacheError:
        pass
    # What the image cache recorded did not check out (an address outside the image, another
    # version): examine the file once more, then trust only what the checks accept.
    return Runtime(find_and_load(library, refresh=True))


def get_runtime() -> Runtime:
    """The process's runtime, loaded by the first call (`$ORT_CFFI_LIBRARY`, else the default search).

    The default search tries the fetched runtime `$ORT_CFFI_RUNTIME` names, the installed training
    wheel, then the runtime `ort-cffi-runtime install` fetched last. Loading does not create an `OrtEnv`: most raw calls need one (`CreateEnv`, or
    `OrtEnvironment.getEnvironment()`).

    Java: none (the raw C API).

    Returns:
        The one `Runtime` of the process, shared: nobody owns it and nothing closes it; its tables stay
            valid until the process ends.

    Raises:
        RuntimeNotFoundError: No runtime was found; the message lists every place that was tried.
        RuntimeLoadError: A runtime was found but cannot be loaded.
        UnsupportedRuntimeError: The runtime's version has tables ort_cffi does not declare.
    """
    global _runtime
    runtime = _runtime
    if runtime is not None:
        return runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _load(None)
        return _runtime


def load_runtime(library: str | os.PathLike[str] | None = None) -> Runtime:
    """Load the runtime from an explicit shared library, or by the default search when None.

    Only one runtime can serve a process: once one is loaded, asking for it again (or for None)
    returns it, and asking for another library raises.

    Java: none (the raw C API).

    Args:
        library: A `libonnxruntime.so` built with the training API, or a training wheel's
            `onnxruntime_pybind11_state*.so` (`str` or `os.PathLike`); or None.

    Returns:
        The one `Runtime` of the process, shared: nobody owns it and nothing closes it; its tables stay
            valid until the process ends.

    Raises:
        RuntimeLoadError: Another runtime is loaded already, or the library cannot be loaded or
            exports no `OrtGetApiBase`.
        RuntimeNotFoundError: The library file does not exist, or (for None) no runtime was found.
        UnsupportedRuntimeError: The runtime's version has tables ort_cffi does not declare.
    """
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            if library is None or os.path.realpath(os.fspath(library)) == _runtime.library:
                return _runtime
            raise RuntimeLoadError(
                f"a runtime is already loaded in this process ({_runtime.library}); cannot switch to {library}"
            )
        _runtime = _load(library)
        return _runtime


def check_status(status: Any, context: Optional[str] = None) -> None:
    """Check a status a raw call returned: NULL is success; otherwise read it, release it and raise.

    The status is released in every case, so the caller must not use it again.

    Java: none (the raw C API; Java's binding does this inside its native code).

    Args:
        status: The `OrtStatus*` a C API call returned.
        context: What was being done, put before the runtime's message (e.g. `"loading the checkpoint"`).

    Raises:
        OrtException: The status is not NULL. The code is the real one, recovered from the message
            where the runtime wraps it in `ORT_RUNTIME_EXCEPTION` or `ORT_FAIL`, and the class follows
            it (`OrtInvalidArgumentException`, `OrtFileNotFoundException`).
    """
    if not status:
        return
    api = get_runtime().api
    try:
        code = api.GetErrorCode(status)
        message = ffi.string(api.GetErrorMessage(status)).decode(errors="replace")
    finally:
        api.ReleaseStatus(status)
    raise OrtException.from_native(code, message, context)
