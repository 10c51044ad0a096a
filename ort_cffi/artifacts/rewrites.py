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
  one entry of ``REWRITES`` per operator type (the catalogue is rewrite_rules.py).
- ``zero_gradient``: Floor, Ceil, Round and Sign (derivative zero almost everywhere) are computed from
  integer casts and comparisons, where the builder stops by design (``ZERO_GRADIENT``, rewrite_rules.py).
- ``duplicate_input``: a node that reads one tensor at two differentiable inputs (``Add(X, X)``) reads it
  once through an Identity, as the builder defines one gradient name per input tensor.
- ``explicit_perm``: a Transpose without ``perm`` gets the default one written out (the builder reads it).
- ``flat_indices``: a Gather of a trained parameter by indices of shape [1, ...] gathers by the indices
  without that axis and unsqueezes the result (1.19.2's gradient of the original corrupts memory).
- ``static_shape``: the input of a MaxPool or AveragePool gets its shape declared (``value_info``) where
  shape inference alone cannot tell it but can by following Shape values into Reshape (torch's GroupNorm
  export), as their gradient kernels size the gradient from the graph's shapes; where no inference can tell
  the sizes those kernels read, an AveragePool is rewritten (a depthwise Conv, ``REWRITES``) and a MaxPool
  is refused (the training step would crash).

An operator on the path that has neither a gradient nor a rewrite is refused with ``PreparationError``,
naming the node. Nodes off the path are never touched, and a model that needs nothing comes back as the
very same object, so artifacts of models ONNX Runtime already accepts stay byte-identical to its own.

This module uses the standard library, numpy and onnx only and keeps to Python 3.8's syntax: the artifacts
child process (which may run under another interpreter, without ort_cffi) loads it by file location
(graph_facts.py says how the graph modules find each other).
Node and tensor names it adds are derived from the node it rewrites and made unique with a counter, in
graph order: two runs on one model give byte-identical results.
"""
import importlib
import sys
from typing import Any, Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
rewrite_rules = graph_facts.sibling("rewrite_rules")
REWRITES = rewrite_rules.REWRITES
ZERO_GRADIENT = rewrite_rules.ZERO_GRADIENT

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
MIN_REWRITE_OPSET = 11


class PreparationError(ValueError):
    """An operator on the gradient path that ONNX Runtime cannot differentiate and that has no rewrite."""

# --- what the model holds -------------------------------------------------------------------------------------

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


def _stops(node):
    """Input positions of ``node`` through which the builder sends no gradient."""
    if node.op_type == "Cast":
        to = graph_facts.attributes(node).get("to")
        return {0} if to not in graph_facts.FLOAT_TYPES else set()
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
            if elem_type and elem_type not in graph_facts.FLOAT_TYPES:
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
        self.elem_type = x_type if x_type in graph_facts.FLOAT_TYPES else TensorProto.FLOAT

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

# --- the preparation ------------------------------------------------------------------------------------------

class _Preparation:
    def __init__(self, model, requires_grad, outputs):
        self.model = model
        self.graph = model.graph
        self.opset = graph_facts.default_opset(model) or 1
        self.types = graph_facts.tensor_types(model)
        self.constants = _constants(model.graph)
        self.used = _all_names(model.graph, set())
        self.counters = {}
        self._producer = None
        self._propagated = None
        if requires_grad is None:
            self.params = sorted(t.name for t in self.graph.initializer if t.data_type in graph_facts.FLOAT_TYPES)
        else:
            self.params = sorted(set(requires_grad))
        self.outputs = [o.name for o in self.graph.output] if outputs is None else list(outputs)

    def producer(self):
        """tensor name -> the node of the main graph that computes it (made on first use)."""
        if self._producer is None:
            self._producer = dict((name, node) for node in self.graph.node for name in node.output if name)
        return self._producer

    def propagated(self):
        """``types`` with shape inference's data propagation (Shape values followed into Reshape, Concat,
        ...), made on first use: it knows the shapes of torch's GroupNorm export, plain inference does not."""
        if self._propagated is None:
            self._propagated = graph_facts.tensor_types(self.model, data_prop=True)
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

    def rank(self, name, node):
        """The rank of tensor ``name`` that ``node`` reads; refuses the node where shape inference cannot tell it."""
        shape = self.types.get(name, (0, None))[1]
        if shape is None:
            raise self.refuse(node, "its input {!r} has an unknown rank (run onnx.shape_inference or give the graph "
                                    "inputs shapes)".format(name))
        return len(shape)

    def refuse(self, node, why):
        where = graph_facts.node_description(node)
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
    elif op == "BatchNormalization" and prep.opset >= 14 and graph_facts.attributes(node).get("training_mode", 0) and n < 3:
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
    axis = int(graph_facts.attributes(node).get("axis", 0))
    return axis % len(data_shape) if data_shape else (axis if axis >= 0 else None)


# Pools whose gradient kernel sizes its output from the graph's static shape of the pool's input (1.19.2's
# pool_gradient_op.cc, InferOutputShapes: an unknown or symbolic size reads as 0), and the first axis each
# kernel reads from the incoming gradient instead (MaxPoolGrad: the batch; AveragePoolGrad: none).
# docs/internals/runtime.md §8.
STATIC_SHAPE_POOLS = {"MaxPool": 1, "AveragePool": 0}
# Recurrent operators whose gradient kernels run the forward direction only (GRUGrad, LSTMGrad in 1.19.2:
# "only supports the forward direction for now"): for ONNX Runtime's generator, a reverse or bidirectional one
# is refused before generation, not by the runtime's assertion once the artifacts are loaded. ort_cffi's
# builder (``native``) trains every direction (builder/rules/recurrent.py).
FORWARD_ONLY_RECURRENT = frozenset(["GRU", "LSTM"])


def _has_peepholes(node):
    """Whether ``node`` is an LSTM with peephole weights (its input 7)."""
    return node.op_type == "LSTM" and len(node.input) > 7 and bool(node.input[7])


UNKNOWABLE = "unknowable"  # _static_shape_hint: no inference can tell the sizes the gradient kernel reads


def _static_shape_hint(prep, node):
    """The ``value_info`` that declares the shape of pool ``node``'s input, None where plain shape inference
    already knows every size its gradient kernel reads, or UNKNOWABLE where no inference can tell them."""
    first = STATIC_SHAPE_POOLS[node.op_type]
    name = node.input[0]
    shape = prep.types.get(name, (0, None))[1]
    if shape is not None and all(d is not None for d in shape[first:]):
        return None
    elem_type, dims = prep.propagated().get(name, (0, None))
    if dims is not None and all(isinstance(d, int) and d > 0 for d in dims[first:]):
        return helper.make_tensor_value_info(name, elem_type or TensorProto.FLOAT, dims)
    return UNKNOWABLE


def _unknowable_pool(prep, node):
    """The refusal of a pool whose gradient kernel would read sizes no inference can tell."""
    first = STATIC_SHAPE_POOLS[node.op_type]
    name = node.input[0]
    shown = graph_facts.show_dims(prep.propagated().get(name, (0, None))[1] or prep.types.get(name, (0, None))[1])
    sizes = "leaves sizes open" if first == 0 else "leaves sizes past the batch open"
    return prep.refuse(node, "ONNX Runtime 1.19.2's gradient kernel for {} sizes the gradient from the graph's "
                             "shape of its input {!r}, which {} ({}): its training step would crash. Export the "
                             "model with fixed input sizes{}".format(
                                 node.op_type, name, sizes, shown, " and a fixed batch size" if first == 0 else ""))


def _may_need_a_rule(node, native=frozenset()):
    """Whether some rule could apply to ``node`` if it were on the gradient path (a cheap first look)."""
    if node.domain == graph_facts.ML_DOMAIN:
        return True
    if node.domain not in ("", "ai.onnx"):
        return False
    op = node.op_type
    if op in native and op not in STATIC_SHAPE_POOLS and op not in ("LayerNormalization", "Dropout",
                                                                     "BatchNormalization", "Gather"):
        return False
    if op in REWRITES or op in ZERO_GRADIENT or op in KNOWN_WITHOUT_GRADIENT:
        return True
    if op in ("LayerNormalization", "Dropout", "BatchNormalization", "Gather") or op in STATIC_SHAPE_POOLS:
        return True  # _declare_outputs, _gather_leading_one and _static_shape_hint decide
    if op in FORWARD_ONLY_RECURRENT:
        return (graph_facts.attribute(node, "direction", b"forward") not in (b"forward", "forward")
                or _has_peepholes(node))
    if op == "Transpose" and not any(a.name == "perm" for a in node.attribute):
        return True
    reads = [name for name in node.input if name]
    return len(set(reads)) < len(reads)


def prepare(model, requires_grad=None, outputs=None, native=frozenset()):
    """Prepare ``model`` (an ``onnx.ModelProto``) for ONNX Runtime 1.19.2's gradient builder.

    ``requires_grad``: names of the parameters to train (initializers, or graph inputs); None: every
    floating-point initializer. ``outputs``: the outputs the loss reads (None: all of the graph's).
    ``native``: operator types the gradient builder differentiates itself (ort_cffi's own builder has rules
    for what ONNX Runtime's lacks): those are not rewritten, refused, or given a perm or a second read; what
    ONNX Runtime's gradient kernels need (declared outputs, pool shapes, flat Gather indices) still applies.

    Returns ``(model, records)``: the very same ``model`` object and ``[]`` when nothing needs changing;
    otherwise a changed copy and one record per rule and operator type,
    ``{"rule": ..., "op": ..., "count": ..., "nodes": [names of the original nodes]}``, in the order first met.
    Raises PreparationError for an operator on the gradient path without gradient or rewrite.
    """
    if not any(_may_need_a_rule(node, native) for node in model.graph.node):
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
        if domain == graph_facts.ML_DOMAIN:
            raise prep.refuse(node, "operators of the {} domain have no gradients in ONNX Runtime".format(graph_facts.ML_DOMAIN))
        if domain not in ("", "ai.onnx"):
            continue  # contrib and custom operators: ONNX Runtime knows which have gradients
        op = node.op_type
        if op in native and op not in STATIC_SHAPE_POOLS:
            current = node
            declared = _declare_outputs(prep, current, index)
            if declared is not None:
                replaced[index] = [declared]
                record("declare_outputs", op, label)
            continue
        if op in STATIC_SHAPE_POOLS:
            # A pool keeps ONNX Runtime's own gradient wherever its kernel can be given the sizes it reads
            # (a model already trainable stays byte-identical); otherwise its rewrite, if it has one
            # (AveragePool), else a refusal (MaxPool: its kernel would crash).
            hint = _static_shape_hint(prep, node)
            if hint is UNKNOWABLE and op in native:
                continue  # the builder's own rule copes with sizes known at run time only
            if hint is UNKNOWABLE and op not in REWRITES:
                raise _unknowable_pool(prep, node)
            if hint is not UNKNOWABLE:
                if hint is not None:
                    hints.append(hint)
                    record("static_shape", op, label)
                continue
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
        if op in FORWARD_ONLY_RECURRENT:
            direction = graph_facts.attribute(node, "direction", b"forward")
            direction = direction.decode() if isinstance(direction, bytes) else direction
            if _has_peepholes(node):
                raise prep.refuse(node, "ONNX Runtime 1.19.2's LSTM gradient does not read the peephole weights "
                                        "(LSTMGrad has no such input): it would train the model as if it had none")
            if direction != "forward":
                raise prep.refuse(node, "ONNX Runtime 1.19.2's {0} gradient runs the forward direction only, and this "
                                        "{0} is {1} (export it unidirectional: torch's bidirectional=False)".format(op, direction))
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
        if op == "Transpose" and "perm" not in graph_facts.attributes(current):
            rank = prep.rank(current.input[0], current)
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
