"""Softmax cross-entropy in training: the loss with ``ignore_index`` as an input (…Internal) and the standard
SoftmaxCrossEntropyLoss itself, and the gradient as Exp and Mul with the label's -1 scattered in (OneHot and
Sub before opset 16), in the arithmetic of ONNX Runtime's CPU kernel
(orttraining/training_ops/cpu/loss/softmax_cross_entropy_loss.cc).

Inference builds have no kernel for the standard SoftmaxCrossEntropyLoss: they run its ONNX function, about ten
kernels. The engine writes it as LogSoftmax, GatherElements at the label and a reduction (the lean form), and
the gradient without weights, which reads that LogSoftmax's output, in as few kernels (docs/internals/
runtime.md, the engine's forms)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np
import onnx
from onnx import TensorProto

from ort_cffi._backends.engine.lowering.registry import SHAPE_CHECK, Emitter, attribute, lowers


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


# Where each class column is long (many positions after the class axis), ONNX Runtime's LogSoftmax along axis 1
# transposes the classes last and runs one short row per position: on 1.31.1 4.7 ms for [16, 4, 32, 32], where the
# six operators below take 0.09 (1.19.2: 0.83 against 0.09); with few positions per class the operator is faster
# ([64, 10, 1]: 0.007 against 0.019; [16, 1000, 4]: 0.045 against 0.41). docs/internals/runtime.md §11.
SPELLED_OUT_MIN_POSITIONS = 16


def _log_softmax_classes(emit: Emitter, scores: str, output: Optional[str]) -> str:
    """LogSoftmax over axis 1 of ``scores``: the operator, or, where the positions after the class axis are known
    and at least as many as the classes (and 16), x - max - log(sum(exp(x - max))) over that axis, which is the
    kernel's own arithmetic (within an ulp of its exp and log)."""
    dims = emit.shape(scores)
    known = [d for d in dims[1:] if isinstance(d, int)] if dims is not None else []
    if dims is not None and len(dims) > 2 and len(known) == len(dims) - 1:
        classes, positions = known[0], int(np.prod(known[1:]))
        if positions >= max(SPELLED_OUT_MIN_POSITIONS, classes):
            shifted = emit.one("Sub", [scores, emit.reduce("ReduceMax", scores, [1])])
            total = emit.reduce("ReduceSum", emit.one("Exp", [shifted]), [1])
            return emit.one("Sub", [shifted, emit.one("Log", [total])], output)
    return emit.one("LogSoftmax", [scores], output, axis=1)


def _matching_labels(emit: Emitter, labels64: str, scores: str) -> str:
    """``labels64`` reshaped to the scores' dimensions without the class axis ([N, d...] of [N, C, d...]), so that
    the step fails where they differ, as the training kernel does: GatherElements and ScatterElements take an
    index smaller than their data without a word, so 3 labels for a batch of 4 rows would train on 3 of them.
    The Reshape fails where the counts differ: for [N, C] scores that is every mismatch; with more axes, labels
    of the same count in other dimensions would pass. Left out where both shapes are known and equal before run
    time; ``shape_targets`` leaves the node as it is (``SHAPE_CHECK``)."""
    dims, label_dims = emit.shape(scores), emit.shape(labels64)
    if dims is not None and label_dims is not None and len(dims) == len(label_dims) + 1 and \
            all(isinstance(d, int) for d in dims) and label_dims == dims[:1] + dims[2:]:
        return labels64
    if dims is not None and len(dims) == 2:
        target = emit.shape_of(scores, 0, 1)
    else:
        target = emit.one("Concat", [emit.shape_of(scores, 0, 1), emit.shape_of(scores, 2)], axis=0)
    reshaped = emit.one("Reshape", [labels64, target])
    emit.nodes[-1].doc_string = SHAPE_CHECK
    return reshaped


def _lean_loss(emit: Emitter, scores: str, labels: str, weights: Optional[str], ignore: Optional[int],
               reduction: str, loss: str, log_prob: Optional[str]) -> None:
    """log_prob = LogSoftmax over the classes (axis 1), the loss -log_prob at each label (GatherElements), times
    the label's weight, 0 where the label is ``ignore``, then summed or averaged as ``reduction`` says: over the
    weights' sum, or the count of labels not ignored; where that is 0, the kernel's 0. Any rank of scores."""
    log_prob = _log_softmax_classes(emit, scores, log_prob)
    labels64 = labels if emit.elem_type(labels) == TensorProto.INT64 else \
        emit.one("Cast", [labels], to=TensorProto.INT64)
    labels64 = _matching_labels(emit, labels64, scores)
    kept = None
    if ignore is not None:
        kept = emit.one("Not", [emit.one("Equal", [labels64, emit.const(np.array(ignore, np.int64))])])
        labels64 = emit.one("Where", [kept, labels64, emit.const(np.array(0, np.int64))])
    picked = emit.one("GatherElements", [log_prob, emit.unsqueeze(labels64, [1])], axis=1)
    if kept is None and weights is None and reduction != "none":  # a reduction over every axis needs no Squeeze
        emit.one("Neg", [emit.reduce("ReduceSum" if reduction == "sum" else "ReduceMean", picked, None,
                                     keepdims=False)], loss)
        return
    zero = emit.const_like(0.0, scores)
    picked = emit.squeeze(picked, [1])
    weight = None
    if weights is not None:
        weight = emit.one("Gather", [weights, labels64], axis=0)
        if kept is not None:
            weight = emit.one("Where", [kept, weight, zero])
        picked = emit.one("Mul", [picked, weight])
    elif kept is not None:
        picked = emit.one("Where", [kept, picked, zero])
    if reduction == "none":
        emit.one("Neg", [picked], loss)
    elif reduction == "sum":
        emit.one("Neg", [emit.reduce("ReduceSum", picked, None, keepdims=False)], loss)
    else:
        if weight is not None:
            counted = weight
        else:  # without weights this branch is reached only with an ignored label (the early return above)
            assert kept is not None
            counted = emit.cast_like(kept, scores)
        divisor = emit.reduce("ReduceSum", counted, None, keepdims=False)
        total = emit.reduce("ReduceSum", picked, None, keepdims=False)
        nonzero = emit.one("Not", [emit.one("Equal", [divisor, zero])])
        quotient = emit.one("Div", [total, divisor])
        emit.one("Neg", [emit.one("Where", [nonzero, quotient, total])], loss)


@lowers("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(node: onnx.NodeProto, emit: Emitter) -> None:
    """The standard operator (inputs scores, labels, weights; outputs loss, log_prob) in the lean form
    (``_lean_loss``); before opset 13, where LogSoftmax flattens to 2-D, the operator as it is."""
    if emit.opset < 13:
        emit.node(node.op_type, list(node.input), list(node.output), **{
            a.name: attribute(node, a.name) for a in node.attribute})
        return
    ignore = attribute(node, "ignore_index")
    _lean_loss(emit, node.input[0], node.input[1], _given(node, 2), None if ignore is None else int(ignore),
               attribute(node, "reduction", "mean"), node.output[0], _out(node, 1))


@lowers("SoftmaxCrossEntropyLossInternal")
def softmax_cross_entropy_loss_internal(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs scores [N, C, d...], labels, weights, ignore_index; outputs loss, log_prob. Where ignore_index is
    known before run time (or absent) this is the standard operator, the very kernel; where it is a value of
    the graph, the kernel's arithmetic written out: -log_prob at the label, times the label's weight, 0 where
    ignored, then summed (over the weights' sum, or the count not ignored, for mean)."""
    emit.require_opset(13, "SoftmaxCrossEntropyLoss with LogSoftmax along the class axis")
    scores, labels = node.input[0], node.input[1]
    weights = _given(node, 2)
    given = _given(node, 3)
    reduction = attribute(node, "reduction", "mean")
    known = emit.value(given) if given is not None else None
    if given is None or known is not None:
        ignore = attribute(node, "ignore_index") if known is None else int(known.reshape(-1)[0])
        _lean_loss(emit, scores, labels, weights, None if ignore is None else int(ignore), reduction,
                   node.output[0], _out(node, 1))
        return
    log_prob = _log_softmax_classes(emit, scores, _out(node, 1))
    labels64 = _matching_labels(emit, emit.one("Cast", [labels], to=TensorProto.INT64), scores)
    kept = emit.one("Not", [emit.one("Equal", [labels64, emit.one("Cast", [given], to=TensorProto.INT64)])])
    safe = emit.one("Where", [kept, labels64, emit.const(np.array(0, np.int64))])
    picked = emit.squeeze(emit.one("GatherElements", [log_prob, emit.unsqueeze(safe, [1])], axis=1), [1])
    zero = emit.const_like(0.0, scores)
    losses = emit.one("Neg", [picked])
    weight = None
    if weights is not None:
        weight = emit.one("Where", [kept, emit.one("Gather", [weights, safe], axis=0), zero])
        losses = emit.one("Mul", [losses, weight])
    losses = emit.one("Where", [kept, losses, zero])
    if reduction == "none":
        emit.copy(losses, node.output[0])
        return
    total = emit.reduce("ReduceSum", losses, None, keepdims=False)
    if reduction == "sum":
        emit.copy(total, node.output[0])
        return
    if weight is not None:
        divisor = emit.reduce("ReduceSum", weight, None, keepdims=False)
    else:
        divisor = emit.cast_like(emit.reduce("ReduceSum", emit.one("Cast", [kept], to=TensorProto.INT64), None,
                                             keepdims=False), scores)
    nonzero = emit.one("Not", [emit.one("Equal", [divisor, zero])])
    emit.one("Where", [nonzero, emit.one("Div", [total, divisor]), total], node.output[0])


@lowers("SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossInternalGrad")
def softmax_cross_entropy_loss_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, log_prob [N, C, d...], labels [N, d...], weights [C] (optional), ignore_index (…Internal's
    input); output d_logits = (exp(log_prob) - onehot(label)) * factor per sample, and 0 where the label is
    ignored. The factor: dY[i] (reduction none), dY (sum), dY / the count of samples not ignored (mean), each
    times the label's weight where there are weights, and with weights the mean divides by their sum."""
    dy, log_prob, labels = node.input[0], node.input[1], node.input[2]
    weights = _given(node, 3)
    reduction = attribute(node, "reduction", "mean")
    ignore = _ignore_index(node, emit, 4)
    if weights is None:
        _lean_loss_grad(emit, dy, log_prob, labels, ignore, reduction, node.output[0])
        return
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


def _onehot(emit: Emitter, labels64: str, log_prob: str) -> str:
    """OneHot of the labels along axis 1, of log_prob's type (1.31 has no double OneHot kernel: a float one is
    exact, then cast); the class count a constant where shape inference knows it."""
    dims = emit.shape(log_prob)
    classes = emit.const(np.array([dims[1]], np.int64)) if dims is not None and len(dims) > 1 and \
        isinstance(dims[1], int) else emit.shape_of(log_prob, 1, 2)
    onehot = emit.one("OneHot", [labels64, classes, emit.const(np.array([0.0, 1.0], np.float32))], axis=1)
    return onehot if emit.elem_type(log_prob) == TensorProto.FLOAT else emit.cast_like(onehot, log_prob)


# The most labels for which the gradient's -1 at each label is a constant of their shape (a per-position loss's
# labels may be many: past this the constant would weigh in the model, and Neg and Expand make it at run time)
MINUS_ONES_MAX_LABELS = 1 << 12


def _lean_loss_grad(emit: Emitter, dy: str, log_prob: str, labels: str, ignore: Optional[str], reduction: str,
                    output: str) -> None:
    """No weights: (exp(log_prob) - onehot(label)) * dY, dY over the count of labels (not ignored) for mean, dY
    per sample for none; where a label is ignored (``ignore``: an int64 scalar value), its label is taken as
    class 0 and its row times 0. The count's guard against 0: a batch with no label kept has no row to scale
    (every row is times 0, or the batch is empty), so the count is taken at least 1 (one Max, not a Where).

    From opset 16 the one-hot is not made: exp(log_prob) * factor, then ScatterElements adds -factor at each
    label (one element per row). OneHot, Sub and Mul over every class cost more than the kernel on 1.19.2,
    where this form takes 0.14 of it over [512, 2000] (docs/guides/performance.md, standard forms)."""
    labels64 = labels if emit.elem_type(labels) == TensorProto.INT64 else \
        emit.one("Cast", [labels], to=TensorProto.INT64)
    kept = None
    if ignore is not None:
        kept = emit.one("Not", [emit.one("Equal", [labels64, ignore])])
        labels64 = emit.one("Where", [kept, labels64, emit.const(np.array(0, np.int64))])
    known = _label_dims(emit, log_prob)
    factor = dy  # per sample [N, d...] for none, else a scalar
    if reduction == "mean" and kept is None:
        count = emit.const_like(float(np.prod(known)), log_prob) if known is not None else \
            emit.cast_like(emit.one("Size", [labels64]), log_prob)
        factor = emit.one("Div", [dy, count])
    if kept is not None:
        kept_values = emit.cast_like(kept, log_prob)
        if reduction == "mean":
            count = emit.reduce("ReduceSum", kept_values, None, keepdims=False)
            factor = emit.one("Div", [dy, emit.one("Max", [count, emit.const_like(1.0, log_prob)])])
        factor = emit.one("Mul", [kept_values, factor])
    per_sample = kept is not None or reduction == "none"
    spread = emit.unsqueeze(factor, [1]) if per_sample else factor
    if emit.opset < 16:
        difference = emit.one("Sub", [emit.one("Exp", [log_prob]), _onehot(emit, labels64, log_prob)])
        emit.one("Mul", [difference, spread], output)
        return
    index = emit.unsqueeze(labels64, [1])
    if per_sample:
        taken = emit.one("Neg", [spread])
    elif known is not None and int(np.prod(known)) <= MINUS_ONES_MAX_LABELS:
        # -factor at each label: one Mul by a constant of the index's shape (Neg and Expand are two kernels)
        minus_ones = np.full([known[0], 1, *known[1:]], -1.0, _dtype_of(emit, log_prob))
        taken = emit.one("Mul", [emit.const(minus_ones), spread])
    else:
        taken = emit.one("Expand", [emit.one("Neg", [spread]), emit.one("Shape", [index])])
    emit.one("ScatterElements", [emit.one("Mul", [emit.one("Exp", [log_prob]), spread]), index, taken], output,
             axis=1, reduction="add")


def _label_dims(emit: Emitter, log_prob: str) -> Optional[List[int]]:
    """The labels' dimensions where every one is known before run time: log_prob's less the class axis (1).
    They are read from log_prob, not from the labels' declared shape: a loss block may declare the labels as
    the scores less their last axis and fix the input's shape only after the graph is built (ort_cffi's
    builder does so for [N, C, d...] scores), and with static sizes a constant of that shape made the scatter
    fail."""
    dims = emit.shape(log_prob)
    if dims is None or len(dims) < 2:
        return None
    sizes = [d for d in dims if isinstance(d, int)]
    return sizes[:1] + sizes[2:] if len(sizes) == len(dims) else None


def _dtype_of(emit: Emitter, like: str) -> np.dtype:
    """The numpy element type of ``like`` (float32 where it is not known)."""
    found = emit.dtype(like)
    return found if found is not None else np.dtype(np.float32)


def _rows(emit: Emitter, log_prob: str) -> str:
    """The count of rows (every axis but the last, the classes') as a float scalar."""
    count = emit.one("Div", [emit.one("Size", [log_prob]), emit.squeeze(emit.shape_of(log_prob, -1), [0])])
    return emit.cast_like(count, log_prob)


@lowers("SoftmaxCrossEntropy")
def softmax_cross_entropy(node: onnx.NodeProto, emit: Emitter) -> None:
    """The older loss over probability labels (inputs logits, labels of the logits' shape; classes on the last
    axis): log_prob = LogSoftmax, loss = -sum(labels * log_prob) / rows (mean), its negation's sum (sum); with
    reduction none the kernel returns sum(labels * log_prob) as it is."""
    logits, labels = node.input[0], node.input[1]
    reduction = attribute(node, "reduction", "mean")
    log_prob = emit.one("LogSoftmax", [logits], _out(node, 1), axis=-1)
    total = emit.reduce("ReduceSum", emit.one("Mul", [labels, log_prob]), None, keepdims=False)
    if reduction == "mean":
        emit.one("Div", [total, emit.one("Neg", [_rows(emit, log_prob)])], node.output[0])
    elif reduction == "sum":
        emit.one("Neg", [total], node.output[0])
    else:
        emit.copy(total, node.output[0])


@lowers("SoftmaxCrossEntropyGrad")
def softmax_cross_entropy_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY (a scalar), log_prob, labels: (exp(log_prob) - labels) * dY, over the rows for mean."""
    dy, log_prob, labels = node.input[0], node.input[1], node.input[2]
    scaled = dy
    if attribute(node, "reduction", "mean") == "mean":
        scaled = emit.one("Div", [dy, _rows(emit, log_prob)])
    emit.one("Mul", [emit.one("Sub", [emit.one("Exp", [log_prob]), labels]), scaled], node.output[0])


@lowers("SparseSoftmaxCrossEntropy")
def sparse_softmax_cross_entropy(node: onnx.NodeProto, emit: Emitter) -> None:
    """The older loss over class labels (inputs logits [..., C], labels [...], weights [...] per sample):
    loss = sum(w * -log_prob[label]), over the weights' sum (mean; the count of samples without weights);
    reduction none gives the sum, as the kernel does."""
    logits, labels = node.input[0], node.input[1]
    weights = _given(node, 2)
    log_prob = emit.one("LogSoftmax", [logits], _out(node, 1), axis=-1)
    rank = emit.require_rank(labels, "SparseSoftmaxCrossEntropy's labels")
    index = emit.unsqueeze(emit.one("Cast", [labels], to=TensorProto.INT64), [rank])
    picked = emit.squeeze(emit.one("GatherElements", [log_prob, index], axis=rank), [rank])
    losses = emit.one("Neg", [picked])
    if weights is not None:
        losses = emit.one("Mul", [losses, weights])
    total = emit.reduce("ReduceSum", losses, None, keepdims=False)
    if attribute(node, "reduction", "mean") != "mean":
        emit.copy(total, node.output[0])
    elif weights is not None:
        emit.one("Div", [total, emit.reduce("ReduceSum", weights, None, keepdims=False)], node.output[0])
    else:
        emit.one("Div", [total, emit.cast_like(emit.one("Size", [labels]), total)], node.output[0])


@lowers("SparseSoftmaxCrossEntropyGrad")
def sparse_softmax_cross_entropy_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, log_prob [..., C], labels [...], weights [...]: (exp(log_prob) - onehot(label)) * w * dY,
    dY over the weights' sum (or the count of samples) for mean."""
    dy, log_prob, labels = node.input[0], node.input[1], node.input[2]
    weights = _given(node, 3)
    classes = emit.shape_of(log_prob, -1)
    onehot = emit.cast_like(emit.one("OneHot", [emit.one("Cast", [labels], to=TensorProto.INT64), classes,
                                                emit.const(np.array([0.0, 1.0], np.float32))], axis=-1), log_prob)
    scaled = dy
    if attribute(node, "reduction", "mean") == "mean":
        total = emit.reduce("ReduceSum", weights, None, keepdims=False) if weights is not None else \
            emit.cast_like(emit.one("Size", [labels]), dy)
        scaled = emit.one("Div", [dy, total])
    factor = emit.one("Mul", [weights, scaled]) if weights is not None else scaled
    if weights is not None:
        factor = emit.unsqueeze(factor, [-1])
    emit.one("Mul", [emit.one("Sub", [emit.one("Exp", [log_prob]), onehot]), factor], node.output[0])


def _out(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.output[index] if len(node.output) > index and node.output[index] else None
