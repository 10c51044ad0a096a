"""The optimizer models, AdamW and SGD, as ONNX Runtime 1.19's generator writes them.

An optimizer model is one ``com.microsoft`` node over the training session's tensor sequences. Its inputs are
fixed by the runtime, which feeds them by name ("Invalid graph inputs" otherwise): ``learning_rate``
(float[1]), ``step`` (int64[1]), then ``params``, ``gradients``, ``first_order_moments`` and, for AdamW,
``second_order_moments``, each a sequence of float tensors (the generator writes the first trainable
parameter's element type there: float for every model ort_cffi trains). Its one output is a bool[1]
"updated" flag; the runtime advances ``step`` when it is true. The model does not depend on the parameters:
the runtime feeds every trainable parameter of the checkpoint through the sequences.

ONNX Runtime's generator names the node and its output with a counter it shares with the loss it built
before (``onnx::AdamWOptimizer::6`` and ``onnx::adamw.updated_flag::5`` after its default cross-entropy loss).
``name_counter`` gives that number, so that the model can be byte for byte the generator's;
``GENERATOR_NAME_COUNTERS`` holds the values its losses lead to.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple, Union

import onnx
from onnx import TensorProto, helper

IR_VERSION = 10  # the newest ONNX Runtime 1.19 loads (a newer onnx would stamp its own: 11 and up are refused)
MAX_OPSET = 21  # the newest default-domain opset ONNX Runtime 1.19 knows
DEFAULT_OPSET = 17
PathLike = Union[str, "os.PathLike[str]"]

# The counter ONNX Runtime's generator has reached when it names the optimizer's output, by the loss it built
# first (ort_cffi's loss names; None: the model's output is the loss), measured with onnxruntime-training 1.19.2.
GENERATOR_NAME_COUNTERS: Dict[Optional[str], int] = {
    "cross-entropy": 5, "mse": 8, "bce-with-logits": 25, "l1": 7, None: 1,
}

# The runtime's kernels and ONNX Runtime's names for the node and its output, by optimizer.
_KINDS = {
    "adamw": ("AdamWOptimizer", "adamw.updated_flag", True),
    "sgd": ("SGDOptimizerV2", "update_completed", False),
}


class OptimizerModelError(ValueError):
    """An optimizer or setting the runtime's optimizer kernels do not take."""


def optimizer_model(kind: str, *, opset: int = DEFAULT_OPSET,
                    name_counter: int = GENERATOR_NAME_COUNTERS["cross-entropy"],
                    betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
                    bias_correction: bool = True) -> onnx.ModelProto:
    """The optimizer model of ``kind`` ("AdamW" or "SGD", any case), at IR version 10 and default-domain
    ``opset`` (the training model's; ONNX Runtime's generator takes the inference model's).

    AdamW's settings are those of ONNX Runtime's ``onnxblock.optim.AdamW`` and default to its values, which its
    ``generate_artifacts`` uses: ``betas`` (the kernel's ``alpha`` and ``beta``), ``eps``, ``weight_decay``,
    ``bias_correction`` (``correct_bias``); ``adam_mode`` is 1 (Hugging Face's AdamW), as there. SGD has none.
    """
    key = kind.lower() if isinstance(kind, str) else None
    if key not in _KINDS:
        raise OptimizerModelError(f"unknown optimizer {kind!r}: expected 'AdamW' or 'SGD'")
    if isinstance(opset, bool) or not isinstance(opset, int) or not 1 <= opset <= MAX_OPSET:
        raise OptimizerModelError(f"opset {opset!r}: ONNX Runtime 1.19 takes default-domain opsets 1 to {MAX_OPSET}")
    if isinstance(name_counter, bool) or not isinstance(name_counter, int) or name_counter < 0:
        raise OptimizerModelError(f"name_counter must be a non-negative int, got {name_counter!r}")
    op_type, output_stem, is_adamw = _KINDS[key]
    if not is_adamw and (betas, eps, weight_decay, bias_correction) != ((0.9, 0.999), 1e-6, 0.0, True):
        raise OptimizerModelError("SGD takes no betas, eps, weight_decay or bias_correction (they are AdamW's)")

    inputs = [helper.make_tensor_value_info("learning_rate", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("step", TensorProto.INT64, [1])]
    sequences = ["params", "gradients", "first_order_moments"] + (["second_order_moments"] if is_adamw else [])
    inputs += [helper.make_tensor_sequence_value_info(name, TensorProto.FLOAT, None) for name in sequences]
    flag = f"onnx::{output_stem}::{name_counter}"
    attributes: Dict[str, Any]
    if is_adamw:
        node_inputs = ["learning_rate", "step", "params", "gradients", "first_order_moments", "second_order_moments"]
        attributes = _adamw_attributes(betas, eps, weight_decay, bias_correction)
    else:
        node_inputs = ["learning_rate", "params", "gradients"]  # SGDOptimizerV2's order
        attributes = {}
    node = helper.make_node(op_type, node_inputs, [flag], name=f"onnx::{op_type}::{name_counter + 1}",
                            domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "graph", inputs, [helper.make_tensor_value_info(flag, TensorProto.BOOL, [1])])
    model = onnx.ModelProto()
    model.ir_version = IR_VERSION
    model.producer_name = "orttraining"
    model.graph.CopyFrom(graph)
    model.opset_import.extend([helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("", opset)])
    return model


def write_optimizer_model(path: PathLike, kind: str, **settings: Any) -> onnx.ModelProto:
    """Write ``optimizer_model(kind, **settings)`` to ``path`` and return it."""
    model = optimizer_model(kind, **settings)
    with open(path, "wb") as stream:
        stream.write(model.SerializeToString())
    return model


def _adamw_attributes(betas: Tuple[float, float], eps: float, weight_decay: float,
                      bias_correction: bool) -> Dict[str, Any]:
    try:
        beta1, beta2 = (float(beta) for beta in betas)
        eps, weight_decay = float(eps), float(weight_decay)
    except (TypeError, ValueError) as exc:
        raise OptimizerModelError(f"AdamW's betas, eps and weight_decay must be numbers: {exc}") from None
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
        raise OptimizerModelError(f"AdamW's betas must lie in [0, 1), got {tuple(betas)!r}")
    if not eps > 0.0 or weight_decay < 0.0:
        raise OptimizerModelError(f"AdamW needs eps > 0 and weight_decay >= 0, got eps={eps!r}, "
                                  f"weight_decay={weight_decay!r}")
    return {"alpha": beta1, "beta": beta2, "epsilon": eps, "weight_decay": weight_decay,
            "correct_bias": 1 if bias_correction else 0, "adam_mode": 1}
