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


def _scalar(value: Any) -> np.ndarray:
    """A float32 0-d array: numpy's ufuncs take one as an operand in 0.55-0.6 µs where a numpy float32 scalar
    costs 0.75-0.9 (its conversion), which on a small model is most of an update's time; the arithmetic is the
    same float32 operation either way."""
    return np.array(value, F32)


class Update:
    """One type's optimizer update, set up once per session over its flat buffers (parameters, gradients, and
    for AdamW the [2, size] buffer of both moments): the chunks' views and the constants are made here, so that a
    step is only its vectorised operations, each the kernel's operation in float32 (tests/engine/test_optimizer.py
    holds the kernels' operation-by-operation form and compares the bits).

    On a small model a step costs its numpy calls' overhead, not their arithmetic (docs/guides/performance.md,
    tiny models): every constant and per-step scalar is a 0-d array written in place (``_scalar``), and no
    operand is broadcast across rows (a [2, 1] operand costs more than two calls). AdamW takes 10 calls per
    chunk up to ``PAIRED`` elements (both moments decayed and added to as one [2, n] buffer against full rows of
    alpha and beta), 12 past it: 4.6 µs on 387 parameters, where 9 calls with numpy scalars and [2, 1] factors
    took 7.0-7.7 (thread time, alternating)."""

    def __init__(self, spec: OptimizerSpec, p: np.ndarray, g: np.ndarray, pair: Optional[np.ndarray],
                 chunk: int = CHUNK) -> None:
        self.spec = spec
        alpha, beta = F32(spec.alpha), F32(spec.beta)
        self.alpha, self.beta = float(alpha), float(beta)  # for the bias corrections' powers
        self.weight_decay = F32(spec.weight_decay)
        self.mode0, self.decays = spec.adam_mode == 0, self.weight_decay != 0
        self.corrects, self.adamw = spec.correct_bias == 1, spec.kind == "AdamW"
        self.a, self.b = _scalar(alpha), _scalar(beta)
        self.one_minus_a, self.one_minus_b = _scalar(F32(1) - alpha), _scalar(F32(1) - beta)
        self.eps, self.wd = _scalar(F32(spec.epsilon)), _scalar(self.weight_decay)
        # per-step values, written in place: the rate (lr as float32), -rate for SGD, rate * weight_decay,
        # and the bias corrections (mode 0) or the corrected rate (mode 1)
        self.rate, self.negative_rate, self.decay = _scalar(0), _scalar(0), _scalar(0)
        self.bc1, self.bc2, self.lr_corrected = _scalar(1), _scalar(1), _scalar(0)
        size = max(1, min(chunk, p.size))
        scratch = np.empty((2, size), F32)
        # alpha and beta as full rows, where a chunk is small: one call decays both moments and one adds to both
        # (a [2, 1] operand, broadcast, costs more than two calls); on larger chunks reading the rows costs more
        # than the calls they save, and each moment is a call of its own
        factors = np.empty((2, size), F32) if pair is not None and size <= self.PAIRED else None
        if factors is not None:
            factors[0], factors[1] = alpha, beta
        self.chunks: List[Tuple[Any, ...]] = []
        for start in range(0, p.size, size):
            stop = min(p.size, start + size)
            n = stop - start
            moments = (pair[:, start:stop], pair[0, start:stop], pair[1, start:stop]) if pair is not None \
                else (None, None, None)
            self.chunks.append((p[start:stop], g[start:stop], *moments, scratch[:, :n], scratch[0, :n],
                                scratch[1, :n], factors[:, :n] if factors is not None else None))

    PAIRED = 1 << 14  # the largest chunk whose moments are updated as one [2, n] buffer

    def __call__(self, lr: float, step: int) -> None:
        if lr != self._lr:
            self._set_rate(lr)
        if not self.adamw:
            negative_rate = self.negative_rate
            multiply, add = np.multiply, np.add
            for pc, gc, _, _, _, _, t, _, _ in self.chunks:
                multiply(gc, negative_rate, out=t)
                add(pc, t, out=pc)
            return
        if self.corrects:
            row = step - self._first_step
            if not 0 <= row < len(self._bc1):
                row = self._corrections(step)
            if self.mode0:
                self.bc1[()] = self._bc1[row]
                self.bc2[()] = self._bc2[row]
            else:
                self.lr_corrected[()] = self._rate * self._ratio[row]  # float32 * float32: F32(rate * ratio)
        if self.mode0:
            self._adamw_mode0()
        else:
            self._adamw_mode1()

    _lr: Optional[float] = None
    _rate = F32(0)

    def _set_rate(self, lr: float) -> None:
        rate = F32(lr)
        self._lr, self._rate = lr, rate
        self.rate[()] = rate
        self.negative_rate[()] = -rate
        self.decay[()] = F32(rate * self.weight_decay)
        if not self.corrects:
            self.lr_corrected[()] = rate

    CORRECTIONS = 256  # steps whose bias corrections are computed at once

    def _corrections(self, step: int) -> int:
        """The row of ``step`` in the tables of bias corrections (``bc1``, ``bc2``, and ``sqrt(bc2) / bc1``),
        computed for ``CORRECTIONS`` steps at a time: the same float32 operations as the kernel's, elementwise (a
        float32 square root and quotient are correctly rounded whether one or many), where a step's dozen numpy
        scalar operations cost more than its vectorised update on a small model."""
        steps = range(step, step + self.CORRECTIONS)
        # std::pow(float, int64) is computed in double, then cast back to float
        powers = np.array([[pow(self.alpha, float(s)) for s in steps],
                           [pow(self.beta, float(s)) for s in steps]], np.float64).astype(F32)
        self._bc1, self._bc2 = F32(1) - powers[0], F32(1) - powers[1]
        self._ratio = np.sqrt(self._bc2) / self._bc1
        self._first_step = step
        return 0

    _first_step = 0
    _bc1: np.ndarray = np.empty(0, F32)
    _bc2: np.ndarray = np.empty(0, F32)
    _ratio: np.ndarray = np.empty(0, F32)

    def _update_moments(self, g: np.ndarray, moments: np.ndarray, m: np.ndarray, v: np.ndarray,
                        scaled: np.ndarray, t: np.ndarray, u: np.ndarray, factors: Optional[np.ndarray]) -> None:
        """m = alpha * m + (1 - alpha) * g and v = beta * v + ((1 - beta) * g) * g, both modes' first stage;
        ``scaled`` is the [2, n] scratch whose rows are ``t`` and ``u``, which the caller reuses after."""
        np.multiply(g, self.one_minus_a, out=t)
        np.multiply(g, self.one_minus_b, out=u)
        np.multiply(u, g, out=u)
        if factors is not None:  # both rows at once
            np.multiply(moments, factors, out=moments)
            np.add(moments, scaled, out=moments)
        else:
            np.multiply(m, self.a, out=m)
            np.add(m, t, out=m)
            np.multiply(v, self.b, out=v)
            np.add(v, u, out=v)

    def _adamw_mode0(self) -> None:
        """p -= lr * weight_decay * p first; then p -= (lr * m) / (bc1 * (sqrt(v / bc2) + eps))."""
        eps, rate, wd, bc1, bc2, decays = self.eps, self.rate, self.wd, self.bc1, self.bc2, self.decays
        multiply, add, subtract, divide, sqrt = np.multiply, np.add, np.subtract, np.divide, np.sqrt
        for pc, gc, moments, mc, vc, scaled, t, u, factors in self.chunks:
            if decays:
                multiply(pc, rate, out=t)  # weight * lr * weight_decay, left to right
                multiply(t, wd, out=t)
                subtract(pc, t, out=pc)
            self._update_moments(gc, moments, mc, vc, scaled, t, u, factors)
            divide(vc, bc2, out=t)
            sqrt(t, out=t)
            add(t, eps, out=t)
            multiply(t, bc1, out=t)
            multiply(mc, rate, out=u)
            divide(u, t, out=u)
            subtract(pc, u, out=pc)

    def _adamw_mode1(self) -> None:
        """p -= (lr_corrected * m) / (sqrt(v) + eps); then p -= (lr * weight_decay) * p."""
        eps, lr_corrected, decay, decays = self.eps, self.lr_corrected, self.decay, self.decays
        multiply, add, subtract, divide, sqrt = np.multiply, np.add, np.subtract, np.divide, np.sqrt
        for pc, gc, moments, mc, vc, scaled, t, u, factors in self.chunks:
            self._update_moments(gc, moments, mc, vc, scaled, t, u, factors)
            sqrt(vc, out=t)
            add(t, eps, out=t)
            multiply(mc, lr_corrected, out=u)
            divide(u, t, out=u)
            subtract(pc, u, out=pc)
            if decays:
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
