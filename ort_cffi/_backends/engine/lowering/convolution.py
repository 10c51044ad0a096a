"""Convolution and pooling gradients: ConvGrad's input gradient as a ConvTranspose (a Conv with the kernel
flipped for depthwise layers without a stride, and for other layers without one by the session's intra-op
threads and the layer's shape: ``input_gradient_by_conv``) and its weight gradient in one of three forms picked per layer
(``weight_gradient_form``), MaxPoolGrad as MaxUnpool where the windows are apart (else a scatter that adds over
MaxPool's indices), AveragePoolGrad as a ConvTranspose of ones; and the forward MaxPool's Indices, where its
windows tile the input, from its output (``max_pool``).

The forms and the rules that pick them were measured against each other and the training kernels on the zoo's
layer shapes (docs/internals/runtime.md §11, the engine); they hold for 1-D, 2-D and 3-D, groups, strides, pads,
dilations and ``auto_pad``."""
from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import onnx

from ort_cffi._backends.engine.lowering.registry import Dim, Emitter, LoweringError, attribute, lowers

_LAST = np.iinfo(np.int64).max


def _ints(values: Iterable[int]) -> np.ndarray:
    return np.array(list(values), np.int64)


def _spatial_rank(node: onnx.NodeProto, emit: Emitter, *names: str) -> int:
    kernel = attribute(node, "kernel_shape")
    if kernel:
        return len(kernel)
    for name in names:
        rank = emit.rank(name)
        if rank is not None:
            return rank - 2
    raise LoweringError(f"{emit.label}: {node.op_type} needs its kernel_shape or the rank of its inputs")


def _static(dims: Optional[Sequence[Dim]]) -> Optional[List[int]]:
    """The dimensions where every one is a number, else None."""
    if dims is None:
        return None
    numbers = [d for d in dims if isinstance(d, int)]
    return numbers if len(numbers) == len(dims) else None


def _pads(node: onnx.NodeProto, spatial: int) -> Tuple[List[int], List[int]]:
    """(begin pads, end pads) as the pool gradient kernels read them: the ``pads`` attribute alone (zeros where
    it is absent), never ``auto_pad``; the windows start at the begin pads, their count is dY's."""
    pads = list(attribute(node, "pads", [0] * (2 * spatial)))
    return pads[:spatial], pads[spatial:]


def _resolved_pads(node: onnx.NodeProto, emit: Emitter, spatial: int, strides: List[int], dilations: List[int],
                   kernel: Optional[List[int]], inputs: Optional[List[int]]) -> Tuple[List[int], List[int]]:
    """(begin pads, end pads) as the forward Conv resolved them, ``auto_pad`` included. ConvGrad's kernel reads
    ``pads`` alone: with SAME pads its im2col layout (from the pads) and dY's (from the forward) disagree and
    its result is not the gradient. The lowering gives the gradient of the forward Conv there."""
    auto_pad = attribute(node, "auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(attribute(node, "pads", [0] * (2 * spatial)))
        return pads[:spatial], pads[spatial:]
    if auto_pad == "VALID":
        return [0] * spatial, [0] * spatial
    if kernel is None or inputs is None:
        raise LoweringError(f"{emit.label}: ConvGrad with auto_pad {auto_pad} needs the input's spatial sizes "
                            f"and the kernel's size before run time, and they are not known")
    begin, end = [], []
    for size, stride, dilation, k in zip(inputs, strides, dilations, kernel):
        total = max((-(-size // stride) - 1) * stride + (k - 1) * dilation + 1 - size, 0)
        first = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin.append(first)
        end.append(total - first)
    return begin, end


def _crop_to(emit: Emitter, full: str, spatial: int, strides: List[int], begin: List[int], sizes: str,
             output: Optional[str]) -> str:
    """``full`` (a ConvTranspose without pads: the whole padded extent the windows cover) cut to the input's
    extent: from the begin pads, ``sizes`` (an int64 vector of the spatial sizes) long. Windows may stop
    short of the end pad by up to stride - 1 elements: zeros stand for those first."""
    axes = _ints(range(2, 2 + spatial))
    if any(s > 1 for s in strides):
        widths = _ints([0] * (2 + spatial) + [0, 0] + [s - 1 for s in strides])
        full = emit.one("Pad", [full, emit.const(widths)])
    starts = emit.const(_ints(begin))
    ends = emit.one("Add", [sizes, starts])
    return emit.one("Slice", [full, starts, ends, emit.const(axes)], output)


@lowers("ConvGrad")
def conv_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY, X, W; outputs dX, dW, dB (each may be unwanted). Attributes: Conv's."""
    dy, x, w = node.input[0], node.input[1], node.input[2]
    outputs = list(node.output) + [""] * (3 - len(node.output))
    spatial = _spatial_rank(node, emit, x, w, dy)
    group = int(attribute(node, "group", 1))
    strides = list(attribute(node, "strides", [1] * spatial))
    dilations = list(attribute(node, "dilations", [1] * spatial))
    x_shape = emit.shape(x)
    x_sizes = _static(x_shape[2:]) if x_shape is not None else None  # the spatial sizes (the batch may vary)
    w_dims = _static(emit.shape(w))
    kernel: Optional[List[int]] = list(attribute(node, "kernel_shape", [])) or (w_dims[2:] if w_dims else None)
    begin, end = _resolved_pads(node, emit, spatial, strides, dilations, kernel, x_sizes)
    spatial_axes = list(range(2, 2 + spatial))

    y_count = None  # dY's positions per image
    if x_sizes is not None and kernel is not None:
        y_count = int(np.prod([(size + b + e - ((k - 1) * d + 1)) // s + 1 for size, b, e, k, d, s
                               in zip(x_sizes, begin, end, kernel, dilations, strides)]))

    if outputs[0]:
        written = False
        if kernel is not None and w_dims is not None and w_dims[1] == 1 and all(s == 1 for s in strides) and \
                all(b <= (k - 1) * d and e <= (k - 1) * d for b, e, k, d in zip(begin, end, kernel, dilations)):
            _depthwise_input_gradient(emit, dy, w, w_dims, group, dilations, kernel, begin, end, outputs[0])
            written = True
        if not written and kernel is not None and w_dims is not None and \
                input_gradient_by_conv(strides, kernel, dilations, begin, end, w_dims, group, y_count,
                                       emit.intra_op_threads):
            _input_gradient_by_conv(emit, dy, w, w_dims, group, dilations, kernel, begin, end, outputs[0])
            written = True
        if not written and x_sizes is not None and kernel is not None:  # ConvTranspose says the size itself
            y_sizes = [(size + b + e - ((k - 1) * d + 1)) // s + 1
                       for size, b, e, k, d, s in zip(x_sizes, begin, end, kernel, dilations, strides)]
            extra = [size - ((ys - 1) * s + (k - 1) * d + 1 - b - e)
                     for size, ys, s, k, d, b, e in zip(x_sizes, y_sizes, strides, kernel, dilations, begin, end)]
            if all(0 <= p < max(s, d) for p, s, d in zip(extra, strides, dilations)):
                emit.one("ConvTranspose", [dy, w], outputs[0], group=group, strides=strides, dilations=dilations,
                         pads=begin + end, output_padding=extra if any(extra) else None)
                written = True
        if not written:  # sizes known at run time: the whole extent, cut to X's
            full = emit.one("ConvTranspose", [dy, w], group=group, strides=strides, dilations=dilations,
                            pads=[0] * (2 * spatial))
            _crop_to(emit, full, spatial, strides, begin, emit.shape_of(x, 2), outputs[0])

    if outputs[1]:
        form = weight_gradient_form(kernel, w_dims, group, y_count, strides) \
            if kernel is not None and emit.opset >= 13 else "conv"
        if form == "columns" and w_dims is not None and kernel is not None:
            _weight_gradient_by_columns(emit, dy, x, w_dims[1] * group, group, strides, dilations, kernel, begin,
                                        end, outputs[1])
        elif form in ("patches", "columns") and kernel is not None:
            _weight_gradient_by_patches(emit, dy, x, w, group, strides, dilations, kernel, begin, end, x_sizes,
                                        outputs[1])
        else:
            _weight_gradient_by_conv(emit, dy, x, w, group, strides, dilations, kernel, begin, end, x_sizes,
                                     outputs[1])

    if outputs[2]:
        emit.reduce("ReduceSum", dy, [0] + spatial_axes, keepdims=False, output=outputs[2])


def _depthwise_input_gradient(emit: Emitter, dy: str, w: str, w_dims: List[int], group: int, dilations: List[int],
                              kernel: List[int], begin: List[int], end: List[int], output: str) -> None:
    """dX of a convolution without stride whose groups have one input channel (depthwise, any multiplier Mg) as
    a Conv of dY with the kernel flipped: group g, Mg inputs and one output per group, W [g * Mg, 1, k...]
    read as [g, Mg, k...], pads (k - 1) * d - the forward's. ONNX Runtime's grouped ConvTranspose runs a GEMM
    and a col2im per group; the Conv was 10-17% faster on MobileNet's depthwise layers (48 channels over 8x8:
    0.26 ms against 0.31; 96 over 2x2: 0.29 against 0.35; 1.31.1, 2026-12-07). Groups of several input
    channels keep the ConvTranspose (a 3x3 layer of 64 outputs over 32 channels on 8x8: 0.57 ms, the Conv 0.70)."""
    flipped = _kernel_for_input_gradient(emit, w, w_dims, group, kernel)  # [g, Mg, k...]
    pads = [(k - 1) * d - b for k, d, b in zip(kernel, dilations, begin)] + \
        [(k - 1) * d - e for k, d, e in zip(kernel, dilations, end)]
    emit.one("Conv", [dy, flipped], output, group=group, dilations=dilations, pads=pads)


def input_gradient_by_conv(strides: List[int], kernel: List[int], dilations: List[int], begin: List[int],
                           end: List[int], w_dims: List[int], group: int, output_size: Optional[int],
                           threads: int) -> bool:
    """Whether dX of a layer without a stride (W of ``w_dims``, [M, Cg, kernel...]; ``output_size`` positions
    per image in dY, None where not known before run time) is a Conv of dY with the kernel flipped and its two
    channel axes swapped (``_input_gradient_by_conv``) rather than a ConvTranspose, for sessions of
    ``threads`` intra-op threads. ONNX Runtime's ConvTranspose runs a GEMM and a serial col2im per image: it
    gains nothing from a second thread, where the Conv splits the batch between them. Measured on 1.31.1
    (batch 16, the minimum of 80-100 alternating runs, 2026-12-07, load average 5; ms, ConvTranspose against
    Conv; docs/internals/runtime.md §11):

    - 1x1 kernels (group 1), the Conv at any thread count: no flip, and faster even at one thread (96x24 on
      24x24 0.77 against 0.68, 24x96 0.80 against 0.55, 512x128 on 4x4 0.63 against 0.34);
    - larger kernels, the Conv at two threads or more over maps of more than 64 positions (32x32 3x3 on 32x32,
      4.07 against 2.24; 64x64 on 16x16, 3.30 against 1.94). Over smaller maps the ConvTranspose uses both
      threads too: in ResNet-style training graphs (batch 16, 2026-12-07, ONNX Runtime's profiler over 20
      steps) 128x128 on 8x8 took 2.69 ms as a ConvTranspose and 3.03 as the Conv at two threads.

    Measured and not kept: the Conv at one thread over maps of at most 16 positions. Alone, it was faster from
    128x128 channels up (256x256 on 4x4, 5.3 against 3.8; 512x512 on 2x2, 22.7 against 13.5), but in the
    training graph of the same 256x256 layer it took what the ConvTranspose took (6.07 ms against 6.06, plus
    0.86 for the weights' reordering)."""
    if not input_gradient_conv_applies(strides, kernel, dilations, begin, end):
        return False
    if all(k == 1 for k in kernel):
        return group == 1 or threads >= 2
    return threads >= 2 and (output_size is None or output_size > 64)


def input_gradient_conv_applies(strides: List[int], kernel: List[int], dilations: List[int], begin: List[int],
                                end: List[int]) -> bool:
    """Whether ``_input_gradient_by_conv`` can give dX: no stride, and pads within the kernel's reach (the
    Conv's pads, (k - 1) * d less the forward's, are not negative)."""
    return all(s == 1 for s in strides) and \
        all(b <= (k - 1) * d and e <= (k - 1) * d for b, e, k, d in zip(begin, end, kernel, dilations))


def _input_gradient_by_conv(emit: Emitter, dy: str, w: str, w_dims: List[int], group: int, dilations: List[int],
                            kernel: List[int], begin: List[int], end: List[int], output: str) -> None:
    """dX of a convolution without stride as a Conv of dY: W [M, Cg, k...] read per group as [g, Mg, Cg, k...],
    its two channel axes swapped into [g * Cg, Mg, k...] (group g: Mg inputs and Cg outputs per group) and its
    kernel flipped, with pads (k - 1) * d less the forward's (``input_gradient_by_conv`` says where)."""
    flipped = _kernel_for_input_gradient(emit, w, w_dims, group, kernel)
    pads = [(k - 1) * d - b for k, d, b in zip(kernel, dilations, begin)] + \
        [(k - 1) * d - e for k, d, e in zip(kernel, dilations, end)]
    emit.one("Conv", [dy, flipped], output, group=group, dilations=dilations, pads=pads)


def _kernel_for_input_gradient(emit: Emitter, w: str, w_dims: List[int], group: int, kernel: List[int]) -> str:
    """W [M, Cg, k...] as the Conv that gives dX reads it: [g * Cg, Mg, k...] (per group its two channel axes
    swapped: group g has Mg input and Cg output channels there), every spatial axis reversed.

    The reversal is a product by the exchange matrix (K x K, K the kernel's positions, ones on the
    anti-diagonal) over the positions flattened, which reverses every spatial axis at once. Each value is then
    one weight times 1 plus zeros: the weights themselves, bit for bit as a Slice with negative steps gives them
    (which copies element by element: 256x256 3x3, 2.06 ms with the Transpose against 0.57; a NaN or infinite
    weight spreads to its kernel's other positions, where nothing downstream is finite anyway). Where both
    channel axes are longer than 1 and the layer has one group, the swap is the same product's batch axis
    (FusedMatMul's transBatchA: [M, Cg, K] read as [Cg, M, K]) instead of a Transpose, which ONNX Runtime runs
    at about 1.6 ms for 256x256 3x3 (float: FusedMatMul's CPU kernel has no other type)."""
    m, cg = w_dims[0], w_dims[1]
    mg = m // group
    positions = int(np.prod(kernel))
    target = emit.const(_ints([group * cg, mg] + list(kernel)))
    elem_type = emit.elem_type(w) or onnx.TensorProto.FLOAT
    exchange = np.eye(positions, dtype=onnx.helper.tensor_dtype_to_np_dtype(elem_type))[::-1]

    def reversed_positions(x: str) -> str:
        if positions == 1:
            return emit.one("Reshape", [x, target])
        flat = emit.one("Reshape", [x, emit.const(_ints([-1, positions]))])
        return emit.one("Reshape", [emit.one("MatMul", [flat, emit.const(exchange)]), target])

    if cg == 1 or mg == 1:  # one of the axes to swap has length 1: W's layout is the target's already
        return reversed_positions(w)
    if group == 1 and positions > 1 and elem_type == onnx.TensorProto.FLOAT:
        rows = emit.one("Reshape", [w, emit.const(_ints([m, cg, positions]))])
        swapped = emit.one("FusedMatMul", [rows, emit.const(exchange[np.newaxis])], domain="com.microsoft",
                           transBatchA=1)  # [Cg, M, K]
        return emit.one("Reshape", [swapped, target])
    grouped = emit.one("Reshape", [w, emit.const(_ints([group, mg, cg, positions]))])
    return reversed_positions(emit.one("Transpose", [grouped], perm=[0, 2, 1, 3]))


def _numbered_shape(emit: Emitter, dx: str, dy: str) -> Optional[str]:
    """The static shape of the output ``dx`` with its batch taken from ``dy`` at run time, as the pool
    gradient kernels read it (their output's declared shape); None where it is not declared."""
    dims = emit.shape(dx)
    if dims is None or not all(isinstance(d, int) for d in dims[1:]):
        return None
    return emit.one("Concat", [emit.shape_of(dy, 0, 1), emit.const(_ints(d for d in dims[1:] if isinstance(d, int)))],
                    axis=0)


@lowers("MaxPoolGrad")
def max_pool_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Inputs dY and MaxPool's Indices (positions in the whole input, flattened): dY is added at them into
    zeros of the input's shape. That shape is MaxPool's input's where the Indices come from a MaxPool of
    this model, else the output's declared shape.

    Where the forward MaxPool's windows do not overlap (each stride at least the window's extent: the
    common 2x2 pool with stride 2), no position is picked twice, and MaxUnpool writes dY at the indices in
    one pass over dY: mish_cnn's two pools, 0.69 ms as a scatter that adds (ScatterElements into zeros), see
    docs/internals/runtime.md §11. Overlapping windows may pick a position twice, whose gradients add: the
    scatter."""
    dy, indices = node.input[0], node.input[1]
    forward = emit.producer(indices)
    if forward is not None and forward.op_type == "MaxPool" and forward.domain in ("", "ai.onnx"):
        shape = emit.shape_of(forward.input[0])
        x_shape, y_shape = emit.shape(forward.input[0]), emit.shape(forward.output[0])
        x_sizes = _static(x_shape[2:]) if x_shape is not None else None  # the batch may vary
        y_sizes = _static(y_shape[2:]) if y_shape is not None else None
        # MaxUnpool has a float kernel only (no double: the scatter below serves every type)
        if _windows_apart(forward) and emit.opset >= 11 and x_sizes and y_sizes and \
                all(y <= x for x, y in zip(x_sizes, y_sizes)) and emit.elem_type(dy) == onnx.TensorProto.FLOAT:
            # MaxUnpool's own attributes only say the smallest output it accepts: windows of 1 say dY's sizes
            ones = [1] * len(x_sizes)
            emit.one("MaxUnpool", [dy, indices, shape], node.output[0], kernel_shape=ones, strides=ones)
            return
    else:
        found = _numbered_shape(emit, node.output[0], dy)
        if found is None:
            raise LoweringError(f"{emit.label}: MaxPoolGrad's indices come from no MaxPool of the model and its "
                                f"output's shape is not declared: the shape of its input is not known")
        shape = found
    emit.require_opset(16, "a scatter that adds (ScatterElements' reduction)")
    flat = emit.const(_ints([-1]))
    count = emit.reduce("ReduceProd", shape, None, keepdims=True)
    summed = emit.one("ScatterElements", [emit.zeros(count, dy), emit.one("Reshape", [indices, flat]),
                                          emit.one("Reshape", [dy, flat])], axis=0, reduction="add")
    emit.one("Reshape", [summed, shape], node.output[0])


@lowers("MaxPool")
def max_pool(node: onnx.NodeProto, emit: Emitter) -> None:
    """The standard MaxPool, restated where it outputs its Indices (a training model's forward pool, whose
    Indices MaxPoolGrad reads): ONNX Runtime computes the Indices in a loop of its own, element by element,
    where the pool alone runs vectorized (a 2x2 pool over [16, 16, 32, 32]: 1.18 ms with the Indices, 0.14
    without, 1.31.1 and the 1.19.2 training build alike). Where the windows tile the input
    (``_tiling_window``), the pool runs without them and they are found from its output
    (``_indices_by_scoring``): 0.55 ms in all there. Every other MaxPool is written as it is."""
    window = _tiling_window(node, emit) if len(node.output) > 1 and node.output[1] else None
    attributes = {a.name: attribute(node, a.name) for a in node.attribute}
    if window is None:
        emit.node("MaxPool", list(node.input), list(node.output), **attributes)
        return
    pooled = emit.one("MaxPool", [node.input[0]], node.output[0] or None, **attributes)
    _indices_by_scoring(emit, node.input[0], pooled, window, node.output[1])


def _tiling_window(pool: onnx.NodeProto, emit: Emitter) -> Optional[Tuple[int, int, int]]:
    """(k, H, W) where the MaxPool ``pool`` has square k x k windows (k >= 2) that tile a float input of rank 4
    whose spatial sizes H and W are known: stride k, no pads, no dilation, row-major Indices (storage_order 0),
    and ceil_mode 0 or sizes that k divides (rows and columns past the last window are left out, as the
    pool leaves them). Else None."""
    x = pool.input[0]
    dims = emit.shape(x)
    sizes = _static(dims[2:]) if dims is not None and len(dims) == 4 else None
    kernel = list(attribute(pool, "kernel_shape", []))
    if emit.opset < 11 or emit.elem_type(x) != onnx.TensorProto.FLOAT or sizes is None or len(kernel) != 2 or \
            kernel[0] != kernel[1] or kernel[0] < 2:
        return None
    k = kernel[0]
    if list(attribute(pool, "strides", [1, 1])) != [k, k] or any(attribute(pool, "pads", [0] * 4)) or \
            attribute(pool, "auto_pad", "NOTSET") not in ("NOTSET", "", "VALID") or \
            any(d != 1 for d in attribute(pool, "dilations", [1, 1])) or int(attribute(pool, "storage_order", 0)):
        return None
    if int(attribute(pool, "ceil_mode", 0)) and any(size % k for size in sizes):
        return None
    if any(size < k for size in sizes):
        return None
    return k, sizes[0], sizes[1]


def _indices_by_scoring(emit: Emitter, x: str, pooled: str, window: Tuple[int, int, int], output: str) -> None:
    """MaxPool's Indices (each window's first maximum in row-major order, as a position in the whole input, as
    ONNX Runtime's kernel gives them) from X and the pool's output Y, for windows that tile X (``_tiling_window``):
    X's (image, channel) planes split by SpaceToDepth into the k * k positions of a window, [N * C, k * k, Y0,
    Y1]; each position equal to its window's maximum scores its priority, reach - its offset in the window
    (offset: row * W + column; reach: the largest offset + 1), so that the highest score is the first maximum;
    the Indices are reach - that score, plus the window's corner and the plane's start. Every step reads
    contiguous runs (a broadcast over interleaved axes ran ten times slower), and a window with no position
    equal to its maximum (a NaN) takes its last position, so that every index stays in X."""
    k, height, width = window
    rows, columns = height // k, width // k
    source = x
    if height % k or width % k:  # the rows and columns past the last window: no window reads them
        source = emit.one("Slice", [x, emit.const(_ints([0, 0])), emit.const(_ints([rows * k, columns * k])),
                                    emit.const(_ints([2, 3]))])
    planes = emit.one("Reshape", [source, emit.const(_ints([-1, 1, rows * k, columns * k]))])
    positions = emit.one("SpaceToDepth", [planes], blocksize=k)  # [N * C, k * k, Y0, Y1], row * k + column
    maxima = emit.one("Reshape", [pooled, emit.const(_ints([-1, 1, rows, columns]))])
    offsets = np.array([row * width + column for row, column in np.ndindex(k, k)], np.float32)
    reach = float(offsets[-1] + 1)
    scores = emit.one("Mul", [emit.one("Cast", [emit.one("Equal", [positions, maxima])], to=onnx.TensorProto.FLOAT),
                              emit.const((reach - offsets).reshape(1, k * k, 1, 1))])
    best = emit.one("Max", [emit.reduce("ReduceMax", scores, [1], keepdims=True), emit.const(np.float32(1.0))])
    offset = emit.one("Cast", [emit.one("Sub", [emit.const(np.float32(reach)), best])], to=onnx.TensorProto.INT64)
    corners = (k * np.arange(rows)[:, None] * width + k * np.arange(columns)[None, :]).reshape(1, 1, rows, columns)
    in_plane = emit.one("Add", [offset, emit.const(corners.astype(np.int64))])
    count = emit.one("Gather", [emit.one("Shape", [maxima]), emit.const(np.int64(0))], axis=0)
    starts = emit.one("Mul", [emit.one("Range", [emit.const(np.int64(0)), count, emit.const(np.int64(1))]),
                              emit.const(np.int64(height * width))])
    whole = emit.one("Add", [in_plane, emit.one("Reshape", [starts, emit.const(_ints([-1, 1, 1, 1]))])])
    emit.one("Reshape", [whole, emit.one("Shape", [pooled])], output)


def _windows_apart(pool: onnx.NodeProto) -> bool:
    """Whether no two windows of the MaxPool ``pool`` share a position: along every axis the stride is at least
    the window's extent, (kernel - 1) * dilation + 1, and the indices are row-major (storage_order 0)."""
    kernel = list(attribute(pool, "kernel_shape", []))
    if not kernel or int(attribute(pool, "storage_order", 0)) != 0:
        return False
    strides = list(attribute(pool, "strides", [1] * len(kernel)))
    dilations = list(attribute(pool, "dilations", [1] * len(kernel)))
    return all(s >= (k - 1) * d + 1 for k, s, d in zip(kernel, strides, dilations))


@lowers("AveragePoolGrad")
def average_pool_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """Input dY; output dX of the output's declared shape (which the kernel reads). Each dY element, times 1 /
    the count of its window (the kernel's size, or with count_include_pad 0 the elements inside the input),
    is spread over its window: a ConvTranspose of ones per channel.

    With count_include_pad 1 and ceil_mode 1, the windows ceil_mode adds past the end pads divide by what the
    runtime's own AveragePool divides them by, which changed between releases: 1.19.2 (forward and gradient
    kernel alike) by the kernel's size, 1.31.1 (and torch) by the positions inside the input and its pads
    (``[1, 1, 8]`` of ones, kernel 3, stride 2: the last output 0.667 on 1.19.2, 1 on 1.31.1). Such a
    window's factor is read from the runtime: its AveragePool of ones over the count of the window's elements
    inside the input (constants, folded when the session is made), so that the gradient is the forward's."""
    dy = node.input[0]
    dims = _static(emit.shape(node.output[0]))
    if dims is None:
        raise LoweringError(f"{emit.label}: AveragePoolGrad's output shape is not declared, and its kernel reads it")
    spatial = len(dims) - 2
    kernel = list(attribute(node, "kernel_shape"))
    strides = list(attribute(node, "strides", [1] * spatial))
    begin, end = _pads(node, spatial)
    ones_kernel = emit.const(np.ones([1, 1] + kernel, np.float32))
    includes_pads, ceil_mode = int(attribute(node, "count_include_pad", 0)), int(attribute(node, "ceil_mode", 0))
    if includes_pads and not ceil_mode:
        scale: str = emit.const(np.array(1.0 / float(np.prod(kernel)), np.float32))
    else:  # each window's count of elements inside the input (the kernel clips windows to it)
        ones_input = emit.const(np.ones([1, 1] + dims[2:], np.float32))
        counts = emit.one("Conv", [ones_input, ones_kernel], strides=strides,
                          pads=begin + [k + s for k, s in zip(kernel, strides)])
        counts = emit.one("Slice", [counts, emit.const(_ints([0] * spatial)), emit.shape_of(dy, 2),
                                    emit.const(_ints(range(2, 2 + spatial)))])
        if includes_pads:  # the runtime's divisor: (elements inside / divisor) over the elements inside
            pooled = emit.one("AveragePool", [ones_input], kernel_shape=kernel, strides=strides, pads=begin + end,
                              ceil_mode=1, count_include_pad=1)
            scale = emit.one("Div", [pooled, emit.one("Max", [counts, emit.const(np.array(1.0, np.float32))])])
        else:
            scale = emit.one("Reciprocal", [counts])
    weighted = emit.one("Mul", [dy, emit.cast_like(scale, dy)])
    one_channel = emit.one("Reshape", [weighted, emit.one("Concat", [emit.const(_ints([-1, 1])), emit.shape_of(dy, 2)],
                                                          axis=0)])
    full = emit.one("ConvTranspose", [one_channel, emit.cast_like(ones_kernel, dy)], strides=strides,
                    pads=[0] * (2 * spatial))
    cropped = _crop_to(emit, full, spatial, strides, begin, emit.const(_ints(dims[2:])), None)
    emit.one("Reshape", [cropped, emit.one("Concat", [emit.shape_of(dy, 0, 2), emit.const(_ints(dims[2:]))], axis=0)],
             node.output[0])


def weight_gradient_form(kernel: List[int], w_dims: Optional[List[int]], group: int,
                         output_size: Optional[int] = None, strides: Optional[List[int]] = None) -> str:
    """Which form computes dW fastest: "patches", "columns" or "conv", for a kernel of ``kernel``'s sizes, W of
    ``w_dims`` ([M, Cg, kernel...]), ``output_size`` positions per image in dY (None: not known before run time).
    Measured against each other and against the training build's ConvGrad on the zoo's layer shapes (batch
    16, one thread, the minimum of 60 runs each, interleaved; the table, dated, is in docs/internals/runtime.md
    §11; the machine was loaded, so only large differences decided):

    - "conv" where dY's maps are tiny (16 positions or fewer: the deep layers of a MobileNet, 144 depthwise
      channels over 2x2: 0.19 ms, the patches 0.56), or a kernel of 16 positions or more over maps of 64
      (segnet's 4x4 kernels with stride 2 on 8x8: 0.48 ms, the patches 0.60): the Conv's GEMMs are as wide as
      the kernel, and the patches' copies cost more than they save.
    - "columns" where a group has few input channels and several outputs (Cg <= 4, a first layer over RGB:
      3x3 over 3 channels on 32x32, 0.54 ms, the patches 1.39: their GEMMs are as narrow as Cg), and for
      strided layers whose groups have few outputs (depthwise with stride 2 on 16x16: 0.63 ms, the patches
      0.84, the Conv 0.72). Depthwise without a stride keeps the patches (8x8: 0.54 ms, the columns 0.60).
      Also strided layers of up to 16 input channels per group whose kernel has at most half as many
      positions as the group has outputs (the one-hot Conv's K multiply-adds per column element against the
      GEMM's Mg): 32x16 3x3 with stride 2 on 16x16, 0.35 ms, the patches 0.42 (the training kernel 0.19);
      on 32x32, 1.03 against 1.16 (2026-12-07, 1.31.1, load average 7). With 32 input channels (64x32 on
      16x16: the patches 0.97, the columns 1.13) or a 4x4 kernel over 16 outputs (16x16 on 32x32: 0.89
      against 1.69) the patches stay.
    - For 1x1 kernels (group 1), "columns" where an image's product dY X^T ([M, C]) is no larger than the
      image's dY and X together (M * C <= (M + C) * Y): the columns are X itself (with a stride, one Slice with
      steps of it), no Transposes, and the batch is summed after (MobileNet's 48x8 layer on 16x16: 0.095 ms,
      the patches 0.207; a ResNet's 64x32 shortcut with stride 2 on 16x16: 0.13, the patches 0.165, and 32x16
      on 32x32: 0.17 against 0.19, the training kernel 0.12 and 0.16); else "patches" (1280x80 on 1x1: 0.126
      ms, the columns 2.25, whose per-image products are 16 times dW).
    - "patches" elsewhere (a 3x3 layer of 64 outputs over 32 channels on 8x8: 0.76 ms, the columns 1.08, the
      Conv 1.23)."""
    if w_dims is None:
        return "conv"
    positions = int(np.prod(kernel))
    if positions == 1:
        if group == 1 and output_size is not None and w_dims[0] * w_dims[1] <= (w_dims[0] + w_dims[1]) * output_size:
            return "columns"
        return "patches"
    strided = strides is not None and any(s > 1 for s in strides)
    if output_size is not None and (output_size <= 16 or (positions >= 16 and output_size <= 64)):
        return "conv"
    depthwise = w_dims[0] // group < 4  # few outputs per group
    if (w_dims[1] <= 4 and not depthwise) or (strided and depthwise):
        return "columns"
    if strided and w_dims[1] <= 16 and 2 * positions <= w_dims[0] // group:
        return "columns"  # the patches' GEMMs as narrow as Cg; the im2col's K MACs per element at most half Mg's
    return "patches"


def _weight_gradient_by_patches(emit: Emitter, dy: str, x: str, w: str, group: int, strides: List[int],
                                dilations: List[int], kernel: List[int], begin: List[int], end: List[int],
                                x_sizes: Optional[List[int]], output: str) -> None:
    """dW[m, c, k] = sum over n and positions y of dY[n, m, y] * X[n, group(m) c, y s + k d - begin], ConvGrad's
    im2col and GEMM one kernel position at a time: the position's patch of X (a Slice of the padded X, its
    channels first) is a [group, Cg, N * Y] matrix, dY a [group, Mg, N * Y] one, and FusedMatMul multiplies
    the second by the first transposed into dW's [group, Mg, Cg] at that position. (One GEMM over all the
    positions' patches, concatenated, was slower: the copy of them all costs more than the wider GEMM saves.)

    With a stride (2-D, the same along both axes, sizes known), a Slice with steps would copy element by
    element: the patches are taken from X's phases instead (``_flat_patches``; segnet's 4x4 kernels with
    stride 2, 16 channels over 32x32: 1.97 ms with stepped Slices, 1.24 so). Without a stride the flat form
    trades the Slices' short rows for GEMMs over the padded width: ``_flat_rows_pay`` says where it wins."""
    spatial = len(kernel)
    spatial_axes = list(range(2, 2 + spatial))
    positions = list(np.ndindex(*kernel))
    if x_sizes is not None and spatial == 2 and strides[0] == strides[1] and len(positions) > 1 and \
            (strides[0] > 1 or _flat_rows_pay(x_sizes[1] + begin[1] + end[1], kernel[1], dilations[1])):
        dy_first, patch = _flat_patches(emit, dy, x, strides, dilations, kernel, begin, end, x_sizes)
    else:
        dy_first = emit.one("Transpose", [dy], perm=[1, 0] + spatial_axes)
        patch = _stepped_patches(emit, dy, x, strides, dilations, begin, end, kernel)
    outputs_per_group = emit.one("Div", [emit.shape_of(w, 0, 1), emit.const(_ints([group]))])  # Mg
    rows = emit.one("Reshape", [dy_first, emit.one("Concat", [emit.const(_ints([group])), outputs_per_group,
                                                              emit.const(_ints([-1]))], axis=0)])  # [g, Mg, N * Y]
    per_group = emit.one("Concat", [emit.const(_ints([group])), emit.shape_of(w, 1, 2), emit.const(_ints([-1]))],
                         axis=0)  # [g, Cg, -1]
    products = []
    for position in positions:  # one GEMM per kernel position: no copy of all the patches at once
        columns = emit.one("Reshape", [patch(position), per_group])  # [g, Cg, N * Y]
        product = emit.one("FusedMatMul", [rows, columns], domain="com.microsoft", transB=1)  # [g, Mg, Cg]
        products.append(emit.unsqueeze(product, [3]) if len(positions) > 1 else product)
    stacked = emit.one("Concat", products, axis=3) if len(positions) > 1 else products[0]  # [g, Mg, Cg, K]
    emit.one("Reshape", [stacked, emit.one("Shape", [w])], output)


def _flat_rows_pay(padded_width: int, kernel_width: int, dilation: int) -> bool:
    """Whether a layer without a stride takes its patches as flat runs (``_flat_patches``): where the padded
    width, which the GEMMs then run over, exceeds dY's width by at most an eighth. Measured on 1.31.1 (dW
    alone, batch 16, the minimum of 150 alternating runs, 2026-12-07, load average 7): 3x3 layers over 16x16
    maps (32 x 16 channels: 0.87 -> 0.82 ms; 32 x 32: 1.57 -> 1.44) and 32x32 maps (16 x 16: 1.90 -> 1.89)
    gain, over 8x8 maps (64 x 32: 0.68 -> 0.71; the width a quarter wider) they lose."""
    return padded_width * 8 <= (padded_width - (kernel_width - 1) * dilation) * 9


def _stepped_patches(emit: Emitter, dy: str, x: str, strides: List[int], dilations: List[int], begin: List[int],
                     end: List[int], kernel: Optional[List[int]] = None) -> Callable[[Tuple[int, ...]], str]:
    """A kernel position's patch of X, [C, N, Y...]: a Slice of the padded X (channels first) from k * d,
    (Y - 1) * s + 1 long, every s."""
    spatial = len(strides)
    spatial_axes = list(range(2, 2 + spatial))
    channels_first = emit.one("Transpose", [x], perm=[1, 0] + spatial_axes)  # [C, N, spatial]
    if any(begin + end):
        channels_first = emit.one("Pad", [channels_first, emit.const(_ints([0, 0] + begin + [0, 0] + end))])
    elif all(s == 1 for s in strides) and all(d == 1 for d in dilations) and kernel is not None and \
            all(k == 1 for k in kernel):
        return lambda position: channels_first  # a pointwise layer's one patch is X itself: no copy
    reach = emit.one("Add", [emit.one("Mul", [emit.shape_of(dy, 2), emit.const(_ints(strides))]),
                             emit.const(_ints([1 - s for s in strides]))])
    axes, steps = emit.const(_ints(spatial_axes)), emit.const(_ints(strides))

    def patch(position: Tuple[int, ...]) -> str:
        starts = _ints(p * d for p, d in zip(position, dilations))
        return emit.one("Slice", [channels_first, emit.const(starts), emit.one("Add", [reach, emit.const(starts)]),
                                  axes, steps])

    return patch


def _flat_patches(emit: Emitter, dy: str, x: str, strides: List[int], dilations: List[int], kernel: List[int],
                  begin: List[int], end: List[int], x_sizes: List[int]) -> Tuple[str, Callable[[Tuple[int, ...]], str]]:
    """(dY channels first, padded as below; a kernel position's patch of X), each patch one contiguous run per
    channel and image, [C, N, L], so that its Slice copies long runs: ONNX Runtime's Slice copies a run per
    output row, and a patch's rows are as short as dY's width (16 floats cost as much as a long run).

    X is padded, channels first, and its spatial axes flattened: a position's patch starts at its offset and
    runs Y0 rows of the padded width, so it also holds the columns past dY's width. dY, padded with zeros
    to the same width (each axis but the first), makes those columns add nothing to the GEMM. With stride s
    (2-D, the same along both axes) X is first split by SpaceToDepth into its s * s phases ([C, s * s * N,
    H / s, W / s]): position k * d is phase (k d) % s at offset (k d) // s, again with steps of 1. One extra
    row of zeros at the end keeps every run inside the tensor."""
    spatial = len(kernel)
    stride = strides[0]
    y_sizes = [(size + b + e - ((k - 1) * d + 1)) // s + 1
               for size, b, e, k, d, s in zip(x_sizes, begin, end, kernel, dilations, strides)]
    padded = [size + b + e for size, b, e in zip(x_sizes, begin, end)]
    # each axis a multiple of the stride, and one more row (of the phases) on the first
    rounded = [-(-p // stride) * stride for p in padded]
    rounded[0] += stride
    channels_first = emit.one("Transpose", [x], perm=[1, 0] + list(range(2, 2 + spatial)))  # [C, N, spatial]
    pads = _ints([0, 0] + begin + [0, 0] + [e + r - p for e, r, p in zip(end, rounded, padded)])
    channels_first = emit.one("Pad", [channels_first, emit.const(pads)])
    phases = stride * stride if stride > 1 else 1
    if stride > 1:
        channels_first = emit.one("SpaceToDepth", [channels_first], blocksize=stride)  # [C, s * s * N, H/s, W/s]
    sizes = [r // stride for r in rounded]  # the padded sizes of one phase
    flat = emit.one("Reshape", [channels_first, emit.const(_ints([0, phases, -1, int(np.prod(sizes))]))])
    run = y_sizes[0] * int(np.prod(sizes[1:]))
    steps_of = [int(np.prod(sizes[i + 1:])) for i in range(spatial)]  # a step along each axis, in the run
    axes = emit.const(_ints([1, 3]))

    def patch(position: Tuple[int, ...]) -> str:
        reached = [p * d for p, d in zip(position, dilations)]
        phase = (reached[0] % stride) * stride + reached[1] % stride if stride > 1 else 0
        first = sum((r // stride) * step for r, step in zip(reached, steps_of))
        return emit.one("Slice", [flat, emit.const(_ints([phase, first])), emit.const(_ints([phase + 1, first + run])),
                                  axes])  # [C, 1, N, run]

    dy_first = emit.one("Transpose", [dy], perm=[1, 0] + list(range(2, 2 + spatial)))  # [M, N, Y...]
    widen = [0] + [s - y for s, y in zip(sizes[1:], y_sizes[1:])]
    if any(widen):
        dy_first = emit.one("Pad", [dy_first, emit.const(_ints([0] * (2 + spatial) + [0, 0] + widen))])
    return dy_first, patch


def _one_hot_kernel(channels: int, kernel: List[int]) -> np.ndarray:
    """[C * K, 1, kernel...]: output channel c * K + j of a Conv with group C copies position j of channel c's
    window, so that the Conv's output is X's im2col columns, channel-major as dW lays them out."""
    positions = int(np.prod(kernel))
    eye = np.eye(positions, dtype=np.float32).reshape([positions, 1] + list(kernel))
    return np.tile(eye, [channels, 1] + [1] * len(kernel))


def _weight_gradient_by_columns(emit: Emitter, dy: str, x: str, channels: int, group: int, strides: List[int],
                                dilations: List[int], kernel: List[int], begin: List[int], end: List[int],
                                output: str) -> None:
    """dW from X's im2col columns made by one Conv (group C, a one-hot kernel: ``_one_hot_kernel``), [N, C * K,
    Y...], then one batched FusedMatMul per image, dY [N, g, Mg, Y] by the columns [N, g, Cg * K, Y] transposed,
    summed over the batch: ConvGrad's own im2col and GEMM per image, as wide as Cg * K."""
    positions = int(np.prod(kernel))
    spatial_axes = list(range(2, 2 + len(kernel)))
    if positions == 1 and all(s == 1 for s in strides) and not any(begin + end):
        columns = x  # a pointwise layer's columns are X itself
    elif positions == 1 and not any(begin + end):  # with a stride, every s-th of X: one Slice with steps
        columns = emit.one("Slice", [x, emit.const(_ints([0] * len(kernel))), emit.const(_ints([_LAST] * len(kernel))),
                                     emit.const(_ints(spatial_axes)), emit.const(_ints(strides))])
    else:
        ones = emit.cast_like(emit.const(_one_hot_kernel(channels, kernel)), x)
        columns = emit.one("Conv", [x, ones], group=channels, strides=strides, dilations=dilations, pads=begin + end)
    columns = emit.one("Reshape", [columns, emit.const(_ints([0, group, channels // group * positions, -1]))])
    rows = emit.one("Reshape", [dy, emit.one("Concat", [emit.const(_ints([0, group, -1])),
                                                        emit.shape_of(columns, 3, 4)], axis=0)])  # [N, g, Mg, Y]
    product = emit.one("FusedMatMul", [rows, columns], domain="com.microsoft", transB=1)  # [N, g, Mg, Cg * K]
    summed = emit.reduce("ReduceSum", product, [0], keepdims=False)
    emit.one("Reshape", [summed, emit.const(_ints([-1, channels // group] + list(kernel)))], output)


def _weight_gradient_by_conv(emit: Emitter, dy: str, x: str, w: str, group: int, strides: List[int],
                             dilations: List[int], kernel: Optional[List[int]], begin: List[int], end: List[int],
                             x_sizes: Optional[List[int]], output: str) -> None:
    """dW as a Conv whose batch is X's channels (of one group), whose channels are the batch (one block per
    group), and whose weights are dY with its batch as channels; the roles of strides and dilations swap. For
    kernels whose size is known only at run time (and opsets before 13)."""
    spatial = len(strides)
    spatial_axes = list(range(2, 2 + spatial))
    swap = [1, 0] + spatial_axes
    if group == 1:
        inputs = emit.one("Transpose", [x], perm=swap)
    else:
        split = emit.one("Concat", [emit.const(_ints([0, group, -1])), emit.shape_of(x, 2)], axis=0)
        grouped = emit.one("Reshape", [x, split])
        moved = emit.one("Transpose", [grouped], perm=[2, 1, 0] + [a + 1 for a in spatial_axes])
        merged = emit.one("Concat", [emit.const(_ints([0, -1])), emit.shape_of(x, 2)], axis=0)
        inputs = emit.one("Reshape", [moved, merged])
    weights = emit.one("Transpose", [dy], perm=swap)
    # The Conv reaches (X + pads - (Y - 1) * stride - 1) / dilation + 1 kernel positions, the kernel's size
    # or more: where the sizes are known, less end padding makes it exactly the kernel's size; else a
    # Slice cuts it.
    ends, exact = list(end), False
    if x_sizes is not None and kernel is not None:
        y_sizes = [(size + b + e - ((k - 1) * d + 1)) // s + 1
                   for size, b, e, k, d, s in zip(x_sizes, begin, end, kernel, dilations, strides)]
        reach = [(size + b + e - (ys - 1) * s - 1) // d + 1
                 for size, b, e, ys, s, d in zip(x_sizes, begin, end, y_sizes, strides, dilations)]
        ends = [e - (r - k) * d for e, r, k, d in zip(end, reach, kernel, dilations)]
        exact = all(e >= 0 for e in ends)
        ends = ends if exact else list(end)
    found = emit.one("Conv", [inputs, weights], group=group, strides=dilations, dilations=strides,
                     pads=begin + ends)
    if not exact:
        found = emit.one("Slice", [found, emit.const(_ints([0] * spatial)), emit.shape_of(w, 2),
                                   emit.const(_ints(spatial_axes))])
    emit.one("Transpose", [found], output, perm=swap)
