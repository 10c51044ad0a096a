"""The catalogue of ``prepare``'s rewrites (rewrites.py, the engine): one rule per operator type.

``REWRITES``: operators without a gradient builder in ONNX Runtime 1.19.2 (or, ConvTranspose, without a CPU
kernel for the gradient it builds), each replaced by an equal subgraph of operators that have one.
``ZERO_GRADIENT``: Floor, Ceil, Round and Sign, whose derivative is zero almost everywhere, computed from
integer casts and comparisons where the builder stops by design: they pass no gradient, and their forward
values are the operator's (exactly, for every float32 input; see ``_floor_parts``).

Each rule takes (emitter, node, prep): the engine's emitter for this node (unique names, constants, the
opset's forms of Reduce, Squeeze, ...) and the preparation (shapes by tensor name, constants, ``refuse``);
it emits nodes whose last writes the node's output(s) under the same names. Each is proved in
tests/apps/test_graph_rewrites.py (forward values and finite differences).

Python 3.8 syntax, the standard library, numpy and onnx only: the artifacts child loads it by file
location (graph_facts.py says how the graph modules find each other).
"""
import importlib
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))

__all__ = ["REWRITES", "ZERO_GRADIENT", "softplus_of"]


def _axes_of(prep, node, from_input):
    """The axes of a Reduce node as a list, or None when absent (reduce over all). ``from_input``: the opset
    form that reads them from input 1, which must then be a constant."""
    if from_input:
        if len(node.input) < 2 or not node.input[1]:
            return None
        value = prep.constants.get(node.input[1])
        if value is None:
            raise prep.refuse(node, "its axes (input {!r}) are computed in the graph; the rewrite needs them "
                                    "constant".format(node.input[1]))
        return [int(a) for a in numpy_helper.to_array(value).ravel()]
    axes = graph_facts.attributes(node).get("axes")
    return None if axes is None else [int(a) for a in axes]


def _normalized_axes(axes, rank):
    return sorted(set(a + rank if a < 0 else a for a in axes))


def _hard_sigmoid_of(e, x, alpha, beta):
    """max(0, min(1, alpha * x + beta)) with Clip (gradient registered; its bounds are stop edges)."""
    linear = e.one("Add", [e.one("Mul", [x, e.const(alpha)]), e.const(beta)])
    if e.opset >= 11:
        return e.one("Clip", [linear, e.const(0.0), e.const(1.0)])
    return e.one("Clip", [linear], min=0.0, max=1.0)


def rewrite_hard_sigmoid(e, node, prep):
    a = graph_facts.attributes(node)
    x = _hard_sigmoid_of(e, node.input[0], a.get("alpha", 0.2), a.get("beta", 0.5))
    e.one("Identity", [x], node.output[0])


def rewrite_hard_swish(e, node, prep):
    # HardSwish(x) = x * HardSigmoid(x, alpha=1/6, beta=0.5); x is read by Mul once and by the Clip chain
    # once, so no node reads it twice.
    gate = _hard_sigmoid_of(e, node.input[0], 1.0 / 6.0, 0.5)
    e.one("Mul", [node.input[0], gate], node.output[0])


def softplus_of(e, x, output=None):
    """log(1 + exp(x)) as Relu(x) + log1p(exp(-|x|)): no overflow for large x. ONNX has no log1p: with
    u = exp(-|x|) <= 1 and w = 1 + u rounded, log1p(u) = log(w) - ((w - 1) - u) / w to first order, where
    (w - 1) - u is the rounding error of w, computed exactly; without it, log(w) is off by up to 2**-25
    absolute (all of u for x < -17). The correction's derivative is zero, so the gradient stays 1 / w.
    ort_cffi's builder writes Softplus in this form too (builder/lowering.py), through ``e.one`` and
    ``e.const`` alone."""
    u = e.one("Exp", [e.one("Neg", [e.one("Abs", [x])])])
    w = e.one("Add", [e.const(1.0), u])
    error = e.one("Sub", [e.one("Sub", [w, e.const(1.0)]), u])
    log1p = e.one("Sub", [e.one("Log", [w]), e.one("Div", [error, e.one("Identity", [w])])])
    return e.one("Add", [e.one("Relu", [x]), log1p], output)


def rewrite_softplus(e, node, prep):
    softplus_of(e, node.input[0], node.output[0])


def rewrite_mish(e, node, prep):
    # Mish(x) = x * tanh(softplus(x)) (opset 18).
    e.one("Mul", [node.input[0], e.one("Tanh", [softplus_of(e, node.input[0])])], node.output[0])


def _elu_of(e, x, alpha):
    """Relu(x) + alpha * (exp(min(x, 0)) - 1): x for x > 0, alpha * (exp(x) - 1) otherwise."""
    negative = e.one("Sub", [e.one("Exp", [e.relu_of_neg(x)]), e.const(1.0)])
    return e.one("Add", [e.one("Relu", [x]), e.one("Mul", [negative, e.const(alpha)])])


def rewrite_elu(e, node, prep):
    e.one("Identity", [_elu_of(e, node.input[0], graph_facts.attributes(node).get("alpha", 1.0))], node.output[0])


def rewrite_selu(e, node, prep):
    a = graph_facts.attributes(node)
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    e.one("Mul", [_elu_of(e, node.input[0], alpha), e.const(gamma)], node.output[0])


def rewrite_celu(e, node, prep):
    # Celu(x) = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = Relu(x) + alpha * (exp(min(x, 0) / alpha) - 1)
    # for alpha > 0 (the sign of exp(x / alpha) - 1 is that of x).
    alpha = graph_facts.attributes(node).get("alpha", 1.0)
    scaled = e.one("Div", [e.relu_of_neg(node.input[0]), e.const(alpha)])
    negative = e.one("Mul", [e.one("Sub", [e.one("Exp", [scaled]), e.const(1.0)]), e.const(alpha)])
    e.one("Add", [e.one("Relu", [node.input[0]]), negative], node.output[0])


def rewrite_softsign(e, node, prep):
    x = node.input[0]
    e.one("Div", [x, e.one("Add", [e.const(1.0), e.one("Abs", [x])])], node.output[0])


def rewrite_prelu(e, node, prep):
    # PRelu(x, slope) = Relu(x) + slope * min(x, 0); slope broadcasts to x (unidirectionally), as in Mul.
    x, slope = node.input[0], node.input[1]
    e.one("Add", [e.one("Relu", [x]), e.one("Mul", [e.relu_of_neg(x), slope])], node.output[0])


def rewrite_thresholded_relu(e, node, prep):
    # x where x > alpha, else 0: Where's condition is a stop edge, its data inputs have gradients.
    x = node.input[0]
    condition = e.one("Greater", [x, e.const(graph_facts.attributes(node).get("alpha", 1.0))])
    e.one("Where", [condition, x, e.const(0.0)], node.output[0])


def _add_chain(e, inputs, output):
    """inputs[0] + inputs[1] + ... in input order (Sum and Mean broadcast like Add)."""
    if len(inputs) == 1:
        return e.one("Identity", [inputs[0]], output)
    total = inputs[0]
    for i, name in enumerate(inputs[1:]):
        total = e.one("Add", [total, name], output if i == len(inputs) - 2 else None)
    return total


def rewrite_sum(e, node, prep):
    _add_chain(e, list(node.input), node.output[0])


def rewrite_mean(e, node, prep):
    total = _add_chain(e, list(node.input), None)
    e.one("Div", [total, e.const(float(len(node.input)))], node.output[0])


def rewrite_sinh(e, node, prep):
    # (exp(x) - exp(-x)) / 2; for |x| << 1 the difference cancels: absolute error about 2**-24.
    x = node.input[0]
    difference = e.one("Sub", [e.one("Exp", [x]), e.one("Exp", [e.one("Neg", [x])])])
    e.one("Mul", [difference, e.const(0.5)], node.output[0])


def rewrite_cosh(e, node, prep):
    x = node.input[0]
    total = e.one("Add", [e.one("Exp", [x]), e.one("Exp", [e.one("Neg", [x])])])
    e.one("Mul", [total, e.const(0.5)], node.output[0])


def rewrite_tan(e, node, prep):
    x = node.input[0]
    e.one("Div", [e.one("Sin", [x]), e.one("Cos", [x])], node.output[0])


def _normalize_last(e, x, epsilon, axes):
    """(x - mean) / sqrt(var + epsilon) over ``axes`` (biased variance, as the normalization operators)."""
    mean = e.reduce("ReduceMean", x, axes, keepdims=1)
    centered = e.one("Sub", [x, mean])
    square = e.one("Mul", [centered, e.one("Identity", [centered])])  # not Mul(c, c): one read per input
    variance = e.reduce("ReduceMean", square, axes, keepdims=1)
    deviation = e.one("Sqrt", [e.one("Add", [variance, e.const(epsilon)])])
    return e.one("Div", [centered, deviation])


def _per_channel(e, value, rank):
    """A (C,) tensor reshaped to (C, 1, ..., 1) to broadcast against (N, C, D1, ...) of ``rank``."""
    return e.one("Reshape", [value, e.i64([-1] + [1] * (rank - 2))])


def rewrite_instance_normalization(e, node, prep):
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    rank = prep.rank(x, node)
    normalized = _normalize_last(e, x, graph_facts.attributes(node).get("epsilon", 1e-5), list(range(2, rank)))
    scaled = e.one("Mul", [normalized, _per_channel(e, scale, rank)])
    e.one("Add", [scaled, _per_channel(e, bias, rank)], node.output[0])


def rewrite_group_normalization(e, node, prep):
    # Opset 18: scale and bias per group (num_groups,); opset 21: per channel (C,), and the statistics in
    # stash_type (default float32) whatever the input type. Statistics over each group of C / num_groups
    # channels and all spatial positions.
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    a = graph_facts.attributes(node)
    groups = int(a["num_groups"])
    rank = prep.rank(x, node)
    per_channel = e.opset >= 21
    stash = int(a.get("stash_type", TensorProto.FLOAT)) if per_channel else e.elem_type
    original = e.elem_type
    if stash != original:
        x = e.cast(x, stash)
        e.elem_type = stash
    grouped = e.one("Reshape", [x, e.i64([0, groups, -1])])
    normalized = _normalize_last(e, grouped, a.get("epsilon", 1e-5), [2])
    if not per_channel:
        normalized = e.one("Add", [e.one("Mul", [normalized, e.one("Reshape", [scale, e.i64([-1, 1])])]),
                                   e.one("Reshape", [bias, e.i64([-1, 1])])])
        e.one("Reshape", [normalized, e.one("Shape", [x])], node.output[0])
        return
    shaped = e.one("Reshape", [normalized, e.one("Shape", [x])])
    if stash != original:
        shaped = e.cast(shaped, original)
        e.elem_type = original
    scaled = e.one("Mul", [shaped, _per_channel(e, scale, rank)])
    e.one("Add", [scaled, _per_channel(e, bias, rank)], node.output[0])


def _reduce_by_topk(e, prep, node, x, axes, keepdims, largest, output):
    """ReduceMax (largest) or ReduceMin over ``axes`` (None: all) with TopK(k=1): the reduced axes are moved
    last and flattened into one. The gradient goes to the element TopK picks (one of equal maxima)."""
    rank = prep.rank(x, node)
    axes = list(range(rank)) if not axes else _normalized_axes(axes, rank)
    kept = [i for i in range(rank) if i not in axes]
    perm = kept + axes
    moved = x if perm == list(range(rank)) else e.one("Transpose", [x], perm=perm)
    if len(axes) == 1 and axes[0] == rank - 1 and keepdims:
        return e.topk1(moved, largest, output)
    flat = moved if len(axes) == 1 and axes[0] == rank - 1 else e.one("Reshape", [moved, e.i64([0] * len(kept) + [-1])])
    picked = e.topk1(flat, largest)
    if not keepdims:
        return e.squeeze(picked, [len(kept)], output)
    return e.unsqueeze(e.squeeze(picked, [len(kept)]), axes, output)


def _reduce_extreme(largest):
    def rewrite(e, node, prep):
        a = graph_facts.attributes(node)
        axes = _axes_of(prep, node, e.opset >= 18)
        if not axes and a.get("noop_with_empty_axes", 0):
            e.one("Identity", [node.input[0]], node.output[0])
            return
        _reduce_by_topk(e, prep, node, node.input[0], axes, a.get("keepdims", 1), largest, node.output[0])
    return rewrite


def rewrite_global_max_pool(e, node, prep):
    rank = prep.rank(node.input[0], node)
    _reduce_by_topk(e, prep, node, node.input[0], list(range(2, rank)), 1, True, node.output[0])


def _reduce_sum_of(e, node, prep, value, output):
    """ReduceSum of ``value`` with the node's axes, keepdims and noop_with_empty_axes (opset forms)."""
    a = graph_facts.attributes(node)
    axes = _axes_of(prep, node, e.opset >= 18)
    noop = a.get("noop_with_empty_axes", 0)
    if not axes and noop:
        return e.one("Identity", [value], output)
    return e.reduce("ReduceSum", value, axes or None, a.get("keepdims", 1), output)


def rewrite_reduce_sum_square(e, node, prep):
    x = node.input[0]
    _reduce_sum_of(e, node, prep, e.one("Mul", [x, e.one("Identity", [x])]), node.output[0])


def rewrite_reduce_l1(e, node, prep):
    _reduce_sum_of(e, node, prep, e.one("Abs", [node.input[0]]), node.output[0])


def rewrite_reduce_log_sum(e, node, prep):
    e.one("Log", [_reduce_sum_of(e, node, prep, node.input[0], None)], node.output[0])


def _dims(e, x):
    """N, C, H, W of a rank-4 tensor as int64 tensors of shape (1,) (Shape is a stop edge)."""
    shape = e.one("Shape", [x])
    return [e.one("Gather", [shape, e.i64([i])], axis=0) for i in range(4)]


def rewrite_depth_to_space(e, node, prep):
    x = node.input[0]
    a = graph_facts.attributes(node)
    b = int(a["blocksize"])
    n, _, h, w = _dims(e, x)
    block = e.i64([b])
    if a.get("mode", b"DCR") in (b"CRD", "CRD"):
        first = e.one("Concat", [n, e.i64([-1, b, b]), h, w], axis=0)
        perm = [0, 1, 4, 2, 5, 3]
    else:
        first = e.one("Concat", [n, e.i64([b, b, -1]), h, w], axis=0)
        perm = [0, 3, 4, 1, 5, 2]
    moved = e.one("Transpose", [e.one("Reshape", [x, first])], perm=perm)
    last = e.one("Concat", [n, e.i64([-1]), e.one("Mul", [h, block]), e.one("Mul", [w, block])], axis=0)
    e.one("Reshape", [moved, last], node.output[0])


def rewrite_space_to_depth(e, node, prep):
    x = node.input[0]
    b = int(graph_facts.attributes(node)["blocksize"])
    n, c, h, w = _dims(e, x)
    block = e.i64([b])
    hb, wb = e.one("Div", [h, block]), e.one("Div", [w, block])
    first = e.one("Concat", [n, c, hb, block, wb, e.i64([b])], axis=0)
    moved = e.one("Transpose", [e.one("Reshape", [x, first])], perm=[0, 3, 5, 1, 2, 4])
    e.one("Reshape", [moved, e.one("Concat", [n, e.i64([-1]), hb, wb], axis=0)], node.output[0])


TO_THE_END = 2 ** 31 - 1  # a Slice end past any axis


def rewrite_conv_transpose(e, node, prep):
    # ONNX Runtime 1.19.2 registers a gradient for ConvTranspose but has no CPU kernel for ConvTransposeGrad
    # (the training session refuses to load). A transposed convolution is a convolution of the input
    # dilated by the strides (s - 1 zeros between elements), padded by d (k - 1) - pads on each side (plus
    # output_padding at the end), with the kernel's in/out channels swapped per group and its taps flipped.
    a = graph_facts.attributes(node)
    x, w = node.input[0], node.input[1]
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if a.get("output_shape") or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise prep.refuse(node, "its rewrite into Conv needs explicit pads, and it sets output_shape or auto_pad "
                                "(export it with explicit padding)")
    w_shape = prep.types.get(w, (0, None))[1]
    if not w_shape or any(d is None for d in w_shape):
        raise prep.refuse(node, "its rewrite into Conv needs the shape of its weights {!r}".format(w))
    spatial = len(w_shape) - 2
    kernel = list(w_shape[2:])
    strides = list(a.get("strides", [1] * spatial))
    dilations = list(a.get("dilations", [1] * spatial))
    pads = list(a.get("pads", [0] * (2 * spatial)))
    extra = list(a.get("output_padding", [0] * spatial))
    group = int(a.get("group", 1))
    # The input, dilated: [N, C, D1, 1, D2, 1, ...] padded to [N, C, D1, s1, D2, s2, ...], reshaped to
    # [N, C, D1 s1, D2 s2, ...] and the trailing s - 1 zeros sliced off.
    if any(stride > 1 for stride in strides):
        rank = 2 + 2 * spatial
        spread = e.unsqueeze(x, [3 + 2 * i for i in range(spatial)])
        ends = [0] * rank
        for i, stride in enumerate(strides):
            ends[3 + 2 * i] = stride - 1
        spread = e.one("Pad", [spread, e.i64([0] * rank + ends)], mode="constant")
        shape = e.one("Shape", [x])
        sizes = [e.i64([0, 0])]
        for i, stride in enumerate(strides):
            size = e.one("Gather", [shape, e.i64([2 + i])], axis=0)
            sizes.append(e.one("Mul", [size, e.i64([stride])]))
        spread = e.one("Reshape", [spread, e.one("Concat", sizes, axis=0)])
        cut = [i for i, stride in enumerate(strides) if stride > 1]
        x = e.one("Slice", [spread, e.i64([0] * len(cut)), e.i64([-(strides[i] - 1) for i in cut]),
                            e.i64([2 + i for i in cut])])
    # The kernel: [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], taps flipped.
    c_in, c_out_group = w_shape[0], w_shape[1]
    if group == 1:
        kernel_t = e.one("Transpose", [w], perm=[1, 0] + list(range(2, 2 + spatial)))
    else:
        grouped = e.one("Reshape", [w, e.i64([group, c_in // group, c_out_group] + kernel)])
        swapped = e.one("Transpose", [grouped], perm=[0, 2, 1] + list(range(3, 3 + spatial)))
        kernel_t = e.one("Reshape", [swapped, e.i64([group * c_out_group, c_in // group] + kernel)])
    flipped = kernel_t
    for i, size in enumerate(kernel):  # Gather of the taps in reverse (1.19.2's SliceGrad refuses steps -1)
        if size > 1:
            flipped = e.one("Gather", [flipped, e.i64(list(range(size - 1, -1, -1)))], axis=2 + i)
    begin = [dilations[i] * (kernel[i] - 1) - pads[i] for i in range(spatial)]
    end = [dilations[i] * (kernel[i] - 1) - pads[spatial + i] + extra[i] for i in range(spatial)]
    crop = any(p < 0 for p in begin + end)
    conv_inputs = [x, flipped] + ([bias] if bias else [])
    conv = e.one("Conv", conv_inputs, None if crop else node.output[0], dilations=dilations,
                 pads=[max(p, 0) for p in begin + end], group=group)
    if crop:  # pads beyond the kernel's reach: crop the stride-1 convolution's output by as much
        axes = list(range(2, 2 + spatial))
        e.one("Slice", [conv, e.i64([max(-p, 0) for p in begin]),
                        e.i64([p if p < 0 else TO_THE_END for p in end]), e.i64(axes)], node.output[0])


def rewrite_average_pool(e, node, prep):
    # Only where the engine cannot declare the pool's input shape (rewrites.py, static_shape): 1.19.2's
    # AveragePoolGrad sizes its output from the graph's static shape of that input and dies of SIGFPE on a
    # symbolic batch (docs/internals/runtime.md §8). An average over a window is a depthwise Conv (group = C)
    # with every tap 1/(window size), whose gradient sizes itself from the tensors it is given.
    a = graph_facts.attributes(node)
    x = node.input[0]
    auto_pad = a.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID"):
        raise prep.refuse(node, "its gradient kernel needs the input's sizes fixed, and its rewrite into a "
                                "depthwise Conv needs explicit pads, where it sets auto_pad={} (export it with "
                                "explicit padding, or with fixed input sizes)".format(auto_pad))
    if int(a.get("ceil_mode", 0)):
        raise prep.refuse(node, "its gradient kernel needs the input's sizes fixed, and its rewrite into a "
                                "depthwise Conv does not take ceil_mode=1 (export it with fixed input sizes)")
    shape = prep.types.get(x, (0, None))[1]
    channels = shape[1] if shape is not None and len(shape) >= 3 else None
    if not isinstance(channels, int) or channels <= 0:
        raise prep.refuse(node, "its gradient kernel needs the input's sizes fixed, and its rewrite into a "
                                "depthwise Conv needs the channel count of its input {!r}, which shape inference "
                                "cannot tell ({})".format(x, graph_facts.show_dims(shape)))
    kernel = [int(k) for k in a["kernel_shape"]]
    spatial = len(kernel)
    strides = [int(s) for s in a.get("strides", [1] * spatial)]
    dilations = [int(d) for d in a.get("dilations", [1] * spatial)]  # an attribute from opset 19
    pads = [0] * (2 * spatial) if auto_pad == "VALID" else [int(p) for p in a.get("pads", [0] * (2 * spatial))]
    window = 1
    for size in kernel:
        window *= size
    conv = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads}
    if not any(pads) or int(a.get("count_include_pad", 0)):
        # Padding zeros count: every window divides by its full size, folded into the taps.
        taps = e.const(np.full([channels, 1] + kernel, 1.0 / window))
        e.one("Conv", [x, taps], node.output[0], group=channels, **conv)
        return
    # count_include_pad=0: each window divides by the number of its taps inside the input, the same Conv
    # over ones of the input's spatial sizes ([1, 1, D1, ...], broadcast over batch and channels). The ones
    # come from Shape (a stop edge), so no gradient is asked through the divisor.
    sums = e.one("Conv", [x, e.const(np.ones([channels, 1] + kernel))], group=channels, **conv)
    sizes = e.one("Slice", [e.one("Shape", [x]), e.i64([2]), e.i64([TO_THE_END]), e.i64([0])])
    one = helper.make_tensor(e.name("one"), e.elem_type, [1], [1.0])
    ones = e.one("ConstantOfShape", [e.one("Concat", [e.i64([1, 1]), sizes], axis=0)], value=one)
    counts = e.one("Conv", [ones, e.const(np.ones([1, 1] + kernel))], **conv)
    e.one("Div", [sums, counts], node.output[0])


REWRITES = {
    "HardSigmoid": rewrite_hard_sigmoid,
    "HardSwish": rewrite_hard_swish,
    "Softplus": rewrite_softplus,
    "Mish": rewrite_mish,
    "Elu": rewrite_elu,
    "Selu": rewrite_selu,
    "Celu": rewrite_celu,
    "Softsign": rewrite_softsign,
    "PRelu": rewrite_prelu,
    "ThresholdedRelu": rewrite_thresholded_relu,
    "Sum": rewrite_sum,
    "Mean": rewrite_mean,
    "Sinh": rewrite_sinh,
    "Cosh": rewrite_cosh,
    "Tan": rewrite_tan,
    "InstanceNormalization": rewrite_instance_normalization,
    "GroupNormalization": rewrite_group_normalization,
    "GlobalMaxPool": rewrite_global_max_pool,
    "ReduceMax": _reduce_extreme(True),
    "ReduceMin": _reduce_extreme(False),
    "ReduceSumSquare": rewrite_reduce_sum_square,
    "ReduceL1": rewrite_reduce_l1,
    "ReduceLogSum": rewrite_reduce_log_sum,
    "DepthToSpace": rewrite_depth_to_space,
    "SpaceToDepth": rewrite_space_to_depth,
    "ConvTranspose": rewrite_conv_transpose,
    "AveragePool": rewrite_average_pool,  # only where static_shape cannot serve (rewrites.py)
}


# --- zero-gradient operators ----------------------------------------------------------------------------------
# The builder does not enter a Cast to an integer type or a comparison (stop edges), and does not go back
# through non-floating-point tensors: what is computed from those alone gets no gradient and needs none.

def _floor_parts(e, x):
    """(base, r) with x = base + r exactly, base a multiple of 4 computed from integer casts only (no gradient
    path) and |r| < 4. For every finite float32 x: x * 2**-65 fits int64 (|x| < 2**128), so does
    (x - a * 2**65) / 4, and each product and difference is exact (powers of two; the parts are x's own bits).
    float16 and bfloat16 run in float32. float64 is exact below 2**128 in magnitude; beyond, the int64 casts
    overflow and ``_special_values`` gives NaN."""
    high = e.cast(e.cast(e.one("Mul", [x, e.const(2.0 ** -65)]), TensorProto.INT64), e.elem_type)
    high = e.one("Mul", [high, e.const(2.0 ** 65)])
    rest = e.one("Sub", [x, high])
    middle = e.cast(e.cast(e.one("Mul", [rest, e.const(0.25)]), TensorProto.INT64), e.elem_type)
    middle = e.one("Mul", [middle, e.const(4.0)])
    return e.one("Add", [high, middle]), e.one("Sub", [rest, middle])


def _floor_small(e, r):
    """(floor(r) as float, as int64) for |r| < 4: trunc(r) - (r < trunc(r))."""
    truncated = e.cast(r, TensorProto.INT64)
    truncated_float = e.cast(truncated, e.elem_type)
    below = e.one("Less", [r, truncated_float])
    floor_int = e.one("Sub", [truncated, e.cast(below, TensorProto.INT64)])
    return e.cast(floor_int, e.elem_type), floor_int


def _special_values(e, x, finite, output):
    """``finite`` where x is finite; x's own value (NaN, +inf, -inf) elsewhere, from constants. float64
    values of magnitude 2**128 and above, beyond ``_floor_parts``' range, give NaN rather than a wrong
    number (float32 has no such values)."""
    if e.elem_type == TensorProto.DOUBLE:
        in_range = e.one("Less", [e.one("Abs", [x]), e.const(2.0 ** 128)])
        finite = e.one("Where", [in_range, finite, e.const(float("nan"))])
    infinite = e.one("Where", [e.one("Greater", [x, e.const(0.0)]), e.const(float("inf")), e.const(float("-inf"))])
    not_finite = e.one("Where", [e.one("IsNaN", [x]), e.const(float("nan")), infinite])
    is_special = e.one("Or", [e.one("IsNaN", [x]), e.one("IsInf", [x])])
    return e.one("Where", [is_special, not_finite, finite], output)


def _floor_of(e, x):
    base, rest = _floor_parts(e, x)
    floor_rest, _ = _floor_small(e, rest)
    return e.one("Add", [base, floor_rest])


def _in_float(e, node, compute):
    """Run ``compute(x)`` in float32 for float16/bfloat16 inputs (whose values float32 holds exactly)."""
    x = node.input[0]
    if e.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE):
        return compute(x, node.output[0])
    original = e.elem_type
    e.elem_type = TensorProto.FLOAT
    result = compute(e.cast(x, TensorProto.FLOAT), None)
    e.elem_type = original
    return e.one("Cast", [result], node.output[0], to=int(original))


def zero_gradient_floor(e, node, prep):
    _in_float(e, node, lambda x, out: _special_values(e, x, _floor_of(e, x), out))


def zero_gradient_ceil(e, node, prep):
    def compute(x, out):
        negated = e.one("Neg", [x])
        return _special_values(e, x, e.one("Neg", [_floor_of(e, negated)]), out)
    _in_float(e, node, compute)


def zero_gradient_round(e, node, prep):
    # Round half to even: floor(x) + 1 where the fraction is above 1/2, or exactly 1/2 and floor(x) odd
    # (base is a multiple of 4, so floor(x) is odd where floor(rest) is).
    def compute(x, out):
        base, rest = _floor_parts(e, x)
        floor_rest, floor_int = _floor_small(e, rest)
        fraction = e.one("Sub", [rest, floor_rest])
        half = e.const(0.5)
        odd = e.one("Equal", [e.one("Mod", [floor_int, e.i64(2)]), e.i64(1)])
        up = e.one("Or", [e.one("Greater", [fraction, half]), e.one("And", [e.one("Equal", [fraction, half]), odd])])
        rounded = e.one("Add", [e.one("Add", [base, floor_rest]), e.cast(up, e.elem_type)])
        return _special_values(e, x, rounded, out)
    _in_float(e, node, compute)


def zero_gradient_sign(e, node, prep):
    def compute(x, out):
        positive = e.cast(e.one("Greater", [x, e.const(0.0)]), e.elem_type)
        negative = e.cast(e.one("Less", [x, e.const(0.0)]), e.elem_type)
        sign = e.one("Sub", [positive, negative])
        return e.one("Where", [e.one("IsNaN", [x]), e.const(float("nan")), sign], out)
    _in_float(e, node, compute)


ZERO_GRADIENT = {
    "Floor": zero_gradient_floor,
    "Ceil": zero_gradient_ceil,
    "Round": zero_gradient_round,
    "Sign": zero_gradient_sign,
}
