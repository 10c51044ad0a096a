"""The loader: the training wheel through a private image and a cached offset, an explicit library,
and one test per error a user can meet. Loading happens in child processes: a process loads one
runtime, once."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_child

INFERENCE_LIBS = ROOT / ".cache"


def inference_library(version: str) -> Path:
    """A real inference-only libonnxruntime.so that scripts/test.sh installs into .cache/."""
    libs = sorted((INFERENCE_LIBS / f"ort-inference-{version}" / "onnxruntime" / "capi").glob("libonnxruntime.so*"))
    if not libs:
        pytest.fail(f"the onnxruntime=={version} inference library is missing under .cache/: run scripts/test.sh")
    return libs[0]


LOAD_AND_REPORT = """
import json, sys, time
start = time.perf_counter()
from ort_cffi.capi import ffi, get_runtime
rt = get_runtime()
elapsed = time.perf_counter() - start
status = rt.training_api.SetSeed(42)
print(json.dumps({
    "version": rt.version, "kind": rt.kind, "library": rt.library, "image": rt.image,
    "onnxruntime_imported": "onnxruntime" in sys.modules, "torch_imported": "torch" in sys.modules,
    "set_seed_null": status == ffi.NULL, "seconds": elapsed,
}))
"""


def load_in_child(env: dict) -> dict:
    return json.loads(run_child(LOAD_AND_REPORT, env=env).stdout.strip().splitlines()[-1])


def test_wheel_loads_without_importing_onnxruntime_or_torch(tmp_path):
    env = {"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": ""}
    cold = load_in_child(env)
    warm = load_in_child(env)
    print(f"import + load: cold cache {cold['seconds']:.3f} s, warm cache {warm['seconds']:.3f} s")
    for report in (cold, warm):
        assert report["version"] == "1.19.2"
        assert report["kind"] == "wheel"
        assert report["library"].endswith(".so") and "onnxruntime_pybind11_state" in report["library"]
        assert report["image"] != report["library"]  # a private copy, never the file `import onnxruntime` maps
        assert not report["onnxruntime_imported"]
        assert not report["torch_imported"]
        assert report["set_seed_null"]


def warm_cache(tmp_path) -> "tuple[dict, Path, dict]":
    """Load once into a fresh cache: the child's environment, the probe file and its record."""
    cache = tmp_path / "cache"
    env = {"ORT_CFFI_CACHE_DIR": str(cache), "ORT_CFFI_LIBRARY": ""}
    load_in_child(env)
    (entry,) = [p for p in cache.iterdir() if p.is_dir()]
    probe = entry / "probe.json"
    return env, probe, json.loads(probe.read_text())


def test_offset_is_cached_per_runtime_file_and_remeasured_when_stale(tmp_path):
    env, probe, record = warm_cache(tmp_path)
    assert record["identity"]["version"] == "1.19.2" and isinstance(record["offset"], int)

    mtime = probe.stat().st_mtime_ns
    load_in_child(env)
    assert probe.stat().st_mtime_ns == mtime, "a warm cache must not be measured again"

    probe.write_text("{ not json")  # unreadable: measured again
    assert load_in_child(env)["version"] == "1.19.2"
    assert json.loads(probe.read_text())["offset"] == record["offset"]

    stale = dict(record, identity=dict(record["identity"], mtime_ns=1))  # another file's identity: stale
    probe.write_text(json.dumps(stale))
    assert load_in_child(env)["version"] == "1.19.2"
    assert json.loads(probe.read_text())["identity"] == record["identity"]


def test_a_wrong_cached_offset_is_refused_then_remeasured(tmp_path):
    """An offset that points outside the image is never called through; the loader measures again."""
    env, probe, record = warm_cache(tmp_path)
    probe.write_text(json.dumps(dict(record, offset=1 << 40)))
    out = run_child(
        """
        from ort_cffi._loader import find_training_wheel, load_wheel
        from ort_cffi._errors import UnsupportedRuntimeError
        wheel, _ = find_training_wheel()
        try:
            load_wheel(wheel)
        except UnsupportedRuntimeError as e:
            print("refused:", e)
        """,
        env=env,
    ).stdout
    assert "refused:" in out and "refusing to call through it" in out
    probe.write_text(json.dumps(dict(record, offset=1 << 40)))
    assert load_in_child(env)["version"] == "1.19.2"  # get_runtime() measures again instead of failing


def test_explicit_library_without_training_api():
    lib = inference_library("1.19.2")
    proc = run_child(
        """
        from ort_cffi.capi import get_runtime
        from ort_cffi import TrainingApiUnavailableError
        try:
            get_runtime()
        except TrainingApiUnavailableError as e:
            print("error:", e)
        """,
        env={"ORT_CFFI_LIBRARY": str(lib)},
    )
    print(proc.stdout)
    assert "has no training API" in proc.stdout and str(lib) in proc.stdout
    assert "onnxruntime-training-cpu==1.19.2" in proc.stdout


def test_explicit_library_with_unknown_table_layout():
    lib = inference_library("1.20.1")
    proc = run_child(
        """
        from ort_cffi.capi import load_runtime
        from ort_cffi import UnsupportedRuntimeError
        try:
            load_runtime(%r)
        except UnsupportedRuntimeError as e:
            print("error:", e)
        """
        % str(lib),
        env={"ORT_CFFI_LIBRARY": ""},
    )
    print(proc.stdout)
    assert "ONNX Runtime 1.20.1" in proc.stdout and "refuses to guess offsets" in proc.stdout


def test_wheel_whose_version_does_not_match_its_image_is_refused(tmp_path):
    proc = run_child(
        """
        from ort_cffi._loader import find_training_wheel, load_wheel, WheelRuntime
        from ort_cffi.capi import Runtime
        from ort_cffi import UnsupportedRuntimeError
        wheel, _ = find_training_wheel()
        claimed = WheelRuntime(wheel.distribution, "1.18.0", wheel.extension)
        try:
            Runtime(load_wheel(claimed))
        except UnsupportedRuntimeError as e:
            print("error:", e)
        """,
        env={"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": ""},
    )
    print(proc.stdout)
    assert "reports version '1.19.2' but the installed wheel is '1.18.0'" in proc.stdout


def test_no_runtime_found_lists_what_was_tried(tmp_path):
    """A Python with ort_cffi and its dependencies but no onnxruntime package at all."""
    import cffi
    import filelock
    import numpy
    import platformdirs
    import pycparser

    site = tmp_path / "site"
    site.mkdir()
    for module in (cffi, numpy, platformdirs, filelock, pycparser):
        (site / Path(module.__file__).parent.name).symlink_to(Path(module.__file__).parent)
    import _cffi_backend

    (site / Path(_cffi_backend.__file__).name).symlink_to(_cffi_backend.__file__)
    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    if libs.is_dir():
        (site / "numpy.libs").symlink_to(libs)
    (site / "ort_cffi").symlink_to(ROOT / "ort_cffi")
    code = """
import sys
from ort_cffi.capi import get_runtime
from ort_cffi import RuntimeNotFoundError
try:
    get_runtime()
except RuntimeNotFoundError as e:
    print("error:", e)
    print("is ImportError:", isinstance(e, ImportError))
"""
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", ""), "ORT_CFFI_CACHE_DIR": str(tmp_path / "c")},
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    assert "no training-enabled ONNX Runtime found" in proc.stdout
    assert "$ORT_CFFI_LIBRARY: not set" in proc.stdout
    assert "no `onnxruntime` package on sys.path" in proc.stdout
    assert "pip install 'ort_cffi[cpu]'" in proc.stdout
    assert "is ImportError: True" in proc.stdout


def test_explicit_library_that_does_not_exist_or_is_not_onnxruntime(tmp_path):
    import ort_cffi._hook

    proc = run_child(
        """
        import sys
        from ort_cffi.capi import load_runtime
        from ort_cffi import RuntimeLoadError
        for path in sys.argv[1:] if len(sys.argv) > 1 else [%r, %r]:
            try:
                load_runtime(path)
            except RuntimeLoadError as e:
                print("error:", e)
        """
        % (str(tmp_path / "missing.so"), ort_cffi._hook.__file__),
        env={"ORT_CFFI_LIBRARY": ""},
    )
    print(proc.stdout)
    assert f"{tmp_path / 'missing.so'}' does not exist" in proc.stdout
    assert "exports no OrtGetApiBase" in proc.stdout


def test_one_runtime_per_process():
    lib = inference_library("1.19.2")
    proc = run_child(
        """
        from ort_cffi.capi import get_runtime, load_runtime
        from ort_cffi import RuntimeLoadError
        rt = get_runtime()
        assert load_runtime() is rt and get_runtime() is rt
        try:
            load_runtime(%r)
        except RuntimeLoadError as e:
            print("error:", e)
        """
        % str(lib),
        env={"ORT_CFFI_LIBRARY": ""},
    )
    assert "already loaded in this process" in proc.stdout


def test_onnxruntime_still_works_beside_the_private_image():
    """The user may import onnxruntime (before or after): the two images coexist."""
    run_child(
        """
        import numpy as np
        from ort_cffi import OrtEnvironment, OnnxTensor
        env = OrtEnvironment.getEnvironment()
        import onnxruntime
        assert onnxruntime.__version__ == "1.19.2"
        with OnnxTensor.createTensor(env, np.arange(3, dtype=np.float32)) as t:
            assert t.getValue().tolist() == [0, 1, 2]
        """,
        env={"ORT_CFFI_LIBRARY": ""},
    )
