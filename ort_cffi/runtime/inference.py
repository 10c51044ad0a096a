"""Fetch the C library of ONNX Runtime's current inference build (``ort-cffi-runtime install --inference``).

ort_cffi trains on an inference build through its own engine (docs/guides/runtime.md). Where pip can install
``onnxruntime`` (or ``onnxruntime-gpu``) into the interpreter, that is the way; where it cannot (an interpreter
newer than the newest wheel, CPython 3.15 for example), this fetches the wheel with pip and keeps only its C
library, ``capi/libonnxruntime.so.*``, and the provider libraries beside it (``libonnxruntime_providers_*.so``:
the CUDA and TensorRT providers of the GPU build load from there). That library links no CPython, so one wheel
per machine serves every interpreter: the survey (``data/inference_runtimes.json``, written by
``scripts/survey_inference_runtimes.py``) records one per machine, with the sha256 of the wheel (pip also checks
PyPI's) and of each library kept from it; anything else is refused. The loader dlopens the stored library as it
is (no private image: nothing in it needs renaming).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from ort_cffi._facade.files import file_sha256
from ort_cffi._facade.runtimes import StoredRuntime, known_inference_runtimes, store_dir
from ort_cffi.runtime.errors import RuntimeInstallError
from ort_cffi.runtime.store_entry import publish

INFERENCE_FLAVOURS = {"inference": "onnxruntime", "inference-gpu": "onnxruntime-gpu"}
LIBRARY_PREFIX = "onnxruntime/capi/"
MANYLINUX_GLIBC = (2, 28)  # the surveyed wheels are manylinux_2_28 builds


def version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def inference_rows(flavour: str) -> List[Dict[str, Any]]:
    """The survey's rows of one flavour ("inference" or "inference-gpu")."""
    distribution = INFERENCE_FLAVOURS[flavour]
    return [row for row in known_inference_runtimes()["files"] if row["distribution"] == distribution]


def choose_inference_wheel(flavour: str, version: Optional[str], arch: str) -> Dict[str, Any]:
    """The surveyed wheel of ``flavour`` for Linux ``arch``: of ``version``, else of the newest surveyed version."""
    if sys.platform != "linux":
        raise RuntimeInstallError(
            f"ort-cffi-runtime fetches Linux libraries only, not for {sys.platform}: there, `pip install "
            f"{INFERENCE_FLAVOURS[flavour]}` installs the runtime ort_cffi's engine trains on"
        )
    distribution = INFERENCE_FLAVOURS[flavour]
    rows = [row for row in inference_rows(flavour) if row["machine"] == arch]
    if not rows:
        machines = sorted({row["machine"] for row in inference_rows(flavour)})
        raise RuntimeInstallError(f"ort_cffi knows no {distribution} wheel for Linux {arch} (only for {', '.join(machines)})")
    if version is not None:
        matching = [row for row in rows if row["version"] == version]
        if not matching:
            known = ", ".join(sorted({row["version"] for row in rows}, key=version_key))
            raise RuntimeInstallError(
                f"ort_cffi knows no {distribution} {version} wheel for Linux {arch} (known: {known}); "
                f"scripts/survey_inference_runtimes.py --version {version} adds one, or set ORT_CFFI_LIBRARY to its "
                "libonnxruntime.so"
            )
        return matching[0]
    return max(rows, key=lambda row: version_key(row["version"]))


def row_of_inference_wheel(wheel: Path) -> Dict[str, Any]:
    """The survey's row for a wheel file, checked by hash."""
    digest = file_sha256(wheel)
    for row in known_inference_runtimes()["files"]:
        if row["wheel_sha256"] == digest:
            return dict(row)
    raise RuntimeInstallError(
        f"{wheel} (sha256 {digest}) is not one of the inference wheels ort_cffi surveyed "
        "(ort_cffi/data/inference_runtimes.json); for another build, set ORT_CFFI_LIBRARY to its libonnxruntime.so"
    )


def flavour_of(row: Dict[str, Any]) -> str:
    return next(flavour for flavour, distribution in INFERENCE_FLAVOURS.items() if distribution == row["distribution"])


def install_library(wheel: Path, row: Dict[str, Any]) -> StoredRuntime:
    """Unpack the C library and provider libraries of a checked wheel into a new store folder, atomically;
    each file is checked against the survey's sha256."""
    flavour = flavour_of(row)
    name = f"{flavour}-{row['version']}-{row['machine']}"
    root = store_dir()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for file_name, sha256 in row["files"].items():
                target = staging / file_name
                try:
                    source = archive.open(LIBRARY_PREFIX + file_name)
                except KeyError as error:
                    raise RuntimeInstallError(f"{wheel} has no {LIBRARY_PREFIX}{file_name}: not the surveyed file") from error
                with source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                os.chmod(target, 0o755)
                if file_sha256(target) != sha256:
                    raise RuntimeInstallError(f"{file_name} in {wheel} differs from the survey's: refusing it")
        runtime = StoredRuntime(
            folder=root / name, name=name, flavour=flavour, distribution=row["distribution"], version=row["version"],
            wheel=row["wheel"], wheel_sha256=row["wheel_sha256"], extension=row["library"], installed_ns=time.time_ns(),
            form="library",
        )
        return publish(staging, runtime)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
