"""Matrix products: Gemm and MatMul, in the forms ONNX Runtime's builder emits, and Einsum."""
from __future__ import annotations

import string
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import MICROSOFT, gradient

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
            product = _batched(g, g.ms("FusedMatMul", dy, b, transB=1)[0], a, out)
            da = g.unbroadcast(product, a, product)
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
            product = _batched(g, g.ms("FusedMatMul", a, dy, transA=1)[0], b, out)
            db = g.unbroadcast(product, b, product)
    return [da, db]


def _batched(g: GradientContext, product: str, operand: str, out: str) -> str:
    """Record the shape of ``product``, a matrix operand's gradient before the batch axes it was broadcast
    along are summed back: ``out``'s batch axes with the operand's own last two. Returns ``product``."""
    out_dims, own = g.dims(out), g.dims(operand)
    if out_dims is not None and own is not None and len(own) >= 2:
        g.types[product] = (g.elem_type(operand), tuple(out_dims[:-2]) + tuple(own[-2:]))
    for probe in g.probes:
        if probe.get(out) is not None and probe.get(operand) is not None and len(probe[operand]) >= 2:
            probe[product] = probe[out][:-2] + probe[operand][-2:]
    return product


@gradient("FusedMatMul", domain=MICROSOFT)
def fused_matmul(g: GradientContext, node: NodeView) -> Grads:
    """Y = alpha op(A) op(B) (ONNX Runtime's MatMul with transposes and a scale, which its optimizer and
    exporters write): each gradient is one FusedMatMul of dY and the other operand, transposed to fit, then
    summed over the batch axes its operand was broadcast along."""
    a, b = node.inputs[:2]
    dy = node.dy()
    if node.attr("transBatchA", 0) or node.attr("transBatchB", 0):
        raise BuilderError(f"{node.describe()}: FusedMatMul with transBatchA or transBatchB is not supported")
    if (g.rank(a) or 0) < 2 or (g.rank(b) or 0) < 2:
        raise BuilderError(f"{node.describe()}: FusedMatMul's gradient needs both operands' ranks, of 2 or more")
    alpha = float(node.attr("alpha", 1.0))
    trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    da = db = None
    if node.wants(0):
        if trans_a:  # dA = alpha op(B) dY^T
            da = g.ms("FusedMatMul", b, dy, alpha=alpha, transA=trans_b, transB=1)[0]
        else:  # dA = alpha dY op(B)^T
            da = g.ms("FusedMatMul", dy, b, alpha=alpha, transB=1 - trans_b)[0]
        da = _sum_batch(g, da, a, node)
    if node.wants(1):
        if trans_b:  # dB = alpha dY^T op(A)
            db = g.ms("FusedMatMul", dy, a, alpha=alpha, transA=1, transB=trans_a)[0]
        else:  # dB = alpha op(A)^T dY
            db = g.ms("FusedMatMul", a, dy, alpha=alpha, transA=1 - trans_a)[0]
        db = _sum_batch(g, db, b, node)
    return [da, db]


def _sum_batch(g: GradientContext, grad: str, operand: str, node: NodeView) -> str:
    """``grad`` (an operand's gradient with the product's batch axes) summed over the batch axes the operand
    was broadcast along. The batch axes are those of the inputs broadcast together (shape inference knows
    no ``com.microsoft`` output): static where both inputs' batch sizes are, else read at run time."""
    a, b = (g.static_shape(name) for name in node.inputs[:2])
    own = g.dims(operand)
    if a is not None and b is not None and own is not None:
        batch = np.broadcast_shapes(a[:-2], b[:-2])
        g.types[grad] = (g.elem_type(operand), tuple(batch) + tuple(own[-2:]))
    return g.unbroadcast(grad, operand, grad)



class _Labels:
    """An Einsum equation with its ellipses spelled out as letters: one list of labels per operand and
    one for the output. Ellipsis axes of size 1 that broadcast against a larger size get a letter of
    their own, so that the gradients' equations need no broadcasting."""

    def __init__(self, g: GradientContext, node: NodeView):
        equation = str(node.attr("equation", "")).replace(" ", "")
        left, arrow, right = equation.partition("->")
        terms = left.split(",")
        if len(terms) != len(node.inputs):
            raise BuilderError(f"{node.describe()}: its equation {equation!r} names {len(terms)} operands, "
                               f"the node has {len(node.inputs)}")
        self.taken: Set[str] = {c for c in equation if c.isalpha()}
        ellipsis_ranks = []
        for term, operand in zip(terms, node.inputs):
            if "..." in term:
                rank = g.rank(operand)
                if rank is None:
                    raise BuilderError(f"{node.describe()}: the gradient of an Einsum with '...' needs the ranks "
                                       f"of its operands; that of {operand!r} is not known")
                ellipsis_ranks.append(rank - len(term.replace("...", "")))
        width = max(ellipsis_ranks, default=0)
        ellipsis = [self.fresh() for _ in range(width)]

        def spell(term: str, covered: int) -> List[str]:
            before, dots, after = term.partition("...")
            middle = ellipsis[width - covered:] if dots else []
            return list(before) + middle + list(after)

        self.operands = []
        for term, operand in zip(terms, node.inputs):
            covered = (g.rank(operand) or 0) - len(term.replace("...", "")) if "..." in term else 0
            self.operands.append(spell(term, covered))
        if arrow:
            self.output = spell(right, width)
        else:  # implicit: the ellipsis, then the letters used once, in alphabetical order
            letters = left.replace("...", "").replace(",", "")
            self.output = ellipsis + sorted(c for c in set(letters) if letters.count(c) == 1)
        self._separate_broadcast_axes(g, node, ellipsis)

    def fresh(self) -> str:
        for letter in string.ascii_letters:
            if letter not in self.taken:
                self.taken.add(letter)
                return letter
        raise BuilderError("an Einsum gradient needs more than 52 distinct axis letters")

    def _separate_broadcast_axes(self, g: GradientContext, node: NodeView, ellipsis: Sequence[str]) -> None:
        sizes: Dict[str, List[Any]] = {label: [] for label in ellipsis}
        dims = [g.dims(operand) for operand in node.inputs]
        for labels, operand_dims in zip(self.operands, dims):
            for position, label in enumerate(labels):
                if label in sizes:
                    sizes[label].append(None if operand_dims is None else operand_dims[position])
        for labels, operand_dims in zip(self.operands, dims):
            for position, label in enumerate(labels):
                if label in sizes and operand_dims is not None and operand_dims[position] == 1 \
                        and any(size != 1 for size in sizes[label]):
                    labels[position] = self.fresh()  # broadcast: summed out in the gradients


def _identity(g: GradientContext, operand: str, position: int) -> str:
    """The identity matrix as large as axis ``position`` of ``operand``."""
    dims = g.dims(operand)
    size = dims[position] if dims is not None else None
    elem_type = g.elem_type(operand)
    if isinstance(size, int):
        return g.const(np.eye(size), elem_type, hint="identity")
    length = g.op("Slice", g.op("Shape", operand), g.ints([position]), g.ints([position + 1]))
    zeros = g.op("ConstantOfShape", g.op("Concat", length, length, axis=0),
                 value=helper.make_tensor("value", elem_type, [1], [0]))
    return g.op("EyeLike", zeros)


@gradient("Einsum")
def einsum(g: GradientContext, node: NodeView) -> Grads:
    """Each operand's gradient is an Einsum of dY with the other operands. Axes only that operand has
    (summed out in the forward equation) come back by Unsqueeze and Expand; an axis letter it repeats
    (a diagonal) comes back through an identity matrix; ellipses are spelled out as letters."""
    labels = _Labels(g, node)
    dy = node.dy()
    grads: Grads = []
    for k, operand in enumerate(node.inputs):
        if not node.wants(k):
            grads.append(None)
            continue
        inputs: List[Tuple[str, List[str]]] = [(dy, labels.output)]
        inputs += [(other, labels.operands[j]) for j, other in enumerate(node.inputs) if j != k]
        target: List[str] = []
        for position, label in enumerate(labels.operands[k]):
            if label in target:  # a repeated letter: its own letter, tied to the first by an identity
                repeated = labels.fresh()
                inputs.append((_identity(g, operand, position), [label, repeated]))
                label = repeated
            target.append(label)
        available = {label for _, used in inputs for label in used}
        kept = [label for label in target if label in available]
        equation = ",".join("".join(used) for _, used in inputs) + "->" + "".join(kept)
        grad = g.op("Einsum", *[name for name, _ in inputs], equation=equation)
        missing = [position for position, label in enumerate(target) if label not in available]
        if missing:
            grad = g.op("Expand", g.unsqueeze(grad, missing), g.shape(operand))
        grads.append(g.same_type(grad, operand))
    return grads
