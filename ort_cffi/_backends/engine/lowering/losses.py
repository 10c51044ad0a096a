"""Softmax cross-entropy in training: the loss with ``ignore_index`` as an input (…Internal) is the standard
SoftmaxCrossEntropyLoss, and its gradient is Exp, OneHot, Sub and Mul, in the arithmetic of ONNX Runtime's CPU
kernel (orttraining/training_ops/cpu/loss/softmax_cross_entropy_loss.cc)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto

from ort_cffi._backends.engine.lowering.registry import Emitter, LoweringError, attribute, lowers


def _given(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _ignore_index(node: onnx.NodeProto, emit: Emitter, input_index: int) -> Optional[str]:
    """The ignored label as an int64 scalar value: the input where the node has it (…Internal), else the
    attribute; None where neither is given."""
    given = _given(node, input_index)
    if given is not None:
        return emit.one("Cast", [given], to=TensorProto.INT64)
    value = attribute(node, "ignore_index")
    return None if value is None else emit.const(np.array(int(value), np.int64))


@lowers("SoftmaxCrossEntropyLossInternal")
def softmax_cross_entropy_loss_internal(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs scores, labels, weights, ignore_index; outputs loss, log_prob: the standard operator, whose
    ignore_index is an attribute: the input must be known before run time."""
    emit.require_opset(12, "the standard SoftmaxCrossEntropyLoss")
    given = _given(node, 3)
    ignore = attribute(node, "ignore_index")
    if given is not None:
        known = emit.value(given)
        if known is None:
            raise LoweringError(f"{emit.label}: SoftmaxCrossEntropyLossInternal's ignore_index is known only at run "
                                f"time; the standard operator takes it as an attribute")
        ignore = int(known.reshape(-1)[0])
    inputs = [node.input[0], node.input[1]] + ([node.input[2]] if _given(node, 2) else [])
    outputs = [node.output[0]] + ([node.output[1]] if len(node.output) > 1 and node.output[1] else [])
    emit.node("SoftmaxCrossEntropyLoss", inputs, outputs, reduction=attribute(node, "reduction", "mean"),
              ignore_index=ignore)


@lowers("SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad")
def softmax_cross_entropy_loss_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, log_prob [N, C, d...], labels [N, d...], weights [C] (optional), ignore_index (…Internal's
    input); output d_logits = (exp(log_prob) - onehot(label)) * factor per sample, and 0 where the label is
    ignored. The factor: dY[i] (reduction none), dY (sum), dY / the count of samples not ignored (mean), each
    times the label's weight where there are weights, and with weights the mean divides by their sum."""
    dy, log_prob, labels = node.input[0], node.input[1], node.input[2]
    weights = _given(node, 3)
    ignore = _ignore_index(node, emit, 4)
    reduction = attribute(node, "reduction", "mean")
    labels64 = emit.one("Cast", [labels], to=TensorProto.INT64)
    if ignore is not None:
        kept = emit.one("Not", [emit.one("Equal", [labels64, ignore])])
        safe = emit.one("Where", [kept, labels64, emit.const(np.array(0, np.int64))])
    else:
        kept, safe = None, labels64
    classes = emit.shape_of(log_prob, 1, 2)
    # 1.31's OneHot has no double kernel; a float one is exact and cast
    onehot = emit.cast_like(emit.one("OneHot", [safe, classes, emit.const(np.array([0.0, 1.0], np.float32))],
                                     axis=1), log_prob)
    difference = emit.one("Sub", [emit.one("Exp", [log_prob]), onehot])
    sample_weight = emit.one("Gather", [weights, safe], axis=0) if weights is not None else None
    zero = emit.const_like(0.0, log_prob)
    if kept is not None and sample_weight is not None:
        sample_weight = emit.one("Where", [kept, sample_weight, zero])
    if reduction == "none":
        factor = emit.one("Mul", [sample_weight, dy]) if sample_weight is not None else dy
    else:
        scaled = dy
        if reduction == "mean":
            if sample_weight is not None:
                total = emit.reduce("ReduceSum", sample_weight, None, keepdims=False)
            elif kept is not None:
                total = emit.cast_like(emit.reduce("ReduceSum", emit.one("Cast", [kept], to=TensorProto.INT64), None,
                                                   keepdims=False), dy)
            else:
                total = emit.cast_like(emit.one("Size", [labels64]), dy)
            nonzero = emit.one("Not", [emit.one("Equal", [total, zero])])
            scaled = emit.one("Where", [nonzero, emit.one("Div", [dy, total]), dy])
        factor = emit.one("Mul", [sample_weight, scaled]) if sample_weight is not None else \
            emit.one("Expand", [scaled, emit.one("Shape", [labels64])])
    grad = emit.one("Mul", [difference, emit.unsqueeze(factor, [1])])
    if kept is None:
        emit.copy(grad, node.output[0])
    else:
        emit.one("Where", [emit.unsqueeze(kept, [1]), grad, zero], node.output[0])
