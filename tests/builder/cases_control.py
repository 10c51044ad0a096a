"""Finite-difference cases of the control-flow rules: an If whose branches read parameters of the
enclosing graph, taken either way (the condition is data), one branch leaving a parameter alone, nested,
and at a symbolic batch size."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from gradcheck import Case
from onnx import TensorProto, helper

rng = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


def branch(name: str, nodes: List[onnx.NodeProto], output: str) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)])


def if_case(name: str, taken: bool, **extra: object) -> Case:
    """y = If(c > 0): relu(p * x) @ w  else: (p + q) @ w, reading p, q, w and x from the graph."""
    then_branch = branch("then", [helper.make_node("Mul", ["p", "x"], [f"{name}_px"]),
                                  helper.make_node("Relu", [f"{name}_px"], [f"{name}_r"]),
                                  helper.make_node("MatMul", [f"{name}_r", "w"], [f"{name}_then"])], f"{name}_then")
    else_branch = branch("else", [helper.make_node("Add", ["p", "q"], [f"{name}_pq"]),
                                  helper.make_node("MatMul", [f"{name}_pq", "w"], [f"{name}_else"])], f"{name}_else")
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=then_branch, else_branch=else_branch)]
    x = rng.uniform(0.2, 1.0, (3, 4)).astype(np.float32)  # p * x keeps p's sign: away from Relu's kink
    p = (np.sign(f32(4)) * rng.uniform(0.2, 1.0, 4)).astype(np.float32)
    data = {"c": np.array(1.0 if taken else -1.0, np.float32), "zero": np.array(0.0, np.float32), "x": x}
    return Case(name, nodes, {"p": p, "q": f32(4), "w": f32(4, 2)}, data, **extra)  # type: ignore[arg-type]


def nested_if(name: str, inner_taken: bool) -> Case:
    inner = helper.make_node("If", ["inner_cond"], ["outer_then"],
                             then_branch=branch("inner_then", [helper.make_node("Mul", ["p", "p"], ["sq"])], "sq"),
                             else_branch=branch("inner_else", [helper.make_node("Sub", ["q", "p"], ["diff"])], "diff"))
    outer_then = branch("outer_then_branch", [inner], "outer_then")
    outer_else = branch("outer_else_branch", [helper.make_node("Identity", ["q"], ["outer_else"])], "outer_else")
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("Greater", ["d", "zero"], ["inner_cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=outer_then, else_branch=outer_else)]
    data = {"c": np.array(1.0, np.float32), "d": np.array(1.0 if inner_taken else -1.0, np.float32),
            "zero": np.array(0.0, np.float32)}
    return Case(name, nodes, {"p": f32(3), "q": f32(3)}, data)


def if_on_batch_value(taken: bool) -> Case:
    """h = x * p has a run-time batch size; the else branch does not read it, so it gives h zeros of a
    shape known only at run time."""
    then_branch = branch("then", [helper.make_node("MatMul", ["h", "w"], ["from_h"])], "from_h")
    else_branch = branch("else", [helper.make_node("MatMul", ["x", "w"], ["from_x"])], "from_x")
    nodes = [helper.make_node("Mul", ["x", "p"], ["h"]),
             helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=then_branch, else_branch=else_branch)]
    data = {"x": f32(3, 4), "c": np.array(1.0 if taken else -1.0, np.float32), "zero": np.array(0.0, np.float32)}
    return Case(f"if_batch_value_{'then' if taken else 'else'}", nodes, {"p": f32(4), "w": f32(4, 2)}, data,
                symbolic_batch=True)


CASES: Dict[str, List[Case]] = {
    "If": [if_case("if_then", True), if_case("if_else", False), if_case("if_batch", True, symbolic_batch=True),
           nested_if("if_nested_then", True), nested_if("if_nested_else", False), if_on_batch_value(True),
           if_on_batch_value(False)],
}
