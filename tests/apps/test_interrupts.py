"""Ctrl-C in every command: one line on stderr and exit status 130, never a traceback or a death by the
signal, and nothing half-written left behind. Each command runs in a child process; a hook stops it at a
point inside its work (printing a marker and waiting there), and this process sends it a real SIGINT."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Sequence

import pytest

from conftest import DIGITS, ROOT
from ort_cffi import OrtEnvironment

MARKER = "@@ waiting for SIGINT"

# The child: wrap ``module.function`` so that, when the command reaches it, it says so and waits for the
# signal; then run the command's main with the arguments.
CHILD = textwrap.dedent("""
    import importlib, sys, time
    command, module, function, *argv = sys.argv[1:]
    target = importlib.import_module(module)
    original = getattr(target, function)

    def reached(*args, **kwargs):
        print({marker!r}, file=sys.stderr, flush=True)
        time.sleep(60)  # the SIGINT arrives here, inside the command's work
        return original(*args, **kwargs)

    setattr(target, function, reached)
    sys.exit(importlib.import_module(command).main(argv))
""").format(marker=MARKER)


def interrupt(command: str, module: str, function: str, argv: Sequence[object], cwd: Path) -> "tuple[int, str, str]":
    """Run ``command``'s main in a child until it reaches ``module.function``, send it SIGINT, and return its
    exit status, stdout and stderr (the marker line taken out)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, command, module, function, *map(str, argv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    seen: List[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if line.strip() == MARKER:
                proc.send_signal(signal.SIGINT)
                break
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert any(line.strip() == MARKER for line in seen), f"the command never reached {module}.{function}: {''.join(seen)}"
    return proc.returncode, stdout, "".join(line for line in seen if line.strip() != MARKER) + stderr


def assert_one_line(code: int, stderr: str, expected: str) -> None:
    assert code == 130, (code, stderr)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip() == expected, stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "digits.onnx"
    with OrtEnvironment.getEnvironment().createTrainingSession(
            DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as session:
        session.exportModelForInference(path, ["logits"])
    return path


def test_ctrl_c_while_train_generates_artifacts(tmp_path: Path, model: Path) -> None:
    """0.6 s into --model: a 19-frame KeyboardInterrupt traceback and a death by the signal, before."""
    out = tmp_path / "run"
    code, _, stderr = interrupt("ort_cffi.cli.train", "ort_cffi.artifacts.writer", "_check_loads",
                                ["--model", model, "--data", DIGITS / "digits.npz", "--out", out, "--no-progress"],
                                tmp_path)
    assert_one_line(code, stderr, f"interrupted before training began: {out} is as it was")
    assert not out.exists()


def test_ctrl_c_while_train_exports(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, _, stderr = interrupt("ort_cffi.cli.train", "ort_cffi.trainer.job", "inference_check",
                                ["--epochs", 1, "--out", out, "--no-progress", "--no-plot"], tmp_path)
    assert_one_line(code, stderr, f"interrupted while exporting: the trained checkpoints are kept in {out}; export "
                                  f"them with: ort-cffi-train --out {out} --resume")
    assert (out / "last_checkpoint").is_file()


def test_ctrl_c_while_generating_artifacts(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "artifacts"
    code, _, stderr = interrupt("ort_cffi.cli.artifacts", "ort_cffi.artifacts.writer", "_check_loads",
                                [model, "--out", out], tmp_path)
    assert_one_line(code, stderr, f"interrupted: no artifacts were written to {out}")
    assert not out.exists()


def test_ctrl_c_in_ort_cffi_runtime(tmp_path: Path) -> None:
    code, _, stderr = interrupt("ort_cffi.cli.runtime", "ort_cffi.cli.runtime", "stored_runtimes", ["list"], tmp_path)
    assert_one_line(code, stderr, "ort-cffi-runtime: interrupted")


def test_ctrl_c_in_ort_cffi_federated(tmp_path: Path) -> None:
    out = tmp_path / "fed"
    code, _, stderr = interrupt("ort_cffi.cli.federated", "ort_cffi.cli.federated", "require_flower",
                                ["--rounds", 1, "--clients", 2, "--out", out], tmp_path)
    assert_one_line(code, stderr, "interrupted before the first round: nothing to continue")
