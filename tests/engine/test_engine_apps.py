"""What runs above the facade runs on the engine unchanged: the command-line trainer on onnxruntime 1.31.1, and
checkpoints that one backend saves and the other resumes from, holding the same values."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DIGITS, ROOT
from test_engine_training import CURRENT, backends, current_library

ENGINE = f"engine on {CURRENT}"  # 1.31.1, or ORT_CFFI_TEST_ORT_VERSION's release (test_engine_training.py)


def child(code: str, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return proc


def test_the_trainer_trains_on_the_engine_and_records_which_backend_ran(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ort_cffi.cli.train", "--artifacts", str(DIGITS), "--data", str(DIGITS / "digits.npz"),
         "--epochs", "2", "--out", str(out), "--no-plot"],
        env={**os.environ, "ORT_CFFI_LIBRARY": str(current_library()), "ORT_CFFI_BACKEND": ""},
        capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ONNX Runtime {CURRENT}, ort_cffi's engine over the inference API" in proc.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["runtime"] == {"onnxruntime": CURRENT, "backend": "engine"}
    assert metrics["epochs"][-1]["val_accuracy"] > 0.8
    assert (out / "inference_model.onnx").is_file() and metrics["inference"]["val_accuracy"] > 0.8


SAVE = """
import numpy as np, sys
from ort_cffi import OrtEnvironment
art = sys.argv[1] if len(sys.argv) > 1 else {art!r}
env = OrtEnvironment.getEnvironment()
data = np.load(art + "/digits.npz")
with env.createTrainingSession({checkpoint!r}, art + "/training_model.onnx", art + "/eval_model.onnx",
                               art + "/optimizer_model.onnx") as s:
    s.setLearningRate(0.02)
    np.save({params!r} + ".start.npy", s.copyParametersToBuffer(False))
    for step in range(3):
        s.trainStep({{"input": data["train_input"][step * 16:(step + 1) * 16],
                     "labels": data["train_labels"][step * 16:(step + 1) * 16]}}).close()
        s.optimizerStep()
        s.lazyResetGrad()
    s.addProperty("epoch", 3)
    s.addProperty("note", "saved")
    s.saveCheckpoint({saved!r}, True)
    np.save({params!r}, s.copyParametersToBuffer(False))
"""

LOAD = """
import numpy as np
from ort_cffi import OrtEnvironment, OrtCheckpointState
art = {art!r}
env = OrtEnvironment.getEnvironment()
state = OrtCheckpointState.loadCheckpoint({saved!r})
assert state.getIntProperty("epoch") == 3 and state.getStringProperty("note") == "saved"
with env.createTrainingSession(state, art + "/training_model.onnx", art + "/eval_model.onnx",
                               art + "/optimizer_model.onnx") as s:
    np.save({params!r}, s.copyParametersToBuffer(False))
state.close()
"""


@pytest.mark.needs_training_build  # one side of the crossing is the training build
def test_a_checkpoint_saved_on_one_backend_resumes_on_the_other(tmp_path: Path) -> None:
    runtimes = backends()
    for saver, loader in (("training build", ENGINE), (ENGINE, "training build")):
        saved, before, after = tmp_path / f"{saver}.ckpt", tmp_path / f"{saver}-saved.npy", tmp_path / f"{saver}-loaded.npy"
        child(SAVE.format(art=str(DIGITS), checkpoint=str(DIGITS / "checkpoint"), saved=str(saved), params=str(before)),
              runtimes[saver])
        child(LOAD.format(art=str(DIGITS), saved=str(saved), params=str(after)), runtimes[loader])
        trained, resumed = np.load(before), np.load(after)
        assert np.array_equal(trained, resumed), f"saved on the {saver}, loaded on the {loader}"
        assert not np.array_equal(trained, np.load(str(before) + ".start.npy")), "the saving run did not train"


def test_the_raw_layer_reaches_the_engines_table_on_an_inference_build() -> None:
    """capi.training_table() is the backend's OrtTrainingApi: raw calls work on an inference build too."""
    child("""
from ort_cffi.capi import ffi, get_runtime, training_table, check_status
from ort_cffi import OrtEnvironment, backend
assert get_runtime().training_api is None and backend() == "engine"
table = training_table()
check_status(table.SetSeed(7))
out = ffi.new("OrtCheckpointState**")
check_status(table.LoadCheckpoint(b"%s", out), "LoadCheckpoint")
table.ReleaseCheckpointState(out[0])
status = table.LoadCheckpoint(b"/nonexistent/checkpoint", out)
try:
    check_status(status)
except Exception as error:
    assert "nonexistent" in str(error), error
else:
    raise AssertionError("a missing checkpoint loaded")
""" % str(DIGITS / "checkpoint").encode().decode(), {"ORT_CFFI_LIBRARY": str(current_library()), "ORT_CFFI_BACKEND": ""})
