"""``--lr auto``: a learning-rate range test, in the way of fastai's ``lr_find`` (Leslie Smith's "cyclical
learning rates" test), run before the training proper.

A session of its own, over the run's starting checkpoint, takes up to ``STEPS`` training steps on shuffled
batches of the training split, the rate growing geometrically from ``START`` to ``END``, and records each
step's loss, smoothed by an exponential moving average (bias-corrected, as fastai does). It stops once the
smoothed loss passes ``DIVERGED`` times its lowest, or is no longer finite. The rate suggested is the one at
the lowest smoothed loss divided by 10 (fastai's ``minimum/10``: at the minimum the loss already climbs
back within a few steps). The test's session is closed afterwards: its steps and AdamW's moments never
reach the run, which starts from the checkpoint as it was. It costs ``STEPS`` steps and a second session
(the parameters and the optimizer's state once more) while it runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ort_cffi import OrtEnvironment, SessionOptions
from ort_cffi._facade import denormals

AUTO = "auto"
STEPS = 100
START, END = 1e-7, 10.0
SMOOTHING = 0.98
DIVERGED = 4.0
EARLIEST = 5  # a minimum within the first steps says nothing about a good rate


@dataclass
class RangeTest:
    """What the range test found: the suggested rate (None when the loss never fell), and each step's
    (rate, loss, smoothed loss)."""

    lr: Optional[float]
    steps: List[Tuple[float, float, float]] = field(default_factory=list)
    lowest_at: Optional[float] = None

    def describe(self, fallback: float) -> str:
        """For the run's notes: the rate chosen, and from what."""
        if self.lr is None:
            return (f"learning rate {fallback:g}: --lr auto found no rate at which the loss fell over {len(self.steps)} "
                    "steps of the range test, so the default is used")
        return (f"learning rate {self.lr:g}, found by --lr auto: over {len(self.steps)} steps from {START:g} up, the "
                f"smoothed loss was lowest at {self.lowest_at:.3g}, and a tenth of that is taken")


def suggest(steps: List[Tuple[float, float, float]]) -> Tuple[Optional[float], Optional[float]]:
    """(suggested rate, rate at the lowest smoothed loss) from the test's steps; (None, None) when the lowest
    smoothed loss comes within the first ``EARLIEST`` steps (the loss never fell)."""
    if not steps:
        return None, None
    lowest = min(range(len(steps)), key=lambda i: steps[i][2])
    if lowest < EARLIEST:
        return None, None
    return float(f"{steps[lowest][0] / 10:.2g}"), steps[lowest][0]  # two digits: the test is no finer than that


def range_test(env: OrtEnvironment, files: Dict[str, Path], checkpoint: Path, train: Dict[str, np.ndarray],
               loss_name: str, batch_size: int, seed: int, threads: int = 0) -> RangeTest:
    """Run the range test on ``train`` (input name -> array, the first axis the samples) with a session of its
    own over ``checkpoint`` and the artifacts ``files`` (train, eval, optimizer); see the module's text."""
    count = len(next(iter(train.values())))
    rng = np.random.default_rng([seed, 7919])  # its own stream: the run's batches stay what they would be
    order = rng.permutation(count)
    growth = (END / START) ** (1 / (STEPS - 1))
    steps: List[Tuple[float, float, float]] = []
    with SessionOptions() as options:
        if threads:
            options.setIntraOpNumThreads(threads)
        denormals.apply(options)
        session = env.createTrainingSession(checkpoint, files["train"], files["eval"], files["optimizer"], options)
    with session:
        average, best = 0.0, math.inf
        position = 0
        for i in range(STEPS):
            if position + batch_size > count:  # a new pass over the shuffled samples
                order, position = rng.permutation(count), 0
            idx = order[position:position + min(batch_size, count)]
            position += len(idx)
            rate = START * growth ** i
            session.setLearningRate(rate)
            with session.trainStep({name: array[idx] for name, array in train.items()}, [loss_name]) as result:
                loss = float(result.get(0).getValue())
            if not math.isfinite(loss):
                break
            session.optimizerStep()
            session.lazyResetGrad()
            average = SMOOTHING * average + (1 - SMOOTHING) * loss
            smoothed = average / (1 - SMOOTHING ** (i + 1))
            steps.append((rate, loss, smoothed))
            best = min(best, smoothed)
            if best > 0 and smoothed > DIVERGED * best:  # a loss of the model's own may be negative: then no stop
                break
    lr, lowest_at = suggest(steps)
    return RangeTest(lr, steps, lowest_at)
