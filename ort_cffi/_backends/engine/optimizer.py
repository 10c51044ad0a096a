"""The optimizer step and the learning-rate schedule, computed as ONNX Runtime 1.19.2's CPU kernels compute them,
over the flat buffers of ``state``: one vectorised pass per operation for all parameters of a type.

The arithmetic follows the kernels operation by operation in float32 (AdamWOptimizer's two modes,
SGDOptimizerV2, InplaceClipGradNorm; docs/internals/runtime.md records the order), so that a step on the engine
agrees with one on the training build to rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

F32 = np.float32


@dataclass
class OptimizerSpec:
    """The optimizer model's one operator and its attributes, which the engine computes itself."""

    kind: str  # "AdamW" or "SGD"
    alpha: float = 0.9
    beta: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0
    adam_mode: int = 0
    correct_bias: int = 1
    max_norm: Optional[float] = None  # InplaceClipGradNorm before the update


def clip_by_total_norm(gradients: Dict[np.dtype, np.ndarray], max_norm: float) -> None:
    """InplaceClipGradNorm: scale every gradient by max_norm / (total norm + 1e-6) when that is below 1."""
    total = F32(0)
    for buffer in gradients.values():
        if buffer.dtype == np.float32 and buffer.size:
            total = F32(total + F32(np.dot(buffer, buffer)))
    norm = F32(np.sqrt(total))
    coefficient = F32(F32(max_norm) / F32(norm + F32(1e-6)))
    if coefficient < 1:
        for buffer in gradients.values():
            if buffer.dtype == np.float32:
                np.multiply(buffer, coefficient, out=buffer)


CHUNK = 1 << 16  # elements per pass: a chunk of each of the four buffers and the two scratches stay in L2 cache


class Update:
    """One type's optimizer update, set up once per session over its flat buffers (parameters, gradients, and
    for AdamW the [2, size] buffer of both moments): the chunks' views and the constants are made here, so that a
    step is only its vectorised operations. On a small model a step is a few microseconds of numpy calls, which
    is what it costs (docs/guides/performance.md): AdamW takes 9 calls per chunk where the kernel's operation-by-operation form takes 12,
    because the two moments' ``x = factor * x + (1 - factor) * g``-shaped updates run as one call over both rows.
    The bits are the kernels' (tests/engine/test_optimizer.py holds their operation-by-operation form and
    compares)."""

    def __init__(self, spec: OptimizerSpec, p: np.ndarray, g: np.ndarray, pair: Optional[np.ndarray],
                 chunk: int = CHUNK) -> None:
        self.spec = spec
        self.alpha, self.beta = F32(spec.alpha), F32(spec.beta)
        self.epsilon, self.weight_decay = F32(spec.epsilon), F32(spec.weight_decay)
        self.factors = np.array([[self.alpha], [self.beta]], F32)
        self.complements = np.array([[F32(1) - self.alpha], [F32(1) - self.beta]], F32)
        size = max(1, min(chunk, p.size))
        self.scratch = np.empty((2, size), F32)
        self.chunks: List[Tuple[Any, ...]] = []
        for start in range(0, p.size, size):
            stop = min(p.size, start + size)
            n = stop - start
            moments = (pair[:, start:stop], pair[0, start:stop], pair[1, start:stop]) if pair is not None else (None,) * 3
            self.chunks.append((p[start:stop], g[start:stop], *moments, self.scratch[:, :n], self.scratch[0, :n],
                                self.scratch[1, :n]))

    def __call__(self, lr: float, step: int) -> None:
        if self.spec.kind == "AdamW":
            self._adamw(lr, step)
        else:
            negative_rate = F32(-F32(lr))
            for pc, gc, _, _, _, _, t, _ in self.chunks:
                np.multiply(gc, negative_rate, out=t)
                np.add(pc, t, out=pc)

    CORRECTIONS = 256  # steps whose bias corrections are computed at once

    def _corrections(self, step: int) -> int:
        """The row of ``step`` in the tables of bias corrections (``bc1``, ``bc2``, and ``sqrt(bc2) / bc1``),
        computed for ``CORRECTIONS`` steps at a time: the same float32 operations as the kernel's, elementwise (a
        float32 square root and quotient are correctly rounded whether one or many), where a step's dozen numpy
        scalar operations cost more than its vectorised update on a small model."""
        row = step - self._first_step
        if not 0 <= row < len(self._bc1):
            steps = range(step, step + self.CORRECTIONS)
            # std::pow(float, int64) is computed in double, then cast back to float
            powers = np.array([[pow(float(self.alpha), float(s)) for s in steps],
                               [pow(float(self.beta), float(s)) for s in steps]], np.float64).astype(F32)
            self._bc1, self._bc2 = F32(1) - powers[0], F32(1) - powers[1]
            self._ratio = np.sqrt(self._bc2) / self._bc1
            self._first_step, row = step, 0
        return row

    _first_step = 0
    _bc1: np.ndarray = np.empty(0, F32)
    _bc2: np.ndarray = np.empty(0, F32)
    _ratio: np.ndarray = np.empty(0, F32)
    _lr: Optional[float] = None
    _rate = F32(0)

    def _adamw(self, lr: float, step: int) -> None:
        spec, eps, wd = self.spec, self.epsilon, self.weight_decay
        if lr != self._lr:
            self._lr, self._rate = lr, F32(lr)
        rate = self._rate
        bc1 = bc2 = F32(1)
        lr_corrected = rate
        if spec.correct_bias == 1:
            row = self._corrections(step)
            bc1, bc2 = self._bc1[row], self._bc2[row]
            lr_corrected = F32(rate * self._ratio[row])
        mode0 = spec.adam_mode == 0
        decay = F32(rate * wd) if wd != 0 else F32(0)
        factors, complements = self.factors, self.complements
        multiply, add, subtract, divide, sqrt = np.multiply, np.add, np.subtract, np.divide, np.sqrt
        for pc, gc, both, mc, vc, pair, t, u in self.chunks:
            if mode0 and wd != 0:
                multiply(pc, rate, out=t)  # weight * lr * weight_decay, left to right
                multiply(t, wd, out=t)
                subtract(pc, t, out=pc)
            # m = alpha * m + (1 - alpha) * g and v = beta * v + ((1 - beta) * g) * g, the rows of one buffer
            multiply(both, factors, out=both)
            multiply(gc, complements, out=pair)
            multiply(u, gc, out=u)
            add(both, pair, out=both)
            if mode0:
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
            if not mode0 and wd != 0:
                multiply(pc, decay, out=t)
                subtract(pc, t, out=pc)


def linear_rate(initial: float, warmup: int, total: int, step: int) -> float:
    """ONNX Runtime's LinearLRScheduler in float32: a linear warm-up to the initial rate, then a linear decay
    to 0 at ``total`` optimizer steps."""
    if step < warmup:
        factor = F32(step) / F32(max(1, warmup))
    else:
        factor = max(F32(0), F32(total - step) / F32(max(1, total - warmup)))
    return float(F32(F32(initial) * F32(factor)))
