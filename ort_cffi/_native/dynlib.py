"""Open a shared library and find its symbols: the one part of loading that differs by operating system.

- **Linux and macOS**: ``dlopen`` with ``RTLD_NOW | RTLD_LOCAL`` (the platform's own flag values, from ``os``),
  ``dlsym`` and ``dlerror``, called through ctypes (glibc 2.34 and later has them in libc itself, older ones in
  ``libdl.so.2``). A symbol of the interpreter is looked up among the process's global symbols.
- **Windows**: ``LoadLibraryExW`` with the DLL's own folder searched first for what it links, so that an
  inference wheel's ``capi/onnxruntime.dll`` finds ``onnxruntime_providers_shared.dll`` beside it whatever the
  process's search path; ``GetProcAddress``; the error text of ``GetLastError``. A symbol of the interpreter is
  looked up in the Python DLL.

Handles are plain ints, kept for as long as the image is used: nothing here ever unloads a library.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Optional

from ort_cffi._native.errors import RuntimeLoadError

if sys.platform == "win32":
    # LoadLibraryExW flags: search the loaded DLL's folder, then the default places, for the DLLs it links
    _LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR = 0x00000100
    _LOAD_LIBRARY_SEARCH_DEFAULT_DIRS = 0x00001000
    _kernel32: Any = ctypes.WinDLL("kernel32", use_last_error=True)
    _kernel32.LoadLibraryExW.argtypes = [ctypes.c_wchar_p, ctypes.c_void_p, ctypes.c_uint32]
    _kernel32.LoadLibraryExW.restype = ctypes.c_void_p
    _kernel32.GetProcAddress.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    _kernel32.GetProcAddress.restype = ctypes.c_void_p

    def open_library(path: str) -> int:
        """A module handle for ``path`` (a full path: its folder is searched for what it links)."""
        flags = _LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | _LOAD_LIBRARY_SEARCH_DEFAULT_DIRS if os.path.isabs(path) else 0
        handle = _kernel32.LoadLibraryExW(path, None, flags)
        if not handle:
            error = ctypes.get_last_error()
            raise RuntimeLoadError(f"cannot load {path}: {ctypes.FormatError(error).strip()} (error {error})")
        return int(handle)

    def find_symbol(handle: Optional[int], name: str) -> int:
        """The address of ``name`` in ``handle`` (None: the Python DLL), or 0."""
        module = ctypes.pythonapi._handle if handle is None else handle
        return int(_kernel32.GetProcAddress(ctypes.c_void_p(module), name.encode()) or 0)

else:

    def _open_libdl() -> Any:
        library = ctypes.CDLL(None)
        if not hasattr(library, "dlopen"):  # glibc before 2.34 keeps them in libdl
            library = ctypes.CDLL("libdl.so.2")
        library.dlopen.argtypes, library.dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
        library.dlsym.argtypes, library.dlsym.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
        library.dlerror.argtypes, library.dlerror.restype = [], ctypes.c_char_p
        return library

    _libdl = _open_libdl()

    def _dlerror() -> str:
        err = _libdl.dlerror()
        return err.decode(errors="replace") if err else "unknown error"

    def open_library(path: str) -> int:
        """A dlopen handle (RTLD_NOW | RTLD_LOCAL); a bare name is searched where dlopen looks."""
        handle = _libdl.dlopen(path.encode(), os.RTLD_NOW | os.RTLD_LOCAL)
        if not handle:
            raise RuntimeLoadError(f"cannot load {path}: {_dlerror()}")
        return int(handle)

    def find_symbol(handle: Optional[int], name: str) -> int:
        """The address of ``name`` in ``handle`` (None: every global symbol of the process), or 0."""
        _libdl.dlerror()
        return int(_libdl.dlsym(handle, name.encode()) or 0)


def interpreter_exports(name: str) -> bool:
    """Whether the running interpreter provides ``name``."""
    return find_symbol(None, name) != 0
