"""The training model with its accumulated gradients as extra outputs, so that ``Parameter.grad`` can be read.

ONNX Runtime's Python layer reads a parameter's gradient buffer from its C++ ``Parameter``; the training C
API has no such call. The buffer is written, each training step, by one ``com.microsoft``
``InPlaceAccumulatorV2(buffer, gradient, lazy_reset_grad)`` node per trainable parameter, whose optional
second output is the accumulated buffer. ``with_gradient_outputs`` gives each such node that output and lists
it as a graph output named ``<parameter>::accumulated_gradient`` (a name none of the runtime's gradient
suffixes matches, so the runtime treats it as a user output): every training step then returns the
gradients beside the loss, and ``Module`` hides them from its caller.

The model is edited on the protobuf wire format, as ``ort_cffi``'s facade reads it (no ``onnx`` package at
run time): ``ModelProto.graph`` (field 7) is split into its fields; ``NodeProto`` entries (field 1) whose
``op_type`` (4) is ``InPlaceAccumulatorV2`` get a second ``output`` (2); ``ValueInfoProto`` entries are
appended as outputs (12), typed as the accumulator's buffer input is. Every other byte is copied unchanged.
Only names are decoded, each from its own field: a ``ValueInfoProto`` also holds its value's type and shape
(varints, not text: a dim of 128 or more is no UTF-8), so its name is read from its field 1, never from the
whole message. A model whose initializers keep their data in other files reads them relative to its own
folder: its edited copy must be written beside it (``GradientOutputs.beside_original``). A model this cannot
follow is left as it is: ``GradientsUnreadable`` says why, and ``Parameter.grad`` raises with that reason
rather than answering nothing.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Set, Tuple

from ort_cffi._facade.protobuf_wire import (
    LENGTH_DELIMITED,
    Malformed,
    encode_varint,
    field_spans,
    length_delimited,
    varint,
)

GRADIENT_OUTPUT_SUFFIX = "::accumulated_gradient"
_BUFFER_SUFFIX = "_grad.accumulation.buffer"
_ACCUMULATOR = b"InPlaceAccumulatorV2"
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


class GradientsUnreadable(Exception):
    """The training model cannot be given its gradients as outputs; the message says why."""


class GradientOutputs(NamedTuple):
    """The edited training model, parameter name → its gradient output's name, and whether the model's
    initializers keep their data in other files (then the copy must lie in the original's folder)."""

    model: bytes
    outputs: Dict[str, str]
    beside_original: bool


def _fields(data: bytes) -> Iterator[Tuple[int, int, int, int, int]]:
    """(field number, wire type, start of the whole field, start of its payload, end) for each field."""
    view = memoryview(data)
    for number, wire, start, end in field_spans(view):
        _, at = varint(view, start)  # past the key
        if wire == LENGTH_DELIMITED:
            _, at = varint(view, at)  # past the length
        yield number, wire, start, at, end


def _strings(data: bytes, number: int) -> List[bytes]:
    return [data[p:e] for n, w, _, p, e in _fields(data) if n == number and w == LENGTH_DELIMITED]


def _name(data: bytes, number: int) -> bytes:
    """The name (field ``number``, a string) of a message, as stored: the last one given counts, as in protobuf."""
    names = _strings(data, number)
    return names[-1] if names else b""


def _value_names(graph: bytes) -> Set[bytes]:
    """Every value name of a graph, as stored (compared as bytes: a name that is not UTF-8 takes no other):
    its inputs, outputs and value infos (ValueInfoProto.name = 1), its initializers (TensorProto.name = 8),
    and its nodes' inputs and outputs (NodeProto.input = 1, output = 2)."""
    names: Set[bytes] = set()
    for number, wire, _, payload, end in _fields(graph):
        if wire != LENGTH_DELIMITED:
            continue
        if number in (11, 12, 13):
            names.add(_name(graph[payload:end], 1))
        elif number == 5:
            names.add(_name(graph[payload:end], 8))
        elif number == 1:
            node = graph[payload:end]
            names.update(_strings(node, 1) + _strings(node, 2))
    names.discard(b"")
    return names


def _has_external_data(initializer: bytes) -> bool:
    for number, wire, _, payload, _end in _fields(initializer):
        if number == 14 and wire == 0 and varint(memoryview(initializer), payload)[0] == _EXTERNAL:
            return True
    return False


def _tensor_output(name: str, type_proto: bytes) -> bytes:
    return length_delimited(1, name.encode()) + length_delimited(2, type_proto)  # ValueInfoProto.name, .type


def _elem_type_only(elem_type: int) -> bytes:
    """A TypeProto of a tensor of ``elem_type`` and no shape."""
    return length_delimited(1, encode_varint(1 << 3) + encode_varint(elem_type))  # TypeProto.tensor_type.elem_type


def _input_types(graph: bytes) -> Dict[bytes, bytes]:
    """Name → TypeProto (ValueInfoProto.type = 2), both as stored, of each graph input (GraphProto.input = 11)."""
    found: Dict[bytes, bytes] = {}
    for number, wire, _, payload, end in _fields(graph):
        if number == 11 and wire == LENGTH_DELIMITED:
            value = graph[payload:end]
            types = _strings(value, 2)
            if types:
                found[_name(value, 1)] = types[-1]
    return found


def with_gradient_outputs(model: bytes, elem_types: Dict[str, int]) -> GradientOutputs:
    """The model with a gradient output per accumulated parameter, and parameter name → output name.
    ``elem_types`` gives each parameter's ONNX element type where the graph does not type its buffer (float
    when not listed either).

    Raises:
        GradientsUnreadable: The model cannot be edited, or has no accumulator to read (the message says which).
    """
    try:
        return _edit(model, elem_types)
    except Malformed as exc:
        raise GradientsUnreadable(f"the training model is not a protobuf message this reader can follow ({exc})") from None
    except UnicodeDecodeError:
        raise GradientsUnreadable("the name of a parameter it accumulates is not UTF-8") from None


def _edit(model: bytes, elem_types: Dict[str, int]) -> GradientOutputs:
    model_fields = list(_fields(model))
    graphs = [f for f in model_fields if f[0] == 7 and f[1] == LENGTH_DELIMITED]
    if len(graphs) != 1:
        raise GradientsUnreadable(f"the training model has {len(graphs)} graph fields, not one")
    _, _, _, graph_start, graph_end = graphs[0]
    graph = model[graph_start:graph_end]
    outputs: Dict[str, str] = {}
    taken = _value_names(graph)
    input_types = _input_types(graph)
    accumulators = 0
    external = False
    pieces: List[bytes] = []
    for number, wire, start, payload, end in _fields(graph):
        field = graph[start:end]
        if number == 5 and wire == LENGTH_DELIMITED and _has_external_data(graph[payload:end]):
            external = True  # its data lies beside the original file: so must the edited copy
        if number == 1 and wire == LENGTH_DELIMITED:
            node = graph[payload:end]
            if _strings(node, 4) != [_ACCUMULATOR]:
                pieces.append(field)
                continue
            accumulators += 1
            inputs, node_outputs = _strings(node, 1), _strings(node, 2)
            if len(node_outputs) == 1 and inputs and inputs[0].endswith(_BUFFER_SUFFIX.encode()):
                parameter = inputs[0][: -len(_BUFFER_SUFFIX)].decode("utf-8")
                name = parameter + GRADIENT_OUTPUT_SUFFIX
                if name.encode() in taken:
                    raise GradientsUnreadable(f"the name {name!r} ort_cffi would give its gradient output is taken")
                if parameter in outputs:
                    raise GradientsUnreadable(f"two accumulator nodes write the gradient buffer of {parameter!r}")
                outputs[parameter] = name
                field = length_delimited(1, node + length_delimited(2, name.encode()))
        pieces.append(field)
    if not outputs:
        raise GradientsUnreadable(
            "it has no InPlaceAccumulatorV2 node" if not accumulators else
            f"none of its {accumulators} InPlaceAccumulatorV2 nodes is ONNX Runtime's form (one output, a first input "
            f"named '<parameter>{_BUFFER_SUFFIX}')")
    # each output is typed as its buffer is (the parameter's element type and shape), where the graph says
    pieces.extend(length_delimited(12, _tensor_output(name, input_types.get((parameter + _BUFFER_SUFFIX).encode())
                                                      or _elem_type_only(elem_types.get(parameter, 1))))
                  for parameter, name in outputs.items())
    new_graph = b"".join(pieces)
    rebuilt = b"".join(model[start:end] if number != 7 else length_delimited(7, new_graph) for number, _w, start, _p, end in model_fields)
    return GradientOutputs(rebuilt, outputs, external)
