"""Finite-difference cases of the elementwise, matrix and loss families (one or more per operator)."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case

rng = np.random.default_rng(42)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def away_from_zero(*shape: int) -> np.ndarray:
    """Values at least 0.1 from 0 (kinks of Relu, Abs; finite differences straddling one fail)."""
    value = f32(*shape)
    return (np.sign(value) * (0.1 + np.abs(value))).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "Add": [case("add", "Add", [("a", f32(3, 4)), ("b", f32(3, 4))], ["a", "b"]),
            case("add_broadcast", "Add", [("a", f32(2, 3, 4)), ("b", f32(3, 1))], ["a", "b"])],
    "Sub": [case("sub_broadcast", "Sub", [("a", f32(4)), ("b", f32(3, 4))], ["a", "b"])],
    "Mul": [case("mul_broadcast", "Mul", [("a", f32(2, 3, 4)), ("b", f32(1, 4))], ["a", "b"]),
            case("mul_same_input", "Mul", [("a", f32(3, 4)), ("a", f32(3, 4))], ["a"])],
    "Relu": [case("relu", "Relu", [("x", away_from_zero(3, 5))], ["x"])],
    "Identity": [case("identity", "Identity", [("x", f32(3, 2))], ["x"])],
    "Gemm": [case("gemm", "Gemm", [("a", f32(3, 4)), ("b", f32(5, 4)), ("c", f32(5))], ["a", "b", "c"], transB=1),
             case("gemm_trans_a", "Gemm", [("a", f32(4, 3)), ("b", f32(4, 5)), ("c", f32(3, 1))], ["a", "b", "c"],
                  transA=1, alpha=0.5, beta=2.0),
             case("gemm_both", "Gemm", [("a", f32(4, 3)), ("b", f32(5, 4))], ["a", "b"], transA=1, transB=1)],
    "MatMul": [case("matmul_2d", "MatMul", [("a", f32(3, 4)), ("b", f32(4, 5))], ["a", "b"]),
               case("matmul_batched_weight", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(4, 5))], ["a", "b"]),
               case("matmul_broadcast", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(1, 4, 5))], ["a", "b"]),
               case("matmul_vector_right", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(4))], ["a", "b"]),
               case("matmul_vector_left", "MatMul", [("a", f32(4)), ("b", f32(2, 4, 5))], ["a", "b"])],
    "ReduceSum": [case("reduce_sum_all", "ReduceSum", [("x", f32(2, 3, 4))], ["x"], keepdims=0),
                  case("reduce_sum_axes", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([-1, 0]))], ["x"],
                       keepdims=0),
                  case("reduce_sum_keep", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([1]))], ["x"])],
    "SoftmaxCrossEntropyLoss": [
        case("softmax_cross_entropy", "SoftmaxCrossEntropyLoss",
             [("scores", f32(5, 4)), ("labels", np.array([0, 3, 1, 2, 3], dtype=np.int64))], ["scores"], outputs=2,
             reduction="mean")],
}
for c in CASES["SoftmaxCrossEntropyLoss"]:
    c.outputs = ["y0"]  # the loss; the log-probabilities are read by the gradient, not checked
