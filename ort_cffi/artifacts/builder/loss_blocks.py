"""The loss blocks added on top of a model, node for node as ONNX Runtime's ``onnxblock`` adds them
(the same operators, attributes and names), so that the training and eval models compute what its own
artifacts compute, and name the loss as they do (``onnx::loss::2`` for cross-entropy).

Names count up from 1 in each generation, as ``onnxblock``'s ``generate_graph_name`` does in a fresh
process: ``onnx::<token>::<n>``.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Sequence

import onnx
from onnx import TensorProto, helper

LOSSES = ("CrossEntropyLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss")


class Namer:
    """``onnx::<token>::<n>`` with n counting from 1, as onnxblock names what it adds."""

    def __init__(self) -> None:
        self.drawn = 0

    def __call__(self, token: str) -> str:
        self.drawn += 1
        return f"onnx::{token}::{self.drawn}"


def _value(model: onnx.ModelProto, name: str) -> Optional[onnx.ValueInfoProto]:
    for value in list(model.graph.input) + list(model.graph.output):
        if value.name == name:
            return value
    return None


def _exists(model: onnx.ModelProto, name: str) -> bool:
    return any(name in node.input or name in node.output for node in model.graph.node)


def _input_like(model: onnx.ModelProto, like: str, name: str, elem_type: Optional[int] = None,
                drop_last: bool = False) -> str:
    """Add graph input ``name`` typed like the graph input or output ``like``."""
    source = _value(model, like)
    if source is None:
        raise LookupError(f"the loss reads {like!r}, which is no input or output of the model")
    added = copy.deepcopy(source)
    added.name = name
    if elem_type is not None:
        added.type.tensor_type.elem_type = elem_type
    if drop_last and added.type.tensor_type.HasField("shape") and added.type.tensor_type.shape.dim:
        del added.type.tensor_type.shape.dim[-1]
    model.graph.input.append(added)
    return name


def _node(model: onnx.ModelProto, name: Namer, op: str, inputs: Sequence[str], **attributes: Any) -> str:
    output = name(f"{op.lower()}_output")
    model.graph.node.append(helper.make_node(op, list(inputs), [output], name=name(op), **attributes))
    return output


def _reduce_mean(model: onnx.ModelProto, name: Namer, value: str) -> str:
    return _node(model, name, "ReduceMean", [value], keepdims=False)


def cross_entropy(model: onnx.ModelProto, name: Namer, scores: str, labels: str = "labels") -> str:
    name("celoss.weight")  # onnxblock draws this name whether or not a weight is given
    if not _exists(model, labels):
        _input_like(model, scores, labels, TensorProto.INT64, drop_last=True)
    loss, log_prob = name("loss"), name("log_prob")
    model.graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [scores, labels], [loss, log_prob],
                                             reduction="mean", name=name("SoftmaxCrossEntropyLoss")))
    return loss


def mse(model: onnx.ModelProto, name: Namer, output: str, target: str = "target") -> str:
    if not _exists(model, target):
        _input_like(model, output, target)
    difference = _node(model, name, "Sub", [output, target])
    exponent = name("pow_exponent")
    model.graph.initializer.append(helper.make_tensor(exponent, TensorProto.FLOAT, [1], [2.0]))
    squared = name("pow_output")
    model.graph.node.append(helper.make_node("Pow", [difference, exponent], [squared], name=name("Pow")))
    return _reduce_mean(model, name, squared)


def l1(model: onnx.ModelProto, name: Namer, output: str, target: str = "target") -> str:
    if not _exists(model, target):
        _input_like(model, output, target)
    return _reduce_mean(model, name, _node(model, name, "Abs", [_node(model, name, "Sub", [output, target])]))


def bce_with_logits(model: onnx.ModelProto, name: Namer, output: str, target: str = "target") -> str:
    name("bceloss.pos_weight")
    name("bceloss.weight")
    ones = []
    for _ in range(2):
        one = name("bceloss.sub_ones")
        model.graph.initializer.append(helper.make_tensor(one, TensorProto.FLOAT, [1], [1.0]))
        ones.append(one)
    if not _exists(model, target):
        _input_like(model, output, target)
    sigmoid = _node(model, name, "Sigmoid", [output])
    first = _node(model, name, "Mul", [_node(model, name, "Log", [sigmoid]), target])
    second = _node(model, name, "Mul", [_node(model, name, "Log", [_node(model, name, "Sub", [ones[0], sigmoid])]),
                                         _node(model, name, "Sub", [ones[1], target])])
    return _reduce_mean(model, name, _node(model, name, "Neg", [_node(model, name, "Add", [first, second])]))


BLOCKS: Dict[str, Callable[..., str]] = {"CrossEntropyLoss": cross_entropy, "MSELoss": mse, "BCEWithLogitsLoss": bce_with_logits,
                "L1Loss": l1}


def add_loss(model: onnx.ModelProto, loss: Optional[str], inputs: List[str], name: Namer) -> List[str]:
    """Add the loss ``loss`` (None: the model's first output is the loss) reading ``inputs`` (the output it
    reads, then optionally the name of its target input); returns the outputs of the block."""
    if loss is None:
        return list(inputs)
    block: Callable[..., str] = BLOCKS[loss]
    return [block(model, name, *inputs)]
