"""What a gradient rule works with: ``GradientContext`` emits the backward graph's nodes and constants and
knows the forward graph's types and shapes; ``NodeView`` is one forward node as its rule sees it.

The context knows no operator's gradient. It gives rules the few helpers that many of them need, each in
the form the model's opset takes: reductions, (un)squeezing, shapes, and ``unbroadcast``, which sums a
gradient back over the axes an operand was broadcast along (at run time where shapes are symbolic).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts.builder.probe_shapes import ProbeDims, broadcast_axes
from ort_cffi.artifacts.builder.registry import MICROSOFT

Dims = Optional[Tuple[Union[int, str, None], ...]]  # None: unknown rank; an entry: a size, a symbolic name, None


class BuilderError(ValueError):
    """The training graph cannot be built; the message names the node and why."""


class NoGradientError(BuilderError):
    """A node on the way from a trained parameter to the loss has no gradient rule, or cannot carry one."""

    def __init__(self, message: str, node: Optional[onnx.NodeProto] = None):
        super().__init__(message)
        self.node = node


class GradientContext:
    """Emits the backward graph: nodes, constants and their names, with the forward graph's types."""

    def __init__(self, model: onnx.ModelProto, types: Dict[str, Tuple[int, Dims]],
                 probes: Sequence[Dict[str, ProbeDims]] = ()):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.types = dict(types)
        # Sequence-typed values (a list of tensors: SequenceEmpty, SplitToSequence, a Loop carrying one): their
        # entry in ``types`` is their tensors' element type with unknown dims, so that no tensor helper takes
        # one for a tensor of known shape; their gradients are sequences too (rules/sequences.py).
        self.sequences: Set[str] = set()
        for name, elem_type in sequence_types(model).items():
            self.types.setdefault(name, (elem_type, None))
            self.sequences.add(name)
        self.probes = [dict(p) for p in probes]  # sizes under made-up input sizes (probe_shapes.py)
        self.nodes: List[onnx.NodeProto] = []
        self._producers: Dict[str, onnx.NodeProto] = {}  # of what ``nodes`` compute, and what they read:
        self._read: Set[str] = set()  # rename_output asks for each parameter's gradient
        self.initializers: List[onnx.TensorProto] = []
        self.value_infos: List[onnx.ValueInfoProto] = []  # shapes declared for kernels that read them (declare)
        self._taken: Set[str] = self._taken_by_model(model)
        self._constants: Dict[Tuple[int, Tuple[int, ...], bytes], str] = {}
        # Values known before run time: initializers (graph inputs, parameters among them, are not) and
        # Constant nodes' outputs, read lazily.
        self._known: Dict[str, Any] = {i.name: i for i in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant" and node.output:
                self._known[node.output[0]] = node
        for graph_input in model.graph.input:
            self._known.pop(graph_input.name, None)
        self._counter = 0
        self.source: Optional[onnx.NodeProto] = None  # the forward node whose rule is running (names, messages)

    def subgraph(self, model: onnx.ModelProto, types: Dict[str, Tuple[int, Dims]]) -> "GradientContext":
        """A context for a subgraph's own backward pass (an If branch wrapped as ``model``): it shares this
        context's names (no name is given twice across the scopes) and knows its constants and types;
        what it emits is its own (``nodes``, ``initializers``)."""
        child = GradientContext(model, {**self.types, **types}, self.probes)
        child._taken = self._taken
        child.sequences.update(self.sequences)
        child._taken.update(child._taken_by_model(model))
        local = {out for node in model.graph.node for out in node.output}
        child._known.update({k: v for k, v in self._known.items() if k not in local})
        return child

    # --- names ---------------------------------------------------------------------------------------------
    @staticmethod
    def _taken_by_model(model: onnx.ModelProto) -> Set[str]:
        """Every name of the model's graph and of its subgraphs (If branches, loop bodies)."""
        taken: Set[str] = set()
        graphs = [model.graph]
        while graphs:
            graph = graphs.pop()
            for graph_value in list(graph.input) + list(graph.output) + list(graph.value_info):
                taken.add(graph_value.name)
            for initializer in graph.initializer:
                taken.add(initializer.name)
            for node in graph.node:
                taken.update(node.output)
                taken.update(node.input)
                if node.name:
                    taken.add(node.name)
                for attribute in node.attribute:
                    graphs.extend(([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs))
        return taken

    def fresh(self, hint: str) -> str:
        """A name no value or node of the graph has: ``hint``, or ``hint`` with a number."""
        name = hint
        while name in self._taken:
            self._counter += 1
            name = f"{hint}_{self._counter}"
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> None:
        """Keep ``name`` from ``fresh``: a name the engine gives a value later (``<parameter>_grad``)."""
        self._taken.add(name)

    # --- nodes ---------------------------------------------------------------------------------------------
    def node(self, op: str, inputs: Sequence[Optional[str]], outputs: Union[int, Sequence[str]] = 1,
             domain: str = "", **attributes: Any) -> List[str]:
        """Emit ``op`` on ``inputs`` (None: an omitted optional input) and return its output names: fresh
        ones, or the names given."""
        base = self.source.name or self.source.op_type if self.source is not None else op
        if isinstance(outputs, int):
            names = [self.fresh(f"{base}_{op}_Grad/out{i}") for i in range(outputs)]
        else:
            names = list(outputs)
            self._taken.update(names)
        attributes = {k: v for k, v in attributes.items() if v is not None}
        proto = helper.make_node(op, ["" if i is None else i for i in inputs], names,
                                 name=self.fresh(f"{base}_{op}_Grad"), domain=domain or None, **attributes)
        self.nodes.append(proto)
        self._producers.update((name, proto) for name in names)
        self._read.update(proto.input)
        return names

    def rename_output(self, old: str, new: str) -> bool:
        """Give the value ``old``, an output of a node emitted here that nothing reads yet, the name ``new``
        (a parameter's gradient is named ``<parameter>_grad``); False where it cannot be renamed."""
        producer = self._producers.get(old)
        if producer is None or old in self._read:
            return False
        producer.output[list(producer.output).index(old)] = new
        self._producers[new] = self._producers.pop(old)
        self._taken.add(new)
        for declared in self.value_infos:
            if declared.name == old:
                declared.name = new
        if old in self.types:
            self.types[new] = self.types[old]
        return True

    def op(self, op: str, *inputs: Optional[str], domain: str = "", **attributes: Any) -> str:
        """Emit a one-output ``op`` and return its output's name."""
        return self.node(op, inputs, 1, domain, **attributes)[0]

    def ms(self, op: str, *inputs: Optional[str], outputs: int = 1, **attributes: Any) -> List[str]:
        """Emit a ``com.microsoft`` operator (ONNX Runtime's gradient kernels)."""
        return self.node(op, inputs, outputs, MICROSOFT, **attributes)

    # --- constants -----------------------------------------------------------------------------------------
    def const(self, value: Any, dtype: Optional[Union[int, str]] = None, hint: str = "const") -> str:
        """A constant initializer holding ``value`` (numpy array or scalar), of the element type ``dtype``
        (a TensorProto type, or a value's name whose type to take); equal constants are shared."""
        array = np.asarray(value)
        if isinstance(dtype, str):
            dtype = self.elem_type(dtype)
        if dtype is not None:
            array = array.astype(helper.tensor_dtype_to_np_dtype(dtype))
        key = (int(dtype or 0), array.shape, array.dtype.str.encode() + array.tobytes())
        if key not in self._constants:
            name = self.fresh(hint)
            self.initializers.append(numpy_helper.from_array(array, name))
            self.types[name] = (helper.np_dtype_to_tensor_dtype(array.dtype), tuple(array.shape))
            self._constants[key] = name
        return self._constants[key]

    def scalar(self, value: float, like: str) -> str:
        """A 0-d constant of ``like``'s element type."""
        return self.const(value, like, hint="scalar")

    def ints(self, values: Iterable[int]) -> str:
        """An int64 vector constant (axes, shapes, starts)."""
        return self.const(np.array(list(values), dtype=np.int64), hint="ints")

    def constant_value(self, name: str) -> Optional[np.ndarray]:
        """The value of ``name`` when it is fixed before run time (an initializer that is no graph input,
        or a Constant node's output), else None."""
        found = self._known.get(name)
        if found is None:
            return None
        if isinstance(found, onnx.TensorProto):
            return numpy_helper.to_array(found)
        for attribute in found.attribute:
            value = helper.get_attribute_value(attribute)
            if attribute.name == "value":
                return numpy_helper.to_array(value)
            if attribute.name in ("value_float", "value_int"):
                return np.array(value)
            if attribute.name in ("value_floats", "value_ints"):
                return np.array(list(value))
        return None

    # --- types and shapes ----------------------------------------------------------------------------------
    def elem_type(self, name: str) -> int:
        found = self.types.get(name)
        if not found or not found[0]:
            raise BuilderError(f"the element type of {name!r} is not known (shape inference could not tell it)")
        return found[0]

    def dims(self, name: str) -> Dims:
        """The dims of ``name``: sizes, symbolic names (equal names, equal sizes) or None for unknown sizes;
        None for an unknown rank."""
        found = self.types.get(name)
        return None if not found or found[1] is None else tuple(found[1])

    def rank(self, name: str) -> Optional[int]:
        dims = self.dims(name)
        return None if dims is None else len(dims)

    def static_shape(self, name: str) -> Optional[Tuple[int, ...]]:
        """The shape of ``name`` when every size is known."""
        dims = self.dims(name)
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        return tuple(int(d) for d in dims)  # type: ignore[arg-type]

    def is_sequence(self, name: str) -> bool:
        """Whether ``name`` is a sequence of tensors (its gradient is one too)."""
        return name in self.sequences

    def same_type(self, name: str, like: str) -> str:
        """Record that ``name`` has ``like``'s type and shape (a gradient has its value's); returns ``name``."""
        if like in self.sequences:
            self.sequences.add(name)
        if like in self.types:
            self.types.setdefault(name, self.types[like])
        for probe in self.probes:
            if like in probe:
                probe.setdefault(name, probe[like])
        return name

    def value_info(self, name: str, like: str) -> onnx.ValueInfoProto:
        """A declaration of ``name`` with ``like``'s type: a tensor's, or a sequence's (a subgraph's inputs and
        outputs, which a sequence gradient may be)."""
        elem_type = self.elem_type(like)
        if self.is_sequence(like):
            return helper.make_tensor_sequence_value_info(name, elem_type, None)
        dims = self.dims(like)
        return helper.make_tensor_value_info(name, elem_type, None if dims is None else list(dims))

    def shape(self, name: str) -> str:
        """The shape of ``name`` as an int64 value: a constant when static, else a Shape node."""
        static = self.static_shape(name)
        if static is not None:
            return self.ints(static)
        return self.op("Shape", name)

    def declare(self, name: str, like: str) -> None:
        """Declare ``name``'s type and shape in the training graph as ``like``'s (a ``value_info``): some
        gradient kernels (AveragePoolGrad) size their output from the graph's declared shape alone."""
        found = self.types.get(like)
        if not found or found[1] is None:
            raise BuilderError(f"the shape of {like!r} is not known (shape inference could not tell it)")
        self.types[name] = found
        self.value_infos.append(helper.make_tensor_value_info(name, found[0], list(found[1])))

    def forward_output(self, node: "NodeView", index: int, hint: str) -> str:
        """Output ``index`` of the forward ``node``, declared under a fresh name where the node leaves that
        optional output out (a gradient kernel reads it: LayerNormalization's mean, MaxPool's indices,
        Dropout's mask). Changes the node of the training graph only (the eval graph is a separate copy)."""
        proto = node.proto
        while len(proto.output) <= index:
            proto.output.append("")
        if not proto.output[index]:
            proto.output[index] = self.fresh(f"{proto.name or proto.op_type}/{hint}")
        node.outputs = list(proto.output)
        return proto.output[index]

    # --- helpers in the opset's form -----------------------------------------------------------------------
    def reduce_sum(self, x: str, axes: Optional[Sequence[int]] = None, keepdims: int = 1,
                   axes_value: Optional[str] = None) -> str:
        """ReduceSum of ``x`` over ``axes`` (a list) or ``axes_value`` (a run-time int64 vector; empty
        reduces nothing)."""
        if axes_value is not None:
            if self.opset < 13:
                raise BuilderError("a reduction over run-time axes needs opset 13 or newer")
            return self.op("ReduceSum", x, axes_value, keepdims=keepdims, noop_with_empty_axes=1)
        if self.opset >= 13:
            return self.op("ReduceSum", x, None if axes is None else self.ints(axes), keepdims=keepdims)
        return self.op("ReduceSum", x, axes=None if axes is None else list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.ints(axes))
        return self.op("Unsqueeze", x, axes=list(axes))

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Squeeze", x, self.ints(axes))
        return self.op("Squeeze", x, axes=list(axes))

    def reshape_like(self, x: str, like: str) -> str:
        """``x`` reshaped to ``like``'s shape."""
        return self.same_type(self.op("Reshape", x, self.shape(like)), like)

    def unbroadcast(self, grad: str, operand: str, result: str) -> str:
        """Sum ``grad`` (shaped like ``result``) back to ``operand``'s shape, over the axes ``operand`` was
        broadcast along: decided statically where the shapes tell (equal sizes, or an operand size of 1),
        else at run time (ONNX Runtime's ``BroadcastGradientArgs`` gives the axes)."""
        operand_dims, result_dims = self.dims(operand), self.dims(result)
        if operand_dims is not None and result_dims is not None and len(result_dims) >= len(operand_dims):
            lead = len(result_dims) - len(operand_dims)
            pairs = list(zip(operand_dims, result_dims[lead:]))
            if all(o == 1 or (o is not None and o == r) for o, r in pairs):
                axes = list(range(lead)) + [lead + i for i, (o, r) in enumerate(pairs) if o == 1 and r != 1]
                return self._sum_back(grad, operand, axes, lead)
        probed = broadcast_axes([p.get(operand) for p in self.probes], [p.get(result) for p in self.probes])
        if probed is not None:  # the axes for every size, as the probes tell them (probe_shapes.py)
            return self._sum_back(grad, operand, probed, len(self.probes[0][result]) - len(self.probes[0][operand]))
        operand_shape = self.shape(operand)
        run_time_axes = self.ms("BroadcastGradientArgs", operand_shape, self.shape(result), outputs=2)[0]
        summed = self.reduce_sum(grad, axes_value=run_time_axes, keepdims=1)
        return self.same_type(self.op("Reshape", summed, operand_shape), operand)

    def _sum_back(self, grad: str, operand: str, axes: List[int], lead: int) -> str:
        """``grad`` summed over the static ``axes`` (the first ``lead`` of them the result's extra leading
        axes, dropped) to ``operand``'s shape: one ReduceSum where only leading axes go (a bias's gradient),
        as ONNX Runtime's generator writes it."""
        if not axes:
            return grad
        if axes == list(range(lead)):
            return self.same_type(self.reduce_sum(grad, axes, keepdims=0), operand)
        summed = self.reduce_sum(grad, axes, keepdims=1)
        if lead:
            summed = self.squeeze(summed, list(range(lead)))
        return self.same_type(summed, operand)


class NodeView:
    """A forward node as its rule sees it: inputs, outputs, attributes, and the gradients flowing in."""

    def __init__(self, node: onnx.NodeProto, output_grads: Sequence[Optional[str]], wanted: Sequence[bool],
                 outer_inputs: Sequence[str] = ()):
        self.proto = node
        self.op_type = node.op_type
        self.name = node.name
        self.inputs = list(node.input)
        # what the node's subgraphs read from the enclosing graph; wants(len(inputs) + k) for the k-th
        self.outer_inputs = list(outer_inputs)
        self.outputs = list(node.output)
        self._output_grads = list(output_grads)
        self._wanted = list(wanted)
        self._attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute's value (bytes of strings decoded), or ``default``."""
        value = self._attributes.get(name, default)
        if isinstance(value, bytes):
            return value.decode()
        return value

    def has_input(self, index: int) -> bool:
        return index < len(self.inputs) and bool(self.inputs[index])

    def grad(self, index: int = 0) -> Optional[str]:
        """The gradient of output ``index``, or None when no gradient flows into it."""
        return self._output_grads[index] if index < len(self._output_grads) else None

    def dy(self, index: int = 0) -> str:
        """The gradient of output ``index``, for a rule that needs one there."""
        found = self.grad(index)
        if found is None:
            raise BuilderError(f"{self.describe()}: no gradient flows into its output {index}, and its rule needs one")
        return found

    def wants(self, index: int) -> bool:
        """Whether the engine needs the gradient of input ``index``."""
        return index < len(self._wanted) and self._wanted[index]

    def describe(self) -> str:
        return f"{self.op_type} node {self.name!r}" if self.name else f"an unnamed {self.op_type} node"


def infer_types(model: onnx.ModelProto) -> Dict[str, Tuple[int, Dims]]:
    """name -> (element type, dims) of every value shape inference can tell in the main graph."""
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # a model shape inference fails on: what the model itself declares
        inferred = model
    found: Dict[str, Tuple[int, Dims]] = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.WhichOneof("value") != "tensor_type":
            continue
        tensor = value.type.tensor_type
        dims: Dims = None
        if tensor.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
        if tensor.elem_type or value.name not in found:
            found[value.name] = (tensor.elem_type, dims)
    for initializer in graph.initializer:
        found[initializer.name] = (initializer.data_type, tuple(initializer.dims))
    for node in graph.node:  # Constant nodes: shape inference knows them, but say it plainly
        if node.op_type == "Constant" and node.output and node.output[0] not in found:
            for attribute in node.attribute:
                if attribute.name == "value":
                    found[node.output[0]] = (attribute.t.data_type, tuple(attribute.t.dims))
    return found


SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
                          "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap"})


def _holds_sequences(graph: onnx.GraphProto) -> bool:
    """Whether ``graph`` or a subgraph of its nodes declares a sequence or runs a sequence operator."""
    declared = list(graph.input) + list(graph.output) + list(graph.value_info)
    if any(v.type.WhichOneof("value") == "sequence_type" for v in declared):
        return True
    for node in graph.node:
        if node.op_type in SEQUENCE_OPS and node.domain in ("", "ai.onnx"):
            return True
        for attribute in node.attribute:
            subgraphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
            if any(_holds_sequences(subgraph) for subgraph in subgraphs):
                return True
    return False


def sequence_types(model: onnx.ModelProto) -> Dict[str, int]:
    """name -> element type of every sequence-typed value shape inference can tell in the main graph (0 where
    it cannot tell the element type). Shape inference runs only for a model that holds a sequence."""
    if not _holds_sequences(model.graph):
        return {}
    from onnx import shape_inference

    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # what the model itself declares
        inferred = model
    found: Dict[str, int] = {}
    graph = inferred.graph
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.WhichOneof("value") == "sequence_type":
            element = value.type.sequence_type.elem_type
            found[value.name] = element.tensor_type.elem_type if element.WhichOneof("value") == "tensor_type" else 0
    return found


def unique_name(taken: Set[str], hint: str) -> str:
    """``hint``, or ``hint`` with a number, whichever ``taken`` lacks first; added to ``taken``."""
    name, count = hint, 0
    while name in taken:
        count += 1
        name = f"{hint}_{count}"
    taken.add(name)
    return name


FLOAT = TensorProto.FLOAT
FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)  # carry gradients
