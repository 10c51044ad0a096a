"""The engine keeps ONNX Runtime's memory pattern for lowered training graphs with small intermediate values
(``session.keeps_memory_pattern``, from ``prepared.intermediate_bytes``), and the environment overrides it."""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi._backends.engine import session
from ort_cffi._backends.engine.prepared import intermediate_bytes


def _mlp(width: int, batch: Union[str, int] = "N") -> onnx.ModelProto:
    """x [batch, 8] -> MatMul [8, width] -> Relu -> ReduceSum (keepdims 0) -> a scalar."""
    w = numpy_helper.from_array(np.ones((8, width), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_intermediates_are_counted_per_sample() -> None:
    # h and r are [N, width] float32 (N taken as 1), y a float32 scalar
    assert intermediate_bytes(_mlp(32)) == 2 * 32 * 4 + 4
    assert intermediate_bytes(_mlp(32, batch=16)) == 16 * (2 * 32 * 4) + 4  # a fixed batch counts in full


def test_large_weights_are_left_out_of_inference_and_small_constants_kept() -> None:
    from ort_cffi._backends.engine.lowering.shape_targets import without_weights

    model = _mlp(2048)  # w: 64 KiB, declared as an input for inference
    # a Reshape whose shape is a small initializer: inference needs its value for the output's shape
    model.graph.initializer.append(numpy_helper.from_array(np.array([-1, 1024], np.int64), "shape"))
    model.graph.node.insert(2, helper.make_node("Reshape", ["r", "shape"], ["s"]))
    model.graph.node[3].input[0] = "s"
    stripped = without_weights(model)
    assert [t.name for t in stripped.graph.initializer] == ["shape"]
    assert "w" in [value.name for value in stripped.graph.input]
    # h, r [N, 2048], s [unknown, 1024] (both taken as 1; without the shape's value s would count as the
    # largest, 2048 floats), y a scalar
    assert intermediate_bytes(model) == 2 * 2048 * 4 + 1024 * 4 + 4


def test_a_value_of_unknown_shape_counts_as_the_largest_known() -> None:
    model = _mlp(32)
    # an operator onnx cannot infer: its output has no shape
    model.graph.node.insert(2, helper.make_node("Unknown", ["r"], ["u"], domain="example.custom"))
    model.graph.node[3].input[0] = "u"
    model.opset_import.append(helper.make_opsetid("example.custom", 1))
    assert intermediate_bytes(model) == 3 * 32 * 4 + 4


def test_no_known_shape_is_none() -> None:
    node = helper.make_node("Unknown", ["x"], ["y"], domain="example.custom")
    graph = helper.make_graph([node], "unknown", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    assert intermediate_bytes(model) is None


@pytest.mark.parametrize("setting, intermediates, kept", [
    ("", 3588, True), ("", session.SMALL_INTERMEDIATES, True), ("", session.SMALL_INTERMEDIATES + 1, False),
    ("", None, False), ("1", 10 ** 9, True), ("1", None, True), ("0", 16, False), ("auto", 16, True),
])
def test_the_memory_pattern_kept_for_small_graphs_and_as_the_environment_says(
        monkeypatch: pytest.MonkeyPatch, setting: str, intermediates: Optional[int], kept: bool) -> None:
    monkeypatch.setenv(session.MEMORY_PATTERN_ENV, setting)
    assert session.keeps_memory_pattern(intermediates) is kept
