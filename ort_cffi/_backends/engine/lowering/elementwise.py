"""Elementwise training operators: DivGrad, Scale, and BroadcastGradientArgs (the axes a broadcast
operand's gradient is summed over, computed at run time from two shapes)."""
from __future__ import annotations

import numpy as np
import onnx

from ort_cffi._backends.engine.lowering.registry import Emitter, attribute, lowers


@lowers("DivGrad")
def div_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """The gradients of A / B (inputs dY, A, B), in the order of the operator's function body in ONNX Runtime:
    dA = dY / B and dB = dY * (-A / (B * B)), each summed back to its operand's shape where that operand was
    broadcast."""
    dy, a, b = node.input[0], node.input[1], node.input[2]
    if len(node.output) > 0 and node.output[0]:
        emit.sum_to(emit.one("Div", [dy, b]), a, node.output[0])
    if len(node.output) > 1 and node.output[1]:
        ratio = emit.one("Div", [emit.one("Neg", [a]), emit.one("Mul", [b, b])])
        emit.sum_to(emit.one("Mul", [dy, ratio]), b, node.output[1])


@lowers("Scale")
def scale(node: onnx.NodeProto, emit: Emitter) -> None:
    """Y = X * scale, or X * (1 / scale) with scale_down (inputs X, scale: a scalar of any numeric type)."""
    x, factor = node.input[0], node.input[1]
    value = emit.cast_like(factor, x)
    if int(attribute(node, "scale_down", 0)):
        value = emit.one("Div", [emit.const_like(1.0, x), value])
    emit.one("Mul", [x, value], node.output[0])


@lowers("BroadcastGradientArgs")
def broadcast_gradient_args(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs: the shapes of A and B (int64 vectors). Outputs: the axes of the broadcast result along which A's
    gradient is summed, and B's, each from the highest axis down, as the kernel lists them. On the axes both
    have, an operand is summed where its size is 1 and the other's is not; the leading axes only the longer
    shape has go to the shorter operand (to B when the ranks are equal, where there are none)."""
    a, b = node.input[0], node.input[1]
    ranks = [dims[0] for dims in (emit.shape(a), emit.shape(b)) if dims is not None and len(dims) == 1]
    if len(ranks) == 2 and isinstance(ranks[0], int) and isinstance(ranks[1], int):
        _broadcast_gradient_args_of_known_ranks(node, emit, ranks[0], ranks[1])
        return
    one = emit.const(np.array([1], np.int64))
    rank_a, rank_b = emit.one("Shape", [a]), emit.one("Shape", [b])
    rank = emit.one("Max", [rank_a, rank_b])
    shortest = emit.one("Min", [rank_a, rank_b])

    def padded(shape: str, own_rank: str) -> str:
        return emit.one("Concat", [emit.one("Expand", [one, emit.one("Sub", [rank, own_rank])]), shape], axis=0)

    a_dims, b_dims = padded(a, rank_a), padded(b, rank_b)
    index = emit.one("Range", [emit.const(np.array(0, np.int64)), emit.squeeze(rank, [0]),
                               emit.const(np.array(1, np.int64))])
    shared = emit.one("Not", [emit.one("Less", [index, emit.one("Sub", [rank, shortest])])])
    differ = emit.one("Not", [emit.one("Equal", [a_dims, b_dims])])
    a_is_one = emit.one("Equal", [a_dims, one])
    a_stretched = emit.one("And", [differ, a_is_one])
    b_stretched = emit.one("And", [differ, emit.one("And", [emit.one("Not", [a_is_one]),
                                                           emit.one("Equal", [b_dims, one])])])
    a_shorter = emit.one("LessOrEqual" if emit.opset >= 12 else "Less", [rank_a, rank_b] if emit.opset >= 12
                         else [rank_a, emit.one("Add", [rank_b, one])])
    lead = emit.one("Not", [shared])
    a_lead = emit.one("And", [lead, emit.one("Expand", [a_shorter, emit.one("Shape", [index])])])
    b_lead = emit.one("And", [lead, emit.one("Not", [emit.one("Expand", [a_shorter, emit.one("Shape", [index])])])])
    last = np.iinfo(np.int64).min
    for output, stretched, leading in ((0, a_stretched, a_lead), (1, b_stretched, b_lead)):
        if len(node.output) <= output or not node.output[output]:
            continue
        chosen = emit.one("Or", [emit.one("And", [shared, stretched]), leading])
        ascending = emit.one("Compress", [index, chosen], axis=0)
        emit.one("Slice", [ascending, emit.const(np.array([-1], np.int64)), emit.const(np.array([last], np.int64)),
                           emit.const(np.array([0], np.int64)), emit.const(np.array([-1], np.int64))],
                 node.output[output])


def _broadcast_gradient_args_of_known_ranks(node: onnx.NodeProto, emit: Emitter, rank_a: int, rank_b: int) -> None:
    """BroadcastGradientArgs where both ranks are known when the model is lowered (the shape vectors' lengths),
    as the kernel walks it: the shared axes from the highest down, A's where the sizes differ and A's is 1,
    B's where they differ and A's is not; then the leading axes, to A where it is not the longer. The shared
    sizes are taken in that descending order by one Gather per shape, so that a Compress of the constant axes
    gives each output in the kernel's order: 10 or 11 nodes for both outputs, where the form for unknown ranks
    takes 40 (bert_tiny's embeddings have two)."""
    a, b = node.input[0], node.input[1]
    shared, rank = min(rank_a, rank_b), max(rank_a, rank_b)
    leading = np.arange(rank - shared - 1, -1, -1, dtype=np.int64)
    outputs = [out if out else None for out in list(node.output[:2]) + [""] * (2 - len(node.output))]
    if shared == 0:
        for index, out in enumerate(outputs):
            if out:
                takes_leading = (index == 0) == (rank_a <= rank_b)
                emit.one("Identity", [emit.const(leading if takes_leading else np.zeros(0, np.int64))], out)
        return
    a_dims = emit.one("Gather", [a, emit.const(np.arange(rank_a - 1, rank_a - shared - 1, -1, dtype=np.int64))])
    b_dims = emit.one("Gather", [b, emit.const(np.arange(rank_b - 1, rank_b - shared - 1, -1, dtype=np.int64))])
    axes = emit.const(np.arange(rank - 1, rank - shared - 1, -1, dtype=np.int64))
    differ = emit.one("Not", [emit.one("Equal", [a_dims, b_dims])])
    a_is_one = emit.one("Equal", [a_dims, emit.const(np.array([1], np.int64))])
    for index, out in enumerate(outputs):
        if not out:
            continue
        chosen = emit.one("And", [differ, a_is_one if index == 0 else emit.one("Not", [a_is_one])])
        takes_leading = (index == 0) == (rank_a <= rank_b) and len(leading) > 0
        picked = emit.one("Compress", [axes, chosen], None if takes_leading else out, axis=0)
        if takes_leading:
            emit.one("Concat", [picked, emit.const(leading)], out, axis=0)


@lowers("ReduceAllL2")
def reduce_all_l2(node: onnx.NodeProto, emit: Emitter) -> None:
    """The L2 norm of all its inputs together: sqrt of the sum of every element's square, a float scalar."""
    parts = [emit.reduce("ReduceSumSquare", emit.one("Cast", [i], to=onnx.TensorProto.FLOAT), None, keepdims=False)
             for i in node.input if i]
    total = parts[0] if len(parts) == 1 else emit.one("Sum", parts)
    emit.one("Sqrt", [total], node.output[0])


@lowers("FakeQuantGrad")
def fake_quant_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY and FakeQuant's gradient mask: dY where the mask is set, else 0."""
    dy, mask = node.input[0], node.input[1]
    emit.one("Where", [mask, dy, emit.const_like(0.0, dy)], node.output[0])
