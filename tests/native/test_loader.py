"""The loader: the training wheel through a private image found statically and cached, an explicit
library or extension, and one test per error a user can meet. Loading happens in child processes: a
process loads one runtime, once."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_child
from ort_cffi._native.loader import find_runtime_file

INFERENCE_LIBS = ROOT / ".cache"


def inference_library(version: str) -> Path:
    """A real inference-only libonnxruntime.so that scripts/test.sh installs into .cache/."""
    libs = sorted((INFERENCE_LIBS / f"ort-inference-{version}" / "onnxruntime" / "capi").glob("libonnxruntime.so*"))
    if not libs:
        pytest.fail(f"the onnxruntime=={version} inference library is missing under .cache/: run scripts/test.sh")
    return libs[0]


LOAD_AND_REPORT = """
import json, subprocess, sys, time

def no_child(*args, **kwargs):
    raise AssertionError("the loader started a child process")

subprocess.Popen = no_child  # loading must run nothing: no probe child, no compiler
start = time.perf_counter()
from ort_cffi.capi import ffi, get_runtime
rt = get_runtime()
elapsed = time.perf_counter() - start
status = rt.training_api.SetSeed(42)
print(json.dumps({
    "version": rt.version, "kind": rt.kind, "library": rt.library, "image": rt.image, "known_as": rt.known_as,
    "renamed": list(rt.renamed), "onnxruntime_imported": "onnxruntime" in sys.modules,
    "torch_imported": "torch" in sys.modules, "elftools_imported": "elftools" in sys.modules,
    "set_seed_null": status == ffi.NULL, "seconds": elapsed,
}))
"""


def load_in_child(env: dict) -> dict:
    return json.loads(run_child(LOAD_AND_REPORT, env=env).stdout.strip().splitlines()[-1])


def default_source():
    """The runtime file the default search finds here: the installed wheel (CPython 3.8-3.12), or
    the runtime scripts/test.sh fetched with ort-cffi-runtime (3.13 and later)."""
    source, tried = find_runtime_file()
    assert source is not None, tried
    return source


@pytest.mark.needs_training_build  # the training wheel's extension, found statically and mapped as a private image
def test_wheel_loads_without_importing_onnxruntime_or_torch_or_running_a_child(tmp_path):
    env = {"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": ""}
    cold = load_in_child(env)
    warm = load_in_child(env)
    print(f"import + load: cold cache {cold['seconds']:.3f} s, warm cache {warm['seconds']:.3f} s")
    for report in (cold, warm):
        assert report["version"] == "1.19.2"
        assert report["kind"] == default_source().kind
        assert report["library"].endswith(".so") and "onnxruntime_pybind11_state" in report["library"]
        assert report["image"] != report["library"]  # a private copy, never the file `import onnxruntime` maps
        assert report["known_as"].startswith("onnxruntime_training_cpu-1.19.2-cp")  # found in the survey by sha256
        assert not report["onnxruntime_imported"]
        assert not report["torch_imported"]
        assert report["set_seed_null"]
    assert cold["elftools_imported"] and not warm["elftools_imported"]  # a warm cache reads no ELF file


def warm_cache(tmp_path) -> "tuple[dict, Path, dict]":
    """Load once into a fresh cache: the child's environment, the record file and its content."""
    cache = tmp_path / "cache"
    env = {"ORT_CFFI_CACHE_DIR": str(cache), "ORT_CFFI_LIBRARY": ""}
    load_in_child(env)
    (entry,) = [p for p in cache.iterdir() if p.is_dir()]
    record = entry / "image.json"
    return env, record, json.loads(record.read_text())


@pytest.mark.needs_training_build  # the cache of the training wheel's extension image
def test_what_was_found_is_cached_per_runtime_file_and_examined_again_when_stale(tmp_path):
    env, record_file, record = warm_cache(tmp_path)
    assert record["identity"]["version"] == "1.19.2" and isinstance(record["location"]["api_base"], int)
    assert record["known"]["extension_sha256"] == record["sha256"]

    mtime = record_file.stat().st_mtime_ns
    load_in_child(env)
    assert record_file.stat().st_mtime_ns == mtime, "a warm cache must not be examined again"

    record_file.write_text("{ not json")  # unreadable: examined again
    assert load_in_child(env)["version"] == "1.19.2"
    assert json.loads(record_file.read_text())["location"] == record["location"]

    stale = dict(record, identity=dict(record["identity"], mtime_ns=1))  # another file's identity: stale
    record_file.write_text(json.dumps(stale))
    assert load_in_child(env)["version"] == "1.19.2"
    assert json.loads(record_file.read_text())["identity"] == record["identity"]


@pytest.mark.needs_training_build  # the cache of the training wheel's extension image
def test_a_wrong_cached_address_is_refused_then_examined_again(tmp_path):
    """An address that points outside the image is never called through; the loader examines the file again."""
    env, record_file, record = warm_cache(tmp_path)
    tampered = dict(record, location=dict(record["location"], api_base=1 << 40))
    record_file.write_text(json.dumps(tampered))
    out = run_child(
        """
        from ort_cffi._native.loader import find_runtime_file, load_extension
        from ort_cffi._native.errors import UnsupportedRuntimeError
        source, _ = find_runtime_file()
        try:
            load_extension(source)
        except UnsupportedRuntimeError as e:
            print("refused:", e)
        """,
        env=env,
    ).stdout
    assert "refused:" in out and "refusing to call through it" in out
    record_file.write_text(json.dumps(tampered))
    assert load_in_child(env)["version"] == "1.19.2"  # get_runtime() examines the file again instead of failing
    assert json.loads(record_file.read_text())["location"] == record["location"]


@pytest.mark.needs_training_build  # the cache of the training wheel's extension image
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the image is edited as x86_64 RELA entries")
def test_a_damaged_cached_image_is_replaced_by_a_new_copy_in_the_same_process(tmp_path):
    """The record is right but the private copy is not (its relocation of OrtApiBase.GetApi points
    outside the image): the checks refuse it, and the retry in the same process maps a new copy.
    Before, the retry rewrote the copy under the same path, which the dynamic loader answers with
    the image already mapped: the retry could never succeed."""
    import struct

    env, record_file, record = warm_cache(tmp_path)
    image = record_file.parent / record["image"]
    location = record["location"]
    entry = struct.pack("<QQq", location["api_base"], 8, location["get_api"])  # R_X86_64_RELATIVE
    data = image.read_bytes()
    assert data.count(entry) == 1
    image.write_bytes(data.replace(entry, struct.pack("<QQq", location["api_base"], 8, 1 << 40)))
    report = load_in_child(env)
    assert report["version"] == "1.19.2" and report["set_seed_null"]
    fresh = json.loads(record_file.read_text())
    assert fresh["image"] != record["image"] and report["image"] == str(record_file.parent / fresh["image"])
    assert not image.exists()  # the damaged copy is gone


def test_pruning_leaves_an_entry_another_process_is_writing(tmp_path):
    """Writing a new entry prunes stale ones, but never one whose lock another process holds (it is
    being written: it has no record yet)."""
    from filelock import FileLock

    from ort_cffi._native.loader import _prune_stale_entries

    busy, crashed, keep = (tmp_path / name for name in ("image-busy", "image-crashed", "image-keep"))
    for entry in (busy, crashed, keep):
        entry.mkdir()
        (entry / "half-written.so").write_bytes(b"x")
    holder = subprocess.Popen(  # another process: holds the busy entry's lock until its stdin closes
        [sys.executable, "-c", "import sys\nfrom filelock import FileLock\n"
         f"with FileLock({str(busy) + '.lock'!r}):\n    print('held', flush=True)\n    sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        _prune_stale_entries(keep)
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert busy.is_dir() and keep.is_dir() and not crashed.exists()
    with FileLock(str(busy) + ".lock", timeout=0):  # free again: the next prune may take it
        pass


@pytest.mark.needs_training_build  # the survey of published training wheels, checked against the installed one
def test_a_known_file_whose_static_answer_differs_from_the_survey_is_refused(tmp_path):
    """The survey (ort_cffi/data/runtimes.json) is the reference for published files: a disagreement
    means the finder or the file is not what was surveyed, and nothing is called through it. The
    table is altered in the child (the runtime file stays real)."""
    proc = run_child(
        """
        from ort_cffi._native import store as _store
        from ort_cffi.capi import get_runtime
        from ort_cffi import RuntimeLoadError
        survey = _store.known_runtimes()
        for row in survey["files"]:
            row["api_base"] += 8
        try:
            get_runtime()
        except RuntimeLoadError as e:
            print("error:", e)
        """,
        env={"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": ""},
    )
    print(proc.stdout)
    assert "is the runtime of onnxruntime_training_cpu-1.19.2-cp" in proc.stdout
    assert "differs from the survey's" in proc.stdout and "refusing to use it" in proc.stdout


@pytest.mark.needs_training_build  # the training wheel's extension named explicitly
def test_an_explicit_wheel_extension_loads_through_a_private_image(tmp_path):
    """ORT_CFFI_LIBRARY may name a training wheel's extension file as well as a real library."""
    report = load_in_child({"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": str(default_source().path)})
    assert report["kind"] == "extension" and report["version"] == "1.19.2" and report["set_seed_null"]
    assert report["image"] != report["library"]


def test_explicit_library_without_training_api_trains_on_the_engine():
    """An inference build loads; training runs on ort_cffi's engine, unless the training API is asked for,
    which is then refused naming what to install."""
    lib = inference_library("1.19.2")
    script = """
        import ort_cffi
        from ort_cffi.capi import get_runtime
        from ort_cffi import TrainingApiUnavailableError
        print("training table:", get_runtime().training_api)
        try:
            print("backend:", ort_cffi.backend())
        except TrainingApiUnavailableError as e:
            print("error:", e)
        """
    proc = run_child(script, env={"ORT_CFFI_LIBRARY": str(lib), "ORT_CFFI_BACKEND": ""})
    assert "training table: None" in proc.stdout and "backend: engine" in proc.stdout, proc.stdout + proc.stderr
    proc = run_child(script, env={"ORT_CFFI_LIBRARY": str(lib), "ORT_CFFI_BACKEND": "training-api"})
    print(proc.stdout)
    assert "has no training API" in proc.stdout and str(lib) in proc.stdout
    assert "onnxruntime-training-cpu==1.19.2" in proc.stdout


@pytest.mark.parametrize("version", ["1.20.1", "1.31.1"])
def test_explicit_library_of_a_later_release_loads_its_version_19_tables(version):
    """OrtApi is append-only: a later 1.x release offers API version 19's table; training runs on the engine."""
    lib = inference_library(version)
    proc = run_child(
        """
        import ort_cffi
        from ort_cffi.capi import load_runtime
        rt = load_runtime(%r)
        print("version:", rt.version, "training table:", rt.training_api, "backend:", ort_cffi.backend())
        """
        % str(lib),
        env={"ORT_CFFI_LIBRARY": "", "ORT_CFFI_BACKEND": ""},
    )
    assert f"version: {version} training table: None backend: engine" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("version", ["1.18.1", "1.9.0", "2.0.0"])
def test_a_runtime_outside_the_declared_tables_is_refused(version):
    """No wheel before 1.19 ships its C library, so the gate is checked on the versions themselves."""
    from ort_cffi._native.errors import UnsupportedRuntimeError
    from ort_cffi._native.tables import check_layout

    with pytest.raises(UnsupportedRuntimeError, match=f"ONNX Runtime {version} .*refuses to guess offsets"):
        check_layout(version, "/lib/libonnxruntime.so")
    assert check_layout("1.19.2", "x") == (1, 19) and check_layout("1.31.1", "x") == (1, 31)


def test_wheel_whose_version_does_not_match_its_image_is_refused(tmp_path):
    proc = run_child(
        """
        import dataclasses
        from ort_cffi._native.loader import find_runtime_file, load_extension
        from ort_cffi import RuntimeLoadError
        source, _ = find_runtime_file()
        claimed = dataclasses.replace(source, version="1.18.0")
        try:
            load_extension(claimed)
        except RuntimeLoadError as e:
            print("error:", e)
        """,
        env={"ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_LIBRARY": ""},
    )
    print(proc.stdout)
    assert "no OrtApiBase found in" in proc.stdout and "returning the version string '1.18.0'" in proc.stdout


def test_no_runtime_found_lists_what_was_tried(tmp_path):
    """A Python with ort_cffi and its dependencies but no onnxruntime package at all."""
    import cffi
    import elftools
    import filelock
    import numpy
    import platformdirs
    import pycparser

    site = tmp_path / "site"
    site.mkdir()
    for module in (cffi, numpy, platformdirs, filelock, pycparser, elftools):
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
        env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", ""), "ORT_CFFI_CACHE_DIR": str(tmp_path / "c"),
             "ORT_CFFI_RUNTIME_DIR": str(tmp_path / "store")},
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0
    assert "no ONNX Runtime found" in proc.stdout
    assert "$ORT_CFFI_LIBRARY: not set" in proc.stdout
    assert "no `onnxruntime` package on sys.path" in proc.stdout
    assert "`pip install onnxruntime` (any current CPython and platform" in proc.stdout
    assert "pip install onnxruntime-training-cpu==1.19.2" in proc.stdout
    assert "`ort-cffi-runtime install`" in proc.stdout  # where pip cannot install the wheel
    assert "runtimes fetched by `ort-cffi-runtime install`: none in" in proc.stdout
    assert "is ImportError: True" in proc.stdout


def test_explicit_library_that_does_not_exist_or_is_not_onnxruntime(tmp_path):
    not_onnxruntime = inference_library("1.19.2").parent / "libonnxruntime_providers_shared.so"
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
        % (str(tmp_path / "missing.so"), str(not_onnxruntime)),
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


@pytest.mark.needs_onnxruntime_python
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
