"""The optimizer step and the learning-rate schedule, computed as ONNX Runtime 1.19.2's CPU kernels compute them,
over the flat buffers of ``state``: one vectorised pass per operation for all parameters of a type.

The arithmetic follows the kernels operation by operation in float32 (AdamWOptimizer's two modes,
SGDOptimizerV2, InplaceClipGradNorm; docs/internals/runtime.md records the order), so that a step on the engine
agrees with one on the training build to rounding.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ort_cffi._backends.engine.models import OptimizerSpec

F32 = np.float32


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


def adamw(spec: OptimizerSpec, lr: float, step: int, p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray,
          scratch: Optional[np.ndarray] = None) -> None:
    """One AdamWOptimizer update in place; ``step`` is the kernel's step input (the stored count + 1)."""
    a, b, eps, wd, rate = F32(spec.alpha), F32(spec.beta), F32(spec.epsilon), F32(spec.weight_decay), F32(lr)
    bc1 = bc2 = F32(1)
    lr_corrected = rate
    if spec.correct_bias == 1:
        # std::pow(float, int64) is computed in double, then cast back to float.
        bc1 = F32(F32(1) - F32(pow(float(a), float(step))))
        bc2 = F32(F32(1) - F32(pow(float(b), float(step))))
        lr_corrected = F32(rate * F32(F32(np.sqrt(bc2)) / bc1))
    t = scratch if scratch is not None else np.empty_like(p)
    if spec.adam_mode == 0 and wd != 0:
        np.multiply(p, rate, out=t)  # weight * lr * weight_decay, left to right
        np.multiply(t, wd, out=t)
        np.subtract(p, t, out=p)
    # m = alpha * m + (1 - alpha) * g
    np.multiply(m, a, out=m)
    np.multiply(g, F32(F32(1) - a), out=t)
    np.add(m, t, out=m)
    # v = beta * v + (1 - beta) * g * g
    np.multiply(v, b, out=v)
    np.multiply(g, F32(F32(1) - b), out=t)
    np.multiply(t, g, out=t)
    np.add(v, t, out=v)
    if spec.adam_mode == 0:
        # p -= (lr * m) / (bc1 * (sqrt(v / bc2) + eps))
        np.divide(v, bc2, out=t)
        np.sqrt(t, out=t)
        np.add(t, eps, out=t)
        np.multiply(t, bc1, out=t)
        denominator = t
        numerator = np.multiply(m, rate)
        np.divide(numerator, denominator, out=numerator)
        np.subtract(p, numerator, out=p)
    else:
        # p -= (lr_corrected * m) / (sqrt(v) + eps); then p -= (lr * weight_decay) * p
        np.sqrt(v, out=t)
        np.add(t, eps, out=t)
        numerator = np.multiply(m, lr_corrected)
        np.divide(numerator, t, out=numerator)
        np.subtract(p, numerator, out=p)
        if wd != 0:
            np.multiply(p, F32(rate * wd), out=t)
            np.subtract(p, t, out=p)


def sgd(lr: float, p: np.ndarray, g: np.ndarray, scratch: Optional[np.ndarray] = None) -> None:
    """SGDOptimizerV2: p = p + (-lr) * g."""
    t = scratch if scratch is not None else np.empty_like(p)
    np.multiply(g, F32(-F32(lr)), out=t)
    np.add(p, t, out=p)


def linear_rate(initial: float, warmup: int, total: int, step: int) -> float:
    """ONNX Runtime's LinearLRScheduler in float32: a linear warm-up to the initial rate, then a linear decay
    to 0 at ``total`` optimizer steps."""
    if step < warmup:
        factor = F32(step) / F32(max(1, warmup))
    else:
        factor = max(F32(0), F32(total - step) / F32(max(1, total - warmup)))
    return float(F32(F32(initial) * F32(factor)))
