"""Reshape targets made constant when the model is lowered (lowering/shape_targets.py): a Reshape to
``Shape(X)`` or to shape arithmetic takes a constant target where onnx's shape inference knows all sizes but
one, or relates them to the data's own, and the arithmetic goes; the outputs stay the same for every batch."""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import onnx
import pytest
from lowering_check import assert_close, current_runtime, run_training_build  # noqa: F401  (a fixture)
from onnx import TensorProto, helper, numpy_helper

from ort_cffi._backends.engine.lowering import lower_training_ops
from ort_cffi._backends.engine.lowering.shape_targets import constant_reshape_targets

# the reference run is the training build's, through its Python layer (run_training_build)
pytestmark = pytest.mark.needs_onnxruntime_python


def _model(nodes: List[onnx.NodeProto], inputs: Sequence[tuple], outputs: Sequence[str],
           initializers: Sequence[onnx.TensorProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _target(model: onnx.ModelProto, reshape_output: str) -> Optional[List[int]]:
    node = next(n for n in model.graph.node if n.output[0] == reshape_output)
    tensor = next((t for t in model.graph.initializer if t.name == node.input[1]), None)
    return None if tensor is None else numpy_helper.to_array(tensor).tolist()


def _gradient_of_a_reshape(x_shape: Sequence, dy_shape: Sequence, allowzero: int = 0) -> onnx.ModelProto:
    """dX = Reshape(dY, Shape(X)), as the gradient builders write a Reshape's gradient."""
    return _model([helper.make_node("Shape", ["X"], ["shape_of_x"]),
                   helper.make_node("Reshape", ["dY", "shape_of_x"], ["dX"], allowzero=allowzero)],
                  [("X", x_shape), ("dY", dy_shape)], ["dX"])


def _check_runs_alike(before: onnx.ModelProto, after: onnx.ModelProto, current_runtime, feeds) -> None:
    expected = run_training_build(before, feeds)
    assert_close(run_training_build(after, feeds), expected, 0.0, "on 1.19.2")
    assert_close(current_runtime.run(after, feeds), expected, 0.0, "on 1.31.1")


def test_one_unknown_size_becomes_minus_one_and_the_shape_goes(current_runtime):
    model = _gradient_of_a_reshape(["N", 3, 4], ["L"])  # dY flat: its size is no symbol of X's
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert constant_reshape_targets(rewritten) == 1
    assert _target(rewritten, "dX") == [-1, 3, 4]
    assert [n.op_type for n in rewritten.graph.node] == ["Reshape"]
    for batch in (1, 5, 0):
        feeds = {"X": np.zeros((batch, 3, 4), np.float32), "dY": np.arange(batch * 12, dtype=np.float32)}
        _check_runs_alike(model, rewritten, current_runtime, feeds)


def test_sizes_the_data_shares_are_copied_with_zero(current_runtime):
    model = _gradient_of_a_reshape(["N", "T", 4], ["N", "T", 2, 2])
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert constant_reshape_targets(rewritten) == 1
    assert _target(rewritten, "dX") == [0, 0, 4]
    for batch, steps in ((2, 3), (1, 7)):
        feeds = {"X": np.zeros((batch, steps, 4), np.float32),
                 "dY": np.random.default_rng(0).standard_normal((batch, steps, 2, 2)).astype(np.float32)}
        _check_runs_alike(model, rewritten, current_runtime, feeds)


def test_nothing_changes_where_two_sizes_are_unknown_or_zero_means_zero():
    for model in (_gradient_of_a_reshape(["N", "T", 4], ["N", "S", 2, 2]),  # no shared symbol
                  _gradient_of_a_reshape(["N", "T", 4], ["N", "T", 2, 2], allowzero=1),  # 0 is a size there
                  _gradient_of_a_reshape([0, "T", 4], [0, "T", 4])):  # a known size of 0 would read as "copy"
        before = model.SerializeToString()
        assert constant_reshape_targets(model) == 0
        assert model.SerializeToString() == before


def test_a_shape_read_elsewhere_stays(current_runtime):
    model = _model([helper.make_node("Shape", ["X"], ["shape_of_x"]),
                    helper.make_node("Reshape", ["dY", "shape_of_x"], ["dX"]),
                    helper.make_node("Expand", ["Z", "shape_of_x"], ["expanded"])],
                   [("X", ["N", 3, 4]), ("dY", ["N", 12]), ("Z", [1, 1, 1])], ["dX", "expanded"])
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert constant_reshape_targets(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node] == ["Shape", "Reshape", "Expand"]
    feeds = {"X": np.zeros((2, 3, 4), np.float32), "dY": np.ones((2, 12), np.float32),
             "Z": np.full((1, 1, 1), 3.0, np.float32)}
    _check_runs_alike(model, rewritten, current_runtime, feeds)


def test_shape_arithmetic_of_a_forward_reshape_goes_with_its_constants(current_runtime):
    """An exporter's ``Reshape(X, Concat(Unsqueeze(Gather(Shape(X), 0)), [4, 3]))``: the target is known but
    for the batch, and nothing of the arithmetic is left, its constants included."""
    constants = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                 numpy_helper.from_array(np.array([0], np.int64), "axis"),
                 numpy_helper.from_array(np.array([4, 3], np.int64), "rest")]
    model = _model([helper.make_node("Shape", ["X"], ["shape"]),
                    helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
                    helper.make_node("Unsqueeze", ["batch", "axis"], ["batch_1d"]),
                    helper.make_node("Concat", ["batch_1d", "rest"], ["target"], axis=0),
                    helper.make_node("Reshape", ["X", "target"], ["Y"])],
                   [("X", ["N", 12])], ["Y"], constants)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert constant_reshape_targets(rewritten) == 1
    assert [n.op_type for n in rewritten.graph.node] == ["Reshape"]
    assert [t.name for t in rewritten.graph.initializer] == ["Y/target"]
    assert _target(rewritten, "Y") == [0, 4, 3]
    for batch in (3, 1):
        _check_runs_alike(model, rewritten, current_runtime,
                          {"X": np.arange(batch * 12, dtype=np.float32).reshape(batch, 12)})


def test_lowering_makes_the_targets_constant():
    model = _gradient_of_a_reshape(["N", 3, 4], ["N", 12])  # the batch copied: [0, 3, 4]
    lowered = lower_training_ops(model)
    assert [n.op_type for n in lowered.graph.node] == ["Reshape"]
    assert [n.op_type for n in model.graph.node] == ["Shape", "Reshape"]  # the model given is not changed
