"""Graph preparation inside ``generate_artifacts``: what ONNX Runtime's generator cannot take is prepared
(rewrites.py), recorded in artifacts.json, GeneratedArtifacts and describe(); what it takes stays byte for
byte its own; what cannot be prepared is refused by name, as an input error."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts import ArtifactsError, ArtifactsInputError, describe, generate_artifacts


def mlp(op: str) -> onnx.ModelProto:
    """input [N, 4] -> MatMul W1 -> ``op`` -> MatMul W2 -> logits [N, 3]."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["input", "W1"], ["h"], name="fc1"),
             helper.make_node(op, ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "W2"], ["logits"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "W1"),
                               numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_an_operator_without_gradient_is_rewritten_and_recorded(tmp_path: Path) -> None:
    made = generate_artifacts(mlp("HardSwish"), artifact_directory=tmp_path)
    record = {"rule": "rewrite", "op": "HardSwish", "count": 1, "nodes": ["act"]}
    assert made.preparation == (record,)
    assert json.loads((tmp_path / "artifacts.json").read_text())["preparation"] == [record]
    assert "prepared:   rewritten (no gradient in ONNX Runtime): HardSwish x1 (act)" in describe(made, "m.onnx")


def test_a_model_that_needs_nothing_records_nothing(tmp_path: Path) -> None:
    made = generate_artifacts(mlp("Relu"), artifact_directory=tmp_path / "a")
    plain = generate_artifacts(mlp("Relu"), artifact_directory=tmp_path / "b", prepare=False)
    assert made.preparation == () and json.loads((tmp_path / "a" / "artifacts.json").read_text())["preparation"] == []
    assert not any(line.startswith("prepared:") for line in describe(made, "m.onnx"))
    for key, path in made.files.items():
        assert path.read_bytes() == plain.files[key].read_bytes(), key


def test_without_preparation_the_runtimes_assertion_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsError) as caught:
        generate_artifacts(mlp("HardSwish"), artifact_directory=tmp_path, prepare=False)
    message = str(caught.value)
    assert "has no gradient in ONNX Runtime" in message and "HardSwish for node act" in message
    assert "onnxruntime::training::GradientDef" not in message  # no C++ signature
    assert "gradient_builder_registry.cc" in message  # where it failed, briefly


def test_an_operator_without_gradient_or_rewrite_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsInputError, match="CumSum node 'act' lies on the gradient path") as caught:
        model = mlp("Relu")
        model.graph.node[1].CopyFrom(helper.make_node("CumSum", ["h", "axis"], ["a"], name="act"))
        model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "axis"))
        generate_artifacts(model, artifact_directory=tmp_path / "out")
    assert "freeze the parameters before it" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_option_is_part_of_the_recorded_options(tmp_path: Path) -> None:
    generate_artifacts(mlp("Relu"), artifact_directory=tmp_path, prepare=False)
    assert json.loads((tmp_path / "artifacts.json").read_text())["options"]["prepare"] is False
