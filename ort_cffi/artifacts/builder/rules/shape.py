"""Shape operators: the ones that move elements without changing them (reshapes, transposes, concatenation
and splitting, slicing, padding, tiling, broadcasting). Each gradient moves the output's gradient back to
where the elements came from, in ONNX Runtime's form where its builder has one.

Shapes are read from the forward graph at run time (``Shape`` nodes) wherever they are not static, so that
a symbolic batch size keeps working.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np
from onnx import helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


def constant_ints(g: GradientContext, node: NodeView, index: int) -> Optional[List[int]]:
    """Input ``index`` of ``node`` as a list of ints when it is known before run time."""
    if not node.has_input(index):
        return None
    value = g.constant_value(node.inputs[index])
    return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]


def zeros_like(g: GradientContext, value: str) -> str:
    """Zeros of ``value``'s shape and type: a constant when the shape is static, else ConstantOfShape."""
    static = g.static_shape(value)
    if static is not None:
        return g.same_type(g.const(np.zeros(static), g.elem_type(value), hint="zeros"), value)
    zero = helper.make_tensor("value", g.elem_type(value), [1], [0])
    return g.same_type(g.op("ConstantOfShape", g.op("Shape", value), value=zero), value)


def shape_back(g: GradientContext, node: NodeView) -> Grads:
    """dX = dY reshaped to X's shape (a constant where static: ONNX Runtime simplifies it the same way)."""
    x = node.inputs[0]
    allowzero = 1 if node.op_type == "Reshape" and node.attr("allowzero", 0) and g.opset >= 14 else None
    return [g.same_type(g.op("Reshape", node.dy(), g.shape(x), allowzero=allowzero), x)]


gradient("Reshape", inputs=(0,))(shape_back)
gradient("Flatten", inputs=(0,))(shape_back)


@gradient("Transpose")
def transpose(g: GradientContext, node: NodeView) -> Grads:
    perm = node.attr("perm")
    if perm is None:  # the default reverses the axes, its own inverse
        rank = g.rank(node.inputs[0])
        if rank is None:
            raise BuilderError(f"{node.describe()}: a Transpose without perm needs its input's rank, which shape "
                               "inference could not tell")
        inverse = list(reversed(range(rank)))
    else:
        inverse = [0] * len(perm)
        for position, axis in enumerate(perm):
            inverse[axis] = position
    return [g.op("Transpose", node.dy(), perm=inverse)]


@gradient("Squeeze", inputs=(0,))
def squeeze(g: GradientContext, node: NodeView) -> Grads:
    if g.opset < 13 and node.attr("axes") is not None:
        return [g.op("Unsqueeze", node.dy(), axes=list(node.attr("axes")))]
    if g.opset >= 13 and node.has_input(1):
        return [g.op("Unsqueeze", node.dy(), node.inputs[1])]
    return shape_back(g, node)  # every axis of size 1 squeezed: the input's shape restores them


@gradient("Unsqueeze", inputs=(0,))
def unsqueeze(g: GradientContext, node: NodeView) -> Grads:
    if g.opset < 13:
        return [g.op("Squeeze", node.dy(), axes=list(node.attr("axes")))]
    return [g.op("Squeeze", node.dy(), node.inputs[1])]


def static_size(g: GradientContext, value: str, axis: int) -> Optional[int]:
    """The size of ``value`` along ``axis`` when known before run time."""
    dims = g.dims(value)
    if dims is not None and -len(dims) <= axis < len(dims) and isinstance(dims[axis], int):
        return int(dims[axis])  # type: ignore[arg-type]
    return None


@gradient("Concat")
def concat(g: GradientContext, node: NodeView) -> Grads:
    """A Split of dY into the inputs' sizes along the axis (ONNX Runtime 1.19.2's GetConcatGradient)."""
    axis = int(node.attr("axis"))
    static = [static_size(g, x, axis) for x in node.inputs]
    known = [s for s in static if s is not None]
    if g.opset < 13:  # Split takes its sizes as an attribute
        if len(known) < len(static):
            raise BuilderError(f"{node.describe()}: at opset {g.opset} the gradient of Concat needs every input's "
                               "size along the axis before run time")
        pieces = g.node("Split", [node.dy()], len(node.inputs), axis=axis, split=known)
    else:
        if len(known) == len(static):
            split = g.ints(known)
        else:  # ONNX Runtime's Shape and Gather of each input's size
            sizes = [g.ints([s]) if s is not None else g.op("Gather", g.op("Shape", x), g.ints([axis]), axis=0)
                     for s, x in zip(static, node.inputs)]
            split = g.op("Concat", *sizes, axis=0)
        pieces = g.node("Split", [node.dy(), split], len(node.inputs), axis=axis)
    return [g.same_type(piece, x) if node.wants(i) else None
            for i, (piece, x) in enumerate(zip(pieces, node.inputs))]


@gradient("Split", inputs=(0,))
def split(g: GradientContext, node: NodeView) -> Grads:
    """dX = the outputs' gradients concatenated, zeros for an output no gradient reaches (ONNX Runtime
    leaves those out, which gives dX the wrong shape)."""
    parts = [node.grad(i) or zeros_like(g, out) for i, out in enumerate(node.outputs)]
    return [g.op("Concat", *parts, axis=int(node.attr("axis", 0)))]


@gradient("Slice", inputs=(0,))
def slice_(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's SliceGrad (dY written into zeros of X's shape at the sliced positions) where every
    step is known to be positive: its CPU kernel fails on a negative step ("narrowing_error"), so those
    slices take GatherGrad along each sliced axis instead (a copy as well: the gradients are equal bit for
    bit)."""
    if g.opset < 10:
        raise BuilderError(f"{node.describe()}: Slice with attributes (opset < 10) is not supported")
    x = node.inputs[0]
    steps = constant_ints(g, node, 4) if node.has_input(4) else []
    axes = sliced_axes(g, node)
    if (steps is not None and all(step > 0 for step in steps)) or (steps is None and axes is None):
        # (steps known only at run time, axes too: SliceGrad, whose kernel refuses a negative step then)
        inputs = [node.dy(), g.shape(x)] + node.inputs[1:]
        return [g.same_type(g.ms("SliceGrad", *inputs)[0], x)]
    if axes is None:
        raise BuilderError(f"{node.describe()}: the gradient of a Slice with a negative step needs its axes "
                           "before run time and its input's rank")
    return [slice_by_gathers(g, node, axes)]


def sliced_axes(g: GradientContext, node: NodeView) -> Optional[List[int]]:
    """The axes a Slice slices, non-negative, when known before run time (with the input's rank)."""
    rank = g.rank(node.inputs[0])
    if node.has_input(3):
        axes = constant_ints(g, node, 3)
    else:
        starts_dims = g.dims(node.inputs[1])
        count = starts_dims[0] if starts_dims else None
        axes = list(range(count)) if isinstance(count, int) else None
    return None if axes is None or rank is None else [a % rank for a in axes]


def slice_by_gathers(g: GradientContext, node: NodeView, axes: List[int]) -> str:
    """A Slice is a Gather along each sliced axis, of the positions ``Slice(arange(size), start, end,
    step)`` (the runtime's own Slice does the clamping); dX applies GatherGrad axis by axis in reverse."""
    x, dy = node.inputs[0], node.dy()
    rank = len(g.dims(x) or ())
    x_shape, y_shape = g.op("Shape", x), g.op("Shape", dy)
    zero, one = g.const(np.array(0, dtype=np.int64)), g.const(np.array(1, dtype=np.int64))
    grad = dy
    for j in reversed(range(len(axes))):
        size = g.op("Gather", x_shape, g.const(np.array(axes[j], dtype=np.int64)), axis=0)
        positions = g.op("Range", zero, size, one)
        start, end = (g.op("Slice", node.inputs[i], g.ints([j]), g.ints([j + 1])) for i in (1, 2))
        step = g.op("Slice", node.inputs[4], g.ints([j]), g.ints([j + 1])) if node.has_input(4) else g.ints([1])
        index = g.op("Slice", positions, start, end, g.ints([0]), step)
        # the shape before this axis's Gather: the axes sliced before it already have dY's sizes
        done = np.array([a in axes[:j] for a in range(rank)])
        shape = g.op("Where", g.const(done), y_shape, x_shape) if done.any() else x_shape
        grad = g.ms("GatherGrad", shape, index, grad, axis=axes[j])[0]
    return g.same_type(grad, x)


@gradient("Expand", inputs=(0,))
def expand(g: GradientContext, node: NodeView) -> Grads:
    return [g.unbroadcast(node.dy(), node.inputs[0], node.outputs[0])]


@gradient("Tile", inputs=(0,))
def tile(g: GradientContext, node: NodeView) -> Grads:
    """ONNX Runtime's form: dY reshaped to [r0, d0, r1, d1, ...] (repeats interleaved with X's dims) and
    summed over the repeat axes."""
    x, repeats = node.inputs[:2]
    one = [1]
    pairs = g.op("Concat", g.unsqueeze(repeats, one), g.unsqueeze(g.op("Shape", x), one), axis=1)
    flat = g.op("Reshape", pairs, g.ints([-1]))
    tiled = g.op("Reshape", node.dy(), flat)
    rank = g.rank(x)
    if rank is None:
        repeats_dims = g.dims(repeats)
        if repeats_dims and isinstance(repeats_dims[0], int):
            rank = int(repeats_dims[0])
    if rank is not None:
        return [g.same_type(g.reduce_sum(tiled, list(range(0, 2 * rank, 2)), keepdims=0), x)]
    even = g.op("Range", g.const(np.array(0, dtype=np.int64)), g.op("Size", flat),
                g.const(np.array(2, dtype=np.int64)))
    return [g.same_type(g.reduce_sum(tiled, axes_value=even, keepdims=0), x)]


@gradient("Pad", inputs=(0, 2))
def pad(g: GradientContext, node: NodeView) -> Grads:
    mode = node.attr("mode", "constant")
    if g.opset < 11:
        raise BuilderError(f"{node.describe()}: Pad with attributes (opset < 11) is not supported")
    x, dy = node.inputs[0], node.dy()
    axes = node.inputs[3] if node.has_input(3) else None
    if mode == "constant":  # ONNX Runtime's form: a Pad by the negated pads crops dY back to X
        pad_inputs = [dy, g.op("Neg", node.inputs[1])] + ([None, axes] if axes else [])
        dx = g.same_type(g.node("Pad", pad_inputs)[0], x)
        dvalue = None
        if node.wants(2) and node.has_input(2):
            # the padding value appears wherever dY's elements did not come from X
            outside = g.op("Sub", g.reduce_sum(dy, keepdims=0), g.reduce_sum(dx, keepdims=0))
            dvalue = g.reshape_like(outside, node.inputs[2])
        return [dx if node.wants(0) else None, None, dvalue]
    return [pad_by_gathers(g, node, mode, dy) if node.wants(0) else None, None]


_GATHERED_PAD_MODES = ("reflect", "edge", "wrap")


def pad_by_gathers(g: GradientContext, node: NodeView, mode: str, dy: str) -> str:
    """Reflect, edge and wrap padding read each output element from one input element: along each padded
    axis the Pad is a Gather of the source positions of ``j`` in ``[-before, size + after)``, so dX is
    GatherGrad applied axis by axis in reverse. The positions are constants where the pads and the size
    are, else computed at run time (a symbolic length, run-time pads); negative pads crop, as in Pad."""
    x = node.inputs[0]
    if mode not in _GATHERED_PAD_MODES:
        raise BuilderError(f"{node.describe()}: Pad mode {mode!r} has no gradient rule")
    rank = g.rank(x)
    axes = constant_ints(g, node, 3) if node.has_input(3) else (None if rank is None else list(range(rank)))
    if rank is None or axes is None:
        raise BuilderError(f"{node.describe()}: the gradient of a {mode!r} Pad needs its input's rank and its axes "
                           "before run time")
    axes = [a % rank for a in axes]
    pads = constant_ints(g, node, 1)
    plan = []  # (axis, the source position of each output position along it)
    for position, axis in enumerate(axes):
        size = static_size(g, x, axis)
        if pads is not None:
            before, after = pads[position], pads[position + len(axes)]
            if before == 0 and after == 0:
                continue
            if size is not None:
                plan.append((axis, g.ints(_source_positions(mode, np.arange(-before, size + after), size))))
                continue
        plan.append((axis, _run_time_source_positions(g, node, mode, axis, position, len(axes))))
    x_shape, y_shape = g.shape(x), g.shape(node.outputs[0])
    grad = dy
    for j in reversed(range(len(plan))):
        axis, index = plan[j]
        # the shape before this axis's Gather: the axes padded before it already have dY's sizes
        done = np.array([a in [p[0] for p in plan[:j]] for a in range(rank)])
        shape = g.op("Where", g.const(done), y_shape, x_shape) if done.any() else x_shape
        grad = g.ms("GatherGrad", shape, index, grad, axis=axis)[0]
    return g.same_type(grad, x)


def _source_positions(mode: str, j: np.ndarray, size: int) -> List[int]:
    last = size - 1
    if mode == "reflect":  # mirrored at the first and last element, which are not repeated
        found = last - np.abs(last - np.abs(j))
    elif mode == "edge":
        found = np.clip(j, 0, last)
    else:  # wrap
        found = np.mod(j, size)
    return [int(v) for v in found]


def _run_time_source_positions(g: GradientContext, node: NodeView, mode: str, axis: int, position: int,
                               count: int) -> str:
    """``_source_positions`` computed by the graph, from the run-time size and pads."""
    def scalar(value: int) -> str:
        return g.const(np.array(value, dtype=np.int64))

    size = g.op("Gather", g.op("Shape", node.inputs[0]), scalar(axis), axis=0)
    before = g.op("Gather", node.inputs[1], scalar(position), axis=0)
    after = g.op("Gather", node.inputs[1], scalar(position + count), axis=0)
    j = g.op("Range", g.op("Neg", before), g.op("Add", size, after), scalar(1))
    last = g.op("Sub", size, scalar(1))
    if mode == "reflect":
        return g.op("Sub", last, g.op("Abs", g.op("Sub", last, g.op("Abs", j))))
    if mode == "edge":
        return g.op("Max", g.op("Min", j, last), scalar(0))
    return g.op("Mod", j, size)


_RESIZE_ONLY_FORWARD = ("axes", "keep_aspect_ratio_policy", "extrapolation_value")


@gradient("Resize", inputs=(0,))
def resize(g: GradientContext, node: NodeView) -> Grads:
    """Every mode of Resize (nearest, linear, cubic, antialiased) is separable: along each resized axis the
    output is a fixed matrix M (out x in) applied to the input, so dX applies M's transpose along each axis
    in turn. M is the same Resize applied to an identity matrix (scale 1 on its second axis), so that the
    runtime's own coordinate rules make it, from constant or run-time scales or sizes (an upsampling to
    another tensor's shape). ONNX Runtime's ResizeGrad has no CPU kernel."""
    x = node.inputs[0]
    mode = node.attr("coordinate_transformation_mode", "half_pixel")
    if mode == "tf_crop_and_resize" or node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise BuilderError(f"{node.describe()}: Resize with coordinate_transformation_mode {mode!r} and "
                           f"keep_aspect_ratio_policy {node.attr('keep_aspect_ratio_policy', 'stretch')!r} has no "
                           "gradient rule (only 'stretch' without cropping)")
    dims, out_dims = g.dims(x), g.dims(node.outputs[0])
    if dims is None:
        raise BuilderError(f"{node.describe()}: the gradient of Resize needs its input's rank")
    rank = len(dims)
    scales_at, sizes_at = (1, None) if g.opset < 11 else (2, 3)
    scales = g.constant_value(node.inputs[scales_at]) if node.has_input(scales_at) else None
    sizes = g.constant_value(node.inputs[sizes_at]) if sizes_at is not None and node.has_input(sizes_at) else None
    sizes_name = node.inputs[sizes_at] if sizes_at is not None and node.has_input(sizes_at) else ""
    by_sizes = (scales is None or scales.size == 0) and bool(sizes_name)
    if not by_sizes and not node.has_input(scales_at):
        raise BuilderError(f"{node.describe()}: a Resize without scales or sizes has no gradient rule")
    axes = [int(a) % rank for a in (node.attr("axes") or range(rank))]
    attributes = {a.name: node.attr(a.name) for a in node.proto.attribute if a.name not in _RESIZE_ONLY_FORWARD}
    grad = node.dy()
    for position, axis in enumerate(axes):
        size_in = static_size(g, x, axis)

        def size_in_value(size_in: Optional[int] = size_in, axis: int = axis) -> str:
            """The input's size along ``axis``, made where it is read (an unread constant would be left in the
            training model for ONNX Runtime to remove, warning at every session)."""
            return g.ints([size_in]) if size_in is not None else g.op("Gather", g.op("Shape", x), g.ints([axis]), axis=0)

        resize_by: List[Optional[str]]
        if by_sizes:  # the scale is out / in: equal sizes are the identity, in every mode
            known_out = None if sizes is None else int(sizes.reshape(-1)[position])
            if known_out is not None and known_out == size_in:
                continue
            if known_out is None and out_dims is not None and dims[axis] is not None and dims[axis] == out_dims[axis]:
                continue
            size_out = g.ints([known_out]) if known_out is not None else \
                g.op("Slice", sizes_name, g.ints([position]), g.ints([position + 1]))
            resize_by = [None, g.op("Concat", size_out, size_in_value(), axis=0)]
        elif scales is not None:
            scale = float(scales.reshape(-1)[position])
            if scale == 1.0:
                continue
            resize_by = [g.const(np.array([scale, 1.0], dtype=np.float32)), None]
        else:  # scales at run time: every axis, a scale of 1 giving the identity
            scale_value = g.op("Slice", node.inputs[scales_at], g.ints([position]), g.ints([position + 1]))
            resize_by = [g.op("Concat", scale_value, g.const(np.array([1.0], dtype=np.float32)), axis=0), None]
        if size_in is not None:
            identity = g.const(np.eye(size_in), x)
        else:
            zero = helper.make_tensor("value", g.elem_type(x), [1], [0])
            side = size_in_value()
            square = g.op("Concat", side, side, axis=0)
            identity = g.op("EyeLike", g.op("ConstantOfShape", square, value=zero))
        inputs = [identity, resize_by[0]] if g.opset < 11 else [identity, None] + resize_by
        matrix = g.node("Resize", inputs, 1, **attributes)[0]  # (out, in)
        grad = along_axis(g, grad, matrix, axis, rank)
    return [g.same_type(grad, x)]


def along_axis(g: GradientContext, value: str, matrix: str, axis: int, rank: int) -> str:
    """``value`` with its axis ``axis`` (of M's first size) contracted with M: that axis takes M's second."""
    if axis == rank - 1:
        return g.op("MatMul", value, matrix)
    perm = [a for a in range(rank) if a != axis] + [axis]
    moved = g.op("MatMul", g.op("Transpose", value, perm=perm), matrix)
    inverse = [0] * rank
    for position, a in enumerate(perm):
        inverse[a] = position
    return g.op("Transpose", moved, perm=inverse)


def _block(node: NodeView) -> int:
    return int(node.attr("blocksize"))


@gradient("DepthToSpace")
def depth_to_space(g: GradientContext, node: NodeView) -> Grads:
    """SpaceToDepth undoes DepthToSpace in DCR mode; CRD mode orders the channels (c, b1, b2) where
    SpaceToDepth gives (b1, b2, c): a reshape-transpose-reshape reorders them."""
    x, b = node.inputs[0], _block(node)
    back = g.op("SpaceToDepth", node.dy(), blocksize=b)
    if node.attr("mode", "DCR") == "DCR":
        return [g.same_type(back, x)]
    x_shape = g.shape(x)
    head = g.op("Slice", x_shape, g.ints([0]), g.ints([1]))
    tail = g.op("Slice", x_shape, g.ints([2]), g.ints([4]))
    split = g.op("Reshape", back, g.op("Concat", head, g.ints([b * b, -1]), tail, axis=0))
    reordered = g.op("Transpose", split, perm=[0, 2, 1, 3, 4])
    return [g.same_type(g.op("Reshape", reordered, x_shape), x)]


@gradient("SpaceToDepth")
def space_to_depth(g: GradientContext, node: NodeView) -> Grads:
    return [g.same_type(g.op("DepthToSpace", node.dy(), blocksize=_block(node), mode="DCR"), node.inputs[0])]


@gradient("Trilu", inputs=(0,))
def trilu(g: GradientContext, node: NodeView) -> Grads:
    """The same triangle of dY (ONNX Runtime emits its com.microsoft Trilu, the same kernel)."""
    k = [node.inputs[1]] if node.has_input(1) else []
    return [g.ms("Trilu", node.dy(), *k, upper=int(node.attr("upper", 1)))[0]]


@gradient("ReverseSequence", inputs=(0,))
def reverse_sequence(g: GradientContext, node: NodeView) -> Grads:
    """Reversing the same prefixes again puts every element back."""
    return [g.op("ReverseSequence", node.dy(), node.inputs[1], batch_axis=node.attr("batch_axis", 1),
                 time_axis=node.attr("time_axis", 0))]
