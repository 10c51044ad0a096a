"""The engine's optimizer updates set up once per session (``optimizer.Update``, the two moments in one buffer)
compute the same bits as the operation-by-operation form of 1.19.2's kernels (``optimizer.adamw``, ``sgd``),
for every AdamW mode, with and without weight decay and bias correction, over one chunk and over several."""
from __future__ import annotations

import numpy as np
import pytest

from ort_cffi._backends.engine import optimizer
from ort_cffi._backends.engine.optimizer import OptimizerSpec


def _buffers(size: int, seed: int):
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(size).astype(np.float32)
    return params, params.copy()


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("correct_bias", [0, 1])
@pytest.mark.parametrize("size,chunk", [(37, optimizer.CHUNK), (1000, 64), (0, optimizer.CHUNK)])
def test_adamw_set_up_once_gives_the_kernels_bits(mode: int, weight_decay: float, correct_bias: int, size: int,
                                                  chunk: int) -> None:
    spec = OptimizerSpec("AdamW", alpha=0.9, beta=0.999, epsilon=1e-6, weight_decay=weight_decay, adam_mode=mode,
                         correct_bias=correct_bias)
    expected_p, p = _buffers(size, 1)
    g = np.empty(size, np.float32)
    expected_m, expected_v = np.zeros(size, np.float32), np.zeros(size, np.float32)
    pair = np.zeros((2, size), np.float32)
    update = optimizer.Update(spec, p, g, pair, chunk=chunk)
    rng = np.random.default_rng(2)
    rate = 0.01
    for step in range(1, 101):
        g[...] = rng.standard_normal(size).astype(np.float32)
        optimizer.adamw(spec, rate, step, expected_p, g, expected_m, expected_v, optimizer.Scratch(chunk))
        update(rate, step)
        rate *= 0.97
    assert p.tobytes() == expected_p.tobytes()
    assert pair[0].tobytes() == expected_m.tobytes() and pair[1].tobytes() == expected_v.tobytes()
    if size:
        assert not np.array_equal(p, _buffers(size, 1)[0])  # it trained


@pytest.mark.parametrize("first", [250, 3000])
def test_adamw_across_its_table_of_bias_corrections_and_a_step_count_set_back(first: int) -> None:
    """Steps past a block of precomputed bias corrections, then from step 1 again (a state loaded anew)."""
    spec = OptimizerSpec("AdamW", epsilon=1e-6, adam_mode=1, weight_decay=0.01)
    expected_p, p = _buffers(50, 5)
    g = np.random.default_rng(6).standard_normal(50).astype(np.float32)
    expected_m, expected_v, pair = np.zeros(50, np.float32), np.zeros(50, np.float32), np.zeros((2, 50), np.float32)
    update = optimizer.Update(spec, p, g, pair)
    for step in list(range(first, first + 20)) + list(range(1, 5)):
        optimizer.adamw(spec, 0.002, step, expected_p, g, expected_m, expected_v)
        update(0.002, step)
    assert p.tobytes() == expected_p.tobytes()


def test_sgd_set_up_once_gives_the_kernels_bits() -> None:
    expected, p = _buffers(300, 3)
    g = np.random.default_rng(4).standard_normal(300).astype(np.float32)
    update = optimizer.Update(OptimizerSpec("SGD"), p, g, None, chunk=128)
    for step in range(1, 11):
        optimizer.sgd(0.05, expected, g, optimizer.Scratch(128))
        update(0.05, step)
    assert p.tobytes() == expected.tobytes()
