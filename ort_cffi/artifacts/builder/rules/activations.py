"""One-input elementwise functions: the math library (Exp, Log, Sqrt, trigonometry...) and the
activations. Each gradient is ``dY`` times the derivative, written from the forward node's input or
output, whichever ONNX Runtime's own builder reads (so the result matches its artifacts where it has a
rule: Sqrt reads Y, Log reads X, Sigmoid and Tanh go through its ``SigmoidGrad``/``TanhGrad`` kernels).

Kinks (Relu, Abs, LeakyRelu, the clipped activations) take the derivative of the side the forward
function's definition puts the kink point on, as ONNX Runtime's kernels and PyTorch do.
"""
from __future__ import annotations

import math
from typing import List, Optional

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import MICROSOFT, gradient

Grads = List[Optional[str]]


def _times_dy(g: GradientContext, node: NodeView, derivative: str) -> Grads:
    return [g.op("Mul", node.dy(), derivative)]


def _square(g: GradientContext, x: str) -> str:
    return g.op("Mul", x, x)


def _where_positive(g: GradientContext, x: str, positive: str, other: str) -> str:
    """``positive`` where x > 0, else ``other`` (the side Elu, Selu and Celu put x == 0 on)."""
    return g.op("Where", g.op("Greater", x, g.scalar(0.0, x)), positive, other)


@gradient("Relu")
def relu(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("ReluGrad", node.dy(), node.outputs[0])[0]]


@gradient("Neg")
def neg(g: GradientContext, node: NodeView) -> Grads:
    return [g.op("Neg", node.dy())]


@gradient("Abs")
def abs_(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Sign", node.inputs[0]))


@gradient("Exp")
def exp(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, node.outputs[0])


@gradient("Log")
def log(g: GradientContext, node: NodeView) -> Grads:
    return [g.op("Div", node.dy(), node.inputs[0])]


@gradient("Sqrt")
def sqrt(g: GradientContext, node: NodeView) -> Grads:
    y = node.outputs[0]
    return _times_dy(g, node, g.op("Div", g.scalar(0.5, y), y))


@gradient("Reciprocal")
def reciprocal(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Neg", _square(g, node.outputs[0])))


@gradient("Sin")
def sin(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Cos", node.inputs[0]))


@gradient("Cos")
def cos(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return _times_dy(g, node, g.op("Sub", g.scalar(0.0, x), g.op("Sin", x)))


@gradient("Tan")
def tan(g: GradientContext, node: NodeView) -> Grads:  # 1 + tan^2
    y = node.outputs[0]
    return _times_dy(g, node, g.op("Add", _square(g, y), g.scalar(1.0, y)))


def _one_minus_square(g: GradientContext, x: str, like: Optional[str] = None) -> str:
    """1 - x^2; ``like``: a forward value of x's type, where x is a new value (whose type is not recorded)."""
    return g.op("Sub", g.scalar(1.0, like or x), _square(g, x))


@gradient("Asin")
def asin(g: GradientContext, node: NodeView) -> Grads:
    return [g.op("Div", node.dy(), g.op("Sqrt", _one_minus_square(g, node.inputs[0])))]


@gradient("Acos")
def acos(g: GradientContext, node: NodeView) -> Grads:
    return [g.op("Neg", g.op("Div", node.dy(), g.op("Sqrt", _one_minus_square(g, node.inputs[0]))))]


@gradient("Atan")
def atan(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.op("Div", node.dy(), g.op("Add", _square(g, x), g.scalar(1.0, x)))]


@gradient("Sinh")
def sinh(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Cosh", node.inputs[0]))


@gradient("Cosh")
def cosh(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Sinh", node.inputs[0]))


@gradient("Asinh")
def asinh(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.op("Div", node.dy(), g.op("Sqrt", g.op("Add", _square(g, x), g.scalar(1.0, x))))]


@gradient("Acosh")
def acosh(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    return [g.op("Div", node.dy(), g.op("Sqrt", g.op("Sub", _square(g, x), g.scalar(1.0, x))))]


@gradient("Atanh")
def atanh(g: GradientContext, node: NodeView) -> Grads:
    return [g.op("Div", node.dy(), _one_minus_square(g, node.inputs[0]))]


@gradient("Erf")
def erf(g: GradientContext, node: NodeView) -> Grads:  # 2/sqrt(pi) exp(-x^2), as ONNX Runtime writes it
    x = node.inputs[0]
    gaussian = g.op("Exp", g.op("Neg", _square(g, x)))
    return _times_dy(g, node, g.op("Mul", g.scalar(2.0 / math.sqrt(math.pi), x), gaussian))


@gradient("Tanh")
def tanh(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("TanhGrad", node.dy(), node.outputs[0])[0]]


@gradient("Sigmoid")
def sigmoid(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("SigmoidGrad", node.dy(), node.outputs[0])[0]]


@gradient("Softplus")
def softplus(g: GradientContext, node: NodeView) -> Grads:
    return _times_dy(g, node, g.op("Sigmoid", node.inputs[0]))


@gradient("Softsign")
def softsign(g: GradientContext, node: NodeView) -> Grads:  # 1 / (1 + |x|)^2
    x = node.inputs[0]
    return [g.op("Div", node.dy(), _square(g, g.op("Add", g.op("Abs", x), g.scalar(1.0, x))))]


@gradient("Elu")
def elu(g: GradientContext, node: NodeView) -> Grads:  # x <= 0: alpha (exp(x) - 1) + alpha = y + alpha
    x, y = node.inputs[0], node.outputs[0]
    negative = g.op("Add", y, g.scalar(float(node.attr("alpha", 1.0)), y))
    return _times_dy(g, node, _where_positive(g, x, g.scalar(1.0, x), negative))


@gradient("Selu")
def selu(g: GradientContext, node: NodeView) -> Grads:  # x <= 0: gamma alpha exp(x) = y + gamma alpha
    x, y = node.inputs[0], node.outputs[0]
    alpha = float(node.attr("alpha", 1.67326319217681884765625))
    gamma = float(node.attr("gamma", 1.05070102214813232421875))
    negative = g.op("Add", y, g.scalar(alpha * gamma, y))
    return _times_dy(g, node, _where_positive(g, x, g.scalar(gamma, x), negative))


@gradient("Celu")
def celu(g: GradientContext, node: NodeView) -> Grads:  # x <= 0: exp(x / alpha)
    x = node.inputs[0]
    negative = g.op("Exp", g.op("Div", x, g.scalar(float(node.attr("alpha", 1.0)), x)))
    return _times_dy(g, node, _where_positive(g, x, g.scalar(1.0, x), negative))


@gradient("LeakyRelu")
def leaky_relu(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("LeakyReluGrad", node.dy(), node.outputs[0], alpha=float(node.attr("alpha", 0.01)))[0]]


@gradient("PRelu")
def prelu(g: GradientContext, node: NodeView) -> Grads:
    """y = x where x >= 0, slope * x elsewhere; the slope broadcasts to x (one way), so its gradient is
    summed back over the axes it was broadcast along."""
    x, slope = node.inputs[:2]
    y, dy = node.outputs[0], node.dy()
    negative = g.op("Less", x, g.scalar(0.0, x))
    dx = dslope = None
    if node.wants(0):
        dx = g.op("Where", negative, g.op("Mul", dy, slope), dy)
    if node.wants(1):
        dslope = g.unbroadcast(g.op("Where", negative, g.op("Mul", dy, x), g.scalar(0.0, x)), slope, y)
    return [dx, dslope]


def _mask(g: GradientContext, condition: str, like: str) -> str:
    return g.op("Cast", condition, to=g.elem_type(like))


@gradient("ThresholdedRelu")
def thresholded_relu(g: GradientContext, node: NodeView) -> Grads:  # y = x where x > alpha, else 0
    x = node.inputs[0]
    above = g.op("Greater", x, g.scalar(float(node.attr("alpha", 1.0)), x))
    return _times_dy(g, node, _mask(g, above, x))


@gradient("HardSigmoid")
def hard_sigmoid(g: GradientContext, node: NodeView) -> Grads:  # alpha where 0 < alpha x + beta < 1
    x = node.inputs[0]
    alpha, beta = float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))
    linear = g.op("Add", g.op("Mul", x, g.scalar(alpha, x)), g.scalar(beta, x))
    inside = g.op("And", g.op("Greater", linear, g.scalar(0.0, x)), g.op("Less", linear, g.scalar(1.0, x)))
    return _times_dy(g, node, g.op("Mul", _mask(g, inside, x), g.scalar(alpha, x)))


@gradient("HardSwish")
def hard_swish(g: GradientContext, node: NodeView) -> Grads:
    """y = x hardsigmoid(x) (alpha 1/6, beta 1/2): 0 below -3, 1 above 3, x/3 + 1/2 from -3 to 3 both
    included (PyTorch's convention at the two kinks)."""
    x = node.inputs[0]
    middle = g.op("Add", g.op("Div", x, g.scalar(3.0, x)), g.scalar(0.5, x))
    above = g.op("Where", g.op("LessOrEqual", x, g.scalar(3.0, x)), middle, g.scalar(1.0, x))
    derivative = g.op("Where", g.op("Less", x, g.scalar(-3.0, x)), g.scalar(0.0, x), above)
    return _times_dy(g, node, derivative)


@gradient("Mish")
def mish(g: GradientContext, node: NodeView) -> Grads:  # tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
    x = node.inputs[0]
    t = g.op("Tanh", g.op("Softplus", x))
    slope = g.op("Mul", g.op("Mul", x, g.op("Sigmoid", x)), _one_minus_square(g, t, like=x))
    return _times_dy(g, node, g.op("Add", t, slope))


@gradient("Gelu")
def gelu(g: GradientContext, node: NodeView) -> Grads:
    """ONNX's Gelu (opset 20): the exact form through ONNX Runtime's ``GeluGrad``, the tanh
    approximation through ``FastGeluGrad`` (FastGelu is that approximation)."""
    approximate = node.attr("approximate", "none")
    if approximate == "none":
        return [g.ms("GeluGrad", node.dy(), node.inputs[0])[0]]
    if approximate == "tanh":
        return [g.ms("FastGeluGrad", node.dy(), node.inputs[0])[0]]
    raise BuilderError(f"{node.describe()}: Gelu with approximate={approximate!r} is not defined")


@gradient("Gelu", domain=MICROSOFT)
def gelu_microsoft(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("GeluGrad", node.dy(), node.inputs[0])[0]]


@gradient("FastGelu", domain=MICROSOFT)
def fast_gelu(g: GradientContext, node: NodeView) -> Grads:
    """FastGelu(X) or FastGelu(X, bias): the gradient at X + bias, the bias's summed back over the axes
    it was broadcast along."""
    x, dy = node.inputs[0], node.dy()
    if not node.has_input(1):
        return [g.ms("FastGeluGrad", dy, x)[0]]
    bias = node.inputs[1]
    dx = g.ms("FastGeluGrad", dy, g.op("Add", x, bias))[0]
    return [dx if node.wants(0) else None, g.unbroadcast(dx, bias, node.outputs[0]) if node.wants(1) else None]


@gradient("BiasGelu", domain=MICROSOFT)
def bias_gelu(g: GradientContext, node: NodeView) -> Grads:
    """BiasGelu(A, B) = Gelu(A + B), which ONNX Runtime's optimizer writes: GeluGrad at A + B, the
    bias's gradient summed back over the axes it was broadcast along."""
    a, bias = node.inputs[:2]
    da = g.ms("GeluGrad", node.dy(), g.op("Add", a, bias))[0]
    return [da if node.wants(0) else None, g.unbroadcast(da, bias, node.outputs[0]) if node.wants(1) else None]


@gradient("QuickGelu", domain=MICROSOFT)
def quick_gelu(g: GradientContext, node: NodeView) -> Grads:
    """x sigmoid(alpha x), through ONNX Runtime's QuickGeluGrad kernel, as its builder emits it."""
    return [g.ms("QuickGeluGrad", node.dy(), node.inputs[0], alpha=float(node.attr("alpha", 1.702)))[0]]
