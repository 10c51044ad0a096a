"""What kind of model a run trains, read from its eval model's graph, for the defaults that depend on it.

The trainer's default learning rate, 0.01 with AdamW, suits the MLPs, CNNs and recurrent models it was tuned
on; transformers can stall or drift off at that rate (a BERT classifier stays at chance, ALBERT, BART and
ConvBERT from random-init configurations diverge) and train at 1e-3, the rate their authors use
(docs/guides/training.md has the losses measured). So a run with no ``--lr`` looks for what transformers are
made of:

- layer normalization (``LayerNormalization`` and ONNX Runtime's fused forms of it);
- attention: a ``MatMul`` or ``Einsum`` of two computed values (queries and keys, scores and values), with a
  ``Softmax`` in the graph, or ONNX Runtime's fused attention operators.

Either gives 1e-3; neither gives 0.01. A token embedding (a ``Gather`` from a parameter) is named among what
was found, but does not decide alone: an embedding feeding an LSTM trains faster at 0.01 and well.
The graph is read with the protobuf wire reader of the facade
(no ``onnx`` needed to train), including its local functions (torch's dynamo exports keep layers there) and
subgraphs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Set, Tuple

from ort_cffi._facade.protobuf_wire import Malformed, fields
from ort_cffi.api.checkpoint_file import read_layout

DEFAULT_LR = 0.01  # MLPs, CNNs, recurrent models
ATTENTION_LR = 1e-3  # transformers: attention, layer normalization

LAYER_NORMS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
               "SkipSimplifiedLayerNormalization", "RMSNormalization"}
FUSED_ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "DecoderAttention"}

# Field numbers of onnx.proto (ModelProto, GraphProto, NodeProto, AttributeProto, FunctionProto, TensorProto).
_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP_TYPE, _NODE_ATTRIBUTE = 1, 2, 4, 5
_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS = 6, 11
_FUNCTION_NODE = 7
_TENSOR_NAME = 8


@dataclass(frozen=True)
class Node:
    op_type: str
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]


@dataclass(frozen=True)
class ModelKind:
    """The learning rate a model's kind suggests, and what in its graph suggested it (empty: nothing did)."""

    lr: float
    evidence: Tuple[str, ...]

    def describe(self) -> str:
        """For the run's notes: the rate and why."""
        if not self.evidence:
            return f"learning rate {self.lr:g}, the default (no attention or layer normalization found)"
        return (f"learning rate {self.lr:g}, the default for models with attention or layer normalization "
                f"({'; '.join(self.evidence)}); --lr sets another")


def _text(value: object) -> str:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, memoryview) else ""


def _node(data: memoryview, subgraphs: List[memoryview]) -> Node:
    inputs, outputs, op_type = [], [], ""
    for number, _, value in fields(data):
        if number == _NODE_INPUT:
            inputs.append(_text(value))
        elif number == _NODE_OUTPUT:
            outputs.append(_text(value))
        elif number == _NODE_OP_TYPE:
            op_type = _text(value)
        elif number == _NODE_ATTRIBUTE and isinstance(value, memoryview):
            subgraphs.extend(v for n, _, v in fields(value)
                             if n in (_ATTRIBUTE_GRAPH, _ATTRIBUTE_GRAPHS) and isinstance(v, memoryview))
    return Node(op_type, tuple(inputs), tuple(outputs))


def _graph(data: memoryview, constants: Set[str]) -> Iterator[Node]:
    subgraphs: List[memoryview] = []
    for number, _, value in fields(data):
        if number == _GRAPH_NODE and isinstance(value, memoryview):
            yield _node(value, subgraphs)
        elif number == _GRAPH_INITIALIZER and isinstance(value, memoryview):
            constants.update(_text(v) for n, _, v in fields(value) if n == _TENSOR_NAME)
    while subgraphs:
        yield from _graph(subgraphs.pop(), constants)


def read_nodes(model: Path) -> Tuple[List[Node], Set[str]]:
    """The nodes of a model file (its graph, subgraphs and local functions) and the names of its initializers.
    Raises Malformed for bytes that are no protobuf message, OSError when the file cannot be read."""
    data = memoryview(model.read_bytes())
    nodes: List[Node] = []
    constants: Set[str] = set()
    for number, _, value in fields(data):
        if number == _MODEL_GRAPH and isinstance(value, memoryview):
            nodes.extend(_graph(value, constants))
        elif number == _MODEL_FUNCTIONS and isinstance(value, memoryview):
            subgraphs: List[memoryview] = []
            nodes.extend(_node(v, subgraphs) for n, _, v in fields(value) if n == _FUNCTION_NODE and isinstance(v, memoryview))
            for graph in subgraphs:
                nodes.extend(_graph(graph, constants))
    return nodes, constants


def classify(nodes: Iterable[Node], parameters: Set[str], constants: Set[str]) -> ModelKind:
    """The kind of model ``nodes`` make, given the names of its parameters and of its other constants."""
    nodes = list(nodes)
    fixed = set(parameters) | set(constants) | {o for n in nodes if n.op_type == "Constant" for o in n.outputs}
    evidence: List[str] = []
    ops = {n.op_type for n in nodes}
    norms = sorted(ops & LAYER_NORMS)
    if norms:
        evidence.append(f"layer normalization: {', '.join(norms)}")
    fused = sorted(ops & FUSED_ATTENTION)
    products = [n for n in nodes if n.op_type in ("MatMul", "Einsum") and len(n.inputs) >= 2
                and all(name and name not in fixed for name in n.inputs[:2])]
    if fused:
        evidence.append(f"attention: {', '.join(fused)}")
    elif products and "Softmax" in ops:
        evidence.append(f"attention: {products[0].op_type} of two computed values, and Softmax")
    embeddings = sorted({n.inputs[0] for n in nodes if n.op_type == "Gather" and n.inputs and n.inputs[0] in parameters})
    if embeddings:
        evidence.append(f"embedding: Gather from {', '.join(repr(e) for e in embeddings[:2])}"
                        + (f" and {len(embeddings) - 2} more" if len(embeddings) > 2 else ""))
    transformer = bool(norms or fused or (products and "Softmax" in ops))
    return ModelKind(ATTENTION_LR if transformer else DEFAULT_LR, tuple(evidence) if transformer else ())


def model_kind(eval_model: Path, parameters: Set[str]) -> ModelKind:
    """The kind of the model in ``eval_model`` whose parameters (the checkpoint's names) are ``parameters``.
    A file that cannot be read as a model gives the plain default: the session that opened it is the judge."""
    try:
        nodes, constants = read_nodes(eval_model)
    except (OSError, Malformed):
        return ModelKind(DEFAULT_LR, ())
    return classify(nodes, parameters, constants)


def artifacts_kind(eval_model: Path, checkpoint: Path) -> ModelKind:
    """The kind of the model of a set of artifacts: its eval model, its parameters named by the checkpoint
    (read through a memory map: only the checkpoint's tables)."""
    layout = read_layout(os.fspath(checkpoint))
    return model_kind(eval_model, set(layout.parameters) if layout is not None else set())
