"""Finite-difference cases of the recurrent rules: LSTM, GRU and RNN in each direction (forward, reverse,
bidirectional), with and without biases, initial states and sequence lengths, and at a symbolic batch size. Layout 1 has no case: ONNX Runtime
1.19.2 runs none of the three in it (test_recurrent.py checks the refusals)."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
from gradcheck import Case
from onnx import helper

rng = np.random.default_rng(31)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
STEPS, BATCH, INPUT, HIDDEN = 4, 3, 2, 3


def f32(*shape: int, scale: float = 0.6) -> np.ndarray:
    return rng.uniform(-scale, scale, shape).astype(np.float32)


def recurrent(name: str, op: str, direction: str = "forward", *, bias: bool = True, initial: bool = False,
              lens: bool = False, peephole: bool = False, outputs: str = "all", batch_first_data: bool = False,
              opset: int = 17, **attributes: Any) -> Case:
    """One recurrent node. ``outputs``: "all" (Y and the final states), "final" (the final states only, Y
    left out), "sequence" (Y only), "hidden" (Y and Y_h) or "final_hidden" (Y_h only). The parameters: X, the weights and the initial states; the sequence
    lengths are data. ``batch_first_data``: X is data [batch, time, input] of a symbolic batch size,
    transposed to time first before the node (as torch exports ``batch_first=True``)."""
    directions = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    values: Dict[str, np.ndarray] = {"x": f32(STEPS, BATCH, INPUT), "w": f32(directions, gates * HIDDEN, INPUT),
                                     "r": f32(directions, gates * HIDDEN, HIDDEN)}
    nodes = []
    inputs = ["x", "w", "r", "", "", "", "", ""]
    if batch_first_data:
        values["x_batch_first"] = values.pop("x").transpose(1, 0, 2).copy()
        nodes.append(helper.make_node("Transpose", ["x_batch_first"], ["x"], perm=[1, 0, 2]))
    if bias:
        values["b"] = f32(directions, 2 * gates * HIDDEN)
        inputs[3] = "b"
    if lens:
        values["lens"] = np.array([STEPS, 2, 3][:BATCH], np.int32)
        inputs[4] = "lens"
    if initial:
        values["h0"] = f32(directions, BATCH, HIDDEN)
        inputs[5] = "h0"
        if op == "LSTM":
            values["c0"] = f32(directions, BATCH, HIDDEN)
            inputs[6] = "c0"
    if peephole:
        values["p"] = f32(directions, 3 * HIDDEN)
        inputs[7] = "p"
    while not inputs[-1]:
        inputs.pop()
    finals = ["y_h", "y_c"] if op == "LSTM" else ["y_h"]
    names = {"all": ["y"] + finals, "final": [""] + finals, "sequence": ["y"], "hidden": ["y", "y_h"],
             "final_hidden": ["", "y_h"]}[outputs]
    nodes.append(helper.make_node(op, inputs, names, hidden_size=HIDDEN, direction=direction, **attributes))
    data = {n: v for n, v in values.items() if n in ("lens", "x_batch_first")}
    params = {n: v for n, v in values.items() if n not in data}
    return Case(name, nodes, params, data, outputs=[n for n in names if n], symbolic_batch=batch_first_data,
                opset=opset)


def family(op: str) -> List[Case]:
    """Each direction: plain; with initial states; with initial states and sequence lengths (Y and Y_h: an
    LSTM's Y_c takes no gradient with sequence lengths); without bias, Y left out; at a symbolic batch
    size. Then Y alone, sequence lengths at a symbolic batch size, and the operator's version 7 (opset 13)."""
    low = op.lower()
    cases = []
    for direction in ("forward", "reverse", "bidirectional"):
        cases += [
            recurrent(f"{low}_{direction}", op, direction),
            recurrent(f"{low}_{direction}_initial", op, direction, initial=True),
            recurrent(f"{low}_{direction}_initial_lens", op, direction, initial=True, lens=True, outputs="hidden"),
            recurrent(f"{low}_{direction}_no_bias_final_only", op, direction, bias=False, outputs="final"),
            recurrent(f"{low}_{direction}_symbolic_batch", op, direction, batch_first_data=True, initial=True),
        ]
    cases += [recurrent(f"{low}_bidirectional_sequence_only", op, "bidirectional", outputs="sequence"),
              recurrent(f"{low}_bidirectional_lens_symbolic_batch", op, "bidirectional", lens=True,
                        batch_first_data=True, outputs="hidden"),
              recurrent(f"{low}_reverse_lens_final_only", op, "reverse", lens=True, outputs="final_hidden"),
              recurrent(f"{low}_bidirectional_opset13", op, "bidirectional", initial=True, opset=13),
              recurrent(f"{low}_forward_opset13", op, "forward", opset=13)]  # version 7 of the operator
    return cases


def rnn_activations() -> List[Case]:
    return [recurrent("rnn_relu", "RNN", activations=["Relu"]),
            recurrent("rnn_sigmoid_reverse_lens", "RNN", "reverse", lens=True, activations=["Sigmoid"]),
            recurrent("rnn_bidirectional_tanh_relu", "RNN", "bidirectional", activations=["Tanh", "Relu"],
                      initial=True),
            recurrent("rnn_clip", "RNN", "bidirectional", clip=0.5, initial=True)]


# The default activations written out in capitals, as tf2onnx writes them (ONNX Runtime's training kernels
# take them in lower case only).
SPELLED_OUT = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}

CASES: Dict[str, List[Case]] = {
    "LSTM": family("LSTM") + [recurrent("lstm_bidirectional_activations_spelled_out", "LSTM", "bidirectional",
                                        activations=SPELLED_OUT["LSTM"] * 2)],
    "GRU": family("GRU") + [
        recurrent("gru_activations_spelled_out", "GRU", activations=SPELLED_OUT["GRU"], initial=True),
        recurrent("gru_linear_before_reset", "GRU", linear_before_reset=1, initial=True),
        recurrent("gru_linear_before_reset_bidirectional", "GRU", "bidirectional", linear_before_reset=1, lens=True)],
    "RNN": family("RNN") + rnn_activations(),
}
