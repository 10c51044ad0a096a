"""Finite-difference cases of the reduction family: every Reduce* in its opset-13 form (axes attribute,
ReduceSum's input) and its opset-18 form (axes input), keepdims on and off, negative and run-time axes,
noop_with_empty_axes, ties and zeros where they matter, and CumSum's exclusive/reverse forms."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case
from onnx import TensorProto, helper

rng = np.random.default_rng(13)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


CASES: Dict[str, List[Case]] = {
    "ReduceSum": [case("reduce_sum_all", "ReduceSum", [("x", f32(2, 3, 4))], ["x"], keepdims=0),
                  case("reduce_sum_axes", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([-1, 0]))], ["x"],
                       keepdims=0),
                  case("reduce_sum_keep", "ReduceSum", [("x", f32(2, 3, 4)), ("axes", np.array([1]))], ["x"])],
}


def reduce_cases(op: str, make_x=f32) -> List[Case]:  # type: ignore[no-untyped-def]
    """The forms every reduction is checked in: attribute axes (opset 13), input axes (opset 18), all
    axes, keepdims on and off, negative axes, axes fed at run time, a symbolic batch, noop_with_empty_axes."""
    short = op[len("Reduce"):].lower()
    found: List[Case] = []
    attribute = op != "ReduceSum"  # ReduceSum takes its axes as an input from opset 13
    if attribute:
        c = case(f"{short}_13_axes", op, [("x", make_x(2, 3, 4))], ["x"], axes=[0, -1], keepdims=0)
        c.opset = 13
        found.append(c)
        c = case(f"{short}_13_all_keep", op, [("x", make_x(2, 3, 4))], ["x"])
        c.opset = 13
        found.append(c)
    opset = 18
    c = case(f"{short}_18_axes", op, [("x", make_x(2, 3, 4)), ("axes", np.array([1, -1]))], ["x"], keepdims=0)
    c.opset = opset
    found.append(c)
    c = case(f"{short}_18_keep", op, [("x", make_x(2, 3, 4)), ("axes", np.array([1]))], ["x"])
    c.opset = opset
    found.append(c)
    c = case(f"{short}_18_all", op, [("x", make_x(3, 4))], ["x"], keepdims=0)
    c.opset = opset
    found.append(c)
    c = case(f"{short}_18_run_time_axes", op, [("x", make_x(2, 3, 4)), ("axes", np.array([-2]))], ["x"], keepdims=0)
    c.opset, c.symbolic_batch = opset, True  # the axes are data: known at run time only
    found.append(c)
    c = case(f"{short}_18_noop", op, [("x", make_x(3, 4)), ("axes", None)], ["x"], noop_with_empty_axes=1)
    del c.data["axes"]
    empty = helper.make_tensor("empty", TensorProto.INT64, [0], [])
    c.nodes.insert(0, helper.make_node("Constant", [], ["axes"], value=empty))  # no empty feeds: a constant
    c.opset = opset
    found.append(c)
    return found


def positive(*shape: int) -> np.ndarray:
    return f32(*shape, low=0.3, high=1.5)


def distinct(*shape: int) -> np.ndarray:
    values = rng.permutation(int(np.prod(shape))).astype(np.float32) * 0.05
    return (values - values.mean()).reshape(shape).astype(np.float32)


def away_from_zero(*shape: int) -> np.ndarray:
    values = f32(*shape)
    return (np.sign(values) * (0.1 + np.abs(values))).astype(np.float32)


def with_zeros(*shape: int) -> np.ndarray:
    """Values of a product with one zero in some slices and two in another (checked along the last axis)."""
    values = f32(*shape, low=0.5, high=1.5)
    flat = values.reshape(-1, shape[-1])
    flat[0, 1] = 0.0
    flat[1, 0] = flat[1, 2] = 0.0
    return values


CASES["ReduceSum"] += reduce_cases("ReduceSum")  # the cases above: its input form in opset 17
CASES.update({
    "ReduceMean": reduce_cases("ReduceMean"),
    "ReduceMax": reduce_cases("ReduceMax", distinct),
    "ReduceMin": reduce_cases("ReduceMin", distinct),
    "ReduceProd": reduce_cases("ReduceProd", positive),
    "ReduceL1": reduce_cases("ReduceL1", away_from_zero),
    "ReduceL2": reduce_cases("ReduceL2"),
    "ReduceSumSquare": reduce_cases("ReduceSumSquare"),
    "ReduceLogSum": reduce_cases("ReduceLogSum", positive),
    "ReduceLogSumExp": reduce_cases("ReduceLogSumExp"),
    "CumSum": [case(f"cum_sum_{exclusive}{reverse}", "CumSum", [("x", f32(2, 3, 4)), ("axis", np.array(axis))], ["x"],
                    exclusive=exclusive, reverse=reverse)
               for axis, exclusive, reverse in ((1, 0, 0), (-1, 1, 0), (0, 0, 1), (2, 1, 1))],
})
CASES["ReduceProd"] += [case("prod_zeros_axis", "ReduceProd", [("x", with_zeros(3, 4))], ["x"], axes=[-1], keepdims=0),
                        case("prod_one_zero_all", "ReduceProd", [("x", np.array([[0.7, 0.0, 1.3], [1.1, 0.9, 1.2]], dtype=np.float32))], ["x"])]
CASES["ReduceProd"][-2].opset = CASES["ReduceProd"][-1].opset = 13
ties = np.array([[0.5, -0.2, 0.5, 0.1], [0.3, 0.3, -0.7, 0.2], [0.9, 0.9, -0.3, -0.1]], dtype=np.float32)
tie = case("max_ties", "ReduceMax", [("x", ties)], ["x"], axes=[1], keepdims=0)
tie.opset = 13  # two-way ties: central differences measure the mean of the two sides, the shared gradient
CASES["ReduceMax"].append(tie)
for op in ("ReduceMean", "ReduceMax", "ReduceLogSumExp"):  # the newest opset ONNX Runtime 1.19.2 takes
    newest = case(f"{op[len('Reduce'):].lower()}_21_axes", op, [("x", distinct(2, 3, 4)), ("axes", np.array([0, 2]))],
                  ["x"], keepdims=0)
    newest.opset = 21
    CASES[op].append(newest)
