"""A checkpoint state on the engine: the parameters in one contiguous buffer per element type, the optimizer's
moments laid out the same way, the learning rate, the step, and the property bag.

One buffer per type (a view of it per parameter) lets an optimizer step, a gradient accumulation or a reset
touch every parameter with a handful of vectorised operations, whatever the number of tensors. Frozen
parameters keep arrays of their own: nothing updates them.

Every view starts on a 64-byte boundary, as ONNX Runtime's own allocator places tensors: the kernels read the
parameters and write the gradients in place there, and views packed end to end (a bias of 10 floats moving the
next weight off its cache line) made bert_tiny's, lstm_text's and sklearn_mlp's steps 5-15% slower
(docs/guides/performance.md). The gaps between views are zeros that nothing writes, so the optimizer's
passes over a whole buffer leave them zero.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import numpy as np

from ort_cffi._backends.engine.checkpoint_codec import Checkpoint, OptimizerGroup

MOMENTS = ("momentum0", "momentum1")
GROUP = "group0"
DEFAULT_LEARNING_RATE = float(np.float32(0.001))  # ONNX Runtime's GroupOptimizerState default
PropertyValue = Union[int, float, str]


@dataclass
class Parameter:
    name: str
    data: np.ndarray  # a view of the state's flat buffer (trainable) or an array of its own (frozen)
    requires_grad: bool
    offset: int = 0  # where a trainable parameter starts in its type's flat buffer

    @property
    def flat_key(self) -> np.dtype:
        return self.data.dtype


ALIGNMENT = 64  # bytes: where each parameter's view starts, and each flat buffer


def aligned_zeros(size: int, dtype: np.dtype) -> np.ndarray:
    """A zero-filled 1-D array of ``size`` elements whose data starts on an ``ALIGNMENT``-byte boundary (numpy
    promises 16)."""
    if dtype.hasobject:  # no bytes to align: numpy holds references
        return np.zeros(size, dtype)
    raw = np.zeros(size * dtype.itemsize + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + size * dtype.itemsize].view(dtype)


def _aligned(elements: int, dtype: np.dtype) -> int:
    """``elements`` rounded up to a whole number of ``ALIGNMENT`` bytes of ``dtype``."""
    step = max(1, ALIGNMENT // dtype.itemsize)
    return -(-elements // step) * step


class FlatLayout:
    """Where each trainable parameter lies in the flat buffer of its element type: each at an aligned offset."""

    def __init__(self, arrays: Dict[str, np.ndarray]) -> None:
        self.offsets: Dict[str, int] = {}
        self.sizes: Dict[np.dtype, int] = {}
        self.shapes: Dict[str, tuple] = {}
        self.dtypes: Dict[str, np.dtype] = {}
        for name, array in arrays.items():
            dtype = array.dtype
            self.offsets[name] = _aligned(self.sizes.get(dtype, 0), dtype)
            self.sizes[dtype] = self.offsets[name] + int(array.size)
            self.shapes[name] = tuple(array.shape)
            self.dtypes[name] = dtype
        # whole rows: the moments' [2, size] buffer starts its second row aligned too
        self.sizes = {dtype: _aligned(size, dtype) for dtype, size in self.sizes.items()}

    def allocate(self) -> Dict[np.dtype, np.ndarray]:
        return {dtype: aligned_zeros(size, dtype) for dtype, size in self.sizes.items()}

    def views(self, buffers: Dict[np.dtype, np.ndarray]) -> Dict[str, np.ndarray]:
        found = {}
        for name, offset in self.offsets.items():
            shape = self.shapes[name]
            size = int(np.prod(shape, dtype=np.int64)) if shape else 1
            found[name] = buffers[self.dtypes[name]][offset:offset + size].reshape(shape)
        return found


class EngineState:
    """What ``OrtCheckpointState`` holds on the engine."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.nominal = bool(checkpoint.nominal)
        # A state loaded with its data beside the checkpoint is saved that way again, as ONNX Runtime saves it
        self.external_data = bool(checkpoint.external_data)
        self._lay_out(checkpoint.trainable, checkpoint.frozen, copy=not self.nominal)
        self.properties: Dict[str, PropertyValue] = dict(checkpoint.properties)
        # The optimizer's state: absent until a session with an optimizer model makes it, or a checkpoint brings it.
        # As in ONNX Runtime 1.19.2, the file keeps the initial rate (what a scheduler starts from, 0.001 unless
        # set), and the current rate starts from it when a session is made.
        self.initial_lr = DEFAULT_LEARNING_RATE
        self.learning_rate = DEFAULT_LEARNING_RATE
        self.step = 0
        self.moments: Optional[Dict[str, Dict[np.dtype, np.ndarray]]] = None
        self.moment_pairs: Dict[np.dtype, np.ndarray] = {}
        group = checkpoint.optimizer_groups.get(GROUP) or next(iter(checkpoint.optimizer_groups.values()), None)
        if group is not None:
            self.initial_lr = self.learning_rate = float(np.float32(group.learning_rate))
            self.step = int(group.step)
            self.moments = self._allocate_moments()
            for moment in MOMENTS:
                moment_views = self.layout.views(self.moments[moment])
                for name, per_parameter in group.moments.items():
                    if name in moment_views and moment in per_parameter:
                        moment_views[name][...] = per_parameter[moment]
        self.live_sessions = 0  # parameters can be read and updated only while a session lives (as on 1.19.2)

    # counts the times the flat buffers were made anew: what holds views of them (an optimizer's set-up) compares
    generation = 0

    def _lay_out(self, trainable: Dict[str, np.ndarray], frozen: Dict[str, np.ndarray], copy: bool) -> None:
        self.generation += 1
        self.layout = FlatLayout(trainable)
        self.flat = self.layout.allocate()
        views = self.layout.views(self.flat)
        self.parameters = {}
        for name, array in trainable.items():
            if copy:
                views[name][...] = array
            self.parameters[name] = Parameter(name, views[name], True, self.layout.offsets[name])
        for name, array in frozen.items():
            own = aligned_zeros(int(array.size), array.dtype).reshape(array.shape)
            if copy:
                own[...] = array
            self.parameters[name] = Parameter(name, own, False)

    def adopt_shapes(self, shapes: Dict[str, tuple]) -> None:
        """Give a nominal state's parameters the shapes the training model declares (a nominal checkpoint
        keeps names and types only), zero-filled until the caller copies the values in."""
        if not self.nominal:
            return
        trainable = {p.name: np.zeros(shapes.get(p.name, p.data.shape), p.data.dtype)
                     for p in self.parameters.values() if p.requires_grad}
        frozen = {p.name: np.zeros(shapes.get(p.name, p.data.shape), p.data.dtype)
                  for p in self.parameters.values() if not p.requires_grad}
        self._lay_out(trainable, frozen, copy=False)
        if self.moments is not None:
            self.moments = self._allocate_moments()

    def require_values(self, doing: str) -> None:
        if self.nominal:
            raise ValueError(f"cannot {doing}: the checkpoint state is nominal (it holds the parameters' names and "
                             "types, not their values): copy them in with CopyBufferToParameters (trainable_only false). "
                             "Please load the model parameters first.")

    def trainable(self) -> List[Parameter]:
        return [p for p in self.parameters.values() if p.requires_grad]

    def ensure_moments(self) -> Dict[str, Dict[np.dtype, np.ndarray]]:
        if self.moments is None:
            self.moments = self._allocate_moments()
        return self.moments

    def _allocate_moments(self) -> Dict[str, Dict[np.dtype, np.ndarray]]:
        """Both moments of a type in one [2, size] buffer (``moment_pairs``), each moment a row of it (one
        allocation; the optimizer updates the rows)."""
        self.moment_pairs = {dtype: aligned_zeros(len(MOMENTS) * size, dtype).reshape(len(MOMENTS), size)
                             for dtype, size in self.layout.sizes.items()}
        self.generation += 1
        return {moment: {dtype: pair[row] for dtype, pair in self.moment_pairs.items()}
                for row, moment in enumerate(MOMENTS)}

    def checkpoint(self, include_optimizer: bool) -> Checkpoint:
        """The state as the codec writes it (views, not copies)."""
        groups: Dict[str, OptimizerGroup] = {}
        if include_optimizer and self.moments is not None:
            per_moment = {moment: self.layout.views(buffers) for moment, buffers in self.moments.items()}
            moments = {name: {moment: per_moment[moment][name] for moment in MOMENTS} for name in self.layout.offsets}
            groups[GROUP] = OptimizerGroup(float(self.initial_lr), int(self.step), moments)
        return Checkpoint(
            trainable={p.name: p.data for p in self.parameters.values() if p.requires_grad},
            frozen={p.name: p.data for p in self.parameters.values() if not p.requires_grad},
            optimizer_groups=groups,
            properties=dict(self.properties),
            nominal=self.nominal,
            external_data=self.external_data,
        )
