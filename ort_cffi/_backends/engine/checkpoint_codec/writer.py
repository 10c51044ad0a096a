"""Writing a ``Checkpoint`` as ONNX Runtime 1.19's ``SaveCheckpoint`` writes the same state, byte for byte.

The runtime's save (``layout``'s notes): parameters sorted by name, trainable then frozen; the optimizer
groups sorted by name (an empty group vector without optimizer state), each parameter's moments sorted by
name; the property bag, sorted, when there are properties; no module state for a state without parameters.
A nominal state keeps each parameter's shape with zeros as data (the runtime's nominal parameters are
scalars: measured, 4 bytes each, which the runtime leaves unset and the codec writes as zeros). The
parameters' data goes to ``<checkpoint>.data``, every parameter's (the moments stay inline), when the state
came with external data (``Checkpoint.external_data``), as the runtime saves such a state (measured). The
runtime keeps larger states inline (measured: 1.9 GB written inline, byte for byte as this writer's); only
where the inline data would take the flatbuffer past FlatBuffers' 2 GiB limit does this writer move it out
(what the runtime does there was not measured).

Memory: one tensor's bytes at a time (a non-contiguous or big-endian array is copied while it is written).
"""
from __future__ import annotations

import math
import os
from typing import Dict, Iterator, List, Mapping, Union

import numpy as np

from ort_cffi._backends.engine.checkpoint_codec import elements
from ort_cffi._backends.engine.checkpoint_codec.flatbuffer import BulkSource
from ort_cffi._backends.engine.checkpoint_codec.layout import (
    CheckpointInputError,
    CheckpointPlan,
    ExternalData,
    GroupRecord,
    TensorRecord,
    check_properties,
    plan_checkpoint,
    write_plan,
)
from ort_cffi._backends.engine.checkpoint_codec.state import Checkpoint, OptimizerGroup

_ZERO_CHUNK = 16 * 1024 * 1024  # a nominal tensor's zeros are written in pieces of this size


def write_checkpoint(checkpoint: Checkpoint, path: Union[str, "os.PathLike[str]"], *, in_place: bool = False) -> None:
    """Write ``checkpoint`` to ``path`` (and ``<path>.data`` with external data) as ONNX Runtime's
    ``SaveCheckpoint`` writes the same state. Nothing is written when the state cannot be saved
    (``CheckpointInputError``, naming what); a failed write leaves the files that were there, unless
    ``in_place`` (see ``write_plan``), where the caller has made ``path`` a temporary file of its own."""
    write_plan(plan_state(checkpoint), path, in_place=in_place)


def checkpoint_bytes(checkpoint: Checkpoint) -> bytes:
    """The file ``write_checkpoint`` writes, as bytes (for ``loadCheckpointFromBuffer``)."""
    return plan_state(checkpoint).to_bytes()


def plan_state(checkpoint: Checkpoint) -> CheckpointPlan:
    if not isinstance(checkpoint, Checkpoint):
        raise TypeError(f"write_checkpoint takes a Checkpoint, not {type(checkpoint).__name__}")
    seen: Dict[str, str] = {}
    parameters: Dict[str, List[TensorRecord]] = {}
    for group, arrays in (("trainable", checkpoint.trainable), ("frozen", checkpoint.frozen)):
        records = []
        for name in sorted(_names(arrays, group)):
            if name in seen:
                raise CheckpointInputError(f"the parameter {name!r} is given twice ({seen[name]} and {group})")
            seen[name] = group
            records.append(_record(name, arrays[name], checkpoint.element_types.get(name), checkpoint.nominal))
        parameters[group] = records
    groups = [_group(name, checkpoint.optimizer_groups[name]) for name in sorted(_names(checkpoint.optimizer_groups,
                                                                                        "optimizer_groups"))]
    if not isinstance(checkpoint.properties, Mapping):
        raise CheckpointInputError(f"properties must be a mapping, not {type(checkpoint.properties).__name__}")
    properties = check_properties(checkpoint.properties)
    external = ExternalData(minimum=0) if checkpoint.external_data and not checkpoint.nominal else None
    return plan_checkpoint(parameters["trainable"], parameters["frozen"], nominal=checkpoint.nominal, groups=groups,
                           properties=properties, external=external, overflow=ExternalData(minimum=0))


def _names(mapping: object, what: str) -> List[str]:
    if not isinstance(mapping, Mapping):
        raise CheckpointInputError(f"{what} must be a mapping by name, not {type(mapping).__name__}")
    for name in mapping:
        if not isinstance(name, str) or not name:
            raise CheckpointInputError(f"{what}: a name must be a non-empty str, got {name!r}")
    return list(mapping)


def _group(name: str, group: OptimizerGroup) -> GroupRecord:
    if not isinstance(group, OptimizerGroup):
        raise CheckpointInputError(f"the optimizer group {name!r} must be an OptimizerGroup, not "
                                   f"{type(group).__name__}")
    step = group.step
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not -2**63 <= step < 2**63:
        raise CheckpointInputError(f"the step of the optimizer group {name!r} must be a 64-bit int, got {group.step!r}")
    rate = group.learning_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating, np.integer)):
        raise CheckpointInputError(f"the learning rate of the optimizer group {name!r} must be a number, got {rate!r}")
    states = []
    for parameter in sorted(_names(group.moments, f"the moments of {name!r}")):
        moments = group.moments[parameter]
        states.append((parameter, [_record(moment, moments[moment], None, False)
                                   for moment in sorted(_names(moments, f"the moments of {parameter!r}"))]))
    return GroupRecord(name, float(np.float32(rate)), int(group.step), states)


def _record(name: str, value: object, element_type: object, nominal: bool) -> TensorRecord:
    if not isinstance(value, np.ndarray):
        raise CheckpointInputError(f"{name!r} must be a numpy array, not {type(value).__name__}")
    dims = tuple(int(dim) for dim in value.shape)
    if element_type is None:
        data_type = elements.type_of(value.dtype)
        if data_type is None:
            raise CheckpointInputError(f"{name!r} has dtype {value.dtype}, which no checkpoint element type stores")
    else:
        data_type = int(element_type)  # type: ignore[call-overload]
        carrier = elements.CARRIERS.get(data_type)
        if carrier is None or value.dtype.newbyteorder("<") != carrier.newbyteorder("<"):
            raise CheckpointInputError(f"{name!r} is given as {elements.name_of(data_type)}, which is held as "
                                       f"{carrier if carrier is not None else 'its own dtype'}, not {value.dtype}")
    if data_type == elements.STRING:
        texts = [_utf8(name, text) for text in value.reshape(-1)]
        return TensorRecord(name, data_type, dims, 0, _no_data, strings=texts)
    length = elements.stored_size(data_type, math.prod(dims))
    if nominal:
        return TensorRecord(name, data_type, dims, length, _zeros(length))
    return TensorRecord(name, data_type, dims, length, _array_source(value, data_type))


def _utf8(name: str, text: object) -> bytes:
    if isinstance(text, bytes):
        return text
    if isinstance(text, str):
        return text.encode("utf-8", "surrogateescape")
    raise CheckpointInputError(f"the string tensor {name!r} holds a {type(text).__name__}, not str or bytes")


def _no_data() -> Iterator[bytes]:
    return iter(())


def _zeros(length: int) -> BulkSource:
    def chunks() -> Iterator[bytes]:
        left = length
        while left:
            piece = min(left, _ZERO_CHUNK)
            left -= piece
            yield bytes(piece)
    return chunks


def _array_source(value: np.ndarray, data_type: int) -> BulkSource:
    def chunks() -> Iterator[Union[bytes, memoryview]]:
        if data_type in elements.FOUR_BIT_TYPES:
            yield elements.pack_four_bit(value)
            return
        little = value.astype(value.dtype.newbyteorder("<")) if value.dtype.byteorder == ">" else value
        yield np.ascontiguousarray(little).reshape(-1).view(np.uint8).data
    return chunks

