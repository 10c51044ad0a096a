"""The table of lowering rules: one rule per ``com.microsoft`` training operator, registered once.

A rule is a function ``rule(node, emit) -> None``. ``node`` is the ``onnx.NodeProto`` to replace; ``emit``
is an ``Emitter`` that writes the standard nodes standing for it. The rule must produce each of the node's
outputs under the node's own output name (``emit.node(..., [node.output[i]])``); an empty output name means
that output is not needed and the rule may skip it. Rules live beside this module, one file per family;
importing the ``lowering`` package registers them all.

A rule targets default-domain operators valid at ``emit.opset`` (the model's default opset import), and
the few inference contrib operators every CPU build from 1.19.2 to 1.31.1 has (``CONTRIB_TARGETS``). It
raises ``LoweringError`` when a case cannot be written in them (an attribute value the rule does not know),
so that the session is refused before anything runs.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MICROSOFT = "com.microsoft"

# Inference contrib operators a lowering may target: each has a CPU kernel in ONNX Runtime 1.19.2 and 1.31.1
# (tests/engine/test_lowering_targets.py runs each on both).
CONTRIB_TARGETS = frozenset({"FusedMatMul", "Gelu", "FastGelu", "BiasGelu", "QuickGelu"})
# Default-domain operators that ONNX lacks below some opset but ONNX Runtime's inference builds register there
# themselves, 1.19.2 and 1.31.1 alike (LayerNormalization before opset 17): they run as they are.
RUNTIME_DEFAULT_DOMAIN = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})
# Standard operators that inference builds have no kernel for and run as their ONNX function, node by node, where
# a rule writes them in fewer kernels (SoftmaxCrossEntropyLoss: only training builds register its kernel), or
# whose kernel is slow in a case a rule writes faster (MaxPool's Indices: lowering/convolution.py).
RESTATED_STANDARD = frozenset({"SoftmaxCrossEntropyLoss", "MaxPool"})


class LoweringError(ValueError):
    """A node that its rule cannot write in standard operators (an attribute value outside what it knows, a
    rank it needs and cannot learn). ``needs_opset``: the default-domain opset from which it could, where a
    newer opset is all it lacks (the driver may raise the model's, where that is safe)."""

    def __init__(self, message: str, needs_opset: Optional[int] = None):
        super().__init__(message)
        self.needs_opset = needs_opset


class UnsupportedTrainingOpError(ValueError):
    """Training operators the engine cannot run: each has no lowering, or its lowering refused the node. Raised
    when a session is created, before anything runs; ``ops`` names every operator type concerned."""

    def __init__(self, ops: Sequence[str], reasons: Sequence[str] = ()):
        self.ops = sorted(set(ops))
        lines = [f"these training operators have no lowering to standard ONNX operators: {', '.join(self.ops)}"]
        lines += [f"- {reason}" for reason in reasons]
        lines.append("The training build of ONNX Runtime (1.19.2) runs them; this engine over the inference API "
                     "cannot.")
        super().__init__("\n".join(lines))


Rule = Callable[[onnx.NodeProto, "Emitter"], None]
RULES: Dict[str, Rule] = {}


def lowers(*op_types: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the lowering of the operators ``op_types``: ``com.microsoft`` training
    operators, and the standard ones of ``RESTATED_STANDARD``."""

    def register(rule: Rule) -> Rule:
        for op_type in op_types:
            if op_type in RULES:
                raise RuntimeError(f"two lowering rules for com.microsoft::{op_type}: "
                                   f"{RULES[op_type].__module__} and {rule.__module__}")
            RULES[op_type] = rule
        return rule

    return register


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """The value of ``node``'s attribute ``name`` as Python data (ints, floats, strings as str, lists), or
    ``default`` when the node does not set it."""
    for attr in node.attribute:
        if attr.name == name:
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                return value.decode("utf-8")
            if isinstance(value, list) and value and isinstance(value[0], bytes):
                return [v.decode("utf-8") for v in value]
            return value
    return default


Dim = Union[int, str, None]


# The doc string of a node that is there to fail at run time where the inputs disagree (a Reshape of the labels
# to the scores' dimensions): passes that simplify shapes leave it as it is.
SHAPE_CHECK = "ort_cffi: shape check"


class Emitter:
    """What a rule writes with: nodes, constants and fresh names, and what is known of a value's type.

    ``types`` maps value names to ``onnx.TypeProto`` (from onnx's shape inference where it could tell, kept up
    to date as nodes are emitted); ``taken`` holds every name in use in the model, so that ``fresh`` names
    never collide, also across subgraphs."""

    def __init__(self, opset: int, taken: Set[str], types: Dict[str, onnx.TypeProto], label: str = "lowered",
                 data: Optional[Dict[str, onnx.TensorProto]] = None,
                 producers: Optional[Dict[str, onnx.NodeProto]] = None):
        self.opset = opset
        self.taken = taken
        self.types = types
        self.label = label
        self.data: Dict[str, onnx.TensorProto] = {} if data is None else data  # values known before run time
        self.producers: Dict[str, onnx.NodeProto] = {} if producers is None else producers
        self.nodes: List[onnx.NodeProto] = []
        # the intra-op threads the lowered model's sessions run with: some forms are chosen by it (their
        # rules say so); the engine's cache of lowered models keys on it
        self.intra_op_threads = 1

    def producer(self, name: str) -> Optional[onnx.NodeProto]:
        """The node of the model being lowered that computes ``name`` (None: a graph input or initializer)."""
        return self.producers.get(name)

    def value(self, name: str) -> Optional[np.ndarray]:
        """``name``'s value where it is known before run time (an initializer or a Constant), else None."""
        known = self.data.get(name)
        return None if known is None else numpy_helper.to_array(known)

    # names ---------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A name unused anywhere in the model, derived from ``hint`` and the node being lowered."""
        base = f"{self.label}/{hint}"
        name, count = base, 0
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        return name

    # nodes ---------------------------------------------------------------------------------------
    def node(self, op_type: str, inputs: Sequence[str], outputs: Union[int, Sequence[str]] = 1,
             domain: str = "", **attributes: Any) -> List[str]:
        """Emit one node and return its output names: ``outputs`` is a count (fresh names) or the names. An
        input name may be "" for an omitted optional input. Attributes set to None are left out."""
        if isinstance(outputs, int):
            names = [self.fresh(f"{op_type}_out{i}" if outputs > 1 else f"{op_type}_out") for i in range(outputs)]
        else:
            names = list(outputs)
            self.taken.update(n for n in names if n)
        kept = {key: value for key, value in attributes.items() if value is not None}
        made = helper.make_node(op_type, list(inputs), names, name=self.fresh(op_type), domain=domain, **kept)
        self.nodes.append(made)
        self._infer(made)
        return names

    def one(self, op_type: str, inputs: Sequence[str], output: Optional[str] = None, domain: str = "",
            **attributes: Any) -> str:
        """Emit a node with one output (named ``output``, else fresh) and return that name."""
        return self.node(op_type, inputs, 1 if output is None else [output], domain=domain, **attributes)[0]

    def const(self, value: Any, dtype: Any = None) -> str:
        """A Constant node holding ``value`` (an array or a scalar; a scalar stays 0-d) as ``dtype``."""
        array = np.asarray(value, dtype=dtype)
        if array.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            array = array.astype(np.float32)  # a Python float means float32 unless said otherwise
        if array.dtype == np.int32 and dtype is None and not isinstance(value, np.ndarray):
            array = array.astype(np.int64)  # and a Python int means int64 (shapes, axes, indices)
        name = self.fresh("const")
        made = helper.make_node("Constant", [], [name], name=self.fresh("Constant"),
                                value=numpy_helper.from_array(array.copy(order="C"), name))
        self.nodes.append(made)
        self.data[name] = made.attribute[0].t
        self.types[name] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(array.dtype),
                                                         list(array.shape))
        return name

    def const_like(self, value: float, like: str) -> str:
        """A scalar constant of ``like``'s element type (float32 where it is not known)."""
        elem = self.elem_type(like)
        dtype = helper.tensor_dtype_to_np_dtype(elem) if elem else np.float32
        return self.const(np.array(value, dtype=dtype))

    def copy(self, source: str, output: str) -> str:
        """``output`` as an Identity of ``source`` (an output the rule computes under another name)."""
        return self.one("Identity", [source], output)

    # types ---------------------------------------------------------------------------------------
    def elem_type(self, name: str) -> Optional[int]:
        """The ``TensorProto`` element type of value ``name``, or None where it is not known."""
        known = self.types.get(name)
        if known is None or not known.HasField("tensor_type") or not known.tensor_type.elem_type:
            return None
        return int(known.tensor_type.elem_type)

    def dtype(self, name: str) -> Optional[np.dtype]:
        """The numpy dtype of value ``name``, or None where it is not known."""
        elem = self.elem_type(name)
        return None if elem is None else np.dtype(helper.tensor_dtype_to_np_dtype(elem))

    def shape(self, name: str) -> Optional[List[Dim]]:
        """Value ``name``'s shape: a dimension is an int, a symbol (str) or None (unknown); None where not even
        the rank is known."""
        known = self.types.get(name)
        if known is None or not known.HasField("tensor_type") or not known.tensor_type.HasField("shape"):
            return None
        dims: List[Dim] = []
        for dim in known.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(int(dim.dim_value))
            elif dim.HasField("dim_param"):
                dims.append(dim.dim_param)
            else:
                dims.append(None)
        return dims

    def rank(self, name: str) -> Optional[int]:
        """Value ``name``'s rank, or None where it is not known."""
        dims = self.shape(name)
        return None if dims is None else len(dims)

    def require_rank(self, name: str, what: str) -> int:
        """``name``'s rank, or a ``LoweringError`` saying that ``what`` needs it."""
        found = self.rank(name)
        if found is None:
            raise LoweringError(f"{self.label}: the rank of {what} ({name!r}) is not known, and the lowering needs it")
        return found

    def _infer(self, made: onnx.NodeProto) -> None:
        infer_types(made, self.opset, self.types, self.data)

    # opset-aware forms (inputs or attributes by the model's opset) ---------------------------------
    def unsqueeze(self, x: str, axes: Sequence[int], output: Optional[str] = None) -> str:
        if self.opset >= 13:
            return self.one("Unsqueeze", [x, self.const(np.array(axes, np.int64))], output)
        return self.one("Unsqueeze", [x], output, axes=list(axes))

    def squeeze(self, x: str, axes: Sequence[int], output: Optional[str] = None) -> str:
        if self.opset >= 13:
            return self.one("Squeeze", [x, self.const(np.array(axes, np.int64))], output)
        return self.one("Squeeze", [x], output, axes=list(axes))

    def reduce(self, op_type: str, x: str, axes: Optional[Union[Sequence[int], str]], keepdims: bool = True,
               output: Optional[str] = None) -> str:
        """``op_type`` (ReduceSum, ReduceMean, ReduceMax, ...) over ``axes``: a list, the name of an int64 value
        (only where the opset takes axes as an input), or None for all axes."""
        takes_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes is None:
            return self.one(op_type, [x], output, keepdims=int(keepdims))
        if isinstance(axes, str):
            if not takes_input:
                raise LoweringError(f"{self.label}: {op_type} over axes known only at run time needs opset "
                                    f"{13 if op_type == 'ReduceSum' else 18}; the model imports {self.opset}",
                                    13 if op_type == "ReduceSum" else 18)
            return self.one(op_type, [x, axes], output, keepdims=int(keepdims))
        if takes_input:
            return self.one(op_type, [x, self.const(np.array(list(axes), np.int64))], output, keepdims=int(keepdims))
        return self.one(op_type, [x], output, axes=list(axes), keepdims=int(keepdims))

    def shape_of(self, x: str, start: int = 0, end: Optional[int] = None) -> str:
        """``Shape(x)[start:end]`` as an int64 vector."""
        if self.opset >= 15:
            return self.one("Shape", [x], start=start if start else None, end=end)
        whole = self.one("Shape", [x])
        if not start and end is None:
            return whole
        ends = np.iinfo(np.int64).max if end is None else end
        return self.one("Slice", [whole, self.const(np.array([start], np.int64)), self.const(np.array([ends], np.int64))])

    def zeros(self, shape: str, like: str, output: Optional[str] = None) -> str:
        """Zeros of shape ``shape`` (an int64 vector) and of ``like``'s element type."""
        elem = self.elem_type(like)
        if elem is not None:
            zero = helper.make_tensor("zero", elem, [1], np.zeros(1, helper.tensor_dtype_to_np_dtype(elem)).tolist())
            return self.one("ConstantOfShape", [shape], output, value=zero)
        return self.cast_like(self.one("ConstantOfShape", [shape]), like, output)

    def sum_to(self, x: str, target: str, output: Optional[str] = None) -> str:
        """``x`` (a result broadcast from ``target``'s shape) summed back to ``target``'s shape: over the leading
        axes ``target`` lacks and the axes where it has size 1. Axes are found before run time where the
        shapes are known, else at run time."""
        x_shape, t_shape = self.shape(x), self.shape(target)
        if x_shape is not None and t_shape is not None and all(isinstance(d, int) for d in t_shape) and \
                all(isinstance(d, int) for d in x_shape[len(x_shape) - len(t_shape):]):
            lead = len(x_shape) - len(t_shape)
            axes = list(range(lead)) + [lead + i for i, d in enumerate(t_shape) if d == 1 and x_shape[lead + i] != 1]
            if not axes:
                return self.copy(x, output) if output else x
            summed = self.reduce("ReduceSum", x, axes, keepdims=True)
            return self.one("Reshape", [summed, self.const(np.array(t_shape, np.int64))], output)
        if self.opset < 13:
            raise LoweringError(f"{self.label}: summing a gradient back over broadcast axes known only at run time "
                                f"needs opset 13; the model imports {self.opset}", 13)
        x_dims, t_dims = self.shape_of(x), self.shape_of(target)
        summed = self.one("ReduceSum", [x, self.broadcast_axes(t_dims, x_dims)], keepdims=1, noop_with_empty_axes=1)
        return self.one("Reshape", [summed, t_dims], output)

    def broadcast_axes(self, small: str, large: str) -> str:
        """The axes (int64 vector, ascending) of a shape ``large`` along which shape ``small`` (no longer than
        it) was broadcast: the leading axes ``small`` lacks, and those where ``small`` is 1 and ``large`` is not."""
        one = self.const(np.array([1], np.int64))
        rank_small, rank_large = self.one("Shape", [small]), self.one("Shape", [large])
        lead = self.one("Sub", [rank_large, rank_small])
        padded = self.one("Concat", [self.one("Expand", [one, lead]), small], axis=0)
        index = self.one("Range", [self.const(np.array(0, np.int64)), self.squeeze(rank_large, [0]),
                                   self.const(np.array(1, np.int64))])
        is_lead = self.one("Less", [index, lead])
        stretched = self.one("And", [self.one("Equal", [padded, one]),
                                     self.one("Not", [self.one("Equal", [large, one])])])
        return self.one("Compress", [index, self.one("Or", [is_lead, stretched])], axis=0)

    def require_opset(self, version: int, what: str) -> None:
        """Refuse the node (``LoweringError`` with ``needs_opset``) where the model's opset is below ``version``."""
        if self.opset < version:
            raise LoweringError(f"{self.label}: {what} needs opset {version}; the model imports {self.opset}", version)

    def cast_like(self, x: str, like: str, output: Optional[str] = None) -> str:
        """``x`` cast to ``like``'s element type (CastLike where the opset has it, else Cast to a known type)."""
        elem = self.elem_type(like)
        if elem is not None:
            return self.one("Cast", [x], output, to=elem)
        if self.opset >= 15:
            return self.one("CastLike", [x, like], output)
        raise LoweringError(f"{self.label}: the element type of {like!r} is not known")


def infer_types(node: onnx.NodeProto, opset: int, types: Dict[str, onnx.TypeProto],
                data: Dict[str, onnx.TensorProto]) -> None:
    """Record in ``types`` the types of ``node``'s outputs that onnx's inference of this one node gives (a
    default-domain node whose inputs' types are known; ``data`` holds the values known before run time)."""
    if node.domain not in ("", "ai.onnx") or any(out in types for out in node.output if out):
        return
    if not all(i in types for i in node.input if i):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        inferred = onnx.shape_inference.infer_node_outputs(
            schema, node, {i: types[i] if i else onnx.TypeProto() for i in node.input},
            {i: data[i] for i in node.input if i in data})
    except Exception:  # onnx cannot tell (a subgraph, a check it makes): the type stays unknown, which is allowed
        return
    for out, type_proto in inferred.items():
        if out and type_proto.WhichOneof("value"):
            types[out] = type_proto


def make_tensor_type(elem_type: int, shape: Optional[Sequence[Dim]]) -> onnx.TypeProto:
    """A tensor ``TypeProto`` (a helper for rules that know an output's type better than inference does)."""
    return helper.make_tensor_type_proto(elem_type, None if shape is None else list(shape))


__all__ = ["CONTRIB_TARGETS", "RUNTIME_DEFAULT_DOMAIN", "SHAPE_CHECK", "Emitter", "LoweringError", "MICROSOFT", "RULES", "Rule", "TensorProto",
           "UnsupportedTrainingOpError", "attribute", "infer_types", "lowers", "make_tensor_type"]
