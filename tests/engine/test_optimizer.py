"""The engine's optimizer updates set up once per session (``optimizer.Update``, its constants 0-d arrays)
compute the same bits as the operation-by-operation form of 1.19.2's kernels (``adamw``, ``sgd`` below, the
reference), for every AdamW mode, with and without weight decay and bias correction, over one chunk and over
several."""
from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from ort_cffi._backends.engine import optimizer
from ort_cffi._backends.engine.optimizer import CHUNK, F32, OptimizerSpec

# --- the reference: AdamWOptimizer and SGDOptimizerV2 as 1.19.2's CPU kernels compute them, one operation at a
# time in float32 (docs/internals/runtime.md records the order) ------------------------------------------------


class Scratch:
    """Two float32 buffers of ``CHUNK`` elements, made once per session: the update runs chunk by chunk over
    them, so a step allocates nothing and its temporaries take 512 KiB whatever the model's size (a whole-buffer
    temporary would add twice the parameters to the peak memory, and each pass would leave the cache)."""

    def __init__(self, size: int = CHUNK) -> None:
        self.first = np.empty(size, F32)
        self.second = np.empty(size, F32)


def adamw(spec: OptimizerSpec, lr: float, step: int, p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
          scratch: Optional[Scratch] = None) -> None:
    """One AdamWOptimizer update in place; ``step`` is the kernel's step input (the stored count + 1).

    Elementwise, so computing it chunk by chunk gives the same bits as over the whole buffers."""
    a, b, eps, wd, rate = F32(spec.alpha), F32(spec.beta), F32(spec.epsilon), F32(spec.weight_decay), F32(lr)
    bc1 = bc2 = F32(1)
    lr_corrected = rate
    if spec.correct_bias == 1:
        # std::pow(float, int64) is computed in double, then cast back to float.
        bc1 = F32(F32(1) - F32(pow(float(a), float(step))))
        bc2 = F32(F32(1) - F32(pow(float(b), float(step))))
        lr_corrected = F32(rate * F32(F32(np.sqrt(bc2)) / bc1))
    one_minus_a, one_minus_b, decay = F32(F32(1) - a), F32(F32(1) - b), F32(rate * wd)
    scratch = scratch or Scratch()
    size = scratch.first.size
    multiply, add, subtract, divide, sqrt = np.multiply, np.add, np.subtract, np.divide, np.sqrt
    for start in range(0, p.size, size):
        stop = min(p.size, start + size)
        pc, gc, mc, vc = p[start:stop], g[start:stop], m[start:stop], v[start:stop]
        t, u = scratch.first[:stop - start], scratch.second[:stop - start]
        if spec.adam_mode == 0 and wd != 0:
            multiply(pc, rate, out=t)  # weight * lr * weight_decay, left to right
            multiply(t, wd, out=t)
            subtract(pc, t, out=pc)
        # m = alpha * m + (1 - alpha) * g
        multiply(mc, a, out=mc)
        multiply(gc, one_minus_a, out=t)
        add(mc, t, out=mc)
        # v = beta * v + (1 - beta) * g * g
        multiply(vc, b, out=vc)
        multiply(gc, one_minus_b, out=t)
        multiply(t, gc, out=t)
        add(vc, t, out=vc)
        if spec.adam_mode == 0:
            # p -= (lr * m) / (bc1 * (sqrt(v / bc2) + eps))
            divide(vc, bc2, out=t)
            sqrt(t, out=t)
            add(t, eps, out=t)
            multiply(t, bc1, out=t)
            multiply(mc, rate, out=u)
        else:
            # p -= (lr_corrected * m) / (sqrt(v) + eps); then p -= (lr * weight_decay) * p
            sqrt(vc, out=t)
            add(t, eps, out=t)
            multiply(mc, lr_corrected, out=u)
        divide(u, t, out=u)
        subtract(pc, u, out=pc)
        if spec.adam_mode != 0 and wd != 0:
            multiply(pc, decay, out=t)
            subtract(pc, t, out=pc)


def sgd(lr: float, p: np.ndarray, g: np.ndarray, scratch: Optional[Scratch] = None) -> None:
    """SGDOptimizerV2: p = p + (-lr) * g."""
    scratch = scratch or Scratch()
    size, negative_rate = scratch.first.size, F32(-F32(lr))
    for start in range(0, p.size, size):
        stop = min(p.size, start + size)
        t = scratch.first[:stop - start]
        np.multiply(g[start:stop], negative_rate, out=t)
        np.add(p[start:stop], t, out=p[start:stop])


def _buffers(size: int, seed: int):
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(size).astype(np.float32)
    return params, params.copy()


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("correct_bias", [0, 1])
# small chunks update both moments as one [2, n] buffer, chunks past Update.PAIRED a moment at a time
@pytest.mark.parametrize("size,chunk", [(37, optimizer.CHUNK), (1000, 64), (0, optimizer.CHUNK),
                                        (2 * optimizer.Update.PAIRED + 3, optimizer.Update.PAIRED + 1)])
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
        adamw(spec, rate, step, expected_p, g, expected_m, expected_v, Scratch(chunk))
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
        adamw(spec, 0.002, step, expected_p, g, expected_m, expected_v)
        update(0.002, step)
    assert p.tobytes() == expected_p.tobytes()


def test_sgd_set_up_once_gives_the_kernels_bits() -> None:
    expected, p = _buffers(300, 3)
    g = np.random.default_rng(4).standard_normal(300).astype(np.float32)
    update = optimizer.Update(OptimizerSpec("SGD"), p, g, None, chunk=128)
    for step in range(1, 11):
        sgd(0.05, expected, g, Scratch(128))
        update(0.05, step)
    assert p.tobytes() == expected.tobytes()
