"""Indexing operators: gathers, scatters and TopK, whose gradients send dY back to the positions the
indices name (ONNX Runtime's ``com.microsoft`` gradient kernels where its builder uses them), and the
operators through which no gradient flows at all (shapes, comparisons, logic, arg-max, random numbers).
"""
from __future__ import annotations

from typing import Any, List, Optional

from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient, no_gradient

Grads = List[Optional[str]]

no_gradient(
    "Shape", "Size", "ConstantOfShape", "Range", "NonZero", "ArgMax", "ArgMin",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
    "EyeLike", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli",
    "NonMaxSuppression",
    family="indexing")


@gradient("Gather", inputs=(0,))
def gather(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.same_type(g.ms("GatherGrad", g.shape(x), node.inputs[1], node.dy(),
                             axis=int(node.attr("axis", 0)))[0], x)]


@gradient("GatherElements", inputs=(0,))
def gather_elements(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.same_type(g.ms("GatherElementsGrad", node.dy(), g.shape(x), node.inputs[1],
                             axis=int(node.attr("axis", 0)))[0], x)]


@gradient("GatherND", inputs=(0,))
def gather_nd(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.same_type(g.ms("GatherNDGrad", g.shape(x), node.inputs[1], node.dy(),
                             batch_dims=int(node.attr("batch_dims", 0)))[0], x)]


@gradient("TopK", inputs=(0,))
def top_k(g: GradientContext, node: NodeView) -> Grads:
    """The values' gradient sent back to the positions the indices output names."""
    x = node.inputs[0]
    return [g.same_type(g.ms("GatherElementsGrad", node.dy(0), g.shape(x), node.outputs[1],
                             axis=int(node.attr("axis", -1)))[0], x)]


def _zeros_of_shape(g: GradientContext, like: str, shape_of: str) -> str:
    zero = helper.make_tensor("value", g.elem_type(like), [1], [0])
    return g.op("ConstantOfShape", g.op("Shape", shape_of), value=zero)


def _scatter(g: GradientContext, node: NodeView, scatter: str, gather_op: str, **attributes: Any) -> Grads:
    """Data keeps dY where no update was written, updates take dY where they were written (ONNX Runtime's
    form); with ``reduction="add"`` data keeps all of dY."""
    data, indices, updates = node.inputs[:3]
    dy = node.dy()
    reduction = node.attr("reduction", "none")
    if reduction not in ("none", "add"):
        raise BuilderError(f"{node.describe()}: {node.op_type} with reduction {reduction!r} has no gradient rule")
    d_data = d_updates = None
    if node.wants(0):
        if reduction == "add":
            d_data = dy
        else:
            d_data = g.op(scatter, dy, indices, _zeros_of_shape(g, data, updates), **attributes)
        d_data = g.same_type(d_data, data)
    if node.wants(2):
        d_updates = g.same_type(g.op(gather_op, dy, indices, **attributes), updates)
    return [d_data, None, d_updates]


@gradient("ScatterElements", inputs=(0, 2))
def scatter_elements(g: GradientContext, node: NodeView) -> Grads:
    return _scatter(g, node, "ScatterElements", "GatherElements", axis=int(node.attr("axis", 0)))


@gradient("ScatterND", inputs=(0, 2))
def scatter_nd(g: GradientContext, node: NodeView) -> Grads:
    return _scatter(g, node, "ScatterND", "GatherND")


@gradient("OneHot", inputs=(2,))
def one_hot(g: GradientContext, node: NodeView) -> Grads:
    """Only ``values`` ([off, on]) takes a gradient: on = sum of dY where the hot positions are, off = the
    rest of dY's sum. The indices and depth take none."""
    indices, depth, values = node.inputs[:3]
    dy = node.dy()
    mask = g.op("OneHot", indices, depth, g.const([0, 1], values), axis=int(node.attr("axis", -1)))
    on = g.reduce_sum(g.op("Mul", dy, mask), keepdims=0)
    off = g.op("Sub", g.reduce_sum(dy, keepdims=0), on)
    return [None, None, g.same_type(g.op("Concat", g.unsqueeze(off, [0]), g.unsqueeze(on, [0]), axis=0), values)]


@gradient("Compress", inputs=(0,))
def compress(g: GradientContext, node: NodeView) -> Grads:
    """Compress is a Gather of the positions where the condition holds (along ``axis``, or of the flattened
    input without one): GatherGrad sends dY back to them."""
    x, condition = node.inputs[:2]
    positions = g.op("Reshape", g.op("NonZero", condition), g.ints([-1]))
    axis = node.attr("axis")
    if axis is not None:
        return [g.same_type(g.ms("GatherGrad", g.shape(x), positions, node.dy(), axis=int(axis))[0], x)]
    flat = g.ms("GatherGrad", g.op("Reshape", g.op("Size", x), g.ints([1])), positions, node.dy(), axis=0)[0]
    return [g.reshape_like(flat, x)]
