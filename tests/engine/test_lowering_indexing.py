"""Elementwise, indexing and shape training operators, lowered: each agrees with ONNX Runtime 1.19.2's
training kernel, on 1.19.2 and on 1.31.1 (tests/support/lowering_check.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from lowering_check import check_lowering, current_runtime, one_node_model  # noqa: F401  (a fixture)

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

rng = np.random.default_rng(11)


def values(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)),
                                             ((3, 4), (2, 3, 4)), ((), (2, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_div_grad(a_shape, b_shape, dtype, current_runtime):
    out_shape = np.broadcast_shapes(a_shape, b_shape)
    feeds = {"dY": values(out_shape, dtype), "A": values(a_shape, dtype),
             "B": (np.abs(values(b_shape, dtype)) + 0.5).astype(dtype)}
    model = one_node_model("DivGrad", feeds, [("dA", dtype, a_shape), ("dB", dtype, b_shape)])
    check_lowering(model, feeds, current_runtime)


def test_div_grad_one_output(current_runtime):
    feeds = {"dY": values((2, 3)), "A": values((2, 3)), "B": values((3,)) + 3}
    check_lowering(one_node_model("DivGrad", feeds, [("", np.float32, None), ("dB", np.float32, (3,))]), feeds,
                   current_runtime)


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("scale_down", [0, 1])
def test_scale(scale_dtype, scale_down, current_runtime):
    feeds = {"X": values((3, 5)), "scale": np.array(3, scale_dtype)}
    check_lowering(one_node_model("Scale", feeds, [("Y", np.float32, (3, 5))], scale_down=scale_down), feeds,
                   current_runtime)


@pytest.mark.parametrize("a,b", [([2, 3, 4], [2, 3, 4]), ([2, 3, 4], [4]), ([4], [2, 3, 4]), ([2, 1, 4], [3, 1]),
                                 ([], [5, 2]), ([1, 1], [1]), ([5, 1, 3], [5, 7, 1]), ([1, 4, 1], [3, 4, 1]),
                                 ([3, 1, 2], [1, 2]), ([2], [])])
@pytest.mark.parametrize("ranks_known", [True, False])
def test_broadcast_gradient_args(a, b, ranks_known, current_runtime):
    feeds = {"a_shape": np.array(a, np.int64), "b_shape": np.array(b, np.int64)}
    model = one_node_model("BroadcastGradientArgs", feeds, [("a_axes", np.int64, None), ("b_axes", np.int64, None)],
                           symbolic=not ranks_known)
    lowered = check_lowering(model, feeds, current_runtime, exact=True)
    # ranks known when the model is lowered: the sizes compared in the kernel's order, 11 nodes at most
    computed = [n for n in lowered.graph.node if n.op_type not in ("Constant", "Identity")]
    assert not ranks_known or len(computed) <= 11, [n.op_type for n in computed]


def test_broadcast_gradient_args_one_output(current_runtime):
    feeds = {"a_shape": np.array([1, 4, 1], np.int64), "b_shape": np.array([2, 3, 4, 5], np.int64)}
    for outputs in ([("a_axes", np.int64, None), ("", np.int64, None)],
                    [("", np.int64, None), ("b_axes", np.int64, None)]):
        check_lowering(one_node_model("BroadcastGradientArgs", feeds, outputs), feeds, current_runtime, exact=True)


@pytest.mark.parametrize("data_shape,indices_shape,axis", [((7, 3), (4,), 0), ((7, 3), (2, 5), 0), ((2, 7, 3), (5,), 1),
                                                           ((2, 3, 7), (2, 2), -1), ((7, 3), (), 0)])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_grad(data_shape, indices_shape, axis, index_dtype, current_runtime):
    size = data_shape[axis]
    indices = rng.integers(-size, size, indices_shape).astype(index_dtype)  # repeats and negatives
    out_shape = data_shape[:axis % len(data_shape)] + indices_shape + data_shape[axis % len(data_shape) + 1:]
    feeds = {"shape": np.array(data_shape, np.int64), "indices": indices, "dY": values(out_shape)}
    model = one_node_model("GatherGrad", feeds, [("dX", np.float32, data_shape)], axis=axis)
    check_lowering(model, feeds, current_runtime)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_grad(axis, current_runtime):
    data_shape, index_shape = (4, 5), (6, 5) if axis == 0 else (4, 7)
    indices = rng.integers(0, data_shape[axis], index_shape).astype(np.int64)
    feeds = {"dY": values(index_shape), "shape": np.array(data_shape, np.int64), "indices": indices}
    check_lowering(one_node_model("GatherElementsGrad", feeds, [("dX", np.float32, data_shape)], axis=axis),
                   feeds, current_runtime)


@pytest.mark.parametrize("index_depth", [1, 2])
@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd_grad(index_depth, batch_dims, current_runtime):
    data_shape = (2, 3, 4, 3, 2)
    batch = data_shape[:batch_dims]
    indices = np.stack([rng.integers(0, data_shape[batch_dims + d], batch + (5,)) for d in range(index_depth)],
                       axis=-1).astype(np.int64)  # repeats: they add
    feeds = {"shape": np.array(data_shape, np.int64), "indices": indices,
             "dY": values(batch + (5,) + data_shape[batch_dims + index_depth:])}
    check_lowering(one_node_model("GatherNDGrad", feeds, [("dX", np.float32, data_shape)], batch_dims=batch_dims),
                   feeds, current_runtime)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], None, None), ([0, 1], [4, 5], [0, 2], None), ([-3], [-1], [2], None),
    ([0, -100], [2**63 - 1, 2], [1, -1], None), ([2], [1], [0], None), ([-2, 0], [100, -1], [-3, 1], None),
    ([3, -1], [0, 0], [0, 1], [-1, -2]), ([0], [100], [1], [2]), ([1, 0], [3, 6], [0, 2], [1, 1])])
def test_slice_grad(starts, ends, axes, steps, current_runtime):
    import onnxruntime  # the training build (needs_onnxruntime_python)

    data = np.zeros((4, 3, 6), np.float32)
    feeds = {"shape": np.array(data.shape, np.int64), "starts": np.array(starts, np.int64),
             "ends": np.array(ends, np.int64)}
    names = ["dY", "shape", "starts", "ends"]
    if axes is not None or steps is not None:
        feeds["axes"] = np.array(axes if axes is not None else list(range(len(starts))), np.int64)
        names.append("axes")
    if steps is not None:
        feeds["steps"] = np.array(steps, np.int64)
        names.append("steps")
    # dY has the shape Slice gives on the data: the runtime's own Slice says which
    probe = helper.make_model(helper.make_graph(
        [helper.make_node("Slice", ["x"] + names[2:], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, data.shape)] +
        [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in names[2:]],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8)
    sliced = onnxruntime.InferenceSession(probe.SerializeToString()).run(
        None, dict({"x": data}, **{n: feeds[n] for n in names[2:]}))[0]
    feeds = dict({"dY": values(sliced.shape)}, **feeds)
    model = one_node_model("SliceGrad", feeds, [("dX", np.float32, data.shape)], inputs=names)
    check_lowering(model, feeds, current_runtime, exact=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_training(axis, current_runtime):
    parts = [values((2, 3)), values((2, 3)), values((2, 3))]
    feeds = {f"x{i}": p for i, p in enumerate(parts)}
    model = one_node_model("ConcatTraining", feeds, [("y", np.float32, None), ("lengths", np.int64, (3,))], axis=axis)
    check_lowering(model, feeds, current_runtime, exact=True)


@pytest.mark.parametrize("opset", [12, 13, 18])
def test_split_training(opset, current_runtime):
    feeds = {"x": values((2, 7))}
    constants = {"sizes": np.array([3, 4], np.int64)}
    model = one_node_model("SplitTraining", feeds, [("a", np.float32, (2, 3)), ("b", np.float32, (2, 4))],
                           constants=constants, opset=opset, axis=1)
    check_lowering(model, feeds, current_runtime, exact=True)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_sum_training(keepdims, current_runtime):
    feeds = {"x": values((2, 3, 4)), "axes": np.array([0, 2], np.int64)}
    check_lowering(one_node_model("ReduceSumTraining", feeds, [("y", np.float32, None)], keepdims=keepdims), feeds,
                   current_runtime, exact=True)


@pytest.mark.parametrize("upper", [0, 1])
def test_contrib_trilu(upper, current_runtime):
    feeds = {"x": values((3, 4, 4)), "k": np.array(1, np.int64)}
    check_lowering(one_node_model("Trilu", feeds, [("y", np.float32, (3, 4, 4))], upper=upper), feeds,
                   current_runtime, exact=True)


@pytest.mark.parametrize("count", [1, 3])
def test_reduce_all_l2(count, current_runtime):
    feeds = {f"x{i}": values((i + 2, 3)) for i in range(count)}
    check_lowering(one_node_model("ReduceAllL2", feeds, [("norm", np.float32, ())]), feeds, current_runtime)


def test_fake_quant_grad(current_runtime):
    feeds = {"dY": values((3, 4)), "mask": rng.random((3, 4)) > 0.5}
    check_lowering(one_node_model("FakeQuantGrad", feeds, [("dX", np.float32, (3, 4))]), feeds, current_runtime,
                   exact=True)


def test_slice_grad_with_steps_of_one_known_before_run_time_pads(current_runtime):
    """Steps of 1 in an initializer (and int32 bounds) take the Pad form."""
    feeds = {"dY": values((2, 3, 4)), "shape": np.array([4, 3, 6], np.int64),
             "starts": np.array([1, -5], np.int32), "ends": np.array([3, 5], np.int32)}
    constants = {"axes": np.array([0, 2], np.int32), "steps": np.array([1, 1], np.int32)}
    model = one_node_model("SliceGrad", feeds, [("dX", np.float32, (4, 3, 6))], constants=constants,
                           inputs=["dY", "shape", "starts", "ends", "axes", "steps"])
    lowered = check_lowering(model, feeds, current_runtime, exact=True)
    assert "Pad" in {n.op_type for n in lowered.graph.node}
