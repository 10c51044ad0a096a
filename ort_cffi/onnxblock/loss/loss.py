"""The loss blocks, node for node as ONNX Runtime's onnxblock adds them: MSELoss, CrossEntropyLoss,
BCEWithLogitsLoss and L1Loss. Each reads the model's output and a target (or labels) input, which it adds to
the graph, typed after the output, unless a value of that name exists already."""
from __future__ import annotations

import copy
from typing import Any, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ort_cffi.onnxblock import _graph_utils, blocks

_REDUCTIONS = ("mean", "sum", "none")


def _reduction(reduction: str) -> blocks.Block:
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"Reduction {reduction} not supported.")
    if reduction == "mean":
        return blocks.ReduceMean(keepdims=False)
    if reduction == "sum":
        return blocks.ReduceSum(keepdims=False)
    return blocks.PassThrough()


class MSELoss(blocks.Block):
    """mean (or sum, or none) of (output - target)²."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self._reduce = _reduction(reduction)
        self._sub = blocks.Sub()
        self._square = blocks.Pow(2.0)

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        if not _graph_utils.node_arg_exists(blocks._model(self), target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        return self._reduce(self._square(self._sub(loss_input_name, target_name)))


class CrossEntropyLoss(blocks.Block):
    """SoftmaxCrossEntropyLoss of the scores against int64 labels (the scores' shape less the last axis),
    with optional class weights (a numpy array) and ignore_index."""

    def __init__(self, weight: Optional[np.ndarray] = None, reduction: str = "mean",
                 ignore_index: Optional[int] = None) -> None:
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise RuntimeError(f"Reduction {reduction} not supported.")
        self._weight = weight
        self._reduction = reduction
        self._ignore_index = ignore_index

    def build(self, scores_input_name: str, labels_name: str = "labels") -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = blocks._model(self)
        weight_name = _graph_utils.generate_graph_name("celoss.weight")
        if self._weight is not None:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(self._weight), weight_name))
        if not _graph_utils.node_arg_exists(model, labels_name):
            labels = copy.deepcopy(_graph_utils.get_output_from_output_name(model, scores_input_name))
            labels.name = labels_name
            labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
            if labels.type.tensor_type.shape.dim:  # the classes are the last axis: labels are one per row
                del labels.type.tensor_type.shape.dim[-1]
            model.graph.input.append(labels)
        inputs = [scores_input_name, labels_name] + ([weight_name] if self._weight is not None else [])
        loss = _graph_utils.generate_graph_name("loss")
        log_prob = _graph_utils.generate_graph_name("log_prob")
        attributes: Any = {"reduction": self._reduction}
        if self._ignore_index is not None:
            attributes["ignore_index"] = self._ignore_index
        model.graph.node.append(helper.make_node(
            "SoftmaxCrossEntropyLoss", inputs, [loss, log_prob],
            name=_graph_utils.generate_graph_name("SoftmaxCrossEntropyLoss"), **attributes))
        return loss


class BCEWithLogitsLoss(blocks.Block):
    """Binary cross-entropy of sigmoid(output) against the target, with optional weights and pos_weight
    (numpy arrays)."""

    def __init__(self, weight: Optional[np.ndarray] = None, reduction: str = "mean",
                 pos_weight: Optional[np.ndarray] = None) -> None:
        super().__init__()
        self._reduce = _reduction(reduction)
        self._weight = weight
        self._pos_weight = pos_weight
        self._sigmoid = blocks.Sigmoid()
        self._log = blocks.Log()
        self._sub = blocks.Sub()
        self._add = blocks.Add()
        self._mul = blocks.Mul()
        self._neg = blocks.Neg()

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = blocks._model(self)
        pos_weight_name = _graph_utils.generate_graph_name("bceloss.pos_weight")
        if self._pos_weight is not None:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(self._pos_weight), pos_weight_name))
        weight_name = _graph_utils.generate_graph_name("bceloss.weight")
        if self._weight is not None:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(self._weight), weight_name))
        ones = []
        for _ in range(2):
            one = _graph_utils.generate_graph_name("bceloss.sub_ones")
            model.graph.initializer.append(helper.make_tensor(one, onnx.TensorProto.FLOAT, [1], [1.0]))
            ones.append(one)
        if not _graph_utils.node_arg_exists(model, target_name):
            target = copy.deepcopy(_graph_utils.get_output_from_output_name(model, loss_input_name))
            target.name = target_name
            model.graph.input.append(target)
        sigmoid = self._sigmoid(loss_input_name)
        positive = self._mul(self._log(sigmoid), target_name)
        if self._pos_weight is not None:
            positive = self._mul(positive, pos_weight_name)
        negative = self._mul(self._log(self._sub(ones[0], sigmoid)), self._sub(ones[1], target_name))
        loss = self._neg(self._add(positive, negative))
        if self._weight is not None:
            loss = self._mul(weight_name, loss)
        return self._reduce(loss)


class L1Loss(blocks.Block):
    """mean (or sum, or none) of |output - target|."""

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self._reduce = _reduction(reduction)
        self._abs = blocks.Abs()
        self._sub = blocks.Sub()

    def build(self, loss_input_name: str, target_name: Optional[str] = "target") -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        target = target_name or "target"
        if not _graph_utils.node_arg_exists(blocks._model(self), target):
            target = blocks.InputLike(loss_input_name)(target)
        return self._reduce(self._abs(self._sub(loss_input_name, target)))
