"""Normalization in training: BatchNormInternal (the forward BatchNormalization of a training graph, with the
batch's statistics as outputs) and the gradients of BatchNormalization and of the three layer norms, in the
arithmetic of ONNX Runtime's CPU kernels (orttraining/training_ops/cpu/nn)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx

from ort_cffi._backends.engine.lowering.registry import Emitter, attribute, lowers


def _out(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.output[index] if len(node.output) > index and node.output[index] else None


def _per_channel(emit: Emitter, vector: str, rank: int) -> str:
    """A per-channel vector [C] shaped to broadcast over [N, C, ...]."""
    return emit.unsqueeze(vector, [0] + list(range(2, rank)))


def _channel_affine(emit: Emitter, x: str, scale: str, bias: str, output: Optional[str] = None,
                    like: Optional[str] = None) -> str:
    """x * scale + bias per channel ([C] vectors over [N, C, ...]) in one pass: BatchNormalization in inference
    mode with mean 0, variance 1 and epsilon 0, whose kernel computes exactly x * scale' + bias' with scale' =
    scale * 1 / sqrt(1 + 0) = scale and bias' = bias - 0 * scale' = bias. Two elementwise operators would
    read and write the whole tensor twice. The zeros and ones are constants where the channels are known, of
    ``scale`` or of ``like`` (a [C] vector of the same type whose shape is declared: a computed ``scale``'s
    often is not, and ConstantOfShape, Cast and Add at run time cost three nodes each)."""
    channels, dtype = emit.shape(scale), emit.dtype(scale)
    if like is not None and (channels is None or not all(isinstance(c, int) for c in channels)):
        channels, dtype = emit.shape(like), emit.dtype(like)
    if channels is not None and len(channels) == 1 and isinstance(channels[0], int) and dtype is not None:
        zeros, ones = emit.const(np.zeros(channels, dtype)), emit.const(np.ones(channels, dtype))
    else:
        zero = emit.one("ConstantOfShape", [emit.one("Shape", [scale])])
        zeros = emit.cast_like(zero, scale)
        ones = emit.cast_like(emit.one("Add", [zero, emit.const(1.0)]), scale)
    return emit.one("BatchNormalization", [x, scale, bias, zeros, ones], output, epsilon=0.0)


@lowers("BatchNormInternal")
def batch_norm_internal(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs X, scale, B, input_mean, input_var; outputs Y, running_mean, running_var, saved_mean,
    saved_inv_std. The kernel trains when the node lists more than one output (``training_mode`` is not read):
    the batch's mean and biased variance (sum of squares over the count) normalize X as
    Y = X * (inv_std * scale) + (B - mean * inv_std * scale), the running statistics move by ``momentum``
    towards them, and saved_inv_std is sqrt(1 / (var + epsilon))."""
    x, scale, bias, mean, var = node.input[:5]
    epsilon = float(attribute(node, "epsilon", 1e-5))
    momentum = float(attribute(node, "momentum", 0.9))
    if len(node.output) <= 1:
        emit.one("BatchNormalization", [x, scale, bias, mean, var], node.output[0], epsilon=epsilon)
        return
    if emit.opset >= 14:
        _batch_norm_in_training_mode(node, emit, epsilon, momentum)
        return
    rank = emit.require_rank(x, "BatchNormInternal's X")
    axes = [0] + list(range(2, rank))
    batch_mean = emit.reduce("ReduceMean", x, axes, keepdims=False, output=_out(node, 3))
    centered = emit.one("Sub", [x, _per_channel(emit, batch_mean, rank)])
    count = emit.cast_like(emit.one("Div", [emit.one("Size", [x]), emit.shape_of(x, 1, 2)]), x)
    batch_var = emit.one("Div", [emit.reduce("ReduceSumSquare", centered, axes, keepdims=False), count])
    eps = emit.const_like(epsilon, x)
    inv_std = emit.one("Sqrt", [emit.one("Reciprocal", [emit.one("Add", [batch_var, eps])])], _out(node, 4))
    new_scale = emit.one("Mul", [inv_std, scale])
    new_bias = emit.one("Sub", [bias, emit.one("Mul", [batch_mean, new_scale])])
    _channel_affine(emit, x, new_scale, new_bias, node.output[0])
    keep, move = emit.const_like(momentum, mean), emit.const_like(1.0 - momentum, mean)
    for index, running, batch in ((1, mean, batch_mean), (2, var, batch_var)):
        if _out(node, index):
            emit.one("Add", [emit.one("Mul", [running, keep]), emit.one("Mul", [batch, move])], node.output[index])


def _channel_zeros(emit: Emitter, like: str) -> str:
    """Zeros shaped and typed as the per-channel vector ``like``."""
    channels, dtype = emit.shape(like), emit.dtype(like)
    if channels is not None and len(channels) == 1 and isinstance(channels[0], int) and dtype is not None:
        return emit.const(np.zeros(channels, dtype))
    return emit.cast_like(emit.one("ConstantOfShape", [emit.one("Shape", [like])]), like)


def _channel_ones(emit: Emitter, like: str) -> str:
    """Ones shaped and typed as the per-channel vector ``like``."""
    channels, dtype = emit.shape(like), emit.dtype(like)
    if channels is not None and len(channels) == 1 and isinstance(channels[0], int) and dtype is not None:
        return emit.const(np.ones(channels, dtype))
    zero = emit.one("ConstantOfShape", [emit.one("Shape", [like])])
    return emit.cast_like(emit.one("Add", [zero, emit.const(1.0)]), like)


def _batch_norm_in_training_mode(node: onnx.NodeProto, emit: Emitter, epsilon: float, momentum: float) -> None:
    """From opset 14 on: one BatchNormalization with ``training_mode`` 1, whose CPU kernel (every build from 1.19.2
    to 1.31.1) is the one BatchNormInternal runs: the same batch mean, biased variance and Y, in one kernel
    where the written-out form took some 20 nodes and reductions over non-adjacent axes. With momentum 0 and
    zero running statistics its running outputs are the batch's statistics themselves (0 * 0 + s * 1 = s); the
    real running statistics and saved_inv_std are then [C]-sized arithmetic, and the result is bit for bit the
    training build's. Measured (ONNX Runtime's profiler, 1.31.1, one thread, 2026-12-07): resnet_training's nine
    BatchNormInternal took 3.55 ms of kernels per step written out, 1.9 ms so (the training build: 0.86)."""
    x, scale, bias, mean, var = node.input[:5]
    # The kernel may write its running statistics over its mean and var inputs: they must be values no other
    # node reads. Constant zeros are not (ONNX Runtime's optimizer merges equal constants, and the affine forms
    # below read theirs): values computed here, one per input, are. Their contents do not matter (times
    # momentum 0), as long as they are finite, which they are wherever scale and B are.
    zero = emit.const_like(0.0, scale)
    batch_mean = _out(node, 3) or emit.fresh("batch_mean")
    batch_var = emit.fresh("batch_var")
    emit.node("BatchNormalization", [x, scale, bias, emit.one("Mul", [scale, zero]), emit.one("Mul", [bias, zero])],
              [node.output[0], batch_mean, batch_var], epsilon=epsilon, momentum=0.0, training_mode=1)
    if _out(node, 4):
        eps = emit.const_like(epsilon, x)
        emit.one("Sqrt", [emit.one("Reciprocal", [emit.one("Add", [batch_var, eps])])], node.output[4])
    keep, move = emit.const_like(momentum, mean), emit.const_like(1.0 - momentum, mean)
    for index, running, batch in ((1, mean, batch_mean), (2, var, batch_var)):
        if _out(node, index):
            emit.one("Add", [emit.one("Mul", [running, keep]), emit.one("Mul", [batch, move])], node.output[index])


@lowers("BatchNormalizationGrad")
def batch_normalization_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, X, scale, saved_mean, saved_inv_std; outputs dX, dScale, dBias. With M = N * spatial size:
    dBias = sum dY, dScale = sum (X - mean) * dY * inv_std, and the kernel's
    dX = scale * inv_std / M * (dY * M - dBias - (X - mean) * dScale * inv_std), written per channel as
    (a * dY + c) + b * (X - mean) (a = scale * inv_std, b = -a / M * dScale * inv_std, c = -a / M * dBias).

    The whole tensor is read and written as few times as this allows: X - mean, its product with dY (summed),
    a * dY + c, b * (X - mean), their sum; each per-channel affine is one inference-mode BatchNormalization
    (``_channel_affine``). Measured against the form with broadcast Sub and Mul (1.31.1, 2026-12-07):
    [16, 32, 16, 16] 0.198 ms -> 0.163, [16, 96, 24, 24] 1.006 -> 0.918 (the training kernel: 0.074 and 0.394,
    in one fused pass no standard form matches). Sums over the spatial axes and then the batch, in place of
    one reduction over (0, 2, ...), were no faster here."""
    dy, x, scale, mean, inv_std = node.input[:5]
    rank = emit.require_rank(x, "BatchNormalizationGrad's X")
    axes = [0] + list(range(2, rank))
    centered = _channel_affine(emit, x, _channel_ones(emit, scale), emit.one("Neg", [mean]), like=scale)
    d_bias = emit.reduce("ReduceSum", dy, axes, keepdims=False, output=_out(node, 2))
    d_scale = emit.one("Mul", [emit.reduce("ReduceSum", emit.one("Mul", [centered, dy]), axes, keepdims=False),
                               inv_std], _out(node, 1))
    if not _out(node, 0):
        return
    count = emit.cast_like(emit.one("Div", [emit.one("Size", [x]), emit.shape_of(x, 1, 2)]), x)
    a = emit.one("Mul", [scale, inv_std])
    per_count = emit.one("Neg", [emit.one("Div", [a, count])])
    b = emit.one("Mul", [emit.one("Mul", [per_count, d_scale]), inv_std])
    c = emit.one("Mul", [per_count, d_bias])
    emit.one("Add", [_channel_affine(emit, dy, a, c, like=scale),
                     _channel_affine(emit, centered, b, _channel_zeros(emit, scale), like=scale)], node.output[0])


def _layer_norm_grad(node: onnx.NodeProto, emit: Emitter, dy: str, normalized_of: str, scale: str, inv_std: str,
                     centered: bool, outputs: List[Optional[str]]) -> None:
    """The kernel's arithmetic on [N, M] views (M: the normalized axes): with x̂ the normalized input,
    A = dY x̂, B = dY scale inv_std, C = B x̂; dX = B - mean(B) - x̂ mean(C) (the simplified norm has no mean(B)
    term), dScale = sum A over N, dBias = sum dY over N."""
    axis = int(attribute(node, "axis", -1))
    flat = emit.one("Flatten", [dy], axis=axis)
    column = emit.const(np.array([-1, 1], np.int64))
    inv = emit.one("Reshape", [emit.cast_like(inv_std, dy), column])
    row = emit.one("Reshape", [scale, emit.const(np.array([1, -1], np.int64))])
    x_hat = normalized_of
    a = emit.one("Mul", [flat, x_hat])
    b = emit.one("Mul", [emit.one("Mul", [flat, row]), inv])
    c = emit.one("Mul", [b, x_hat])
    mean_c = emit.reduce("ReduceMean", c, [1], keepdims=True)
    if outputs[0]:
        first = emit.one("Sub", [b, emit.reduce("ReduceMean", b, [1], keepdims=True)]) if centered else b
        dx = emit.one("Sub", [first, emit.one("Mul", [x_hat, mean_c])])
        emit.one("Reshape", [dx, emit.one("Shape", [dy])], outputs[0])
    if outputs[1]:
        emit.one("Reshape", [emit.reduce("ReduceSum", a, [0], keepdims=False), emit.one("Shape", [scale])], outputs[1])
    if len(outputs) > 2 and outputs[2]:
        emit.one("Reshape", [emit.reduce("ReduceSum", flat, [0], keepdims=False), emit.one("Shape", [scale])],
                 outputs[2])


def _flat_column(emit: Emitter, value: str, like: str) -> str:
    return emit.one("Reshape", [emit.cast_like(value, like), emit.const(np.array([-1, 1], np.int64))])


def _typed_as(emit: Emitter, value: str, like: str) -> str:
    """``value`` cast to ``like``'s element type, with no Cast node where it has that type already."""
    known = emit.elem_type(value)
    return value if known is not None and known == emit.elem_type(like) else emit.cast_like(value, like)


def _kept_rank(emit: Emitter, x: str, scale: str, statistics: List[str], axis: int) -> Optional[int]:
    """X's rank where the saved statistics are known to keep it, as the forward writes them
    ([d0, ..., d(axis-1), 1, ..., 1]), and scale to have the normalized axes' rank: they then broadcast over X
    as they are. None where shape inference cannot tell; the flattened form (``_layer_norm_grad``) is written
    then."""
    x_rank = emit.rank(x)
    if x_rank is None or not -x_rank <= axis < x_rank or emit.rank(scale) != x_rank - axis % x_rank:
        return None
    for value in statistics:
        dims = emit.shape(value)
        if dims is None or len(dims) != x_rank or any(d != 1 for d in dims[axis % x_rank:]):
            return None
    return x_rank


def _layer_norm_grad_kept(emit: Emitter, dy: str, x_hat: str, scale: str, inv_std: str, rank: int, axis: int,
                          centered: bool, outputs: List[Optional[str]]) -> None:
    """The kernel's dX = B - mean(B) - x̂ mean(B x̂) (B = dY scale inv_std) as (g - mean(g) - x̂ mean(g x̂))
    inv_std with g = dY scale: the same quantities, in an order that needs fewer elementwise nodes. Where the
    statistics keep X's rank, scale broadcasts over the normalized (trailing) axes as it is and the means keep
    their axes, so no Flatten, Reshape, Shape or Cast is written: LayerNormalizationGrad takes 13 nodes here
    where the flattened form takes 28 (docs/internals/runtime.md §11 has the measurement)."""
    normalized = list(range(axis % rank, rank))
    leading = list(range(axis % rank))
    if outputs[0]:
        g = emit.one("Mul", [dy, scale])
        mean_gx = emit.reduce("ReduceMean", emit.one("Mul", [g, x_hat]), normalized, keepdims=True)
        if centered:
            g = emit.one("Sub", [g, emit.reduce("ReduceMean", g, normalized, keepdims=True)])
        emit.one("Mul", [emit.one("Sub", [g, emit.one("Mul", [x_hat, mean_gx])]), inv_std], outputs[0])
    for index, summed in ((1, lambda: emit.one("Mul", [dy, x_hat])), (2, lambda: dy)):
        wanted = outputs[index] if len(outputs) > index else None
        if wanted and leading:
            emit.reduce("ReduceSum", summed(), leading, keepdims=False, output=wanted)
        elif wanted:
            emit.copy(summed(), wanted)


@lowers("LayerNormalizationGrad")
def layer_normalization_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, X, scale, mean, inv_std_var (LayerNormalization's saved statistics, float); outputs dX,
    dScale, dBias."""
    dy, x, scale, mean, inv_std = node.input[:5]
    axis = int(attribute(node, "axis", -1))
    rank = _kept_rank(emit, x, scale, [mean, inv_std], axis)
    if rank is not None:
        inv = _typed_as(emit, inv_std, dy)
        x_hat = emit.one("Mul", [emit.one("Sub", [x, _typed_as(emit, mean, dy)]), inv])
        _layer_norm_grad_kept(emit, dy, x_hat, scale, inv, rank, axis, True, [_out(node, i) for i in range(3)])
        return
    flat_x = emit.one("Flatten", [x], axis=axis)
    x_hat = emit.one("Mul", [emit.one("Sub", [flat_x, _flat_column(emit, mean, dy)]), _flat_column(emit, inv_std, dy)])
    _layer_norm_grad(node, emit, dy, x_hat, scale, inv_std, True, [_out(node, i) for i in range(3)])


@lowers("SimplifiedLayerNormalizationGrad")
def simplified_layer_normalization_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, X, scale, inv_std_var (the RMS norm's); outputs dX, dScale."""
    dy, x, scale, inv_std = node.input[:4]
    axis = int(attribute(node, "axis", -1))
    rank = _kept_rank(emit, x, scale, [inv_std], axis)
    if rank is not None:
        inv = _typed_as(emit, inv_std, dy)
        _layer_norm_grad_kept(emit, dy, emit.one("Mul", [x, inv]), scale, inv, rank, axis, False,
                              [_out(node, i) for i in range(2)])
        return
    x_hat = emit.one("Mul", [emit.one("Flatten", [x], axis=axis), _flat_column(emit, inv_std, dy)])
    _layer_norm_grad(node, emit, dy, x_hat, scale, inv_std, False, [_out(node, i) for i in range(2)])


@lowers("InvertibleLayerNormalizationGrad")
def invertible_layer_normalization_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, Y, scale, bias, inv_std_var: the normalized input recovered from the output as
    (Y - bias) / scale; outputs dX, dScale, dBias."""
    dy, y, scale, bias, inv_std = node.input[:5]
    axis = int(attribute(node, "axis", -1))
    rank = _kept_rank(emit, y, scale, [inv_std], axis)
    if rank is not None:
        x_hat = emit.one("Div", [emit.one("Sub", [y, bias]), scale])
        _layer_norm_grad_kept(emit, dy, x_hat, scale, _typed_as(emit, inv_std, dy), rank, axis, True,
                              [_out(node, i) for i in range(3)])
        return
    row = np.array([1, -1], np.int64)
    x_hat = emit.one("Div", [emit.one("Sub", [emit.one("Flatten", [y], axis=axis),
                                              emit.one("Reshape", [bias, emit.const(row)])]),
                             emit.one("Reshape", [scale, emit.const(row)])])
    _layer_norm_grad(node, emit, dy, x_hat, scale, inv_std, True, [_out(node, i) for i in range(3)])
