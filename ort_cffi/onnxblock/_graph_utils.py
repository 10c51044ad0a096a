"""What the blocks share: fresh names (``onnx::<token>::<n>``, counted through the process as ONNX Runtime's
onnxblock counts them), graph outputs registered by name, and look-ups of graph inputs and outputs."""
from __future__ import annotations

import itertools
from typing import Iterator, List, Sequence, Union

import onnx

_TOKENS: Iterator[int] = itertools.count(1)


def generate_graph_name(token: str) -> str:
    """A name for what a block adds: ``onnx::<token>::<n>``, n one more than the last drawn in this process."""
    return f"onnx::{token}::{next(_TOKENS)}"


def restart_names() -> None:
    """Count names from 1 again, as in a fresh process (artifacts made twice then name their nodes alike)."""
    global _TOKENS
    _TOKENS = itertools.count(1)


def get_output_from_output_name(model: onnx.ModelProto, output_name: str) -> onnx.ValueInfoProto:
    """The graph output ``output_name``; LookupError when the graph has none of that name."""
    for output in model.graph.output:
        if output.name == output_name:
            return output
    raise LookupError(f"The provided output name {output_name} is not a graph output.")


def get_input_from_input_name(model: onnx.ModelProto, input_name: str) -> onnx.ValueInfoProto:
    """The graph input ``input_name``; LookupError when the graph has none of that name."""
    for graph_input in model.graph.input:
        if graph_input.name == input_name:
            return graph_input
    raise LookupError(f"The provided input name {input_name} is not a graph input.")


def node_arg_exists(model: onnx.ModelProto, node_arg_name: str) -> bool:
    """Whether some node of the graph reads or writes ``node_arg_name``."""
    return any(node_arg_name in node.input or node_arg_name in node.output for node in model.graph.node)


def register_graph_outputs(model: onnx.ModelProto, output_names: Union[Sequence[str], str]) -> None:
    """Make ``output_names`` the graph's outputs, in that order, typed from the graph's outputs and value_info
    (shape inference fills the latter); LookupError names a value whose type is unknown."""
    names: List[str] = [output_names] if isinstance(output_names, str) else list(output_names)
    known = {value.name: value for value in model.graph.value_info}
    known.update({value.name: value for value in model.graph.output})
    known_inputs = {value.name: value for value in model.graph.input}
    outputs = []
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a block's output must be a value's name (str), not {type(name).__name__}")
        found = known.get(name) or known_inputs.get(name)
        if found is None:
            raise LookupError(f"The provided name {name} is not a graph value info or a graph output.")
        outputs.append(found)
    del model.graph.output[:]
    model.graph.output.extend(outputs)
