"""Finite-difference cases of the sequence family: sequences built from parameters (SequenceConstruct,
SplitToSequence, SequenceEmpty and SequenceInsert), changed (SequenceInsert, SequenceErase, with positions
from the front and the back, int32 and int64, given or left out) and read back into tensors (SequenceAt,
ConcatFromSequence, stacked or not), elements of different lengths, a sequence read twice (its gradients added
element by element), a Loop that appends to a sequence it carries (as torch's default exporter writes
``nn.EmbeddingBag``) and reads it back, and a Loop body and If branches that read a sequence of the enclosing
graph."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from gradcheck import Case
from onnx import TensorProto, helper

rng = np.random.default_rng(29)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


def const(name: str, value: np.ndarray) -> onnx.NodeProto:
    array = np.asarray(value)
    tensor = helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape, array.reshape(-1))
    return helper.make_node("Constant", [], [name], value=tensor)


def construct_and_concat() -> Case:
    """A sequence of two tensors of different lengths, concatenated and one of them read again (the
    sequence's gradient is the sum of two)."""
    nodes = [helper.make_node("Mul", ["a", "x"], ["ax"]),
             helper.make_node("SequenceConstruct", ["ax", "b"], ["pair"]),
             helper.make_node("ConcatFromSequence", ["pair"], ["y0"], axis=0),
             const("second", np.array(1, np.int64)),
             helper.make_node("SequenceAt", ["pair", "second"], ["b_again"]),
             helper.make_node("Mul", ["b_again", "b_again"], ["y1"])]
    c = Case("sequence_construct_concat", nodes, {"a": f32(2, 3), "b": f32(3, 3)}, {"x": f32(2, 3)})
    c.outputs = ["y0", "y1"]
    return c


def split_ragged() -> Case:
    """Pieces of 2 and 3 rows; the last read from the back, the first from the front and multiplied by data."""
    nodes = [const("lengths", np.array([2, 3], np.int64)),
             helper.make_node("SplitToSequence", ["p", "lengths"], ["pieces"], axis=0),
             const("last", np.array(-1, np.int64)),
             const("first", np.array(0, np.int32)),
             helper.make_node("SequenceAt", ["pieces", "last"], ["y0"]),
             helper.make_node("SequenceAt", ["pieces", "first"], ["head"]),
             helper.make_node("Mul", ["head", "x"], ["y1"])]
    c = Case("split_ragged_read_twice", nodes, {"p": f32(5, 3)}, {"x": f32(2, 3)})
    c.outputs = ["y0", "y1"]
    return c


def split_squeezed_and_stacked() -> Case:
    """SplitToSequence without split and keepdims 0 drops the axis; ConcatFromSequence new_axis 1 stacks the
    pieces along another axis."""
    nodes = [helper.make_node("SplitToSequence", ["p"], ["slices"], axis=1, keepdims=0),
             helper.make_node("ConcatFromSequence", ["slices"], ["stacked"], axis=-1, new_axis=1),
             helper.make_node("Mul", ["stacked", "x"], ["y0"])]
    return Case("split_squeezed_stacked", nodes, {"p": f32(2, 4, 3)}, {"x": f32(2, 3, 4)})


def split_even_keepdims() -> Case:
    """SplitToSequence without split and keepdims 1 (pieces of size 1), concatenated back along axis -1."""
    nodes = [helper.make_node("SplitToSequence", ["p"], ["slices"], axis=-1),
             helper.make_node("ConcatFromSequence", ["slices"], ["joined"], axis=-1),
             helper.make_node("Mul", ["joined", "x"], ["y0"])]
    return Case("split_keepdims_concat", nodes, {"p": f32(3, 2)}, {"x": f32(3, 2)})


def insert_and_erase(name: str, insert_at: object, erase_at: object) -> Case:
    """[a, b, c] with d inserted (at ``insert_at``, None: appended), one erased (at ``erase_at``, None: the
    last), the rest concatenated along axis 1 (the elements differ in width)."""
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["abc"])]
    insert_inputs = ["abc", "d"]
    if insert_at is not None:
        nodes.append(const("insert_at", np.asarray(insert_at)))
        insert_inputs.append("insert_at")
    nodes.append(helper.make_node("SequenceInsert", insert_inputs, ["abcd"]))
    erase_inputs = ["abcd"]
    if erase_at is not None:
        nodes.append(const("erase_at", np.asarray(erase_at)))
        erase_inputs.append("erase_at")
    nodes += [helper.make_node("SequenceErase", erase_inputs, ["three"]),
              helper.make_node("ConcatFromSequence", ["three"], ["y0"], axis=1)]
    params = {"a": f32(2, 1), "b": f32(2, 2), "c": f32(2, 3), "d": f32(2, 4)}
    return Case(name, nodes, params)


def appended_to_empty() -> Case:
    """SequenceEmpty, then a appended and b inserted at the front, concatenated."""
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT),
             helper.make_node("SequenceInsert", ["empty", "a"], ["one"]),
             const("front", np.array(0, np.int64)),
             helper.make_node("SequenceInsert", ["one", "b", "front"], ["two"]),
             helper.make_node("ConcatFromSequence", ["two"], ["y0"], axis=0)]
    return Case("sequence_empty_insert", nodes, {"a": f32(1, 3), "b": f32(2, 3)})


def at_data_position() -> Case:
    """SequenceAt at a position fed at run time (int32, from the back)."""
    nodes = [helper.make_node("Tanh", ["p"], ["t"]),
             helper.make_node("SplitToSequence", ["t"], ["rows"], axis=0, keepdims=0),
             helper.make_node("SequenceAt", ["rows", "where"], ["y0"])]
    return Case("sequence_at_run_time_position", nodes, {"p": f32(4, 3)}, {"where": np.array(-2, np.int32)})


def _scalar(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [])


def loop_appending(name: str, bags: int) -> Case:
    """As torch's default exporter writes a bag reduction: no trip count, a counter and a sequence carried,
    each iteration appending row i of (w * x) summed with row i + 1; ConcatFromSequence after the Loop."""
    body = helper.make_graph([
        helper.make_node("Add", ["k", "one"], ["k_next"]),
        helper.make_node("Slice", ["wx", "k", "k_plus_two"], ["rows"]),
        helper.make_node("ReduceSum", ["rows", "axis0"], ["row"], keepdims=1),
        helper.make_node("SequenceInsert", ["built", "row"], ["built_next"]),
        helper.make_node("Add", ["k_next", "one"], ["k_plus_two_next"]),
        helper.make_node("Less", ["k_next", "bags"], ["cond_out"])], f"{name}_body",
        [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("k_plus_two", TensorProto.INT64, [1]),
         helper.make_tensor_sequence_value_info("built", TensorProto.FLOAT, None)],
        [_scalar("cond_out", TensorProto.BOOL), helper.make_tensor_value_info("k_next", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("k_plus_two_next", TensorProto.INT64, [1]),
         helper.make_tensor_sequence_value_info("built_next", TensorProto.FLOAT, None)])
    nodes = [const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64)),
             const("zero", np.array([0], np.int64)), const("axis0", np.array([0], np.int64)),
             const("bags", np.array([bags], np.int64)), const("go", np.array(True)),
             helper.make_node("Mul", ["w", "x"], ["wx"]),
             helper.make_node("SequenceEmpty", [], ["nothing"], dtype=TensorProto.FLOAT),
             helper.make_node("Loop", ["", "go", "zero", "two", "nothing"], ["k_end", "k2_end", "bag_rows"],
                              body=body),
             helper.make_node("ConcatFromSequence", ["bag_rows"], ["y0"], axis=0)]
    c = Case(name, nodes, {"w": f32(bags + 1, 3)}, {"x": f32(bags + 1, 3)})
    c.opset = 20
    return c


def loop_reading_back(name: str, appends: int) -> Case:
    """Each iteration reads back the sequence it carries (its first and last elements, and its length) and
    appends ``appends`` tensors made from them: the backward pass rebuilds the sequence as it was at each
    iteration from the final one, erasing what each step appended."""
    nodes = [helper.make_node("SequenceAt", ["built", "last"], ["previous"]),
             helper.make_node("SequenceAt", ["built", "first"], ["oldest"]),
             helper.make_node("SequenceLength", ["built"], ["count"]),
             helper.make_node("Cast", ["count"], ["count_float"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["previous", "p"], ["scaled"]),
             helper.make_node("Mul", ["oldest", "count_float"], ["weighted"]),
             helper.make_node("Add", ["scaled", "weighted"], ["mixed"]),
             helper.make_node("Tanh", ["mixed"], ["row_0"])]
    sequence = "built"
    for k in range(appends):
        if k:
            nodes.append(helper.make_node("Mul", [f"row_{k - 1}", "p"], [f"row_{k}"]))
        nodes.append(helper.make_node("SequenceInsert", [sequence, f"row_{k}"], [f"built_{k}"]))
        sequence = f"built_{k}"
    nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    body = helper.make_graph(nodes, f"{name}_body",
                             [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL),
                              helper.make_tensor_sequence_value_info("built", TensorProto.FLOAT, None)],
                             [_scalar("cond_out", TensorProto.BOOL),
                              helper.make_tensor_sequence_value_info(sequence, TensorProto.FLOAT, None)])
    outer = [const("steps", np.array(3, np.int64)), const("last", np.array(-1, np.int64)),
             const("first", np.array(0, np.int64)),
             helper.make_node("Mul", ["x", "q"], ["start"]),
             helper.make_node("SequenceConstruct", ["start"], ["first_rows"]),
             helper.make_node("Loop", ["steps", "", "first_rows"], ["rows"], body=body),
             helper.make_node("ConcatFromSequence", ["rows"], ["y0"], axis=0)]
    return Case(name, outer, {"p": f32(1, 3), "q": f32(1, 3)}, {"x": f32(1, 3)})


def loop_reading_outer_sequence() -> Case:
    """A Loop whose body reads element i of a sequence of the enclosing graph, times a carried state: the
    sequence's gradient is summed over the iterations."""
    body = helper.make_graph([
        helper.make_node("SequenceAt", ["rows", "i"], ["row"]),
        helper.make_node("Mul", ["h", "row"], ["h_next"]),
        helper.make_node("Identity", ["cond"], ["cond_out"])], "outer_sequence_body",
        [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [3])],
        [_scalar("cond_out", TensorProto.BOOL), helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("SplitToSequence", ["p"], ["rows"], axis=0, keepdims=0),
             const("steps", np.array(3, np.int64)),
             helper.make_node("Loop", ["steps", "", "h0"], ["y0"], body=body)]
    p = (np.sign(f32(3, 3)) * rng.uniform(0.5, 1.2, (3, 3))).astype(np.float32)
    return Case("loop_reads_outer_sequence", nodes, {"p": p, "h0": f32(3)})


def if_reading_sequence(taken: bool, opset: int = 17) -> Case:
    """An If whose then branch reads element 1 of a sequence of the enclosing graph and whose else branch
    reads none: the sequence's gradient is the then branch's, or a sequence of zeros from the else branch."""
    then_branch = helper.make_graph([const("then_at", np.array(1, np.int64)),
                                     helper.make_node("SequenceAt", ["pieces", "then_at"], ["then_row"]),
                                     helper.make_node("Mul", ["then_row", "q"], ["then_out"])], "then",
                                    [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Mul", ["q", "q"], ["else_out"])], "else",
                                    [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("SplitToSequence", ["p"], ["pieces"], axis=0, keepdims=0),
             helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=then_branch, else_branch=else_branch)]
    data = {"c": np.array(1.0 if taken else -1.0, np.float32), "zero": np.array(0.0, np.float32)}
    suffix = "" if opset == 17 else f"_opset{opset}"  # before 14, Identity takes no sequence
    return Case(f"if_reads_sequence_{'then' if taken else 'else'}{suffix}", nodes, {"p": f32(3, 4), "q": f32(4)}, data,
                opset=opset)


CASES: Dict[str, List[Case]] = {  # keyed by an operator of the case's own graph (the Loops': of the enclosing one)
    "SequenceConstruct": [construct_and_concat()],
    "ConcatFromSequence": [split_squeezed_and_stacked(), split_even_keepdims(),
                           loop_appending("loop_appends_to_sequence", 3), loop_reading_back("loop_reads_back_one", 1),
                           loop_reading_back("loop_reads_back_two", 2)],
    "SplitToSequence": [split_ragged(), loop_reading_outer_sequence(), if_reading_sequence(True),
                        if_reading_sequence(False), if_reading_sequence(False, opset=13)],
    "SequenceAt": [at_data_position()],
    "SequenceInsert": [appended_to_empty(), insert_and_erase("insert_back_erase_front", np.int32(-1), np.int64(0)),
                       insert_and_erase("insert_front_erase_back", np.int64(1), np.int64(-2))],
    "SequenceErase": [insert_and_erase("insert_appended_erase_last", None, None)],
}
