"""Backends: what runs a training session below the one facade.

- ``training-api``: the ``OrtTrainingApi`` table of a training build of ONNX Runtime (1.19.2, the last one);
- ``engine``: ort_cffi's own training engine over the inference C API (``OrtApi`` alone), for every build ONNX
  Runtime ships now. It keeps the same ``OrtTrainingApi`` contract (``engine.table``), so the facade above is
  written once and never asks which backend runs.

The backend is decided once per process, when the first training object is made: the training build's table
where the loaded runtime has one, else the engine. ``$ORT_CFFI_BACKEND`` (``training-api``, ``engine`` or
``auto``) or ``use_backend()`` before that overrides it.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Optional

from ort_cffi._native.errors import TrainingApiUnavailableError
from ort_cffi._native.tables import get_runtime

BACKENDS = ("training-api", "engine")
ENVIRONMENT_VARIABLE = "ORT_CFFI_BACKEND"

_lock = threading.Lock()
_requested: Optional[str] = None  # use_backend()'s choice
_table: Any = None
_chosen: Optional[str] = None


def _normalise(name: str, where: str) -> str:
    value = name.strip().lower().replace("_", "-")
    if value in ("", "auto"):
        return "auto"
    if value not in BACKENDS:
        raise ValueError(f"{where} is {name!r}: it names a backend ort_cffi has not; use one of "
                         f"{', '.join(BACKENDS)} or auto")
    return value


def use_backend(name: str) -> None:
    """Choose the backend for this process: ``"training-api"``, ``"engine"`` or ``"auto"``.

    Java: none (ort_cffi addition).

    Raises:
        ValueError: An unknown name, or another backend already runs in this process (it is decided once).
    """
    global _requested
    choice = _normalise(name, "the backend")
    with _lock:
        if _chosen is not None and choice not in ("auto", _chosen):
            raise ValueError(f"the {_chosen} backend already runs in this process; the backend is decided once, "
                             "before the first training object is made")
        _requested = choice


def requested_backend() -> str:
    if _requested is not None and _requested != "auto":
        return _requested
    return _normalise(os.environ.get(ENVIRONMENT_VARIABLE, ""), f"${ENVIRONMENT_VARIABLE}")


def training_table() -> Any:
    """The ``OrtTrainingApi`` table of the process's backend (decided on the first call).

    Java: none (the raw C API).

    Returns:
        The training build's table (cffi functions), or ort_cffi's engine's (Python functions with the same 33
            names and C signatures, returning ``OrtStatus*``), shared: nobody owns it and nothing closes it; it
            stays valid until the process ends.

    Raises:
        TrainingApiUnavailableError: The training-api backend was asked for and the runtime has no training API.
        RuntimeNotFoundError: No runtime was found.
    """
    global _table, _chosen
    table = _table
    if table is not None:
        return table
    with _lock:
        if _table is None:
            runtime = get_runtime()
            choice = requested_backend()
            if choice == "auto":
                choice = "training-api" if runtime.training_api is not None else "engine"
            if choice == "training-api":
                if runtime.training_api is None:
                    raise TrainingApiUnavailableError(
                        f"ONNX Runtime {runtime.version} at {runtime.library} has no training API (GetTrainingApi "
                        f"returned NULL) and the training-api backend was asked for (${ENVIRONMENT_VARIABLE} or "
                        "use_backend): it is an inference-only build. Install onnxruntime-training-cpu==1.19.2 "
                        "(ort_cffi's `[cpu]` extra; on CPython 3.13 and later `ort-cffi-runtime install`), or let "
                        "ort_cffi's engine train on this build (the default)")
                _table = runtime.training_api
            else:
                from ort_cffi._backends.engine.table import EngineTrainingApi

                _table = EngineTrainingApi(runtime)
            _chosen = choice
        return _table


def backend() -> str:
    """Which backend runs training in this process: ``"training-api"`` or ``"engine"`` (deciding it now if no
    training object was made yet).

    Java: none (ort_cffi addition).
    """
    training_table()
    assert _chosen is not None
    return _chosen
