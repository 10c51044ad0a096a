"""Reductions: their gradients spread the output's gradient back over the reduced axes."""
from __future__ import annotations

from typing import List, Optional, Sequence

from ort_cffi.artifacts.builder.context import GradientContext, NodeView
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


def spread(g: GradientContext, node: NodeView, dy: str) -> str:
    """``dy`` (the gradient of a reduction of ``node.inputs[0]``) brought back to the input's shape."""
    x = node.inputs[0]
    if not node.attr("keepdims", 1):
        axes = reduced_axes(g, node)
        if axes is not None:
            if axes:
                dy = g.unsqueeze(dy, axes)
        else:  # axes known at run time only: the kept-dims shape of the same reduction
            kept = g.op(node.op_type, *node.inputs, keepdims=1, noop_with_empty_axes=node.attr("noop_with_empty_axes"))
            dy = g.op("Reshape", dy, g.op("Shape", kept))
    return g.same_type(g.op("Expand", dy, g.shape(x)), x)


@gradient("ReduceSum", inputs=(0,))
def reduce_sum(g: GradientContext, node: NodeView) -> Grads:
    return [spread(g, node, node.dy())]
