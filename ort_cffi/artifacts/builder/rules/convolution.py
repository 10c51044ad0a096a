"""Convolutions and pools: ONNX Runtime's gradient kernels where its builder emits them and they are safe
(ConvGrad, AveragePoolGrad), standard operators elsewhere.

Two of ONNX Runtime 1.19.2's kernels cannot serve every model (docs/internals/runtime.md §8):
ConvTransposeGrad has no CPU kernel, and MaxPoolGrad and AveragePoolGrad size their output from the graph's
declared shape of the pool's input (a symbolic size reads as 0: a segfault or SIGFPE). So ConvTranspose's
gradient is a Conv and a ConvGrad (a ConvTranspose is the adjoint of a Conv with its weights); MaxPool's
scatters the incoming gradient through the pool's indices (bit-identical to MaxPoolGrad, which does the
same additions in the same order); AveragePool's is AveragePoolGrad where its kernel is given a static
shape and computes what the forward did, else the gradient of the equal depthwise convolution (ConvGrad).
LpPool's gradient goes through the same depthwise window sum; GlobalMaxPool's and LRN's are written out.
ConvGrad mishandles auto_pad SAME_*: Conv's gradient gets explicit pads there.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


def _attributes(node: NodeView, drop: Sequence[str] = ()) -> Dict[str, Any]:
    """The node's attributes as keyword arguments (strings as str), less ``drop``."""
    return {a.name: node.attr(a.name) for a in node.proto.attribute if a.name not in drop}


@gradient("Conv")
def conv(g: GradientContext, node: NodeView) -> Grads:
    """ConvGrad(dY, X, W) -> (dX, dW, dB), the forward node's attributes as they are (ONNX Runtime's form);
    an unwanted gradient is an omitted output. ConvGrad ignores auto_pad SAME_* (measured: wrong dX, NaN
    dW): those pads are worked out from the input's static sizes and given explicitly."""
    attributes = _attributes(node)
    if node.attr("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
        w_dims = g.static_shape(node.inputs[1])
        kernel = node.attr("kernel_shape") or (list(w_dims[2:]) if w_dims is not None else None)
        if kernel is None:
            raise BuilderError(f"{node.describe()}: its gradient needs the kernel's sizes (auto_pad="
                               f"{node.attr('auto_pad')}), which shape inference could not tell")
        spatial = len(kernel)
        attributes["pads"] = _pool_pads(g, node, [int(k) for k in kernel],
                                        [int(s) for s in node.attr("strides", [1] * spatial)],
                                        [int(d) for d in node.attr("dilations", [1] * spatial)])
        del attributes["auto_pad"]
    group = int(node.attr("group", 1))
    if group > 1 and _spatial_rank(g, node) != 2:
        return _conv_by_groups(g, node, attributes, group)
    outputs = [g.fresh(f"{node.inputs[i]}_grad") if node.wants(i) else "" for i in range(len(node.inputs))]
    g.node("ConvGrad", [node.dy(), node.inputs[0], node.inputs[1]], outputs, "com.microsoft", **attributes)
    return [name or None for name in outputs]


def _spatial_rank(g: GradientContext, node: NodeView) -> Optional[int]:
    kernel = node.attr("kernel_shape")
    if kernel:
        return len(kernel)
    rank = g.rank(node.inputs[1])
    return None if rank is None else rank - 2


def _conv_by_groups(g: GradientContext, node: NodeView, attributes: Dict[str, Any], group: int) -> Grads:
    """A grouped convolution of other than 2 spatial axes: one ConvGrad per group, the results concatenated.
    ONNX Runtime 1.19.2's ConvGrad cannot take it: outside its 2-D path it clears and fills each group's dX
    as if the group held every channel, writing past the end of dX (measured: wrong gradients once the
    memory after dX holds a live value)."""
    x, w = node.inputs[0], node.inputs[1]
    x_dims, w_dims = g.dims(x), g.dims(w)
    channels = x_dims[1] if x_dims is not None and len(x_dims) > 1 else None
    maps = w_dims[0] if w_dims is not None else None
    if not isinstance(channels, int) or not isinstance(maps, int):
        raise BuilderError(f"{node.describe()}: the gradient of a grouped convolution over other than 2 axes is "
                           "computed group by group, which needs the channel counts of its input and weights; "
                           "shape inference could not tell them")
    per_group = {key: value for key, value in attributes.items() if key != "group"}
    inputs = [x, w] + ([node.inputs[2]] if node.has_input(2) else [])

    def part(value: str, axis: int, size: int, index: int) -> str:
        return g.op("Slice", value, g.ints([index * size]), g.ints([(index + 1) * size]), g.ints([axis]))

    pieces: List[List[str]] = [[], [], []]
    for index in range(group):
        outputs = [g.fresh(f"{inputs[i]}_grad") if node.wants(i) else "" for i in range(len(inputs))]
        g.node("ConvGrad", [part(node.dy(), 1, maps // group, index), part(x, 1, channels // group, index),
                            part(w, 0, maps // group, index)], outputs, "com.microsoft", **per_group)
        for position, name in enumerate(outputs):
            if name:
                pieces[position].append(name)
    return [g.op("Concat", *found, axis=1 if position == 0 else 0) if found else None
            for position, found in enumerate(pieces[:len(inputs)])]


def _transpose_pads(g: GradientContext, node: NodeView) -> Tuple[List[int], List[int], List[int]]:
    """(strides, dilations, pads) of a ConvTranspose, its pads explicit: with output_shape or auto_pad
    SAME_*, the total padding s (in - 1) + output_padding + (k - 1) d + 1 - out worked out from the static
    sizes and split as ONNX Runtime's forward splits it (measured): the odd one at the tail for SAME_UPPER,
    at the head for SAME_LOWER and for output_shape."""
    w_dims = g.static_shape(node.inputs[1])
    kernel = node.attr("kernel_shape") or (list(w_dims[2:]) if w_dims is not None else None)
    if kernel is None:
        raise BuilderError(f"{node.describe()}: ConvTranspose's gradient needs the kernel's sizes, which shape "
                           "inference could not tell")
    spatial = len(kernel)
    strides = [int(v) for v in node.attr("strides", [1] * spatial)]
    dilations = [int(v) for v in node.attr("dilations", [1] * spatial)]
    auto_pad = node.attr("auto_pad", "NOTSET")
    output_shape = node.attr("output_shape")
    if output_shape is None and auto_pad == "NOTSET":
        return strides, dilations, [int(p) for p in node.attr("pads", [0] * (2 * spatial))]
    if output_shape is None and auto_pad == "VALID":
        return strides, dilations, [0] * (2 * spatial)
    sizes = _spatial_sizes(g, node.inputs[0])
    if sizes is None:
        raise BuilderError(f"{node.describe()}: ConvTranspose's gradient needs explicit pads, and "
                           f"{'output_shape' if output_shape is not None else f'auto_pad={auto_pad}'} leaves them to "
                           "the input's sizes, which shape inference could not tell")
    adjust = [int(v) for v in node.attr("output_padding", [0] * spatial)]
    if output_shape is not None:
        outs = [int(v) for v in output_shape][-spatial:]
    else:
        outs = [n * s for n, s in zip(sizes, strides)]
    heads, tails = [], []
    for n, k, s, d, a, out in zip(sizes, kernel, strides, dilations, adjust, outs):
        total = max(0, s * (n - 1) + a + (int(k) - 1) * d + 1 - out)
        head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        heads.append(head)
        tails.append(total - head)
    return strides, dilations, heads + tails


@gradient("ConvTranspose")
def conv_transpose(g: GradientContext, node: NodeView) -> Grads:
    """Y = ConvTranspose(X, W) is the adjoint of Z -> Conv(Z, W) with the same strides, pads, dilations and
    groups. So dX = Conv(dY, W), and <Y, dY> = <X, Conv(dY, W)> makes dW the weight gradient of that Conv
    with input dY and output gradient X: ConvGrad(X, dY, W)'s second output. output_padding only adds
    trailing rows that no window of the Conv starts in."""
    strides, dilations, pads = _transpose_pads(g, node)
    x, w = node.inputs[0], node.inputs[1]
    dy = node.dy()
    shared: Dict[str, Any] = {"strides": strides, "dilations": dilations, "pads": pads,
                              "group": node.attr("group", 1)}
    if node.attr("kernel_shape") is not None:
        shared["kernel_shape"] = node.attr("kernel_shape")
    dx = g.op("Conv", dy, w, **shared) if node.wants(0) else None
    dw = None
    if node.wants(1):
        dw = g.fresh(f"{w}_grad")
        g.node("ConvGrad", [x, dy, w], ["", dw], "com.microsoft", **shared)
    db = None
    if node.has_input(2) and node.wants(2):
        rank = g.rank(dy)
        if rank is None:
            raise BuilderError(f"{node.describe()}: the bias gradient needs the rank of the output")
        db = g.reduce_sum(dy, [0] + list(range(2, rank)), keepdims=0)
    return [dx, dw, db]


# --- pools ---------------------------------------------------------------------------------------------------
@gradient("MaxPool", inputs=(0,))
def max_pool(g: GradientContext, node: NodeView) -> Grads:
    """dY added into zeros at the pool's indices (output 1, declared where the node leaves it out):
    MaxPoolGrad where the input's sizes but the batch are static, else a scatter. Each index counts over
    the whole input tensor, so the scatter runs on flattened tensors. ScatterElements
    with reduction 'add' from opset 16, else ONNX Runtime's GatherElementsGrad (the same scatter-add).
    Column-major indices (storage_order=1) are made row-major first."""
    x = node.inputs[0]
    indices = g.forward_output(node, 1, "indices")
    dims = g.dims(x)
    if node.attr("storage_order", 0) == 0 and dims is not None and len(dims) >= 3 \
            and all(isinstance(d, int) for d in dims[1:]):
        # ONNX Runtime's MaxPoolGrad, as its builder emits it: the same additions in the same order, several
        # times faster than the scatter. It takes the batch from dY and the other sizes from dX's declared
        # shape (a symbolic one reads as 0: docs/internals/runtime.md), so only where those are static.
        dx = g.fresh(f"{x}_grad")
        g.node("MaxPoolGrad", [node.dy(), indices], [dx])
        g.declare(dx, x)
        return [dx]
    if node.attr("storage_order", 0) != 0:
        indices = _row_major_indices(g, node, indices)
    flat = g.ints([-1])
    updates = g.op("Reshape", node.dy(), flat)
    where = g.op("Reshape", indices, flat)
    if g.opset >= 16:
        zero = helper.make_tensor("zero", g.elem_type(x), [1], [0.0])
        zeros = g.op("Reshape", g.op("ConstantOfShape", g.shape(x), value=zero), flat)
        scattered = g.op("ScatterElements", zeros, where, updates, axis=0, reduction="add")
    else:
        size = g.op("Reshape", g.op("Size", x), g.ints([1]))
        scattered = g.ms("GatherElementsGrad", updates, size, where, axis=0)[0]
    return [g.reshape_like(scattered, x)]


def _row_major_indices(g: GradientContext, node: NodeView, indices: str) -> str:
    """With storage_order=1 a 2-D MaxPool counts its indices column-major within each image, base + w H + h
    (measured); the same elements' row-major indices, base + h W + w, from the input's static sizes."""
    sizes = _spatial_sizes(g, node.inputs[0])
    if sizes is None or len(sizes) > 2:
        raise BuilderError(f"{node.describe()}: with storage_order=1 MaxPool's gradient needs a 1-D or 2-D pool "
                           "whose input's spatial sizes shape inference can tell")
    if len(sizes) == 1:
        return indices  # one spatial axis: both orders agree
    height, width = sizes

    def scalar(value: int) -> str:
        return g.const(np.array(value, dtype=np.int64), hint="ints")

    within = g.op("Mod", indices, scalar(height * width))
    row, column = g.op("Mod", within, scalar(height)), g.op("Div", within, scalar(height))
    return g.op("Add", g.op("Sub", indices, within), g.op("Add", g.op("Mul", row, scalar(width)), column))


def _kernel_serves_average_pool(g: GradientContext, node: NodeView) -> bool:
    """Whether AveragePoolGrad computes this pool's gradient: its kernel reads the input's declared shape
    (all sizes static) and the begin pads (auto_pad SAME's are not in the attributes), takes its windows from
    dY's shape (ceil_mode's too), knows no dilations, and runs 1-D and 2-D pools."""
    shape = g.static_shape(node.inputs[0])
    if shape is None or len(shape) not in (3, 4):
        return False
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return False
    return all(d == 1 for d in node.attr("dilations", [1] * (len(shape) - 2)))


@gradient("AveragePool", inputs=(0,))
def average_pool(g: GradientContext, node: NodeView) -> Grads:
    x = node.inputs[0]
    if _kernel_serves_average_pool(g, node):
        dx = g.fresh(f"{x}_grad")
        g.node("AveragePoolGrad", [node.dy()], [dx], **_attributes(node))  # ONNX Runtime's, in the default domain
        g.declare(dx, x)
        return [dx]
    return [_average_pool_by_conv(g, node)]


def _pool_window(g: GradientContext, node: NodeView) -> Tuple[int, List[int], Dict[str, Any], bool]:
    """(channels, kernel, the attributes of the depthwise convolution with the pool's windows, whether
    some windows reach into padding): pads explicit, ceil_mode's extra windows as extra end padding."""
    dims = g.dims(node.inputs[0])
    kernel = [int(k) for k in node.attr("kernel_shape")]
    spatial = len(kernel)
    channels = dims[1] if dims is not None and len(dims) == spatial + 2 else None
    if not isinstance(channels, int):
        raise BuilderError(f"{node.describe()}: {node.op_type}'s gradient needs its input's channel count, which "
                           "shape inference could not tell")
    strides = [int(s) for s in node.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in node.attr("dilations", [1] * spatial)]
    pads = _pool_pads(g, node, kernel, strides, dilations)
    extra = _ceil_extra(g, node, kernel, strides, dilations, pads)
    conv_pads = pads[:spatial] + [p + e for p, e in zip(pads[spatial:], extra)]
    conv: Dict[str, Any] = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": conv_pads}
    return channels, kernel, conv, any(conv_pads)


def _depthwise_back(g: GradientContext, node: NodeView, dy: str, channels: int, kernel: List[int],
                    conv: Dict[str, Any]) -> str:
    """The input gradient of the depthwise convolution of ``node``'s input with ones over the pool's
    windows, for the output gradient ``dy``: each window's value spread over its taps."""
    x = node.inputs[0]
    dx = g.fresh(f"{x}_grad")
    if len(kernel) == 2:
        g.node("ConvGrad", [dy, x, g.const(np.ones([channels, 1] + kernel), x)], [dx, ""], "com.microsoft",
               group=channels, **conv)
        return dx
    # Outside 2-D, ONNX Runtime's grouped ConvGrad writes out of bounds (``_conv_by_groups``): the
    # windows are the same for every channel, so the channels go into the batch, through one channel.
    def one_channel(value: str) -> str:
        spatial = g.op("Slice", g.op("Shape", value), g.ints([2]), g.ints([2 + len(kernel)]), g.ints([0]))
        return g.op("Reshape", value, g.op("Concat", g.ints([-1, 1]), spatial, axis=0))

    g.node("ConvGrad", [one_channel(dy), one_channel(x), g.const(np.ones([1, 1] + kernel), x)], [dx, ""],
           "com.microsoft", **conv)
    return g.reshape_like(dx, x)


def _average_pool_by_conv(g: GradientContext, node: NodeView) -> str:
    """The gradient of an average pool written as a depthwise convolution with ones: dX =
    ConvGrad(dY / counts, X, ones), where counts is the number of taps each window divides by (its full
    size with count_include_pad=1, else the taps inside the input)."""
    x = node.inputs[0]
    channels, kernel, conv, padded = _pool_window(g, node)
    dy = node.dy()
    if node.attr("count_include_pad", 0) or not padded:
        # Every window divides by its full size. (A window ceil_mode adds past the end pads divides by less
        # on releases after 1.19.2: spec_forms.py writes such a pool out before it is differentiated.)
        dy = g.op("Mul", dy, g.scalar(1.0 / int(np.prod(kernel)), x))
    else:
        # Each window divides by the number of its taps inside the input: the same windows over ones.
        spatial = len(kernel)
        sizes = g.op("Slice", g.shape(x), g.ints([2]), g.ints([2 + spatial]), g.ints([0]))
        one = helper.make_tensor("one", g.elem_type(x), [1], [1.0])
        region = g.op("ConstantOfShape", g.op("Concat", g.ints([1, 1]), sizes, axis=0), value=one)
        counts = g.op("Conv", region, g.const(np.ones([1, 1] + kernel), x), **conv)
        dy = g.op("Div", dy, counts)
    return _depthwise_back(g, node, dy, channels, kernel, conv)


@gradient("LpPool", inputs=(0,))
def lp_pool(g: GradientContext, node: NodeView) -> Grads:
    """Y = (sum over each window of |X|^p)^(1/p), a depthwise convolution of |X|^p with ones, to the power
    1/p: dX = ConvGrad(dY / Y^(p-1), X, ones) * |X|^(p-1) sign(X). A window of zeros (Y = 0) passes
    nothing back: its inputs' factor |X|^(p-1) is 0."""
    x, y = node.inputs[0], node.outputs[0]
    p = int(node.attr("p", 2))
    channels, kernel, conv, _ = _pool_window(g, node)
    dy = node.dy()
    if p != 1:
        powered = y if p == 2 else g.op("Pow", y, g.scalar(float(p - 1), y))
        is_zero = g.op("Equal", powered, g.scalar(0.0, y))
        dy = g.op("Div", dy, g.op("Where", is_zero, g.scalar(1.0, y), powered))
    back = _depthwise_back(g, node, dy, channels, kernel, conv)
    if p == 1:
        factor = g.op("Sign", x)
    elif p == 2:
        factor = x
    else:
        factor = g.op("Mul", g.op("Pow", g.op("Abs", x), g.scalar(float(p - 1), x)), g.op("Sign", x))
    return [g.same_type(g.op("Mul", back, factor), x)]


@gradient("LRN", inputs=(0,))
def lrn(g: GradientContext, node: NodeView) -> Grads:
    """Y = X D^-beta with D = bias + alpha / size * (sum of X^2 over a window of channels, from
    c - floor((size-1)/2) to c + ceil((size-1)/2)). dX = dY D^-beta - 2 alpha beta / size * X * (the sum of
    dY X D^(-beta-1) over the mirrored window): each channel collects from the channels whose window holds
    it."""
    x = node.inputs[0]
    rank = g.rank(x)
    if rank is None:
        raise BuilderError(f"{node.describe()}: LRN's gradient needs the rank of its input, which shape inference "
                           "could not tell")
    size = int(node.attr("size"))
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = _channel_window_sum(g, g.op("Mul", x, x), below, above, size, rank)
    d = g.op("Add", g.op("Mul", squares, g.scalar(alpha / size, x)), g.scalar(bias, x))
    d_beta = g.op("Pow", d, g.scalar(-beta, x))
    dy = node.dy()
    direct = g.op("Mul", dy, d_beta)
    collected = g.op("Div", g.op("Mul", g.op("Mul", dy, x), d_beta), d)  # dY X D^(-beta-1)
    mirrored = _channel_window_sum(g, collected, above, below, size, rank)
    cross = g.op("Mul", g.op("Mul", mirrored, x), g.scalar(-2.0 * alpha * beta / size, x))
    return [g.same_type(g.op("Add", direct, cross), x)]


def _channel_window_sum(g: GradientContext, value: str, below: int, above: int, size: int, rank: int) -> str:
    """For each channel c, the sum of ``value`` over channels c - below .. c + above (zeros past the ends):
    ``size`` slices of the channel-padded value, which needs no static channel count."""
    padded = g.op("Pad", value, g.ints([0, below] + [0] * (rank - 2) + [0, above] + [0] * (rank - 2)))
    parts = []
    for k in range(size):
        end = k - (size - 1)
        parts.append(g.op("Slice", padded, g.ints([k]), g.ints([end if end < 0 else np.iinfo(np.int64).max]),
                          g.ints([1])))
    return parts[0] if len(parts) == 1 else g.op("Sum", *parts)


def _pool_pads(g: GradientContext, node: NodeView, kernel: List[int], strides: List[int],
               dilations: List[int]) -> List[int]:
    """The explicit pads of a pool or convolution; auto_pad SAME_* worked out from the input's static sizes
    (SAME_UPPER puts the odd one at the end)."""
    spatial = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        return [int(p) for p in node.attr("pads", [0] * (2 * spatial))]
    if auto_pad == "VALID":
        return [0] * (2 * spatial)
    sizes = _spatial_sizes(g, node.inputs[0])
    if sizes is None or len(sizes) != spatial:
        raise BuilderError(f"{node.describe()}: its gradient needs explicit pads, and auto_pad={auto_pad} leaves "
                           "them to the input's sizes, which shape inference could not tell")
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(total - small if auto_pad == "SAME_LOWER" else small)
        ends.append(small if auto_pad == "SAME_LOWER" else total - small)
    return begins + ends


def _spatial_sizes(g: GradientContext, name: str) -> Optional[List[int]]:
    """The sizes of ``name`` past batch and channels when all are static, else None."""
    dims = g.dims(name)
    if dims is None or len(dims) < 3:
        return None
    sizes = [d for d in dims[2:] if isinstance(d, int)]
    return sizes if len(sizes) == len(dims) - 2 else None


def _ceil_extra(g: GradientContext, node: NodeView, kernel: List[int], strides: List[int], dilations: List[int],
                pads: List[int]) -> List[int]:
    """The end padding a convolution needs to have the windows ceil_mode=1 adds (none for ceil_mode=0): from
    the pool's static output sizes."""
    spatial = len(kernel)
    if not node.attr("ceil_mode", 0):
        return [0] * spatial
    x_sizes, y_sizes = _spatial_sizes(g, node.inputs[0]), _spatial_sizes(g, node.outputs[0])
    if x_sizes is None or y_sizes is None:
        raise BuilderError(f"{node.describe()}: with ceil_mode=1 its gradient needs the spatial sizes of its input "
                           "and output, which shape inference could not tell")
    extra = []
    for i in range(spatial):
        reach = x_sizes[i] + pads[i] + pads[spatial + i]
        needed = (y_sizes[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        extra.append(max(needed - reach, 0))
    return extra


@gradient("GlobalAveragePool")
def global_average_pool(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's form: dY scaled down by the window (a constant when the spatial sizes are static, else
    Size(X) / Size(Y)) with com.microsoft Scale, expanded to X's shape."""
    x, y = node.inputs[0], node.outputs[0]
    sizes = _spatial_sizes(g, x)
    if sizes:
        scale = g.scalar(float(np.prod(np.array(sizes, dtype=np.int64))), x)
    else:
        scale = g.op("Div", g.op("Size", x), g.op("Size", y))
    scaled = g.ms("Scale", node.dy(), scale, scale_down=1)[0]
    return [g.same_type(g.op("Expand", scaled, g.shape(x)), x)]


@gradient("GlobalMaxPool")
def global_max_pool(g: GradientContext, node: NodeView) -> Grads:
    """dY to every element equal to its channel's maximum (ONNX Runtime's later builder does the same)."""
    x, y = node.inputs[0], node.outputs[0]
    shape = g.shape(x)
    mask = g.op("Cast", g.op("Equal", x, g.op("Expand", y, shape)), to=g.elem_type(x))
    return [g.same_type(g.op("Mul", mask, g.op("Expand", node.dy(), shape)), x)]
