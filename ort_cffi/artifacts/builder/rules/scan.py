"""Scan: its gradient is a Scan running the iterations backwards, whose body is the engine's own
differentiation of the forward body.

The forward Scan of the training graph also outputs, at each iteration, the states it starts from (extra
scan outputs of its body, an Identity each; the eval model keeps the node as it is). The backward Scan
takes them in reverse order, with the forward's scan inputs and the gradients of its scan outputs read in
the matching order; its body recomputes the forward body at that iteration and differentiates it from the
carried gradients of the states (its state variables), the gradients of that iteration's scan outputs,
to the states it started from (the next carry), its scan inputs (scan outputs of the backward Scan, placed
where the forward read them) and the values it reads from the enclosing graph (summed over the iterations
as further state variables). Only floating-point states carry gradients: a counter is only read back.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import onnx
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView, infer_types
from ort_cffi.artifacts.builder.registry import gradient
from ort_cffi.artifacts.builder.rules.control import _recomputed as recomputed  # the If rule's: fresh names
from ort_cffi.artifacts.builder.rules.control import _rename as rename
from ort_cffi.artifacts.builder.rules.shape import zeros_like

Grads = List[Optional[str]]
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _typed(name: str, like: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    value = onnx.ValueInfoProto()
    value.CopyFrom(like)
    value.name = name
    return value


def _outer(g: GradientContext, name: str, like: str) -> onnx.ValueInfoProto:
    """``name`` typed as ``like``, a value of the enclosing graph."""
    dims = g.dims(like)
    return helper.make_tensor_value_info(name, g.elem_type(like), None if dims is None else list(dims))


def _zeros(g: GradientContext, like: str) -> str:
    zero = helper.make_tensor("value", g.elem_type(like), [1], [0])
    return g.op("ConstantOfShape", g.op("Shape", like), value=zero)


@gradient("Scan")
def scan(g: GradientContext, node: NodeView) -> Grads:
    from ort_cffi.artifacts.builder.engine import Engine, graph_reads  # the engine imports every rule

    proto = node.proto
    body_attribute = next(a for a in proto.attribute if a.name == "body")
    body = onnx.GraphProto()
    body.CopyFrom(body_attribute.g)
    scans = int(node.attr("num_scan_inputs"))
    count = len(node.inputs)
    states = count - scans
    outputs = len(body.output) - states
    if g.opset < 9:
        raise BuilderError(f"{node.describe()}: ort_cffi's gradient of Scan needs opset 9 or newer (Scan-8 scans "
                           "a batch axis; onnx.version_converter can convert the model)")
    if any(node.attr("scan_input_axes") or []) or any(node.attr("scan_output_axes") or []):
        raise BuilderError(f"{node.describe()}: ort_cffi's gradient of Scan scans along axis 0 only")
    input_directions = list(node.attr("scan_input_directions") or [0] * scans)
    output_directions = list(node.attr("scan_output_directions") or [0] * outputs)
    outer = list(node.outer_inputs)
    wanted_outer = [name for k, name in enumerate(outer) if node.wants(count + k)]
    floating = [i for i in range(states) if body.input[i].type.tensor_type.elem_type in FLOATS]
    base = proto.name or proto.op_type

    # the forward Scan also outputs the states each iteration starts from
    saved = []
    for i in range(states):
        step_value = g.fresh(f"{base}/state{i}_at_step")
        body_attribute.g.node.append(helper.make_node("Identity", [body.input[i].name], [step_value],
                                                      name=g.fresh(f"{base}/save_state{i}")))
        body_attribute.g.output.append(_typed(step_value, body.input[i]))
        saved.append(g.fresh(f"{base}/states{i}"))
    proto.output.extend(saved)
    for attribute in list(proto.attribute):
        if attribute.name == "scan_output_directions":
            proto.attribute.remove(attribute)
    proto.attribute.extend([helper.make_attribute("scan_output_directions", output_directions + [0] * len(saved))])
    node.outputs = list(proto.output)

    # the backward body: the forward body recomputed at one iteration, its inputs under fresh names
    forward, forward_outputs = recomputed(g, body)
    renamed = {i.name: g.fresh(f"{i.name}_at_step") for i in forward.input}
    forward = _rename_inputs(forward, renamed)
    forward_outputs = [renamed.get(o, o) for o in forward_outputs]
    step_inputs = [renamed[i.name] for i in body.input]
    carries = {i: g.fresh(f"{base}/state{i}_grad_carry") for i in floating}
    accumulators = {name: g.fresh(f"{name}_grad_sum") for name in wanted_outer}
    output_grads = {k: node.grad(states + k) for k in range(outputs) if node.grad(states + k) is not None}
    slices = {k: g.fresh(f"{base}/output{k}_grad_at_step") for k in output_grads}
    reads = list(dict.fromkeys(graph_reads(forward)))
    typed_reads = [_outer(g, r, r) for r in reads if r not in renamed.values()]
    inputs = [_typed(step_inputs[i], body.input[i]) for i in range(len(body.input))]
    inputs += [_typed(carries[i], body.input[i]) for i in floating]
    inputs += [_typed(slices[k], body.output[states + k]) for k in slices]
    wrapper = helper.make_graph(list(forward.node), "scan_step", inputs + typed_reads,
                                [_typed(o, body.output[j]) for j, o in enumerate(forward_outputs)])
    model = helper.make_model(wrapper, opset_imports=list(g.model.opset_import))
    model.ir_version = g.model.ir_version
    sub = g.subgraph(model, infer_types(model))
    seeds: Dict[str, str] = {}
    for i in floating:
        out = forward_outputs[i]
        seeds[out] = sub.op("Sum", seeds[out], carries[i]) if out in seeds else carries[i]
    for k, sliced in slices.items():
        out = forward_outputs[states + k]
        seeds[out] = sub.op("Sum", seeds[out], sliced) if out in seeds else sliced
    wanted_scans = [m for m in range(scans) if node.wants(states + m)]
    targets = ([step_inputs[i] for i in floating] + [step_inputs[states + m] for m in wanted_scans]
               + [name for name in wanted_outer if name in reads])
    found: Dict[str, str] = {}
    if seeds and targets:
        found, _ = Engine(sub).backward(seeds, list(dict.fromkeys(targets)), final_name=None)

    def result(name: str) -> str:
        return found[name] if name in found else _zeros(sub, name)

    step_outputs = [sub.op("Identity", result(step_inputs[i])) for i in floating]
    step_outputs += [sub.op("Add", accumulators[name], result(name)) if name in reads
                     else sub.op("Identity", accumulators[name]) for name in wanted_outer]
    step_outputs += [sub.op("Identity", result(step_inputs[states + m])) for m in wanted_scans]
    declared = ([_typed(step_outputs[n], body.input[i]) for n, i in enumerate(floating)]
                + [_outer(g, step_outputs[len(floating) + n], name) for n, name in enumerate(wanted_outer)]
                + [_typed(step_outputs[len(floating) + len(wanted_outer) + n], body.input[states + m])
                   for n, m in enumerate(wanted_scans)])
    backward_inputs = ([_typed(carries[i], body.input[i]) for i in floating]
                       + [_outer(g, accumulators[name], name) for name in wanted_outer]
                       + [_typed(step_inputs[i], body.input[i]) for i in range(states)]
                       + [_typed(step_inputs[states + m], body.input[states + m]) for m in range(scans)]
                       + [_typed(slices[k], body.output[states + k]) for k in slices])
    g.initializers.extend(sub.initializers)
    g.types.update({i.name: sub.types[i.name] for i in sub.initializers if i.name in sub.types})
    backward_body = helper.make_graph(list(forward.node) + sub.nodes, g.fresh(f"{base}_backward_step"),
                                      backward_inputs, declared)

    initial = [node.grad(i) or zeros_like(g, node.inputs[i]) for i in floating]
    initial += [zeros_like(g, name) for name in wanted_outer]
    scanned = saved + node.inputs[states:] + [output_grads[k] or "" for k in slices]
    directions = [1] * len(saved) + [1 - d for d in input_directions] + [1 - output_directions[k] for k in slices]
    results = g.node("Scan", initial + scanned, len(step_outputs), body=backward_body,
                     num_scan_inputs=len(scanned), scan_input_directions=directions,
                     scan_output_directions=[1 - input_directions[m] for m in wanted_scans] or None)
    grads: Grads = [None] * (count + len(outer))
    for n, i in enumerate(floating):
        grads[i] = results[n] if node.wants(i) else None
    for n, name in enumerate(wanted_outer):
        grads[count + outer.index(name)] = results[len(floating) + n]
    for n, m in enumerate(wanted_scans):
        grads[states + m] = results[len(floating) + len(wanted_outer) + n]
    return grads


def _rename_inputs(graph: onnx.GraphProto, mapping: Dict[str, str]) -> onnx.GraphProto:
    renamed = onnx.GraphProto()
    renamed.CopyFrom(graph)
    rename(renamed, mapping)
    for value in renamed.input:
        value.name = mapping.get(value.name, value.name)
    return renamed
