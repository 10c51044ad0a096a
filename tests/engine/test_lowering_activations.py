"""The activation gradients, lowered: each agrees with ONNX Runtime 1.19.2's training kernel, on 1.19.2 and on
1.31.1 (tests/support/lowering_check.py)."""
from __future__ import annotations

import numpy as np
import pytest
from lowering_check import check_lowering, current_runtime, one_node_model  # noqa: F401  (a fixture)

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

rng = np.random.default_rng(7)
SHAPE = (3, 4, 5)


def values(shape=SHAPE, dtype=np.float32, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("op", ["ReluGrad", "GeluGrad", "FastGeluGrad"])
def test_gradients_of_the_input(op, current_runtime):
    x = values()
    x[0, 0, :2] = 0.0  # Relu's gradient at exactly 0
    feeds = {"dY": values(), "X": x}
    check_lowering(one_node_model(op, feeds, [("dX", np.float32, SHAPE)]), feeds, current_runtime)


@pytest.mark.parametrize("op", ["SigmoidGrad", "TanhGrad"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradients_of_the_output(op, dtype, current_runtime):
    feeds = {"dY": values(dtype=dtype), "Y": np.tanh(values(dtype=dtype))}
    check_lowering(one_node_model(op, feeds, [("dX", dtype, SHAPE)]), feeds, current_runtime)


@pytest.mark.parametrize("alpha", [None, 0.2])
def test_leaky_relu_grad(alpha, current_runtime):
    feeds = {"dY": values(), "Y": values()}
    attributes = {} if alpha is None else {"alpha": alpha}
    check_lowering(one_node_model("LeakyReluGrad", feeds, [("dX", np.float32, SHAPE)], **attributes), feeds,
                   current_runtime)


@pytest.mark.parametrize("alpha", [None, 1.0])
def test_quick_gelu_grad(alpha, current_runtime):
    feeds = {"dY": values(), "X": values()}
    attributes = {} if alpha is None else {"alpha": alpha}
    check_lowering(one_node_model("QuickGeluGrad", feeds, [("dX", np.float32, SHAPE)], **attributes), feeds,
                   current_runtime)


@pytest.mark.parametrize("op", ["BiasGeluGrad_dX", "BiasFastGeluGrad_dX"])
def test_bias_gelu_grads(op, current_runtime):
    feeds = {"dY": values(), "X": values(), "B": values((SHAPE[-1],))}
    check_lowering(one_node_model(op, feeds, [("dX", np.float32, SHAPE)]), feeds, current_runtime)


@pytest.mark.parametrize("op", ["SoftmaxGrad_13", "LogSoftmaxGrad_13", "SoftmaxGrad", "LogSoftmaxGrad"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_softmax_grads(op, axis, current_runtime):
    logits = values()
    axis_used = (-1 if op.endswith("_13") else 1) if axis is None else axis
    if op.endswith("_13"):
        shifted = np.exp(logits - logits.max(axis=axis_used, keepdims=True))
        probabilities = shifted / shifted.sum(axis=axis_used, keepdims=True)
    else:
        flat = logits.reshape(int(np.prod(SHAPE[:axis_used % 3])), -1)
        shifted = np.exp(flat - flat.max(axis=1, keepdims=True))
        probabilities = (shifted / shifted.sum(axis=1, keepdims=True)).reshape(SHAPE)
    y = np.log(probabilities) if op.startswith("Log") else probabilities
    feeds = {"dY": values(), "Y": y.astype(np.float32)}
    attributes = {} if axis is None else {"axis": axis}
    check_lowering(one_node_model(op, feeds, [("dX", np.float32, SHAPE)], **attributes), feeds, current_runtime)


@pytest.mark.parametrize("ratio", [None, 0.0, 0.3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_grad(ratio, dtype, current_runtime):
    feeds = {"dY": values(dtype=dtype), "mask": rng.random(SHAPE) > 0.3}
    if ratio is not None:
        feeds["ratio"] = np.array(ratio, np.float32)
    check_lowering(one_node_model("DropoutGrad", feeds, [("dX", dtype, SHAPE)]), feeds, current_runtime)
