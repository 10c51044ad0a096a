"""Where ort_cffi keeps files on disk, shared by the loader and ``ort-cffi-runtime``.

- **The runtime store** (``$ORT_CFFI_RUNTIME_DIR``, else ``<user cache>/ort_cffi/runtimes``): one
  folder per runtime that ``ort-cffi-runtime install`` fetched, holding only native libraries and a
  ``runtime.json`` manifest: a training wheel's (its Python extension, loaded through a private image; the
  form "extension"), or an inference wheel's C library and its provider libraries (``--inference``: a plain
  library, dlopened; the form "library"). It is where the runtime comes from on interpreters pip cannot
  install a wheel into.
- **The image cache** (``$ORT_CFFI_CACHE_DIR``, else ``<user cache>/ort_cffi``): the private copies
  of runtime files that the loader maps (see ``loader.py``).
- **The table of known runtime files** (``ort_cffi/data/runtimes.json``), written by
  ``scripts/survey_runtimes.py``: every published 1.19.2 training wheel's extension, its sha256 and
  where its ``OrtApiBase`` lies; and the inference wheels ``--inference`` fetches
  (``ort_cffi/data/inference_runtimes.json``, ``scripts/survey_inference_runtimes.py``): their sha256 and
  those of the libraries kept from them.
"""
from __future__ import annotations

import dataclasses
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional

CACHE_ENV = "ORT_CFFI_CACHE_DIR"
STORE_ENV = "ORT_CFFI_RUNTIME_DIR"
SELECT_ENV = "ORT_CFFI_RUNTIME"  # a store entry's name, or "cpu"/"cuda": which fetched runtime to use
MANIFEST = "runtime.json"
KNOWN_RUNTIMES = Path(__file__).resolve().parents[1] / "data" / "runtimes.json"
KNOWN_INFERENCE_RUNTIMES = KNOWN_RUNTIMES.with_name("inference_runtimes.json")


def _user_cache() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("ort_cffi", appauthor=False))


def cache_dir() -> Path:
    """The image cache: private copies of runtime files and what was found in them."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else _user_cache()


def store_dir() -> Path:
    """The runtime store: runtimes fetched by ``ort-cffi-runtime install``."""
    override = os.environ.get(STORE_ENV)
    return Path(override) if override else _user_cache() / "runtimes"


@dataclasses.dataclass(frozen=True)
class StoredRuntime:
    """One runtime in the store: its folder and manifest."""

    folder: Path
    name: str  # e.g. "cpu-1.19.2-cp312-x86_64"
    flavour: str  # "cpu" or "cuda" (training builds), "inference" or "inference-gpu"
    distribution: str  # the wheel's project: onnxruntime-training-cpu, onnxruntime-training, onnxruntime(-gpu)
    version: str
    wheel: str  # the wheel's file name
    wheel_sha256: str
    extension: str  # the file name of the runtime extension (or C library) inside the folder
    installed_ns: int  # when it was installed (the most recent is used by default)
    # "extension": a training wheel's Python extension, read statically and loaded through a private image;
    # "library": a plain C library exporting OrtGetApiBase, dlopened as it is. Manifests written before
    # inference builds could be stored have no form: they are extensions.
    form: str = "extension"

    @property
    def extension_path(self) -> Path:
        return self.folder / self.extension

    def manifest(self) -> Dict[str, Any]:
        record = dataclasses.asdict(self)
        del record["folder"]
        return record


def read_stored(folder: Path) -> Optional[StoredRuntime]:
    """The runtime in ``folder`` if its manifest is complete and its extension is there; else None."""
    try:
        record = json.loads((folder / MANIFEST).read_text())
        runtime = StoredRuntime(folder=folder, **record)
    except (OSError, ValueError, TypeError):
        return None
    return runtime if runtime.extension_path.is_file() else None


def stored_runtimes() -> List[StoredRuntime]:
    """Every complete runtime in the store, most recently installed first."""
    root = store_dir()
    if not root.is_dir():
        return []
    found = [read_stored(folder) for folder in root.iterdir() if folder.is_dir() and not folder.name.startswith(".")]
    return sorted((r for r in found if r is not None), key=lambda r: r.installed_ns, reverse=True)


def selected_runtime(runtimes: List[StoredRuntime]) -> Optional[StoredRuntime]:
    """The stored runtime the loader uses: ``$ORT_CFFI_RUNTIME`` (a name or a flavour) if set, else
    the most recently installed. None when the store is empty or nothing matches the selection."""
    wanted = os.environ.get(SELECT_ENV)
    if not wanted:
        return runtimes[0] if runtimes else None
    for runtime in runtimes:
        if wanted in (runtime.name, runtime.flavour):
            return runtime
    return None


@lru_cache(maxsize=1)
def known_runtimes() -> Dict[str, Any]:
    """The survey of published training wheels (``scripts/survey_runtimes.py``)."""
    return json.loads(KNOWN_RUNTIMES.read_text())


@lru_cache(maxsize=1)
def known_inference_runtimes() -> Dict[str, Any]:
    """The survey of inference wheels whose C library can be fetched (``scripts/survey_inference_runtimes.py``)."""
    return json.loads(KNOWN_INFERENCE_RUNTIMES.read_text())


def known_extension(sha256: str) -> Optional[Dict[str, Any]]:
    """The survey's row for a runtime file with this sha256, if it is one of the published ones."""
    for row in known_runtimes()["files"]:
        if row["extension_sha256"] == sha256:
            return dict(row)
    return None
