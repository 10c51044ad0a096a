"""The test oracle for the static finder: ONNX Runtime's own custom-op library hook.

The training wheel's documented hook (``SessionOptions.register_custom_ops_library(path)``) dlopens
``path`` and calls its exported ``RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)``. The
small library built here is such a library: it remembers the ``OrtApiBase*`` it is handed. A child
process that imports onnxruntime and runs the hook therefore learns where the runtime's
``OrtApiBase`` really is, independently of ``ort_cffi._native.elf``. ort_cffi itself never compiles or
runs this: it was the loader's method before the static finder, and is kept only to check it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

_SOURCE = r"""
static const void* received_api_base = 0;

/* Exported with default visibility whatever the compiler flags: ONNX Runtime looks it up by name. */
__attribute__((visibility("default")))
void* RegisterCustomOps(void* session_options, const void* api_base) {
    (void)session_options;
    received_api_base = api_base;
    return 0; /* a NULL OrtStatus* means success */
}

static const void* ort_cffi_received_api_base(void) { return received_api_base; }
"""
_NAME = "_ort_cffi_hook_oracle"


def build(folder: Path) -> Path:
    """Compile the hook (cffi API mode) into ``folder``; the path of the extension module."""
    import cffi

    builder = cffi.FFI()
    builder.cdef("const void* ort_cffi_received_api_base(void);")
    builder.set_source(_NAME, _SOURCE)
    return Path(builder.compile(tmpdir=str(folder), verbose=False))


_PROBE = r"""
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)  # loaded (and held) before the runtime dlopens it by path
import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as extension
options = onnxruntime.SessionOptions()
options.register_custom_ops_library(sys.argv[1])
api_base = int(hook.ffi.cast("uintptr_t", hook.lib.ort_cffi_received_api_base()))
if not api_base:
    sys.exit("the custom-op hook did not receive an OrtApiBase")
image = ctypes.CDLL(extension.__file__)  # the image already loaded by the import
pyinit = ctypes.cast(image.PyInit_onnxruntime_pybind11_state, ctypes.c_void_p).value
print(json.dumps({"offset": api_base - pyinit, "file": extension.__file__}))
"""


def probe(hook: Path, python: Optional[str] = None) -> dict:
    """In a child that imports onnxruntime: where the hook says ``OrtApiBase`` lies, as an offset from
    ``PyInit_onnxruntime_pybind11_state``, and which extension file the import loaded."""
    env = dict(os.environ)
    proc = subprocess.run(
        [python or sys.executable, "-c", _PROBE, str(hook), _NAME],
        capture_output=True, text=True, timeout=300, env=env,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the hook probe failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def onnxruntime_importable() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None
