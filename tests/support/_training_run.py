"""A few training steps of generated artifacts, with what the generator tests check of them: the eval loss
before training (the first training loss must equal it), the losses, and which parameter tensors moved
(a training graph can report losses and never update)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from ort_cffi import OrtEnvironment


@dataclass
class TrainingRun:
    eval_loss: float
    losses: List[float]
    moved: List[bool]  # per trainable tensor of the artifacts, in their order


def run_steps(session: Any, feeds: Dict[str, np.ndarray], steps: int) -> List[float]:
    """``steps`` training steps of an open training session on one batch (train step, optimizer step, lazy
    reset): the losses."""
    losses = []
    for _ in range(steps):
        with session.trainStep(feeds) as result:
            losses.append(float(result.get(0).getValue()))
        session.optimizerStep()
        session.lazyResetGrad()
    return losses


def train_artifacts(made: Any, feeds: Dict[str, np.ndarray], steps: int,
                    learning_rate: Optional[float] = None) -> TrainingRun:
    """``steps`` AdamW steps of ``made`` (a GeneratedArtifacts) on one batch."""
    with OrtEnvironment.getEnvironment().createTrainingSession(
            str(made.checkpoint), str(made.training_model), str(made.eval_model), str(made.optimizer_model)) as session:
        if learning_rate is not None:
            session.setLearningRate(learning_rate)
        with session.evalStep(feeds) as result:
            eval_loss = float(result.get(0).getValue())
        before = session.copyParametersToBuffer()
        losses = run_steps(session, feeds, steps)
        after = session.copyParametersToBuffer()
    bounds = np.cumsum([int(np.prod(p.shape)) for p in made.trainable])[:-1]
    moved = [not np.array_equal(a, b) for a, b in zip(np.split(before, bounds), np.split(after, bounds))]
    return TrainingRun(eval_loss, losses, moved)
