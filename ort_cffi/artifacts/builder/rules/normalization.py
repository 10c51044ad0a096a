"""Normalisations, softmaxes and dropout: ONNX Runtime's gradient kernels in the form its builder emits
them (BatchNormInternal and BatchNormalizationGrad, LayerNormalizationGrad, SoftmaxGrad_13,
LogSoftmaxGrad_13, DropoutGrad), standard operators where it has none (InstanceNormalization,
GroupNormalization, BatchNormalization in inference form).

Kernels that read optional forward outputs get them declared on the forward node of the training graph
(``GradientContext.forward_output``): LayerNormalization's mean and inverse standard deviation, Dropout's
mask. A training-mode BatchNormalization becomes ONNX Runtime's BatchNormInternal, which also outputs the
batch's mean and inverse standard deviation, as its builder's graph rewrite does.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import MICROSOFT, gradient

Grads = List[Optional[str]]


def _attributes(node: NodeView, drop: Sequence[str] = ()) -> Dict[str, Any]:
    return {a.name: node.attr(a.name) for a in node.proto.attribute if a.name not in drop}


def _reduce_mean(g: GradientContext, x: str, axes: Sequence[int]) -> str:
    if g.opset >= 18:
        return g.op("ReduceMean", x, g.ints(axes), keepdims=1)
    return g.op("ReduceMean", x, axes=list(axes), keepdims=1)


# --- softmaxes -----------------------------------------------------------------------------------------------
@gradient("Softmax")
def softmax(g: GradientContext, node: NodeView) -> Grads:
    op = "SoftmaxGrad_13" if g.opset >= 13 else "SoftmaxGrad"
    return [g.ms(op, node.dy(), node.outputs[0], **_attributes(node))[0]]


@gradient("LogSoftmax")
def log_softmax(g: GradientContext, node: NodeView) -> Grads:
    op = "LogSoftmaxGrad_13" if g.opset >= 13 else "LogSoftmaxGrad"
    return [g.ms(op, node.dy(), node.outputs[0], **_attributes(node))[0]]


# --- dropout -------------------------------------------------------------------------------------------------
def _constant_flag(g: GradientContext, node: NodeView, index: int) -> Optional[bool]:
    """The value of a boolean input known before run time; None when it is computed or fed."""
    value = g.constant_value(node.inputs[index])
    return None if value is None else bool(value.reshape(-1)[0])


@gradient("Dropout", inputs=(0,))
def dropout(g: GradientContext, node: NodeView) -> Grads:
    """In inference mode (no training_mode, or a constant false) Dropout is the identity. Otherwise ONNX
    Runtime's DropoutGrad(dY, mask, ratio, training_mode), its mask declared where the node leaves it out;
    where the flag is known only at run time, that or the identity, chosen by the flag."""
    flag = _constant_flag(g, node, 2) if node.has_input(2) else False
    if flag is False:
        return [node.dy()]
    mask = g.forward_output(node, 1, "mask")
    inputs = [node.dy(), mask] + [name or None for name in node.inputs[1:]]
    dx = g.ms("DropoutGrad", *inputs, **_attributes(node))[0]
    if flag is None:  # fed or computed: DropoutGrad scales by 1 / (1 - ratio) even when it is false (measured)
        dx = g.op("Where", node.inputs[2], dx, node.dy())
    return [dx]


# --- batch normalisation -------------------------------------------------------------------------------------
def _batch_norm_trains(g: GradientContext, node: NodeView) -> bool:
    """Whether the node normalises with the batch's statistics: training_mode=1 (opset 14 on), or before
    opset 14 the running statistics declared as outputs (only training computes them)."""
    if g.opset >= 14:
        return bool(node.attr("training_mode", 0))
    return len(node.outputs) > 1 and bool(node.outputs[1])


@gradient("BatchNormalization")
def batch_normalization(g: GradientContext, node: NodeView) -> Grads:
    if _batch_norm_trains(g, node):
        return _batch_norm_training(g, node)
    return _batch_norm_inference(g, node)


def _batch_norm_training(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's form: the node becomes com.microsoft BatchNormInternal (the same inputs, attributes and
    running statistics, and two more outputs: the batch's mean and inverse standard deviation), read by
    BatchNormalizationGrad. ort_cffi's preparation (artifacts/batchnorm.py) gives the nodes whose statistics
    follow training training_mode=1 and named running-statistics outputs: those stay as they are."""
    proto = node.proto
    saved_mean = g.forward_output(node, 3, "saved_mean")
    saved_inv_std = g.forward_output(node, 4, "saved_inv_std")
    for index, hint in ((1, "running_mean"), (2, "running_var")):
        g.forward_output(node, index, hint)
    outputs = [g.fresh(f"{node.inputs[i]}_grad") for i in range(3)]  # the kernel writes all three
    # epsilon is required by BatchNormalizationGrad (ONNX Runtime's builder omits it where the node does,
    # and its graph is then refused): the forward default.
    g.node("BatchNormalizationGrad", [node.dy(), node.inputs[0], node.inputs[1], saved_mean, saved_inv_std],
           outputs, MICROSOFT, epsilon=float(node.attr("epsilon", 1e-5)))
    proto.op_type = "BatchNormInternal"
    proto.domain = MICROSOFT
    for attribute in list(proto.attribute):
        if attribute.name == "training_mode":
            proto.attribute.remove(attribute)
    proto.attribute.extend([helper.make_attribute("training_mode", 1)])
    return [outputs[i] if node.wants(i) else None for i in range(3)] + [None, None]


def _batch_norm_inference(g: GradientContext, node: NodeView) -> Grads:
    """Statistics fixed: Y = scale * (X - mean) / sqrt(var + epsilon) + B, an affine map of X per channel."""
    x, scale, _, mean, var = node.inputs[:5]
    dy = node.dy()
    rank = g.rank(x)
    if rank is None or rank < 2:
        raise BuilderError(f"{node.describe()}: BatchNormalization's gradient needs the rank of its input, "
                           "which shape inference could not tell")
    spatial = list(range(1, rank - 1))

    def per_channel(v: str) -> str:  # [C] -> [C, 1, ...] against [N, C, ...]
        return g.unsqueeze(v, spatial) if spatial else v

    epsilon = float(node.attr("epsilon", 1e-5))
    inv_std = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.scalar(epsilon, var))))
    reduced = [0] + [a + 1 for a in spatial]
    grads: Grads = [None] * 5
    if node.wants(0):
        grads[0] = g.op("Mul", dy, per_channel(g.op("Mul", scale, inv_std)))
    sum_dy = g.reduce_sum(dy, reduced, keepdims=0) if any(node.wants(i) for i in (2, 3)) else None
    if any(node.wants(i) for i in (1, 4)):
        centred_sum = g.reduce_sum(g.op("Mul", dy, g.op("Sub", x, per_channel(mean))), reduced, keepdims=0)
        if node.wants(1):
            grads[1] = g.op("Mul", centred_sum, inv_std)
        if node.wants(4):  # d/dvar (var + eps)^-1/2 = -1/2 inv_std^3
            cubed = g.op("Mul", inv_std, g.op("Mul", inv_std, inv_std))
            grads[4] = g.op("Mul", g.op("Mul", centred_sum, scale), g.op("Mul", cubed, g.scalar(-0.5, var)))
    if node.wants(2):
        grads[2] = sum_dy
    if node.wants(3):
        assert sum_dy is not None
        grads[3] = g.op("Neg", g.op("Mul", sum_dy, g.op("Mul", scale, inv_std)))
    return grads


# --- layer, instance and group normalisation ----------------------------------------------------------------
@gradient("LayerNormalization")
def layer_normalization(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev) -> (dX, dScale, dBias), the
    node's attributes as they are. The node's optional Mean and InvStdDev outputs are declared where it
    leaves them out (torch exports one output). All three gradients are named: the kernel writes them all."""
    mean = g.forward_output(node, 1, "mean")
    inv_std = g.forward_output(node, 2, "inv_std_dev")
    names = [g.fresh(f"{node.inputs[0]}_grad"), g.fresh(f"{node.inputs[1]}_grad"), g.fresh("bias_grad")]
    g.node("LayerNormalizationGrad", [node.dy(), node.inputs[0], node.inputs[1], mean, inv_std], names, MICROSOFT,
           **_attributes(node))
    return [names[i] if node.wants(i) else None for i in range(3)]


def _grouped_normalization_grads(g: GradientContext, node: NodeView, groups: int, per_group_affine: bool) -> Grads:
    """Gradients of Y = scale * normalise(X over groups of channels and all spatial positions) + bias, with
    scale and bias per channel or per group (GroupNormalization-18). InstanceNormalization is the case of
    one group per channel. Statistics are recomputed; Reshape's 0 copies the batch (and channels), so
    symbolic sizes need no Shape."""
    x, scale = node.inputs[0], node.inputs[1]
    dy = node.dy()
    epsilon = float(node.attr("epsilon", 1e-5))
    grouped = g.ints([0, groups, -1])
    x3 = g.op("Reshape", x, grouped)
    centred = g.op("Sub", x3, _reduce_mean(g, x3, [2]))
    variance = _reduce_mean(g, g.op("Mul", centred, centred), [2])
    inv_std = g.op("Reciprocal", g.op("Sqrt", g.op("Add", variance, g.scalar(epsilon, x))))
    normalised = g.op("Mul", centred, inv_std)  # [N, G, M]
    dy3 = g.op("Reshape", dy, grouped)
    column = g.unsqueeze(scale, [1])  # [C or G, 1]
    by_channel = "" if per_group_affine else g.ints([0, 0, -1])  # read only where scale and bias are per channel
    if per_group_affine:
        dnormalised = g.op("Mul", dy3, column)
    else:
        dnormalised = g.op("Reshape", g.op("Mul", g.op("Reshape", dy, by_channel), column), grouped)
    grads: Grads = [None, None, None]
    if node.wants(0):
        mean_d = _reduce_mean(g, dnormalised, [2])
        mean_dn = _reduce_mean(g, g.op("Mul", dnormalised, normalised), [2])
        inner = g.op("Sub", g.op("Sub", dnormalised, mean_d), g.op("Mul", normalised, mean_dn))
        grads[0] = g.reshape_like(g.op("Mul", inner, inv_std), x)
    if per_group_affine:
        if node.wants(1):
            grads[1] = g.reduce_sum(g.op("Mul", dy3, normalised), [0, 2], keepdims=0)
        if node.wants(2):
            grads[2] = g.reduce_sum(dy3, [0, 2], keepdims=0)
    else:
        dy_c = g.op("Reshape", dy, by_channel)
        if node.wants(1):
            x_c = g.op("Reshape", x, by_channel)
            normalised_c = g.op("Reshape", normalised, g.op("Shape", x_c))
            grads[1] = g.reduce_sum(g.op("Mul", dy_c, normalised_c), [0, 2], keepdims=0)
        if node.wants(2):
            grads[2] = g.reduce_sum(dy_c, [0, 2], keepdims=0)
    return grads


@gradient("InstanceNormalization")
def instance_normalization(g: GradientContext, node: NodeView) -> Grads:
    dims = g.dims(node.inputs[0])
    channels = dims[1] if dims is not None and len(dims) >= 2 else None
    if not isinstance(channels, int):
        scale_dims = g.dims(node.inputs[1])
        channels = scale_dims[0] if scale_dims else None
    if not isinstance(channels, int):
        raise BuilderError(f"{node.describe()}: InstanceNormalization's gradient needs the channel count, which "
                           "shape inference could not tell")
    return _grouped_normalization_grads(g, node, channels, per_group_affine=False)


@gradient("GroupNormalization")
def group_normalization(g: GradientContext, node: NodeView) -> Grads:
    """Opset 18's scale and bias are per group, opset 21's per channel."""
    groups = node.attr("num_groups")
    if groups is None:
        raise BuilderError(f"{node.describe()}: GroupNormalization without num_groups")
    return _grouped_normalization_grads(g, node, int(groups), per_group_affine=g.opset < 21)
