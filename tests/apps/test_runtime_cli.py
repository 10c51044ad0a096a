"""``ort-cffi-runtime``: fetching the training build where pip cannot install it, and the loader
finding it. Each test works in its own runtime store and image cache (temporary folders)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_child
from ort_cffi._native.loader import find_inference_wheel, find_training_wheel
from ort_cffi._native.store import known_runtimes
from ort_cffi.runtime import RuntimeInstallError, choose_wheel, machine, prepare_generator, stored_runtimes
from ort_cffi.runtime.generator import extension_name

SURVEY_WHEELS = ROOT / ".cache" / "survey"


def cli(args: "list[str]", env: dict, check: bool = True) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **env)
    proc = subprocess.run([sys.executable, "-m", "ort_cffi.runtime", *args], capture_output=True, text=True,
                          env=full_env, cwd=str(ROOT), timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"ort-cffi-runtime {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def store(tmp_path) -> dict:
    return {"ORT_CFFI_RUNTIME_DIR": str(tmp_path / "store"), "ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"),
            "ORT_CFFI_LIBRARY": "", "ORT_CFFI_RUNTIME": ""}


def nearest_row() -> dict:
    return choose_wheel("cpu", sys.version_info[:2], machine())


def test_the_nearest_published_build_is_chosen():
    def tag(flavour: str, version: "tuple[int, int]") -> str:
        return choose_wheel(flavour, version, "x86_64")["python_tag"]

    assert tag("cpu", (3, 13)) == "cp312" and tag("cpu", (3, 14)) == "cp312"  # newer: the newest build
    assert tag("cpu", (3, 10)) == "cp310" and tag("cpu", (3, 12)) == "cp312"  # published: its own
    assert tag("cpu", (3, 7)) == "cp38"  # older than any: the oldest
    assert tag("cuda", (3, 12)) == "cp311" and tag("cuda", (3, 13)) == "cp311"  # CUDA stops at 3.11
    with pytest.raises(RuntimeInstallError, match="published no onnxruntime-training-cpu 1.19.2 wheel for Linux aarch64"):
        choose_wheel("cpu", (3, 11), "aarch64")


def test_install_list_path_load_and_remove_a_fetched_runtime(store):
    row = nearest_row()
    wheel = SURVEY_WHEELS / row["wheel"]
    assert wheel.is_file(), f"{wheel} is missing: scripts/test.sh fetches it"
    name = f"cpu-1.19.2-{row['python_tag']}-x86_64"

    out = cli(["install", "--wheel", str(wheel)], store).stdout
    print(out)
    assert f"installed {name} in {Path(store['ORT_CFFI_RUNTIME_DIR']) / name}" in out
    assert "ONNX Runtime 1.19.2 loads here, training API present" in out
    folder = Path(store["ORT_CFFI_RUNTIME_DIR"]) / name
    manifest = json.loads((folder / "runtime.json").read_text())
    assert manifest["wheel_sha256"] == row["wheel_sha256"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["runtime.json", "libonnxruntime_providers_shared.so", Path(row["extension"]).name, "generator"]
    )  # the native libraries, and the wheel's Python package for the generator (without them)
    assert (folder / "generator" / "onnxruntime" / "training" / "artifacts.py").is_file()
    assert f"generator: ONNX Runtime's Python layer kept in {folder / 'generator'}" in out

    assert "already installed" in cli(["install", "--wheel", str(wheel)], store).stdout
    chosen = dict(store, ORT_CFFI_RUNTIME="cpu")  # the fetched runtime even where a wheel is installed
    listed = cli(["list"], chosen).stdout
    assert f" * {name}" in listed and row["wheel"] in listed
    # an installed wheel, training or inference (the engine legs put onnxruntime's on the path), comes before the
    # store: then the loader uses it and no entry has the star
    wheel_installed = find_training_wheel()[0] is not None or find_inference_wheel()[0] is not None
    assert (f" * {name}" in cli(["list"], store).stdout) is not wheel_installed

    assert cli(["path"], chosen).stdout.strip() == str(folder / Path(row["extension"]).name)
    report = run_child(
        """
        import json
        import numpy as np
        from ort_cffi import OrtEnvironment
        from ort_cffi.capi import get_runtime
        env = OrtEnvironment.getEnvironment()
        art = "tests/artifacts/tiny/"
        with env.createTrainingSession(art + "checkpoint", art + "training_model.onnx", art + "eval_model.onnx",
                                       art + "optimizer_model.onnx") as session:
            rng = np.random.default_rng(0)
            batch = {"input": rng.standard_normal((4, 784)).astype(np.float32), "labels": np.array([1, 2, 3, 4])}
            with session.trainStep(batch) as result:
                loss = float(result.get(0).getValue())
        rt = get_runtime()
        print(json.dumps({"kind": rt.kind, "library": rt.library, "loss": loss}))
        """,
        env=chosen,
    ).stdout
    loaded = json.loads(report.strip().splitlines()[-1])
    assert loaded["kind"] == "fetched" and loaded["library"].startswith(str(folder)) and loaded["loss"] > 0

    missing = run_child(
        """
        from ort_cffi.capi import get_runtime
        from ort_cffi import RuntimeNotFoundError
        try:
            get_runtime()
        except RuntimeNotFoundError as e:
            print("error:", e)
        """,
        env=dict(store, ORT_CFFI_RUNTIME="cuda"),
    ).stdout
    assert "$ORT_CFFI_RUNTIME='cuda': no such runtime" in missing and f"(installed: {name})" in missing

    assert cli(["remove", "nothing-of-the-kind"], store, check=False).returncode == 1
    assert f"removed {name}" in cli(["remove", name], store).stdout
    assert not folder.exists()
    assert "(empty" in cli(["list"], store).stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["install", "--python-version", "3"], "'3' is not a CPython version like 3.12"),
        (["install", "--python-version", "3.x"], "'3.x' is not a CPython version like 3.12"),
        (["install", "--wheel", "/nonexistent.whl"], "/nonexistent.whl is not a file"),
    ],
)
def test_a_bad_argument_is_a_one_line_usage_error(store, args, message):
    """Before, these ended in IndexError, ValueError and FileNotFoundError tracebacks."""
    proc = cli(args, store, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_an_unwritable_store_is_an_error_not_a_traceback(store, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    row = nearest_row()
    proc = cli(["install", "--wheel", str(SURVEY_WHEELS / row["wheel"])], dict(store, ORT_CFFI_RUNTIME_DIR=str(blocked / "store")), check=False)
    assert proc.returncode == 2 and "ort-cffi-runtime:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_wheel_ort_cffi_has_not_surveyed_is_refused(store):
    (reference, *_) = known_runtimes()["reference"]
    proc = cli(["install", "--wheel", str(SURVEY_WHEELS / reference["wheel"])], store, check=False)
    assert proc.returncode == 2
    assert "is not one of the published 1.19.2 Linux training wheels ort_cffi knows" in proc.stderr


def test_install_fetches_the_nearest_build_with_pip(store):
    """The real thing: pip downloads the wheel from PyPI (checking its hash), the store keeps the
    native libraries, the runtime loads in this interpreter."""
    row = nearest_row()
    out = cli(["install"], store).stdout
    print(out)
    assert f"fetching {row['wheel']}" in out
    assert "ONNX Runtime 1.19.2 loads here, training API present" in out


# --- the generator's copy of the extension (ONNX Runtime's Python layer in this interpreter) ---------------

def installed(store: dict, monkeypatch: pytest.MonkeyPatch, row: dict):
    """``row``'s wheel installed into the test's store, which this process then reads."""
    cli(["install", "--wheel", str(SURVEY_WHEELS / row["wheel"])], store)
    for key, value in store.items():
        monkeypatch.setenv(key, value)
    return stored_runtimes()[0]  # the most recently installed


def test_the_generators_copy_changes_only_the_renames_and_the_version_check(store, monkeypatch):
    """The nearest build's extension, copied for this interpreter under its own suffix: on the build's own
    CPython byte for byte the file; on a newer one (cp312 in 3.13) only the renamed imports and the version
    string pybind11 checks differ, at the offset the survey recorded (docs/internals/runtime.md §7)."""
    row = nearest_row()
    runtime = installed(store, monkeypatch, row)
    layer = prepare_generator(runtime)
    copy = layer / "onnxruntime" / "capi" / extension_name()
    original, copied = runtime.extension_path.read_bytes(), copy.read_bytes()
    assert len(copied) == len(original)
    changed = [i for i in range(0, len(original), 1 << 16) if original[i : i + (1 << 16)] != copied[i : i + (1 << 16)]]
    check = row["pybind11_version_check"]
    running = "%d.%d" % sys.version_info[:2]
    if running == check["compiled_for"]:
        assert changed == []
    else:
        offset = check["offset"]
        assert copied[offset - 1 : offset + 5] == b"\0" + running.encode() + b"\0"
        assert original[offset - 1 : offset + 5] == b"\0" + check["compiled_for"].encode() + b"\0"
        assert b"PyThreadState_GetUnchecked\0\0" in copied
    assert prepare_generator(runtime) == layer  # made once


@pytest.mark.parametrize("damage", ["truncated", "another build"])
def test_a_truncated_or_unknown_extension_is_refused_before_anything_is_patched(store, monkeypatch, damage):
    runtime = installed(store, monkeypatch, nearest_row())
    capi = runtime.folder / "generator" / "onnxruntime" / "capi"
    (capi / extension_name()).unlink()  # the copy install made for this interpreter: made again from the damaged file
    if damage == "truncated":
        data = runtime.extension_path.read_bytes()
        runtime.extension_path.write_bytes(data[: len(data) // 2])
    else:  # a real ONNX Runtime extension, but of a build the survey does not list (the inference wheel's)
        (other,) = (ROOT / ".cache" / "ort-inference-1.19.2" / "onnxruntime" / "capi").glob("onnxruntime_pybind11_state*.so")
        runtime.extension_path.write_bytes(other.read_bytes())
    with pytest.raises(RuntimeInstallError, match="is not a runtime file the survey of published wheels knows"):
        prepare_generator(runtime)
    assert not list(capi.glob("onnxruntime_pybind11_state*")) and not list(capi.glob(".onnxruntime_pybind11_state*"))


def test_a_build_newer_than_the_interpreter_or_without_a_surveyed_check_is_refused(store, monkeypatch):
    newer = [r for r in known_runtimes()["files"] if r["flavour"] == "cpu"
             and (int(r["python_tag"][2]), int(r["python_tag"][3:])) > sys.version_info[:2]]
    if newer:  # on 3.12 and later no published build is newer
        runtime = installed(store, monkeypatch, newer[0])
        with pytest.raises(RuntimeInstallError, match="as a Python module it imports in that CPython and later ones only"):
            prepare_generator(runtime)
    runtime = installed(store, monkeypatch, nearest_row())
    (runtime.folder / "generator" / "onnxruntime" / "capi" / extension_name()).unlink()
    surveyed = json.loads(json.dumps(known_runtimes()))
    for row in surveyed["files"]:
        row["pybind11_version_check"] = None  # a layout the survey did not locate
    monkeypatch.setattr("ort_cffi._native.store.known_runtimes", lambda: surveyed)
    with pytest.raises(RuntimeInstallError, match="the survey did not locate pybind11's version check"):
        prepare_generator(runtime)


def test_a_build_older_than_3_12_is_not_patched_for_a_newer_interpreter(store, monkeypatch):
    """pybind11 compiled for CPython 3.11 or older crashes in PyInit once patched into a newer interpreter
    (the cp311 builds in 3.12 and 3.13 segfault): such a build is refused for generation, before anything is
    written, so that a CPU build for 3.12 beside it (or --python) is used instead."""
    older = max((r for r in known_runtimes()["files"] if r["flavour"] == "cpu"
                 and (int(r["python_tag"][2]), int(r["python_tag"][3:])) < min(sys.version_info[:2], (3, 12))),
                key=lambda r: int(r["python_tag"][3:]))
    runtime = installed(store, monkeypatch, older)
    capi = runtime.folder / "generator" / "onnxruntime" / "capi"
    with pytest.raises(RuntimeInstallError, match=r"whose Python layer crashes in newer interpreters"):
        prepare_generator(runtime)
    assert not list(capi.glob(f"{extension_name()}*")) and not list(capi.glob(f".{extension_name()}*"))
