"""Where the runtime comes from, for the installer and for users who ask: the store of fetched runtimes,
the variables that choose one, and the loader's search (which file it would load, and where it looked)
without loading anything. Also what the installer needs to make a stored extension importable as a Python
module in this interpreter (ONNX Runtime's generator runs there): the survey's row of a file, the renames of
CPython imports, and the patch of pybind11's version check."""
from ort_cffi._native.elf import Rename, apply_renames, patch_version_check, plan_renames
from ort_cffi._native.loader import LIBRARY_ENV, find_runtime_file, interpreter_exports, interpreter_name
from ort_cffi._native.store import (
    MANIFEST,
    SELECT_ENV,
    StoredRuntime,
    known_extension,
    known_inference_runtimes,
    known_runtimes,
    selected_runtime,
    store_dir,
    stored_runtimes,
)

__all__ = ["LIBRARY_ENV", "MANIFEST", "SELECT_ENV", "Rename", "StoredRuntime", "apply_renames",
           "find_runtime_file", "interpreter_exports", "interpreter_name", "known_extension", "known_inference_runtimes",
           "known_runtimes",
           "patch_version_check", "plan_renames", "selected_runtime", "store_dir", "stored_runtimes"]
