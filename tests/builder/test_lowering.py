"""Softplus and Mish, whose ONNX Runtime kernels are scalar code, are written out in the training model once
the backward pass is built. Checked here:
- the training model runs no Softplus or Mish, the eval model keeps them as exported;
- the gradients equal central finite differences, over inputs that reach both branches and the far tails;
- the training forward computes the exported operator (the first training loss is the eval loss);
- a classifier with them trains, every parameter moving."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from _training_run import train_artifacts
from gradcheck import Case, check, forward_model, save_model
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
from ort_cffi.artifacts.builder.training_model import build_models

OPSETS = {"Softplus": 17, "Mish": 18}


def activation_case(op: str, scale: float) -> Case:
    """x -> Gemm -> ``op`` -> MatMul; ``scale`` spreads the pre-activations (30: both tails of exp)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node(op, ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w2"], ["y"])]
    params = {"w1": rng.normal(0, scale, (6, 4)).astype(np.float32), "b1": rng.normal(0, 0.3, 6).astype(np.float32),
              "w2": rng.normal(0, 0.5, (6, 3)).astype(np.float32)}
    return Case(f"{op}_{scale}", nodes, params, {"x": rng.normal(size=(5, 4)).astype(np.float32)},
                opset=OPSETS[op], symbolic_batch=True)


def _ops(model: onnx.ModelProto) -> List[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("op", sorted(OPSETS))
@pytest.mark.parametrize("scale", [0.8, 30.0])
def test_written_out_in_training_with_the_gradients_of_finite_differences(op: str, scale: float) -> None:
    c = activation_case(op, scale)
    built = build_models(forward_model(c, {"y": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    assert op not in _ops(built.training) and "Softplus" not in _ops(built.training), _ops(built.training)
    assert {"Exp", "Log", "Relu"} <= set(_ops(built.training))
    assert op in _ops(built.eval)  # the eval model as exported
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad


def test_a_double_softplus_is_written_out_in_double() -> None:
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Softplus", ["h"], ["s"]),
                               helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)], "double",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              [numpy_helper.from_array(np.ones((3, 2)), "w")])
    built = build_models(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), ["w"], [], None)
    constants = [n.attribute[0].t for n in built.training.graph.node if n.op_type == "Constant"]
    assert "Softplus" not in _ops(built.training) and constants
    assert all(t.data_type == TensorProto.DOUBLE for t in constants)


@pytest.mark.parametrize("op", sorted(OPSETS))
def test_a_classifier_trains_from_the_exported_forward(op: str, tmp_path: Path) -> None:
    made = generate_artifacts(save_model(activation_case(op, 0.8), tmp_path / f"{op}.onnx", "y", 3),
                              artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert op not in _ops(onnx.load(str(made.training_model)))
    rng = np.random.default_rng(5)
    x = (3 * rng.normal(size=(8, 4))).astype(np.float32)
    feeds = {"x": x, "labels": np.argmax(x[:, :3], axis=1).astype(np.int64)}
    run = train_artifacts(made, feeds, 30, learning_rate=0.05)
    assert all(run.moved), run.moved
    assert abs(run.losses[0] - run.eval_loss) <= 1e-6 * abs(run.eval_loss)
    assert np.mean(run.losses[-3:]) < 0.7 * np.mean(run.losses[:3]), run.losses
