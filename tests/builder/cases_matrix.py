"""Finite-difference cases of the matrix family: Gemm's transposes and scalings, MatMul's ranks and
broadcasting, and Einsum equations (attention, bilinear forms, transposes, reductions, diagonals,
ellipses)."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case
from onnx import helper

rng = np.random.default_rng(5)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "Gemm": [case("gemm", "Gemm", [("a", f32(3, 4)), ("b", f32(5, 4)), ("c", f32(5))], ["a", "b", "c"], transB=1),
             case("gemm_trans_a", "Gemm", [("a", f32(4, 3)), ("b", f32(4, 5)), ("c", f32(3, 1))], ["a", "b", "c"],
                  transA=1, alpha=0.5, beta=2.0),
             case("gemm_both", "Gemm", [("a", f32(4, 3)), ("b", f32(5, 4))], ["a", "b"], transA=1, transB=1)],
    "MatMul": [case("matmul_2d", "MatMul", [("a", f32(3, 4)), ("b", f32(4, 5))], ["a", "b"]),
               case("matmul_batched_weight", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(4, 5))], ["a", "b"]),
               case("matmul_broadcast", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(1, 4, 5))], ["a", "b"]),
               case("matmul_vector_right", "MatMul", [("a", f32(2, 3, 4)), ("b", f32(4))], ["a", "b"]),
               case("matmul_vector_left", "MatMul", [("a", f32(4)), ("b", f32(2, 4, 5))], ["a", "b"]),
               Case("matmul_sizes_unknown", [helper.make_node("Reshape", ["a_flat", "a_shape"], ["a"]),
                                             helper.make_node("MatMul", ["a", "b"], ["y0"])],
                    {"a_flat": f32(24), "b": f32(2, 4, 5)}, {"a_shape": np.array([2, 3, 4], np.int64)})],
}
