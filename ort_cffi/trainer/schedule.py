"""The learning rate of each optimizer step, set before the step (``setLearningRate``): a warm-up, then linear or
cosine decay, or a constant rate. Computed from the global step alone, so that a resumed run continues the
schedule exactly where it stopped.

ONNX Runtime's own linear scheduler (``registerLinearLRScheduler``) starts its warm-up at rate 0, so the first step
of a run did not learn. Here the warm-up of ``warmup`` steps rises in equal parts to the peak, the first step at
``peak / warmup`` and the last at ``peak``; the decay then runs from the peak towards 0 at the end of the run."""
from __future__ import annotations

import math

SCHEDULES = ("linear", "cosine", "constant")


def learning_rate(schedule: str, peak: float, warmup: int, total: int, step: int) -> float:
    """The rate of the optimizer step that follows ``step`` steps taken (0 for the first), in a run of ``total``
    steps with ``warmup`` of them warming up."""
    if schedule == "constant":
        return peak
    if step < warmup:
        return peak * (step + 1) / warmup
    decay = max(total - warmup, 1)
    done = min(max(step - warmup, 0), decay)
    if schedule == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * done / decay))
    return peak * (decay - done) / decay


def describe(schedule: str, warmup: int) -> str:
    """The schedule as the header line says it."""
    if schedule == "constant":
        return "constant"
    return f"{schedule} schedule, warm-up {warmup} step{'s' if warmup != 1 else ''}"
