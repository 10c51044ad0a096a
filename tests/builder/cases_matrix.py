"""Finite-difference cases of the matrix family: Gemm's transposes and scalings, MatMul's ranks and
broadcasting, and Einsum equations (attention, bilinear forms, transposes, reductions, diagonals,
ellipses)."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

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


def einsum(name: str, equation: str, *shapes: Tuple[int, ...], data: Sequence[int] = ()) -> Case:
    """An Einsum case; the operands at the positions in ``data`` are fed with a symbolic batch."""
    operands = [(f"x{i}", f32(*shape)) for i, shape in enumerate(shapes)]
    made = case(name, "Einsum", operands, [n for i, (n, _) in enumerate(operands) if i not in data],
                equation=equation)
    made.symbolic_batch = bool(data)
    return made


CASES["Einsum"] = [
    einsum("einsum_attention_scores", "bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)),
    einsum("einsum_attention_values", "bhqk,bhkd->bhqd", (2, 2, 3, 5), (2, 2, 5, 4)),
    einsum("einsum_attention_symbolic", "bhqd,bhkd->bhqk", (3, 2, 3, 4), (3, 2, 5, 4), data=(0,)),
    einsum("einsum_bilinear", "bi,ij,bj->b", (3, 4), (4, 5), (3, 5)),
    einsum("einsum_transpose", "ij->ji", (3, 4)),
    einsum("einsum_row_sums", "ij->i", (3, 4)),
    einsum("einsum_summed_alone", "ij,k->i", (3, 4), (5,)),
    einsum("einsum_implicit", "ij,jk", (3, 4), (4, 5)),
    einsum("einsum_outer", "i,j->ij", (3,), (4,)),
    einsum("einsum_diagonal", "ii->i", (4, 4)),
    einsum("einsum_trace", "ii", (4, 4)),
    einsum("einsum_batched_diagonal", "bii,bi->bi", (2, 3, 3), (2, 3)),
    einsum("einsum_ellipsis", "...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
    einsum("einsum_ellipsis_broadcast", "...ij,...jk->...ik", (2, 1, 3, 4), (2, 3, 4, 5)),
    einsum("einsum_ellipsis_middle", "i...j,j->i...", (3, 2, 4), (4,)),
    einsum("einsum_ellipsis_implicit", "...ij,...jk", (2, 3, 4), (2, 4, 5)),
]


def fused(name: str, a: Tuple[int, ...], b: Tuple[int, ...], **attributes: object) -> Case:
    made = case(name, "FusedMatMul", [("a", f32(*a)), ("b", f32(*b))], ["a", "b"], domain="com.microsoft",
                **attributes)
    made.extra_opsets = {"com.microsoft": 1}
    return made


CASES["FusedMatMul"] = [
    fused("fused_matmul", (3, 4), (4, 5)),
    fused("fused_matmul_trans_a_alpha", (4, 3), (4, 5), transA=1, alpha=0.5),
    fused("fused_matmul_trans_b_batched", (2, 3, 4), (5, 4), transB=1),
    fused("fused_matmul_both_broadcast", (2, 1, 4, 3), (3, 5, 4), transA=1, transB=1, alpha=2.0),
    fused("fused_matmul_symbolic", (4, 3, 4), (5, 4), transB=1),
]
symbolic = CASES["FusedMatMul"][-1]
symbolic.data["a"] = symbolic.params.pop("a")
symbolic.symbolic_batch = True

# A diagonal over axes whose size is known at run time only: the identity matrix is made then (EyeLike).
gram = Case("einsum_diagonal_symbolic_sizes",
            [helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Transpose", ["x"], ["xt"]),
             helper.make_node("MatMul", ["xw", "xt"], ["gram"]),
             helper.make_node("Einsum", ["gram"], ["y"], equation="ii->i")],
            {"w": f32(4)}, {"x": f32(5, 4)}, outputs=["y"], symbolic_batch=True)
CASES["Einsum"].append(gram)
