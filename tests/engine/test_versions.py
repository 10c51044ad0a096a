"""The engine across ONNX Runtime's inference releases, not only the two ends CI runs whole (1.19.2, 1.31.1).

scripts/check_versions.py runs the engine's tests on every release from 1.19 on (docs/guides/runtime.md,
versions); CI keeps a cheap sample of it here: the embedded example, 100 steps, on releases between the ends
(scripts/test.sh fetches them), losses within 1e-5 relative of the training build's. A release older than 1.19 is
refused by name.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
from conftest import DIGITS, ROOT
from test_engine_training import backends, compare, run

# Between the two releases the whole suite runs on (scripts/test.sh fetches both into .cache/)
INTERMEDIATE = ["1.20.1", "1.25.1"]


def release_library(version: str) -> Path:
    found = sorted((ROOT / ".cache" / f"ort-inference-{version}" / "onnxruntime" / "capi").glob("libonnxruntime.so.*"))
    if not found:
        pytest.fail(f"onnxruntime=={version}'s library is missing under .cache/: run scripts/test.sh")
    return found[0]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, np.ndarray]:
    """The training build's run of the embedded example, once for the releases below."""
    out = tmp_path_factory.mktemp("reference") / "training.npz"
    return run(DIGITS, DIGITS / "digits.npz", 100, out, backends()["training build"], "--batch", "32")


@pytest.mark.needs_training_build  # the reference is the training build's own training
@pytest.mark.parametrize("version", INTERMEDIATE)
def test_the_embedded_example_trains_alike_on_a_release_between_the_ends(
        version: str, reference: Dict[str, np.ndarray], tmp_path: Path) -> None:
    engine = run(DIGITS, DIGITS / "digits.npz", 100, tmp_path / "engine.npz",
                 {"ORT_CFFI_BACKEND": "", "ORT_CFFI_LIBRARY": str(release_library(version))}, "--batch", "32")
    assert str(engine["version"]) == version
    compare({"training build": reference, f"engine on {version}": engine}, 1e-5)


def test_a_wheel_older_than_1_19_is_refused_naming_its_version(tmp_path: Path) -> None:
    """Wheels before 1.19 ship no C library beside their extension (1.18.1's capi/ holds only the extension and
    libonnxruntime_providers_shared.so): the loader says which release it found and why it cannot use it."""
    site = tmp_path / "site"
    (site / "onnxruntime" / "capi").mkdir(parents=True)
    (site / "onnxruntime" / "__init__.py").write_text("")
    (site / "onnxruntime-1.18.1.dist-info").mkdir()
    (site / "onnxruntime-1.18.1.dist-info" / "METADATA").write_text("Name: onnxruntime\nVersion: 1.18.1\n")
    code = """
from ort_cffi import RuntimeNotFoundError
from ort_cffi.capi import get_runtime
try:
    get_runtime()
except RuntimeNotFoundError as error:
    print("refused:", error)
"""
    env = {**os.environ, "PYTHONPATH": str(site), "ORT_CFFI_LIBRARY": "", "ORT_CFFI_RUNTIME": "",
           "ORT_CFFI_BACKEND": "", "ORT_CFFI_RUNTIME_DIR": str(tmp_path / "store"),
           "ORT_CFFI_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the onnxruntime 1.18.1 wheel: no ONNX Runtime C library" in proc.stdout, proc.stdout
    assert "older than 1.19, the oldest release ort_cffi can use" in proc.stdout, proc.stdout
