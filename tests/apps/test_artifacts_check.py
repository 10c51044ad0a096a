"""The artifacts' load check (``generate_artifacts(check=True)``, ``ort-cffi-artifacts`` without
``--no-check``): it opens the models over the nominal checkpoint and holds the real checkpoint against the
training model (ort_cffi/artifacts/load_check.py), so that it costs what the graphs cost, not 4.3x the
parameters. These tests show that it still refuses what a training session would refuse, and what it costs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import ROOT
from ort_cffi import OrtEnvironment, OrtException
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsError, generate_artifacts
from ort_cffi.artifacts import writer as writer_module
from ort_cffi.artifacts.load_check import checkpoint_mismatch


def mlp(path: Path, width: int = 16, layers: int = 2, features: int = 8, classes: int = 3) -> Path:
    """A Gemm-ReLU stack: fc{i}.weight [width, previous], fc{i}.bias [width], the last one [classes, width]."""
    rng = np.random.default_rng(0)
    nodes, inits, x, previous = [], [], "x", features
    for i in range(layers):
        out_width = classes if i == layers - 1 else width
        inits.append(numpy_helper.from_array(rng.standard_normal((out_width, previous)).astype(np.float32) * 0.1, f"fc{i}.weight"))
        inits.append(numpy_helper.from_array(np.zeros(out_width, np.float32), f"fc{i}.bias"))
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"h{i}"], transB=1))
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            x, previous = f"r{i}", out_width
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
                              [helper.make_tensor_value_info(f"h{layers - 1}", TensorProto.FLOAT, ["N", classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def unchecked(tmp_path: Path, name: str = "made", **kwargs: object) -> Dict[str, Path]:
    model = mlp(tmp_path / f"{name}.onnx", **kwargs)  # type: ignore[arg-type]
    made = generate_artifacts(model, artifact_directory=tmp_path / name, check=False, nominal_checkpoint=True,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    return dict(made.files)


def full_session_fails(files: Dict[str, Path]) -> bool:
    """What a trainer meets: the real checkpoint in a training session, and one step."""
    try:
        with OrtEnvironment.getEnvironment().createTrainingSession(
                files["checkpoint"], files["training_model"], files["eval_model"], files["optimizer_model"]) as session:
            session.trainStep({"x": np.ones((2, 8), np.float32), "labels": np.zeros(2, np.int64)}).close()
            session.optimizerStep()
    except OrtException:
        return True
    return False


def test_good_artifacts_pass_the_check_and_train(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    writer_module._check_loads(files)
    assert checkpoint_mismatch(files["checkpoint"], files["nominal_checkpoint"], files["training_model"]) is None
    assert not full_session_fails(files)


def test_a_training_model_that_does_not_load_fails_the_check(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    model = onnx.load(str(files["training_model"]))
    model.graph.node[0].op_type = "NoSuchOperator"
    onnx.save(model, str(files["training_model"]))
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError, match="do not load in ONNX Runtime.*NoSuchOperator"):
        writer_module._check_loads(files)


def test_a_training_model_that_is_no_model_fails_the_check(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    files["training_model"].write_bytes(b"not a protobuf at all")
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError, match="do not load in ONNX Runtime"):
        writer_module._check_loads(files)


def test_a_training_model_that_takes_other_parameters_fails_the_check(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    model = onnx.load(str(files["training_model"]))
    for value in model.graph.input:
        if value.name == "fc0.bias":
            value.name = "fc0.renamed"
    for node in model.graph.node:
        node.input[:] = ["fc0.renamed" if n == "fc0.bias" else n for n in node.input]
    onnx.save(model, str(files["training_model"]))
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError, match="do not load in ONNX Runtime"):
        writer_module._check_loads(files)


def test_a_checkpoint_of_other_shapes_fails_the_check(tmp_path: Path) -> None:
    """The same names, another width: the runtime opens such a session and fails at the first step."""
    files = unchecked(tmp_path)
    other = unchecked(tmp_path, "other", width=24)
    shutil.copyfile(other["checkpoint"], files["checkpoint"])
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError, match=r"parameter 'fc0.weight' is stored with shape \[24, 8\], the training "
                                             r"model takes \[16, 8\]"):
        writer_module._check_loads(files)


def test_a_checkpoint_of_other_parameters_fails_the_check(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    other = unchecked(tmp_path, "other", layers=3)
    shutil.copyfile(other["checkpoint"], files["checkpoint"])
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError, match="the checkpoint holds 'fc2.weight', 'fc2.bias', which the training model does not take"):
        writer_module._check_loads(files)


def test_a_checkpoint_that_is_no_checkpoint_fails_the_check(tmp_path: Path) -> None:
    files = unchecked(tmp_path)
    data = files["checkpoint"].read_bytes()
    files["checkpoint"].write_bytes(data[:len(data) // 2])
    assert full_session_fails(files)
    with pytest.raises(ArtifactsError):
        writer_module._check_loads(files)


def test_generation_refuses_broken_artifacts_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check inside generate_artifacts: a generator that wrote a training model the runtime refuses."""
    original = writer_module.run_here

    def broken(request: dict) -> dict:
        result = original(request)
        path = Path(request["out"]) / result["files"]["training_model"]
        model = onnx.load(str(path))
        model.graph.node[0].op_type = "NoSuchOperator"
        onnx.save(model, str(path))
        return result

    monkeypatch.setattr(writer_module, "run_here", broken)
    out = tmp_path / "artifacts"
    with pytest.raises(ArtifactsError, match="NoSuchOperator"):
        generate_artifacts(mlp(tmp_path / "m.onnx"), artifact_directory=out,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert not out.exists()


def test_the_nominal_checkpoint_the_check_uses_is_kept_only_when_asked(tmp_path: Path) -> None:
    plain = generate_artifacts(mlp(tmp_path / "m.onnx"), artifact_directory=tmp_path / "plain",
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert "nominal_checkpoint" not in plain.files and not (tmp_path / "plain" / "nominal_checkpoint").exists()
    assert "nominal_checkpoint" not in json.loads((tmp_path / "plain" / "artifacts.json").read_text())["files"]
    asked = generate_artifacts(mlp(tmp_path / "m.onnx"), artifact_directory=tmp_path / "asked", nominal_checkpoint=True,
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert asked.files["nominal_checkpoint"].is_file()


# The memory one way of checking adds, in a child: its resident size before, the peak reset (Linux's
# clear_refs), then the peak after.
PEAK = """
import json, sys
from pathlib import Path
from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import writer as writer_module
files = {k: Path(v) for k, v in json.loads(sys.argv[1]).items()}
env = OrtEnvironment.getEnvironment()
def status(key):
    return 1024 * int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
if sys.argv[2] == "check":
    writer_module._check_loads(files)
else:  # what a trainer does: the real checkpoint, the optimizer
    env.createTrainingSession(files["checkpoint"], files["training_model"], files["eval_model"],
                              files["optimizer_model"]).close()
print(json.dumps(status("VmHWM") - before))
"""


def test_the_check_costs_a_small_part_of_the_model(tmp_path: Path) -> None:
    """A 21M-parameter model (80 MiB): opening its artifacts as a trainer does costs over 3x the model
    (twice the parameters to load the checkpoint, the gradients, Adam's two moments); the check adds a few
    MiB that do not grow with the parameters (docs/guides/performance.md has the 100M-parameter numbers)."""
    width = 2048
    files = unchecked(tmp_path, width=width, layers=5, features=width, classes=width)
    size = files["checkpoint"].stat().st_size
    added = {}
    for how in ("check", "session"):
        done = subprocess.run([sys.executable, "-c", PEAK, json.dumps({k: str(v) for k, v in files.items()}), how],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert done.returncode == 0, done.stderr
        added[how] = json.loads(done.stdout.strip().splitlines()[-1]) / size
    print(f"checkpoint {size / 2**20:.0f} MiB; peak RSS added: the check {added['check']:.3f}x, a training "
          f"session {added['session']:.2f}x")
    assert added["session"] > 3, added  # the measure sees what the old check cost
    assert added["check"] < 0.3, added  # about 14 MiB whatever the size: onnx, the graphs' sessions
