"""Reductions: their gradients spread the output's gradient back over the reduced axes, weighted by the
derivative of each element's share. Both forms are handled: axes as an attribute (opset 13 to 17, except
ReduceSum) and axes as an input (ReduceSum from 13, all from 18), known before run time or not.

ReduceMax and ReduceMin give the gradient to the elements equal to the extremum, shared equally among
ties (PyTorch's convention for ``amax``/``amin``). ReduceProd's gradient is exact with zeros in the input:
the product of the other elements, computed without dividing by zero. A reduction over an empty axes input
with noop_with_empty_axes computes different things on ONNX Runtime 1.19.2 (its input) and 1.31 (its
element-wise part, as the ONNX specification now says: ReduceSumSquare gives X^2): the builder rewrites such a
node before differentiating (spec_forms.py), so the rules here meet it only where it is built without that
pass, and treat it as 1.19.2 computes it (gradient dY).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


def reduced_axes(g: GradientContext, node: NodeView) -> Optional[Sequence[int]]:
    """The axes a Reduce* node reduces, normalised to non-negative, when known before run time
    (all axes when none are given); None when they come at run time."""
    x = node.inputs[0]
    rank = g.rank(x)
    if node.has_input(1):
        value = g.constant_value(node.inputs[1])
        if value is None:
            return None
        axes = [int(a) for a in value.reshape(-1)]
        if not axes and node.attr("noop_with_empty_axes", 0):
            return []
    else:
        axes = list(node.attr("axes", []) or [])
    if not axes:
        return None if rank is None else list(range(rank))
    if any(a < 0 for a in axes):
        if rank is None:
            return None
        axes = [a % rank for a in axes]
    return sorted(axes)


def is_noop(g: GradientContext, node: NodeView) -> bool:
    """Whether the node reduces nothing (an empty axes input with noop_with_empty_axes)."""
    return node.has_input(1) and bool(node.attr("noop_with_empty_axes", 0)) and reduced_axes(g, node) == []


def refuse_unknown_noop(g: GradientContext, node: NodeView) -> None:
    """For the reductions whose gradient formula does not also hold when nothing is reduced: with
    noop_with_empty_axes and axes known only at run time, which of the two applies is not known."""
    if node.has_input(1) and node.attr("noop_with_empty_axes", 0) and reduced_axes(g, node) is None:
        raise BuilderError(f"{node.describe()}: with noop_with_empty_axes, its gradient needs to know before run "
                           "time whether its axes are empty")


def reduce_again(g: GradientContext, node: NodeView, op: str, value: str) -> str:
    """``op`` over the node's axes on ``value`` (shaped like the node's input), dims kept, in the form
    ``op`` takes in the model's opset."""
    takes_input = op == "ReduceSum" or g.opset >= 18
    noop = node.attr("noop_with_empty_axes")
    if node.has_input(1):
        if takes_input:
            return g.op(op, value, node.inputs[1], keepdims=1, noop_with_empty_axes=noop)
        axes = reduced_axes(g, node)
        if axes is None:
            raise BuilderError(f"{node.describe()}: its gradient needs its axes before run time")
        return g.op(op, value, axes=list(axes), keepdims=1)
    listed = node.attr("axes")
    if takes_input:
        return g.op(op, value, g.ints(listed) if listed else None, keepdims=1)
    return g.op(op, value, axes=list(listed) if listed else None, keepdims=1)


def kept(g: GradientContext, node: NodeView, value: str) -> str:
    """``value``, shaped like the node's output, reshaped to the output's shape with the reduced axes
    kept (as size 1): it then broadcasts against the input."""
    if node.attr("keepdims", 1) or is_noop(g, node):
        return value
    axes = reduced_axes(g, node)
    if axes is not None:
        return g.unsqueeze(value, axes) if axes else value
    # axes known at run time only: the kept-dims shape of the same reduction
    return g.op("Reshape", value, g.op("Shape", reduce_again(g, node, "ReduceSum", node.inputs[0])))


def spread(g: GradientContext, node: NodeView, dy: str) -> str:
    """``dy`` (the gradient of a reduction of ``node.inputs[0]``) brought back to the input's shape."""
    x = node.inputs[0]
    return g.same_type(g.op("Expand", kept(g, node, dy), g.shape(x)), x)


def _mask(g: GradientContext, condition: str, like: str) -> str:
    return g.op("Cast", condition, to=g.elem_type(like))


@gradient("ReduceSum", inputs=(0,))
def reduce_sum(g: GradientContext, node: NodeView) -> Grads:
    if is_noop(g, node):
        return [node.dy()]
    return [spread(g, node, node.dy())]


@gradient("ReduceMean", inputs=(0,))
def reduce_mean(g: GradientContext, node: NodeView) -> Grads:
    """As ONNX Runtime writes it: dY scaled down by Size(X) / Size(dY) (its ``Scale`` kernel), expanded."""
    if is_noop(g, node):
        return [node.dy()]
    x, dy = node.inputs[0], node.dy()
    count = g.op("Div", g.op("Size", x), g.op("Size", dy))
    scaled = g.ms("Scale", kept(g, node, dy), count, scale_down=1)[0]
    return [g.same_type(g.op("Expand", scaled, g.shape(x)), x)]


@gradient("ReduceMax", "ReduceMin", inputs=(0,))
def reduce_extremum(g: GradientContext, node: NodeView) -> Grads:
    if is_noop(g, node):
        return [node.dy()]
    x = node.inputs[0]
    hits = _mask(g, g.op("Equal", x, kept(g, node, node.outputs[0])), x)
    share = g.op("Div", kept(g, node, node.dy()), reduce_again(g, node, "ReduceSum", hits))
    return [g.op("Mul", hits, share)]


@gradient("ReduceProd", inputs=(0,))
def reduce_prod(g: GradientContext, node: NodeView) -> Grads:
    """d/dx_i prod x = the product of the others: prod / x_i with no zero among them, the product of the
    non-zero elements at the one zero where there is exactly one, and 0 elsewhere."""
    if is_noop(g, node):
        return [node.dy()]
    x = node.inputs[0]
    zero, one = g.scalar(0.0, x), g.scalar(1.0, x)
    is_zero = g.op("Equal", x, zero)
    zeros = reduce_again(g, node, "ReduceSum", _mask(g, is_zero, x))
    nonzero_x = g.op("Where", is_zero, one, x)
    nonzero_product = reduce_again(g, node, "ReduceProd", nonzero_x)
    without_zeros = g.op("Where", g.op("Equal", zeros, zero), g.op("Div", nonzero_product, nonzero_x), zero)
    at_single_zero = g.op("Where", g.op("Equal", zeros, one), nonzero_product, zero)
    others = g.op("Where", is_zero, at_single_zero, without_zeros)
    return [g.op("Mul", others, kept(g, node, node.dy()))]


@gradient("ReduceL1", inputs=(0,))
def reduce_l1(g: GradientContext, node: NodeView) -> Grads:
    if is_noop(g, node):
        return [node.dy()]
    refuse_unknown_noop(g, node)
    x = node.inputs[0]
    return [g.op("Mul", g.op("Sign", x), kept(g, node, node.dy()))]


@gradient("ReduceL2", inputs=(0,))
def reduce_l2(g: GradientContext, node: NodeView) -> Grads:
    """x dY / Y, taken as 0 where Y is 0 (ONNX Runtime's form)."""
    if is_noop(g, node):
        return [node.dy()]
    refuse_unknown_noop(g, node)
    x, y = node.inputs[0], node.outputs[0]
    zero = g.scalar(0.0, y)
    scaled = g.op("Where", g.op("Equal", y, zero), zero, g.op("Div", node.dy(), y))
    return [g.op("Mul", x, kept(g, node, scaled))]


@gradient("ReduceSumSquare", inputs=(0,))
def reduce_sum_square(g: GradientContext, node: NodeView) -> Grads:
    if is_noop(g, node):
        return [node.dy()]
    refuse_unknown_noop(g, node)
    x = node.inputs[0]
    return [g.op("Mul", g.op("Mul", x, g.scalar(2.0, x)), kept(g, node, node.dy()))]


@gradient("ReduceLogSum", inputs=(0,))
def reduce_log_sum(g: GradientContext, node: NodeView) -> Grads:
    if is_noop(g, node):
        return [node.dy()]
    refuse_unknown_noop(g, node)
    x = node.inputs[0]
    share = g.op("Div", kept(g, node, node.dy()), reduce_again(g, node, "ReduceSum", x))
    return [g.same_type(g.op("Expand", share, g.shape(x)), x)]


@gradient("ReduceLogSumExp", inputs=(0,))
def reduce_log_sum_exp(g: GradientContext, node: NodeView) -> Grads:
    """exp(x - Y) dY, as ONNX Runtime writes it (PyTorch's logsumexp_backward)."""
    if is_noop(g, node):
        return [node.dy()]
    x = node.inputs[0]
    softmax = g.op("Exp", g.op("Sub", x, kept(g, node, node.outputs[0])))
    return [g.op("Mul", softmax, kept(g, node, node.dy()))]


@gradient("CumSum", inputs=(0,))
def cum_sum(g: GradientContext, node: NodeView) -> Grads:
    """The sum the other way: x_i feeds every y_j at or after it (exclusive: after it), so its gradient
    is the reversed cumulative sum of dY, exclusive when the forward one is."""
    return [g.op("CumSum", node.dy(), node.inputs[1], exclusive=int(node.attr("exclusive", 0)),
                 reverse=1 - int(node.attr("reverse", 0)))]
