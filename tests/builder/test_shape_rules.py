"""What the shape, indexing and control-flow rules refuse, with a message naming the node, and where a
gradient path ends (shapes, comparisons): checked on the built graph, before any session."""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np
import onnx
import pytest
from gradcheck import Case, check, forward_model
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError
from ort_cffi.artifacts.builder.engine import UnreachedError
from ort_cffi.artifacts.builder.training_model import build_models


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape, value.reshape(-1).tolist()))


def _build(nodes: List[onnx.NodeProto], params: Sequence[str], output_shape: Sequence[int], opset: int = 17,
           **values: Any) -> None:
    c = Case("refusal", nodes, {n: values.pop(n) for n in params}, dict(values), opset=opset)
    forward = forward_model(c, {"y0": np.ones(output_shape, np.float32)})
    build_models(forward, list(c.params), [], None, None, None)


def test_resize_cropping_is_refused_naming_the_node() -> None:
    nodes = [_constant("roi", np.array([0, 0, 1, 1], np.float32)), _constant("s", np.array([2, 2], np.float32)),
             helper.make_node("Resize", ["x", "roi", "s"], ["y0"], name="crop", mode="linear",
                              coordinate_transformation_mode="tf_crop_and_resize")]
    with pytest.raises(BuilderError, match="Resize node 'crop'.*tf_crop_and_resize"):
        _build(nodes, ["x"], [4, 4], x=np.ones((2, 2), np.float32))


def test_resize_keeping_the_aspect_ratio_is_refused() -> None:
    nodes = [_constant("sizes", np.array([4, 4], np.int64)),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y0"], name="fit", mode="linear",
                              keep_aspect_ratio_policy="not_larger")]
    with pytest.raises(BuilderError, match="Resize node 'fit'.*not_larger"):
        _build(nodes, ["x"], [4, 2], opset=18, x=np.ones((2, 1), np.float32))


@pytest.mark.parametrize("reduction", ["mul", "max", "min"])
def test_scatter_with_a_multiplying_or_selecting_reduction_is_refused(reduction: str) -> None:
    nodes = [helper.make_node("ScatterElements", ["d", "i", "u"], ["y0"], name="scatter", reduction=reduction)]
    with pytest.raises(BuilderError, match=f"ScatterElements node 'scatter'.*{reduction}"):
        _build(nodes, ["d", "u"], [3], d=np.ones(3, np.float32), i=np.array([1], np.int64),
               u=np.ones(1, np.float32))


def test_reflect_pad_with_run_time_axes_is_refused() -> None:
    nodes = [helper.make_node("Pad", ["x", "pads", "", "axes"], ["y0"], name="mirror", mode="reflect")]
    with pytest.raises(BuilderError, match="Pad node 'mirror'.*axes before run time"):
        _build(nodes, ["x"], [2, 5], opset=18, x=np.ones((2, 3), np.float32), pads=np.array([1, 1], np.int64),
               axes=np.array([1], np.int64))


def test_a_parameter_read_only_through_its_shape_takes_no_gradient() -> None:
    nodes = [helper.make_node("Shape", ["p"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y0"])]
    with pytest.raises(UnreachedError, match="'p'"):
        _build(nodes, ["p", "x"], [2, 3], p=np.ones((2, 3), np.float32), x=np.ones(6, np.float32))


def test_an_arg_max_beside_the_value_path_carries_nothing() -> None:
    """p feeds an ArgMax (no gradient) and the Gather that reads the maximum: only the Gather carries p's
    gradient."""
    nodes = [helper.make_node("ArgMax", ["p"], ["where"], keepdims=0),
             helper.make_node("Gather", ["p", "where"], ["y0"])]
    c = Case("arg_max", nodes, {"p": np.array([-1.0, 2.0, 0.5], np.float32)})
    comparisons = check(c)
    assert comparisons and all(x.ok(c.rtol, c.atol) for x in comparisons)


def test_a_scale_computed_from_sizes_takes_no_gradient() -> None:
    """h / sqrt(width of h), the width cast from Shape (as exporters write attention's scale): the scale
    depends on the parameters only through a size, so the backward pass computes no gradient for it (Div's
    gradient for the divisor is a product and a sum over all of h), and w's still equals finite
    differences."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Shape", ["h"], ["shape"]),
             _constant("last", np.array(-1, np.int64)), helper.make_node("Gather", ["shape", "last"], ["width"]),
             helper.make_node("Cast", ["width"], ["width_f"], to=onnx.TensorProto.FLOAT),
             helper.make_node("Sqrt", ["width_f"], ["scale"]), helper.make_node("Div", ["h", "scale"], ["y0"])]
    rng = np.random.default_rng(2)
    c = Case("size_scale", nodes, {"w": rng.normal(size=(3, 4)).astype(np.float32)},
             {"x": rng.normal(size=(5, 3)).astype(np.float32)}, symbolic_batch=True)
    built = build_models(forward_model(c, {"y0": np.ones((5, 4), np.float32)}), ["w"], [], None)
    forward_nodes = len(c.nodes) + 2  # and the loss block's two
    backward = built.training.graph.node[forward_nodes:]
    read = {name for node in backward for name in node.input}
    assert not read & {"width", "width_f"}, [n.op_type for n in backward]
    assert [n.op_type for n in backward if "scale" in n.input] == ["Div"]  # dh = dy / scale, and no more
    assert not any(n.op_type in ("Sqrt", "Cast", "DivGrad") for n in backward), [n.op_type for n in backward]
    comparisons = check(c)
    assert comparisons and all(x.ok(c.rtol, c.atol) for x in comparisons)


def test_an_if_branch_drawing_random_numbers_is_refused() -> None:
    """Its gradient recomputes the branch: a Dropout there would drop other elements than the forward did."""
    then_branch = helper.make_graph(
        [helper.make_node("Dropout", ["p", "ratio", "training"], ["dropped"], name="drop")], "then", [],
        [helper.make_tensor_value_info("dropped", onnx.TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", ["p"], ["same"])], "else", [],
                                    [helper.make_tensor_value_info("same", onnx.TensorProto.FLOAT, None)])
    nodes = [_constant("ratio", np.array(0.5, np.float32)), _constant("training", np.array(True)),
             helper.make_node("If", ["cond"], ["y0"], name="branching", then_branch=then_branch,
                              else_branch=else_branch)]
    with pytest.raises(BuilderError, match="If node 'branching'.*random.*Dropout 'drop'"):
        _build(nodes, ["p"], [3], p=np.ones(3, np.float32), cond=np.array(True))
