"""A model never reads outside its folder: the external data of an ONNX model, confined before the model
reaches ``onnx`` or ONNX Runtime.

A tensor of an ONNX model may keep its bytes in another file (``data_location = EXTERNAL``, with
``external_data`` entries ``location``, ``offset``, ``length``). ONNX Runtime and ``onnx`` read the
location relative to the model's folder and follow symlinks; ONNX Runtime 1.19 also takes ``..`` and
absolute paths (docs/internals/runtime.md §10). A model from elsewhere could
thus make the process read any file it can read, and ort_cffi would write those bytes into checkpoints
and exported models. So before a model is handed over, every tensor with external data must name a
regular file that lies, symlinks resolved, inside the model's folder, with ``offset + length`` within the
file; anything else is refused, naming the tensor, the location and the rule, before any of it is read.

Where tensors are (ONNX's ``onnx.proto``: every place a tensor may be, whether or not a loader reads it): the
initializers and sparse initializers of the graph and of every subgraph (attributes ``g`` and ``graphs``
of any node, at any depth); tensors in node attributes (``t``, ``tensors``, ``sparse_tensor``,
``sparse_tensors``: a Constant's ``value`` and ``sparse_value``); the same inside the model's functions
(their nodes, and their attributes' defaults) and its ``training_info`` graphs. The model is read with
``protobuf_wire``, not with ``onnx`` (no dependency of the facade). A singular message field given twice
is merged as protobuf merges it (the parts concatenated), so that no split tensor slips through.

``inline_external_data`` reads such tensors into a model file the process wrote (an export), so that
the copy holds its data rather than locations of files it does not own.

What cannot be confined here is documented in docs/guides/guarantees.md: a hard link is a regular file of
the folder like any other, and a folder that an adversary changes between this check and the runtime's
read (a race) is not one this check can vouch for.
"""
from __future__ import annotations

import mmap
import os
import re
import stat
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

from ort_cffi._facade.protobuf_wire import (
    LENGTH_DELIMITED,
    VARINT,
    Malformed,
    field_spans,
    fields,
    length_delimited,
    payload,
)
from ort_cffi._native.errors import OrtErrorCode, OrtException

EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
# ONNX Runtime reads a tensor at this "location" from its own process's memory, at the address in
# "offset" (onnxruntime/core/framework/tensorprotoutils.h, kTensorProtoMemoryAddressTag).
ORT_MEMORY_ADDRESS_TAG = b"*/_ORT_MEM_ADDR_/*"
# Bytes 4-7 of an ORT-format model (a flatbuffer, not a protobuf): its tensors hold their data or an offset
# into a file the runtime names itself, never a location (docs/internals/runtime.md §10). It counts only for
# bytes protobuf cannot read (``check_external_data``).
ORT_FORMAT_IDENTIFIER = b"ORTM"
_DECIMAL = re.compile(rb"[0-9]+\Z")


class ExternalTensor(NamedTuple):
    """A tensor whose data is in another file: its name, where it is in the model, and its
    ``external_data`` entries (key, value) as stored."""

    name: str
    where: str
    entries: Tuple[Tuple[bytes, bytes], ...]


# --- finding the tensors -------------------------------------------------------------------------------


def _text(value: Union[bytes, memoryview]) -> str:
    return bytes(value).decode("utf-8", errors="replace")


def _merged(parts: List[memoryview]) -> memoryview:
    """One message from the occurrences of a singular message field: protobuf merges them, which is what
    parsing their concatenation does."""
    return parts[0] if len(parts) == 1 else memoryview(b"".join(bytes(part) for part in parts))


def _tensor(data: memoryview, where: str, found: List[ExternalTensor]) -> None:
    """TensorProto: name = 8, external_data = 13 (StringStringEntryProto: key = 1, value = 2),
    data_location = 14 (the last one given counts)."""
    name: Union[bytes, memoryview] = b""
    location_kind = 0
    entries = []
    for number, wire, value in fields(data):
        if number == 8 and wire == LENGTH_DELIMITED:
            name = value
        elif number == 13 and wire == LENGTH_DELIMITED:
            entries.append(value)
        elif number == 14 and wire == VARINT:
            location_kind = value
    if location_kind != EXTERNAL:
        return
    pairs = []
    for entry in entries:
        key, text = b"", b""
        for number, wire, value in fields(entry):
            if number == 1 and wire == LENGTH_DELIMITED:
                key = bytes(value)
            elif number == 2 and wire == LENGTH_DELIMITED:
                text = bytes(value)
        pairs.append((key, text))
    found.append(ExternalTensor(_text(name), where, tuple(pairs)))


def _sparse(data: memoryview, where: str, found: List[ExternalTensor]) -> None:
    """SparseTensorProto: values = 1, indices = 2 (both TensorProto)."""
    parts: Dict[int, List[memoryview]] = {1: [], 2: []}
    for number, wire, value in fields(data):
        if number in parts and wire == LENGTH_DELIMITED:
            parts[number].append(value)
    for number, role in ((1, "values"), (2, "indices")):
        if parts[number]:
            _tensor(_merged(parts[number]), f"the {role} of {where}", found)


def _graph(data: memoryview, where: str, found: List[ExternalTensor]) -> None:
    """GraphProto: node = 1, initializer = 5, sparse_initializer = 15."""
    for number, wire, value in fields(data):
        if wire != LENGTH_DELIMITED:
            continue
        if number == 5:
            _tensor(value, f"an initializer of {where}", found)
        elif number == 15:
            _sparse(value, f"a sparse initializer of {where}", found)
        elif number == 1:
            _node(value, where, found)


def _node(data: memoryview, where: str, found: List[ExternalTensor]) -> None:
    """NodeProto: attribute = 5; name = 3 and op_type = 4 only to name a node that holds tensors."""
    attributes = [value for number, wire, value in fields(data) if number == 5 and wire == LENGTH_DELIMITED]
    if not attributes:
        return

    def node_where() -> str:
        name, op_type = "", ""
        for number, wire, value in fields(data):
            if number == 3 and wire == LENGTH_DELIMITED:
                name = _text(value)
            elif number == 4 and wire == LENGTH_DELIMITED:
                op_type = _text(value)
        return f"node {name!r} ({op_type or 'no op_type'}) of {where}"

    for attribute in attributes:
        _attribute(attribute, node_where, found)


def _attribute(data: memoryview, owner: Callable[[], str], found: List[ExternalTensor]) -> None:
    """AttributeProto: name = 1, t = 5, g = 6, tensors = 10, graphs = 11, sparse_tensor = 22,
    sparse_tensors = 23."""
    name: Union[bytes, memoryview] = b""
    parts: Dict[int, List[memoryview]] = {5: [], 6: [], 10: [], 11: [], 22: [], 23: []}
    for number, wire, value in fields(data):
        if wire != LENGTH_DELIMITED:
            continue
        if number == 1:
            name = value
        elif number in parts:
            parts[number].append(value)
    if not any(parts.values()):
        return
    where = f"attribute {_text(name)!r} of {owner()}"
    if parts[5]:
        _tensor(_merged(parts[5]), where, found)
    for tensor in parts[10]:
        _tensor(tensor, where, found)
    if parts[22]:
        _sparse(_merged(parts[22]), where, found)
    for sparse in parts[23]:
        _sparse(sparse, where, found)
    if parts[6]:
        _graph(_merged(parts[6]), f"the subgraph in {where}", found)
    for graph in parts[11]:
        _graph(graph, f"a subgraph in {where}", found)


def _function(data: memoryview, found: List[ExternalTensor]) -> None:
    """FunctionProto: name = 1, node = 7, attribute_proto = 11 (defaults of its attributes)."""
    name = ""
    for number, wire, value in fields(data):
        if number == 1 and wire == LENGTH_DELIMITED:
            name = _text(value)
    where = f"function {name!r}"
    for number, wire, value in fields(data):
        if number == 7 and wire == LENGTH_DELIMITED:
            _node(value, where, found)
        elif number == 11 and wire == LENGTH_DELIMITED:
            _attribute(value, lambda: f"the defaults of {where}", found)


def _model(data: memoryview, found: List[ExternalTensor]) -> None:
    """ModelProto: graph = 7, training_info = 20 (TrainingInfoProto: initialization = 1, algorithm = 2),
    functions = 25."""
    graphs: List[memoryview] = []
    for number, wire, value in fields(data):
        if wire != LENGTH_DELIMITED:
            continue
        if number == 7:
            graphs.append(value)
        elif number == 25:
            _function(value, found)
        elif number == 20:
            stages: Dict[int, List[memoryview]] = {1: [], 2: []}
            for stage, stage_wire, graph in fields(value):
                if stage in stages and stage_wire == LENGTH_DELIMITED:
                    stages[stage].append(graph)
            for stage, role in ((1, "initialization"), (2, "algorithm")):
                if stages[stage]:
                    _graph(_merged(stages[stage]), f"the {role} graph of the model's training_info", found)
    if graphs:
        _graph(_merged(graphs), "the model's graph", found)


def external_tensors(model: Union[bytes, bytearray, memoryview, mmap.mmap]) -> List[ExternalTensor]:
    """Every tensor of the model (bytes-like) whose data is external, in the order of the file.
    Raises ``Malformed`` for bytes no protobuf parser would take (or nested beyond Python's recursion)."""
    found: List[ExternalTensor] = []
    with memoryview(model) as data:
        problem = _walk(data, found)  # no view of ``data`` outlives this call: it can be released
    if problem is not None:
        raise Malformed(problem)
    return found


def _walk(data: memoryview, found: List[ExternalTensor]) -> Optional[str]:
    try:
        _model(data, found)
    except Malformed as exc:  # caught here, so that its traceback (and the views it holds) goes now
        return str(exc)
    except RecursionError:
        return "subgraphs nested too deeply"
    return None


# --- checking them ---------------------------------------------------------------------------------------


def _kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder  # the folder itself is refused as a folder, below


class Placement(NamedTuple):
    """Where a tensor's external data is: the file (symlinks resolved), the offset and the length."""

    path: str
    offset: int
    length: int


def broken_rule(tensor: ExternalTensor, folder: Optional[str], anywhere: bool = False) -> Optional[str]:
    """Why ``tensor``'s external data may not be read, or None when it may: a regular file inside
    ``folder`` (symlinks resolved) with ``offset + length`` within it. ``folder`` None: a model given as
    bytes, which has none (ONNX Runtime would look in the current folder). ``anywhere``: the file may lie
    outside the folder (still a regular file, read within its size)."""
    found = placement(tensor, folder, anywhere)
    return found if isinstance(found, str) else None


def placement(tensor: ExternalTensor, folder: Optional[str], anywhere: bool = False) -> Union[str, Placement]:
    """Where ``tensor``'s data may be read (``broken_rule``), or the rule it breaks."""
    values: Dict[bytes, bytes] = {}
    for key, value in tensor.entries:
        if key in values:
            return f"its external_data gives {_text(key)!r} twice"
        values[key] = value
    location = values.get(b"location", b"")
    if not location:
        return "its external_data has no location"
    if b"\0" in location:
        return "the location holds a NUL byte"
    if location == ORT_MEMORY_ADDRESS_TAG:
        return "ONNX Runtime reads this location as an address in its own memory"
    if folder is None and not anywhere:
        return ("the model is given as bytes, so it has no folder for its external data (ONNX Runtime would look "
                "in the current folder): give the model as a path in the folder of its data")
    base = folder if folder is not None else os.getcwd()
    name = os.fsdecode(location)
    if not anywhere:
        if os.path.isabs(name):
            return "an absolute location leaves the model's folder"
        if ".." in name.split(os.sep) + (name.split(os.altsep) if os.altsep else []):
            return "'..' leads out of the model's folder"
    resolved = os.path.realpath(os.path.join(base, name))
    if not anywhere and not _inside(resolved, os.path.realpath(base)):
        return (f"it resolves (symlinks followed) to {resolved!r}, outside the model's folder "
                f"{os.path.realpath(base)!r}")
    try:
        info = os.stat(resolved)
    except OSError as exc:
        return f"{resolved!r} cannot be opened ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return f"{resolved!r} is {_kind_of(info.st_mode)}, not a regular file"
    numbers = {}
    for key in (b"offset", b"length"):
        if key in values:
            if not _DECIMAL.match(values[key]):
                return f"its {_text(key)} {_text(values[key])!r} is not a whole number of bytes"
            numbers[key] = int(values[key])
    offset = numbers.get(b"offset", 0)
    length = numbers.get(b"length", max(0, info.st_size - offset))
    if offset + length > info.st_size:
        return (f"offset {offset} + length {length} = {offset + length} bytes lies past the end of {resolved!r} "
                f"({info.st_size} bytes)")
    return Placement(resolved, offset, length)


def _refusal(what: str, tensor: ExternalTensor, rule: str, escape: Optional[str]) -> OrtException:
    location = dict(tensor.entries).get(b"location", b"")
    hint = (f" (a trusted model whose data lies elsewhere on purpose: copy the data into its folder, or pass {escape})"
            if escape else "")
    return OrtException.invalid_argument(
        f"{what}: tensor {tensor.name!r} ({tensor.where}) keeps its data at location {_text(location)!r}, and {rule}. "
        f"A model's external data must be a regular file inside the model's folder, symlinks resolved, with offset + "
        f"length within the file: nothing was read{hint}"
    )


def check_external_data(model: Union[str, bytes], what: str, *, anywhere: bool = False,
                        escape: str = "externalDataAnywhere=True") -> None:
    """Refuse a model (a file's path, or its bytes) whose external data may not be read (``broken_rule``),
    before anything reads it. ``what`` names the model in the message (e.g. ``"training model 'a.onnx'"``);
    ``escape`` is how the caller's API spells ``anywhere``, named where it would let the model through.

    Raises:
        OrtInvalidArgumentException: A tensor's external data breaks a rule (the message names the tensor,
            where it is, its location and the rule).
        OrtException: The model cannot be read as a protobuf message (code ``ORT_INVALID_PROTOBUF``), or
            the file cannot be read.
    """
    folder: Optional[str]
    try:
        if isinstance(model, str):
            folder = os.path.dirname(os.path.abspath(model))
            with open(model, "rb") as file:
                head = file.read(8)
            tensors = _file_tensors(model)
        else:
            folder, head = None, bytes(model[:8])
            tensors = external_tensors(model)
    except Malformed as exc:
        # An ORT-format model is no protobuf: it names no locations. The identifier alone decides nothing
        # (a protobuf may hold those bytes too, and the runtime then reads it as one): only bytes that
        # protobuf cannot read, which the runtime therefore cannot read as ONNX either, pass on as one.
        if head[4:8] == ORT_FORMAT_IDENTIFIER:
            return
        raise OrtException(f"{what} is not an ONNX model: protobuf cannot read it ({exc})",
                           OrtErrorCode.ORT_INVALID_PROTOBUF) from None
    except OSError as exc:
        raise OrtException(f"cannot read {what}: {exc.strerror}", OrtErrorCode.ORT_FAIL) from None
    for tensor in tensors:
        rule = broken_rule(tensor, folder, anywhere)
        if rule is not None:
            would_pass = not anywhere and broken_rule(tensor, folder, True) is None
            raise _refusal(what, tensor, rule, escape if would_pass else None)


def _file_tensors(path: str) -> List[ExternalTensor]:
    """``external_tensors`` of a file, mapped rather than read."""
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return []  # mmap refuses empty files; an empty message has no tensors
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return external_tensors(mapped)


def confine_models(models: Iterable[Tuple[Optional[str], Optional[bytes], str]], anywhere: Any) -> None:
    """``check_external_data`` for the facade's sessions: each model as ``read_model`` gave it, (path,
    None) or (None, bytes), with what it is (``"training model"``); ``anywhere`` is the caller's
    ``externalDataAnywhere``."""
    if not isinstance(anywhere, bool):
        raise OrtException.invalid_argument(f"externalDataAnywhere must be a bool, not {type(anywhere).__name__}")
    for path, data, what in models:
        if path is not None:
            check_external_data(path, f"{what} {path!r}", anywhere=anywhere)
        elif data is not None:
            check_external_data(data, f"the {what} (given as bytes)", anywhere=anywhere)


# --- copies hold their data ------------------------------------------------------------------------------

# The fields of each message that hold messages which may hold tensors: the places ``_model`` walks.
_CHILDREN: Dict[str, Dict[int, str]] = {
    "model": {7: "graph", 20: "training_info", 25: "function"},
    "graph": {1: "node", 5: "tensor", 15: "sparse"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse"},
    "function": {7: "node", 11: "attribute"},
    "training_info": {1: "graph", 2: "graph"},
    "sparse": {1: "tensor", 2: "tensor"},
}


def _inlined(data: memoryview, kind: str, read: Callable[[memoryview], Optional[bytes]]) -> Optional[bytes]:
    """The message ``data`` (of ``kind``) with its external tensors rewritten by ``read``, re-encoded
    along the way down to them; None when nothing in it changes (then nothing is copied)."""
    if kind == "tensor":
        return read(data)
    children = _CHILDREN[kind]
    parts: List[Union[bytes, memoryview]] = []
    changed = False
    for number, wire, start, end in field_spans(data):
        child = children.get(number) if wire == LENGTH_DELIMITED else None
        new = _inlined(payload(data, start, end), child, read) if child is not None else None
        if new is not None:
            parts.append(length_delimited(number, new))
            changed = True
        else:
            parts.append(data[start:end])
    return b"".join(parts) if changed else None


def _read_placed(found: Placement) -> bytes:
    """The bytes at ``found``, from a file opened without following a last symlink and checked again once
    open (regular, large enough), so that this read stays within what was checked."""
    fd = os.open(found.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or found.offset + found.length > info.st_size:
            raise OSError(f"{found.path!r} changed while it was read")
        file.seek(found.offset)
        data = file.read(found.length)
    if len(data) != found.length:
        raise OSError(f"{found.path!r} changed while it was read")
    return data


def inline_external_data(path: str, folder: str, what: str, *, anywhere: bool = False) -> None:
    """Rewrite the model file ``path`` so that it holds its tensors' data: each external tensor's bytes,
    read from ``folder`` under the rules of ``check_external_data``, become its ``raw_data``, its
    ``external_data`` and ``data_location`` go. A file without external data is left as it is.

    For what the process writes: ONNX Runtime's export copies the eval model's external tensors as they
    are, locations relative to the eval model's folder, and the copy would then name files it does not own.

    Raises:
        OrtInvalidArgumentException: A tensor's external data breaks a rule (as in ``check_external_data``).
        OrtException: The file is no protobuf message, or the data cannot be read.
    """
    with open(path, "rb") as file:
        model = file.read()

    def read(tensor: memoryview) -> Optional[bytes]:
        found: List[ExternalTensor] = []
        _tensor(tensor, "a tensor of the model", found)
        if not found:
            return None
        where = placement(found[0], folder, anywhere)
        if isinstance(where, str):
            raise _refusal(what, found[0], where, None)
        kept = [bytes(tensor[start:end]) for number, _, start, end in field_spans(tensor) if number not in (9, 13, 14)]
        return b"".join(kept) + length_delimited(9, _read_placed(where))  # raw_data = 9

    try:
        with memoryview(model) as data:
            rewritten = _inlined(data, "model", read)
        if rewritten is not None and external_tensors(rewritten):
            raise Malformed("a tensor split over several fields keeps external data")
    except RecursionError:
        raise OrtException(f"cannot read {what} back: subgraphs nested too deeply", OrtErrorCode.ORT_INVALID_PROTOBUF) from None
    except Malformed as exc:
        raise OrtException(f"cannot read {what} back: {exc}", OrtErrorCode.ORT_INVALID_PROTOBUF) from None
    except OSError as exc:
        raise OrtException(f"cannot read the external data of {what}: {exc}", OrtErrorCode.ORT_FAIL) from None
    if rewritten is not None:
        with open(path, "wb") as out:
            out.write(rewritten)
