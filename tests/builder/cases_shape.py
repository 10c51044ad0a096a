"""Finite-difference cases of the shape and indexing families: every attribute and input form, the
opset 11 attribute forms beside the opset 13+ input forms, and cases with a symbolic batch size, where a
data input's first axis is a run-time size and the gradients must read shapes at run time."""
from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np
from gradcheck import Case, case
from onnx import helper

rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


def i64(*values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def distinct(*shape: int) -> np.ndarray:
    """Values at least 0.1 apart (TopK's order must not change under a finite-difference step)."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(np.float32)


def batched(name: str, op: str, extra_inputs: Sequence[Any], x: np.ndarray, p: np.ndarray,
            opset: int = 17, outputs: int = 1, **attributes: Any) -> Case:
    """``op`` on ``x * p`` (x data with a symbolic batch axis, p the parameter) and ``extra_inputs``
    (name, value) pairs given as constants: the gradient reaches p through ``op`` at a run-time batch size."""
    constants = [helper.make_node("Constant", [], [n], value=helper.make_tensor(
        n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape, v.reshape(-1).tolist())) for n, v in extra_inputs]
    nodes = constants + [
        helper.make_node("Mul", ["x", "p"], ["xp"]),
        helper.make_node(op, ["xp"] + [n for n, _ in extra_inputs], [f"y{i}" for i in range(outputs)], **attributes)]
    return Case(name, nodes, {"p": p}, {"x": x}, opset=opset, symbolic_batch=True)


def constant(c: Case, *names: str) -> Case:
    """The case with the data inputs ``names`` made Constant nodes (values known before run time)."""
    for name in names:
        value = c.data.pop(name)
        c.nodes.insert(0, helper.make_node("Constant", [], [name], value=helper.make_tensor(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape, value.reshape(-1).tolist())))
    return c


def then_concat(c: Case, outputs: Sequence[str], axis: int) -> Case:
    """The case's outputs ``outputs`` concatenated (one output: a loss without a Sum node)."""
    c.nodes.append(helper.make_node("Concat", list(outputs), ["joined"], axis=axis))
    return c


def with_outputs(c: Case, outputs: List[str]) -> Case:
    c.outputs = outputs
    return c


def with_opset(c: Case, opset: int) -> Case:
    c.opset = opset
    return c


CASES: Dict[str, List[Case]] = {
    "Reshape": [
        with_opset(case("reshape_opset13", "Reshape", [("x", f32(2, 6)), ("shape", i64(3, 4))], ["x"]), 13),
        case("reshape", "Reshape", [("x", f32(2, 3, 4)), ("shape", i64(4, -1))], ["x"]),
        case("reshape_zero_copies", "Reshape", [("x", f32(2, 3, 4)), ("shape", i64(0, 12))], ["x"]),
        case("reshape_allowzero", "Reshape", [("x", f32(2, 3, 4)), ("shape", i64(3, 8))], ["x"], allowzero=1),
        batched("reshape_batch", "Reshape", [("shape", i64(0, -1))], f32(3, 2, 4), f32(2, 4)),
    ],
    "Flatten": [
        case("flatten_axis0", "Flatten", [("x", f32(2, 3))], ["x"], axis=0),
        case("flatten", "Flatten", [("x", f32(2, 3, 4))], ["x"], axis=2),
        batched("flatten_batch", "Flatten", [], f32(3, 2, 4), f32(2, 4), axis=1),
    ],
    "Transpose": [
        case("transpose_perm", "Transpose", [("x", f32(2, 3, 4))], ["x"], perm=[1, 2, 0]),
        case("transpose_default", "Transpose", [("x", f32(2, 3, 4))], ["x"]),
        batched("transpose_batch", "Transpose", [], f32(3, 2, 4), f32(2, 4), perm=[2, 0, 1]),
    ],
    "Squeeze": [
        with_opset(case("squeeze_opset21", "Squeeze", [("x", f32(1, 3)), ("axes", i64(0))], ["x"]), 21),
        case("squeeze_axes", "Squeeze", [("x", f32(2, 1, 3, 1)), ("axes", i64(-1, 1))], ["x"]),
        case("squeeze_all", "Squeeze", [("x", f32(1, 3, 1, 2))], ["x"]),
        with_opset(case("squeeze_attribute", "Squeeze", [("x", f32(2, 1, 3))], ["x"], axes=[1]), 11),
        batched("squeeze_batch", "Squeeze", [("axes", i64(1))], f32(3, 1, 4), f32(1, 4)),
    ],
    "Unsqueeze": [
        case("unsqueeze_negative_axes", "Unsqueeze", [("x", f32(2, 3)), ("axes", i64(-1, -3))], ["x"]),
        with_opset(case("unsqueeze_opset13", "Unsqueeze", [("x", f32(3)), ("axes", i64(1))], ["x"]), 13),
        case("unsqueeze", "Unsqueeze", [("x", f32(2, 3)), ("axes", i64(0, -1))], ["x"]),
        with_opset(case("unsqueeze_attribute", "Unsqueeze", [("x", f32(2, 3))], ["x"], axes=[1]), 11),
        batched("unsqueeze_batch", "Unsqueeze", [("axes", i64(1))], f32(3, 4), f32(4)),
    ],
    "Concat": [
        case("concat_single", "Concat", [("a", f32(2, 3))], ["a"], axis=1),
        with_opset(case("concat_opset11", "Concat", [("a", f32(2, 3)), ("b", f32(2, 2))], ["a", "b"], axis=1), 11),
        case("concat", "Concat", [("a", f32(2, 3)), ("b", f32(2, 1)), ("c", f32(2, 4))], ["a", "c"], axis=1),
        case("concat_negative_axis", "Concat", [("a", f32(2, 3)), ("b", f32(1, 3))], ["a", "b"], axis=-2),
        case("concat_same_input", "Concat", [("a", f32(2, 3)), ("a", f32(2, 3))], ["a"], axis=0),
        Case("concat_batch_axis", [helper.make_node("Mul", ["x", "p"], ["xp"]),
                                   helper.make_node("Concat", ["xp", "q"], ["y0"], axis=0)],
             {"p": f32(3), "q": f32(2, 3)}, {"x": f32(4, 3)}, symbolic_batch=True),
    ],
    "Split": [
        with_opset(then_concat(case("split_opset13", "Split", [("x", f32(5, 2)), ("split", i64(4, 1))], ["x"],
                                    outputs=2), ["y1", "y0"], 0), 13),
        with_opset(then_concat(case("split_opset21_uneven", "Split", [("x", f32(2, 5))], ["x"], outputs=2, axis=1,
                                    num_outputs=2), ["y1", "y0"], 1), 21),
        then_concat(case("split_sizes_one_unused", "Split", [("x", f32(2, 6)), ("split", i64(1, 2, 3))], ["x"],
                         outputs=3, axis=1), ["y2", "y0"], 1),
        then_concat(case("split_equal", "Split", [("x", f32(6, 2))], ["x"], outputs=3), ["y1", "y0", "y2"], 0),
        with_outputs(with_opset(case("split_num_outputs", "Split", [("x", f32(2, 7))], ["x"], outputs=3, axis=-1,
                                     num_outputs=3), 18), ["y1"]),
        with_opset(then_concat(case("split_attribute", "Split", [("x", f32(2, 5))], ["x"], outputs=2, axis=1,
                                    split=[2, 3]), ["y1", "y0"], 1), 11),
        with_outputs(batched("split_batch", "Split", [("split", i64(1, 3))], f32(3, 4), f32(4), outputs=2, axis=1),
                     ["y0"]),
    ],
    "Slice": [
        batched("slice_batch_reversed", "Slice", [("starts", i64(-1, 3)), ("ends", i64(-2 ** 63, 0)), ("axes", i64(0, 1)),
                                                  ("steps", i64(-1, -2))], f32(3, 4), f32(4)),
        with_opset(case("slice_opset21", "Slice", [("x", f32(3, 4)), ("starts", i64(0)), ("ends", i64(2))], ["x"]),
                   21),
        case("slice", "Slice", [("x", f32(4, 5)), ("starts", i64(1, 0)), ("ends", i64(3, 4)), ("axes", i64(0, 1)),
                                ("steps", i64(1, 2))], ["x"]),
        case("slice_no_axes", "Slice", [("x", f32(4, 5)), ("starts", i64(1)), ("ends", i64(-1))], ["x"]),
        constant(case("slice_negative_step", "Slice", [("x", f32(4, 6)), ("starts", i64(-1, 0)), ("ends", i64(-100, 3)),
                                                       ("axes", i64(1, 0)), ("steps", i64(-2, 1))], ["x"]),
                 "axes", "steps"),
        constant(case("slice_run_time_steps", "Slice", [("x", f32(5, 4)), ("starts", i64(4, 1)), ("ends", i64(0, 9)),
                                                        ("axes", i64(0, -1)), ("steps", i64(-3, 2))], ["x"]), "axes"),
        batched("slice_batch", "Slice", [("starts", i64(1)), ("ends", i64(3)), ("axes", i64(-1))], f32(3, 4), f32(4)),
    ],
    "Gather": [
        case("gather_scalar_index", "Gather", [("x", f32(2, 5)), ("i", np.array(3, np.int64))], ["x"], axis=1),
        case("gather", "Gather", [("x", f32(5, 3)), ("i", i64(4, 0, 4, 2))], ["x"]),
        case("gather_axis_indices_2d", "Gather", [("x", f32(2, 5, 3)), ("i", i64([1, 0], [3, 1]))], ["x"], axis=1),
        case("gather_negative_indices", "Gather", [("x", f32(5, 3)), ("i", i64(-1, 0, -5))], ["x"]),
        batched("gather_batch", "Gather", [("i", i64(2, 0))], f32(3, 4), f32(4), axis=1),
    ],
    "GatherElements": [
        case("gather_elements_negative", "GatherElements", [("x", f32(2, 4)), ("i", i64([-1, 0], [-4, -1]))], ["x"],
             axis=-1),
        case("gather_elements", "GatherElements", [("x", f32(3, 4)), ("i", i64([0, 3, 3], [2, 1, 0], [1, 1, 2]))],
             ["x"], axis=1),
        case("gather_elements_axis0", "GatherElements", [("x", f32(3, 2)), ("i", i64([2, 0], [2, 2]))], ["x"]),
    ],
    "GatherND": [
        batched("gather_nd_batch", "GatherND", [("i", i64([1], [0], [2]))], f32(3, 4), f32(4), batch_dims=1),
        case("gather_nd_negative", "GatherND", [("x", f32(3, 4)), ("i", i64([-1, 2], [0, -4]))], ["x"]),
        case("gather_nd", "GatherND", [("x", f32(3, 4, 2)), ("i", i64([0, 1], [2, 3], [0, 1]))], ["x"]),
        case("gather_nd_batch_dims", "GatherND", [("x", f32(2, 3, 4)), ("i", i64([[1], [2]], [[0], [0]]))], ["x"],
             batch_dims=1),
    ],
    "ScatterElements": [
        case("scatter_elements_negative", "ScatterElements", [("d", f32(4, 2)), ("i", i64([-1, 0], [1, -2])),
                                                              ("u", f32(2, 2))], ["d", "u"]),
        case("scatter_elements", "ScatterElements", [("d", f32(3, 4)), ("i", i64([1, 3], [0, 2], [3, 0])),
                                                     ("u", f32(3, 2))], ["d", "u"], axis=1),
        case("scatter_elements_add", "ScatterElements", [("d", f32(3, 4)), ("i", i64([1, 1], [0, 2], [3, 0])),
                                                         ("u", f32(3, 2))], ["d", "u"], axis=1, reduction="add"),
    ],
    "ScatterND": [
        case("scatter_nd", "ScatterND", [("d", f32(4, 3)), ("i", i64([2], [0])), ("u", f32(2, 3))], ["d", "u"]),
        case("scatter_nd_add", "ScatterND", [("d", f32(4, 3)), ("i", i64([2, 1], [2, 1], [0, 0])), ("u", f32(3))],
             ["d", "u"], reduction="add"),
    ],
    "Expand": [
        case("expand_shape_of_lower_rank", "Expand", [("x", f32(2, 3, 1)), ("shape", i64(4))], ["x"]),
        constant(case("expand_constant_shape", "Expand", [("x", f32(3, 1)), ("shape", i64(2, 1, 4))], ["x"]), "shape"),
        case("expand", "Expand", [("x", f32(3, 1)), ("shape", i64(2, 3, 4))], ["x"]),
        Case("expand_batch", [helper.make_node("Shape", ["x"], ["s"]),
                              helper.make_node("Expand", ["p", "s"], ["e"]),
                              helper.make_node("Mul", ["e", "x"], ["y0"])],
             {"p": f32(1, 4)}, {"x": f32(3, 4)}, symbolic_batch=True),
    ],
    "Tile": [
        constant(case("tile_constant_repeats", "Tile", [("x", f32(1, 2, 3)), ("r", i64(3, 1, 2))], ["x"]), "r"),
        case("tile", "Tile", [("x", f32(2, 3)), ("r", i64(2, 3))], ["x"]),
        batched("tile_batch", "Tile", [("r", i64(1, 2))], f32(3, 2), f32(2)),
    ],
    "Pad": [
        constant(case("pad_reflect_cropping", "Pad", [("x", f32(3, 5)), ("pads", i64(-1, 2, 1, -1))], ["x"],
                      mode="reflect"), "pads"),
        case("pad_reflect_run_time_pads", "Pad", [("x", f32(3, 5)), ("pads", i64(1, 2, 2, 0))], ["x"], mode="reflect"),
        case("pad_edge_run_time_pads", "Pad", [("x", f32(2, 3)), ("pads", i64(0, 2, 3, -1))], ["x"], mode="edge"),
        with_opset(case("pad_wrap_run_time_pads", "Pad", [("x", f32(3, 2)), ("pads", i64(1, 1, 2, 0))], ["x"],
                        mode="wrap"), 19),
        batched("pad_reflect_batch_axis", "Pad", [("pads", i64(1, 1, 2, 0))], f32(4, 3), f32(3), mode="reflect"),
        batched("pad_edge_batch_axis", "Pad", [("pads", i64(2, 0, 0, 1))], f32(3, 3), f32(3), mode="edge"),
        with_opset(case("pad_opset13", "Pad", [("x", f32(2, 3)), ("pads", i64(1, 1, 0, 2))], ["x"]), 13),
        with_opset(constant(case("pad_reflect_opset21", "Pad", [("x", f32(3, 3)), ("pads", i64(2, 0, 0, 1))], ["x"],
                                 mode="reflect"), "pads"), 21),
        case("pad_constant", "Pad", [("x", f32(2, 3)), ("pads", i64(1, 0, 2, 2)), ("v", np.array(0.5, np.float32))],
             ["x", "v"]),
        case("pad_negative", "Pad", [("x", f32(3, 4)), ("pads", i64(-1, 1, 0, -2))], ["x"]),
        with_opset(case("pad_axes", "Pad", [("x", f32(2, 3, 2)), ("pads", i64(1, 2)), ("", None), ("axes", i64(-2))],
                        ["x"]), 18),
        constant(case("pad_reflect", "Pad", [("x", f32(2, 4)), ("pads", i64(1, 2, 0, 3))], ["x"], mode="reflect"),
                 "pads"),
        constant(case("pad_edge", "Pad", [("x", f32(2, 3)), ("pads", i64(0, 2, 1, 1))], ["x"], mode="edge"), "pads"),
        with_opset(constant(case("pad_wrap", "Pad", [("x", f32(3, 2)), ("pads", i64(2, 1, 0, 1))], ["x"],
                                 mode="wrap"), "pads"), 19),
        with_opset(constant(case("pad_edge_axes", "Pad", [("x", f32(2, 3, 2)), ("pads", i64(2, 1)), ("", None),
                                                           ("axes", i64(1))], ["x"], mode="edge"), "pads", "axes"), 18),
        batched("pad_reflect_batch", "Pad", [("pads", i64(0, 1, 0, 2))], f32(3, 4), f32(4), mode="reflect"),
    ],
    "Resize": [
        case("resize_run_time_scales", "Resize", [("x", f32(1, 2, 3)), ("", None),
                                                  ("scales", np.array([1, 2, 1.5], np.float32))], ["x"], mode="linear"),
        case("resize_run_time_sizes", "Resize", [("x", f32(1, 1, 3, 2)), ("", None), ("", None),
                                                 ("sizes", i64(1, 1, 5, 3))], ["x"], mode="cubic"),
        Case("resize_to_a_run_time_shape",  # FPN-like: upsampled to another tensor's size, read at run time
             [helper.make_node("Mul", ["x", "p"], ["xp"]), helper.make_node("Shape", ["skip"], ["target"]),
              helper.make_node("Resize", ["xp", "", "", "target"], ["y0"], mode="nearest")],
             {"p": f32(2, 2, 3)}, {"x": f32(3, 2, 2, 3), "skip": f32(3, 2, 4, 5)}, symbolic_batch=True),
        with_opset(constant(case("resize_opset13_nearest", "Resize", [("x", f32(1, 2, 3)), ("", None),
                                                                     ("scales", np.array([1, 1, 2.5], np.float32))],
                                 ["x"]), "scales"), 13),
        constant(case("resize_linear_up", "Resize", [("x", f32(1, 2, 3, 2)), ("", None),
                                                    ("scales", np.array([1, 1, 2, 1.5], np.float32))], ["x"],
                      mode="linear"), "scales"),
        constant(case("resize_nearest_sizes", "Resize", [("x", f32(2, 3, 4)), ("", None), ("", None),
                                                        ("sizes", i64(2, 5, 3))], ["x"], mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"), "sizes"),
        constant(case("resize_cubic_down_align", "Resize", [("x", f32(1, 1, 5, 6)), ("", None),
                                                           ("scales", np.array([1, 1, 0.6, 0.5], np.float32))],
                      ["x"], mode="cubic", coordinate_transformation_mode="align_corners"), "scales"),
        with_opset(constant(case("resize_axes_antialias", "Resize", [("x", f32(2, 6, 3)), ("", None),
                                                                    ("scales", np.array([0.5], np.float32))], ["x"],
                                 mode="linear", antialias=1, axes=[1]), "scales"), 18),
        with_opset(constant(case("resize_opset10", "Resize", [("x", f32(1, 1, 2, 3)),
                                                             ("scales", np.array([1, 1, 2, 2], np.float32))],
                                 ["x"], mode="linear"), "scales"), 10),
        batched("resize_batch", "Resize", [("roi", np.zeros(0, np.float32)),
                                           ("scales", np.array([1, 2, 2], np.float32))], f32(2, 2, 3), f32(2, 3),
                mode="linear"),
        batched("resize_batch_axis", "Resize", [("roi", np.zeros(0, np.float32)),
                                                ("scales", np.array([1.5, 1], np.float32))], f32(2, 3), f32(3),
                mode="nearest"),
    ],
    "DepthToSpace": [
        case("depth_to_space_dcr", "DepthToSpace", [("x", f32(1, 8, 2, 3))], ["x"], blocksize=2),
        case("depth_to_space_crd", "DepthToSpace", [("x", f32(2, 8, 2, 3))], ["x"], blocksize=2, mode="CRD"),
        batched("depth_to_space_crd_batch", "DepthToSpace", [], f32(2, 8, 1, 2), f32(8, 1, 2), blocksize=2,
                mode="CRD"),
    ],
    "SpaceToDepth": [
        batched("space_to_depth_batch", "SpaceToDepth", [], f32(3, 2, 2, 4), f32(2, 2, 4), blocksize=2),
        case("space_to_depth", "SpaceToDepth", [("x", f32(2, 2, 4, 6))], ["x"], blocksize=2),
    ],
    "Trilu": [
        batched("trilu_batch", "Trilu", [("k", i64(-1))], f32(2, 3, 4), f32(3, 4)),
        case("trilu_upper", "Trilu", [("x", f32(2, 4, 5))], ["x"]),
        case("trilu_lower_k", "Trilu", [("x", f32(4, 5)), ("k", i64(1))], ["x"], upper=0),
    ],
    "ReverseSequence": [
        case("reverse_sequence", "ReverseSequence", [("x", f32(4, 3, 2)), ("lens", i64(4, 1, 3))], ["x"],
             batch_axis=1, time_axis=0),
        case("reverse_sequence_batch_first", "ReverseSequence", [("x", f32(2, 5)), ("lens", i64(2, 5))], ["x"],
             batch_axis=0, time_axis=1),
    ],
    "TopK": [
        with_outputs(batched("top_k_batch", "TopK", [("k", i64(2))], np.abs(distinct(3, 4)) + 1, np.abs(distinct(4)) + 1,
                             outputs=2), ["y0"]),
        with_outputs(case("top_k", "TopK", [("x", distinct(3, 5)), ("k", i64(2))], ["x"], outputs=2), ["y0"]),
        with_outputs(case("top_k_smallest_axis0", "TopK", [("x", distinct(4, 3)), ("k", i64(3))], ["x"], outputs=2,
                          axis=0, largest=0), ["y0"]),
    ],
    "Compress": [
        case("compress_axis", "Compress", [("x", f32(3, 4)), ("c", np.array([True, False, True]))], ["x"], axis=0),
        case("compress_short_condition", "Compress", [("x", f32(2, 5)), ("c", np.array([False, True, True]))], ["x"],
             axis=-1),
        case("compress_flat", "Compress", [("x", f32(2, 3)), ("c", np.array([True, False, False, True, True]))],
             ["x"]),
        batched("compress_batch", "Compress", [("c", np.array([True, False, True, True]))], f32(3, 4), f32(4),
                axis=1),
    ],
    "OneHot": [
        case("one_hot_values", "OneHot", [("i", i64([1, 0], [3, -1])), ("depth", i64(4)),
                                          ("values", np.array([0.25, 2.0], np.float32))], ["values"]),
    ],
}
