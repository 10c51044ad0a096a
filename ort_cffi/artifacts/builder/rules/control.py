"""Control flow: If and Loop. If's gradient is an If on the same condition whose branches are the forward branches'
own backward passes: each branch is recomputed (its values are not visible outside it) and differentiated
by the engine, from the If's output gradients to the values the branch reads from the enclosing graph.
A value one branch does not read (or cannot pass a gradient to) gets zeros from that branch. Loop's
gradient is a Loop running backwards over the iterations (``loop``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

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
    from ort_cffi.artifacts.builder.engine import graph_reads  # the engine imports every rule

    if branch.input:
        raise BuilderError(f"{node.describe()}: an If branch with inputs is not valid ONNX")
    _refuse_random(g, node, branch)
    forward, outputs = _recomputed(g, branch)
    seeds: Dict[str, str] = {}
    for i, out in enumerate(outputs):
        dy = node.grad(i)
        if dy is not None:
            seeds[out] = g.op("Sum", seeds[out], dy) if out in seeds else dy
    reads = set(graph_reads(forward))
    outputs_info = [_value_info(g, o, node.outputs[i]) for i, o in enumerate(outputs)]
    sub, nodes, found = differentiate(g, forward.name or "branch", list(forward.node), outputs_info, seeds,
                                      [w for w in wanted if w in reads])
    results = []
    for name in wanted:
        if name in found:
            results.append(found[name])
        else:  # a value this branch leaves alone, or reads only through shapes: no gradient from it
            results.append(sub.op("Identity", zeros_like(sub, name)))
    _hoist_constants(g, sub)
    return helper.make_graph(nodes + sub.nodes, g.fresh(f"{forward.name or 'branch'}_grad"), [],
                             [_value_info(sub, r, name) for r, name in zip(results, wanted)],
                             value_info=sub.value_infos)


def differentiate(g: GradientContext, name: str, nodes: List[onnx.NodeProto],
                  outputs_info: List[onnx.ValueInfoProto], seeds: Dict[str, str],
                  targets: Sequence[str]) -> Tuple[GradientContext, List[onnx.NodeProto], Dict[str, str]]:
    """The engine's backward pass over ``nodes`` (a subgraph's, with fresh names), from ``seeds`` to
    ``targets``, in a context of its own. Returns that context (its nodes: the backward pass), the forward
    nodes as the rules left them (a rule may name an optional output it reads, LayerNormalization's mean),
    and the gradients found."""
    from ort_cffi.artifacts.builder.engine import Engine, graph_reads  # the engine imports every rule

    reads = list(dict.fromkeys(graph_reads(helper.make_graph(nodes, name, [], outputs_info))))
    wrapper = helper.make_graph(nodes, name, [_value_info(g, r, r) for r in reads], outputs_info)
    model = helper.make_model(wrapper, opset_imports=list(g.model.opset_import))
    model.ir_version = g.model.ir_version
    sub = g.subgraph(model, infer_types(model))
    found: Dict[str, str] = {}
    if seeds and targets:
        found, _ = Engine(sub).backward(seeds, targets, final_name=None)
    return sub, list(model.graph.node), found


def _hoist_constants(g: GradientContext, sub: GradientContext) -> None:
    """Constants made for a subgraph live in the enclosing graph, which the subgraph sees."""
    g.initializers.extend(sub.initializers)
    g.types.update({i.name: sub.types[i.name] for i in sub.initializers if i.name in sub.types})


def _refuse_random(g: GradientContext, node: NodeView, graph: onnx.GraphProto) -> None:
    drawn = _random_node(g, graph)
    if drawn:
        raise BuilderError(f"{node.describe()}: its subgraph draws random numbers ({drawn}); the gradient "
                           "recomputes the subgraph, which would draw others")


_RANDOM = ("RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli")


def _random_node(g: GradientContext, graph: onnx.GraphProto) -> Optional[str]:
    """The first node of ``graph`` (or its subgraphs) that draws random numbers: a random operator, or a
    Dropout with a training-mode input not known to be false."""
    for inner in graph.node:
        training = inner.input[2] if inner.op_type == "Dropout" and len(inner.input) > 2 else ""
        known = g.constant_value(training) if training else None
        if inner.op_type in _RANDOM or (training and (known is None or bool(known.reshape(-1)[0]))):
            return f"{inner.op_type} {inner.name!r}" if inner.name else inner.op_type
        for attribute in inner.attribute:
            for nested in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                found = _random_node(g, nested)
                if found:
                    return found
    return None


_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


@gradient("Loop")
def loop(g: GradientContext, node: NodeView) -> Grads:
    """The forward Loop also stacks each iteration's loop-carried values (new scan outputs of its body); the
    backward Loop runs as many iterations in reverse: at step t it takes the values carried into t, runs the
    body again and the body's backward pass, from the carried values' gradients and the scan outputs'
    gradients at t, to the carried values (carried on) and the values the body reads from the enclosing
    graph (summed over the steps)."""
    count = len(node.inputs)
    carried = node.inputs[2:]
    wanted_outer = [name for k, name in enumerate(node.outer_inputs) if node.wants(count + k)]
    if not any(node.wants(2 + k) for k in range(len(carried))) and not wanted_outer:
        return []
    body_attribute = next(a for a in node.proto.attribute if a.name == "body")
    body = body_attribute.g
    _refuse_random(g, node, body)
    scans = len(body.output) - 1 - len(carried)
    differentiable = [k for k, name in enumerate(carried) if g.elem_type(name) in _FLOATS]
    stacked, iterations = _stack_states(g, node, body)
    steps = g.op("Gather", g.op("Shape", iterations), g.const(np.array(0, dtype=np.int64)), axis=0)
    last_step = g.op("Sub", steps, g.const(np.array(1, dtype=np.int64)))
    g.types[steps] = g.types[last_step] = (TensorProto.INT64, ())

    # the backward body: (i, cond, d carried..., sums...) -> (cond, d carried..., sums...)
    step_in, cond_in = g.fresh("loop_grad_step"), g.fresh("loop_grad_cond")
    g.types[step_in], g.types[cond_in] = (TensorProto.INT64, ()), (TensorProto.BOOL, ())
    d_in = {k: g.fresh(f"{carried[k]}_grad_in") for k in differentiable}
    sums_in = {name: g.fresh(f"{name}_grad_sum") for name in wanted_outer}
    for k, name in d_in.items():
        g.same_type(name, carried[k])
    for outer, name in sums_in.items():
        g.same_type(name, outer)
    copy = onnx.GraphProto()
    copy.CopyFrom(body)
    names = [i.name for i in copy.input] + [out for n in copy.node for out in n.output if out]
    mapping = {name: g.fresh(f"{name}_recomputed") for name in names}
    _rename(copy, mapping)
    for n in copy.node:
        n.name = g.fresh(f"{n.name or n.op_type}_recomputed")
    inputs = [mapping[i.name] for i in copy.input]
    true = g.const(np.array(True))
    t = g.fresh("loop_grad_t")
    prelude = [helper.make_node("Sub", [last_step, step_in], [t]),
               helper.make_node("Identity", [t], [inputs[0]]),
               helper.make_node("Identity", [true], [inputs[1]])]
    for k in range(len(carried)):  # the values carried into step t
        prelude.append(helper.make_node("Gather", [stacked[k], t], [inputs[2 + k]], axis=0))
    outputs = [o.name for o in copy.output]
    seeds: Dict[str, str] = {}

    def seed(value: str, gradient_value: str) -> None:
        if value in seeds:
            total = g.fresh(f"{value}_grad_total")
            prelude.append(helper.make_node("Add", [seeds[value], gradient_value], [total]))
            gradient_value = total
        seeds[value] = gradient_value

    for k in differentiable:
        seed(outputs[1 + k], d_in[k])
    for s in range(scans):
        d_scan = node.grad(len(carried) + s)
        if d_scan is not None:
            at_t = g.fresh(f"{outputs[1 + len(carried) + s]}_grad_at_t")
            prelude.append(helper.make_node("Gather", [d_scan, t], [at_t], axis=0))
            seed(outputs[1 + len(carried) + s], at_t)
    targets = [inputs[2 + k] for k in differentiable] + wanted_outer
    outputs_info = [helper.make_tensor_value_info(outputs[0], TensorProto.BOOL, [])]
    outputs_info += [helper.make_tensor_value_info(o, g.elem_type(like), None)
                     for o, like in zip(outputs[1:], list(carried) + node.outputs[len(carried):])]
    sub, nodes, found = differentiate(g, f"{copy.name or 'body'}_grad", prelude + list(copy.node), outputs_info,
                                      seeds, targets)
    results = [sub.op("Identity", true)]
    for k in differentiable:
        value = inputs[2 + k]
        results.append(found[value] if value in found else sub.op("Identity", zeros_like(sub, value)))
    for outer in wanted_outer:
        results.append(sub.op("Add", sums_in[outer], found[outer]) if outer in found else
                       sub.op("Identity", sums_in[outer]))
    _hoist_constants(g, sub)
    graph_inputs = ([helper.make_tensor_value_info(step_in, TensorProto.INT64, []),
                     helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])]
                    + [_value_info(g, d_in[k], carried[k]) for k in differentiable]
                    + [_value_info(g, sums_in[o], o) for o in wanted_outer])
    likes = [cond_in] + [carried[k] for k in differentiable] + wanted_outer
    backward_body = helper.make_graph(nodes + sub.nodes, g.fresh(f"{body.name or 'body'}_grad"), graph_inputs,
                                      [_value_info(sub, r, like) for r, like in zip(results, likes)],
                                      value_info=sub.value_infos)
    initial = [node.grad(k) or zeros_like(g, carried[k]) for k in differentiable]
    initial += [zeros_like(g, outer) for outer in wanted_outer]
    loop_inputs: List[Optional[str]] = [steps, None]
    ends = g.node("Loop", loop_inputs + list(initial), len(initial), body=backward_body)
    grads: Grads = [None] * (count + len(node.outer_inputs))
    for position, k in enumerate(differentiable):
        grads[2 + k] = g.same_type(ends[position], carried[k])
    for position, outer in enumerate(wanted_outer):
        grads[count + node.outer_inputs.index(outer)] = g.same_type(ends[len(differentiable) + position], outer)
    return grads


def _stack_states(g: GradientContext, node: NodeView, body: onnx.GraphProto) -> Tuple[List[str], str]:
    """Make the forward Loop (the training graph's node) also output, stacked over its iterations, the
    values carried into each iteration and the iteration numbers: new scan outputs of its body."""
    carried = node.inputs[2:]
    proto = node.proto
    declared = len(body.output) - 1  # the final carried values, then the scan outputs
    while len(proto.output) < declared:  # trailing outputs left out: named, so that new ones line up
        proto.output.append(g.fresh(f"{proto.name or 'loop'}_unused_output"))
    stacked = []
    body_inputs = [i.name for i in body.input]
    for k, name in enumerate(carried):
        inner = g.fresh(f"{body_inputs[2 + k]}_stacked")
        body.node.append(helper.make_node("Identity", [body_inputs[2 + k]], [inner]))
        body.output.append(helper.make_tensor_value_info(inner, g.elem_type(name), None))
        outer = g.fresh(f"{name}_per_iteration")
        proto.output.append(outer)
        dims = g.dims(name)
        g.types[outer] = (g.elem_type(name), None if dims is None else (None,) + tuple(dims))
        stacked.append(outer)
    inner = g.fresh(f"{body_inputs[0]}_stacked")
    body.node.append(helper.make_node("Identity", [body_inputs[0]], [inner]))
    body.output.append(helper.make_tensor_value_info(inner, TensorProto.INT64, None))
    iterations = g.fresh(f"{proto.name or 'loop'}_iterations")
    proto.output.append(iterations)
    g.types[iterations] = (TensorProto.INT64, (None,))
    node.outputs = list(proto.output)
    return stacked, iterations
