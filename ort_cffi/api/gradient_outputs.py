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
appended as outputs (12). Every other byte is copied unchanged. A model this cannot follow, or whose
initializers keep their data in other files (the edited model is written elsewhere), is left as it is and
its gradients are not offered.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

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


def _has_external_data(initializer: bytes) -> bool:
    for number, wire, _, payload, _end in _fields(initializer):
        if number == 14 and wire == 0 and varint(memoryview(initializer), payload)[0] == _EXTERNAL:
            return True
    return False


def _float_tensor_output(name: str, elem_type: int) -> bytes:
    tensor_type = encode_varint(1 << 3) + encode_varint(elem_type)  # TypeProto.Tensor.elem_type
    type_proto = length_delimited(1, tensor_type)  # TypeProto.tensor_type
    return length_delimited(1, name.encode()) + length_delimited(2, type_proto)  # ValueInfoProto.name, .type


def with_gradient_outputs(model: bytes, elem_types: Dict[str, int]) -> Optional[Tuple[bytes, Dict[str, str]]]:
    """The model with a gradient output per accumulated parameter, and parameter name → output name;
    None when the model cannot be edited (or has no accumulator to read). ``elem_types`` gives each
    parameter's ONNX element type (float when not listed)."""
    try:
        return _edit(model, elem_types)
    except (Malformed, UnicodeDecodeError):
        return None


def _edit(model: bytes, elem_types: Dict[str, int]) -> Optional[Tuple[bytes, Dict[str, str]]]:
    model_fields = list(_fields(model))
    graphs = [f for f in model_fields if f[0] == 7 and f[1] == LENGTH_DELIMITED]
    if len(graphs) != 1:
        return None
    _, _, _, graph_start, graph_end = graphs[0]
    graph = model[graph_start:graph_end]
    outputs: Dict[str, str] = {}
    taken = {name.decode() for name in _strings(graph, 12)}
    pieces: List[bytes] = []
    for number, wire, start, payload, end in _fields(graph):
        field = graph[start:end]
        if number == 5 and wire == LENGTH_DELIMITED and _has_external_data(graph[payload:end]):
            return None  # its data lies beside the original file, not beside the edited copy
        if number == 1 and wire == LENGTH_DELIMITED:
            node = graph[payload:end]
            inputs, node_outputs = _strings(node, 1), _strings(node, 2)
            if (_strings(node, 4) == [_ACCUMULATOR] and len(node_outputs) == 1 and inputs
                    and inputs[0].endswith(_BUFFER_SUFFIX.encode())):
                parameter = inputs[0][: -len(_BUFFER_SUFFIX)].decode()
                name = parameter + GRADIENT_OUTPUT_SUFFIX
                if name in taken or parameter in outputs:
                    return None
                outputs[parameter] = name
                field = length_delimited(1, node + length_delimited(2, name.encode()))
        pieces.append(field)
    if not outputs:
        return None
    pieces.extend(length_delimited(12, _float_tensor_output(name, elem_types.get(parameter, 1)))
                  for parameter, name in outputs.items())
    new_graph = b"".join(pieces)
    rebuilt = b"".join(model[start:end] if number != 7 else length_delimited(7, new_graph) for number, _w, start, _p, end in model_fields)
    return rebuilt, outputs
