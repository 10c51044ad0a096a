"""Graph preparation before ONNX Runtime's gradient builder, only where needed.

ONNX Runtime 1.19.2 builds the backward graph operator by operator from a registry of gradient builders
(``orttraining/orttraining/core/graph/gradient_builder_registry.cc``). An operator on the way from a trained
parameter to the loss that has no entry there stops the build ("The gradient builder has not been
registered"), and a few that have one need more than the ONNX exporters write. ``prepare(model,
requires_grad)`` changes only what stands in the way, on that path only:

- ``declare_outputs``: LayerNormalization (Mean, InvStdDev), Dropout (mask) and training-mode
  BatchNormalization (running mean and variance) get the optional outputs their gradient builders read.
  An inference-form BatchNormalization is left as it is.
- ``rewrite``: an operator without a gradient is replaced by an equal subgraph of operators that have one,
  one entry of ``REWRITES`` per operator type.
- ``zero_gradient``: Floor, Ceil, Round and Sign (derivative zero almost everywhere) are computed from
  integer casts and comparisons, where the builder stops by design: they pass no gradient, and the
  forward values are those of the operator (exactly, for every float32 input; see ``_floor_parts``).
- ``duplicate_input``: a node that reads one tensor at two differentiable inputs (``Add(X, X)``) reads it
  once through an Identity, as the builder defines one gradient name per input tensor.
- ``explicit_perm``: a Transpose without ``perm`` gets the default one written out (the builder reads it).
- ``flat_indices``: a Gather of a trained parameter by indices of shape [1, ...] gathers by the indices
  without that axis and unsqueezes the result (1.19.2's gradient of the original corrupts memory).
- ``static_shape``: the input of a MaxPool or AveragePool gets its shape declared (``value_info``) where
  shape inference alone cannot tell it but can by following Shape values into Reshape (torch's GroupNorm
  export), as their gradient kernels size the gradient from the graph's shapes; where no inference can tell
  the sizes those kernels read, the pool is refused (the training step would crash).

An operator on the path that has neither a gradient nor a rewrite is refused with ``PreparationError``,
naming the node. Nodes off the path are never touched, and a model that needs nothing comes back as the
very same object, so artifacts of models ONNX Runtime already accepts stay byte-identical to its own.

This module uses the standard library, numpy and onnx only and keeps to Python 3.8's syntax: the artifacts
child process (which may run under another interpreter, without ort_cffi) loads it by file location.
Node and tensor names it adds are derived from the node it rewrites and made unique with a counter, in
graph order: two runs on one model give byte-identical results.
"""
from typing import Any, Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["prepare", "PreparationError", "REWRITES", "ZERO_GRADIENT", "GRADIENT_OPS", "KNOWN_WITHOUT_GRADIENT"]

# Default-domain operators with a gradient builder in ONNX Runtime 1.19.2 (measured with single-operator
# models through its generator; see tests/apps/test_graph_rewrites.py). ConvTranspose has a builder but no
# CPU kernel for the ConvTransposeGrad it emits, so it is rewritten instead. Rewrites emit only these, and Constant,
# plus operators that sit behind a stop-gradient edge (Cast to an integer type, comparisons, Shape).
GRADIENT_OPS = frozenset([
    "Abs", "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Conv",
    "Cos", "Div", "Dropout", "Erf", "Exp", "Expand", "Flatten", "Gather", "GatherElements", "GatherND", "Gelu",
    "Gemm", "GlobalAveragePool", "Identity", "LayerNormalization", "LeakyRelu", "Log", "LogSoftmax", "MatMul",
    "Max", "MaxPool", "Min", "Mul", "Neg", "Pad", "Pow", "Reciprocal", "ReduceL2", "ReduceLogSumExp",
    "ReduceMean", "ReduceSum", "Relu", "Reshape", "Resize", "ScatterElements", "ScatterND", "Sigmoid", "Sin",
    "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Tanh", "Tile", "TopK", "Transpose", "Trilu",
    "Unsqueeze", "Where",
])
# Default-domain operators known to have no gradient builder in 1.19.2 and no rewrite here: refused when on
# the path. (An operator in neither list is left to ONNX Runtime, which may know it.)
KNOWN_WITHOUT_GRADIENT = frozenset([
    "Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh", "ReduceProd", "CumSum", "Einsum", "RNN", "Det",
    "LpNormalization", "GlobalLpPool", "Hardmax", "Shrink",
])
ML_DOMAIN = "ai.onnx.ml"

# Inputs (by position) through which the builder never sends a gradient (its STOP_GRADIENT_EDGES), plus
# Cast to a type that is not floating-point (handled in _stops).
STOP_EDGES = {
    "Not": {0}, "And": {0, 1}, "Or": {0, 1}, "Xor": {0, 1}, "Equal": {0, 1}, "Less": {0, 1},
    "LessOrEqual": {0, 1}, "Greater": {0, 1}, "GreaterOrEqual": {0, 1}, "IsInf": {0}, "IsNaN": {0},
    "NonZero": {0}, "BatchNormalization": {3, 4}, "Pow": {1}, "Gather": {1}, "GatherElements": {1},
    "GatherND": {1}, "Shape": {0}, "Size": {0}, "Reshape": {1}, "Expand": {1}, "Dropout": {1, 2},
    "Slice": {1, 2, 3, 4}, "ConstantOfShape": {0}, "Scatter": {1}, "ScatterElements": {1}, "ScatterND": {1},
    "OneHot": {0, 1, 2}, "Where": {0}, "Range": {0, 1, 2}, "Tile": {1}, "TopK": {1}, "Squeeze": {1},
    "Unsqueeze": {1}, "ReduceSum": {1}, "Split": {1}, "Clip": {1, 2},
}
FLOAT_TYPES = frozenset([TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16])
MIN_REWRITE_OPSET = 11


class PreparationError(ValueError):
    """An operator on the gradient path that ONNX Runtime cannot differentiate and that has no rewrite."""


# --- what the model holds -------------------------------------------------------------------------------------

def _default_opset(model):
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 1


def _all_names(graph, into):
    """Every node and tensor name of ``graph`` and its subgraphs."""
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        into.add(value.name)
    for tensor in graph.initializer:
        into.add(tensor.name)
    for node in graph.node:
        into.add(node.name)
        into.update(node.input)
        into.update(node.output)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _all_names(attribute.g, into)
            for sub in attribute.graphs:
                _all_names(sub, into)
    return into


def _types(model, data_prop=False):
    """name -> (elem_type, shape or None) of the tensors of the main graph that shape inference can tell."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except Exception:  # custom domains and broken models: what the model itself declares
        inferred = model
    graph = inferred.graph
    found: Dict[str, Any] = {}
    for tensor in graph.initializer:
        found[tensor.name] = (tensor.data_type, list(tensor.dims))
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.WhichOneof("value") != "tensor_type":
            found.setdefault(value.name, (0, None))
            continue
        tensor_type = value.type.tensor_type
        shape = None
        if tensor_type.HasField("shape"):
            shape = [d.dim_value if d.WhichOneof("value") == "dim_value" else None for d in tensor_type.shape.dim]
        if tensor_type.elem_type or value.name not in found:
            found[value.name] = (tensor_type.elem_type, shape)
    return found


def _constants(graph):
    """name -> numpy value of the initializers and Constant node outputs of ``graph``."""
    values = {}
    for tensor in graph.initializer:
        values[tensor.name] = tensor
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = attribute.t
                elif attribute.name in ("value_ints", "value_int"):
                    values[node.output[0]] = numpy_helper.from_array(
                        np.array(helper.get_attribute_value(attribute), np.int64))
    return values


def _attrs(node):
    return dict((a.name, helper.get_attribute_value(a)) for a in node.attribute)


def _stops(node):
    """Input positions of ``node`` through which the builder sends no gradient."""
    if node.op_type == "Cast":
        to = _attrs(node).get("to")
        return {0} if to not in FLOAT_TYPES else set()
    if node.domain not in ("", "ai.onnx"):
        return set()
    return STOP_EDGES.get(node.op_type, set())


def _gradient_path(graph, params, types, outputs):
    """Indices of the nodes that the builder differentiates: reached from ``params`` over edges that carry a
    gradient, and reaching ``outputs`` over floating-point edges (as its forward and reverse searches)."""
    consumers: Dict[str, List[Any]] = {}
    producer = {}
    for index, node in enumerate(graph.node):
        for position, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((index, position))
        for name in node.output:
            if name:
                producer[name] = index
    forward = set()
    queue = []
    seen_tensors = set(params)
    tensors = list(params)
    while tensors:
        name = tensors.pop()
        for index, position in consumers.get(name, ()):
            if position in _stops(graph.node[index]) or index in forward:
                continue
            forward.add(index)
            queue.append(index)
            for out in graph.node[index].output:
                if out and out not in seen_tensors:
                    seen_tensors.add(out)
                    tensors.append(out)
    backward = set()
    stack = [producer[name] for name in outputs if name in producer]
    backward.update(stack)
    while stack:
        node = graph.node[stack.pop()]
        stops = _stops(node)
        for position, name in enumerate(node.input):
            if not name or position in stops or name not in producer:
                continue
            elem_type = types.get(name, (0, None))[0]
            if elem_type and elem_type not in FLOAT_TYPES:
                continue
            index = producer[name]
            if index not in backward:
                backward.add(index)
                stack.append(index)
    return forward & backward


# --- emitting nodes -----------------------------------------------------------------------------------------

class _Emitter:
    """Makes the nodes of one rewrite: unique, deterministic names derived from the rewritten node."""

    def __init__(self, prep, node, label):
        self.prep = prep
        self.opset = prep.opset
        self.node = node
        self.label = label
        self.nodes = []
        x_type = prep.types.get(node.input[0], (0, None))[0] if node.input else 0
        self.elem_type = x_type if x_type in FLOAT_TYPES else TensorProto.FLOAT

    def name(self, hint):
        return self.prep.unique("{}/{}".format(self.label, hint))

    def op(self, op_type, inputs, outputs=None, n_out=1, **attrs):
        """Add ``op_type`` and return its output names (``outputs`` when given: the rewritten node's)."""
        if outputs is None:
            outputs = [self.name("{}_out".format(op_type)) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=self.name(op_type), **attrs))
        return list(outputs)

    def one(self, op_type, inputs, output=None, **attrs):
        return self.op(op_type, inputs, None if output is None else [output], **attrs)[0]

    def const(self, value, elem_type=None):
        """A Constant node (never an initializer: a floating-point initializer would become a parameter)."""
        elem_type = self.elem_type if elem_type is None else elem_type
        array = np.asarray(value)
        if elem_type == TensorProto.INT64:
            tensor = numpy_helper.from_array(array.astype(np.int64), self.name("const"))
        else:
            flat = [float(v) for v in array.astype(np.float64).ravel()]
            tensor = helper.make_tensor(self.name("const"), elem_type, list(array.shape), flat)
        return self.one("Constant", [], value=tensor)

    def i64(self, values):
        return self.const(np.array(values, np.int64), TensorProto.INT64)

    def cast(self, x, to):
        return self.one("Cast", [x], to=int(to))

    # opset-dependent forms ---------------------------------------------------------------------------------
    def reduce(self, op_type, x, axes, keepdims=1, output=None, noop_with_empty_axes=0):
        """``op_type`` (ReduceSum, ReduceMean, ...) over ``axes`` (None: all), in the opset's form."""
        attrs = {"keepdims": int(keepdims)}
        axes_as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if noop_with_empty_axes and axes_as_input:
            attrs["noop_with_empty_axes"] = 1
        if axes is None:
            return self.one(op_type, [x], output, **attrs)
        if axes_as_input:
            return self.one(op_type, [x, self.i64(list(axes))], output, **attrs)
        return self.one(op_type, [x], output, axes=list(axes), **attrs)

    def squeeze(self, x, axes, output=None):
        if self.opset >= 13:
            return self.one("Squeeze", [x, self.i64(list(axes))], output)
        return self.one("Squeeze", [x], output, axes=list(axes))

    def unsqueeze(self, x, axes, output=None):
        if self.opset >= 13:
            return self.one("Unsqueeze", [x, self.i64(list(axes))], output)
        return self.one("Unsqueeze", [x], output, axes=list(axes))

    def topk1(self, x, largest, output=None):
        """The largest (or smallest) element along the last axis, keeping that axis (size 1)."""
        outputs = [output or self.name("TopK_values"), self.name("TopK_indices")]
        return self.op("TopK", [x, self.i64([1])], outputs, axis=-1, largest=int(largest), sorted=1)[0]

    def relu_of_neg(self, x):
        """min(x, 0) as -Relu(-x) (Relu and Neg have gradients; Min with a constant would too, this is exact)."""
        return self.one("Neg", [self.one("Relu", [self.one("Neg", [x])])])


# --- the rewrites: one entry per operator type ------------------------------------------------------------------
# Each takes (emitter, node, prep) and emits nodes whose last writes the node's output(s) under the same names.

def _rank(prep, name, node):
    shape = prep.types.get(name, (0, None))[1]
    if shape is None:
        raise prep.refuse(node, "its input {!r} has an unknown rank (run onnx.shape_inference or give the graph "
                                "inputs shapes)".format(name))
    return len(shape)


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
    axes = _attrs(node).get("axes")
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
    a = _attrs(node)
    x = _hard_sigmoid_of(e, node.input[0], a.get("alpha", 0.2), a.get("beta", 0.5))
    e.one("Identity", [x], node.output[0])


def rewrite_hard_swish(e, node, prep):
    # HardSwish(x) = x * HardSigmoid(x, alpha=1/6, beta=0.5); x is read by Mul once and by the Clip chain
    # once, so no node reads it twice.
    gate = _hard_sigmoid_of(e, node.input[0], 1.0 / 6.0, 0.5)
    e.one("Mul", [node.input[0], gate], node.output[0])


def _softplus_of(e, x):
    """log(1 + exp(x)) as Relu(x) + log1p(exp(-|x|)): no overflow for large x. ONNX has no log1p: with
    u = exp(-|x|) <= 1 and w = 1 + u rounded, log1p(u) = log(w) - ((w - 1) - u) / w to first order, where
    (w - 1) - u is the rounding error of w, computed exactly; without it, log(w) is off by up to 2**-25
    absolute (all of u for x < -17). The correction's derivative is zero, so the gradient stays 1 / w."""
    u = e.one("Exp", [e.one("Neg", [e.one("Abs", [x])])])
    w = e.one("Add", [e.const(1.0), u])
    error = e.one("Sub", [e.one("Sub", [w, e.const(1.0)]), u])
    log1p = e.one("Sub", [e.one("Log", [w]), e.one("Div", [error, e.one("Identity", [w])])])
    return e.one("Add", [e.one("Relu", [x]), log1p])


def rewrite_softplus(e, node, prep):
    e.one("Identity", [_softplus_of(e, node.input[0])], node.output[0])


def rewrite_mish(e, node, prep):
    # Mish(x) = x * tanh(softplus(x)) (opset 18).
    e.one("Mul", [node.input[0], e.one("Tanh", [_softplus_of(e, node.input[0])])], node.output[0])


def _elu_of(e, x, alpha):
    """Relu(x) + alpha * (exp(min(x, 0)) - 1): x for x > 0, alpha * (exp(x) - 1) otherwise."""
    negative = e.one("Sub", [e.one("Exp", [e.relu_of_neg(x)]), e.const(1.0)])
    return e.one("Add", [e.one("Relu", [x]), e.one("Mul", [negative, e.const(alpha)])])


def rewrite_elu(e, node, prep):
    e.one("Identity", [_elu_of(e, node.input[0], _attrs(node).get("alpha", 1.0))], node.output[0])


def rewrite_selu(e, node, prep):
    a = _attrs(node)
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    e.one("Mul", [_elu_of(e, node.input[0], alpha), e.const(gamma)], node.output[0])


def rewrite_celu(e, node, prep):
    # Celu(x) = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = Relu(x) + alpha * (exp(min(x, 0) / alpha) - 1)
    # for alpha > 0 (the sign of exp(x / alpha) - 1 is that of x).
    alpha = _attrs(node).get("alpha", 1.0)
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
    condition = e.one("Greater", [x, e.const(_attrs(node).get("alpha", 1.0))])
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
    rank = _rank(prep, x, node)
    normalized = _normalize_last(e, x, _attrs(node).get("epsilon", 1e-5), list(range(2, rank)))
    scaled = e.one("Mul", [normalized, _per_channel(e, scale, rank)])
    e.one("Add", [scaled, _per_channel(e, bias, rank)], node.output[0])


def rewrite_group_normalization(e, node, prep):
    # Opset 18: scale and bias per group (num_groups,); opset 21: per channel (C,), and the statistics in
    # stash_type (default float32) whatever the input type. Statistics over each group of C / num_groups
    # channels and all spatial positions.
    x, scale, bias = node.input[0], node.input[1], node.input[2]
    a = _attrs(node)
    groups = int(a["num_groups"])
    rank = _rank(prep, x, node)
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
    rank = _rank(prep, x, node)
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
        a = _attrs(node)
        axes = _axes_of(prep, node, e.opset >= 18)
        if not axes and a.get("noop_with_empty_axes", 0):
            e.one("Identity", [node.input[0]], node.output[0])
            return
        _reduce_by_topk(e, prep, node, node.input[0], axes, a.get("keepdims", 1), largest, node.output[0])
    return rewrite


def rewrite_global_max_pool(e, node, prep):
    rank = _rank(prep, node.input[0], node)
    _reduce_by_topk(e, prep, node, node.input[0], list(range(2, rank)), 1, True, node.output[0])


def _reduce_sum_of(e, node, prep, value, output):
    """ReduceSum of ``value`` with the node's axes, keepdims and noop_with_empty_axes (opset forms)."""
    a = _attrs(node)
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
    a = _attrs(node)
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
    b = int(_attrs(node)["blocksize"])
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
    a = _attrs(node)
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


# --- the preparation ------------------------------------------------------------------------------------------

class _Preparation:
    def __init__(self, model, requires_grad, outputs):
        self.model = model
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.types = _types(model)
        self.constants = _constants(model.graph)
        self.used = _all_names(model.graph, set())
        self.counters = {}
        self._producer = None
        self._propagated = None
        if requires_grad is None:
            self.params = sorted(t.name for t in self.graph.initializer if t.data_type in FLOAT_TYPES)
        else:
            self.params = sorted(set(requires_grad))
        self.outputs = [o.name for o in self.graph.output] if outputs is None else list(outputs)

    def producer(self):
        """tensor name -> the node of the main graph that computes it (made on first use)."""
        if self._producer is None:
            self._producer = dict((name, node) for node in self.graph.node for name in node.output if name)
        return self._producer

    def propagated(self):
        """``_types`` with shape inference's data propagation (Shape values followed into Reshape, Concat,
        ...), made on first use: it knows the shapes of torch's GroupNorm export, plain inference does not."""
        if self._propagated is None:
            self._propagated = _types(self.model, data_prop=True)
        return self._propagated

    def unique(self, base):
        count = self.counters.get(base, 0)
        while True:
            name = base if count == 0 else "{}_{}".format(base, count)
            count += 1
            if name not in self.used:
                self.counters[base] = count
                self.used.add(name)
                return name

    def label(self, index, node):
        return node.name or "{}_{}".format(node.op_type, index)

    def refuse(self, node, why):
        where = "{} node {!r}".format(node.op_type, node.name) if node.name else "an unnamed {} node".format(node.op_type)
        return PreparationError(
            "{} lies on the gradient path from the trained parameters to the model's outputs, and {}. What can be "
            "done: freeze the parameters before it (requires_grad / frozen_params), or replace the operator in "
            "the model before export.".format(where, why))


def _declare_outputs(prep, node, index):
    """The outputs a gradient builder reads, added under new names; None when nothing is missing."""
    op, n = node.op_type, len(node.output)
    wanted = []
    if op == "LayerNormalization" and n < 3:
        wanted = ["Mean", "InvStdDev"][n - 1:]
    elif op == "Dropout" and n < 2:
        wanted = ["mask"]
    elif op == "BatchNormalization" and prep.opset >= 14 and _attrs(node).get("training_mode", 0) and n < 3:
        wanted = ["running_mean", "running_var"][n - 1:]
    if not wanted:
        return None
    label = prep.label(index, node)
    new = onnx.NodeProto()
    new.CopyFrom(node)
    present = [o for o in new.output]
    while len(present) and not present[-1]:
        present.pop()
    for missing in wanted:
        present.append(prep.unique("{}/{}".format(label, missing)))
    del new.output[:]
    new.output.extend(present)
    return new


def _duplicate_reads(prep, node, index, reached):
    """(Identity nodes, node reading each differentiable tensor once) or None when no tensor that a gradient
    reaches (``reached``) is read twice: the builder defines one gradient name per tensor it differentiates,
    and a constant read twice (an LSTM's initial_h and initial_c from one ConstantOfShape) gets none."""
    stops = _stops(node)
    seen = set()
    repeats = []
    for position, name in enumerate(node.input):
        if not name or position in stops or name not in reached:
            continue
        if name in seen:
            repeats.append(position)
        seen.add(name)
    if not repeats:
        return None
    label = prep.label(index, node)
    new = onnx.NodeProto()
    new.CopyFrom(node)
    identities = []
    for position in repeats:
        copy = prep.unique("{}/read{}".format(label, position))
        identities.append(helper.make_node("Identity", [node.input[position]], [copy],
                                           name=prep.unique("{}/Identity_read{}".format(label, position))))
        new.input[position] = copy
    return identities, new


def _leading_one(prep, name, depth=0):
    """Whether tensor ``name`` has rank 2 or more and a first axis of size 1: by shape inference, else through
    the Slice (on other axes), Cast or Identity that computes it (shape inference loses the size of a Slice
    with computed ends, as BERT's position_ids[:, :T])."""
    shape = prep.types.get(name, (0, None))[1]
    if shape is not None and (len(shape) < 2 or shape[0] not in (1, None)):
        return False
    if shape is not None and shape[0] == 1:
        return True
    producer = prep.producer().get(name)
    if producer is None or depth > 8 or producer.op_type not in ("Slice", "Cast", "Identity"):
        return False
    if producer.op_type == "Slice":
        if len(producer.input) < 4 or not producer.input[3]:
            return False  # axes left out: all of them, the first included
        axes = prep.constants.get(producer.input[3])
        rank = len(prep.types.get(producer.input[0], (0, None))[1] or [])
        if axes is None or not rank or any(int(a) % rank == 0 for a in numpy_helper.to_array(axes).ravel()):
            return False
    return _leading_one(prep, producer.input[0], depth + 1)


def _gather_leading_one(prep, node):
    """The axis of a Gather of a trained parameter whose indices have a leading axis of size 1 (BERT's
    position_ids, [1, T]), or None. In 1.19.2 the gradient of such a Gather, broadcast against a batch,
    corrupts ONNX Runtime's memory arena after the first step at some batch sizes (a crash or NaN; measured
    with ONNX Runtime's own Python layer too: docs/internals/runtime.md §8); the same Gather of the indices
    without that axis, unsqueezed after, trains."""
    if node.op_type != "Gather" or node.input[0] not in prep.params or len(node.input) < 2:
        return None
    if not _leading_one(prep, node.input[1]):
        return None
    data_shape = prep.types.get(node.input[0], (0, None))[1]
    axis = int(_attrs(node).get("axis", 0))
    return axis % len(data_shape) if data_shape else (axis if axis >= 0 else None)


# Pools whose gradient kernel sizes its output from the graph's static shape of the pool's input (1.19.2's
# pool_gradient_op.cc, InferOutputShapes: an unknown or symbolic size reads as 0), and the first axis each
# kernel reads from the incoming gradient instead (MaxPoolGrad: the batch; AveragePoolGrad: none).
# docs/internals/runtime.md §8.
STATIC_SHAPE_POOLS = {"MaxPool": 1, "AveragePool": 0}


def _static_shape_hint(prep, node):
    """The ``value_info`` that declares the shape of pool ``node``'s input, or None where plain shape inference
    already knows every size its gradient kernel reads. Refuses a pool where no inference can tell them."""
    first = STATIC_SHAPE_POOLS[node.op_type]
    name = node.input[0]
    shape = prep.types.get(name, (0, None))[1]
    if shape is not None and all(d is not None for d in shape[first:]):
        return None
    elem_type, dims = prep.propagated().get(name, (0, None))
    if dims is not None and all(isinstance(d, int) and d > 0 for d in dims[first:]):
        return helper.make_tensor_value_info(name, elem_type or TensorProto.FLOAT, dims)
    shown = "unknown" if not (dims or shape) else "[" + ", ".join(
        str(d) if d is not None else "?" for d in (dims or shape)) + "]"
    sizes = "leaves sizes open" if first == 0 else "leaves sizes past the batch open"
    raise prep.refuse(node, "ONNX Runtime 1.19.2's gradient kernel for {} sizes the gradient from the graph's "
                            "shape of its input {!r}, which {} ({}): its training step would crash. Export the "
                            "model with fixed input sizes{}".format(
                                node.op_type, name, sizes, shown, " and a fixed batch size" if first == 0 else ""))


def _may_need_a_rule(node):
    """Whether some rule could apply to ``node`` if it were on the gradient path (a cheap first look)."""
    if node.domain == ML_DOMAIN:
        return True
    if node.domain not in ("", "ai.onnx"):
        return False
    op = node.op_type
    if op in REWRITES or op in ZERO_GRADIENT or op in KNOWN_WITHOUT_GRADIENT:
        return True
    if op in ("LayerNormalization", "Dropout", "BatchNormalization", "Gather") or op in STATIC_SHAPE_POOLS:
        return True  # _declare_outputs, _gather_leading_one and _static_shape_hint decide
    if op == "Transpose" and not any(a.name == "perm" for a in node.attribute):
        return True
    reads = [name for name in node.input if name]
    return len(set(reads)) < len(reads)


def prepare(model, requires_grad=None, outputs=None):
    """Prepare ``model`` (an ``onnx.ModelProto``) for ONNX Runtime 1.19.2's gradient builder.

    ``requires_grad``: names of the parameters to train (initializers, or graph inputs); None: every
    floating-point initializer. ``outputs``: the outputs the loss reads (None: all of the graph's).

    Returns ``(model, records)``: the very same ``model`` object and ``[]`` when nothing needs changing;
    otherwise a changed copy and one record per rule and operator type,
    ``{"rule": ..., "op": ..., "count": ..., "nodes": [names of the original nodes]}``, in the order first met.
    Raises PreparationError for an operator on the gradient path without gradient or rewrite.
    """
    if not any(_may_need_a_rule(node) for node in model.graph.node):
        return model, []  # the common case, without shape inference (a copy of the model) or path search
    prep = _Preparation(model, requires_grad, outputs)
    graph = model.graph
    on_path = _gradient_path(graph, prep.params, prep.types, prep.outputs)
    reached = set(prep.params)  # the tensors a gradient flows into: the parameters and what the path computes
    for index in on_path:
        reached.update(graph.node[index].output)
    replaced = {}  # node index -> list of nodes taking its place
    hints = []  # value_info declaring shapes that shape inference cannot tell
    records = []
    by_key = {}

    def record(rule, op, name):
        key = (rule, op)
        if key not in by_key:
            by_key[key] = {"rule": rule, "op": op, "count": 0, "nodes": []}
            records.append(by_key[key])
        by_key[key]["count"] += 1
        by_key[key]["nodes"].append(name)

    for index in sorted(on_path):
        node = graph.node[index]
        label = prep.label(index, node)
        domain = node.domain
        if domain == ML_DOMAIN:
            raise prep.refuse(node, "operators of the {} domain have no gradients in ONNX Runtime".format(ML_DOMAIN))
        if domain not in ("", "ai.onnx"):
            continue  # contrib and custom operators: ONNX Runtime knows which have gradients
        op = node.op_type
        rewrite = REWRITES.get(op) or ZERO_GRADIENT.get(op)
        if rewrite is not None:
            if prep.opset < MIN_REWRITE_OPSET:
                raise prep.refuse(node, "ONNX Runtime has no gradient for {} and its rewrite needs opset {} or "
                                        "newer (the model has {}; onnx.version_converter can convert it)".format(
                                            op, MIN_REWRITE_OPSET, prep.opset))
            emitter = _Emitter(prep, node, label)
            rewrite(emitter, node, prep)
            replaced[index] = emitter.nodes
            record("zero_gradient" if op in ZERO_GRADIENT else "rewrite", op, label)
            continue
        if op in KNOWN_WITHOUT_GRADIENT:
            raise prep.refuse(node, "ONNX Runtime 1.19.2 has no gradient for {}, and there is no rewrite of it "
                                    "into operators that have one".format(op))
        if op in STATIC_SHAPE_POOLS:
            hint = _static_shape_hint(prep, node)
            if hint is not None:
                hints.append(hint)
                record("static_shape", op, label)
            continue
        current = node
        declared = _declare_outputs(prep, current, index)
        if declared is not None:
            current = declared
            record("declare_outputs", op, label)
        leading_one = _gather_leading_one(prep, current)
        if leading_one is not None:
            emitter = _Emitter(prep, current, label)
            axis = leading_one
            flat = emitter.squeeze(current.input[1], [0])
            gathered = emitter.one("Gather", [current.input[0], flat], axis=axis)
            emitter.unsqueeze(gathered, [axis], current.output[0])
            replaced[index] = emitter.nodes
            record("flat_indices", op, label)
            continue
        if op == "Transpose" and "perm" not in _attrs(current):
            rank = _rank(prep, current.input[0], current)
            changed = onnx.NodeProto()
            changed.CopyFrom(current)
            changed.attribute.extend([helper.make_attribute("perm", list(range(rank - 1, -1, -1)))])
            current = changed
            record("explicit_perm", op, label)
        duplicates = _duplicate_reads(prep, current, index, reached)
        before = []
        if duplicates is not None:
            before, current = duplicates
            record("duplicate_input", op, label)
        if current is not node:
            replaced[index] = before + [current]

    if not replaced and not hints:
        return model, []
    result = onnx.ModelProto()
    result.CopyFrom(model)
    nodes = []
    for index, node in enumerate(graph.node):
        nodes.extend(replaced.get(index, [node]))
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    if hints:  # in place of what the model declares for those tensors (ONNX Runtime keeps declared sizes)
        hinted = set(hint.name for hint in hints)
        kept = [value for value in result.graph.value_info if value.name not in hinted]
        del result.graph.value_info[:]
        result.graph.value_info.extend(kept + hints)
    return result, records
