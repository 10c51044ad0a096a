"""Finite-difference cases of the elementwise family: arithmetic with broadcasting (static and symbolic),
n-ary Max/Min/Sum/Mean, Where, Clip, Cast, Pow in both operands, and paths through the operators that
pass no gradient."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case
from onnx import TensorProto, helper

rng = np.random.default_rng(42)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def distinct(*shape: int, spacing: float = 0.05) -> np.ndarray:
    """Values at least ``spacing`` apart (Max/Min's finite differences must not swap the largest)."""
    values = rng.permutation(int(np.prod(shape))).astype(np.float32) * spacing
    return (values - values.mean()).reshape(shape).astype(np.float32)


def with_symbolic_batch(c: Case, data: str) -> Case:
    """Feed ``data`` (a parameter of the case) as data of a symbolic batch instead."""
    c.data[data] = c.params.pop(data)
    c.symbolic_batch = True
    return c


def chain(name: str, nodes: List[helper.NodeProto], params: Dict[str, np.ndarray],
          data: Dict[str, np.ndarray] = {}, outputs: List[str] = ["y"]) -> Case:  # noqa: B006 (read only)
    return Case(name, nodes, dict(params), dict(data), outputs=list(outputs))


CASES: Dict[str, List[Case]] = {
    "Add": [case("add", "Add", [("a", f32(3, 4)), ("b", f32(3, 4))], ["a", "b"]),
            case("add_broadcast", "Add", [("a", f32(2, 3, 4)), ("b", f32(3, 1))], ["a", "b"]),
            with_symbolic_batch(case("add_symbolic", "Add", [("a", f32(5, 3, 4)), ("b", f32(3, 1))], ["a", "b"]),
                                "a")],
    "Sub": [case("sub_broadcast", "Sub", [("a", f32(4)), ("b", f32(3, 4))], ["a", "b"]),
            with_symbolic_batch(case("sub_symbolic", "Sub", [("a", f32(5, 4)), ("b", f32(4))], ["a", "b"]), "a")],
    "Mul": [case("mul_broadcast", "Mul", [("a", f32(2, 3, 4)), ("b", f32(1, 4))], ["a", "b"]),
            case("mul_same_input", "Mul", [("a", f32(3, 4)), ("a", f32(3, 4))], ["a"]),
            # y = x * Floor(x): the path through Floor adds nothing (away from the integers)
            chain("mul_through_floor", [helper.make_node("Floor", ["x"], ["f"]), helper.make_node("Mul", ["x", "f"], ["y"])],
                  {"x": f32(3, 4, low=0.1, high=0.9) + np.array([-2, -1, 0, 1], dtype=np.float32)})],
    "Div": [case("div", "Div", [("a", f32(3, 4)), ("b", f32(3, 4, low=0.5, high=2))], ["a", "b"]),
            case("div_broadcast", "Div", [("a", f32(2, 3, 4)), ("b", f32(3, 1, low=0.5, high=2))], ["a", "b"]),
            case("div_dividend_only", "Div", [("a", f32(2, 3, 4)), ("b", f32(4, low=0.5, high=2))], ["a"]),
            case("div_divisor_only", "Div", [("a", f32(3, 4)), ("b", f32(3, 4, low=0.5, high=2))], ["b"]),
            with_symbolic_batch(case("div_symbolic", "Div", [("a", f32(5, 4)), ("b", f32(4, low=0.5, high=2))],
                                     ["a", "b"]), "a")],
    "Identity": [case("identity", "Identity", [("x", f32(3, 2))], ["x"])],
    "Pow": [case("pow", "Pow", [("x", f32(3, 4, low=0.5, high=2)), ("e", f32(3, 4, low=-2, high=3))], ["x", "e"]),
            case("pow_broadcast", "Pow", [("x", f32(2, 3, 4, low=0.5, high=2)), ("e", f32(4, low=0.5, high=3))],
                 ["x", "e"]),
            case("pow_square", "Pow", [("x", f32(3, 4)), ("e", np.array(2.0, dtype=np.float32))], ["x"]),
            case("pow_integer_exponent", "Pow", [("x", f32(3, 4)), ("e", np.array(3, dtype=np.int64))], ["x"])],
    "Max": [case("max_binary", "Max", [("a", distinct(3, 4)), ("b", distinct(3, 4) + 0.025)], ["a", "b"]),
            case("max_broadcast", "Max", [("a", distinct(2, 3, 4)), ("b", distinct(4) + 0.0125), ("c", distinct(3, 1))],
                 ["a", "b", "c"]),
            case("max_one", "Max", [("a", f32(3, 4))], ["a"])],
    "Min": [case("min_binary", "Min", [("a", distinct(3, 4)), ("b", distinct(3, 4) + 0.025)], ["a", "b"]),
            with_symbolic_batch(case("min_symbolic", "Min", [("a", distinct(5, 4)), ("b", distinct(4) + 0.0125)],
                                     ["a", "b"]), "a")],
    "Sum": [case("sum", "Sum", [("a", f32(2, 3, 4)), ("b", f32(4)), ("c", f32(3, 1))], ["a", "b", "c"]),
            case("sum_one", "Sum", [("a", f32(3, 4))], ["a"])],
    "Mean": [case("mean", "Mean", [("a", f32(2, 3, 4)), ("b", f32(4)), ("c", f32(3, 1))], ["a", "b", "c"])],
    "Where": [case("where", "Where", [("c", rng.random((3, 4)) > 0.5), ("a", f32(3, 4)), ("b", f32(3, 4))], ["a", "b"]),
              case("where_broadcast", "Where", [("c", rng.random((2, 1, 4)) > 0.5), ("a", f32(3, 4)), ("b", f32(2, 3, 1))],
                   ["a", "b"])],
    "Cast": [case("cast_same_type", "Cast", [("x", f32(3, 4))], ["x"], to=TensorProto.FLOAT),
             chain("cast_there_and_back",
                   [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE),
                    helper.make_node("Mul", ["d", "d"], ["d2"]),
                    helper.make_node("Cast", ["d2"], ["y"], to=TensorProto.FLOAT)], {"x": f32(3, 4)})],
    # torch's default exporter writes CastLike where it is not asked to optimize (opset 15 on)
    "CastLike": [chain("cast_like_there_and_back",
                       [helper.make_node("CastLike", ["x", "as_double"], ["d"]),
                        helper.make_node("Mul", ["d", "d"], ["d2"]),
                        helper.make_node("CastLike", ["d2", "as_float"], ["y"])], {"x": f32(3, 4)},
                       {"as_double": np.zeros(1, np.float64), "as_float": np.zeros(1, np.float32)})],
    "Clip": [case("clip_both", "Clip", [("x", f32(4, 5, low=-2, high=2)),
                                        ("lo", np.array(-0.55, dtype=np.float32)), ("hi", np.array(0.65, dtype=np.float32))],
                  ["x", "lo", "hi"]),
             case("clip_min_only", "Clip", [("x", f32(4, 5, low=-2, high=2)), ("lo", np.array(0.15, dtype=np.float32))],
                  ["x", "lo"]),
             case("clip_max_only", "Clip", [("x", f32(4, 5, low=-2, high=2)), ("", None),
                                            ("hi", np.array(0.35, dtype=np.float32))], ["x", "hi"]),
             case("clip_none", "Clip", [("x", f32(3, 4))], ["x"]),
             case("clip_data_bounds", "Clip", [("x", f32(4, 5, low=-2, high=2)), ("lo", np.array(-0.45, dtype=np.float32)),
                                               ("hi", np.array(0.75, dtype=np.float32))], ["x"])],
}
for c in CASES["Clip"]:  # keep x a step away from the bounds
    x = c.params["x"]
    for bound in ("lo", "hi"):
        value = c.params.get(bound, c.data.get(bound))
        if value is not None:
            close = np.abs(x - value) < 0.05
            x[close] += 0.1
cast_21 = chain("cast_there_and_back_21", [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE, saturate=1),
                                           helper.make_node("Cast", ["d"], ["y"], to=TensorProto.FLOAT)],
                {"x": f32(3, 4)})
cast_21.opset = 21
CASES["Cast"].append(cast_21)
