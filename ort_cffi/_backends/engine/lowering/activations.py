"""Activation gradients: each a few elementwise operators, in the order of ONNX Runtime's CPU kernel
(orttraining/training_ops/cpu/activation) so that the result agrees to the last bits where it can."""
from __future__ import annotations

import math
from typing import Optional

import onnx

from ort_cffi._backends.engine.lowering.registry import Emitter, attribute, lowers


def _output(node: onnx.NodeProto, index: int = 0) -> Optional[str]:
    return node.output[index] if len(node.output) > index and node.output[index] else None


@lowers("ReluGrad")
def relu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = dY where X > 0, else 0 (inputs dY, X), written as dY * Cast(X > 0): the same values for finite dY,
    and a plain elementwise Mul runs several times faster than Where on 1.19.2 and 1.31.1 (docs/internals/
    runtime.md, the engine's forms). An infinite or NaN dY where X <= 0 gives NaN here, 0 in the kernel."""
    dy, x = node.input[0], node.input[1]
    positive = emit.one("Greater", [x, emit.const_like(0.0, x)])
    emit.one("Mul", [dy, emit.cast_like(positive, dy)], _output(node))


@lowers("SigmoidGrad")
def sigmoid_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = dY * Y * (1 - Y) (inputs dY, Y)."""
    dy, y = node.input[0], node.input[1]
    one_minus = emit.one("Sub", [emit.const_like(1.0, y), y])
    emit.one("Mul", [emit.one("Mul", [dy, y]), one_minus], _output(node))


@lowers("TanhGrad")
def tanh_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = dY * (1 - Y * Y) (inputs dY, Y)."""
    dy, y = node.input[0], node.input[1]
    emit.one("Mul", [dy, emit.one("Sub", [emit.const_like(1.0, y), emit.one("Mul", [y, y])])], _output(node))


@lowers("LeakyReluGrad")
def leaky_relu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = dY where Y > 0, else alpha * dY (inputs dY, Y; attribute alpha, 0.01 by default)."""
    dy, y = node.input[0], node.input[1]
    alpha = float(attribute(node, "alpha", 0.01))
    scaled = emit.one("Mul", [dy, emit.const_like(alpha, dy)])
    emit.one("Where", [emit.one("Greater", [y, emit.const_like(0.0, y)]), dy, scaled], _output(node))


def _gelu_grad(emit: Emitter, dy: str, x: str, output: Optional[str]) -> None:
    """dY * (0.5 * (erf(x / sqrt 2) + 1) + x * k * exp(-0.5 * x * x)), k = 1 / sqrt(2 pi)."""
    k = emit.const_like(2.0 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5, x)
    erf = emit.one("Erf", [emit.one("Mul", [x, emit.const_like(math.sqrt(0.5), x)])])
    cdf = emit.one("Mul", [emit.const_like(0.5, x), emit.one("Add", [erf, emit.const_like(1.0, x)])])
    square = emit.one("Mul", [emit.one("Mul", [emit.const_like(-0.5, x), x]), x])
    pdf = emit.one("Mul", [emit.one("Mul", [x, k]), emit.one("Exp", [square])])
    emit.one("Mul", [dy, emit.one("Add", [cdf, pdf])], output)


def _fast_gelu_grad(emit: Emitter, dy: str, x: str, output: Optional[str]) -> None:
    """The derivative of the tanh approximation, as the kernel writes it:
    dY * 0.5 * (t + (1 - t * t) * (a * x + b * x^3) + 1), t = tanh(a * x + a * g * x^3), b = 3 a g."""
    alpha = 2.0 / math.sqrt(math.pi) * math.sqrt(0.5)
    gamma = 0.044715
    a = emit.const_like(alpha, x)
    cube = emit.one("Mul", [emit.one("Mul", [x, x]), x])
    inner = emit.one("Add", [emit.one("Mul", [a, x]), emit.one("Mul", [emit.const_like(alpha * gamma, x), cube])])
    t = emit.one("Tanh", [inner])
    sech2 = emit.one("Sub", [emit.const_like(1.0, x), emit.one("Mul", [t, t])])
    slope = emit.one("Add", [emit.one("Mul", [a, x]), emit.one("Mul", [emit.const_like(gamma * alpha * 3.0, x), cube])])
    total = emit.one("Add", [emit.one("Add", [t, emit.one("Mul", [sech2, slope])]), emit.const_like(1.0, x)])
    emit.one("Mul", [dy, emit.one("Mul", [emit.const_like(0.5, x), total])], output)


@lowers("GeluGrad")
def gelu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    _gelu_grad(emit, node.input[0], node.input[1], _output(node))


@lowers("FastGeluGrad")
def fast_gelu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    _fast_gelu_grad(emit, node.input[0], node.input[1], _output(node))


@lowers("BiasGeluGrad_dX")
def bias_gelu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """GeluGrad at X + B (inputs dY, X, B: B along X's last axis)."""
    _gelu_grad(emit, node.input[0], emit.one("Add", [node.input[1], node.input[2]]), _output(node))


@lowers("BiasFastGeluGrad_dX")
def bias_fast_gelu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    _fast_gelu_grad(emit, node.input[0], emit.one("Add", [node.input[1], node.input[2]]), _output(node))


@lowers("QuickGeluGrad")
def quick_gelu_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """QuickGelu is x * sigmoid(alpha x): dX = dY * s * (1 + alpha x (1 - s)), s = sigmoid(alpha x)."""
    dy, x = node.input[0], node.input[1]
    alpha = float(attribute(node, "alpha", 1.702))
    ax = emit.one("Mul", [x, emit.const_like(alpha, x)])
    s = emit.one("Sigmoid", [ax])
    grow = emit.one("Mul", [ax, emit.one("Sub", [emit.const_like(1.0, x), s])])
    emit.one("Mul", [dy, emit.one("Mul", [s, emit.one("Add", [emit.const_like(1.0, x), grow])])], _output(node))


def _flattened(node: onnx.NodeProto, emit: Emitter, default_axis: int) -> tuple:
    """Softmax before opset 13 works on X flattened to 2-D at ``axis``: (axis, rank or None)."""
    return int(attribute(node, "axis", default_axis)), emit.rank(node.input[1])


@lowers("SoftmaxGrad_13", "SoftmaxGrad")
def softmax_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = Y * (dY - sum(dY * Y)) over ``axis`` (inputs dY, Y). SoftmaxGrad (before opset 13) sums over every
    axis from ``axis`` on, as Softmax then did."""
    dy, y = node.input[0], node.input[1]
    if node.op_type == "SoftmaxGrad_13":
        axes = [int(attribute(node, "axis", -1))]
    else:
        axis = int(attribute(node, "axis", 1))
        rank = emit.require_rank(y, "SoftmaxGrad's Y")
        axes = list(range(axis % rank, rank))
    total = emit.reduce("ReduceSum", emit.one("Mul", [dy, y]), axes, keepdims=True)
    emit.one("Mul", [emit.one("Sub", [dy, total]), y], _output(node))


@lowers("LogSoftmaxGrad_13", "LogSoftmaxGrad")
def log_softmax_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = dY - exp(Y) * sum(dY) over ``axis`` (inputs dY, Y = LogSoftmax's output)."""
    dy, y = node.input[0], node.input[1]
    if node.op_type == "LogSoftmaxGrad_13":
        axes = [int(attribute(node, "axis", -1))]
    else:
        axis = int(attribute(node, "axis", 1))
        rank = emit.require_rank(y, "LogSoftmaxGrad's Y")
        axes = list(range(axis % rank, rank))
    total = emit.reduce("ReduceSum", dy, axes, keepdims=True)
    emit.one("Sub", [dy, emit.one("Mul", [emit.one("Exp", [y]), total])], _output(node))


@lowers("DropoutGrad")
def dropout_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """dX = mask * dY / (1 - ratio), and dX = dY where ratio is 0 (inputs dY, mask, ratio = 0.5). The CPU kernel
    reads the ratio as float and does not read training_mode: neither does this."""
    dy, mask = node.input[0], node.input[1]
    ratio = node.input[2] if len(node.input) > 2 and node.input[2] else None
    ratio_value = emit.one("Cast", [ratio], to=onnx.TensorProto.FLOAT) if ratio else emit.const(0.5)
    keep = emit.cast_like(emit.one("Sub", [emit.const(1.0), ratio_value]), dy)
    kept = emit.one("Div", [emit.one("Mul", [emit.cast_like(mask, dy), dy]), keep])
    emit.one("Where", [emit.one("Equal", [ratio_value, emit.const(0.0)]), dy, kept], node.output[0])
