"""Finite-difference cases of the control-flow rules: an If whose branches read parameters of the
enclosing graph, taken either way (the condition is data), one branch leaving a parameter alone, nested,
and at a symbolic batch size."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from gradcheck import Case
from onnx import TensorProto, helper, numpy_helper

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


def if_with_two_outputs() -> Case:
    """Only the second output reaches the loss: the backward branches are seeded from it alone."""
    def two(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["p", "q"], [f"{name}_first"]),
                                  helper.make_node("Mul", [f"{name}_first", "p"], [f"{name}_second"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_first", TensorProto.FLOAT, None),
                                  helper.make_tensor_value_info(f"{name}_second", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["unused", "y0"], then_branch=two("then", "Add"),
                              else_branch=two("else", "Sub"))]
    data = {"c": np.array(-1.0, np.float32), "zero": np.array(0.0, np.float32)}
    c = Case("if_two_outputs", nodes, {"p": f32(3), "q": f32(3)}, data)
    c.outputs = ["y0"]
    return c


def if_with_layer_norm() -> Case:
    """LayerNormalization's gradient reads its mean and inverse standard deviation, outputs the branch's
    node leaves out: the recomputed node declares them."""
    then_branch = branch("then", [helper.make_node("LayerNormalization", ["h", "scale", "bias"], ["normed"]),
                                  helper.make_node("Mul", ["normed", "h"], ["from_norm"])], "from_norm")
    else_branch = branch("else", [helper.make_node("Mul", ["h", "scale"], ["from_scale"])], "from_scale")
    nodes = [helper.make_node("Mul", ["x", "p"], ["h"]),
             helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=then_branch, else_branch=else_branch)]
    data = {"x": f32(3, 4), "c": np.array(1.0, np.float32), "zero": np.array(0.0, np.float32)}
    return Case("if_layer_norm", nodes, {"p": f32(4), "scale": f32(4), "bias": f32(4)}, data, symbolic_batch=True)


def _body(name: str, nodes: List[onnx.NodeProto], inputs: List[onnx.ValueInfoProto],
          outputs: List[str]) -> onnx.GraphProto:
    """A Loop body; its first output the condition, the others float but those named n_*."""
    types = [TensorProto.BOOL] + [TensorProto.INT64 if o.startswith("n_") else TensorProto.FLOAT for o in outputs[1:]]
    return helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info(o, t, None)
                                                   for o, t in zip(outputs, types)])


def _scalar(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [])


def rnn_loop(name: str, symbolic: bool = False) -> Case:
    """h_{t+1} = tanh(h_t W + x_t) for 3 steps: the final h and every step's h reach the loss. Symbolic: the
    batch (xs [B, T, 4], h [B, 4]) is a run-time size."""
    body = _body(f"{name}_body", [
        helper.make_node("Gather", ["xs", "i"], ["x_t"], axis=1 if symbolic else 0),
        helper.make_node("MatMul", ["h", "w"], ["hw"]),
        helper.make_node("Add", ["hw", "x_t"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_next"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
        helper.make_node("Identity", ["h_next"], ["h_scan"])],
        [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, None)], ["cond_out", "h_next", "h_scan"])
    nodes = [helper.make_node("Constant", [], ["steps"], value=helper.make_tensor("steps", TensorProto.INT64, [], [3])),
             helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             helper.make_node("Mul", ["h0", "one"], ["h_start"]),
             helper.make_node("Loop", ["steps", "go", "h_start"], ["h_final", "hs"], body=body)]
    data = {"xs": f32(2, 3, 4) if symbolic else f32(3, 2, 4), "one": np.ones((2, 4), np.float32)}
    c = Case(name, nodes, {"h0": f32(4) if symbolic else f32(2, 4), "w": (f32(4, 4) * 0.5).astype(np.float32)}, data,
             symbolic_batch=symbolic)
    c.outputs = ["h_final", "hs"]
    return c


def while_loop() -> Case:
    """No trip count: the body's condition stops it after 3 iterations. An int counter is carried beside v."""
    body = _body("while_body", [
        helper.make_node("Mul", ["v", "p"], ["v_next"]),
        helper.make_node("Add", ["n", "n_step"], ["n_next"]),
        helper.make_node("Less", ["i", "two"], ["cond_out"])],
        [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.INT64, None)], ["cond_out", "v_next", "n_next"])
    nodes = [helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.INT64, [], [2])),
             helper.make_node("Constant", [], ["n_step"], value=helper.make_tensor("n_step", TensorProto.INT64, [], [1])),
             helper.make_node("Constant", [], ["n0"], value=helper.make_tensor("n0", TensorProto.INT64, [], [0])),
             helper.make_node("Loop", ["", "go", "v0", "n0"], ["v_final", "n_final"], body=body)]
    c = Case("loop_while", nodes, {"v0": f32(3), "p": (f32(3) + 1.5).astype(np.float32)})
    c.outputs = ["v_final"]
    return c


def scan_only_loop() -> Case:
    """Nothing float is carried: p reaches the loss only through the scan output."""
    body = _body("scan_body", [
        helper.make_node("Gather", ["xs", "i"], ["x_t"], axis=0),
        helper.make_node("Mul", ["x_t", "p"], ["y_t"]),
        helper.make_node("Identity", ["cond"], ["cond_out"])],
        [_scalar("i", TensorProto.INT64), _scalar("cond", TensorProto.BOOL)], ["cond_out", "y_t"])
    nodes = [helper.make_node("Constant", [], ["steps"], value=helper.make_tensor("steps", TensorProto.INT64, [], [4])),
             helper.make_node("Loop", ["steps", ""], ["ys"], body=body)]
    return Case("loop_scan_only", nodes, {"p": f32(3)}, {"xs": f32(4, 3)})


def scan_rnn() -> Case:
    """h_{t+1} = tanh(h_t W + x_t) over xs's first axis: the states, the weight and the scanned input."""
    body = helper.make_graph([helper.make_node("MatMul", ["h", "w"], ["hw"]),
                              helper.make_node("Add", ["hw", "x_t"], ["pre"]),
                              helper.make_node("Tanh", ["pre"], ["h_next"]),
                              helper.make_node("Identity", ["h_next"], ["h_out"])], "scan_rnn_body",
                             [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4]),
                              helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2, 4])],
                             [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [2, 4]),
                              helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [2, 4])])
    nodes = [helper.make_node("Scan", ["h0", "xs"], ["h_final", "hs"], body=body, num_scan_inputs=1)]
    c = Case("scan_rnn", nodes, {"h0": f32(2, 4), "w": (f32(4, 4) * 0.5).astype(np.float32), "xs": f32(3, 2, 4)})
    c.outputs = ["h_final", "hs"]
    return c


def scan_axes_and_directions() -> Case:
    """A running sum s += x_t * p over xs's axis 1 backwards, its outputs stacked along axis 1 backwards too,
    and a second input scanned forwards along axis 0."""
    body = helper.make_graph([helper.make_node("Mul", ["x_t", "p"], ["xp"]),
                              helper.make_node("Add", ["s", "xp"], ["s_next"]),
                              helper.make_node("Mul", ["s_next", "z_t"], ["y_t"])], "scan_sum_body",
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2]),
                              helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2]),
                              helper.make_tensor_value_info("z_t", TensorProto.FLOAT, [2])],
                             [helper.make_tensor_value_info("s_next", TensorProto.FLOAT, [2]),
                              helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Scan", ["s0", "xs", "zs"], ["s_final", "ys"], body=body, num_scan_inputs=2,
                              scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[-1],
                              scan_output_directions=[1])]
    c = Case("scan_axes_directions", nodes, {"s0": f32(2), "p": f32(2), "xs": f32(2, 3), "zs": f32(3, 2)})
    c.outputs = ["s_final", "ys"]
    return c


def with_body_constants(c: Case, name: str) -> Case:
    """``c`` with the last Add of its first subgraph that has one scaling its second operand by 0.5, an
    initializer of the subgraph itself, as tf2onnx writes a Loop body's constants: a + b becomes
    a + b * 0.5."""
    node = next(n for n in c.nodes if n.op_type in ("If", "Loop", "Scan"))
    graph = next(a.g for a in node.attribute if a.HasField("g") and any(n.op_type == "Add" for n in a.g.node))
    add = [n for n in graph.node if n.op_type == "Add"][-1]
    half, scaled = f"{name}_half", f"{name}_scaled"
    graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), half))
    graph.node.insert(list(graph.node).index(add), helper.make_node("Mul", [add.input[1], half], [scaled]))
    add.input[1] = scaled
    c.name = name
    return c


CASES: Dict[str, List[Case]] = {
    "If": [if_case("if_then", True), if_case("if_else", False), if_case("if_batch", True, symbolic_batch=True),
           nested_if("if_nested_then", True), nested_if("if_nested_else", False), if_on_batch_value(True),
           if_on_batch_value(False), if_with_two_outputs(), if_with_layer_norm(),
           with_body_constants(if_case("if_else_branch", False), "if_branch_constants")],
    "Scan": [scan_rnn(), scan_axes_and_directions(), with_body_constants(scan_rnn(), "scan_body_constants")],
    "Loop": [rnn_loop("loop_rnn"), rnn_loop("loop_rnn_batch", symbolic=True), while_loop(), scan_only_loop(),
             with_body_constants(rnn_loop("loop_rnn_body"), "loop_body_constants")],
}

# The recurrent family's Scan cases (counter states, values read from outside, both scan directions) check
# the same rule.
import scan_cases  # noqa: E402

CASES["Scan"] = CASES["Scan"] + scan_cases.CASES["Scan"]
