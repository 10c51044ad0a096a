"""Indexing and shape training operators: the gradients of Gather, GatherElements, GatherND and Slice (each a
scatter into zeros), ConcatTraining, SplitTraining, ReduceSumTraining and the contrib Trilu."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ort_cffi._backends.engine.lowering.registry import Emitter, LoweringError, attribute, lowers

_LAST = np.iinfo(np.int64).max


def _given(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _scatter_add(emit: Emitter, zeros: str, indices: str, updates: str, axis: int, output: Optional[str]) -> str:
    """ScatterElements adding ``updates`` into ``zeros`` (its ``reduction`` needs opset 16)."""
    emit.require_opset(16, "a scatter that adds (ScatterElements' reduction)")
    return emit.one("ScatterElements", [zeros, indices, updates], output, axis=axis, reduction="add")


def _product(emit: Emitter, dims: str) -> str:
    """The product of an int64 vector, as a 1-element vector (1 for an empty one)."""
    return emit.reduce("ReduceProd", dims, None, keepdims=True)


@lowers("GatherGrad")
def gather_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs: the data's shape, the indices, dY. Every slice dY[..., j, ...] is added at data position
    indices[j] along ``axis``: one ScatterND adds whole rows into zeros. Along axis 0 (an embedding) the rows
    are dY's as it is; along another, dY is seen as [before, count of indices, after] and transposed to put
    the indices first, and the sum is transposed back. (A ScatterElements with an index per element was
    slower: segnet's gradient graph, 19.2 against 18.7 ms a step.)"""
    shape, indices, dy = node.input[0], node.input[1], node.input[2]
    axis = int(attribute(node, "axis", 0))
    rank = emit.value(shape)
    data_rank = len(rank.reshape(-1)) if rank is not None else None
    if data_rank is None:
        dims = emit.shape(shape)
        data_rank = dims[0] if dims and isinstance(dims[0], int) else None
    if axis < 0:
        if data_rank is None:
            raise LoweringError(f"{emit.label}: GatherGrad's axis {axis} counts from the end of a rank not known")
        axis += data_rank
    if axis == 0:  # the embedding's case: whole rows added at the indices, one ScatterND
        emit.require_opset(16, "a ScatterND that adds")
        rows = emit.one("Reshape", [indices, emit.const(np.array([-1, 1], np.int64))])
        rest = emit.one("Slice", [shape, emit.const(np.array([1], np.int64)), emit.const(np.array([_LAST], np.int64))])
        updates = emit.one("Reshape", [dy, emit.one("Concat", [emit.const(np.array([-1], np.int64)), rest], axis=0)])
        emit.one("ScatterND", [emit.zeros(shape, dy), emit.one("Cast", [rows], to=onnx.TensorProto.INT64), updates],
                 node.output[0], reduction="add")
        return
    before = _product(emit, emit.one("Slice", [shape, emit.const(np.array([0], np.int64)),
                                               emit.const(np.array([axis], np.int64))]))
    size = emit.one("Slice", [shape, emit.const(np.array([axis], np.int64)), emit.const(np.array([axis + 1], np.int64))])
    after = _product(emit, emit.one("Slice", [shape, emit.const(np.array([axis + 1], np.int64)),
                                              emit.const(np.array([_LAST], np.int64))]))
    # the gathered axis first: [count, before, after], whole rows added by one ScatterND, then back
    emit.require_opset(16, "a ScatterND that adds")
    count = _product(emit, emit.shape_of(indices))
    updates = emit.one("Transpose", [emit.one("Reshape", [dy, emit.one("Concat", [before, count, after], axis=0)])],
                       perm=[1, 0, 2])
    rows = emit.one("Cast", [emit.one("Reshape", [indices, emit.const(np.array([-1, 1], np.int64))])],
                    to=onnx.TensorProto.INT64)
    zeros = emit.zeros(emit.one("Concat", [size, before, after], axis=0), dy)
    summed = emit.one("ScatterND", [zeros, rows, updates], reduction="add")
    emit.one("Reshape", [emit.one("Transpose", [summed], perm=[1, 0, 2]), shape], node.output[0])


@lowers("GatherElementsGrad")
def gather_elements_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs: dY, the data's shape, the indices: dY added into zeros at the indices along ``axis``."""
    dy, shape, indices = node.input[0], node.input[1], node.input[2]
    axis = int(attribute(node, "axis", 0))
    _scatter_add(emit, emit.zeros(shape, dy), indices, dy, axis, node.output[0])


@lowers("GatherNDGrad")
def gather_nd_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs: the data's shape, the indices, dY: ScatterND adding dY into zeros. With ``batch_dims`` b, the b
    leading axes are one batch axis, and each index gains its batch position in front of it."""
    shape, indices, dy = node.input[0], node.input[1], node.input[2]
    batch_dims = int(attribute(node, "batch_dims", 0))
    emit.require_opset(16, "a ScatterND that adds")
    if batch_dims == 0:
        emit.one("ScatterND", [emit.zeros(shape, dy), indices, dy], node.output[0], reduction="add")
        return

    def part(vector: str, start: object, end: object = None) -> str:
        first = start if isinstance(start, str) else emit.const(np.array([start], np.int64))
        last = emit.const(np.array([_LAST if end is None else end], np.int64))
        return emit.one("Slice", [vector, first, last])

    batch = _product(emit, part(shape, 0, batch_dims))
    depth = part(emit.one("Shape", [indices]), -1)
    minus_one = emit.const(np.array([-1], np.int64))
    flat_indices = emit.one("Reshape", [indices, emit.one("Concat", [batch, minus_one, depth], axis=0)])
    count = part(emit.one("Shape", [flat_indices]), 1, 2)
    rest = part(shape, emit.one("Add", [depth, emit.const(np.array([batch_dims], np.int64))]))
    updates = emit.one("Reshape", [dy, emit.one("Concat", [batch, count, rest], axis=0)])
    positions = emit.one("Range", [emit.const(np.array(0, np.int64)), emit.squeeze(batch, [0]),
                                   emit.const(np.array(1, np.int64))])
    one = emit.const(np.array([1], np.int64))
    in_front = emit.one("Expand", [emit.one("Reshape", [positions, emit.const(np.array([-1, 1, 1], np.int64))]),
                                   emit.one("Concat", [batch, count, one], axis=0)])
    full = emit.one("Concat", [in_front, emit.one("Cast", [flat_indices], to=onnx.TensorProto.INT64)], axis=-1)
    zeros = emit.zeros(emit.one("Concat", [batch, part(shape, batch_dims)], axis=0), dy)
    summed = emit.one("ScatterND", [zeros, full, updates], reduction="add")
    emit.one("Reshape", [summed, shape], node.output[0])


@lowers("SliceGrad")
def slice_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs: dY, the data's shape, starts, ends, axes, steps (Slice's). With steps of 1 (absent, or known
    before run time), dY is padded with zeros back to the data's shape: Pad by the clamped starts and by the
    sizes less the clamped ends. With other steps, the same Slice taken of the data's element numbers says
    where each element of dY came from, and dY is scattered there into zeros."""
    steps = _given(node, 5)
    known_steps = emit.value(steps) if steps is not None else None
    if emit.opset >= 11 and (steps is None or (known_steps is not None and bool(np.all(known_steps == 1)))):
        _slice_grad_by_pad(node, emit)
        return
    dy, shape = node.input[0], node.input[1]
    count = _product(emit, shape)
    numbers = emit.one("Range", [emit.const(np.array(0, np.int64)), emit.squeeze(count, [0]),
                                 emit.const(np.array(1, np.int64))])
    slice_inputs = [emit.one("Reshape", [numbers, shape])] + list(node.input[2:])
    picked = emit.one("Slice", slice_inputs)
    flat = emit.const(np.array([-1], np.int64))
    scattered = emit.one("ScatterElements", [emit.zeros(count, dy), emit.one("Reshape", [picked, flat]),
                                             emit.one("Reshape", [dy, flat])], axis=0)
    emit.one("Reshape", [scattered, shape], node.output[0])


def _slice_grad_by_pad(node: onnx.NodeProto, emit: Emitter) -> None:
    dy, shape = node.input[0], node.input[1]
    int64 = onnx.TensorProto.INT64
    starts = emit.one("Cast", [node.input[2]], to=int64)
    ends = emit.one("Cast", [node.input[3]], to=int64)
    rank = emit.one("Shape", [shape])  # [r]
    axes_given = _given(node, 4)
    if axes_given is None:
        axes = emit.one("Range", [emit.const(np.array(0, np.int64)), emit.squeeze(emit.one("Shape", [starts]), [0]),
                                  emit.const(np.array(1, np.int64))])
    else:
        axes = emit.one("Cast", [axes_given], to=int64)
    zero = emit.const(np.array(0, np.int64))
    axes = emit.one("Where", [emit.one("Less", [axes, zero]), emit.one("Add", [axes, rank]), axes])
    sizes = emit.one("Gather", [shape, axes], axis=0)

    def clamped(bound: str) -> str:  # Slice's rule for steps of 1: count from the end if negative, then clamp
        counted = emit.one("Where", [emit.one("Less", [bound, zero]), emit.one("Add", [bound, sizes]), bound])
        return emit.one("Min", [emit.one("Max", [counted, zero]), sizes])

    first, last = clamped(starts), clamped(ends)
    last = emit.one("Max", [last, first])  # an empty slice
    pads = emit.one("ConstantOfShape", [emit.one("Mul", [rank, emit.const(np.array([2], np.int64))])],
                    value=onnx.helper.make_tensor("zero", int64, [1], [0]))
    pads = emit.one("ScatterElements", [pads, axes, first], axis=0)
    pads = emit.one("ScatterElements", [pads, emit.one("Add", [axes, rank]), emit.one("Sub", [sizes, last])], axis=0)
    emit.one("Pad", [dy, pads], node.output[0])


@lowers("ConcatTraining")
def concat_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """Concat, and (second output) each input's length along ``axis`` as an int64 vector."""
    axis = int(attribute(node, "axis"))
    inputs = [i for i in node.input if i]
    if node.output[0]:
        emit.one("Concat", inputs, node.output[0], axis=axis)
    if len(node.output) > 1 and node.output[1]:
        where = emit.const(np.array([axis], np.int64))
        lengths = [emit.one("Gather", [emit.one("Shape", [i]), where], axis=0) for i in inputs]
        emit.one("Concat", lengths, node.output[1], axis=0)


@lowers("SplitTraining")
def split_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """Split by the sizes of the second input (an int64 vector), along ``axis``."""
    data, sizes = node.input[0], _given(node, 1)
    axis = int(attribute(node, "axis", 0))
    outputs = list(node.output)
    names = [o if o else emit.fresh("unused_part") for o in outputs]
    if sizes is None:
        if emit.opset >= 18:
            emit.node("Split", [data], names, axis=axis, num_outputs=len(names))
        else:
            emit.node("Split", [data], names, axis=axis)
    elif emit.opset >= 13:
        emit.node("Split", [data, sizes], names, axis=axis)
    else:
        known = emit.value(sizes)
        if known is None:
            raise LoweringError(f"{emit.label}: SplitTraining's sizes are known only at run time; Split takes them "
                                f"as an input from opset 13, and the model imports {emit.opset}", 13)
        emit.node("Split", [data], names, axis=axis, split=[int(v) for v in known.reshape(-1)])


@lowers("ReduceSumTraining")
def reduce_sum_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """ReduceSum with its axes as an input, as the standard has it from opset 13."""
    emit.require_opset(13, "ReduceSum with its axes as an input")
    emit.one("ReduceSum", [i for i in node.input[:2]], node.output[0],
             keepdims=int(attribute(node, "keepdims", 1)),
             noop_with_empty_axes=int(attribute(node, "noop_with_empty_axes", 0)))


@lowers("Trilu")
def trilu(node: onnx.NodeProto, emit: Emitter) -> None:
    """The contrib Trilu is the standard one (opset 14)."""
    emit.require_opset(14, "the standard Trilu")
    emit.one("Trilu", list(node.input), node.output[0], upper=int(attribute(node, "upper", 1)))
