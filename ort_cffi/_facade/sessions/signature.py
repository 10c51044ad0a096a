"""What a model's inputs must be, checked before the native call (below the sessions).

ONNX Runtime checks inputs inside ``Run``/``TrainStep`` and answers with messages that do not name
the input (``Unexpected input data type. Actual: (tensor(double)) , expected: (tensor(float))``),
and a batch-size mismatch between two inputs fails deep in a kernel, after the runtime has printed
an error line on stderr. ort_cffi checks each input against the model's signature first and names
the input, what the model expects and what was given.

Where the signature comes from:

- an inference ``OrtSession``: ``SessionGetInputTypeInfo`` (element type, shape, symbolic names);
- a training session: the training C API has no call for its models' input types, so they are
  read from the ONNX model itself, once, at construction: ``graph_inputs`` walks the protobuf wire
  format of ``ModelProto.graph.input`` (field 7, then field 11) and nothing else. It is a reader of
  the five nested messages it needs (ValueInfoProto → TypeProto → Tensor → TensorShapeProto →
  Dimension): every other field, the initializers above all, is skipped by its length without
  being decoded, so a model of hundreds of MB costs a few microseconds per graph field. The
  ``onnx`` package would do the same decoding but is not a runtime dependency of ort_cffi (it is
  large, and pinned below 1.17 to write models 1.19 accepts); the wire format is stable and small.
  A file is mapped (``mmap``), not read; model bytes are read in place. A model the reader cannot
  follow (which the runtime would not have loaded) leaves the inputs unchecked, not refused.

What is checked, per input: the element type, the rank, every fixed dimension, and, across the
inputs of one call, that a symbolic dimension (``dim_param``, e.g. ``batch``) has one size: ONNX's
IR gives the same name in one graph the same value.
"""
from __future__ import annotations

import functools
import mmap
import os
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from ort_cffi._facade.protobuf_wire import Malformed as _Malformed
from ort_cffi._facade.protobuf_wire import fields as _fields
from ort_cffi._facade.protobuf_wire import int64 as _int64
from ort_cffi._facade.tensors.element_types import NUMPY_DTYPES, OnnxTensorType
from ort_cffi._native.errors import OrtException

Dim = Tuple[int, str]  # (fixed size or -1, symbolic name or '')


class InputSpec:
    """One input's expected element type and shape (None: rank unknown). Interned: equal specs are
    the same object, so that a tensor checked once is known to pass at its next call by identity."""

    __slots__ = ("onnx_type", "dims", "__weakref__")
    _interned: Dict[Tuple[int, Optional[Tuple[Dim, ...]]], InputSpec] = {}

    def __init__(self, onnx_type: OnnxTensorType, dims: Optional[Tuple[Dim, ...]]) -> None:
        self.onnx_type = onnx_type
        self.dims = dims

    @classmethod
    def of(cls, onnx_type: int, dims: Optional[Sequence[Dim]]) -> InputSpec:
        """The one spec of this element type (0: any) and dims (None: any rank)."""
        key = (int(onnx_type), None if dims is None else tuple(dims))
        spec = cls._interned.get(key)
        if spec is None:
            spec = cls._interned.setdefault(key, cls(OnnxTensorType.mapFromInt(int(onnx_type)), key[1]))
        return spec

    def describe(self) -> str:
        """``tensor(float) (numpy float32) of shape [batch, 784]``, for messages."""
        return f"{_type_text(self.onnx_type)} of shape {self.shape_text()}"

    def shape_text(self) -> str:
        """``[batch, 784]``: names for symbolic dimensions, ? for open ones."""
        if self.dims is None:
            return "[any rank]"
        return "[" + ", ".join(name or (str(size) if size >= 0 else "?") for size, name in self.dims) + "]"

    def symbolic(self) -> List[Tuple[int, str]]:
        """(axis, name) of each named dimension."""
        return [(axis, name) for axis, (_, name) in enumerate(self.dims or ()) if name]

    def __repr__(self) -> str:
        return f"InputSpec({self.describe()})"


def _type_text(onnx_type: OnnxTensorType) -> str:
    dtype = NUMPY_DTYPES.get(onnx_type)
    return onnx_type.onnx_name + (f" (numpy {dtype})" if dtype is not None else "")


def mismatch(spec: InputSpec, onnx_type: int, shape: Tuple[int, ...]) -> Optional[str]:
    """Why a value of ``onnx_type`` and ``shape`` does not fit ``spec`` (None if it does)."""
    if spec.onnx_type and onnx_type != spec.onnx_type:
        return "element type"
    dims = spec.dims
    if dims is None:
        return None
    if len(shape) != len(dims):
        return "rank"
    for (size, _), given in zip(dims, shape):
        if size > 0 and size != given:  # 0: some exporters write it for "unknown" (and empty inputs are refused anyway)
            return "shape"
    return None


def refuse(what: str, name: str, spec: InputSpec, onnx_type: int, shape: Tuple[int, ...], reason: str) -> OrtException:
    """The error for an input that does not fit its spec: names the input, the expected, the given."""
    given = f"{_type_text(OnnxTensorType.mapFromInt(int(onnx_type)))} of shape {list(shape)}"
    return OrtException.invalid_argument(
        f"{what} input {name!r} has the wrong {reason}: the model expects {spec.describe()}, got {given}"
    )


def check_symbolic(what: str, named: Sequence[Tuple[str, InputSpec, Tuple[int, ...]]]) -> None:
    """Refuse inputs of one call that give one symbolic dimension two sizes: ``named`` holds
    (input name, spec, given shape) of each input."""
    seen: Dict[str, Tuple[int, str, int]] = {}
    for name, spec, shape in named:
        for axis, dim_name in spec.symbolic():
            size = shape[axis]
            first = seen.setdefault(dim_name, (size, name, axis))
            if first[0] != size:
                raise OrtException.invalid_argument(
                    f"{what} inputs {first[1]!r} and {name!r} disagree on dimension {dim_name!r}: "
                    f"{first[0]} (axis {first[2]} of {first[1]!r}) and {size} (axis {axis} of {name!r})"
                )


# --- the ONNX protobuf wire format: ModelProto.graph.input --------------------------------------------


def _value_info(data: memoryview) -> Tuple[str, Optional[Tuple[int, Optional[Tuple[Dim, ...]]]]]:
    """(name, (element type, dims or None) for a tensor; None for any other type) of a ValueInfoProto."""
    name = ""
    tensor: Optional[Tuple[int, Optional[Tuple[Dim, ...]]]] = None
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            name = bytes(value).decode("utf-8")
        elif number == 2 and wire == 2:  # TypeProto
            for type_number, type_wire, type_value in _fields(value):
                if type_number == 1 and type_wire == 2:  # tensor_type
                    tensor = _tensor_type(type_value)
    return name, tensor


def _tensor_type(data: memoryview) -> Tuple[int, Optional[Tuple[Dim, ...]]]:
    elem_type, dims = 0, None
    for number, wire, value in _fields(data):
        if number == 1 and wire == 0:
            elem_type = value
        elif number == 2 and wire == 2:  # TensorShapeProto: repeated Dimension dim = 1
            dims = []
            for dim_number, dim_wire, dim_value in _fields(value):
                if dim_number == 1 and dim_wire == 2:
                    size, dim_name = -1, ""
                    for field, field_wire, field_value in _fields(dim_value):
                        if field == 1 and field_wire == 0:
                            size = _int64(field_value)
                        elif field == 2 and field_wire == 2:
                            dim_name = bytes(field_value).decode("utf-8")
                    dims.append((size, dim_name))
    return elem_type, None if dims is None else tuple(dims)


def graph_inputs(model: Any) -> Dict[str, InputSpec]:
    """Name → ``InputSpec`` of each tensor input of ``ModelProto.graph`` in ``model`` (bytes-like),
    parameters included. Raises ``ValueError`` for data it cannot follow."""
    with memoryview(model) as data:
        specs = _read_graph_inputs(data)  # no view of ``data`` outlives this call: it can be released
    if specs is None:
        raise ValueError("not an ONNX model this reader can follow")
    return specs


def _read_graph_inputs(data: memoryview) -> Optional[Dict[str, InputSpec]]:
    specs: Dict[str, InputSpec] = {}
    try:
        for number, wire, graph in _fields(data):
            if number != 7 or wire != 2:  # ModelProto.graph
                continue
            for graph_number, graph_wire, value in _fields(graph):
                if graph_number == 11 and graph_wire == 2:  # GraphProto.input
                    name, tensor = _value_info(value)
                    if tensor is not None and name:
                        specs[name] = InputSpec.of(tensor[0], tensor[1])
    except (_Malformed, UnicodeDecodeError):
        return None
    return specs


def model_inputs(path: Optional[str], data: Optional[bytes], names: Iterable[str]) -> Dict[str, InputSpec]:
    """The specs of the inputs ``names`` of a model given by path or bytes; {} when it cannot be read
    (the runtime's own checks still apply then). A file's are kept per file identity (device,
    inode, size, modification time): sessions made again and again from one model read it once."""
    try:
        if data is not None:
            specs = graph_inputs(data)
        elif path is not None:
            stat = os.stat(path)
            specs = _file_inputs(os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        else:
            return {}
    except (OSError, ValueError, BufferError):
        return {}
    return {name: specs[name] for name in names if name in specs}


def file_graph_inputs(path: str) -> Dict[str, InputSpec]:
    """``graph_inputs`` of the model file ``path``, parameters included, whatever operators its nodes use (no
    session is made). Raises ``OSError`` or ``ValueError``."""
    stat = os.stat(path)
    return _file_inputs(os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _file_inputs(path: str, device: int, inode: int, size: int, mtime_ns: int) -> Dict[str, InputSpec]:
    """``graph_inputs`` of a file, mapped rather than read (the caller copies what it keeps)."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return graph_inputs(mapped)


# --- the ONNX protobuf wire format: the names of a graph's values ----------------------------------


def graph_value_names(path: str) -> Optional[FrozenSet[str]]:
    """Every value name of the top-level ``ModelProto.graph`` of the model file ``path``: its inputs,
    outputs, initializers, value infos, and the inputs and outputs of its nodes; None when the file
    cannot be read or followed (then the runtime's own check still applies). These are the names
    ``ExportModelForInferencing`` accepts as outputs: it looks each one up among the graph's values,
    not only among its outputs (docs/internals/runtime.md §4). Kept per file identity, like the inputs."""
    try:
        stat = os.stat(path)
        return _file_value_names(os.path.realpath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except (OSError, ValueError, BufferError):
        return None


def unknown_values(path: str, names: Iterable[str]) -> List[str]:
    """The ``names`` that are no value of the model file ``path`` (see ``graph_value_names``): what an
    export would be refused for. Empty when the file cannot be followed: the runtime then judges."""
    values = graph_value_names(path)
    return [] if values is None else [name for name in names if name not in values]


@functools.lru_cache(maxsize=16)
def _file_value_names(path: str, device: int, inode: int, size: int, mtime_ns: int) -> Optional[FrozenSet[str]]:
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        with memoryview(mapped) as data:
            return _read_value_names(data)  # only str leave: the views can be released


def _read_value_names(data: memoryview) -> Optional[FrozenSet[str]]:
    names: Set[str] = set()

    def text(value: memoryview) -> str:
        return bytes(value).decode("utf-8")

    try:
        for number, wire, graph in _fields(data):
            if number != 7 or wire != 2:  # ModelProto.graph
                continue
            for field, field_wire, value in _fields(graph):
                if field_wire != 2:
                    continue
                if field == 1:  # NodeProto: input = 1, output = 2 (subgraphs in attributes are not the graph's)
                    names.update(text(v) for n, w, v in _fields(value) if n in (1, 2) and w == 2)
                elif field == 5:  # TensorProto initializer: name = 8
                    names.update(text(v) for n, w, v in _fields(value) if n == 8 and w == 2)
                elif field in (11, 12, 13):  # ValueInfoProto input, output, value_info: name = 1
                    names.update(text(v) for n, w, v in _fields(value) if n == 1 and w == 2)
    except (_Malformed, UnicodeDecodeError):
        return None
    names.discard("")  # an omitted optional input of a node, not a value
    return frozenset(names)
