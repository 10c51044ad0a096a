"""Loss operators: the gradient kernels ONNX Runtime has for them."""
from __future__ import annotations

from typing import List, Optional

from ort_cffi.artifacts.builder.context import GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


@gradient("SoftmaxCrossEntropyLoss", inputs=(0,))
def softmax_cross_entropy(g: GradientContext, node: NodeView) -> Grads:
    """Needs the log-probabilities output (the loss block declares it)."""
    if len(node.outputs) < 2 or not node.outputs[1]:
        from ort_cffi.artifacts.builder.context import BuilderError

        raise BuilderError(f"{node.describe()}: its gradient reads the log-probabilities, its second output, "
                           "which the node does not declare")
    inputs = [node.dy(), node.outputs[1], node.inputs[1]] + ([node.inputs[2]] if node.has_input(2) else [])
    attributes = {"reduction": node.attr("reduction", "mean")}
    if node.attr("ignore_index") is not None:
        attributes["ignore_index"] = node.attr("ignore_index")
    return [g.ms("SoftmaxCrossEntropyLossGrad", *inputs, **attributes)[0]]
