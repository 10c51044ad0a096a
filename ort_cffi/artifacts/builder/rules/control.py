"""Control flow: If, Loop and Scan. If's gradient is an If on the same condition whose branches are the forward branches'
own backward passes: each branch is recomputed (its values are not visible outside it) and differentiated
by the engine, from the If's output gradients to the values the branch reads from the enclosing graph.
A value one branch does not read (or cannot pass a gradient to) gets zeros from that branch. Loop's
and Scan's gradients are a Loop running backwards over the iterations (``loop``, ``scan``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from ort_cffi.artifacts.builder.context import FLOATS, BuilderError, GradientContext, NodeView, infer_types
from ort_cffi.artifacts.builder.registry import gradient
from ort_cffi.artifacts.builder.rules.sequences import copy_value, sum_sequences, zeros_like_value

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
    return g.value_info(name, like)


def _needed(forward: Sequence[onnx.NodeProto], backward: Sequence[onnx.NodeProto],
            results: Sequence[str]) -> List[onnx.NodeProto]:
    """The recomputed ``forward`` nodes that the ``backward`` nodes or the ``results`` read, directly or
    not, in order: the others would be computed for nothing, and a value the backward pass cannot have
    (a sequence carried into a Loop's iteration, which no scan output stacks) must not be read."""
    from ort_cffi.artifacts.builder.engine import node_inputs  # the engine imports every rule

    read = set(results)
    for node in backward:
        read.update(node_inputs(node))
    kept: List[onnx.NodeProto] = []
    for node in reversed(forward):
        if any(name in read for name in node.output if name):
            kept.append(node)
            read.update(node_inputs(node))
    kept.reverse()
    return kept


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


def _initializers_as_constants(g: GradientContext, graph: onnx.GraphProto, mapping: Dict[str, str]) -> None:
    """A subgraph's own initializers (tf2onnx writes a Loop body's constants so) as Constant nodes at its
    start, under their names in ``mapping``: the backward pass rebuilds a subgraph from its nodes alone."""
    constants = []
    for tensor in graph.initializer:
        value = onnx.TensorProto()
        value.CopyFrom(tensor)
        value.name = mapping.get(tensor.name, tensor.name)
        constants.append(helper.make_node("Constant", [], [value.name], name=g.fresh(f"{value.name}/Constant"),
                                          value=value))
    if constants:
        nodes = constants + list(graph.node)
        del graph.initializer[:]
        del graph.node[:]
        graph.node.extend(nodes)


def _recomputed(g: GradientContext, branch: onnx.GraphProto) -> Tuple[onnx.GraphProto, List[str]]:
    """A copy of ``branch`` whose own values and nodes have fresh names (the backward If is a sibling
    scope of the forward one), and the names of its outputs."""
    copy = onnx.GraphProto()
    copy.CopyFrom(branch)
    produced = [out for n in copy.node for out in n.output if out] + [i.name for i in copy.initializer]
    mapping = {name: g.fresh(f"{name}_recomputed") for name in produced}
    _rename(copy, mapping)
    for n in copy.node:
        n.name = g.fresh(f"{n.name or n.op_type}_recomputed")
    _initializers_as_constants(g, copy, mapping)
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
            results.append(copy_value(sub, zeros_like_value(sub, name)))
    _hoist_constants(g, sub)
    graph_name = g.fresh(f"{forward.name or 'branch'}_grad")
    return helper.make_graph(_needed(nodes, sub.nodes, results) + sub.nodes, graph_name,
                             [], [_value_info(sub, r, like) for r, like in zip(results, wanted)],
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


@gradient("Loop")
def loop(g: GradientContext, node: NodeView) -> Grads:
    """The forward Loop also stacks each iteration's loop-carried values (new scan outputs of its body); the
    backward Loop runs as many iterations in reverse: at step t it takes the values carried into t, runs the
    body again and the body's backward pass, from the carried values' gradients and the scan outputs'
    gradients at t, to the carried values (carried on) and the values the body reads from the enclosing
    graph (summed over the steps). A carried sequence (torch's EmbeddingBag appends each bag's row to one) is
    not stacked, a scan output being a tensor: its gradient is a sequence carried back like the others, and
    where the backward pass reads the sequence itself, it is rebuilt from the final one (``_rebuilt``)."""
    count = len(node.inputs)
    carried = node.inputs[2:]
    wanted_outer = [name for k, name in enumerate(node.outer_inputs) if node.wants(count + k)]
    if not any(node.wants(2 + k) for k in range(len(carried))) and not wanted_outer:
        return []
    body = next(a for a in node.proto.attribute if a.name == "body").g
    _refuse_random(g, node, body)
    scans = len(body.output) - 1 - len(carried)
    stacked, iterations = _stack_states(g, node, body, first_state=2, extra_iteration_count=True)
    steps = _scalar_int(g, g.op("Gather", g.op("Shape", iterations), g.const(np.array(0, dtype=np.int64)), axis=0))
    back = _Backwards(g, node, body, steps)
    inputs = back.inputs
    back.prelude += [helper.make_node("Identity", [back.t], [inputs[0]]),
                     helper.make_node("Identity", [back.true], [inputs[1]])]
    for k in range(len(carried)):  # the values carried into step t
        back.carried_into_step(inputs[2 + k], stacked[k], carried[k], back.outputs[1 + k], k)
    differentiable = [k for k, name in enumerate(carried) if g.elem_type(name) in FLOATS]
    for k in differentiable:
        back.carry(inputs[2 + k], carried[k], back.outputs[1 + k], node.grad(k))
    for s in range(scans):
        back.seed_at(back.outputs[1 + len(carried) + s], node.grad(len(carried) + s), back.t, 0)
    likes = list(carried) + node.outputs[len(carried):]
    ends, sums, _ = back.run(wanted_outer, [], likes)
    grads: Grads = [None] * (count + len(node.outer_inputs))
    for position, k in enumerate(differentiable):
        grads[2 + k] = g.same_type(ends[position], carried[k])
    for outer, total in zip(wanted_outer, sums):
        grads[count + node.outer_inputs.index(outer)] = g.same_type(total, outer)
    return grads


@gradient("Scan")
def scan(g: GradientContext, node: NodeView) -> Grads:
    """As Loop's (a backward Loop over the steps in reverse, the states carried into each step stacked by the
    forward Scan), with the scan inputs' slices and the scan outputs' gradients taken at each step's
    position along their axes and directions, and the scan inputs' gradients stacked step by step."""
    if g.opset < 9:
        raise BuilderError(f"{node.describe()}: Scan-8 (with sequence lengths) has no gradient rule")
    count = len(node.inputs)
    scanned_count = int(node.attr("num_scan_inputs"))
    states = node.inputs[:count - scanned_count]
    scanned = node.inputs[count - scanned_count:]
    wanted_outer = [name for k, name in enumerate(node.outer_inputs) if node.wants(count + k)]
    if not any(node.wants(k) for k in range(count)) and not wanted_outer:
        return []
    body = next(a for a in node.proto.attribute if a.name == "body").g
    _refuse_random(g, node, body)
    scans = len(body.output) - len(states)
    input_axes = list(node.attr("scan_input_axes") or [0] * scanned_count)
    input_directions = list(node.attr("scan_input_directions") or [0] * scanned_count)
    output_axes = list(node.attr("scan_output_axes") or [0] * scans)
    output_directions = list(node.attr("scan_output_directions") or [0] * scans)
    stacked, _ = _stack_states(g, node, body, first_state=0, extra_iteration_count=False)
    steps = _scalar_int(g, g.op("Gather", g.op("Shape", scanned[0]),
                                g.const(np.array(input_axes[0], dtype=np.int64)), axis=0))
    back = _Backwards(g, node, body, steps)
    inputs = back.inputs
    for k in range(len(states)):
        back.carried_into_step(inputs[k], stacked[k], states[k])
    for j in range(scanned_count):
        at = back.t if not input_directions[j] else back.step_in
        back.prelude.append(helper.make_node("Gather", [scanned[j], at], [inputs[len(states) + j]],
                                             axis=input_axes[j]))
    differentiable = [k for k, name in enumerate(states) if g.elem_type(name) in FLOATS]
    for k in differentiable:
        back.carry(inputs[k], states[k], back.outputs[k], node.grad(k))
    for n in range(scans):
        at = back.t if not output_directions[n] else back.step_in
        back.seed_at(back.outputs[len(states) + n], node.grad(len(states) + n), at, output_axes[n])
    sliced = [j for j in range(scanned_count) if node.wants(len(states) + j)]
    likes = list(states) + node.outputs[len(states):]
    ends, sums, slices = back.run(wanted_outer, [inputs[len(states) + j] for j in sliced], likes)
    grads: Grads = [None] * (count + len(node.outer_inputs))
    for position, k in enumerate(differentiable):
        grads[k] = g.same_type(ends[position], states[k])
    for outer, total in zip(wanted_outer, sums):
        grads[count + node.outer_inputs.index(outer)] = g.same_type(total, outer)
    for j, per_step in zip(sliced, slices):  # stacked in backward order: step i holds position T-1-i
        x = scanned[j]
        if not input_directions[j]:
            per_step = g.op("Slice", per_step, g.ints([-1]), g.ints([-2 ** 63]), g.ints([0]), g.ints([-1]))
        rank = g.rank(x)
        axis = input_axes[j] % rank if rank is not None else input_axes[j]
        if axis != 0:
            if rank is None:
                raise BuilderError(f"{node.describe()}: the gradient of a scan input along axis {axis} needs its rank")
            perm = [p + 1 if p < axis else (0 if p == axis else p) for p in range(rank)]
            per_step = g.op("Transpose", per_step, perm=perm)
        grads[len(states) + j] = g.same_type(per_step, x)
    return grads


def _scalar_int(g: GradientContext, name: str) -> str:
    g.types[name] = (TensorProto.INT64, ())
    return name


class _Backwards:
    """The backward Loop of a Loop or a Scan: its body recomputes the forward body at step t = T-1-i (the
    caller adds to ``prelude`` the nodes that make the body's inputs at t), seeded with the gradients of the
    body's outputs at t, and runs the engine's backward pass over it."""

    def __init__(self, g: GradientContext, node: NodeView, body: onnx.GraphProto, steps: str):
        self.g, self.node, self.steps = g, node, steps
        self.step_in, self.cond_in = g.fresh("loop_grad_step"), g.fresh("loop_grad_cond")
        g.types[self.step_in], g.types[self.cond_in] = (TensorProto.INT64, ()), (TensorProto.BOOL, ())
        last_step = _scalar_int(g, g.op("Sub", steps, g.const(np.array(1, dtype=np.int64))))
        copy = onnx.GraphProto()
        copy.CopyFrom(body)
        names = ([i.name for i in copy.input] + [out for n in copy.node for out in n.output if out]
                 + [i.name for i in copy.initializer])
        mapping = {name: g.fresh(f"{name}_recomputed") for name in names}
        _rename(copy, mapping)
        for n in copy.node:
            n.name = g.fresh(f"{n.name or n.op_type}_recomputed")
        _initializers_as_constants(g, copy, mapping)
        self.copy = copy
        self.inputs = [mapping[i.name] for i in copy.input]
        self.outputs = [o.name for o in copy.output]
        self.true = g.const(np.array(True))
        self.t = g.fresh("loop_grad_t")
        self.prelude = [helper.make_node("Sub", [last_step, self.step_in], [self.t])]
        self.seeds: Dict[str, str] = {}
        self.carried: List[Tuple[str, str, str, Optional[str]]] = []  # (body input, like, grad in, initial)
        # body input -> (the carried sequence it holds, not stacked; the body output it becomes; the forward
        # node's output that holds its final value)
        self.unstacked: Dict[str, Tuple[str, Optional[str], Optional[int]]] = {}

    def carried_into_step(self, body_input: str, stacked: Optional[str], like: str, body_output: Optional[str] = None,
                          final_output: Optional[int] = None) -> None:
        """The value carried into step t: its slice of the forward node's stacked values. A sequence has no
        such stack (a scan output is a tensor); its gradient needs none (``sequences``). Where the backward
        body reads it all the same, it is rebuilt from the final sequence, step by step (``_rebuilt``)."""
        if stacked is None:
            self.g.same_type(body_input, like)
            self.unstacked[body_input] = (like, body_output, final_output)
        else:
            self.prelude.append(helper.make_node("Gather", [stacked, self.t], [body_input], axis=0))

    def seed(self, value: str, gradient_value: str) -> None:
        if value in self.seeds:
            total = self.g.fresh(f"{value}_grad_total")
            self.prelude.append(helper.make_node("Add", [self.seeds[value], gradient_value], [total]))
            gradient_value = total
        self.seeds[value] = gradient_value

    def seed_at(self, value: str, stacked_gradient: Optional[str], position: str, axis: int) -> None:
        """Seed ``value`` (a per-step output) with its stacked gradient's slice at ``position``."""
        if stacked_gradient is not None:
            at = self.g.fresh(f"{value}_grad_at_t")
            self.prelude.append(helper.make_node("Gather", [stacked_gradient, position], [at], axis=axis))
            self.seed(value, at)

    def carry(self, body_input: str, like: str, body_output: str, final_gradient: Optional[str]) -> None:
        """A carried value: its gradient flows from ``body_output`` back to ``body_input`` step by step,
        starting from the final value's gradient."""
        grad_in = self.g.same_type(self.g.fresh(f"{like}_grad_in"), like)
        self.carried.append((body_input, like, grad_in, final_gradient))
        self.seed(body_output, grad_in)

    def _appended(self, body_input: str, body_output: str) -> Optional[int]:
        """How many tensors each iteration appends to the carried sequence ``body_input`` to make
        ``body_output`` (SequenceInsert without a position, Identity), or None where the body changes it
        otherwise (an insert at a position, an erase, a sequence made anew)."""
        producers = {out: n for n in self.copy.node for out in n.output if out}
        appended, name = 0, body_output
        while name != body_input:
            producer = producers.get(name)
            if producer is None or producer.domain not in ("", "ai.onnx"):
                return None
            if producer.op_type == "SequenceInsert" and (len(producer.input) < 3 or not producer.input[2]):
                appended += 1
            elif producer.op_type != "Identity":
                return None
            name = producer.input[0]
        return appended

    def _rebuilt(self, nodes: Sequence[onnx.NodeProto]) -> Tuple[List[onnx.NodeProto], List[Tuple[str, str, str]]]:
        """The carried sequences the backward body reads (``nodes``), each rebuilt as it was carried into step
        t from the one carried out of it, which a loop-carried value of the backward Loop holds (starting from
        the forward node's final sequence): the tensors step t appended, erased again. Returns the nodes that
        do it and, per sequence, (the backward body's input, the sequence at step t, its initial value).
        Raises where the body changes the sequence otherwise: what was erased cannot be restored."""
        from ort_cffi.artifacts.builder.engine import node_inputs  # the engine imports every rule

        g = self.g
        readers: Dict[str, onnx.NodeProto] = {}  # the first reader: a recomputed node of the body before a backward one
        for node in nodes:
            for name in node_inputs(node):
                readers.setdefault(name, node)
        made: List[onnx.NodeProto] = []
        carried: List[Tuple[str, str, str]] = []
        for body_input, (like, body_output, final_output) in self.unstacked.items():
            if body_input not in readers:
                continue
            appended = self._appended(body_input, body_output) if body_output else None
            where = (f"{self.node.describe()}: its backward pass reads the sequence {like!r} as it was carried "
                     f"into each iteration (through its body's {readers[body_input].op_type} node), which a Loop "
                     "cannot stack")
            if appended is None or final_output is None:
                raise BuilderError(f"{where}, and the body changes it otherwise than by appending to it "
                                   "(SequenceInsert without a position), so it cannot be rebuilt from the final one; "
                                   "a body that only appends to the sequence it carries trains")
            if appended == 0 and g.opset < 14:
                raise BuilderError(f"{where}; the body passes it on unchanged, which the gradient copies with "
                                   "Identity, which takes a sequence from opset 14 on: convert the model to opset 14 "
                                   "or newer")
            carried_out = g.same_type(g.fresh(f"{like}_carried_out"), like)
            value = carried_out
            for step in range(appended):
                erased = body_input if step == appended - 1 else g.fresh(f"{like}_erased")
                made.append(helper.make_node("SequenceErase", [value], [erased],
                                             name=g.fresh(f"{like}_SequenceErase")))
                value = erased
            if not appended:  # passed through unchanged (Identity takes a sequence from opset 14 on)
                made.append(helper.make_node("Identity", [value], [body_input], name=g.fresh(f"{like}_Identity")))
            final = g.same_type(g.forward_output(self.node, final_output, "final_sequence"), like)
            carried.append((carried_out, body_input, final))
        return made, carried

    def run(self, wanted_outer: Sequence[str], sliced: Sequence[str],
            likes: Sequence[str]) -> Tuple[List[str], List[str], List[str]]:
        """Emit the backward Loop. Returns the carried values' gradients (at the start), the sums of the
        enclosing graph's values' gradients, and, stacked step by step, the gradients of ``sliced`` (body
        inputs)."""
        g = self.g
        sums_in = {name: g.same_type(g.fresh(f"{name}_grad_sum"), name) for name in wanted_outer}
        condition = len(self.outputs) - len(likes)  # a Loop body's first output, a Scan body has none
        outputs_info = [helper.make_tensor_value_info(o, TensorProto.BOOL, []) for o in self.outputs[:condition]]
        outputs_info += [g.value_info(o, like) if g.is_sequence(like) else
                         helper.make_tensor_value_info(o, g.elem_type(like), None)
                         for o, like in zip(self.outputs[condition:], likes)]
        targets = [c[0] for c in self.carried] + list(wanted_outer) + list(sliced)
        sub, nodes, found = differentiate(g, f"{self.copy.name or 'body'}_grad", self.prelude + list(self.copy.node),
                                          outputs_info, self.seeds, targets)
        results = [sub.op("Identity", self.true)]
        for body_input, _, _, _ in self.carried:
            results.append(found.get(body_input) or copy_value(sub, zeros_like_value(sub, body_input)))
        for outer in wanted_outer:
            if outer not in found:
                results.append(copy_value(sub, sums_in[outer]))
            elif sub.is_sequence(outer):  # a sequence of the enclosing graph read in the body
                total = sub.fresh(f"{outer}_grad_sum")
                results.append(sum_sequences(sub, [sums_in[outer], found[outer]], total, outer))
            else:
                results.append(sub.op("Add", sums_in[outer], found[outer]))
        sliced_results = [found.get(value) or copy_value(sub, zeros_like_value(sub, value)) for value in sliced]
        _hoist_constants(g, sub)
        nodes = _needed(nodes, sub.nodes, results + sliced_results)
        rebuilding, rebuilt = self._rebuilt(nodes + sub.nodes)
        nodes = rebuilding + nodes
        results += [at_step for _, at_step, _ in rebuilt] + sliced_results
        graph_inputs = ([helper.make_tensor_value_info(self.step_in, TensorProto.INT64, []),
                         helper.make_tensor_value_info(self.cond_in, TensorProto.BOOL, [])]
                        + [_value_info(g, c[2], c[1]) for c in self.carried]
                        + [_value_info(g, sums_in[o], o) for o in wanted_outer]
                        + [_value_info(g, carried_out, at_step) for carried_out, at_step, _ in rebuilt])
        result_likes = ([self.cond_in] + [c[1] for c in self.carried] + list(wanted_outer)
                        + [at_step for _, at_step, _ in rebuilt])
        result_info = [_value_info(sub, r, like) for r, like in zip(results, result_likes)]
        result_info += [helper.make_tensor_value_info(r, sub.elem_type(v), None)
                        for r, v in zip(results[len(result_likes):], sliced)]
        body = helper.make_graph(nodes + sub.nodes, g.fresh(f"{self.copy.name or 'body'}_grad"), graph_inputs,
                                 result_info, value_info=sub.value_infos)
        initial = ([c[3] or zeros_like_value(g, c[1]) for c in self.carried]
                   + [zeros_like_value(g, o) for o in wanted_outer] + [final for _, _, final in rebuilt])
        loop_inputs: List[Optional[str]] = [self.steps, None]
        loop_inputs.extend(initial)
        ends = g.node("Loop", loop_inputs, len(initial) + len(sliced), body=body)
        carried_count, summed = len(self.carried), len(self.carried) + len(wanted_outer)
        return ends[:carried_count], ends[carried_count:summed], ends[summed + len(rebuilt):]


def _stack_states(g: GradientContext, node: NodeView, body: onnx.GraphProto, first_state: int,
                  extra_iteration_count: bool) -> Tuple[List[Optional[str]], str]:
    """Make the forward Loop or Scan (the training graph's node) also output, stacked over its iterations,
    the values carried into each iteration (and for a Loop the iteration numbers): new scan outputs of its
    body, along axis 0, forwards. A carried sequence is not stacked (None): a scan output is a tensor."""
    carried = node.inputs[first_state:] if first_state else node.inputs[:len(node.inputs) - int(node.attr("num_scan_inputs"))]
    proto = node.proto
    declared = len(body.output) - (1 if first_state else 0)  # the final carried values, then the scan outputs
    while len(proto.output) < declared:  # trailing outputs left out: named, so that new ones line up
        proto.output.append(g.fresh(f"{proto.name or proto.op_type}_unused_output"))
    body_inputs = [i.name for i in body.input]
    added = []
    stacked: List[Optional[str]] = []
    for k, name in enumerate(carried):
        if g.is_sequence(name):
            stacked.append(None)
            continue
        inner = g.fresh(f"{body_inputs[first_state + k]}_stacked")
        body.node.append(helper.make_node("Identity", [body_inputs[first_state + k]], [inner]))
        body.output.append(helper.make_tensor_value_info(inner, g.elem_type(name), None))
        outer = g.fresh(f"{name}_per_iteration")
        proto.output.append(outer)
        dims = g.dims(name)
        g.types[outer] = (g.elem_type(name), None if dims is None else (None,) + tuple(dims))
        stacked.append(outer)
        added.append(outer)
    iterations = ""
    if extra_iteration_count:
        inner = g.fresh(f"{body_inputs[0]}_stacked")
        body.node.append(helper.make_node("Identity", [body_inputs[0]], [inner]))
        body.output.append(helper.make_tensor_value_info(inner, TensorProto.INT64, None))
        iterations = g.fresh(f"{proto.name or 'loop'}_iterations")
        proto.output.append(iterations)
        g.types[iterations] = (TensorProto.INT64, (None,))
        added.append(iterations)
    for attribute in proto.attribute:  # a Scan's per-output axes and directions: the new ones are 0
        if attribute.name in ("scan_output_axes", "scan_output_directions"):
            attribute.ints.extend([0] * len(added))
    node.outputs = list(proto.output)
    return stacked, iterations
