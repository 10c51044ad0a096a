"""Control flow: If. Its gradient is an If on the same condition whose branches are the forward branches'
own backward passes: each branch is recomputed (its values are not visible outside it) and differentiated
by the engine, from the If's output gradients to the values the branch reads from the enclosing graph.
A value one branch does not read (or cannot pass a gradient to) gets zeros from that branch.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import onnx
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView, infer_types
from ort_cffi.artifacts.builder.registry import gradient
from ort_cffi.artifacts.builder.rules.shape import zeros_like

Grads = List[Optional[str]]


@gradient("If")
def if_(g: GradientContext, node: NodeView) -> Grads:
    count = len(node.inputs)
    wanted = [name for k, name in enumerate(node.outer_inputs) if node.wants(count + k)]
    if not wanted:
        return []
    branches = {}
    for attribute in ("then_branch", "else_branch"):
        branches[attribute] = branch_backward(g, node, node.attr(attribute), wanted)
    outputs = g.node("If", [node.inputs[0]], len(wanted), **branches)
    by_name = dict(zip(wanted, outputs))
    return [None] * count + [g.same_type(by_name[name], name) if name in by_name else None
                             for name in node.outer_inputs]


def _value_info(g: GradientContext, name: str, like: str) -> onnx.ValueInfoProto:
    elem_type = g.elem_type(like)
    dims = g.dims(like)
    return helper.make_tensor_value_info(name, elem_type, None if dims is None else list(dims))


def _rename(graph: onnx.GraphProto, mapping: Dict[str, str]) -> None:
    """Rename values of ``graph`` after ``mapping``, in the subgraphs of its nodes too (where they read
    them from outside)."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = mapping.get(name, name)
        for i, name in enumerate(node.output):
            node.output[i] = mapping.get(name, name)
        for attribute in node.attribute:
            for inner in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                local = {i.name for i in inner.input} | {o for n in inner.node for o in n.output}
                _rename(inner, {k: v for k, v in mapping.items() if k not in local})
    for output in graph.output:
        output.name = mapping.get(output.name, output.name)


def _recomputed(g: GradientContext, branch: onnx.GraphProto) -> Tuple[onnx.GraphProto, List[str]]:
    """A copy of ``branch`` whose own values and nodes have fresh names (the backward If is a sibling
    scope of the forward one), and the names of its outputs."""
    copy = onnx.GraphProto()
    copy.CopyFrom(branch)
    produced = [out for n in copy.node for out in n.output if out]
    mapping = {name: g.fresh(f"{name}_recomputed") for name in produced}
    _rename(copy, mapping)
    for n in copy.node:
        n.name = g.fresh(f"{n.name or n.op_type}_recomputed")
    return copy, [o.name for o in copy.output]


def branch_backward(g: GradientContext, node: NodeView, branch: onnx.GraphProto,
                    wanted: Sequence[str]) -> onnx.GraphProto:
    """The backward branch: ``branch`` recomputed, then the gradients of ``wanted`` (outer values), in
    that order, as its outputs."""
    from ort_cffi.artifacts.builder.engine import Engine, graph_reads  # the engine imports every rule

    if branch.input:
        raise BuilderError(f"{node.describe()}: an If branch with inputs is not valid ONNX")
    forward, outputs = _recomputed(g, branch)
    reads = list(dict.fromkeys(graph_reads(forward)))
    wrapper = helper.make_graph(list(forward.node), forward.name or "branch", [_value_info(g, r, r) for r in reads],
                                [_value_info(g, o, node.outputs[i]) for i, o in enumerate(outputs)])
    model = helper.make_model(wrapper, opset_imports=list(g.model.opset_import))
    model.ir_version = g.model.ir_version
    sub = g.subgraph(model, infer_types(model))
    seeds: Dict[str, str] = {}
    for i, out in enumerate(outputs):
        dy = node.grad(i)
        if dy is not None:
            seeds[out] = g.op("Sum", seeds[out], dy) if out in seeds else dy
    targets = [w for w in wanted if w in reads]
    found: Dict[str, str] = {}
    if seeds and targets:
        found, _ = Engine(sub).backward(seeds, targets, final_name=None)
    results = []
    for name in wanted:
        if name in found:
            results.append(found[name])
        else:  # a value this branch leaves alone, or reads only through shapes: no gradient from it
            results.append(sub.op("Identity", zeros_like(sub, name)))
    g.initializers.extend(sub.initializers)  # constants live in the enclosing graph, visible to the branch
    g.types.update({i.name: sub.types[i.name] for i in sub.initializers if i.name in sub.types})
    return helper.make_graph(list(forward.node) + sub.nodes, g.fresh(f"{forward.name or 'branch'}_grad"), [],
                             [_value_info(sub, r, name) for r, name in zip(results, wanted)])
