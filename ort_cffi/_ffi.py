"""Layer 0 of the raw API: the cffi declarations, parsed from the C text in ``include/``.

The headers are our own text derived from ONNX Runtime 1.19's public C headers (API version 19):
``ort_c_api.h`` (``OrtApiBase``, ``OrtApi`` with every slot in order, the enums and handle types)
and ``ort_training_c_api.h`` (``OrtTrainingApi``, all 33 slots).
"""
from __future__ import annotations

from pathlib import Path

from cffi import FFI

API_VERSION = 19
HEADERS = ("ort_c_api.h", "ort_training_c_api.h")


def _include_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parent / "include"):  # installed, then source tree
        if (candidate / HEADERS[0]).is_file():
            return candidate
    raise FileNotFoundError(f"ort_cffi's C declarations ({', '.join(HEADERS)}) are missing beside {here}")


def _build_ffi() -> FFI:
    ffi = FFI()
    include = _include_dir()
    for name in HEADERS:
        ffi.cdef((include / name).read_text(encoding="utf-8"))
    return ffi


ffi = _build_ffi()
