"""The optimizer blocks, as ONNX Runtime's onnxblock writes the optimizer model: ``AdamW`` and ``SGD`` (forward
blocks on ``onnxblock.empty_base()``, called with the training block's ``parameters()``), and ``ClipGradNorm``
for their ``clip_grad``. The nodes are ONNX Runtime's com.microsoft optimizer kernels."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import onnx
from onnx import helper

from ort_cffi.onnxblock import _graph_utils, blocks
from ort_cffi.onnxblock.onnxblock import ForwardBlock

Parameters = Tuple[Sequence[onnx.TensorProto], Sequence[onnx.TensorProto]]


class ClipGradNorm(blocks.Block):
    """Clips the gradients (a sequence) to L2 norm ``max_norm``: com.microsoft::InplaceClipGradNorm."""

    def __init__(self, max_norm: float) -> None:
        super().__init__()
        self._max_norm = max_norm

    def build(self, gradients_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = blocks._model(self)
        output = _graph_utils.generate_graph_name("clip_grad_norm_output")
        model.graph.node.append(helper.make_node(
            "InplaceClipGradNorm", [gradients_name], [output],
            name=_graph_utils.generate_graph_name("InplaceClipGradNorm"), domain="com.microsoft",
            max_norm=self._max_norm))
        model.graph.value_info.append(helper.make_tensor_sequence_value_info(output, onnx.TensorProto.FLOAT, None))
        return output


class _OptimizerBase(blocks.Block):
    def _build_optimizer_node(self, input_names: List[str], output_name: str, node_name: str,
                              node_attributes: Dict[str, Any]) -> str:
        blocks._model(self).graph.node.append(helper.make_node(
            node_name, input_names, [output_name], name=_graph_utils.generate_graph_name(node_name),
            domain="com.microsoft", **node_attributes))
        return output_name


class SGDOptimizer(_OptimizerBase):
    """com.microsoft::SGDOptimizerV2(learning rate, gradients, parameters)."""

    def build(self, learning_rate_name: str, gradients_name: str, params_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        return self._build_optimizer_node([learning_rate_name, gradients_name, params_name],
                                          _graph_utils.generate_graph_name("update_completed"), "SGDOptimizerV2", {})


class AdamWOptimizer(_OptimizerBase):
    """com.microsoft::AdamWOptimizer with the given betas, eps, weight decay and bias correction (the
    transformers form of AdamW, adam_mode 1)."""

    def __init__(self, bias_correction: Optional[bool] = True, betas: Tuple[float, float] = (0.9, 0.999),
                 eps: Optional[float] = 1e-6, weight_decay: Optional[float] = 0.0) -> None:
        super().__init__()
        self._bias_correction = bias_correction
        self._betas = betas
        self._eps = eps
        self._weight_decay = weight_decay

    def build(self, learning_rate_name: str, step_name: str, parameter_sequence_name: str,
              gradient_sequence_name: str, first_order_moment_sequence_name: str,
              second_order_moment_sequence_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        attributes = {"alpha": self._betas[0], "beta": self._betas[1], "epsilon": self._eps,
                      "weight_decay": self._weight_decay, "correct_bias": 1 if self._bias_correction else 0,
                      "adam_mode": 1}
        return self._build_optimizer_node(
            [learning_rate_name, step_name, parameter_sequence_name, gradient_sequence_name,
             first_order_moment_sequence_name, second_order_moment_sequence_name],
            _graph_utils.generate_graph_name("adamw.updated_flag"), "AdamWOptimizer", attributes)


class _Optimizer(ForwardBlock):
    """The optimizer model's inputs (learning_rate, step, and the params, gradients and first_order_moments
    sequences) and the update; subclasses add their own inputs and node."""

    def __init__(self, clip_grad: Optional[blocks.Block] = None) -> None:
        super().__init__()
        self._clip_grad = clip_grad

    def build(self, parameters: Parameters) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = blocks._model(self)
        trainable, _ = parameters
        if not trainable:
            raise RuntimeError("the optimizer model needs at least one trainable parameter")
        model.graph.input.extend([helper.make_tensor_value_info("learning_rate", onnx.TensorProto.FLOAT, [1]),
                                  helper.make_tensor_value_info("step", onnx.TensorProto.INT64, [1])])
        for name in ("params", "gradients", "first_order_moments"):
            model.graph.input.append(helper.make_tensor_sequence_value_info(name, trainable[0].data_type, None))
        gradients = "gradients"
        if self._clip_grad is not None:
            gradients = self._clip_grad(gradients)
        return self._optimizer_specific_logic("learning_rate", "params", gradients, trainable)

    def _optimizer_specific_logic(self, learning_rate_name: str, params_name: str, gradients_name: str,
                                  trainable_parameters: Sequence[onnx.TensorProto]) -> str:
        raise NotImplementedError("Subclasses must implement _optimizer_specific_logic method.")


class AdamW(_Optimizer):
    """The AdamW optimizer model (ONNX Runtime's default optimizer)."""

    def __init__(self, bias_correction: bool = True, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, clip_grad: Optional[blocks.Block] = None) -> None:
        super().__init__(clip_grad)
        self._adamw = AdamWOptimizer(bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay)

    def _optimizer_specific_logic(self, learning_rate_name: str, params_name: str, gradients_name: str,
                                  trainable_parameters: Sequence[onnx.TensorProto]) -> str:
        model = blocks._model(self)
        model.graph.input.append(helper.make_tensor_sequence_value_info(
            "second_order_moments", trainable_parameters[0].data_type, None))
        flag = self._adamw(learning_rate_name, "step", params_name, gradients_name, "first_order_moments",
                           "second_order_moments")
        model.graph.output.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, [1]))
        return flag


class SGD(_Optimizer):
    """The SGD optimizer model."""

    def __init__(self, clip_grad: Optional[blocks.Block] = None) -> None:
        super().__init__(clip_grad)
        self._sgd = SGDOptimizer()

    def _optimizer_specific_logic(self, learning_rate_name: str, params_name: str, gradients_name: str,
                                  trainable_parameters: Sequence[onnx.TensorProto]) -> str:
        model = blocks._model(self)
        flag = self._sgd(learning_rate_name, params_name, gradients_name)
        model.graph.output.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, [1]))
        return flag
