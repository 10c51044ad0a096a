"""Where the runtime comes from, for the installer and for users who ask: the store of fetched runtimes,
the variables that choose one, and the loader's search (which file it would load, and where it looked)
without loading anything."""
from ort_cffi._native.loader import LIBRARY_ENV, find_runtime_file
from ort_cffi._native.store import MANIFEST, SELECT_ENV, StoredRuntime, known_runtimes, store_dir, stored_runtimes

__all__ = ["LIBRARY_ENV", "MANIFEST", "SELECT_ENV", "StoredRuntime", "find_runtime_file", "known_runtimes", "store_dir",
           "stored_runtimes"]
