"""The reverse pass, knowing no operator: which nodes lie between the trained parameters and the loss,
walked from the loss back, each asking its rule (``registry``) for its inputs' gradients, with gradients
summed where a value has several consumers.

The gradient of a value ``x`` is named ``x_grad`` where that name is free, as ONNX Runtime names them; a
trained parameter's gradient is always ``<parameter>_grad``, the name the training session and the gradient
accumulators look for.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

import onnx

from ort_cffi.artifacts.builder import rules  # noqa: F401  (registers every rule)
from ort_cffi.artifacts.builder.context import FLOATS, GradientContext, NodeView, NoGradientError
from ort_cffi.artifacts.builder.registry import lookup
from ort_cffi.artifacts.builder.rules.sequences import sum_sequences


def graph_reads(graph: onnx.GraphProto) -> List[str]:
    """Names ``graph`` (a subgraph) reads from the graphs that enclose it, in order, with repeats."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    for inner in graph.node:
        local.update(inner.output)
    names: List[str] = []
    for inner in graph.node:
        names.extend(n for n in list(inner.input) + _subgraph_inputs(inner) if n and n not in local)
    names.extend(o.name for o in graph.output if o.name not in local)
    return names


def _subgraph_inputs(node: onnx.NodeProto) -> List[str]:
    """Names a node's subgraphs (If branches, Loop and Scan bodies) read from the enclosing graph."""
    names: List[str] = []
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
        for graph in graphs:
            names.extend(graph_reads(graph))
    return names


def node_inputs(node: onnx.NodeProto) -> List[str]:
    """Every value ``node`` reads: its inputs, then what its subgraphs read from outside."""
    return [n for n in node.input] + _subgraph_inputs(node)


def outer_inputs(node: onnx.NodeProto) -> List[str]:
    """What ``node``'s subgraphs read from the enclosing graph, once each, leaving out its own inputs. A
    rule answers for these after the node's inputs: position ``len(node.input) + k`` is the k-th."""
    own = set(node.input)
    found: List[str] = []
    for name in _subgraph_inputs(node):
        if name and name not in own and name not in found:
            found.append(name)
    return found


def path_nodes(nodes: Sequence[onnx.NodeProto], sources: Iterable[str], target: Union[str, Sequence[str]],
               carries: Callable[[onnx.NodeProto, int], bool],
               carries_value: Callable[[str], bool]) -> Tuple[List[int], Set[str]]:
    """The indices of the nodes (in graph order) that lie on a path from one of ``sources`` to ``target``
    (a value, or several), and the values such paths reach. ``carries(node, k)``: whether a path goes on
    through ``node`` from its k-th input (``node_inputs`` order); ``carries_value(name)``: whether a path
    goes on through that value."""
    reached: Set[str] = set(sources)
    forward: List[int] = []
    for index, node in enumerate(nodes):
        if any(name in reached and carries(node, k) for k, name in enumerate(node_inputs(node)) if name):
            forward.append(index)
            reached.update(n for n in node.output if n and carries_value(n))
    needed: Set[str] = {target} if isinstance(target, str) else set(target)
    on_path: List[int] = []
    for index in reversed(forward):
        node = nodes[index]
        if any(name in needed for name in node.output):
            on_path.append(index)
            needed.update(n for n in node_inputs(node) if n in reached)
    return sorted(on_path), reached


def _carries(node: onnx.NodeProto, position: int) -> bool:
    """Whether a gradient can flow back from ``node``'s outputs into its input at ``position``: not through
    an operator that passes none by nature (Shape, a comparison), nor into an input its rule never answers
    for (Reshape's shape). An operator without a rule carries, so that the walk reaches it and names it."""
    registered = lookup(node.op_type, node.domain)
    if registered is None:
        return True
    if registered.rule is None:
        return False
    return registered.differentiable is None or position in registered.differentiable


class Engine:
    """Builds the gradient graph of ``loss`` with respect to ``parameters`` into ``context``."""

    def __init__(self, context: GradientContext):
        self.g = context
        self._contributions: Dict[str, List[str]] = {}

    def _carries_value(self, name: str) -> bool:
        """Integers and booleans carry no gradient: a value computed from sizes (the square root of a
        head's width, cast from Shape) is no path from the parameters, and its gradient (a product and a
        sum over a whole activation) would be computed for nothing. Unknown types carry."""
        elem_type = self.g.types.get(name, (0, None))[0]
        return not elem_type or elem_type in FLOATS

    def _gradient_of(self, value: str, final_name: Optional[str] = None) -> Optional[str]:
        """The gradient of ``value``: its one contribution, or their sum (one Sum node)."""
        found = self._contributions.get(value)
        if not found:
            return None
        if len(found) == 1 and final_name is None:
            return found[0]
        name = final_name or self.g.fresh(f"{value}_grad")
        if len(found) > 1 and self.g.is_sequence(value):  # a sequence read twice: added element by element
            sum_sequences(self.g, found, name, value)
        elif len(found) > 1:
            self.g.node("Sum", found, [name])
        else:
            shared = any(found[0] in others for key, others in self._contributions.items() if key != value)
            if shared or not self.g.rename_output(found[0], name):
                self.g.node("Identity", found, [name])
        self.g.same_type(name, value)
        self._contributions[value] = [name]
        return name

    def build(self, loss: str, parameters: Sequence[str], seed: str) -> Dict[str, str]:
        """Emit the backward pass from ``seed`` (the loss's gradient) and return {parameter: its gradient's
        name, ``<parameter>_grad``}. Raises NoGradientError naming the node that cannot pass a gradient, or
        the parameters no gradient reaches."""
        found, unreached = self.backward({loss: seed}, parameters)
        if unreached:
            raise UnreachedError(unreached)
        return found

    def backward(self, seeds: Dict[str, str], parameters: Sequence[str],
                 final_name: Optional[str] = "{}_grad") -> Tuple[Dict[str, str], List[str]]:
        """Emit the backward pass from ``seeds`` ({value: the name of its gradient}) to ``parameters``.
        Returns the gradients found ({parameter: name}, named ``final_name`` formatted with the parameter,
        a fresh name when None) and the parameters no gradient reaches. A subgraph's rule (If, Loop) runs
        this on the subgraph's own nodes."""
        graph = self.g.model.graph
        nodes = list(graph.node)
        on_path, reached = path_nodes(nodes, parameters, list(seeds), _carries, self._carries_value)
        if final_name:  # kept free, so that no rule's fresh name for an intermediate value takes one
            for parameter in parameters:
                self.g.reserve(final_name.format(parameter))
        self._contributions = {}
        for value, seed in seeds.items():
            self._contributions.setdefault(value, []).append(seed)
        for index in reversed(on_path):
            node = nodes[index]
            output_grads = [self._gradient_of(name) if name else None for name in node.output]
            if not any(output_grads):
                continue
            inputs = list(node.input) + outer_inputs(node)
            wanted = [bool(name) and name in reached for name in inputs]
            registered = lookup(node.op_type, node.domain)
            where = f"{node.op_type} node {node.name!r}" if node.name else f"an unnamed {node.op_type} node"
            if registered is None:
                raise NoGradientError(
                    f"{where} ({node.domain or 'ai.onnx'}::{node.op_type}) lies between the trained parameters and "
                    "the loss, and ort_cffi's gradient builder has no rule for that operator", node)
            if registered.rule is None:
                continue  # nothing flows back through it (a comparison, a shape): the path ends here
            if registered.differentiable is not None:
                wanted = [w and i in registered.differentiable for i, w in enumerate(wanted)]
            if not any(wanted):
                continue
            view = NodeView(node, output_grads, wanted, inputs[len(node.input):])
            self.g.source = node
            try:
                grads = list(registered.rule(self.g, view))
            finally:
                self.g.source = None
            for position, name in enumerate(inputs):
                grad = grads[position] if position < len(grads) else None
                if grad is None or not wanted[position]:
                    continue
                self.g.same_type(grad, name)
                self._contributions.setdefault(name, []).append(grad)
        found: Dict[str, str] = {}
        unreached: List[str] = []
        for parameter in parameters:
            if self._contributions.get(parameter):
                name = final_name.format(parameter) if final_name else self.g.fresh(f"{parameter}_grad")
                found[parameter] = self._gradient_of(parameter, final_name=name) or ""
            else:
                unreached.append(parameter)
        return found, unreached


class UnreachedError(NoGradientError):
    """Parameters to which no gradient flows from the loss (they feed only comparisons, indices, shapes, or
    nothing on the way to the loss)."""

    def __init__(self, parameters: Sequence[str]):
        super().__init__(f"no gradient reaches {', '.join(repr(p) for p in parameters)} from the loss")
        self.parameters = list(parameters)
