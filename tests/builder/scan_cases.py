"""Finite-difference cases of the Scan rule: a recurrence whose body reads parameters of the enclosing graph,
scanned forwards and backwards, with outputs stacked either way, two states (one not floating-point), a
state passed through unchanged, and a symbolic number of iterations."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
from gradcheck import Case
from onnx import TensorProto, helper

rng = np.random.default_rng(37)
FLOAT = TensorProto.FLOAT


def f32(*shape: int) -> np.ndarray:
    return rng.uniform(-0.8, 0.8, shape).astype(np.float32)


def cell(name: str, counter: bool = False, passthrough: bool = False) -> Any:
    """h' = tanh(h @ r + x_t @ w), y_t = h' * v: r, w and v read from the enclosing graph."""
    nodes = [helper.make_node("MatMul", ["h", "r"], [f"{name}_hr"]),
             helper.make_node("MatMul", ["x_t", "w"], [f"{name}_xw"]),
             helper.make_node("Add", [f"{name}_hr", f"{name}_xw"], [f"{name}_pre"]),
             helper.make_node("Tanh", [f"{name}_pre"], ["h_next"]),
             helper.make_node("Mul", ["h_next", "v"], ["y_t"])]
    inputs = [helper.make_tensor_value_info("h", FLOAT, [3, 4])]
    outputs = [helper.make_tensor_value_info("h_next", FLOAT, [3, 4])]
    if counter:
        nodes.append(helper.make_node("Add", ["step", "one"], ["step_next"]))
        inputs.append(helper.make_tensor_value_info("step", TensorProto.INT64, []))
        outputs.append(helper.make_tensor_value_info("step_next", TensorProto.INT64, []))
    if passthrough:  # through an Identity: ONNX Runtime's Scan returns garbage for an output that is an input
        nodes.append(helper.make_node("Identity", ["kept"], ["kept_next"]))
        inputs.append(helper.make_tensor_value_info("kept", FLOAT, [3, 4]))
        outputs.append(helper.make_tensor_value_info("kept_next", FLOAT, [3, 4]))
    inputs.append(helper.make_tensor_value_info("x_t", FLOAT, [3, 2]))
    outputs.append(helper.make_tensor_value_info("y_t", FLOAT, [3, 4]))
    return helper.make_graph(nodes, name, inputs, outputs)


def scan_case(name: str, *, input_direction: int = 0, output_direction: int = 0, counter: bool = False,
              passthrough: bool = False, x_data: bool = False, **extra: Any) -> Case:
    states = ["h0"] + (["step0"] if counter else []) + (["k0"] if passthrough else [])
    outputs = ["h_final"] + (["step_final"] if counter else []) + (["k_final"] if passthrough else []) + ["ys"]
    node = helper.make_node("Scan", states + ["xs"], outputs, body=cell(name, counter, passthrough),
                            num_scan_inputs=1, scan_input_directions=[input_direction],
                            scan_output_directions=[output_direction])
    params: Dict[str, np.ndarray] = {"h0": f32(3, 4), "r": f32(4, 4), "w": f32(2, 4), "v": f32(4)}
    data: Dict[str, np.ndarray] = {}
    if passthrough:
        params["k0"] = f32(3, 4)
    (data if x_data else params)["xs"] = f32(5, 3, 2)
    if counter:
        data["step0"] = np.array(0, np.int64)
        params["one"] = np.array(1, np.int64)
    chosen = [o for o in outputs if o != "step_final"]
    case = Case(name, [node], params, data, outputs=chosen, **extra)
    if counter:  # an integer initializer is no parameter to check
        del case.params["one"]
        case.data["one"] = np.array(1, np.int64)
    return case


CASES: Dict[str, List[Case]] = {
    "Scan": [scan_case("scan_forward"), scan_case("scan_reverse_input", input_direction=1),
             scan_case("scan_reverse_output", output_direction=1),
             scan_case("scan_both_reversed", input_direction=1, output_direction=1),
             scan_case("scan_with_counter", counter=True), scan_case("scan_passthrough_state", passthrough=True),
             scan_case("scan_symbolic_steps", x_data=True, symbolic_batch=True)],
}

