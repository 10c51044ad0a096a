"""ONNX Runtime's training checkpoint, laid out byte for byte as ONNX Runtime 1.19 writes it: the one writer
that ort_cffi's artifact builder (the generator's checkpoint) and its training engine (the runtime's
``SaveCheckpoint``) share.

The format is ONNX Runtime's flatbuffer schema ``ort_training_checkpoint.fbs`` (file identifier ``ODTC``,
version 2; docs/internals/runtime.md, "Writing the checkpoint"): a ``Checkpoint`` table {version,
module_state, optimizer_groups, property_bag}; a ``ModuleState`` {requires_grad_params, frozen_params,
is_nominal_state, has_external_data}, each parameter a ``Tensor`` {name, doc_string, dims, data_type,
raw_data, string_data, external_data_offset}; an ``OptimizerGroup`` {group_name, step, initial_learning_rate,
optimizer_states}, each state a ``ParameterOptimizerState`` {param_name, momentums}; a ``PropertyBag`` {ints,
floats, strings}, each property {name, value}.

Two writers of ONNX Runtime lay it out, and ``plan_checkpoint`` follows either:

- its generator (``SaveCheckpoint`` from TensorProtos) keeps the tensors in the order given and writes no
  optimizer groups and no property bag (``groups`` and ``properties`` None);
- its runtime (``SaveCheckpoint`` of a state) sorts tensors, groups, parameters, moments and properties by
  name, writes the optimizer groups (an empty vector when it saves none) and a property bag when there are
  properties, and leaves out the module state of a state without parameters. The caller sorts; this module
  writes in the order it is given.

Memory: the tensors' data is never gathered. The layout is planned first (``flatbuffer.BackToFrontLayout``);
each tensor's bytes are fetched from its ``source`` one tensor at a time when the file is written.

Size: a flatbuffer cannot pass 2 GiB. Past 1.8 GiB of tensors, ONNX Runtime's generator writes their data to
``<checkpoint>.data`` beside the checkpoint (``ExternalData``), and so does this writer when told to.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ort_cffi._backends.engine.checkpoint_codec.flatbuffer import (
    BackToFrontLayout,
    BulkSource,
    FlatbufferTooLargeError,
)

FILE_IDENTIFIER = b"ODTC"
CHECKPOINT_VERSION = 2  # kCheckpointVersion of ONNX Runtime 1.19; it loads no other
PathLike = Union[str, "os.PathLike[str]"]
PropertyValue = Union[int, float, str]

# Field indices of ort_training_checkpoint.fbs and ort.fbs (their order in the schema's tables).
TENSOR_NAME, TENSOR_DOC_STRING, TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_RAW_DATA = 0, 1, 2, 3, 4
TENSOR_STRING_DATA, TENSOR_EXTERNAL_DATA_OFFSET = 5, 6
MODULE_REQUIRES_GRAD, MODULE_FROZEN, MODULE_IS_NOMINAL, MODULE_HAS_EXTERNAL_DATA = 0, 1, 2, 3
STATE_PARAM_NAME, STATE_MOMENTUMS = 0, 1
GROUP_NAME, GROUP_STEP, GROUP_LEARNING_RATE, GROUP_STATES = 0, 1, 2, 3
PROPERTY_NAME, PROPERTY_VALUE = 0, 1
BAG_INTS, BAG_FLOATS, BAG_STRINGS = 0, 1, 2
CHECKPOINT_VERSION_FIELD, CHECKPOINT_MODULE_STATE, CHECKPOINT_OPTIMIZER_GROUPS, CHECKPOINT_PROPERTY_BAG = 0, 1, 2, 3

# Names and strings as the file holds them: UTF-8, with bytes that are not UTF-8 kept as the reader's surrogate
# escapes, so that whatever was read writes back the same.
UTF8 = ("utf-8", "surrogateescape")
STRING_TYPE = 8  # TensorDataType STRING: the values are in string_data, not raw_data
EIGHT_BYTE_TYPES = (7, 11, 13)  # INT64, DOUBLE, UINT64: aligned to 8 bytes in the external data file

# A flatbuffer cannot pass 2 GiB. Past this many bytes of serialized TensorProtos (rounded up to MiB), ONNX
# Runtime's generator writes the tensors' data to ``<checkpoint>.data``, each aligned to 8 bytes (64-bit types)
# or 4, and keeps its offset there in the Tensor table; tensors under GENERATOR_EXTERNAL_MINIMUM bytes stay
# inline. The runtime's save moves every parameter (a 12-byte one too) when the state it loaded had external
# data, and keeps the optimizer's moments inline (measured; see ``writer``).
EXTERNAL_DATA_THRESHOLD = 1800 * 1024 * 1024
GENERATOR_EXTERNAL_MINIMUM = 64
MIB = 1024 * 1024
FLOAT32_MAX = float(np.finfo(np.float32).max)


class CheckpointInputError(ValueError):
    """A tensor or property the checkpoint cannot hold, named with the reason."""


@dataclass(frozen=True)
class TensorRecord:
    """One tensor to write: its name, ONNX element type and dims as written, and ``length`` bytes of raw
    data that ``source`` yields when the file is written. A string tensor has ``strings`` (UTF-8 bytes)
    instead of raw data; ``doc_string`` is written when it is not None (the generator's TensorProtos)."""

    name: str
    data_type: int
    dims: Tuple[int, ...]
    length: int
    source: BulkSource
    doc_string: Optional[str] = None
    strings: Optional[Sequence[bytes]] = None


@dataclass(frozen=True)
class GroupRecord:
    """One optimizer group: its name, initial learning rate, step, and for each parameter its moments."""

    name: str
    learning_rate: float
    step: int
    states: Sequence[Tuple[str, Sequence[TensorRecord]]]


def no_data() -> Iterator[bytes]:
    return iter(())


def check_properties(properties: Mapping[str, PropertyValue]) -> List[Tuple[str, PropertyValue]]:
    """The properties sorted by name, as the runtime writes them (bytewise, which is code-point order), each
    checked to fit the checkpoint's int64, float32 or string value."""
    checked = []
    for name, value in properties.items():
        if not isinstance(name, str) or not name:
            raise CheckpointInputError(f"a property name must be a non-empty str, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CheckpointInputError(f"the property {name!r} must be an int, float or str, got {type(value).__name__}")
        if isinstance(value, int) and not -2**63 <= value < 2**63:
            raise CheckpointInputError(f"the property {name!r} ({value}) does not fit in a 64-bit integer")
        if isinstance(value, float) and math.isfinite(value) and abs(value) > FLOAT32_MAX:
            raise CheckpointInputError(f"the property {name!r} ({value}) does not fit in a 32-bit float, which the "
                                       "checkpoint keeps")
        checked.append((name, value))
    return sorted(checked, key=lambda item: item[0])


class ExternalData:
    """The ``<checkpoint>.data`` file: each tensor's bytes at an aligned offset, in the order the tensors are
    laid out. Tensors under ``minimum`` bytes stay inline."""

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum
        self.size = 0
        self._pieces: List[Tuple[int, int, BulkSource]] = []  # padding, length, source

    def add(self, data_type: int, length: int, source: BulkSource) -> int:
        alignment = 8 if data_type in EIGHT_BYTE_TYPES else 4
        padding = -self.size % alignment
        offset = self.size + padding
        self._pieces.append((padding, length, source))
        self.size = offset + length
        return offset

    def write_to(self, stream: BinaryIO) -> int:
        for padding, length, source in self._pieces:
            stream.write(bytes(padding))
            written = 0
            for chunk in source():
                written += len(chunk)
                stream.write(chunk)
                del chunk
            if written != length:
                raise ValueError(f"bulk data gave {written} bytes where {length} were laid out")
        return self.size


class CheckpointPlan(NamedTuple):
    """A laid-out checkpoint: the flatbuffer, and the external data file when the data goes beside it."""

    layout: BackToFrontLayout
    external: Optional[ExternalData]

    def to_bytes(self) -> bytes:
        """The checkpoint as bytes; the whole checkpoint is then in memory once. A checkpoint whose data goes
        to an external file has no bytes form: the runtime reads external data only beside a checkpoint file."""
        if self.external is not None:
            raise CheckpointInputError("the checkpoint's data goes to an external data file beside the checkpoint "
                                       "(past 1.8 GiB): write it to a file")
        return self.layout.to_bytes()


def plan_checkpoint(trainable: Sequence[TensorRecord], frozen: Sequence[TensorRecord], *, nominal: bool = False,
                    groups: Optional[Sequence[GroupRecord]] = None,
                    properties: Optional[Sequence[Tuple[str, PropertyValue]]] = None,
                    external: Optional[ExternalData] = None,
                    overflow: Optional[ExternalData] = None) -> CheckpointPlan:
    """Lay out a checkpoint of these tensors, in the order given. ``groups`` None and ``properties`` None: the
    generator's layout; either given (even empty): the runtime's save (see the module's notes).
    ``external``: the data file that takes the tensors' data (has_external_data). ``overflow``: the data file
    to use instead when the data kept inline would take the flatbuffer past 2 GiB; without one that raises
    ``CheckpointInputError``."""
    try:
        return CheckpointPlan(_layout(trainable, frozen, nominal, groups, properties, external), external)
    except FlatbufferTooLargeError as exc:
        if external is None and overflow is not None:
            return plan_checkpoint(trainable, frozen, nominal=nominal, groups=groups, properties=properties,
                                   external=overflow)
        raise CheckpointInputError(f"{exc}: the tensors' data must go to an external file (a lower "
                                   "external_data_threshold)") from None


def write_plan(plan: CheckpointPlan, path: PathLike, *, in_place: bool = False) -> int:
    """Write the checkpoint to ``path`` (and its data to ``<path>.data`` when external) and return the
    checkpoint's size in bytes. Each file is written beside its target, flushed to disk, and renamed over it
    only once every file is complete, so that a failed write or a crash leaves what was there before (the
    data file first: between the two renames an older checkpoint beside a new data file is possible).
    ``in_place``: written straight to ``path``, as ONNX Runtime's ``SaveCheckpoint`` writes, for a caller that
    makes the write crash-safe itself (the facade's one path, ``atomic_write``, hands a temporary file)."""
    target = Path(path)
    outputs = [(target, plan.layout.write_to)]
    if plan.external is not None:
        outputs.insert(0, (target.with_name(target.name + ".data"), plan.external.write_to))
    if in_place:
        size = 0
        for output, write in outputs:
            with open(output, "wb") as stream:
                size = write(stream)
        return size
    partials = [(output.with_name(output.name + ".partial"), output, write) for output, write in outputs]
    size = 0
    try:
        for partial, _, write in partials:
            with open(partial, "wb") as stream:
                size = write(stream)
                stream.flush()
                os.fsync(stream.fileno())
        for partial, output, _ in partials:
            os.replace(partial, output)
    finally:
        for partial, _, _ in partials:
            if partial.exists():
                partial.unlink()
    folder = os.open(target.parent, os.O_RDONLY)  # the renames themselves reach the disk
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return size


# --- the layout, in ONNX Runtime's order of creation ---------------------------------------------------------

def _layout(trainable: Sequence[TensorRecord], frozen: Sequence[TensorRecord], nominal: bool,
            groups: Optional[Sequence[GroupRecord]], properties: Optional[Sequence[Tuple[str, PropertyValue]]],
            external: Optional[ExternalData]) -> BackToFrontLayout:
    layout = BackToFrontLayout()
    saved_state = groups is not None or properties is not None
    # Each tensor (name, doc string, dims, data, then its table); the two tensor vectors; the module state.
    # The runtime's save leaves out the module state of no parameters.
    module_state = 0
    if not saved_state or trainable or frozen:
        tables = [[_add_tensor(layout, tensor, external) for tensor in tensors] for tensors in (trainable, frozen)]
        vectors = [layout.offset_vector(offsets) for offsets in tables]
        layout.start_table()
        layout.add_offset(MODULE_REQUIRES_GRAD, vectors[0])
        layout.add_offset(MODULE_FROZEN, vectors[1])
        layout.add_scalar(MODULE_IS_NOMINAL, "?", nominal, False)
        layout.add_scalar(MODULE_HAS_EXTERNAL_DATA, "?", external is not None, False)
        module_state = layout.end_table()
    # Then each optimizer group, the property bag (when there are properties), the group vector (the runtime
    # writes one, even empty), and the Checkpoint table last.
    group_offsets = [_add_group(layout, group) for group in groups or ()]
    property_bag = _add_property_bag(layout, properties) if properties else 0
    group_vector = layout.offset_vector(group_offsets) if saved_state else 0

    layout.start_table()
    layout.add_scalar(CHECKPOINT_VERSION_FIELD, "i", CHECKPOINT_VERSION)
    layout.add_offset(CHECKPOINT_MODULE_STATE, module_state)
    layout.add_offset(CHECKPOINT_OPTIMIZER_GROUPS, group_vector)
    layout.add_offset(CHECKPOINT_PROPERTY_BAG, property_bag)
    layout.finish(layout.end_table(), FILE_IDENTIFIER)
    return layout


def _add_tensor(layout: BackToFrontLayout, tensor: TensorRecord, external: Optional[ExternalData]) -> int:
    """SaveInitializerOrtFormat / SaveOrtTensorOrtFormat: name, doc string (when set), dims, data (raw bytes,
    strings, or an offset in the external file); then the Tensor table."""
    name = layout.string(tensor.name.encode(*UTF8))
    doc_string = layout.string(tensor.doc_string.encode(*UTF8)) if tensor.doc_string is not None else 0
    dims = layout.scalar_vector(np.asarray(tensor.dims, dtype="<i8").tobytes(), 8)
    raw_data = string_data = 0
    offset = -1
    if tensor.strings is not None:
        string_data = layout.offset_vector([layout.string(bytes(text)) for text in tensor.strings])
    elif external is not None and tensor.length >= external.minimum:
        offset = external.add(tensor.data_type, tensor.length, tensor.source)
    else:
        raw_data = layout.bulk_byte_vector(tensor.length, tensor.source)
    layout.start_table()
    layout.add_offset(TENSOR_NAME, name)
    layout.add_offset(TENSOR_DOC_STRING, doc_string)
    layout.add_offset(TENSOR_DIMS, dims)
    layout.add_scalar(TENSOR_DATA_TYPE, "i", tensor.data_type)
    layout.add_offset(TENSOR_STRING_DATA, string_data)
    layout.add_offset(TENSOR_RAW_DATA, raw_data)
    layout.add_scalar(TENSOR_EXTERNAL_DATA_OFFSET, "q", offset, -1)
    return layout.end_table()


def _add_group(layout: BackToFrontLayout, group: GroupRecord) -> int:
    """FromOptimizerState: for each parameter, its moment tensors, its name, the moment vector and its
    ParameterOptimizerState; then the group's name, the state vector and the OptimizerGroup table. The moments
    stay inline also when the parameters' data is external (measured on the runtime's save)."""
    states = []
    for parameter, moments in group.states:
        tensors = [_add_tensor(layout, moment, None) for moment in moments]
        name = layout.string(parameter.encode(*UTF8))
        vector = layout.offset_vector(tensors)
        layout.start_table()
        layout.add_offset(STATE_PARAM_NAME, name)
        layout.add_offset(STATE_MOMENTUMS, vector)
        states.append(layout.end_table())
    name = layout.string(group.name.encode(*UTF8))
    vector = layout.offset_vector(states)
    layout.start_table()
    layout.add_offset(GROUP_NAME, name)
    layout.add_scalar(GROUP_LEARNING_RATE, "f", group.learning_rate)
    layout.add_scalar(GROUP_STEP, "q", group.step)
    layout.add_offset(GROUP_STATES, vector)
    return layout.end_table()


def _add_property_bag(layout: BackToFrontLayout, bag: Sequence[Tuple[str, PropertyValue]]) -> int:
    """FromPropertyBag: for each property by name, its name (and string value) then its table; then the
    three vectors (empty ones too) and the PropertyBag table."""
    kinds: Dict[str, List[int]] = {"int": [], "float": [], "str": []}
    for name, value in bag:
        name_offset = layout.string(name.encode(*UTF8))
        value_offset = layout.string(value.encode(*UTF8)) if isinstance(value, str) else 0
        layout.start_table()
        layout.add_offset(PROPERTY_NAME, name_offset)
        if isinstance(value, str):
            layout.add_offset(PROPERTY_VALUE, value_offset)
        else:
            layout.add_scalar(PROPERTY_VALUE, "q" if isinstance(value, int) else "f", value)
        kinds["str" if isinstance(value, str) else "int" if isinstance(value, int) else "float"].append(
            layout.end_table())
    vectors = [layout.offset_vector(kinds[kind]) for kind in ("int", "float", "str")]
    layout.start_table()
    for field, vector in zip((BAG_INTS, BAG_FLOATS, BAG_STRINGS), vectors):
        layout.add_offset(field, vector)
    return layout.end_table()
