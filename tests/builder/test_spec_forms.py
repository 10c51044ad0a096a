"""Operators whose answer changed between ONNX Runtime releases are written so that every release computes the
ONNX specification's answer (ort_cffi/artifacts/builder/spec_forms.py): the artifacts' eval model, run on the
runtime loaded here (the training build, 1.19.2, or onnxruntime 1.31.1 on the engine legs), gives it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts.builder.training_model import build_models

X = np.array([[1.5, 2.0, 0.5], [3.0, 0.25, 1.0]], np.float32)  # positive: log is defined
W = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], np.float32)
# a reduction over nothing keeps its element-wise part (onnx/onnx#7394)
SPEC = {"ReduceL1": np.abs, "ReduceL2": np.abs, "ReduceSumSquare": np.square, "ReduceLogSum": np.log,
        "ReduceLogSumExp": lambda v: v, "ReduceSum": lambda v: v, "ReduceMean": lambda v: v,
        "ReduceMax": lambda v: v, "ReduceMin": lambda v: v, "ReduceProd": lambda v: v}


def model(op: str, axes: str):
    """y = op(x * w) reducing nothing, with its axes an empty constant or absent; the model's outputs are the
    loss (the sum of y) and y."""
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"])]
    initializers = [numpy_helper.from_array(W, "w")]
    if axes == "empty":
        initializers.append(numpy_helper.from_array(np.array([], np.int64), "axes"))
        nodes.append(helper.make_node(op, ["xw", "axes"], ["y"], noop_with_empty_axes=1, keepdims=0))
    else:
        nodes.append(helper.make_node(op, ["xw"], ["y"], noop_with_empty_axes=1, keepdims=0))
    nodes.append(helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializers)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    made.ir_version = 8
    return made


@pytest.mark.parametrize("axes", ["empty", "absent"])
@pytest.mark.parametrize("op", sorted(SPEC))
def test_a_reduction_over_nothing_computes_the_specifications_answer(op: str, axes: str) -> None:
    built = build_models(model(op, axes), ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type != op, "the node was not rewritten"
    env = OrtEnvironment.getEnvironment()
    x = X * np.sign(W)  # x * w is positive
    with env.createSession(built.eval.SerializeToString()) as session:
        with session.run({"x": x, "w": W}) as result:
            y = np.asarray(dict(result)["y"].getValue())
    np.testing.assert_allclose(y, SPEC[op](x * W), rtol=1e-6)


def test_a_reduction_that_reduces_keeps_its_operator() -> None:
    reducing = model("ReduceL1", "empty")
    reducing.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    reducing.graph.output[1].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]))
    built = build_models(reducing, ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type == "ReduceL1"
