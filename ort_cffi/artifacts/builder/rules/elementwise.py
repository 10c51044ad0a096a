"""Elementwise operators of several inputs (arithmetic, n-ary Max/Min/Sum/Mean, Where, Clip) with
broadcasting: each input's gradient is summed back over the axes that input was broadcast along
(``g.unbroadcast``); and Cast, Identity, and the piecewise-constant functions.

Sign, Floor, Ceil and Round are registered as operators through which no gradient flows: their
derivative is zero wherever it exists, so a path through them contributes nothing, and a parameter that
reaches the loss only through them is reported as unreached (rather than trained with a gradient that is
always zero). The comparisons and logic operators are registered with the indexing family.
"""
from __future__ import annotations

from typing import List, Optional

from onnx import TensorProto

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient, no_gradient

Grads = List[Optional[str]]

FLOATING = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)

no_gradient("Sign", "Floor", "Ceil", "Round", family="elementwise")


@gradient("Add", "Sub")
def add_sub(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    out = node.outputs[0]
    da = g.unbroadcast(dy, a, out) if node.wants(0) else None
    db = None
    if node.wants(1):
        db = g.unbroadcast(dy, b, out)
        if node.op_type == "Sub":
            db = g.op("Neg", db)
    return [da, db]


@gradient("Mul")
def mul(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    out = node.outputs[0]
    da = g.unbroadcast(g.op("Mul", dy, b), a, out) if node.wants(0) else None
    db = g.unbroadcast(g.op("Mul", dy, a), b, out) if node.wants(1) else None
    return [da, db]


@gradient("Div")
def div(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's form: its ``DivGrad`` kernel (which sums over broadcast axes itself) where the
    divisor's gradient is wanted, a Div of dY where only the dividend's is."""
    a, b = node.inputs[:2]
    dy = node.dy()
    if node.wants(1):
        da, db = g.ms("DivGrad", dy, a, b, outputs=2)
        return [g.same_type(da, a) if node.wants(0) else None, g.same_type(db, b)]
    return [g.unbroadcast(g.op("Div", dy, b), a, node.outputs[0]), None]


@gradient("Identity")
def identity(g: GradientContext, node: NodeView) -> Grads:
    return [node.dy()]


@gradient("Pow")
def pow_(g: GradientContext, node: NodeView) -> Grads:
    """y = x^e. dx = dy e x^(e-1), as ONNX Runtime writes it (an exponent of another type is cast to the
    base's first); de = dy y log(x), taken as 0 where x is 0 (PyTorch's convention; the limit for e > 0)."""
    x, e = node.inputs[:2]
    y, dy = node.outputs[0], node.dy()
    dx = de = None
    if node.wants(0):
        exponent = e if g.elem_type(e) == g.elem_type(x) else g.op("Cast", e, to=g.elem_type(x))
        power = g.op("Pow", x, g.op("Sub", exponent, g.scalar(1.0, x)))
        dx = g.unbroadcast(g.op("Mul", g.op("Mul", power, exponent), dy), x, y)
    if node.wants(1):
        if g.elem_type(x) != g.elem_type(e):
            raise BuilderError(f"{node.describe()}: the gradient of an exponent of another type than the base "
                               "is not supported")
        zero = g.scalar(0.0, x)
        log_x = g.op("Where", g.op("Equal", x, zero), zero, g.op("Log", x))
        de = g.unbroadcast(g.op("Mul", g.op("Mul", dy, y), log_x), e, y)
    return [dx, de]


@gradient("Max", "Min")
def max_min(g: GradientContext, node: NodeView) -> Grads:
    """The inputs equal to the result share its gradient equally (ONNX Runtime's rule, and PyTorch's
    for ``maximum``/``minimum`` on ties)."""
    y, dy = node.outputs[0], node.dy()
    if len(node.inputs) == 1:
        return [dy]
    masks = [_mask(g, g.op("Equal", x, y), y) for x in node.inputs]
    scaled = g.op("Div", dy, g.op("Sum", *masks))
    return [g.unbroadcast(g.op("Mul", scaled, mask), x, y) if node.wants(i) else None
            for i, (x, mask) in enumerate(zip(node.inputs, masks))]


@gradient("Sum", "Mean")
def sum_mean(g: GradientContext, node: NodeView) -> Grads:
    y, dy = node.outputs[0], node.dy()
    if node.op_type == "Mean" and len(node.inputs) > 1:
        dy = g.op("Mul", dy, g.scalar(1.0 / len(node.inputs), y))
    return [g.unbroadcast(dy, x, y) if node.wants(i) else None for i, x in enumerate(node.inputs)]


@gradient("Where", inputs=(1, 2))
def where(g: GradientContext, node: NodeView) -> Grads:
    condition = node.inputs[0]
    y, dy = node.outputs[0], node.dy()
    zero = g.scalar(0.0, y)
    grads: Grads = [None, None, None]
    if node.wants(1):
        grads[1] = g.unbroadcast(g.op("Where", condition, dy, zero), node.inputs[1], y)
    if node.wants(2):
        grads[2] = g.unbroadcast(g.op("Where", condition, zero, dy), node.inputs[2], y)
    return grads


@gradient("Cast")
def cast(g: GradientContext, node: NodeView) -> Grads:
    """dY cast back to the input's type. A cast from or to a type that is not floating point (an index,
    a mask) carries no gradient."""
    x, y = node.inputs[0], node.outputs[0]
    if g.elem_type(x) not in FLOATING or g.elem_type(y) not in FLOATING:
        return [None]
    return [g.op("Cast", node.dy(), to=g.elem_type(x))]


@gradient("CastLike", inputs=(0,))
def cast_like(g: GradientContext, node: NodeView) -> Grads:
    """Cast to the type of the second input (opset 15; torch's default exporter writes it where it is not asked
    to optimize): as Cast. The second input gives only its type, and gets no gradient."""
    x, y = node.inputs[0], node.outputs[0]
    if g.elem_type(x) not in FLOATING or g.elem_type(y) not in FLOATING:
        return [None]
    return [g.op("Cast", node.dy(), to=g.elem_type(x))]


def _mask(g: GradientContext, condition: str, like: str) -> str:
    return g.op("Cast", condition, to=g.elem_type(like))


@gradient("Clip")
def clip(g: GradientContext, node: NodeView) -> Grads:
    """y = min(max(x, lo), hi). x takes dY where lo <= x <= hi (ONNX Runtime's mask: the bounds count as
    inside); lo takes it where x < lo (and lo <= hi), hi where max(x, lo) > hi, each summed to the
    bound's shape. Bounds as attributes (opset 6) or inputs (11 and later)."""
    x, y, dy = node.inputs[0], node.outputs[0], node.dy()
    low: Optional[str] = node.inputs[1] if node.has_input(1) else None
    high: Optional[str] = node.inputs[2] if node.has_input(2) else None
    if low is None and node.attr("min") is not None:
        low = g.scalar(float(node.attr("min")), x)
    if high is None and node.attr("max") is not None:
        high = g.scalar(float(node.attr("max")), x)
    grads: Grads = [None, None, None]
    if node.wants(0):
        inside = None
        if low is not None:
            inside = g.op("GreaterOrEqual", x, low)
        if high is not None:
            below_high = g.op("LessOrEqual", x, high)
            inside = below_high if inside is None else g.op("And", inside, below_high)
        grads[0] = dy if inside is None else g.op("Mul", dy, _mask(g, inside, x))
    if node.wants(1) and low is not None:
        clipped_low = g.op("Less", x, low)
        if high is not None:
            clipped_low = g.op("And", clipped_low, g.op("LessOrEqual", low, high))
        grads[1] = _sum_to(g, g.op("Where", clipped_low, dy, g.scalar(0.0, y)), low, y)
    if node.wants(2) and high is not None:
        raised = x if low is None else g.op("Max", x, low)
        grads[2] = _sum_to(g, g.op("Where", g.op("Greater", raised, high), dy, g.scalar(0.0, y)), high, y)
    return grads


def _sum_to(g: GradientContext, grad: str, bound: str, like: str) -> str:
    """A gradient shaped like ``like`` summed to a Clip bound: a scalar (the operator takes only scalars)."""
    rank = g.rank(bound)
    total = g.reduce_sum(grad, keepdims=0)
    if rank:  # a bound of shape [1]
        total = g.reshape_like(total, bound)
    return g.same_type(total, bound)

