"""Normalization and loss training operators, lowered: each agrees with ONNX Runtime 1.19.2's training kernel,
on 1.19.2 and on 1.31.1 (tests/support/lowering_check.py)."""
from __future__ import annotations

import numpy as np
import pytest
from lowering_check import assert_close, check_lowering, current_runtime, one_node_model, run_training_build  # noqa: F401  (a fixture)

from ort_cffi._backends.engine.lowering import lower_training_ops
from ort_cffi._backends.engine.lowering.registry import SHAPE_CHECK

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

rng = np.random.default_rng(3)


def values(shape, dtype=np.float32, scale=1.0, shift=0.0):
    return np.asarray(rng.standard_normal(shape) * scale + shift).astype(dtype)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 2, 3, 2, 3)])
@pytest.mark.parametrize("opset", [12, 17])
@pytest.mark.parametrize("outputs", [5, 1])  # the schema: five outputs in training mode
def test_batch_norm_internal(shape, opset, outputs, current_runtime):
    channels = shape[1]
    feeds = {"X": values(shape, scale=2.0, shift=0.5), "scale": values((channels,)), "B": values((channels,)),
             "mean": values((channels,)), "var": np.abs(values((channels,))) + 0.5}
    declared = [("Y", np.float32, shape), ("running_mean", np.float32, (channels,)),
                ("running_var", np.float32, (channels,)), ("saved_mean", np.float32, (channels,)),
                ("saved_inv_std", np.float32, (channels,))][:outputs]
    model = one_node_model("BatchNormInternal", feeds, declared, opset=opset, epsilon=1e-3, momentum=0.8,
                           training_mode=int(outputs > 1))
    # from opset 14 on the lowering is BatchNormalization in training mode: the same CPU kernel, bit for bit
    check_lowering(model, feeds, current_runtime, exact=opset >= 14)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 2, 3, 2, 3)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_batch_normalization_grad(shape, symbolic, current_runtime):
    x = values(shape, scale=2.0, shift=0.3)
    axes = (0,) + tuple(range(2, len(shape)))
    feeds = {"dY": values(shape), "X": x, "scale": values((shape[1],)), "saved_mean": x.mean(axis=axes),
             "saved_inv_std": (1.0 / np.sqrt(x.var(axis=axes) + 1e-5)).astype(np.float32)}
    outputs = [("dX", np.float32, shape), ("dScale", np.float32, (shape[1],)), ("dBias", np.float32, (shape[1],))]
    check_lowering(one_node_model("BatchNormalizationGrad", feeds, outputs, symbolic=symbolic, epsilon=1e-5),
                   feeds, current_runtime)


def layer_statistics(x, axis, simplified=False):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = (x * x).mean(axis=axes, keepdims=True) if simplified else x.var(axis=axes, keepdims=True)
    return mean.astype(np.float32), (1.0 / np.sqrt(var + 1e-5)).astype(np.float32)


def reshapes_written(lowered):
    return [n.op_type for n in lowered.graph.node if n.op_type in ("Flatten", "Reshape", "Shape", "Cast")]


# Shapes known (symbolic False): the statistics keep X's rank and the gradients broadcast over X with no Flatten,
# Reshape, Shape or Cast; with the sizes unknown at lowering time (True) the flattened form is written.
@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 8), -1), ((2, 3, 4, 5), 2), ((2, 3, 4), 1),
                                        ((3, 4), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("symbolic", [False, True])
def test_layer_normalization_grad(shape, axis, dtype, symbolic, current_runtime):
    x = values(shape, dtype, 2.0, 0.5)
    mean, inv_std = layer_statistics(x, axis)
    normalized = shape[axis % len(shape):]
    feeds = {"dY": values(shape, dtype), "X": x, "scale": values(normalized, dtype), "mean": mean, "inv_std": inv_std}
    outputs = [("dX", dtype, shape), ("dScale", dtype, normalized), ("dBias", dtype, normalized)]
    lowered = check_lowering(one_node_model("LayerNormalizationGrad", feeds, outputs, axis=axis, symbolic=symbolic),
                             feeds, current_runtime)
    if not symbolic:  # float64 data with float statistics: the statistics' two Casts only
        assert reshapes_written(lowered) == (["Cast", "Cast"] if dtype == np.float64 else [])


def layer_norm(x, scale, bias, axis, epsilon=1e-5, simplified=False):
    """LayerNormalization's forward in float64: what the gradient forms differentiate."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    centered = x if simplified else x - x.mean(axis=axes, keepdims=True)
    return centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + epsilon) * scale + bias


@pytest.mark.parametrize("shape,axis", [((3, 5), -1), ((2, 3, 6), -1), ((2, 3, 2, 3), 2)])
@pytest.mark.parametrize("op_type", ["LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad"])
def test_layer_normalization_grads_against_finite_differences(shape, axis, op_type, current_runtime):
    """The lowered gradients (on 1.31.1, float64) are the derivatives of the forward: central differences of
    sum(dY * LayerNormalization(X, scale, bias)) in X, scale and bias."""
    simplified = op_type.startswith("Simplified")
    x, dy = values(shape, np.float64, 2.0, 0.5), values(shape, np.float64)
    normalized = shape[axis % len(shape):]
    scale, bias = values(normalized, np.float64) + 1.5, values(normalized, np.float64)
    axes = tuple(range(axis % len(shape), len(shape)))
    mean = x.mean(axis=axes, keepdims=True)
    centered = x if simplified else x - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + 1e-5)
    feeds = {"dY": dy, "X": x, "scale": scale}
    feeds.update({"inv_std": inv_std} if simplified else {"mean": mean, "inv_std": inv_std})
    outputs = [("dX", np.float64, shape), ("dScale", np.float64, normalized)]
    outputs += [] if simplified else [("dBias", np.float64, normalized)]
    lowered = lower_training_ops(one_node_model(op_type, feeds, outputs, axis=axis))
    got = current_runtime.run(lowered, feeds)

    def loss(x_, scale_, bias_):
        return float((dy * layer_norm(x_, scale_, bias_, axis, simplified=simplified)).sum())

    step = 1e-6
    for index, wrt in enumerate([x, scale, bias][:len(got)]):
        numeric = np.zeros_like(wrt)
        for at in np.ndindex(wrt.shape):
            args = [x.copy(), scale.copy(), bias.copy()]
            args[index][at] += step
            up = loss(*args)
            args[index][at] -= 2 * step
            numeric[at] = (up - loss(*args)) / (2 * step)
        np.testing.assert_allclose(got[index], numeric, rtol=1e-6, atol=1e-7, err_msg=f"{op_type} output {index}")


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 4, 5), 2)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_simplified_layer_normalization_grad(shape, axis, symbolic, current_runtime):
    x = values(shape, scale=2.0, shift=0.5)
    _, inv_std = layer_statistics(x, axis, simplified=True)
    normalized = shape[axis % len(shape):]
    feeds = {"dY": values(shape), "X": x, "scale": values(normalized), "inv_std": inv_std}
    outputs = [("dX", np.float32, shape), ("dScale", np.float32, normalized)]
    lowered = check_lowering(one_node_model("SimplifiedLayerNormalizationGrad", feeds, outputs, axis=axis,
                                            symbolic=symbolic), feeds, current_runtime)
    assert symbolic or not reshapes_written(lowered)


@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 4, 5), 2)])
@pytest.mark.parametrize("symbolic", [False, True])
def test_invertible_layer_normalization_grad(shape, axis, symbolic, current_runtime):
    x = values(shape, scale=2.0, shift=0.5)
    mean, inv_std = layer_statistics(x, axis)
    normalized = shape[axis % len(shape):]
    scale, bias = values(normalized) + 2.0, values(normalized)
    feeds = {"dY": values(shape), "Y": ((x - mean) * inv_std * scale + bias).astype(np.float32), "scale": scale,
             "bias": bias, "inv_std": inv_std}
    outputs = [("dX", np.float32, shape), ("dScale", np.float32, normalized), ("dBias", np.float32, normalized)]
    lowered = check_lowering(one_node_model("InvertibleLayerNormalizationGrad", feeds, outputs, axis=axis,
                                            symbolic=symbolic), feeds, current_runtime)
    assert symbolic or not reshapes_written(lowered)


def log_softmax(logits):
    shifted = logits - logits.max(axis=1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).astype(np.float32)


# ranks 2, 3 and 4; the last with every axis of another size, so that an axis taken for another shows
LOSS_SHAPES = [((6, 5), (6,)), ((2, 4, 3), (2, 3)), ((2, 3, 2, 2), (2, 2, 2)), ((2, 3, 4, 5), (2, 4, 5))]


@pytest.mark.parametrize("shapes", LOSS_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -100])
def test_softmax_cross_entropy_loss_grad(shapes, reduction, weighted, ignore, current_runtime):
    logit_shape, label_shape = shapes
    classes = logit_shape[1]
    labels = rng.integers(0, classes, label_shape).astype(np.int64)
    if ignore is not None:
        labels.reshape(-1)[::3] = ignore
    feeds = {"dY": values(label_shape if reduction == "none" else ()), "log_prob": log_softmax(values(logit_shape)),
             "labels": labels}
    if weighted:
        feeds["weights"] = np.abs(values((classes,))) + 0.1
    attributes = {"reduction": reduction}
    if ignore is not None:
        attributes["ignore_index"] = ignore
    model = one_node_model("SoftmaxCrossEntropyLossGrad", feeds, [("d_logits", np.float32, logit_shape)],
                           **attributes)
    check_lowering(model, feeds, current_runtime)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("weighted", [True, False])
def test_softmax_cross_entropy_loss_internal_grad(reduction, label_dtype, weighted, current_runtime):
    labels = rng.integers(0, 5, (6,)).astype(label_dtype)
    labels[1] = 2
    feeds = {"dY": values((6,) if reduction == "none" else ()), "log_prob": log_softmax(values((6, 5))),
             "labels": labels, "weights": np.abs(values((5,))) + 0.1, "ignore_index": np.array(2, np.int64)}
    if not weighted:
        del feeds["weights"]
    model = one_node_model("SoftmaxCrossEntropyLossInternalGrad", feeds, [("d_logits", np.float32, (6, 5))],
                           inputs=["dY", "log_prob", "labels", "weights" if weighted else "", "ignore_index"],
                           reduction=reduction)
    check_lowering(model, feeds, current_runtime)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shapes", LOSS_SHAPES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", ["constant", "fed"])
def test_softmax_cross_entropy_loss_internal(reduction, shapes, weighted, ignore_index, current_runtime):
    """ignore_index known before run time: the standard operator; fed at run time: its arithmetic written out."""
    logit_shape, label_shape = shapes
    labels = rng.integers(0, logit_shape[1], label_shape).astype(np.int64)
    labels.reshape(-1)[0] = 0
    feeds = {"scores": values(logit_shape), "labels": labels}
    names = ["scores", "labels", "weights" if weighted else "", "ignore_index"]
    if weighted:
        feeds["weights"] = np.abs(values((logit_shape[1],))) + 0.1
    constants = {"ignore_index": np.array(0, np.int64)}
    if ignore_index == "fed":
        feeds["ignore_index"], constants = constants["ignore_index"], {}
    model = one_node_model("SoftmaxCrossEntropyLossInternal", feeds,
                           [("loss", np.float32, label_shape if reduction == "none" else ()),
                            ("log_prob", np.float32, logit_shape)],
                           inputs=names, constants=constants, reduction=reduction)
    check_lowering(model, feeds, current_runtime)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shapes", LOSS_SHAPES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -100, "all"])
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
def test_standard_softmax_cross_entropy_loss(reduction, shapes, weighted, ignore, label_dtype, current_runtime):
    """The standard operator, which inference builds run as its function, in the lean form (LogSoftmax,
    GatherElements, a reduction). Its kernel on 1.19.2 is the reference; every label ignored gives the kernel's
    0 for mean (1.31's function gives NaN there, with weights)."""
    logit_shape, label_shape = shapes
    labels = rng.integers(0, logit_shape[1], label_shape).astype(label_dtype)
    attributes = {"reduction": reduction}
    if ignore is not None:
        attributes["ignore_index"] = 1 if ignore == "all" else ignore
        labels.reshape(-1)[:] = 1 if ignore == "all" else labels.reshape(-1)
        labels.reshape(-1)[::3] = attributes["ignore_index"]
    feeds = {"scores": values(logit_shape, scale=2.0), "labels": labels}
    if weighted:
        feeds["weights"] = np.abs(values((logit_shape[1],))) + 0.1
    model = one_node_model("SoftmaxCrossEntropyLoss", feeds,
                           [("loss", np.float32, label_shape if reduction == "none" else ()),
                            ("log_prob", np.float32, logit_shape)], domain="", opset=17, **attributes)
    lowered = check_lowering(model, feeds, current_runtime)
    kinds = {n.op_type for n in lowered.graph.node}
    assert "SoftmaxCrossEntropyLoss" not in kinds
    spelled_out = int(np.prod(logit_shape[2:])) >= max(16, logit_shape[1])  # test_log_softmax_over_long_class_columns
    assert ("LogSoftmax" not in kinds and {"ReduceMax", "Exp", "Log"} <= kinds) if spelled_out else "LogSoftmax" in kinds


@pytest.mark.parametrize("logit_shape, spelled_out", [((4, 3, 8, 8), True), ((2, 5, 4, 6), True),
                                                      ((3, 40, 4), False), ((8, 10, 1), False)])
@pytest.mark.parametrize("internal", [False, True])
def test_log_softmax_over_long_class_columns(logit_shape, spelled_out, internal, current_runtime):
    """A per-position loss (a segmentation's [N, C, H, W]): where the positions after the class axis are at least as
    many as the classes, the log-probabilities are written out (max, exp, sum, log), which ONNX Runtime runs many
    times faster than LogSoftmax along a non-last axis; the values agree with the kernel's."""
    label_shape = (logit_shape[0],) + logit_shape[2:]
    feeds = {"scores": values(logit_shape, scale=4.0),
             "labels": rng.integers(0, logit_shape[1], label_shape).astype(np.int64)}
    outputs = [("loss", np.float32, ()), ("log_prob", np.float32, logit_shape)]
    if internal:
        model = one_node_model("SoftmaxCrossEntropyLossInternal", feeds, outputs, inputs=["scores", "labels"])
    else:
        model = one_node_model("SoftmaxCrossEntropyLoss", feeds, outputs, domain="", opset=17)
    kinds = [n.op_type for n in check_lowering(model, feeds, current_runtime).graph.node]
    assert ("LogSoftmax" not in kinds) == spelled_out, kinds


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_softmax_cross_entropy_loss_grad_with_every_label_ignored(reduction, current_runtime):
    """No label kept: a zero gradient, as the kernel gives (the mean's count of 0 divides nothing)."""
    feeds = {"dY": values((2, 3) if reduction == "none" else ()), "log_prob": log_softmax(values((2, 4, 3))),
             "labels": np.full((2, 3), 1, np.int64)}
    model = one_node_model("SoftmaxCrossEntropyLossGrad", feeds, [("d_logits", np.float32, (2, 4, 3))],
                           reduction=reduction, ignore_index=1)
    check_lowering(model, feeds, current_runtime)


def test_standard_softmax_cross_entropy_loss_before_opset_13_stays(current_runtime):
    """Before opset 13 LogSoftmax flattens to 2-D: the operator is left as it is, and still agrees."""
    feeds = {"scores": values((2, 3, 4)), "labels": rng.integers(0, 3, (2, 4)).astype(np.int64)}
    model = one_node_model("SoftmaxCrossEntropyLoss", feeds, [("loss", np.float32, ()),
                                                              ("log_prob", np.float32, (2, 3, 4))], domain="", opset=12)
    lowered = check_lowering(model, feeds, current_runtime)
    assert [n.op_type for n in lowered.graph.node] == ["SoftmaxCrossEntropyLoss"]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("shapes", LOSS_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lean_softmax_cross_entropy_loss_grad_kernels(reduction, shapes, dtype, current_runtime):
    """No weights, no ignored label: the lean gradient, a handful of kernels, of float and double log_prob."""
    logit_shape, label_shape = shapes
    feeds = {"dY": values((), dtype), "log_prob": log_softmax(values(logit_shape)).astype(dtype),
             "labels": rng.integers(0, logit_shape[1], label_shape).astype(np.int64)}
    model = one_node_model("SoftmaxCrossEntropyLossGrad", feeds, [("d_logits", dtype, logit_shape)],
                           reduction=reduction)
    lowered = check_lowering(model, feeds, current_runtime)
    kernels = [n.op_type for n in lowered.graph.node if n.op_type != "Constant"]
    assert len(kernels) <= 8, kernels


@pytest.mark.parametrize("opset", [15, 16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [None, 1])
@pytest.mark.parametrize("symbolic", [False, True])
def test_cross_entropy_gradient_scatters_the_labels_minus_one(opset, reduction, ignore, symbolic, current_runtime):
    """From opset 16 the gradient is exp(log_prob) times the factor with -factor added at each label by
    ScatterElements (no one-hot over every class: 0.14 of the 1.19.2 kernel's time over [512, 2000]); before,
    OneHot and Sub. Both agree with the kernel, over known and run-time sizes, ignored labels too."""
    logit_shape, label_shape = (3, 7, 4), (3, 4)
    labels = rng.integers(0, 7, label_shape).astype(np.int64)
    attributes = {"reduction": reduction}
    if ignore is not None:
        labels.reshape(-1)[::3] = ignore
        attributes["ignore_index"] = ignore
    feeds = {"dY": values(label_shape if reduction == "none" else ()),
             "log_prob": log_softmax(values(logit_shape, scale=6.0)), "labels": labels}
    model = one_node_model("SoftmaxCrossEntropyLossGrad", feeds, [("d_logits", np.float32, logit_shape)],
                           opset=opset, symbolic=symbolic, **attributes)
    kinds = [n.op_type for n in check_lowering(model, feeds, current_runtime).graph.node]
    assert ("ScatterElements" in kinds and "OneHot" not in kinds) if opset >= 16 else "OneHot" in kinds, kinds


@pytest.mark.parametrize("opset", [15, 16])
def test_cross_entropy_gradient_reads_the_label_count_from_log_prob(opset, current_runtime):
    """A loss block may declare the labels as the scores less their last axis ([N, C] of [N, C, d]) and fix the
    input's shape after the graph is built, as ort_cffi's builder does: with every size known, the lowering
    made its constants of -1 and its count from that declared shape, and the scatter failed at the first step
    (a model torch's default exporter wrote with a static batch, per-token logits [4, 100, 12]). The label
    count now comes from log_prob."""
    logit_shape, label_shape = (3, 7, 4), (3, 4)
    feeds = {"dY": values(()), "log_prob": log_softmax(values(logit_shape, scale=6.0)),
             "labels": rng.integers(0, 7, label_shape).astype(np.int64)}
    model = one_node_model("SoftmaxCrossEntropyLossGrad", feeds, [("d_logits", np.float32, logit_shape)],
                           opset=opset)
    expected = run_training_build(model, feeds)
    declared = model.graph.input[2].type.tensor_type.shape
    declared.dim[1].dim_value = logit_shape[1]  # [3, 7], as the loss block first writes it
    lowered = lower_training_ops(model)
    declared = lowered.graph.input[2].type.tensor_type.shape
    declared.dim[1].dim_value = label_shape[1]  # and the input's shape fixed afterwards
    assert_close(current_runtime.run(lowered, feeds), expected, 1e-5, "lowered, on the current runtime")
    assert_close(run_training_build(lowered, feeds), expected, 1e-5, "lowered, on 1.19.2")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 4)])
def test_older_softmax_cross_entropy_and_its_gradient(reduction, shape, current_runtime):
    labels = np.exp(values(shape))
    labels = (labels / labels.sum(axis=-1, keepdims=True)).astype(np.float32)
    feeds = {"logits": values(shape, scale=2.0), "labels": labels}
    check_lowering(one_node_model("SoftmaxCrossEntropy", feeds, [("loss", np.float32, ()),
                                                                 ("log_prob", np.float32, shape)],
                                  reduction=reduction), feeds, current_runtime)
    if reduction != "none":  # the kernel leaves dY unscaled and unset there
        shifted = feeds["logits"] - feeds["logits"].max(axis=-1, keepdims=True)
        log_prob = (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))).astype(np.float32)
        grads = {"dY": values(()), "log_prob": log_prob, "labels": labels}
        check_lowering(one_node_model("SoftmaxCrossEntropyGrad", grads, [("d_logits", np.float32, shape)],
                                      reduction=reduction), grads, current_runtime)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 4)])
def test_sparse_softmax_cross_entropy_and_its_gradient(reduction, weighted, shape, current_runtime):
    """The oldest pair, in the default domain as ONNX Runtime registers them (version 9)."""
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(np.int64)
    feeds = {"logits": values(shape, scale=2.0), "labels": labels}
    if weighted:
        feeds["weights"] = np.abs(values(shape[:-1])) + 0.1
    check_lowering(one_node_model("SparseSoftmaxCrossEntropy", feeds, [("loss", np.float32, ()),
                                                                       ("log_prob", np.float32, shape)],
                                  domain="", reduction=reduction), feeds, current_runtime)
    shifted = feeds["logits"] - feeds["logits"].max(axis=-1, keepdims=True)
    grads = {"dY": values(()), "log_prob": (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
                                            ).astype(np.float32), "labels": labels}
    if weighted:
        grads["weights"] = feeds["weights"]
    check_lowering(one_node_model("SparseSoftmaxCrossEntropyGrad", grads, [("d_logits", np.float32, shape)],
                                  domain="", reduction=reduction), grads, current_runtime)


def test_batch_norms_in_a_chain_with_their_gradients(current_runtime):
    """Two BatchNormInternal of one channel count and their gradients in one model, as a CNN has them: the
    forward's BatchNormalization in training mode may write over its mean and var inputs, so they must be
    values no other node reads, which ONNX Runtime's optimizer would otherwise make of equal constants (the
    gradients' per-channel affine forms read zeros and ones of the same shape)."""
    from onnx import TensorProto, helper

    shape, channels = (4, 3, 5, 5), 3
    feeds = {"X": values(shape, scale=2.0, shift=0.5), "dY": values(shape), "dY1": values(shape)}
    for i in (1, 2):
        feeds.update({f"scale{i}": values((channels,)), f"B{i}": values((channels,)), f"mean{i}": values((channels,)),
                      f"var{i}": np.abs(values((channels,))) + 0.5})
    nodes = []
    for i, x in ((1, "X"), (2, "Y1")):
        nodes.append(helper.make_node("BatchNormInternal", [x, f"scale{i}", f"B{i}", f"mean{i}", f"var{i}"],
                                      [f"Y{i}", f"rm{i}", f"rv{i}", f"sm{i}", f"si{i}"], domain="com.microsoft",
                                      epsilon=1e-5, momentum=0.9, training_mode=1))
    # each gradient from a dY of its own (a BatchNormalization's gradient through another is near zero, all noise)
    nodes.append(helper.make_node("BatchNormalizationGrad", ["dY", "Y1", "scale2", "sm2", "si2"],
                                  ["dX2", "dscale2", "dB2"], domain="com.microsoft", epsilon=1e-5))
    nodes.append(helper.make_node("BatchNormalizationGrad", ["dY1", "X", "scale1", "sm1", "si1"],
                                  ["dX", "dscale1", "dB1"], domain="com.microsoft", epsilon=1e-5))
    outputs = ["Y2", "rm1", "rv1", "rm2", "rv2", "dX", "dscale1", "dB1", "dX2", "dscale2", "dB2"]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    check_lowering(model, feeds, current_runtime)



@pytest.mark.parametrize("scores_shape, labels_shape", [((4, 5), (3,)), ((4, 5), (1,)), ((2, 3, 4), (2, 3)),
                                                        ((2, 3, 4), (1, 4))])
@pytest.mark.parametrize("internal", [False, True])
def test_labels_of_another_batch_are_refused(scores_shape, labels_shape, internal, current_runtime):
    """Labels whose count differs from the scores' rows: the kernel refuses them, and so must the lowered loss,
    whose GatherElements (and the gradient's ScatterElements) would take fewer labels without a word and train
    on part of the batch. Both are declared with the same symbolic batch, as an exported training model declares
    them, so that only the run can tell (and the lowering's shape simplification must keep the check)."""
    feeds = {"scores": values(scores_shape), "labels": rng.integers(0, scores_shape[1], labels_shape).astype(np.int64)}
    outputs = [("loss", np.float32, ()), ("log_prob", np.float32, None)]
    if internal:
        model = one_node_model("SoftmaxCrossEntropyLossInternal", feeds, outputs, inputs=["scores", "labels"],
                               symbolic=True)
    else:
        model = one_node_model("SoftmaxCrossEntropyLoss", feeds, outputs, domain="", opset=17, symbolic=True)
    for value in model.graph.input:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(Exception):
        run_training_build(model, feeds)  # the kernel's refusal, the reference
    lowered = lower_training_ops(model)
    assert [n.op_type for n in lowered.graph.node if n.doc_string == SHAPE_CHECK] == ["Reshape"]
    with pytest.raises(Exception, match="Reshape"):
        run_training_build(lowered, feeds)
    with pytest.raises(AssertionError, match="refused the lowered model.*Reshape"):
        current_runtime.run(lowered, feeds)
