"""Reshape targets known when the model is lowered, so that no Shape kernel runs for them each step.

A gradient of a Reshape (or of a Squeeze, a Flatten, ...) is written by the gradient builders as
``Reshape(dY, Shape(X))``: one Shape kernel per reshape, run every step, although X's shape is known but for
the batch. ``constant_reshape_targets`` gives each such Reshape a constant target where onnx's shape inference
knows X's dimensions: each known size as it is, one unknown size as -1 (the element count fixes it), or 0 (the
data's own size) where the data's dimension at that index is the same symbol. The Shape node goes where
nothing else reads it. Nothing changes where two sizes are unknown (docs/internals/runtime.md, section 11).
"""
from __future__ import annotations

import itertools
from collections import Counter
from typing import Dict, Iterator, List, Optional, Set, Union

import numpy as np
import onnx
from onnx import numpy_helper

from ort_cffi._backends.engine.lowering.registry import SHAPE_CHECK, attribute

Dim = Union[int, str, None]


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in itertools.chain([attr.g] if attr.HasField("g") else [], attr.graphs):
                yield from _all_nodes(sub)


SMALL_INITIALIZER = 4096  # bytes: an initializer this small (a shape, an axis) stays a constant for inference


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` for shape inference, its large initializers declared as inputs of their type and shape
    (inference serializes the model it is given: the weights would be copied). The engine's memory-pattern
    choice and the builder's standard forms read shapes through it too."""
    stripped = onnx.ModelProto(ir_version=model.ir_version)
    stripped.opset_import.extend(model.opset_import)
    stripped.functions.extend(model.functions)
    graph, copy = model.graph, stripped.graph
    copy.node.extend(graph.node)
    copy.input.extend(graph.input)
    copy.output.extend(graph.output)
    copy.value_info.extend(graph.value_info)  # what the builder recorded: the outputs of contrib operators
    declared = {value.name for value in graph.input}
    for tensor in graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL and tensor.ByteSize() <= SMALL_INITIALIZER:
            copy.initializer.append(tensor)
        elif tensor.name not in declared:
            copy.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    return stripped


def _dims(model: onnx.ModelProto) -> Dict[str, List[Dim]]:
    """Each value's dimensions as onnx's shape inference (with data propagation, which follows shape
    arithmetic) tells them: a size, a symbol, or None."""
    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model), data_prop=True)
    except Exception:  # an unknown or inconsistent model: nothing is rewritten
        return {}
    graph = inferred.graph
    known: Dict[str, List[Dim]] = {}
    for value in itertools.chain(graph.input, graph.value_info, graph.output):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.HasField("shape"):
            known[value.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                 for d in tensor.shape.dim]
    return known


def _target(target: List[Dim], data: Optional[List[Dim]], allow_zero: bool) -> Optional[List[int]]:
    """The constant target for data reshaped to ``target``'s dimensions, or None where it is not fixed."""
    sizes: List[int] = []
    for index, dim in enumerate(target):
        if isinstance(dim, int) and dim > 0:
            sizes.append(dim)
        elif (isinstance(dim, str) and not allow_zero and data is not None and index < len(data)
              and data[index] == dim):
            sizes.append(0)  # Reshape's 0: the data's size at this index, which is the same symbol
        elif dim is None or isinstance(dim, str):
            sizes.append(-1)
        else:  # a known size of 0: Reshape would read 0 as "the data's size"
            return None
    # one -1 at most; and not with a 0, as an empty batch copied by the 0 would leave -1 undetermined
    if sizes.count(-1) > 1 or (-1 in sizes and 0 in sizes):
        return None
    return sizes


# operators that only compute a shape vector: removed once nothing reads them
_SHAPE_ARITHMETIC = frozenset({"Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Constant",
                               "Size", "Mul", "Div", "Add", "Sub", "Reshape", "Identity"})


def _constant_values(graph: onnx.GraphProto) -> Set[str]:
    known = {i.name for i in graph.initializer}
    known.update(out for node in graph.node if node.op_type == "Constant" for out in node.output)
    return known


def constant_reshape_targets(model: onnx.ModelProto) -> int:
    """Rewrite ``model``'s main graph in place; returns how many Reshapes took a constant target."""
    graph = model.graph
    constants = _constant_values(graph)
    candidates = [node for node in graph.node
                  if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and len(node.input) > 1
                  and node.input[1] and node.input[1] not in constants and node.doc_string != SHAPE_CHECK]
    if not candidates:
        return 0
    dims = _dims(model)
    taken = {name for node in _all_nodes(graph) for name in itertools.chain(node.input, node.output)}
    taken.update(i.name for i in graph.initializer)
    replaced: List[str] = []
    for reshape in candidates:
        target_dims = dims.get(reshape.output[0])
        if not target_dims:
            continue
        sizes = _target(target_dims, dims.get(reshape.input[0]), bool(attribute(reshape, "allowzero", 0)))
        if sizes is None:
            continue
        name = next(f"{reshape.output[0]}/target{'' if i == 0 else f'_{i}'}" for i in itertools.count()
                    if f"{reshape.output[0]}/target{'' if i == 0 else f'_{i}'}" not in taken)
        taken.add(name)
        graph.initializer.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), name))
        replaced.append(reshape.input[1])
        reshape.input[1] = name
    if replaced:
        _drop_unread(graph, replaced)
    return len(replaced)


def _drop_unread(graph: onnx.GraphProto, values: List[str]) -> None:
    """Remove the shape arithmetic that made ``values`` where nothing reads its results any more."""
    producers = {out: node for node in graph.node for out in node.output}
    read = Counter(name for node in _all_nodes(graph) for name in node.input)
    read.update(out.name for out in graph.output)
    dropped: Set[int] = set()
    pending = list(values)
    while pending:
        node = producers.get(pending.pop())
        if (node is None or id(node) in dropped or node.op_type not in _SHAPE_ARITHMETIC
                or node.domain not in ("", "ai.onnx") or any(read[out] for out in node.output if out)):
            continue
        dropped.add(id(node))
        for name in node.input:
            if name:
                read[name] -= 1
                pending.append(name)
    kept = [node for node in graph.node if id(node) not in dropped]
    del graph.node[:]
    graph.node.extend(kept)
    inputs = {value.name for value in graph.input}
    unused = [tensor for tensor in graph.initializer if read[tensor.name] <= 0 and tensor.name not in inputs]
    for tensor in unused:  # constants only the dropped arithmetic read (ONNX Runtime warns of unused ones)
        graph.initializer.remove(tensor)
