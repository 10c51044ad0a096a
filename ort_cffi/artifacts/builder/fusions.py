"""Forward patterns the training model computes with one ONNX Runtime kernel, as ONNX Runtime's generator
does before it differentiates (its GeluFusion and FastGeluFusion): GELU written out with Erf becomes
``com.microsoft`` Gelu, GELU's tanh approximation becomes FastGelu. The backward pass is then one GeluGrad or
FastGeluGrad over X instead of a dozen elementwise gradients, each of which keeps an intermediate alive until
the backward pass reaches it. Measured, a step's peak RSS over that of ONNX Runtime's artifacts: conv1d_regressor
1.009 before, 0.999 after; gpt2_tiny 1.044 and 1.024; bert_tiny 1.020 and 1.017. The eval model keeps the
exported form, as ONNX Runtime's does.

A pattern is fused only where every value inside it feeds nothing outside it, and X is float32 (the only
type ONNX Runtime's CPU kernels take)."""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts.builder.context import Dims, unique_name
from ort_cffi.artifacts.builder.engine import node_inputs
from ort_cffi.artifacts.builder.registry import MICROSOFT

SQRT_2 = float(np.sqrt(2.0))
SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
CUBIC = 0.044715  # the tanh approximation's coefficient of x^3


class _Graph:
    """Who produces and who reads each value of a graph, and its scalar constants."""

    def __init__(self, graph: onnx.GraphProto):
        self.producer: Dict[str, onnx.NodeProto] = {o: n for n in graph.node for o in n.output if o}
        self.readers: Dict[str, List[onnx.NodeProto]] = defaultdict(list)
        for node in graph.node:
            for name in node_inputs(node):  # what If, Loop and Scan bodies read counts too
                self.readers[name].append(node)
        self.outputs = {o.name for o in graph.output}
        # Scalars only: the patterns' constants. The weights stay where they are (in external data, too).
        self.constants: Dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in graph.initializer
            if int(np.prod(i.dims)) == 1 and i.data_location != onnx.TensorProto.EXTERNAL}
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attribute in node.attribute:
                    if attribute.name == "value" and int(np.prod(attribute.t.dims)) == 1 \
                            and attribute.t.data_location != onnx.TensorProto.EXTERNAL:
                        self.constants[node.output[0]] = numpy_helper.to_array(attribute.t)
                    elif attribute.name in ("value_float", "value_int"):
                        self.constants[node.output[0]] = np.array(helper.get_attribute_value(attribute))

    def scalar(self, name: str) -> Optional[float]:
        value = self.constants.get(name)
        if value is None or value.size != 1 or value.dtype.kind not in "fiu":
            return None
        return float(value.reshape(()))

    def is_scalar(self, name: str, expected: float) -> bool:
        found = self.scalar(name)
        return found is not None and abs(found - expected) <= 1e-4 * abs(expected)

    def op(self, name: str, *ops: str) -> Optional[onnx.NodeProto]:
        """The node of type ``ops`` in the default domain that computes ``name``, if one does."""
        node = self.producer.get(name)
        return node if node is not None and node.op_type in ops and node.domain in ("", "ai.onnx") else None

    def sole_reader(self, name: str, *ops: str) -> Optional[onnx.NodeProto]:
        """The one node that reads ``name`` (of type ``ops``), where nothing else does (a graph output
        included)."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.outputs:
            return None
        node = readers[0]
        return node if node.op_type in ops and node.domain in ("", "ai.onnx") else None


def _other(node: onnx.NodeProto, name: str) -> Optional[str]:
    """The other input of a binary ``node`` one of whose inputs is ``name``."""
    if len(node.input) != 2 or name not in node.input:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _times_scalar(g: _Graph, name: str, op: str, expected: float) -> Optional[Tuple[str, onnx.NodeProto]]:
    """(X, node) where ``name`` is X * expected (``op`` Mul, either order) or X / expected (``op`` Div)."""
    node = g.op(name, op)
    if node is None or len(node.input) != 2:
        return None
    if g.is_scalar(node.input[1], expected):
        return node.input[0], node
    if op == "Mul" and g.is_scalar(node.input[0], expected):
        return node.input[1], node
    return None


def _one_plus(g: _Graph, value: str) -> Optional[onnx.NodeProto]:
    """The node computing 1 + ``value`` (either order), its only reader."""
    node = g.sole_reader(value, "Add")
    return node if node is not None and g.is_scalar(_other(node, value) or "", 1.0) else None


def _half_x_times(g: _Graph, factor: str, x: str) -> Optional[List[onnx.NodeProto]]:
    """The nodes computing 0.5 * X * ``factor``, the last one last, in any of the forms exporters write:
    (X * f) * 0.5, (f * 0.5) * X, (X * 0.5) * f, (X / 2) * f. None where it is not that."""
    first = g.sole_reader(factor, "Mul")
    if first is None:
        return None
    other = _other(first, factor) or ""
    if other == x or g.is_scalar(other, 0.5):  # X * f or f * 0.5, then the remaining factor
        last = g.sole_reader(first.output[0], "Mul")
        wanted = 0.5 if other == x else None
        if last is None:
            return None
        remaining = _other(last, first.output[0])
        if (wanted is not None and g.is_scalar(remaining or "", wanted)) or (wanted is None and remaining == x):
            return [first, last]
        return None
    half = _times_scalar(g, other, "Mul", 0.5) or _times_scalar(g, other, "Div", 2.0)
    if half is not None and half[0] == x and g.sole_reader(other, "Mul") is first:
        return [half[1], first]
    return None


def _cube_of(g: _Graph, name: str) -> Optional[Tuple[str, List[onnx.NodeProto]]]:
    """(X, nodes) where ``name`` is X^3: Pow(X, 3), X * (X * X) or (X * X) * X."""
    power = g.op(name, "Pow")
    if power is not None and g.is_scalar(power.input[1], 3.0):
        return power.input[0], [power]
    outer = g.op(name, "Mul")
    if outer is None or len(outer.input) != 2:
        return None
    for square_name, x in ((outer.input[0], outer.input[1]), (outer.input[1], outer.input[0])):
        square = g.op(square_name, "Mul")
        if square is not None and list(square.input) == [x, x] and g.sole_reader(square_name, "Mul") is outer:
            return x, [square, outer]
    return None


def _erf_gelu(g: _Graph, erf: onnx.NodeProto) -> Optional[Tuple[str, List[onnx.NodeProto]]]:
    """0.5 X (1 + erf(X / sqrt 2)): (X, its nodes)."""
    scaled = _times_scalar(g, erf.input[0], "Div", SQRT_2) or _times_scalar(g, erf.input[0], "Mul", 1 / SQRT_2)
    if scaled is None or g.sole_reader(erf.input[0], "Erf") is not erf:
        return None
    x, scale = scaled
    plus = _one_plus(g, erf.output[0])
    product = _half_x_times(g, plus.output[0], x) if plus is not None else None
    if plus is None or product is None:
        return None
    return x, [scale, erf, plus] + product


def _tanh_gelu(g: _Graph, tanh: onnx.NodeProto) -> Optional[Tuple[str, List[onnx.NodeProto]]]:
    """0.5 X (1 + tanh(sqrt(2 / pi) (X + 0.044715 X^3))): (X, its nodes)."""
    scaled = _times_scalar(g, tanh.input[0], "Mul", SQRT_2_OVER_PI)
    if scaled is None or g.sole_reader(tanh.input[0], "Tanh") is not tanh:
        return None
    inner, scale = scaled
    add = g.op(inner, "Add")
    if add is None or g.sole_reader(inner, "Mul") is not scale:
        return None
    for x, cubic_term in ((add.input[0], add.input[1]), (add.input[1], add.input[0])):
        term = _times_scalar(g, cubic_term, "Mul", CUBIC)
        if term is None or g.sole_reader(cubic_term, "Add") is not add:
            continue
        cube = _cube_of(g, term[0])
        if cube is None or cube[0] != x or g.sole_reader(term[0], "Mul") is not term[1]:
            continue
        plus = _one_plus(g, tanh.output[0])
        product = _half_x_times(g, plus.output[0], x) if plus is not None else None
        if plus is not None and product is not None:
            return x, cube[1] + [term[1], add, scale, tanh, plus] + product
    return None


PATTERNS = (("Erf", _erf_gelu, "Gelu"), ("Tanh", _tanh_gelu, "FastGelu"))


def _self_contained(g: _Graph, nodes: Sequence[onnx.NodeProto]) -> bool:
    """Whether every value the pattern's nodes compute, but the last, is read only inside the pattern."""
    inside = {id(n) for n in nodes}
    for node in nodes[:-1]:
        for name in node.output:
            if name in g.outputs or any(id(r) not in inside for r in g.readers.get(name, [])):
                return False
    return True


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _gathers_to_split(model: onnx.ModelProto, g: _Graph, types: Dict[str, Tuple[int, Dims]]) -> int:
    """Every row of an axis taken apart with one Gather of a constant scalar index each (the query, key and
    value of a packed projection, as torch's dynamo exporter writes attention): one Split and a Squeeze per
    row instead, as ONNX Runtime's generator does (its GatherToSplitFusion). The gradient is then one Concat
    where each Gather's was a GatherGrad scattering into a zeroed tensor of the whole input: measured on the
    zoo's transformer_dynamo, a step 1.5x as long as with ONNX Runtime's artifacts before this. Returns how
    many Splits were written."""
    graph, opset = model.graph, _opset(model)
    taken = {name for node in graph.node for name in list(node.input) + list(node.output)}
    taken.update(i.name for i in graph.initializer)
    taken.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    fused = 0
    planned: Dict[int, List[onnx.NodeProto]] = {}  # id of a Gather -> what stands in its place
    for source, readers in list(g.readers.items()):
        dims = types.get(source, (0, None))[1]
        gathers: Dict[int, Dict[int, onnx.NodeProto]] = {}  # axis -> index -> Gather
        for node in readers:
            index = g.constants.get(node.input[1]) if node.op_type == "Gather" and len(node.input) == 2 else None
            if node.domain not in ("", "ai.onnx") or index is None or index.ndim != 0 or index.dtype.kind not in "iu":
                continue
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if dims is None or not -len(dims) <= axis < len(dims) or not isinstance(dims[axis % len(dims)], int):
                continue
            axis %= len(dims)
            size = int(dims[axis])  # type: ignore[arg-type]
            gathers.setdefault(axis, {}).setdefault(int(index) % size if size else 0, node)
        for axis, by_index in gathers.items():
            size = int(dims[axis])  # type: ignore[index,arg-type]
            if size < 2 or sorted(by_index) != list(range(size)):
                continue  # not every row (a row taken twice keeps its second Gather)
            pieces = [unique_name(taken, f"{source}_split_{i}") for i in range(size)]
            if opset >= 13:
                sizes = unique_name(taken, f"{source}_split_sizes")
                graph.initializer.append(numpy_helper.from_array(np.ones(size, np.int64), sizes))
                split = helper.make_node("Split", [source, sizes], pieces, axis=axis,
                                         name=unique_name(taken, f"{source}/Split"))
                axes = unique_name(taken, f"{source}_split_axes")
                graph.initializer.append(numpy_helper.from_array(np.array([axis], np.int64), axes))
                squeezes = [helper.make_node("Squeeze", [piece, axes], [by_index[i].output[0]], name=by_index[i].name)
                            for i, piece in enumerate(pieces)]
            else:
                split = helper.make_node("Split", [source], pieces, axis=axis, split=[1] * size,
                                         name=unique_name(taken, f"{source}/Split"))
                squeezes = [helper.make_node("Squeeze", [piece], [by_index[i].output[0]], axes=[axis],
                                             name=by_index[i].name) for i, piece in enumerate(pieces)]
            piece_dims = tuple(1 if i == axis else d for i, d in enumerate(dims))  # type: ignore[arg-type]
            for piece in pieces:
                types[piece] = (types[source][0], piece_dims)
            group = [id(n) for n in by_index.values()]
            first = next(n for n in graph.node if id(n) in group)
            planned[id(first)] = [split] + squeezes
            for member in group:
                planned.setdefault(member, [])
            fused += 1
    if fused:  # each group's nodes where its first Gather was, the Gathers gone
        _keep(graph, g, [new for n in graph.node for new in planned.get(id(n), [n])])
    return fused


def fuse_activations(model: onnx.ModelProto, types: Dict[str, Tuple[int, Dims]]) -> Dict[str, int]:
    """Fuse the GELU forms of the module docstring in ``model``'s main graph, in place. ``types`` (name ->
    (element type, dims)) tells X's type. Returns how many of each fused op were written."""
    graph = model.graph
    g = _Graph(graph)
    replaced: Dict[int, onnx.NodeProto] = {}  # id of a pattern's last node -> the fused node
    removed: Set[int] = set()
    counts: Dict[str, int] = {}
    for node in graph.node:
        for anchor, match, fused_op in PATTERNS:
            if node.op_type != anchor or node.domain not in ("", "ai.onnx") or id(node) in removed:
                continue
            found = match(g, node)
            if found is None:
                continue
            x, nodes = found
            if types.get(x, (0, None))[0] != TensorProto.FLOAT or not _self_contained(g, nodes):
                continue
            if any(id(n) in removed for n in nodes):
                continue
            last = nodes[-1]
            fused = helper.make_node(fused_op, [x], [last.output[0]], name=f"{last.name or fused_op}/{fused_op}",
                                     domain=MICROSOFT)
            replaced[id(last)] = fused
            removed.update(id(n) for n in nodes)
            counts[fused_op] = counts.get(fused_op, 0) + 1
    if replaced:
        _replace(graph, g, replaced, removed)
    splits = _gathers_to_split(model, _Graph(graph), types)
    if splits:
        counts["Split"] = splits
    return counts


def _replace(graph: onnx.GraphProto, g: _Graph, replaced: Dict[int, onnx.NodeProto], removed: Set[int]) -> None:
    """Each fused pattern's nodes out, its fused node where its last node was, and the constants only the
    pattern read."""
    kept = [replaced.get(id(n), n) for n in graph.node if id(n) not in removed or id(n) in replaced]
    _keep(graph, g, kept)


def _keep(graph: onnx.GraphProto, g: _Graph, kept: List[onnx.NodeProto]) -> None:
    """Make ``kept`` the graph's nodes, less the scalar constants only the nodes left out read (0.5, 1,
    sqrt 2, a Gather's index): left behind, ONNX Runtime would warn that it removes them."""
    still_read = {name for node in kept for name in node_inputs(node)} | g.outputs
    orphans = {name for name in g.constants if name not in still_read and g.readers.get(name)}
    kept = [n for n in kept if not (n.op_type == "Constant" and n.output[0] in orphans)]
    initializers = [i for i in graph.initializer if i.name not in orphans]
    del graph.node[:]
    graph.node.extend(kept)
    if len(initializers) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(initializers)


def drop_inert_dropouts(model: onnx.ModelProto) -> int:
    """Each Dropout of ``model``'s main graph whose ratio is a constant 0 (torch exports its layers' dropout=0.0
    so, in training mode) becomes an Identity, in place: ONNX's Dropout then returns its input and a mask of
    ones, so its gradient is dY as well, and the kernels that draw the mask and apply it, forward (DropoutGrad
    backward), go. Measured on the performance guide's GPT-like model on 1.19.2: Dropout 3-4.4 ms and
    DropoutGrad 1.6-1.9 ms of a 70-110 ms step (12 nodes each). A node whose mask is read, or is an output of
    the graph, stays. Returns how many were replaced."""
    graph = model.graph
    g = _Graph(graph)
    replaced = 0
    for node in graph.node:
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        if g.scalar(node.input[1]) != 0.0:
            continue
        mask = node.output[1] if len(node.output) > 1 else ""
        if mask and (g.readers.get(mask) or mask in g.outputs):
            continue
        identity = helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)
        node.CopyFrom(identity)
        replaced += 1
    return replaced
