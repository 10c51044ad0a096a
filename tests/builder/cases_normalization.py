"""Finite-difference cases of the normalisation family: BatchNormalization in training and inference form,
LayerNormalization (its optional outputs declared or not), InstanceNormalization, GroupNormalization
(opset 18 and 21), Softmax and LogSoftmax (opset 13 and older forms), Dropout (inference, training with a
fed flag, training that keeps everything), with symbolic batch sizes."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from gradcheck import Case, case
from onnx import helper, numpy_helper

rng = np.random.default_rng(11)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def constant(name: str, value: Any) -> Any:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def with_constants(name: str, op: str, inputs: List[Tuple[str, Any]], params: List[str],
                   constants: Dict[str, Any], outputs: int = 1, checked: Optional[List[str]] = None,
                   opset: int = 17, symbolic_batch: bool = False, **attributes: Any) -> Case:
    """One node reading data, parameters and Constant nodes (values a symbolic batch must not touch)."""
    names = [n for n, _ in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **attributes)
    values = {n: np.asarray(v) for n, v in inputs if n and n not in constants}
    nodes = [constant(n, v) for n, v in constants.items()] + [node]
    return Case(name, nodes, {n: values[n] for n in params}, {n: v for n, v in values.items() if n not in params},
                outputs=checked, opset=opset, symbolic_batch=symbolic_batch)


def at(c: Case, opset: int, symbolic_batch: bool = False, outputs: Optional[List[str]] = None) -> Case:
    c.opset = opset
    c.symbolic_batch = symbolic_batch
    if outputs is not None:
        c.outputs = outputs
    return c


def bn_inputs(channels: int) -> List[Tuple[str, Any]]:
    return [("scale", f32(channels, low=0.5, high=1.5)), ("bias", f32(channels)), ("mean", f32(channels)),
            ("var", f32(channels, low=0.5, high=1.5))]


CASES: Dict[str, List[Case]] = {
    "BatchNormalization": [
        case("batch_norm_inference", "BatchNormalization", [("x", f32(2, 3, 4, 4))] + bn_inputs(3),
             ["x", "scale", "bias", "mean", "var"], epsilon=1e-3),
        case("batch_norm_inference_1d", "BatchNormalization", [("x", f32(4, 3))] + bn_inputs(3), ["x", "scale"]),
        at(case("batch_norm_inference_symbolic", "BatchNormalization", [("x", f32(3, 2, 3))] + bn_inputs(2),
                ["scale", "bias", "mean", "var"]), 15, True),
        with_constants("batch_norm_training", "BatchNormalization", [("x", f32(3, 2, 3, 3))] + bn_inputs(2),
                       ["x", "scale", "bias"], {"mean": f32(2), "var": f32(2, low=0.5, high=1.5)}, outputs=3,
                       checked=["y0"], training_mode=1, momentum=0.8),
        with_constants("batch_norm_training_symbolic", "BatchNormalization", [("x", f32(4, 3, 2, 2))] + bn_inputs(3),
                       ["scale", "bias"], {"mean": f32(3), "var": f32(3, low=0.5, high=1.5)}, outputs=3,
                       checked=["y0"], training_mode=1, symbolic_batch=True),
        with_constants("batch_norm_training_2d", "BatchNormalization", [("x", f32(6, 3))] + bn_inputs(3),
                       ["x", "scale", "bias"], {"mean": f32(3), "var": f32(3, low=0.5, high=1.5)}, outputs=3,
                       checked=["y0"], training_mode=1),
        with_constants("batch_norm_training_opset13", "BatchNormalization", [("x", f32(3, 2, 4))] + bn_inputs(2),
                       ["x", "scale", "bias"], {"mean": f32(2), "var": f32(2, low=0.5, high=1.5)}, outputs=5,
                       checked=["y0"], opset=13),
    ],
    "LayerNormalization": [
        case("layer_norm", "LayerNormalization", [("x", f32(2, 3, 4)), ("scale", f32(4)), ("bias", f32(4))],
             ["x", "scale", "bias"]),
        case("layer_norm_axis1", "LayerNormalization", [("x", f32(2, 3, 4)), ("scale", f32(3, 4))], ["x", "scale"],
             axis=1, epsilon=1e-3),
        at(case("layer_norm_outputs_declared", "LayerNormalization", [("x", f32(3, 5)), ("scale", f32(5)),
                                                                      ("bias", f32(5))], ["scale", "bias"], outputs=3),
           17, outputs=["y0"]),
        at(case("layer_norm_symbolic", "LayerNormalization", [("x", f32(3, 2, 4)), ("scale", f32(4)),
                                                              ("bias", f32(4))], ["scale", "bias"]), 17, True),
    ],
    "InstanceNormalization": [
        case("instance_norm", "InstanceNormalization", [("x", f32(2, 3, 4, 5)), ("scale", f32(3)), ("bias", f32(3))],
             ["x", "scale", "bias"]),
        at(case("instance_norm_opset13", "InstanceNormalization", [("x", f32(2, 2, 3, 3)), ("scale", f32(2)),
                                                                   ("bias", f32(2))], ["x", "scale"]), 13),
        at(case("instance_norm_1d_symbolic", "InstanceNormalization",
                [("x", f32(3, 2, 6)), ("scale", f32(2)), ("bias", f32(2))], ["scale", "bias"], epsilon=1e-2), 17, True),
    ],
    "GroupNormalization": [
        at(case("group_norm_18", "GroupNormalization", [("x", f32(2, 4, 3, 3)), ("scale", f32(2)), ("bias", f32(2))],
                ["x", "scale", "bias"], num_groups=2), 18),
        at(case("group_norm_21", "GroupNormalization", [("x", f32(2, 4, 3, 3)), ("scale", f32(4)), ("bias", f32(4))],
                ["x", "scale", "bias"], num_groups=2, epsilon=1e-3), 21),
        at(case("group_norm_21_symbolic", "GroupNormalization", [("x", f32(3, 6, 4)), ("scale", f32(6)),
                                                                 ("bias", f32(6))], ["scale", "bias"], num_groups=3),
           21, True),
    ],
    "Softmax": [
        case("softmax", "Softmax", [("x", f32(3, 4))], ["x"]),
        case("softmax_axis1", "Softmax", [("x", f32(2, 3, 4))], ["x"], axis=1),
        at(case("softmax_opset12", "Softmax", [("x", f32(2, 3, 4))], ["x"]), 12),
    ],
    "LogSoftmax": [
        case("log_softmax", "LogSoftmax", [("x", f32(3, 4))], ["x"]),
        case("log_softmax_axis0", "LogSoftmax", [("x", f32(3, 4))], ["x"], axis=0),
        at(case("log_softmax_opset12", "LogSoftmax", [("x", f32(2, 3, 4))], ["x"], axis=2), 12),
    ],
    "Dropout": [
        case("dropout_inference", "Dropout", [("x", f32(3, 4)), ("ratio", np.array(0.5, np.float32))], ["x"]),
        with_constants("dropout_training_keeps_all", "Dropout", [("x", f32(3, 4)), ("ratio", 0.0),
                                                                 ("training", True)], ["x"],
                       {"ratio": np.array(0.0, np.float32), "training": np.array(True)}),
        with_constants("dropout_flag_false_constant", "Dropout", [("x", f32(3, 4)), ("ratio", 0.3),
                                                                  ("training", False)], ["x"],
                       {"ratio": np.array(0.3, np.float32), "training": np.array(False)}, outputs=2,
                       checked=["y0"]),
        case("dropout_flag_fed_false", "Dropout", [("x", f32(3, 4)), ("ratio", np.array(0.5, np.float32)),
                                                   ("training", np.array(False))], ["x"]),
    ],
}
