"""Sequence operators: a sequence of tensors (SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
SequenceAt, SequenceLength, SplitToSequence, ConcatFromSequence). torch's default exporter writes
``nn.EmbeddingBag`` so: a Loop appends each bag's row to a sequence, ConcatFromSequence stacks them.

The gradient of a sequence is a sequence of as many tensors, each shaped like its element: ConcatFromSequence's
splits the output's gradient back into pieces as long as the elements (SplitToSequence), SequenceAt's is a
sequence of zeros holding the output's gradient at that position, SequenceInsert's takes the inserted element's
gradient out again. Where a sequence is read twice its gradients are added element by element (``sum_sequences``,
which the engine calls as it sums a tensor's with Sum). Everything is written in standard operators that ONNX
Runtime 1.19.2 has CPU kernels for (a Loop over the elements where each element needs its own shape), so the
artifacts run on the training build and on the engine alike.

A sequence of integers or booleans carries no gradient, as a tensor of them does not (the engine's
``_carries_value``). A Loop that carries a sequence is control.py's: it carries the sequence's gradient back
through the iterations.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from ort_cffi.artifacts.builder.context import BuilderError, Dims, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient, no_gradient
from ort_cffi.artifacts.builder.rules.shape import zeros_like

Grads = List[Optional[str]]

no_gradient("SequenceLength", "SequenceEmpty", family="sequences")


def _int64(g: GradientContext, position: str) -> str:
    """A position (int32 or int64, as the sequence operators take) as int64."""
    if g.types.get(position, (0, None))[0] == TensorProto.INT64:
        return position
    return _typed(g, g.op("Cast", position, to=TensorProto.INT64), TensorProto.INT64, g.dims(position))


def _typed(g: GradientContext, name: str, elem_type: int, dims: Dims = ()) -> str:
    g.types[name] = (elem_type, dims)
    return name


def _length(g: GradientContext, sequence: str) -> str:
    return _typed(g, g.op("SequenceLength", sequence), TensorProto.INT64)


def _absolute(g: GradientContext, position: str, length: str) -> str:
    """``position`` counted from the front: a negative one counts from the back of a sequence of ``length``."""
    position = _int64(g, position)
    zero = g.const(np.array(0, dtype=np.int64))
    from_back = g.op("Add", position, length)
    where = g.op("Where", g.op("Less", position, zero), from_back, position)
    return _typed(g, where, TensorProto.INT64, g.dims(position))  # a scalar, or [1] where the model feeds one


def _element(g: GradientContext, sequence: str, position: str) -> str:
    """SequenceAt, typed as the sequence's elements (shape unknown)."""
    return _typed(g, g.op("SequenceAt", sequence, position), g.elem_type(sequence), None)


class _Body:
    """A Loop over the elements of a sequence, step ``i``, whose body the caller fills (``nodes``); its
    loop-carried values and scan outputs are declared as the caller says."""

    def __init__(self, g: GradientContext, hint: str):
        self.g = g
        self.hint = hint
        self.i = g.fresh(f"{hint}/i")
        self.condition = g.fresh(f"{hint}/cond")
        self.condition_out = g.fresh(f"{hint}/cond_out")
        self.nodes: List[onnx.NodeProto] = [helper.make_node("Identity", [self.condition], [self.condition_out],
                                                             name=g.fresh(f"{hint}/Identity"))]
        self.inputs = [helper.make_tensor_value_info(self.i, TensorProto.INT64, []),
                       helper.make_tensor_value_info(self.condition, TensorProto.BOOL, [])]
        self.outputs = [helper.make_tensor_value_info(self.condition_out, TensorProto.BOOL, [])]

    def add(self, op: str, inputs: Sequence[str], **attributes: Any) -> str:
        out = self.g.fresh(f"{self.hint}/{op}")
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=self.g.fresh(f"{self.hint}/{op}_node"),
                                           **attributes))
        return out

    def graph(self) -> onnx.GraphProto:
        return helper.make_graph(self.nodes, self.g.fresh(f"{self.hint}/body"), self.inputs, self.outputs)


def _rebuilt(g: GradientContext, sequences: Sequence[str], elem_type: int, hint: str,
             element: Callable[["_Body", List[str]], str], output: Optional[str] = None) -> str:
    """A new sequence (named ``output``, else a fresh name) as long as ``sequences[0]``: element i is
    ``element(body, [SequenceAt(s, i) for s in sequences])``, appended in a Loop that carries the sequence
    built so far."""
    body = _Body(g, hint)
    built_in, built_out = g.fresh(f"{hint}/built"), g.fresh(f"{hint}/built_out")
    body.inputs.append(helper.make_tensor_sequence_value_info(built_in, elem_type, None))
    items = [body.add("SequenceAt", [s, body.i]) for s in sequences]
    body.nodes.append(helper.make_node("SequenceInsert", [built_in, element(body, items)], [built_out],
                                       name=g.fresh(f"{hint}/SequenceInsert")))
    body.outputs.append(helper.make_tensor_sequence_value_info(built_out, elem_type, None))
    empty = g.op("SequenceEmpty", dtype=elem_type)
    return g.node("Loop", [_length(g, sequences[0]), "", empty], [output] if output else 1, body=body.graph())[0]


def zeros_like_sequence(g: GradientContext, sequence: str) -> str:
    """A sequence of zeros, element for element shaped like ``sequence``'s."""
    elem_type = g.elem_type(sequence)
    zero = helper.make_tensor("value", elem_type, [1], [0])

    def zeros(body: _Body, items: List[str]) -> str:
        return body.add("ConstantOfShape", [body.add("Shape", [items[0]])], value=zero)

    return g.same_type(_rebuilt(g, [sequence], elem_type, f"{sequence}_zeros", zeros), sequence)


def zeros_like_value(g: GradientContext, value: str) -> str:
    """Zeros shaped like ``value``, a tensor or a sequence: the gradient of a value nothing flows into."""
    if g.is_sequence(value):
        return zeros_like_sequence(g, value)
    return zeros_like(g, value)


def copy_value(g: GradientContext, value: str) -> str:
    """A copy of ``value`` under a new name (a subgraph's output that would otherwise be a value it reads):
    Identity, which takes a sequence from opset 14 on; before, a Loop of no iterations that carries it."""
    if not g.is_sequence(value) or g.opset >= 14:
        return g.same_type(g.op("Identity", value), value)
    body = _Body(g, f"{value}_copy")
    carried_in, carried_out = g.fresh(f"{value}_copy/in"), g.fresh(f"{value}_copy/out")
    body.inputs.append(helper.make_tensor_sequence_value_info(carried_in, g.elem_type(value), None))
    body.nodes.append(helper.make_node("SequenceErase", [carried_in], [carried_out],
                                       name=g.fresh(f"{value}_copy/SequenceErase")))  # never runs
    body.outputs.append(helper.make_tensor_sequence_value_info(carried_out, g.elem_type(value), None))
    none = g.const(np.array(0, dtype=np.int64))
    return g.same_type(g.node("Loop", [none, "", value], 1, body=body.graph())[0], value)


def sum_sequences(g: GradientContext, values: Sequence[str], name: str, like: str) -> str:
    """``values`` (sequences of equal lengths and shapes) added element by element into ``name``: the
    gradient of a sequence read more than once."""
    elem_type = g.elem_type(like)

    def add(body: _Body, items: List[str]) -> str:
        return body.add("Sum", items)

    return g.same_type(_rebuilt(g, values, elem_type, f"{like}_grad_sum", add, output=name), like)


@gradient("SequenceConstruct")
def sequence_construct(g: GradientContext, node: NodeView) -> Grads:
    """Element k's gradient is the sequence gradient's element k."""
    dy = node.dy()
    return [g.same_type(g.op("SequenceAt", dy, g.const(np.array(k, dtype=np.int64))), x) if node.wants(k) else None
            for k, x in enumerate(node.inputs)]


@gradient("SequenceInsert", inputs=(0, 1))
def sequence_insert(g: GradientContext, node: NodeView) -> Grads:
    """The output's gradient holds the inserted tensor's at its position (the last by default): taken out, it
    is that tensor's gradient, and what remains the input sequence's."""
    dy = node.dy()
    if node.has_input(2):  # counted in the input sequence, one shorter than the gradient
        shorter = _typed(g, g.op("Sub", _length(g, dy), g.const(np.array(1, dtype=np.int64))), TensorProto.INT64)
        at = _absolute(g, node.inputs[2], shorter)
    else:
        at = g.const(np.array(-1, dtype=np.int64))
    grads: Grads = [None, None]
    if node.wants(0):
        grads[0] = g.same_type(g.op("SequenceErase", dy, at), node.inputs[0])
    if node.wants(1):
        grads[1] = g.same_type(g.op("SequenceAt", dy, at), node.inputs[1])
    return grads


@gradient("SequenceErase", inputs=(0,))
def sequence_erase(g: GradientContext, node: NodeView) -> Grads:
    """The erased tensor took no part: zeros shaped like it go back in at its position (the last by default)."""
    sequence = node.inputs[0]
    if node.has_input(1):
        at = _absolute(g, node.inputs[1], _length(g, sequence))
        zeros = zeros_like(g, _element(g, sequence, at))
        return [g.same_type(g.op("SequenceInsert", node.dy(), zeros, at), sequence)]
    zeros = zeros_like(g, _element(g, sequence, g.const(np.array(-1, dtype=np.int64))))
    return [g.same_type(g.op("SequenceInsert", node.dy(), zeros), sequence)]


@gradient("SequenceAt", inputs=(0,))
def sequence_at(g: GradientContext, node: NodeView) -> Grads:
    """A sequence of zeros shaped like the input's elements, with the output's gradient at the position read."""
    sequence = node.inputs[0]
    at = _absolute(g, node.inputs[1], _length(g, sequence))
    erased = g.op("SequenceErase", zeros_like_sequence(g, sequence), at)
    return [g.same_type(g.op("SequenceInsert", erased, node.dy(), at), sequence)]


@gradient("SplitToSequence", inputs=(0,))
def split_to_sequence(g: GradientContext, node: NodeView) -> Grads:
    """The pieces' gradients concatenated back along the axis (stacked along a new one where the pieces lost
    it: no split given and keepdims 0)."""
    stacked = 1 if not node.has_input(1) and not node.attr("keepdims", 1) else 0
    return [g.same_type(g.op("ConcatFromSequence", node.dy(), axis=node.attr("axis", 0), new_axis=stacked),
                        node.inputs[0])]


@gradient("ConcatFromSequence", inputs=(0,))
def concat_from_sequence(g: GradientContext, node: NodeView) -> Grads:
    """The output's gradient split back into pieces as long along the axis as the elements were (their
    lengths read at run time, element by element); stacked elements (new_axis 1) split into slices."""
    sequence = node.inputs[0]
    if node.attr("axis") is None:
        raise BuilderError(f"{node.describe()}: ConcatFromSequence needs its axis attribute")
    axis = int(node.attr("axis"))
    if node.attr("new_axis", 0):
        split = g.op("SplitToSequence", node.dy(), axis=axis, keepdims=0)
        return [g.same_type(split, sequence)]
    body = _Body(g, f"{sequence}_lengths")
    element = body.add("SequenceAt", [sequence, body.i])
    length = body.add("Gather", [body.add("Shape", [element]), g.const(np.array(axis, dtype=np.int64))], axis=0)
    body.outputs.append(helper.make_tensor_value_info(length, TensorProto.INT64, []))
    lengths = g.node("Loop", [_length(g, sequence), ""], 1, body=body.graph())[0]
    _typed(g, lengths, TensorProto.INT64, (None,))
    return [g.same_type(g.op("SplitToSequence", node.dy(), lengths, axis=axis), sequence)]
