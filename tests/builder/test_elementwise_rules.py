"""What the elementwise, reduction and matrix rules refuse, with a message naming the node, and where a
gradient path ends (Floor, a cast to integers): checked on the built graph, before any session."""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np
import onnx
import pytest
from gradcheck import Case, forward_model
from onnx import TensorProto, helper

from ort_cffi.artifacts.builder.context import BuilderError
from ort_cffi.artifacts.builder.engine import UnreachedError
from ort_cffi.artifacts.builder.training_model import build_models


def _build(nodes: List[onnx.NodeProto], params: Sequence[str], output_shape: Sequence[int], opset: int = 17,
           extra_opsets: Any = None, **values: Any) -> onnx.ModelProto:
    c = Case("refusal", nodes, {n: values.pop(n) for n in params}, dict(values), opset=opset,
             extra_opsets=extra_opsets or {})
    forward = forward_model(c, {"y0": np.ones(output_shape, np.float32)})
    return build_models(forward, list(c.params), [], None, None, None).training


def test_gelu_with_an_unknown_approximation_is_refused() -> None:
    nodes = [helper.make_node("Gelu", ["x"], ["y0"], name="act", approximate="cubic")]
    with pytest.raises(BuilderError, match="Gelu node 'act'.*approximate='cubic'"):
        _build(nodes, ["x"], [3], opset=20, x=np.ones(3, np.float32))


def test_a_reduction_whose_noop_is_decided_at_run_time_is_refused() -> None:
    nodes = [helper.make_node("ReduceL1", ["x", "axes"], ["y0"], name="norm", noop_with_empty_axes=1)]
    with pytest.raises(BuilderError, match="ReduceL1 node 'norm'.*whether its axes are empty"):
        _build(nodes, ["x"], [1, 1], opset=18, x=np.ones((2, 3), np.float32), axes=np.array([1]))


def test_the_same_reduction_with_constant_axes_is_differentiated() -> None:
    axes = helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", TensorProto.INT64, [1], [1]))
    nodes = [axes, helper.make_node("ReduceL1", ["x", "axes"], ["y0"], noop_with_empty_axes=1)]
    training = _build(nodes, ["x"], [2, 1], opset=18, x=np.ones((2, 3), np.float32))
    assert any(n.op_type == "Sign" for n in training.graph.node)


def test_fused_matmul_with_batch_transposes_is_refused() -> None:
    nodes = [helper.make_node("FusedMatMul", ["a", "b"], ["y0"], name="mm", domain="com.microsoft", transBatchA=1)]
    with pytest.raises(BuilderError, match="FusedMatMul node 'mm'.*transBatchA"):
        _build(nodes, ["b"], [2, 3, 5], extra_opsets={"com.microsoft": 1},
               a=np.ones((3, 2, 4), np.float32), b=np.ones((4, 5), np.float32))


def test_einsum_with_an_ellipsis_over_an_operand_of_unknown_rank_is_refused() -> None:
    nodes = [helper.make_node("Einsum", ["x", "w"], ["y0"], name="mix", equation="...i,ij->...j")]
    c = Case("refusal", nodes, {"w": np.ones((4, 5), np.float32)}, {"x": np.ones((2, 4), np.float32)})
    forward = forward_model(c, {"y0": np.ones((2, 5), np.float32)})
    del forward.graph.input[0].type.tensor_type.shape.dim[:]  # x's rank unknown
    forward.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(BuilderError, match="Einsum node 'mix'.*ranks"):
        build_models(forward, ["w"], [], None, None, None)


def test_a_parameter_reaching_the_loss_only_through_floor_is_unreached() -> None:
    nodes = [helper.make_node("Floor", ["x"], ["f"]), helper.make_node("Mul", ["f", "d"], ["y0"])]
    with pytest.raises(UnreachedError, match="'x'"):
        _build(nodes, ["x"], [3], x=np.ones(3, np.float32), d=np.ones(3, np.float32))


def test_a_parameter_reaching_the_loss_only_through_a_cast_to_integers_is_unreached() -> None:
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
             helper.make_node("Cast", ["i"], ["y0"], to=TensorProto.FLOAT)]
    with pytest.raises(UnreachedError, match="'x'"):
        _build(nodes, ["x"], [3], x=np.ones(3, np.float32))
