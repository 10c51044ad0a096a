"""Operators whose answer changed between ONNX Runtime releases are written so that every release computes the
ONNX specification's answer (ort_cffi/artifacts/builder/spec_forms.py): the artifacts' eval model, run on the
runtime loaded here (the training build, 1.19.2, or onnxruntime 1.31.1 on the engine legs), gives it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts.builder.training_model import build_models

X = np.array([[1.5, 2.0, 0.5], [3.0, 0.25, 1.0]], np.float32)  # positive: log is defined
W = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], np.float32)
# a reduction over nothing keeps its element-wise part (onnx/onnx#7394)
SPEC = {"ReduceL1": np.abs, "ReduceL2": np.abs, "ReduceSumSquare": np.square, "ReduceLogSum": np.log,
        "ReduceLogSumExp": lambda v: v, "ReduceSum": lambda v: v, "ReduceMean": lambda v: v,
        "ReduceMax": lambda v: v, "ReduceMin": lambda v: v, "ReduceProd": lambda v: v}


def model(op: str, axes: str):
    """y = op(x * w) reducing nothing, with its axes an empty constant or absent; the model's outputs are the
    loss (the sum of y) and y."""
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"])]
    initializers = [numpy_helper.from_array(W, "w")]
    if axes == "empty":
        initializers.append(numpy_helper.from_array(np.array([], np.int64), "axes"))
        nodes.append(helper.make_node(op, ["xw", "axes"], ["y"], noop_with_empty_axes=1, keepdims=0))
    else:
        nodes.append(helper.make_node(op, ["xw"], ["y"], noop_with_empty_axes=1, keepdims=0))
    nodes.append(helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0))
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializers)
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    made.ir_version = 8
    return made


@pytest.mark.parametrize("axes", ["empty", "absent"])
@pytest.mark.parametrize("op", sorted(SPEC))
def test_a_reduction_over_nothing_computes_the_specifications_answer(op: str, axes: str) -> None:
    built = build_models(model(op, axes), ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type != op, "the node was not rewritten"
    env = OrtEnvironment.getEnvironment()
    x = X * np.sign(W)  # x * w is positive
    with env.createSession(built.eval.SerializeToString()) as session:
        with session.run({"x": x, "w": W}) as result:
            y = np.asarray(dict(result)["y"].getValue())
    np.testing.assert_allclose(y, SPEC[op](x * W), rtol=1e-6)


def test_a_reduction_that_reduces_keeps_its_operator() -> None:
    reducing = model("ReduceL1", "empty")
    reducing.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    reducing.graph.output[1].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]))
    built = build_models(reducing, ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type == "ReduceL1"


def spec_average_pool(x: np.ndarray, kernel, strides, pads, include: bool) -> np.ndarray:
    """AveragePool with ceil_mode=1 as the ONNX specification (and PyTorch) compute it, 2-D: a last window that
    would start in the end padding is dropped; a window divides by its taps inside the padded input
    (count_include_pad=1) or inside the input."""
    sizes = x.shape[2:]
    begins, ends = pads[:2], pads[2:]
    outs = []
    for size, k, s, b, e in zip(sizes, kernel, strides, begins, ends):
        out = -(-(size + b + e - k) // s) + 1
        outs.append(out - 1 if (out - 1) * s >= size + b else out)
    y = np.zeros(x.shape[:2] + tuple(outs), np.float64)
    for i in range(outs[0]):
        for j in range(outs[1]):
            starts = [i * strides[0] - begins[0], j * strides[1] - begins[1]]
            stops = [start + k for start, k in zip(starts, kernel)]
            inside = [slice(max(start, 0), min(stop, size)) for start, stop, size in zip(starts, stops, sizes)]
            total = x[:, :, inside[0], inside[1]].sum(axis=(2, 3))
            if include:
                count = np.prod([min(stop, size + e) - start for start, stop, size, e in zip(starts, stops, sizes, ends)])
            else:
                count = np.prod([sl.stop - sl.start for sl in inside])
            y[:, :, i, j] = total / count
    return y


POOLS = {  # (input shape, kernel, strides, pads, count_include_pad)
    "past the pads, counted": ((1, 2, 6, 6), [3, 3], [2, 2], [1, 1, 1, 1], 1),
    "a window starting in the end pad": ((1, 2, 7, 6), [3, 2], [2, 2], [1, 0, 1, 1], 0),
    "both": ((1, 1, 5, 8), [2, 3], [3, 2], [1, 1, 1, 1], 1),
}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_an_average_pool_whose_ceil_windows_pass_the_pads_computes_the_specifications_answer(case: str) -> None:
    shape, kernel, strides, pads, include = POOLS[case]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("AveragePool", ["xw"], ["y"], kernel_shape=kernel, strides=strides, pads=pads,
                              ceil_mode=1, count_include_pad=include),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.float32(1.5) * np.ones(shape, np.float32), "w")])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    made.ir_version = 8
    built = build_models(made, ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type != "AveragePool"
    with OrtEnvironment.getEnvironment().createSession(built.eval.SerializeToString()) as session:
        with session.run({"x": x, "w": np.float32(1.5) * np.ones(shape, np.float32)}) as result:
            y = np.asarray(dict(result)["y"].getValue())
    np.testing.assert_allclose(y, spec_average_pool(1.5 * x.astype(np.float64), kernel, strides, pads, bool(include)),
                               rtol=1e-5, atol=1e-6)


def test_a_pool_behind_pads_computed_from_the_input_shape_is_written_out_too() -> None:
    """TorchScript exports ConstantPad1d with its pads computed from the input's shape (Shape, ConstantOfShape,
    Concat, Reshape, Transpose...). With a symbolic batch, onnx's shape inference then loses every spatial size
    after the Pad, and the pool was left to each release's answer: on the 1.19.2 training build a model trained
    on another function than torch's (first loss 1.504 against 1.469). Its sizes are read from the model with
    its size arithmetic folded."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 2, 6)).astype(np.float32)
    pad_ints = helper.make_tensor("pad_ints", TensorProto.INT64, [2], [2, 0])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Size", ["shape"], ["rank"]),
             helper.make_node("Mul", ["rank", "two"], ["twice"]),
             helper.make_node("Sub", ["twice", "two_1d"], ["zeros_count"]),  # 2 * rank - 2 zeros before the pads
             helper.make_node("ConstantOfShape", ["zeros_count"], ["zeros"],
                              value=helper.make_tensor("zero", TensorProto.INT64, [1], [0])),
             helper.make_node("Concat", ["pad_ints", "zeros"], ["flat"], axis=0),
             helper.make_node("Reshape", ["flat", "pairs"], ["paired"]),  # [begin, end] per axis, the last first
             helper.make_node("Slice", ["paired", "minus_one", "far", "zero_axis", "minus_one"], ["in_order"]),
             helper.make_node("Transpose", ["in_order"], ["columns"], perm=[1, 0]),
             helper.make_node("Reshape", ["columns", "minus_one"], ["pads"]),
             helper.make_node("Pad", ["xw", "pads"], ["padded"]),
             helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("AveragePool", ["padded"], ["y"], kernel_shape=[3], strides=[2], ceil_mode=1,
                              count_include_pad=1),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    nodes.insert(0, nodes.pop(11))  # the Mul first
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 6])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.full((2, 1), 1.5, np.float32), "w"), pad_ints,
         numpy_helper.from_array(np.array(2, np.int64), "two"), numpy_helper.from_array(np.array([2], np.int64), "two_1d"),
         numpy_helper.from_array(np.array([-1, 2], np.int64), "pairs"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
         numpy_helper.from_array(np.array([-(1 << 62)], np.int64), "far"),
         numpy_helper.from_array(np.array([0], np.int64), "zero_axis")])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    made.ir_version = 8
    built = build_models(made, ["w"], [], None)
    assert next(n for n in built.eval.graph.node if "y" in n.output).op_type != "AveragePool"
    with OrtEnvironment.getEnvironment().createSession(built.eval.SerializeToString()) as session:
        with session.run({"x": x, "w": np.full((2, 1), 1.5, np.float32)}) as result:
            y = np.asarray(dict(result)["y"].getValue())
    padded = np.concatenate([np.zeros((3, 2, 2)), 1.5 * x.astype(np.float64)], axis=2)  # length 8
    expected = np.stack([padded[:, :, 0:3].mean(2), padded[:, :, 2:5].mean(2), padded[:, :, 4:7].mean(2),
                         padded[:, :, 6:8].mean(2)], axis=2)  # the last window: two positions, divided by 2
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_an_average_pool_whose_windows_stay_in_the_pads_keeps_its_operator() -> None:
    nodes = [helper.make_node("AveragePool", ["w"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "m", [], [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.ones((1, 1, 7, 7), np.float32), "w")])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    made.ir_version = 8
    assert any(n.op_type == "AveragePool" for n in build_models(made, ["w"], [], None).eval.graph.node)


@pytest.mark.parametrize("op", ["MaxPool", "LpPool"])
def test_a_max_or_lp_pool_drops_a_window_starting_in_the_end_pad_on_every_release(op: str) -> None:
    """The specification's windows: the last one, which would start in the end padding, is left out (1.19.2 kept
    it); the others are the same windows, a max (or the p-norm) over the input's taps in each."""
    shape, kernel, strides, pads = (1, 2, 7, 6), [3, 2], [2, 2], [1, 0, 1, 1]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node(op, ["xw"], ["y"], kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=1),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones(shape, np.float32), "w")])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    made.ir_version = 8
    built = build_models(made, ["w"], [], None)
    pool = next(n for n in built.eval.graph.node if "y" in n.output)
    assert pool.op_type == op and not any(a.name == "ceil_mode" for a in pool.attribute)
    with OrtEnvironment.getEnvironment().createSession(built.eval.SerializeToString()) as session:
        with session.run({"x": x, "w": np.ones(shape, np.float32)}) as result:
            y = np.asarray(dict(result)["y"].getValue())
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (0, 1)],
                    constant_values=-np.inf if op == "MaxPool" else 0.0)
    expected = np.zeros(shape[:2] + (4, 3))
    for i in range(4):
        for j in range(3):
            window = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 2]
            expected[:, :, i, j] = window.max(axis=(2, 3)) if op == "MaxPool" else np.sqrt((window ** 2).sum(axis=(2, 3)))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
