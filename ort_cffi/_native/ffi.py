"""The cffi declarations of the C text in ``include/``.

The headers are our own text derived from ONNX Runtime 1.19's public C headers (API version 19):
``ort_c_api.h`` (``OrtApiBase``, ``OrtApi`` with every slot in order, the enums and handle types)
and ``ort_training_c_api.h`` (``OrtTrainingApi``, all 33 slots). They are the source of truth.

Parsing them (cffi's in-line ABI mode, with pycparser) takes about 0.4 s, most of a cold start. So
``scripts/make_ffi.py`` parses them once and writes ``ffi_abi.py``: the same declarations in cffi's
out-of-line ABI mode, pure Python (no compiler), which loads in about 10 ms. That module records the
sha256 of the headers it was made from; when they differ (headers edited, module not regenerated),
the headers are parsed here instead, so the declarations in use are always the headers'.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

API_VERSION = 19
HEADERS = ("ort_c_api.h", "ort_training_c_api.h")


def include_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "include", here.parent.parent / "include"):  # installed, then source tree
        if (candidate / HEADERS[0]).is_file():
            return candidate
    raise FileNotFoundError(f"ort_cffi's C declarations ({', '.join(HEADERS)}) are missing beside {here}")


def header_texts() -> list[str]:
    include = include_dir()
    return [(include / name).read_text(encoding="utf-8") for name in HEADERS]


def headers_digest(texts: list[str]) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()


def parse_headers(texts: list[str]) -> Any:
    """An in-line ABI-mode ``FFI`` with the headers' declarations (the slow path)."""
    from cffi import FFI

    ffi = FFI()
    for text in texts:
        ffi.cdef(text)
    return ffi


def _load() -> Any:
    texts = header_texts()
    try:
        from ort_cffi._native import ffi_abi as _ffi_abi
    except ImportError:
        return parse_headers(texts)
    if getattr(_ffi_abi, "HEADERS_SHA256", None) != headers_digest(texts):
        return parse_headers(texts)
    return _ffi_abi.ffi


ffi = _load()
