"""Loss operators: SoftmaxCrossEntropyLoss through ONNX Runtime's gradient kernel, as its builder
emits it; NegativeLogLikelihoodLoss (which its builder has no rule for) in standard operators."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


def _declared_output(g: GradientContext, node: NodeView, index: int, hint: str) -> str:
    """The name of the forward node's optional output ``index``, declared under a fresh name in the training
    graph (the node itself, ``node.proto``, is the graph's) where the model leaves it out; typed like the
    node's first input, as the log-probabilities are."""
    if index < len(node.outputs) and node.outputs[index]:
        return node.outputs[index]
    name = g.fresh(f"{node.name or node.op_type}/{hint}")
    outputs = node.proto.output
    while len(outputs) < index:
        outputs.append("")
    if len(outputs) == index:
        outputs.append(name)
    else:
        outputs[index] = name
    node.outputs = list(outputs)
    g.same_type(name, node.inputs[0])
    return name


@gradient("SoftmaxCrossEntropyLoss", inputs=(0,))
def softmax_cross_entropy(g: GradientContext, node: NodeView) -> Grads:
    """Whichever of its outputs the gradient flows into: the loss, the log-probabilities, or both (a model
    may declare either alone, or read the log-probabilities further on); the two contributions are added.

    The loss's through ONNX Runtime's kernel, which reads the log-probabilities, the node's optional second
    output. The loss block declares it; a model's own loss often does not (a transformers model given labels
    declares the loss alone): the training graph's node then declares it under a fresh name, as ONNX
    Runtime's generator does. The eval model is copied before the backward pass and keeps the node as
    written. Weights, ignore_index and every reduction are the kernel's own attributes and inputs, passed on.

    The log-probabilities' (log_prob = x - logsumexp(x) over the class axis, 1): dX = dL - softmax(x) *
    sum(dL) over that axis, in standard operators (ONNX Runtime's builder has no rule for this path)."""
    parts = []
    if node.grad(0) is not None:
        log_prob = _declared_output(g, node, 1, "log_prob")
        inputs = [node.dy(0), log_prob, node.inputs[1]] + ([node.inputs[2]] if node.has_input(2) else [])
        attributes = {"reduction": node.attr("reduction", "mean")}
        if node.attr("ignore_index") is not None:
            attributes["ignore_index"] = node.attr("ignore_index")
        parts.append(g.ms("SoftmaxCrossEntropyLossGrad", *inputs, **attributes)[0])
    if node.grad(1) is not None:
        d_log_prob = node.dy(1)
        probabilities = g.op("Exp", node.outputs[1])
        total = g.reduce_sum(d_log_prob, [1], keepdims=1)
        parts.append(g.op("Sub", d_log_prob, g.op("Mul", probabilities, total)))
    if not parts:
        return [None]
    return [g.same_type(parts[0] if len(parts) == 1 else g.op("Add", *parts), node.inputs[0])]


@gradient("NegativeLogLikelihoodLoss", inputs=(0,))
def negative_log_likelihood(g: GradientContext, node: NodeView) -> Grads:
    """loss[n, d...] = -w[t] x[n, t, d...] with t = target[n, d...]; so dX is -w[t] times the loss
    element's gradient at class t, 0 at the other classes. Ignored targets weigh 0; the mean divides by
    the sum of the weights of the targets not ignored (ONNX's definition)."""
    x, target = node.inputs[:2]
    dy = node.dy()
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise BuilderError(f"{node.describe()}: reduction {reduction!r} is not defined")
    ignore_index = node.attr("ignore_index")
    index = target
    weight: Optional[str] = None  # the weight of each loss element, None where all weigh 1
    if ignore_index is not None:
        kept = g.op("Not", g.op("Equal", target, g.const(np.array(ignore_index), target)))
        index = g.op("Where", kept, target, g.const(np.array(0), target))
        weight = g.op("Cast", kept, to=g.elem_type(x))
    if node.has_input(2):
        class_weight = g.op("Gather", node.inputs[2], index, axis=0)
        weight = class_weight if weight is None else g.op("Mul", class_weight, weight)
    if reduction == "mean":
        if weight is None:
            count = g.op("Cast", g.op("Size", target), to=g.elem_type(x))
            dy = g.op("Div", dy, count)
        else:
            dy = g.op("Div", dy, g.reduce_sum(weight, keepdims=0))
    share = dy if weight is None else g.op("Mul", dy, weight)
    if reduction != "none" and weight is None:
        share = g.op("Expand", share, g.shape(target))
    depth = g.op("Slice", g.shape(x), g.ints([1]), g.ints([2]))
    minus_one_hot = g.op("OneHot", index, depth, g.const(np.array([0.0, -1.0]), x), axis=1)
    return [g.same_type(g.op("Mul", minus_one_hot, g.unsqueeze(share, [1])), x)]
