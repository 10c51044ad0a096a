"""Matrix products: Gemm and MatMul, in the forms ONNX Runtime's builder emits."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


@gradient("Gemm")
def gemm(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    scaled: Dict[str, Any] = {"beta": 0.0} if alpha == 1.0 else {"beta": 0.0, "alpha": alpha}
    da = db = dc = None
    # Y = alpha * op(A) op(B): each gradient is one Gemm of dY and the other operand, transposed to fit.
    if node.wants(0):
        if trans_a:
            da = g.op("Gemm", b, dy, transA=int(trans_b), transB=1, **scaled)
        else:
            da = g.op("Gemm", dy, b, transA=0, transB=int(not trans_b), **scaled)
    if node.wants(1):
        if trans_b:
            db = g.op("Gemm", dy, a, transA=1, transB=int(trans_a), **scaled)
        else:
            db = g.op("Gemm", a, dy, transA=int(not trans_a), transB=0, **scaled)
    if node.wants(2) and node.has_input(2):
        dc = g.unbroadcast(dy, node.inputs[2], node.outputs[0])
        if beta != 1.0:
            dc = g.op("Mul", dc, g.scalar(beta, node.outputs[0]))
    return [da, db, dc]


@gradient("MatMul")
def matmul(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    out = node.outputs[0]
    rank_a, rank_b = g.rank(a), g.rank(b)
    da = db = None
    if rank_a == 2 and rank_b == 2:
        if node.wants(0):
            da = g.op("Gemm", dy, b, transB=1, beta=0.0)
        if node.wants(1):
            db = g.op("Gemm", a, dy, transA=1, beta=0.0)
        return [da, db]
    if rank_a is None or rank_b is None or rank_a < 1 or rank_b < 1:
        raise BuilderError(f"{node.describe()}: MatMul's gradient needs the ranks of both operands, which shape "
                           "inference could not tell")
    if node.wants(0):
        if rank_b == 1:  # y[..., ] = a[..., k] b[k]: da = dy[..., None] * b
            da = g.op("Mul", g.unsqueeze(dy, [-1]), b)
        elif rank_a == 1:  # y[..., n] = a[k] b[..., k, n]: da = (b @ dy[..., None]) summed over the batch
            da = g.squeeze(g.op("MatMul", b, g.unsqueeze(dy, [-1])), [-1])
            if rank_b > 2:
                da = g.reduce_sum(da, list(range(rank_b - 2)), keepdims=0)
        else:
            da = _summed_back(g, g.ms("FusedMatMul", dy, b, transB=1)[0], a, out)
    if node.wants(1):
        if rank_b == 2:  # the usual weight: flatten the batch into rows, one Gemm
            k, n = g.dims(b) or (None, None)
            if isinstance(k, int) and isinstance(n, int):
                a2 = g.op("Reshape", a, g.ints([-1, k]))
                dy2 = g.op("Reshape", dy, g.ints([-1, n]))
            else:
                shape_b = g.op("Shape", b)
                a2 = g.op("Reshape", a, g.op("Concat", g.ints([-1]), g.op("Slice", shape_b, g.ints([0]), g.ints([1])), axis=0))
                dy2 = g.op("Reshape", dy, g.op("Concat", g.ints([-1]), g.op("Slice", shape_b, g.ints([1]), g.ints([2])), axis=0))
            db = g.op("Gemm", a2, dy2, transA=1, beta=0.0)
        elif rank_a == 1:  # db[..., k, n] = a[k] dy[..., n]
            db = g.op("Mul", g.unsqueeze(a, [-1]), g.unsqueeze(dy, [-2]))
        elif rank_b == 1:  # db[k] = sum over the batch of a[..., k] dy[...]
            db = g.reduce_sum(g.op("Mul", g.unsqueeze(dy, [-1]), a), list(range(rank_a - 1)), keepdims=0)
        else:
            db = _summed_back(g, g.ms("FusedMatMul", a, dy, transA=1)[0], b, out)
    return [da, db]


def _summed_back(g: GradientContext, batched: str, operand: str, out: str) -> str:
    """``batched``, a matrix operand's gradient before the batch axes are summed back (``out``'s batch axes
    with the operand's own last two, recorded as its type), summed back to ``operand``'s shape."""
    out_dims, own = g.dims(out), g.dims(operand)
    if out_dims is not None and own is not None:
        g.types[batched] = (g.elem_type(operand), tuple(out_dims[:-2]) + tuple(own[-2:]))
    return g.unbroadcast(batched, operand, batched)
