"""The engine's flat parameter buffers: every view starts on a 64-byte boundary (as ONNX Runtime's allocator
places tensors), the values land where they belong, and the gaps between views stay zero through the
optimizer's whole-buffer passes."""
from __future__ import annotations

import numpy as np

from ort_cffi._backends.engine import optimizer
from ort_cffi._backends.engine.checkpoint_codec import Checkpoint, OptimizerGroup
from ort_cffi._backends.engine.state import ALIGNMENT, EngineState

SHAPES = {"bias": (10,), "weight": (3, 7), "scalar": (), "vector": (17,), "half": (5,)}


def _checkpoint(with_moments: bool = False) -> Checkpoint:
    rng = np.random.default_rng(0)
    trainable = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in SHAPES.items() if name != "half"}
    trainable["half"] = rng.standard_normal(SHAPES["half"]).astype(np.float16)
    frozen = {"table": rng.standard_normal((3, 3)).astype(np.float32), "index": np.arange(7, dtype=np.int64)}
    groups = {}
    if with_moments:
        moments = {name: {"momentum0": np.full(value.shape, 0.5, value.dtype),
                          "momentum1": np.full(value.shape, 0.25, value.dtype)} for name, value in trainable.items()}
        groups["group0"] = OptimizerGroup(0.01, 3, moments)
    return Checkpoint(trainable, frozen, groups, {})


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def test_every_parameter_view_and_array_starts_aligned() -> None:
    source = _checkpoint(with_moments=True)
    state = EngineState(source)
    for name, parameter in state.parameters.items():
        assert _address(parameter.data) % ALIGNMENT == 0, name
        expected = source.trainable.get(name, source.frozen.get(name))
        np.testing.assert_array_equal(parameter.data, expected)
        assert parameter.data.shape == expected.shape and parameter.data.dtype == expected.dtype
    assert state.moments is not None
    for moment, per_type in state.moments.items():
        views = state.layout.views(per_type)
        for name, view in views.items():
            assert _address(view) % ALIGNMENT == 0, (moment, name)
            np.testing.assert_array_equal(view, source.optimizer_groups["group0"].moments[name][moment])
    # the checkpoint written back holds exactly the parameters, not the padding
    written = state.checkpoint(include_optimizer=True)
    for name, value in source.trainable.items():
        np.testing.assert_array_equal(written.trainable[name], value)


def test_the_gaps_stay_zero_through_optimizer_steps() -> None:
    state = EngineState(_checkpoint())
    flat = state.flat[np.dtype(np.float32)]
    used = np.zeros(flat.size, bool)
    for parameter in state.trainable():
        if parameter.data.dtype == np.float32:
            used[parameter.offset:parameter.offset + parameter.data.size] = True
    assert not used.all(), "the layout has gaps to check"
    gradients = state.layout.allocate()
    for parameter in state.trainable():  # gradients where the parameters are, nothing in the gaps
        if parameter.data.dtype == np.float32:
            views = state.layout.views(gradients)
            views[parameter.name][...] = 1.0
    moments = state.ensure_moments()
    before = flat.copy()
    update = optimizer.Update(optimizer.OptimizerSpec("AdamW", weight_decay=0.01, adam_mode=1), flat,
                              gradients[np.dtype(np.float32)], state.moment_pairs[np.dtype(np.float32)])
    for step in range(1, 4):
        update(1e-2, step)
    assert np.all(flat[~used] == 0)
    assert np.all(moments["momentum0"][np.dtype(np.float32)][~used] == 0)
    assert np.all(flat[used] != before[used])  # the parameters themselves moved
