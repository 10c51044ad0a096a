"""What a checkpoint holds, as numpy arrays and Python values: the engine's view of ONNX Runtime's
``CheckpointState`` (module state, optimizer state, property bag)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Union

import numpy as np

PropertyValue = Union[int, float, str]


class CheckpointFormatError(ValueError):
    """The file or buffer is not a checkpoint ONNX Runtime 1.19 reads: empty, truncated, another kind of
    file (wrong identifier), another version, or damaged inside. The message names the path."""


@dataclass
class OptimizerGroup:
    """One optimizer group (ONNX Runtime writes one, ``group0``): its initial learning rate (float32 in the
    file), its step count, and each trainable parameter's moments by their names in the file
    (``momentum0``, ``momentum1`` for AdamW; ``momentum0`` for SGD)."""

    learning_rate: float
    step: int
    moments: Dict[str, Dict[str, np.ndarray]]


@dataclass
class Checkpoint:
    """A checkpoint's contents.

    ``trainable`` and ``frozen``: the parameters by name, in file order; read arrays are read-only views of
    the file's bytes. ``optimizer_groups``: empty when the file has no optimizer state. ``properties``: int
    (int64), float (float32 in the file) or str values. ``nominal``: a nominal checkpoint (shapes without
    data); its arrays are zeros broadcast to their shapes, which allocate nothing.
    ``element_types``: the ONNX element type of each parameter held in a carrier dtype (bfloat16, float8,
    4-bit; see ``elements``); a parameter not named here has its dtype's type.
    ``external_data``: the data lies (or is to be written) in ``<checkpoint>.data`` beside the checkpoint, as
    ONNX Runtime does past 1.8 GiB; a state it loaded that way it saves that way again.
    """

    trainable: Dict[str, np.ndarray]
    frozen: Dict[str, np.ndarray]
    optimizer_groups: Dict[str, OptimizerGroup]
    properties: Dict[str, PropertyValue]
    nominal: bool = False
    element_types: Dict[str, int] = field(default_factory=dict)
    external_data: bool = False
