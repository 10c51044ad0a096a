"""Finite-difference cases of the convolution and pooling family: every attribute form (strides, pads,
auto_pad, dilations, groups, output_padding, ceil_mode, count_include_pad), 1-D to 3-D, ONNX Runtime's
kernels and the standard-operator forms, and symbolic batch sizes (a Conv in front of a pool, so that the
pool's input has a symbolic batch)."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from gradcheck import Case, case
from onnx import helper

rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(np.float32)


def distinct(*shape: int) -> np.ndarray:
    """Values at least 0.02 apart (a max pool's finite differences must not swap its maxima)."""
    values = rng.permutation(int(np.prod(shape))).astype(np.float32) * 0.02
    return (values - values.mean()).reshape(shape).astype(np.float32)


def after_conv(name: str, op: str, x_shape: Sequence[int], channels: int, opset: int = 17,
               **attributes: Any) -> Case:
    """Conv(x, w) then ``op``: x is data with a symbolic batch, w the checked parameter, so the pool's input
    has a symbolic batch and static other sizes (or what ``op`` makes of them)."""
    spatial = len(x_shape) - 2
    conv = helper.make_node("Conv", ["x", "w"], ["h"], pads=[1] * (2 * spatial))
    pool = helper.make_node(op, ["h"], ["y0"], **attributes)
    w = f32(channels, x_shape[1], *([3] * spatial))
    return Case(name, [conv, pool], {"w": w}, {"x": f32(*x_shape)}, opset=opset, symbolic_batch=True)


def one(name: str, op: str, inputs: List[Tuple[str, Any]], params: List[str], opset: int = 17,
        **attributes: Any) -> Case:
    c = case(name, op, inputs, params, **attributes)
    c.opset = opset
    return c


def checked_first(c: Case) -> Case:
    """Only the first output is weighed into the loss (the others are indices or statistics)."""
    c.outputs = ["y0"]
    return c


CASES: Dict[str, List[Case]] = {
    "Conv": [
        case("conv_2d_bias", "Conv", [("x", f32(2, 3, 5, 5)), ("w", f32(4, 3, 3, 3)), ("b", f32(4))], ["x", "w", "b"],
             pads=[1, 1, 1, 1]),
        case("conv_strides_dilations", "Conv", [("x", f32(1, 2, 7, 6)), ("w", f32(3, 2, 2, 3))], ["x", "w"],
             strides=[2, 1], dilations=[2, 1], pads=[0, 1, 1, 0]),
        case("conv_groups", "Conv", [("x", f32(1, 4, 5, 5)), ("w", f32(6, 2, 3, 3)), ("b", f32(6))], ["x", "w", "b"],
             group=2),
        case("conv_depthwise", "Conv", [("x", f32(2, 3, 4, 4)), ("w", f32(3, 1, 3, 3))], ["x", "w"], group=3,
             pads=[1, 1, 1, 1]),
        case("conv_1d", "Conv", [("x", f32(2, 3, 7)), ("w", f32(2, 3, 3)), ("b", f32(2))], ["x", "w", "b"],
             strides=[2]),
        case("conv_3d", "Conv", [("x", f32(1, 2, 4, 4, 3)), ("w", f32(2, 2, 2, 2, 2))], ["x", "w"],
             pads=[1, 0, 0, 0, 1, 1]),
        # Grouped, outside 2-D: one ConvGrad per group (ONNX Runtime's grouped ConvGrad writes past dX there)
        case("conv_3d_groups", "Conv", [("x", f32(2, 4, 3, 4, 3)), ("w", f32(6, 2, 2, 2, 2)), ("b", f32(6))],
             ["x", "w", "b"], group=2, pads=[1, 0, 1, 0, 1, 0]),
        case("conv_1d_depthwise", "Conv", [("x", f32(2, 3, 7)), ("w", f32(3, 1, 3))], ["x", "w"], group=3,
             strides=[2]),
        case("conv_same_upper", "Conv", [("x", f32(1, 2, 5, 6)), ("w", f32(2, 2, 3, 3))], ["x", "w"],
             auto_pad="SAME_UPPER", strides=[2, 2]),
        case("conv_weight_only", "Conv", [("x", f32(2, 3, 5, 5)), ("w", f32(4, 3, 3, 3)), ("b", f32(4))], ["w"]),
    ],
    "ConvTranspose": [
        case("conv_transpose_2d", "ConvTranspose", [("x", f32(1, 2, 3, 3)), ("w", f32(2, 3, 3, 3)), ("b", f32(3))],
             ["x", "w", "b"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        case("conv_transpose_groups", "ConvTranspose", [("x", f32(2, 4, 3, 3)), ("w", f32(4, 1, 2, 2))], ["x", "w"],
             group=2, strides=[2, 1], dilations=[1, 2]),
        case("conv_transpose_1d", "ConvTranspose", [("x", f32(2, 3, 4)), ("w", f32(3, 2, 3)), ("b", f32(2))],
             ["x", "w", "b"], strides=[3], pads=[0, 1], output_padding=[2]),
        case("conv_transpose_same_upper", "ConvTranspose", [("x", f32(1, 2, 3, 3)), ("w", f32(2, 2, 2, 3))],
             ["x", "w"], strides=[2, 2], auto_pad="SAME_UPPER"),
        case("conv_transpose_same_lower", "ConvTranspose", [("x", f32(1, 2, 3, 3)), ("w", f32(2, 2, 3, 2))],
             ["x", "w"], strides=[2, 2], auto_pad="SAME_LOWER"),
        case("conv_transpose_output_shape", "ConvTranspose", [("x", f32(1, 2, 3, 3)), ("w", f32(2, 2, 3, 3))],
             ["x", "w"], strides=[2, 2], output_shape=[6, 5]),
        case("conv_transpose_3d", "ConvTranspose", [("x", f32(1, 2, 2, 3, 2)), ("w", f32(2, 2, 2, 2, 2))], ["x", "w"],
             strides=[2, 1, 2]),
    ],
    "MaxPool": [
        case("max_pool_2d", "MaxPool", [("x", distinct(2, 3, 4, 4))], ["x"], kernel_shape=[2, 2], strides=[2, 2]),
        case("max_pool_overlapping", "MaxPool", [("x", distinct(1, 2, 5, 5))], ["x"], kernel_shape=[3, 3],
             pads=[1, 1, 1, 1]),
        case("max_pool_ceil_dilations", "MaxPool", [("x", distinct(1, 2, 7, 7))], ["x"], kernel_shape=[2, 2],
             strides=[2, 2], dilations=[2, 2], ceil_mode=1),
        case("max_pool_same_upper", "MaxPool", [("x", distinct(1, 2, 5, 5))], ["x"], kernel_shape=[2, 2],
             strides=[2, 2], auto_pad="SAME_UPPER"),
        # MaxPoolGrad under a symbolic batch (it takes the batch from dY, the other sizes from the graph)
        after_conv("max_pool_symbolic_batch", "MaxPool", (3, 2, 6, 6), 3, kernel_shape=[2, 2], strides=[2, 2]),
        case("max_pool_1d", "MaxPool", [("x", distinct(2, 2, 9))], ["x"], kernel_shape=[3], strides=[2]),
        case("max_pool_3d", "MaxPool", [("x", distinct(1, 2, 4, 4, 4))], ["x"], kernel_shape=[2, 2, 2],
             strides=[2, 2, 2]),
        checked_first(case("max_pool_indices_declared", "MaxPool", [("x", distinct(1, 2, 4, 4))], ["x"], outputs=2,
                           kernel_shape=[2, 2], strides=[2, 2])),
        case("max_pool_column_major", "MaxPool", [("x", distinct(2, 2, 5, 4))], ["x"], kernel_shape=[2, 2],
             strides=[1, 2], storage_order=1),
        case("max_pool_column_major_1d", "MaxPool", [("x", distinct(2, 2, 7))], ["x"], kernel_shape=[2],
             storage_order=1),
        one("max_pool_opset13", "MaxPool", [("x", distinct(2, 2, 4, 4))], ["x"], opset=13, kernel_shape=[2, 2],
            strides=[2, 2]),
        after_conv("max_pool_symbolic_batch", "MaxPool", (3, 2, 6, 6), 3, kernel_shape=[2, 2], strides=[2, 2]),
    ],
    "AveragePool": [
        case("average_pool_2d", "AveragePool", [("x", f32(2, 3, 4, 4))], ["x"], kernel_shape=[2, 2], strides=[2, 2]),
        case("average_pool_pads_excluded", "AveragePool", [("x", f32(1, 2, 5, 5))], ["x"], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1]),
        case("average_pool_pads_included", "AveragePool", [("x", f32(1, 2, 5, 5))], ["x"], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 0, 1, 1], count_include_pad=1),
        case("average_pool_1d", "AveragePool", [("x", f32(2, 2, 9))], ["x"], kernel_shape=[3], strides=[2],
             pads=[1, 1]),
        case("average_pool_ceil", "AveragePool", [("x", f32(1, 2, 6, 6))], ["x"], kernel_shape=[3, 3],
             strides=[2, 2], ceil_mode=1),
        case("average_pool_ceil_pads_included", "AveragePool", [("x", f32(1, 2, 6, 6))], ["x"], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
        case("average_pool_ceil_pads_excluded", "AveragePool", [("x", f32(1, 2, 7, 6))], ["x"], kernel_shape=[3, 2],
             strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1),
        one("average_pool_ceil_by_conv", "AveragePool", [("x", f32(1, 2, 7, 6))], ["x"], opset=19, kernel_shape=[3, 2],
            strides=[2, 2], pads=[1, 0, 1, 1], dilations=[1, 2], ceil_mode=1),
        case("average_pool_same_upper", "AveragePool", [("x", f32(1, 2, 5, 5))], ["x"], kernel_shape=[2, 2],
             strides=[2, 2], auto_pad="SAME_UPPER"),
        one("average_pool_dilations", "AveragePool", [("x", f32(1, 2, 7, 7))], ["x"], opset=19, kernel_shape=[2, 2],
            dilations=[2, 2], pads=[1, 1, 1, 1]),
        case("average_pool_3d", "AveragePool", [("x", f32(1, 2, 4, 4, 4))], ["x"], kernel_shape=[2, 2, 2],
             strides=[2, 2, 2]),
        case("average_pool_3d_padded", "AveragePool", [("x", f32(2, 3, 3, 4, 5))], ["x"], kernel_shape=[2, 3, 2],
             pads=[1, 1, 0, 0, 1, 1]),
        case("average_pool_1d_padded", "AveragePool", [("x", f32(2, 3, 7))], ["x"], kernel_shape=[3], pads=[1, 1],
             strides=[2]),
        after_conv("average_pool_symbolic_batch", "AveragePool", (3, 2, 6, 6), 3, kernel_shape=[3, 3],
                   strides=[2, 2], pads=[1, 1, 1, 1]),
    ],
    "LpPool": [
        case("lp_pool_2", "LpPool", [("x", f32(2, 3, 4, 4))], ["x"], kernel_shape=[2, 2], strides=[2, 2]),
        case("lp_pool_1_pads", "LpPool", [("x", f32(1, 2, 5, 5))], ["x"], kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1], p=1),
        case("lp_pool_3_1d", "LpPool", [("x", f32(2, 2, 7))], ["x"], kernel_shape=[3], strides=[2], p=3),
        one("lp_pool_18_dilations_ceil", "LpPool", [("x", f32(1, 2, 7, 7))], ["x"], opset=18, kernel_shape=[2, 2],
            strides=[2, 2], dilations=[2, 1], ceil_mode=1),
        after_conv("lp_pool_symbolic_batch", "LpPool", (3, 2, 6, 6), 3, kernel_shape=[2, 2], strides=[2, 2]),
    ],
    "LRN": [
        case("lrn_odd", "LRN", [("x", f32(2, 5, 3, 3))], ["x"], size=3, alpha=0.5, beta=0.75, bias=1.5),
        case("lrn_wide", "LRN", [("x", f32(1, 6, 2, 3))], ["x"], size=5, alpha=0.8, beta=0.6),
        after_conv("lrn_symbolic_batch", "LRN", (3, 2, 4, 4), 4, size=3, alpha=0.3),
    ],
    "GlobalAveragePool": [
        case("global_average_pool", "GlobalAveragePool", [("x", f32(2, 3, 4, 5))], ["x"]),
        after_conv("global_average_pool_symbolic_batch", "GlobalAveragePool", (3, 2, 5, 5), 3),
        Case("global_average_pool_sizes_unknown", [helper.make_node("Reshape", ["x_flat", "x_shape"], ["x"]),
                                                   helper.make_node("GlobalAveragePool", ["x"], ["y0"])],
             {"x_flat": f32(60)}, {"x_shape": np.array([2, 3, 2, 5], np.int64)}),
    ],
    "GlobalMaxPool": [
        case("global_max_pool", "GlobalMaxPool", [("x", distinct(2, 3, 4, 5))], ["x"]),
        after_conv("global_max_pool_symbolic_batch", "GlobalMaxPool", (3, 2, 5, 5), 3),
    ],
}
