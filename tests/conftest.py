"""Shared fixtures: where the artifacts are, a leak check after every test, and child processes for
what may crash or must start from a fresh interpreter."""
from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# The Ctrl-C tests send SIGINT to the commands they start, as a terminal would. A shell that runs the suite
# in the background (`... &`, nohup) starts it with SIGINT ignored, and children inherit that: Python then
# installs no KeyboardInterrupt handler, and the commands would never see the signal. Restored here, the
# children start with SIGINT at its default, as under a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
TESTS = ROOT / "tests"
ARTIFACTS = TESTS / "artifacts"
# The tests live in folders by layer (native, facade, guarantees, java, apps, docs), their shared helpers in
# support/. Helpers and test modules import each other by name (and _childcases' children import a test
# module by name), so these folders are on sys.path.
SEARCH_PATH = [str(TESTS), str(TESTS / "support")] + sorted(
    str(folder) for folder in (TESTS.iterdir() if TESTS.is_dir() else ()) if folder.is_dir() and any(folder.glob("test_*.py"))
)  # (a copy of this file elsewhere, as test_leaks makes one, finds no folders: that is fine)
sys.path[:0] = [folder for folder in SEARCH_PATH if folder not in sys.path]
DIGITS = ROOT / "ort_cffi" / "data" / "digits"
JAVA_DATA_ENV = "ORT_CFFI_JAVA_TESTDATA"


REQUIRE_JAVA_DATA_ENV = "ORT_CFFI_REQUIRE_JAVA_TESTDATA"
# Set by CI (.ci/run): a bit-identity test that finds no ONNX Runtime Python layer to run as its oracle on
# this machine (tests/guarantees/test_cross_interpreter.py) fails instead of skipping.
REQUIRE_ORACLE_ENV = "ORT_CFFI_REQUIRE_ORACLE"


def skip_unless_required(reason: str, require_env: str) -> "NoReturn":
    """Skip the test, saying why; but where ``require_env`` is set (CI sets it), fail it: a skip there
    would let a test that cannot run pass unnoticed."""
    if os.environ.get(require_env):
        pytest.fail(f"{reason}; {require_env} is set, so this is a failure, not a skip")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def java_data() -> Path:
    """ONNX Runtime's own Java test data (never copied into this repository), from $ORT_CFFI_JAVA_TESTDATA.

    A clean clone has none: the tests that need it skip, saying why, unless
    $ORT_CFFI_REQUIRE_JAVA_TESTDATA is set (CI sets both), which makes a missing folder a failure."""
    location = os.environ.get(JAVA_DATA_ENV)
    if location and (Path(location) / "checkpoint.ckpt").is_file():
        return Path(location)
    reason = (
        f"ONNX Runtime's Java test data is not available: set {JAVA_DATA_ENV} to the ort-java-training folder "
        f"(../shared/testdata/ort-java-training beside a checkout; now {location!r})"
    )
    skip_unless_required(reason, REQUIRE_JAVA_DATA_ENV)


@pytest.fixture
def artifacts() -> Path:
    return ARTIFACTS


@pytest.fixture(autouse=True)
def no_native_leaks():
    """Every test must leave no native handle alive (the environment and memory info excepted)."""
    yield
    from ort_cffi._native.handles import live_handles

    gc.collect()
    left = live_handles()
    assert not left, f"native handles left alive after the test: {left}"


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A subset of the embedded digits: 400 training and 120 validation images."""
    with np.load(DIGITS / "digits.npz") as digits:
        arrays = {key: digits[key][:400] if key.startswith("train_") else digits[key][:120] for key in digits.files}
    path = tmp_path_factory.mktemp("data") / "small.npz"
    np.savez(path, **arrays)
    return path


def fixed_batch_artifacts(tmp_path: Path, batch: int) -> Path:
    """The digits artifacts with the batch dimension fixed at ``batch`` (it is symbolic in the originals)."""
    import onnx  # the test extra installs it

    folder = tmp_path / f"fixed{batch}"
    shutil.copytree(DIGITS, folder)
    for name in ("training_model.onnx", "eval_model.onnx"):
        model = onnx.load(str(folder / name))
        for value in model.graph.input:
            if value.name in ("input", "labels"):
                value.type.tensor_type.shape.dim[0].dim_value = batch
        onnx.save(model, str(folder / name))
    return folder


def passthrough_models(artifacts: Path, tmp_path: Path) -> "list[str]":
    """The training and eval models of ``artifacts`` with the graph input ``input`` also listed as an
    output (the runtime returns such an output over the input's memory), written into ``tmp_path``."""
    import onnx

    paths = []
    for name in ("training_model.onnx", "eval_model.onnx"):
        model = onnx.load(str(artifacts / name))
        model.graph.output.append(next(i for i in model.graph.input if i.name == "input"))
        onnx.save(model, str(tmp_path / name))
        paths.append(str(tmp_path / name))
    return paths


def run_child(code: str, *, env: "dict | None" = None, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a crash there fails the test, not the test run."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=str(ROOT),
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"child exited with {proc.returncode} (negative: killed by signal)\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


def tiny_batch(batch: int = 4, seed: int = 0, features: int = 784, classes: int = 10):
    rng = np.random.default_rng(seed)
    return {
        "input": rng.standard_normal((batch, features)).astype(np.float32),
        "labels": rng.integers(0, classes, size=batch).astype(np.int64),
    }


def load_java_input(java_data: Path) -> np.ndarray:
    """TestHelpers.loadTensorFromFile: a name line, then ``[v0,v1,...]``."""
    text = (java_data / "input-0.in").read_text().split("\n", 1)[1].strip()
    return np.array([float(v) for v in text.strip("[]").split(",")], dtype=np.float32)


def load_java_output(path: Path) -> np.ndarray:
    values = path.read_text().split("\n", 1)[1].strip().strip("[]")
    return np.array([float(v) for v in values.split(",")], dtype=np.float32)
