"""``ort-cffi-runtime install --inference``: the current inference build's C library fetched into the runtime
store for interpreters pip has no wheel for, checked by hash, and dlopened by the loader; ort_cffi's engine
trains on it. The fetch is real (pip downloads the surveyed wheel from PyPI, once per test session)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, run_child
from ort_cffi._native.loader import find_inference_wheel, find_training_wheel
from ort_cffi._native.store import known_inference_runtimes
from ort_cffi.runtime import RuntimeInstallError, has_training_build, machine
from ort_cffi.runtime.inference import choose_inference_wheel, install_library


def cli(args: "list[str]", env: dict, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "ort_cffi.runtime", *args], capture_output=True, text=True,
                          env=dict(os.environ, **env), cwd=str(ROOT), timeout=900)
    if check and proc.returncode != 0:
        raise AssertionError(f"ort-cffi-runtime {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def store_env(folder: Path) -> dict:
    return {"ORT_CFFI_RUNTIME_DIR": str(folder / "store"), "ORT_CFFI_CACHE_DIR": str(folder / "cache"),
            "ORT_CFFI_LIBRARY": "", "ORT_CFFI_RUNTIME": "", "ORT_CFFI_BACKEND": ""}


@pytest.fixture(scope="session")
def fetched(tmp_path_factory) -> "tuple[dict, str]":
    """One real fetch per session: the newest surveyed onnxruntime for this machine, into a store of its own."""
    env = store_env(tmp_path_factory.mktemp("inference-store"))
    return env, cli(["install", "--inference"], env).stdout


def test_the_newest_surveyed_build_is_chosen_and_others_are_refused_by_name():
    newest = max(row["version"] for row in known_inference_runtimes()["files"])
    assert choose_inference_wheel("inference", None, "x86_64")["version"] == newest
    assert choose_inference_wheel("inference", "1.31.1", "aarch64")["wheel"].endswith("manylinux_2_28_aarch64.whl")
    assert choose_inference_wheel("inference-gpu", None, "x86_64")["distribution"] == "onnxruntime-gpu"
    with pytest.raises(RuntimeInstallError, match=r"knows no onnxruntime 1\.2\.3 wheel for Linux x86_64 \(known: "):
        choose_inference_wheel("inference", "1.2.3", "x86_64")
    with pytest.raises(RuntimeInstallError, match="knows no onnxruntime-gpu wheel for Linux aarch64"):
        choose_inference_wheel("inference-gpu", None, "aarch64")
    # No training build for aarch64: there, a plain `install` fetches the inference build.
    assert has_training_build("x86_64") and not has_training_build("aarch64")


def test_install_fetches_only_the_c_library_checked_by_hash(fetched):
    env, out = fetched
    row = choose_inference_wheel("inference", None, machine())
    name = f"inference-{row['version']}-{row['machine']}"
    folder = Path(env["ORT_CFFI_RUNTIME_DIR"]) / name
    assert f"fetching {row['wheel']}" in out and f"installed {name} in {folder}" in out
    assert f"ONNX Runtime {row['version']} loads here, training API absent; backend: engine" in out
    assert "generator:" not in out  # an inference build has no Python layer to keep
    assert sorted(p.name for p in folder.iterdir()) == sorted(["runtime.json", *row["files"]])  # no Python extension
    manifest = json.loads((folder / "runtime.json").read_text())
    assert manifest["form"] == "library" and manifest["wheel_sha256"] == row["wheel_sha256"]
    assert "already installed" in cli(["install", "--inference"], env).stdout
    wheel_installed = find_training_wheel()[0] is not None or find_inference_wheel()[0] is not None
    assert (f" * {name}" in cli(["list"], env).stdout) is not wheel_installed  # an installed wheel comes first
    chosen = dict(env, ORT_CFFI_RUNTIME="inference")
    assert cli(["path"], chosen).stdout.strip() == str(folder / row["library"])


def test_the_fetched_library_is_dlopened_and_the_engine_trains_on_it(fetched):
    """Chosen with ORT_CFFI_RUNTIME even where a training wheel is installed: parameters change."""
    env, _ = fetched
    report = run_child(
        """
        import json
        import numpy as np
        import ort_cffi
        from ort_cffi import OrtEnvironment
        from ort_cffi.capi import get_runtime
        env = OrtEnvironment.getEnvironment()
        art = "tests/artifacts/tiny/"
        with env.createTrainingSession(art + "checkpoint", art + "training_model.onnx", art + "eval_model.onnx",
                                       art + "optimizer_model.onnx") as session:
            before = session.copyParametersToBuffer().copy()
            rng = np.random.default_rng(0)
            batch = {"input": rng.standard_normal((4, 784)).astype(np.float32), "labels": np.array([1, 2, 3, 4])}
            with session.trainStep(batch) as result:
                loss = float(result.get(0).getValue())
            session.optimizerStep()
            after = session.copyParametersToBuffer()
        rt = get_runtime()
        print(json.dumps({"kind": rt.kind, "library": rt.library, "version": rt.version, "backend": ort_cffi.backend(),
                          "training_api": rt.training_api is not None, "loss": loss,
                          "changed": float(np.abs(after - before).max())}))
        """,
        env=dict(env, ORT_CFFI_RUNTIME="inference"),
    ).stdout
    loaded = json.loads(report.strip().splitlines()[-1])
    folder = Path(env["ORT_CFFI_RUNTIME_DIR"])
    assert loaded["kind"] == "fetched" and loaded["library"].startswith(str(folder.resolve()))
    assert loaded["backend"] == "engine" and not loaded["training_api"]
    assert loaded["loss"] > 0 and loaded["changed"] > 0


def test_a_wheel_or_library_that_differs_from_the_survey_is_refused(tmp_path, monkeypatch):
    env = store_env(tmp_path)
    junk = tmp_path / "onnxruntime-1.31.1-cp314-cp314-manylinux_2_28_x86_64.whl"
    row = choose_inference_wheel("inference", None, "x86_64")
    with zipfile.ZipFile(junk, "w") as archive:  # the surveyed names, other bytes
        for name in row["files"]:
            archive.writestr("onnxruntime/capi/" + name, b"\x7fELF not the published library")
    proc = cli(["install", "--inference", "--wheel", str(junk)], env, check=False)
    assert proc.returncode == 2 and "is not one of the inference wheels ort_cffi surveyed" in proc.stderr
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RuntimeInstallError, match=r"differs from the survey's: refusing it"):
        install_library(junk, row)  # as if the wheel's own hash had matched
    assert not list(Path(env["ORT_CFFI_RUNTIME_DIR"]).iterdir())  # nothing half-installed is left


@pytest.mark.parametrize(
    "args, message",
    [
        (["install", "--inference", "--python-version", "3.12"], "--python-version picks a training build"),
        (["install", "--version", "1.31.1"], "--version goes with --inference"),
        (["install", "--inference", "--version", "0.9"], "knows no onnxruntime 0.9 wheel"),
    ],
)
def test_a_bad_inference_argument_is_a_one_line_error(tmp_path, args, message):
    proc = cli(args, store_env(tmp_path), check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
