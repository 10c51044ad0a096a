"""Convolution and pooling gradients, lowered: each agrees with ONNX Runtime 1.19.2's training kernel, on
1.19.2 and on 1.31.1 (tests/support/lowering_check.py), in 1-D, 2-D and 3-D, with groups, strides, pads,
dilations and auto_pad, with sizes declared and with sizes known only at run time."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from lowering_check import (CURRENT_VERSION, assert_close, check_lowering,  # noqa: F401  (a fixture)
                            current_runtime, one_node_model, run_training_build)
from onnx import TensorProto, helper

from ort_cffi._backends.engine.lowering import UnsupportedTrainingOpError, convolution, lower_training_ops

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

rng = np.random.default_rng(5)


def values(shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv_output_shape(x, w, **attributes):
    """Conv's output shape, from the runtime's own Conv."""
    import onnxruntime  # the training build (needs_onnxruntime_python)

    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attributes)], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8)
    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x, "w": w})[0].shape


CASES = {
    "2d": ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    "2d_stride_pad": ((2, 3, 9, 8), (4, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    "2d_dilation": ((2, 3, 11, 10), (4, 3, 3, 3), {"dilations": [2, 3], "pads": [1, 1, 1, 1]}),
    "2d_groups": ((2, 4, 8, 8), (6, 2, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "2d_depthwise": ((2, 4, 7, 7), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "2d_same_upper": ((1, 2, 7, 6), (3, 2, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "2d_same_lower": ((1, 2, 7, 6), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    "2d_valid": ((1, 2, 7, 6), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [3, 2]}),
    "1d": ((3, 2, 17), (5, 2, 4), {"strides": [3], "pads": [2, 1]}),
    "1d_groups_dilation": ((3, 4, 17), (4, 2, 3), {"group": 2, "dilations": [2]}),
    "3d": ((2, 2, 5, 6, 5), (3, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}),
    "2d_pointwise_stride": ((2, 6, 7, 7), (8, 6, 1, 1), {"strides": [2, 2]}),
    "2d_depthwise_dilation": ((2, 3, 9, 8), (3, 1, 3, 2), {"group": 3, "dilations": [2, 1], "pads": [2, 0, 1, 1]}),
    "2d_depthwise_stride": ((2, 4, 9, 9), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "1d_depthwise": ((2, 5, 11), (5, 1, 5), {"group": 5, "pads": [2, 1]}),
    "3d_groups_dilation": ((1, 4, 6, 7, 6), (4, 2, 2, 2, 3), {"group": 2, "dilations": [2, 1, 1], "pads": [0, 1, 1, 1, 0, 1]}),
    # the patches from X's phases (one stride along both axes): with dilation, uneven pads, sizes that are
    # not a multiple of the stride, a kernel larger than the stride
    "2d_stride_dilation": ((2, 3, 13, 11), (4, 3, 3, 2), {"strides": [2, 2], "dilations": [2, 1], "pads": [1, 2, 0, 1]}),
    "2d_stride3_kernel4": ((2, 5, 14, 10), (6, 5, 4, 4), {"strides": [3, 3], "pads": [1, 0, 2, 1]}),
    "2d_groups_stride_dilation": ((2, 6, 12, 12), (4, 3, 3, 3), {"group": 2, "strides": [2, 2], "dilations": [2, 2]}),
    # without a stride over wide maps: the patches as flat runs too (convolution._flat_rows_pay), with dilation
    # and uneven pads
    "2d_wide": ((2, 3, 6, 20), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "2d_wide_dilation": ((2, 3, 7, 40), (4, 3, 3, 2), {"dilations": [2, 3], "pads": [2, 0, 1, 3]}),
    # dX of depthwise layers as a Conv with the kernel flipped: a multiplier, 3-D with dilation, and pads past
    # the kernel's reach (which keep the ConvTranspose)
    "2d_depthwise_multiplier": ((2, 3, 7, 6), (6, 1, 3, 2), {"group": 3, "pads": [1, 0, 1, 1]}),
    "3d_depthwise_dilation": ((1, 2, 6, 5, 6), (2, 1, 2, 3, 2), {"group": 2, "dilations": [2, 1, 2], "pads": [1, 1, 0, 2, 0, 1]}),
    "2d_depthwise_wide_pads": ((2, 3, 5, 5), (3, 1, 2, 2), {"group": 3, "pads": [2, 1, 1, 2]}),
    # groups of one output channel and several inputs: the kernel's reordering for dX as a Conv swaps no axis
    "2d_groups_one_output": ((2, 4, 6, 5), (2, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 1]}),
    # pointwise without a stride: the patch is X itself
    "2d_pointwise": ((2, 6, 5, 4), (8, 6, 1, 1), {}),
    "1d_pointwise_groups": ((2, 4, 7), (6, 2, 1), {"group": 2}),
}


def explicit_pads(x_shape, w_shape, attributes):
    """The pads a forward Conv with ``auto_pad`` SAME resolves (ONNX's rule), as explicit ``pads``."""
    strides, spatial = attributes.get("strides", [1] * (len(x_shape) - 2)), len(x_shape) - 2
    dilations = attributes.get("dilations", [1] * spatial)
    begin, end = [], []
    for size, s, d, k in zip(x_shape[2:], strides, dilations, w_shape[2:]):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        first = total // 2 if attributes["auto_pad"] == "SAME_UPPER" else total - total // 2
        begin.append(first)
        end.append(total - first)
    return dict({k: v for k, v in attributes.items() if k != "auto_pad"}, pads=begin + end)


@pytest.fixture(params=["patches", "columns", "conv"])
def weight_form(request, monkeypatch):
    """Each of dW's three forms (the lowering picks the fastest for the shapes: each must be right everywhere)."""
    monkeypatch.setattr(convolution, "weight_gradient_form", lambda *_: request.param)
    return request.param


@pytest.mark.parametrize("case,symbolic", [(c, s) for c in sorted(CASES) for s in (False, True)
                                           if not (s and c.startswith("2d_same"))])  # refused: tested below
def test_conv_grad(case, symbolic, weight_form, current_runtime):
    x_shape, w_shape, attributes = CASES[case]
    x, w = values(x_shape), values(w_shape)
    y_shape = conv_output_shape(x, w, **attributes)
    feeds = {"dY": values(y_shape), "X": x, "W": w}
    outputs = [("dX", np.float32, x_shape), ("dW", np.float32, w_shape), ("dB", np.float32, (w_shape[0],))]
    model = one_node_model("ConvGrad", feeds, outputs, symbolic=symbolic, kernel_shape=list(w_shape[2:]),
                           **attributes)
    if attributes.get("auto_pad", "NOTSET").startswith("SAME"):
        # 1.19.2's kernel reads pads, not auto_pad, and scrambles its result there: the reference is the
        # gradient of the forward Conv, its kernel with the pads the forward resolved
        reference = one_node_model("ConvGrad", feeds, outputs, kernel_shape=list(w_shape[2:]),
                                   **explicit_pads(x_shape, w_shape, attributes))
        lowered = lower_training_ops(model)
        expected = run_training_build(reference, feeds)
        assert_close(run_training_build(lowered, feeds), expected, 1e-5, "lowered, on 1.19.2")
        assert_close(current_runtime.run(lowered, feeds), expected, 1e-5, f"lowered, on {CURRENT_VERSION}")
        return
    check_lowering(model, feeds, current_runtime)


def _explicit_conv_grad(case, symbolic):
    """The case's ConvGrad model with its pads written out (SAME resolved) and its feeds."""
    x_shape, w_shape, attributes = CASES[case]
    if attributes.get("auto_pad", "NOTSET").startswith("SAME"):
        attributes = explicit_pads(x_shape, w_shape, attributes)
    x, w = values(x_shape), values(w_shape)
    feeds = {"dY": values(conv_output_shape(x, w, **attributes)), "X": x, "W": w}
    outputs = [("dX", np.float32, x_shape), ("dW", np.float32, w_shape), ("dB", np.float32, (w_shape[0],))]
    model = one_node_model("ConvGrad", feeds, outputs, symbolic=symbolic, kernel_shape=list(w_shape[2:]),
                           **attributes)
    return x_shape, w_shape, attributes, feeds, model


@pytest.mark.parametrize("case,symbolic", [(c, s) for c in sorted(CASES) for s in (False, True)])
def test_conv_grad_for_two_threads(case, symbolic, current_runtime):
    """Lowered for sessions of two intra-op threads, layers without a stride take dX as a Conv of dY with the
    kernel flipped and its channel axes swapped (convolution.input_gradient_by_conv): right with groups,
    dilations and uneven pads, with sizes declared (written where the rule says, for two threads and for one)
    and known only at run time."""
    x_shape, w_shape, attributes, feeds, model = _explicit_conv_grad(case, symbolic)
    lowered = check_lowering(model, feeds, current_runtime, intra_op_threads=2)
    if symbolic:
        return
    spatial = len(x_shape) - 2
    strides = attributes.get("strides", [1] * spatial)
    pads = attributes.get("pads", [0] * 2 * spatial)
    dilations = attributes.get("dilations", [1] * spatial)
    y_count = int(np.prod(feeds["dY"].shape[2:]))
    for threads, model_for in ((2, lowered), (1, lower_training_ops(model, 1))):
        by_conv = convolution.input_gradient_by_conv(strides, list(w_shape[2:]), dilations, pads[:spatial],
                                                     pads[spatial:], list(w_shape), attributes.get("group", 1),
                                                     y_count, threads)
        depthwise = w_shape[1] == 1 and all(s == 1 for s in strides) and \
            all(p <= (k - 1) * d for p, k, d in zip(pads, list(w_shape[2:]) * 2, dilations * 2))
        dx_ops = {n.op_type for n in model_for.graph.node if "dX" in n.output}
        assert dx_ops == ({"Conv"} if by_conv or depthwise else {"ConvTranspose"}), threads


@pytest.mark.parametrize("case,symbolic", [(c, s) for c in sorted(CASES) for s in (False, True)])
def test_conv_grad_input_gradient_by_conv_everywhere(case, symbolic, monkeypatch, current_runtime):
    """dX as a Conv wherever it can be written (the rule picks it for some shapes only: it must be right for
    all), with groups, dilations, uneven pads, 1-D to 3-D."""
    monkeypatch.setattr(convolution, "input_gradient_by_conv",
                        lambda strides, kernel, dilations, begin, end, *_: convolution.input_gradient_conv_applies(
                            strides, kernel, dilations, begin, end))
    *_, feeds, model = _explicit_conv_grad(case, symbolic)
    check_lowering(model, feeds, current_runtime)


def test_input_gradient_by_conv_rule():
    """Where dX is a Conv, by the measured rule: 1x1 kernels (group 1) at any thread count, larger kernels at two
    threads over maps of more than 64 positions; never with a stride or with pads past the kernel's reach."""
    def rule(w_dims, positions, threads, strides=(1, 1), pads=(1, 1), group=1):
        kernel = list(w_dims[2:])
        return convolution.input_gradient_by_conv(list(strides), kernel, [1, 1], list(pads), list(pads),
                                                  list(w_dims), group, positions, threads)
    assert rule((32, 32, 3, 3), 1024, 2) and not rule((32, 32, 3, 3), 1024, 1)
    assert rule((64, 64, 3, 3), 256, 2) and rule((64, 64, 3, 3), None, 2)
    assert not rule((128, 128, 3, 3), 64, 2) and not rule((256, 256, 3, 3), 16, 2)
    assert rule((24, 96, 1, 1), 576, 1, pads=(0, 0)) and rule((512, 128, 1, 1), 16, 1, pads=(0, 0))
    assert not rule((8, 4, 1, 1), 64, 1, pads=(0, 0), group=2) and rule((8, 4, 1, 1), 64, 2, pads=(0, 0), group=2)
    assert not rule((32, 32, 3, 3), 1024, 2, strides=(2, 2))
    assert not rule((32, 32, 3, 3), 1024, 2, pads=(3, 1))


@pytest.mark.parametrize("wanted", [(1, 0, 0), (0, 1, 1)])
def test_conv_grad_some_outputs(wanted, current_runtime):
    x_shape, w_shape, attributes = CASES["2d_stride_pad"]
    x, w = values(x_shape), values(w_shape)
    feeds = {"dY": values(conv_output_shape(x, w, **attributes)), "X": x, "W": w}
    outputs = [(name if want else "", np.float32, shape) for name, want, shape in
               zip(["dX", "dW", "dB"], wanted, [x_shape, w_shape, (w_shape[0],)])]
    check_lowering(one_node_model("ConvGrad", feeds, outputs, **attributes), feeds, current_runtime)


def test_conv_grad_same_pads_need_sizes():
    """SAME pads follow from the input's sizes: unknown before run time, the node is refused by name."""
    x, w = values((1, 2, 7, 6)), values((3, 2, 3, 3))
    feeds = {"dY": values((1, 3, 4, 3)), "X": x, "W": w}
    model = one_node_model("ConvGrad", feeds, [("dX", np.float32, None)], symbolic=True, auto_pad="SAME_UPPER",
                           strides=[2, 2])
    with pytest.raises(UnsupportedTrainingOpError, match="ConvGrad") as refused:
        lower_training_ops(model)
    assert refused.value.ops == ["ConvGrad"] and "auto_pad SAME_UPPER" in str(refused.value)


POOLS = {
    "2d": ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "2d_overlap_pads": ((2, 3, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "2d_ceil": ((1, 2, 9, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
    "1d": ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),
    "3d": ((1, 2, 5, 6, 4), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 1]}),
    # windows apart (MaxUnpool): padded, with sizes the windows do not cover, ceil_mode, dilated, gaps between
    "2d_apart_pads": ((2, 3, 9, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 0, 0, 1]}),
    "2d_apart_ceil": ((1, 2, 9, 7), {"kernel_shape": [2, 3], "strides": [2, 3], "ceil_mode": 1}),
    "2d_apart_dilated_gaps": ((2, 2, 11, 10), {"kernel_shape": [2, 2], "strides": [3, 4], "dilations": [2, 1]}),
    "1d_apart": ((2, 3, 12), {"kernel_shape": [3], "strides": [3]}),
    "3d_apart": ((1, 2, 4, 6, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
}
AVERAGE_POOLS = sorted(c for c in POOLS if "dilations" not in POOLS[c][1])  # AveragePool has them from opset 19


def pool_model(op, x_shape, attributes, with_forward):
    """A forward pool (for MaxPool: its Indices) and the gradient operator, in the default domain as ONNX
    Runtime's gradient builder writes them."""
    forward_outputs = ["Y", "I"] if op == "MaxPool" else ["Y"]
    nodes = [helper.make_node(op, ["X"], forward_outputs, **attributes)]
    grad_inputs = ["dY", "I"] if op == "MaxPool" else ["dY"]
    nodes.append(helper.make_node(op + "Grad", grad_inputs, ["dX"], **({} if op == "MaxPool" else attributes)))
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape),
                                              helper.make_tensor_value_info("dY", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("dX", TensorProto.FLOAT, x_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def pool_output(op, x, attributes):
    import onnxruntime  # the training build (needs_onnxruntime_python)

    model = helper.make_model(helper.make_graph(
        [helper.make_node(op, ["X"], ["Y"], **attributes)], "probe",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8)
    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"X": x})[0].shape


@pytest.mark.parametrize("case", sorted(POOLS))
def test_max_pool_grad(case, current_runtime):
    x_shape, attributes = POOLS[case]
    x = values(x_shape)
    feeds = {"X": x, "dY": values(pool_output("MaxPool", x, attributes))}
    check_lowering(pool_model("MaxPool", x_shape, attributes, True), feeds, current_runtime, exact=True)


# MaxPool with its Indices, restated where the windows tile the input (convolution.max_pool): sizes the windows
# do not divide, 3x3 windows, ceil_mode with sizes they divide, VALID, and the zoo's size
TILING_POOLS = {
    "2x2": ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "2x2_uneven": ((2, 3, 9, 7), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3": ((1, 2, 9, 12), {"kernel_shape": [3, 3], "strides": [3, 3]}),
    "ceil_divided": ((2, 2, 8, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    "valid": ((1, 3, 6, 6), {"kernel_shape": [3, 3], "strides": [3, 3], "auto_pad": "VALID"}),
    "zoo": ((16, 16, 32, 32), {"kernel_shape": [2, 2], "strides": [2, 2]}),
}


def max_pool_model(x_shape, attributes, symbolic=False):
    """MaxPool with its Y and Indices as the graph's outputs."""
    dims = ["n", "c"] + list(x_shape[2:]) if symbolic else list(x_shape)
    graph = helper.make_graph([helper.make_node("MaxPool", ["X"], ["Y", "I"], **attributes)], "max_pool",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("I", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def with_ties(x_shape):
    """Values with many ties in a window (whole numbers, a row of zeros) and an infinite one: the Indices
    point at each window's first maximum, as the kernel's do."""
    x = values(x_shape)
    x[:, :, : x_shape[2] // 2] = np.round(x[:, :, : x_shape[2] // 2])
    x[:, :, -1] = 0.0
    x[(0, 0) + (-1,) * (len(x_shape) - 2)] = -np.inf
    return x


@pytest.mark.parametrize("case,symbolic", [(c, s) for c in sorted(TILING_POOLS) for s in (False, True)])
def test_max_pool_indices_restated(case, symbolic, current_runtime):
    """Y and the Indices bit for bit as 1.19.2's kernel gives them, on 1.19.2 and 1.31.1, the pool written
    without its Indices output."""
    x_shape, attributes = TILING_POOLS[case]
    model = max_pool_model(x_shape, attributes, symbolic)
    lowered = check_lowering(model, {"X": with_ties(x_shape)}, current_runtime, exact=True)
    pools = [n for n in lowered.graph.node if n.op_type == "MaxPool"]
    assert len(pools) == 1 and len([o for o in pools[0].output if o]) == 1
    assert "SpaceToDepth" in {n.op_type for n in lowered.graph.node}


@pytest.mark.parametrize("case", ["2d_overlap_pads", "2d_ceil", "1d", "3d", "2d_apart_dilated_gaps"])
def test_max_pool_indices_kept_where_windows_do_not_tile(case, current_runtime):
    """Overlapping, padded, partial, dilated or spaced windows, 1-D and 3-D: the kernel's own Indices."""
    x_shape, attributes = POOLS[case]
    lowered = check_lowering(max_pool_model(x_shape, attributes), {"X": with_ties(x_shape)}, current_runtime,
                             exact=True)
    assert [len(n.output) for n in lowered.graph.node if n.op_type == "MaxPool"] == [2]


def test_max_pool_with_a_nan_window_stays_in_bounds(current_runtime):
    """A window of NaN matches no maximum: its index is still a position of X, so MaxPoolGrad's MaxUnpool
    writes inside dX (the runtime refuses an index out of bounds)."""
    x_shape, attributes = TILING_POOLS["2x2"]
    x = values(x_shape)
    x[0, 0, :2, :2] = np.nan
    lowered = lower_training_ops(max_pool_model(x_shape, attributes))
    _, indices = current_runtime.run(lowered, {"X": x})
    assert indices.min() >= 0 and indices.max() < x.size
    dy = values(pool_output("MaxPool", x, attributes))
    (dx,) = current_runtime.run(lower_training_ops(pool_model("MaxPool", x_shape, attributes, True)),
                                {"X": x, "dY": dy})
    assert dx.shape == x_shape and np.isfinite(dx).all()


def test_max_pool_grad_through_restated_indices_matches_finite_differences(current_runtime):
    """dX of the restated pool and MaxPoolGrad, projected on random directions, against central differences
    of a 2x2 max pool written plainly in float64 (values 0.01 apart and steps of 1e-3 along directions of
    magnitude below 5: no window's maximum moves)."""
    x_shape, attributes = TILING_POOLS["2x2_uneven"]
    x = (np.random.default_rng(3).permutation(int(np.prod(x_shape))).reshape(x_shape) * 0.01).astype(np.float32)
    dy = values(pool_output("MaxPool", x, attributes))
    (dx,) = current_runtime.run(lower_training_ops(pool_model("MaxPool", x_shape, attributes, True)),
                                {"X": x, "dY": dy})
    rows, columns = x_shape[2] // 2, x_shape[3] // 2

    def pooled(v):
        return v[:, :, :rows * 2, :columns * 2].reshape(x_shape[0], x_shape[1], rows, 2, columns, 2).max(axis=(3, 5))

    for seed in range(3):
        direction = np.clip(np.random.default_rng(seed).standard_normal(x_shape), -4.9, 4.9)
        step = 1e-3
        difference = float(np.sum((pooled(x + step * direction) - pooled(x - step * direction)) * dy) / (2 * step))
        projected = float(np.sum(dx.astype(np.float64) * direction))
        assert abs(projected - difference) <= 1e-5 * (abs(difference) + 1.0), (projected, difference)


def average_pool_gradient(dy, x_shape, kernel, strides, pads, count_include_pad):
    """AveragePool's gradient written plainly: each dY element, over its window's count, spread on the window
    (the window clipped to the input, as 1.19.2's 1-D and 2-D kernels clip it)."""
    spatial = len(kernel)
    dx = np.zeros(x_shape, np.float64)
    for position in np.ndindex(*dy.shape[2:]):
        lows = [max(p * s - b, 0) for p, s, b in zip(position, strides, pads[:spatial])]
        highs = [min(p * s - b + k, n) for p, s, b, k, n in zip(position, strides, pads[:spatial], kernel, x_shape[2:])]
        count = np.prod(kernel) if count_include_pad else np.prod([h - lo for h, lo in zip(highs, lows)])
        window = (slice(None), slice(None)) + tuple(slice(lo, h) for lo, h in zip(lows, highs))
        dx[window] += dy[(slice(None), slice(None)) + position][(...,) + (None,) * spatial] / count
    return dx.astype(np.float32)


@pytest.mark.parametrize("case", AVERAGE_POOLS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_grad(case, count_include_pad, current_runtime):
    x_shape, attributes = POOLS[case]
    attributes = dict(attributes, count_include_pad=count_include_pad)
    x = values(x_shape)
    feeds = {"X": x, "dY": values(pool_output("AveragePool", x, attributes))}
    model = pool_model("AveragePool", x_shape, attributes, True)
    if len(x_shape) == 5:
        # 1.19.2's 3-D kernel assigns where it should add and walks dX in another layout: its result is not
        # the gradient. The reference is the gradient written plainly.
        expected = [average_pool_gradient(feeds["dY"], x_shape, attributes["kernel_shape"], attributes["strides"],
                                          attributes.get("pads", [0] * 6), count_include_pad)]
        lowered = lower_training_ops(model)
        assert_close(run_training_build(lowered, feeds), expected, 1e-5, "lowered, on 1.19.2")
        assert_close(current_runtime.run(lowered, feeds), expected, 1e-5, f"lowered, on {CURRENT_VERSION}")
        return
    if count_include_pad and attributes.get("ceil_mode"):
        # the windows past the end pads divide as each runtime's forward does (the test below)
        assert_close(run_training_build(lower_training_ops(model), feeds), run_training_build(model, feeds), 1e-5,
                     "lowered, on 1.19.2")
        return
    check_lowering(model, feeds, current_runtime)
    expected = average_pool_gradient(feeds["dY"], x_shape, attributes["kernel_shape"], attributes["strides"],
                                      attributes.get("pads", [0] * 4), count_include_pad)
    assert_close(run_training_build(model, feeds), [expected], 1e-5, "the 1.19.2 kernel, against the plain form")


CEIL_AVERAGE_POOLS = {
    "1d": ((2, 3, 8), {"kernel_shape": [3], "strides": [2], "ceil_mode": 1}),
    "1d_pads": ((2, 3, 8), {"kernel_shape": [3], "strides": [2], "ceil_mode": 1, "pads": [1, 1]}),
    "2d": POOLS["2d_ceil"],
    "2d_apart": POOLS["2d_apart_ceil"],
}


@pytest.mark.parametrize("case", sorted(CEIL_AVERAGE_POOLS))
def test_average_pool_grad_with_ceil_windows_is_the_gradient_of_each_runtimes_pool(case, current_runtime):
    """With count_include_pad 1, a window ceil_mode adds past the end pads divides by the kernel's size on
    1.19.2 and by its positions inside the input and pads on 1.31.1 (as in torch): the lowered gradient, on
    each runtime, against central differences of that runtime's own AveragePool (linear: exact but for
    rounding). Before, the lowering divided by the kernel's size on both, which on 1.31.1 trained a model
    exported from torch's AvgPool1d(3, stride=2, ceil_mode=True) with gradients 20-140% off."""
    x_shape, attributes = CEIL_AVERAGE_POOLS[case]
    attributes = dict(attributes, count_include_pad=1)
    x = values(x_shape)
    dy = values(pool_output("AveragePool", x, attributes))
    lowered = lower_training_ops(pool_model("AveragePool", x_shape, attributes, True))
    forward = helper.make_model(helper.make_graph(
        [helper.make_node("AveragePool", ["X"], ["Y"], **attributes)], "forward",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8)
    for where, run in (("1.19.2", run_training_build), (CURRENT_VERSION, current_runtime.run)):
        (dx,) = run(lowered, {"X": x, "dY": dy})
        for seed in range(3):
            direction = np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)
            ahead, behind = (run(forward, {"X": x + sign * direction})[0] for sign in (1, -1))
            difference = float(np.sum((ahead.astype(np.float64) - behind) * dy)) / 2
            projected = float(np.sum(dx.astype(np.float64) * direction))
            assert abs(projected - difference) <= 1e-4 * (abs(difference) + 1.0), (where, projected, difference)


def test_lowered_models_are_standard_onnx():
    x_shape, attributes = POOLS["2d_overlap_pads"]
    lowered = lower_training_ops(pool_model("MaxPool", x_shape, attributes, True))
    assert {n.domain for n in lowered.graph.node} == {""}
    assert all(onnx.defs.has(n.op_type) for n in lowered.graph.node)


def forward_value(op, inputs, attributes, dy):
    """sum(op(inputs) * dY) by the runtime's own forward operator: its gradient in each input is what the
    gradient operators compute for that dY."""
    import onnxruntime  # the training build (needs_onnxruntime_python)

    names = [f"in{i}" for i in range(len(inputs))]
    model = helper.make_model(helper.make_graph(
        [helper.make_node(op, names, ["y"], **attributes)], "forward",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8)
    y = onnxruntime.InferenceSession(model.SerializeToString()).run(None, dict(zip(names, inputs)))[0]
    return float(np.sum(y.astype(np.float64) * dy))


def directional_derivatives(op, inputs, attributes, dy, which, directions=3):
    """Central differences of sum(op(inputs) * dY) along random directions of input ``which``. The forward
    operators here are linear in that input, so the differences are exact but for rounding."""
    found = []
    for seed in range(directions):
        direction = np.random.default_rng(seed).standard_normal(inputs[which].shape).astype(np.float32)
        plus = [v + direction if i == which else v for i, v in enumerate(inputs)]
        minus = [v - direction if i == which else v for i, v in enumerate(inputs)]
        found.append((direction, (forward_value(op, plus, attributes, dy) - forward_value(op, minus, attributes, dy)) / 2))
    return found


@pytest.mark.parametrize("case", ["2d_same_upper", "2d_same_lower", "2d_groups", "3d"])
def test_conv_grad_forms_match_finite_differences(case, weight_form, current_runtime):
    """The lowered dX and dW, projected on random directions, against central differences of Conv itself
    (independent of the training kernels, which give no gradient with SAME pads)."""
    x_shape, w_shape, attributes = CASES[case]
    x, w = values(x_shape), values(w_shape)
    dy = values(conv_output_shape(x, w, **attributes))
    feeds = {"dY": dy, "X": x, "W": w}
    model = one_node_model("ConvGrad", feeds, [("dX", np.float32, x_shape), ("dW", np.float32, w_shape)],
                           kernel_shape=list(w_shape[2:]), **attributes)
    dx, dw = current_runtime.run(lower_training_ops(model), feeds)
    for which, gradient in ((0, dx), (1, dw)):
        for direction, difference in directional_derivatives("Conv", [x, w], attributes, dy, which):
            projected = float(np.sum(gradient.astype(np.float64) * direction))
            assert abs(projected - difference) <= 1e-4 * (abs(difference) + 1.0), (case, which, projected, difference)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_grad_3d_matches_finite_differences(count_include_pad, current_runtime):
    x_shape, attributes = POOLS["3d"]
    attributes = dict(attributes, count_include_pad=count_include_pad, pads=[1, 0, 1, 0, 1, 1])
    x = values(x_shape)
    dy = values(pool_output("AveragePool", x, attributes))
    (dx,) = current_runtime.run(lower_training_ops(pool_model("AveragePool", x_shape, attributes, True)),
                                {"X": x, "dY": dy})
    for direction, difference in directional_derivatives("AveragePool", [x], attributes, dy, 0):
        projected = float(np.sum(dx.astype(np.float64) * direction))
        assert abs(projected - difference) <= 1e-4 * (abs(difference) + 1.0), (projected, difference)


def test_the_faster_weight_form_is_picked_by_the_shapes():
    """The rule measured in convolution.weight_gradient_form: pointwise convolutions whose per-image products
    outgrow their inputs and layers of several input channels per group take the patches; few input channels
    per group (RGB, strided depthwise, strided with small kernels) and the other pointwise layers the columns;
    tiny maps, large kernels over small maps, and a weight whose shape is not known the Conv."""
    form = convolution.weight_gradient_form
    assert form([1, 1], [64, 32, 1, 1], 1, 64, [2, 2]) == "columns"  # a strided shortcut: every other of X
    assert form([1, 1], [64, 32, 1, 1], 2, 64, [2, 2]) == "patches"
    assert form([3, 3], [64, 32, 3, 3], 1, 64, [1, 1]) == "patches"
    assert form([3, 3], [64, 32, 3, 3], 1) == "patches"  # sizes known only at run time
    assert form([4, 4], [16, 16, 4, 4], 1, 256, [2, 2]) == "patches"
    assert form([4, 4], [32, 16, 4, 4], 1, 64, [2, 2]) == "conv"
    assert form([3, 3], [16, 3, 3, 3], 1, 1024, [1, 1]) == "columns"
    assert form([3, 3], [48, 1, 3, 3], 48, 64, [2, 2]) == "columns"
    assert form([3, 3], [32, 16, 3, 3], 1, 64, [2, 2]) == "columns"  # strided, few inputs, a small kernel
    assert form([3, 3], [32, 16, 3, 3], 1, 64, [1, 1]) == "patches"
    assert form([3, 3], [64, 32, 3, 3], 1, 64, [2, 2]) == "patches"
    assert form([3, 3], [16, 16, 3, 3], 1, 256, [2, 2]) == "patches"  # the kernel not at most half the outputs
    assert form([3, 3], [48, 1, 3, 3], 48, 64, [1, 1]) == "patches"
    assert form([3, 3], [144, 1, 3, 3], 144, 4, [1, 1]) == "conv"
    assert form([1, 1], [96, 1, 1, 1], 96, 4, [1, 1]) == "patches"
    assert form([1, 1], [48, 8, 1, 1], 1, 256, [1, 1]) == "columns"  # pointwise: X itself, per image
    assert form([1, 1], [96, 16, 1, 1], 1, 4, [1, 1]) == "patches"  # the per-image products outgrow the inputs
    assert form([1, 1], [1280, 80, 1, 1], 1, 1, [1, 1]) == "patches"
    assert form([3, 3], None, 1) == "conv"
