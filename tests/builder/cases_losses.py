"""Finite-difference cases of the loss family: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss with
every reduction, class weights, ignore_index and extra (spatial) axes."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case

rng = np.random.default_rng(3)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "SoftmaxCrossEntropyLoss": [
        case("softmax_cross_entropy", "SoftmaxCrossEntropyLoss",
             [("scores", f32(5, 4)), ("labels", np.array([0, 3, 1, 2, 3], dtype=np.int64))], ["scores"], outputs=2,
             reduction="mean")],
}
for c in CASES["SoftmaxCrossEntropyLoss"]:
    c.outputs = ["y0"]  # the loss; the log-probabilities are read by the gradient, not checked
