"""LSTMTraining / LSTMGrad and GRUTraining / GRUGrad (ONNX Runtime 1.19.2's training kernels) in standard
operators. ONNX Runtime has no training form of RNN: its gradient is written in standard operators by the
builder already.

What the kernels compute, and so what these rules compute (measured against them in
tests/engine/test_lowering_recurrent.py):

- **LSTMTraining**: the LSTM operator's Y, Y_h and Y_c (the kernel's are the standard operator's to the bit;
  these rules' agree to about 3e-7), and for its gradient all cell states C [T, 1, B, H] and the gate values
  iofc [T, 1, B, 4H] *after* their activations (i, o, f = sigmoid, c = tanh), peephole weights included.
- **LSTMGrad**: inputs X, W, R, sequence_lens, H0, C0, then the saved all hidden states, all cell states and
  iofc, then the gradients of Y, Y_h and Y_c (ONNX Runtime's builder leaves the bias and the peephole weights
  out: no gradient reads them). Outputs the gradients of X, W, R, B, H0, C0 and P. Its recurrence ignores the
  peephole weights (what flows into C_{t-1} through them is dropped), its dP is the sum over steps and batch.
- **GRUTraining**: the GRU operator's Y and Y_h, and z, r, h [T, 1, B, 3H] after their activations.
- **GRUGrad**: inputs X, W, R, B, sequence_lens, H0, the saved all hidden states and zrh, the gradients of Y
  and Y_h; outputs the gradients of X, W, R, B and H0, for either ``linear_before_reset``.

The forms. The forward is one ``Scan`` over time holding the cell (one product with R, the gates, the
states); X·Wᵀ and the biases are one product over the whole sequence before it, and the Scan's per-step
outputs are Y and the values the gradient reads. (Keeping the standard LSTM / GRU operator, which gives Y bit
for bit, and recomputing the gates from Y after it, measured 1.5 to 2 times slower: the recurrent product is
then computed twice.)

The backward is a reverse ``Scan`` in which only the recurrence is serial: per step, the hidden state's
gradient (and the LSTM's cell state's), the gate gradients that they make (elementwise products with factors
computed for all steps before the loop), and one product with R back into the previous hidden state. The
gradients of X, W, R and the bias are then matrix products over the whole sequence, after the loop, where
ONNX Runtime's kernels compute them one step and one batch row at a time. scripts/bench_recurrent.py times
both: at T 50, batch 32, input 64, hidden 128, one thread, a training op and its gradient took 0.26-0.30 of
the kernels' time for the LSTM and 0.30-0.47 for the GRU, on 1.19.2 and on 1.31.1 alike (a shared, noisy
machine).

The kernels take the forward direction only, the default activations, no clip, no ``input_forget`` and no
sequence lengths, and refuse the rest when the session is made; these rules refuse the same, by name, with a
``LoweringError``. ``layout`` (which the kernels do not read) must be 0.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from ort_cffi._backends.engine.lowering.registry import Emitter, LoweringError, attribute, lowers

# input positions of the training kernels (those of the LSTM and GRU operators)
X, W, R, B, SEQUENCE_LENS, H0, C0, P = range(8)
# LSTMGrad's inputs (ONNX Runtime's builder leaves out B and P) and GRUGrad's
LSTM_GRAD_INPUTS = ("X", "W", "R", "sequence_lens", "initial_h", "initial_c", "all_hidden_states", "all_cell_states",
                    "iofc", "grad_all_hidden_states", "grad_final_hidden_state", "grad_final_cell_state")
GRU_GRAD_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "all_hidden_states", "zrh",
                   "grad_all_hidden_states", "grad_final_hidden_state")


# --- what the kernels accept ---------------------------------------------------------------------------------
def _describe(node: onnx.NodeProto) -> str:
    return f"com.microsoft::{node.op_type} node {node.name!r}" if node.name else f"a com.microsoft::{node.op_type} node"


def _check_attributes(node: onnx.NodeProto, activations: Sequence[str], lens: int = SEQUENCE_LENS) -> int:
    """Refuse what ONNX Runtime's training kernels refuse (lstm_io_utils.cc, gru_io_utils.cc); ``lens``: the
    position of the node's sequence lengths. Returns hidden_size."""
    where = _describe(node)
    hidden = attribute(node, "hidden_size")
    if hidden is None or int(hidden) <= 0:
        raise LoweringError(f"{where} has no positive hidden_size")
    direction = attribute(node, "direction", "forward")
    if direction != "forward":
        raise LoweringError(f"{where} has direction {direction!r}: ONNX Runtime's training kernels compute the "
                            "forward direction only, and so does this lowering")
    given = [a.lower() for a in attribute(node, "activations", []) or []]
    if given and given != [a.lower() for a in activations]:
        raise LoweringError(f"{where} has the activations {', '.join(given)}: ONNX Runtime's training kernels "
                            f"compute {', '.join(activations)} only")
    if attribute(node, "clip") is not None:
        raise LoweringError(f"{where} has clip, which ONNX Runtime's training kernels do not compute")
    if int(attribute(node, "input_forget", 0)):
        raise LoweringError(f"{where} combines the input and forget gates (input_forget=1), which ONNX Runtime's "
                            "training kernels do not compute")
    if int(attribute(node, "layout", 0)):
        raise LoweringError(f"{where} has layout=1 (batch first); the training kernels read time first only")
    if _input(node, lens) is not None:
        raise LoweringError(f"{where} has sequence lengths, which ONNX Runtime's training kernels refuse "
                            "(\"Varying sequence lengths is not supported yet\")")
    return int(hidden)


def _input(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.input[index] if index < len(node.input) and node.input[index] else None


def _output(node: onnx.NodeProto, index: int) -> str:
    """The node's output name at ``index``; "" where it is left out (not needed)."""
    return node.output[index] if index < len(node.output) else ""


# --- small forms ---------------------------------------------------------------------------------------------
def _ints(emit: Emitter, *values: int) -> str:
    return emit.const(np.array(values, np.int64))


def _slice(emit: Emitter, x: str, start: int, end: int, axis: int) -> str:
    return emit.one("Slice", [x, _ints(emit, start), _ints(emit, end), _ints(emit, axis)])


def _gate(emit: Emitter, x: str, hidden: int, first: int, count: int = 1) -> str:
    """Gates ``first`` .. ``first + count - 1`` of ``x`` [..., gates * hidden], along its last axis."""
    return _slice(emit, x, first * hidden, (first + count) * hidden, -1)


def _one_direction(emit: Emitter, x: str) -> str:
    """[1, ...] (one direction) as [...]; a weight [1, gates * hidden, n] becomes [gates * hidden, n]."""
    return emit.squeeze(x, [0])


def _zeros_state(emit: Emitter, x: str, hidden: int) -> str:
    """Zeros [1, batch, hidden] in X's element type: a missing initial state or final-state gradient."""
    batch = _slice(emit, emit.one("Shape", [x]), 1, 2, 0)
    shape = emit.one("Concat", [_ints(emit, 1), batch, _ints(emit, hidden)], axis=0)
    elem = emit.elem_type(x) or TensorProto.FLOAT
    return emit.one("ConstantOfShape", [shape], value=helper.make_tensor("zero", elem, [1], [0]))


def _state(emit: Emitter, node: onnx.NodeProto, index: int, x: str, hidden: int) -> str:
    """Input ``index`` (an initial state [1, batch, hidden]) or zeros."""
    given = _input(node, index)
    return given if given is not None else _zeros_state(emit, x, hidden)


def _previous(emit: Emitter, initial: str, every: str) -> str:
    """The state before each step, [T, batch, hidden]: ``initial`` [1, batch, hidden], then ``every`` [T,
    batch, hidden] less its last step."""
    return emit.one("Concat", [initial, _slice(emit, every, 0, -1, 0)], axis=0)


def _sigmoid_slope(emit: Emitter, s: str) -> str:
    """s·(1 - s): the sigmoid's derivative from its value."""
    return emit.one("Mul", [s, emit.one("Sub", [emit.const_like(1.0, s), s])])


def _tanh_slope(emit: Emitter, t: str) -> str:
    """1 - t²: tanh's derivative from its value."""
    return emit.one("Sub", [emit.const_like(1.0, t), emit.one("Mul", [t, t])])


def _times_weight(emit: Emitter, x: str, weight: str) -> str:
    """x [..., n] · weightᵀ, ``weight`` [m, n]: [..., m]."""
    return emit.one("MatMul", [x, emit.one("Transpose", [weight], perm=[1, 0])])


def _weight_grad(emit: Emitter, grad: str, value: str) -> str:
    """Σ over steps and batch of gradᵀ·value: ``grad`` [T, batch, m], ``value`` [T, batch, n] -> [m, n], as
    one product over the flattened sequence."""
    return emit.one("Gemm", [emit.one("Flatten", [grad], axis=2), emit.one("Flatten", [value], axis=2)], transA=1)


def _sum_steps(emit: Emitter, x: str) -> str:
    """Σ over steps and batch of x [T, batch, n]: [n]."""
    return emit.reduce("ReduceSum", x, [0, 1], keepdims=False)


class _Scan:
    """A ``Scan`` body written with its own emitter (names unique in the whole model): states first, then the
    per-step slices; the body reads the outer graph's values by name."""

    def __init__(self, emit: Emitter, elem_type: int, label: str):
        self.outer = emit
        self.elem_type = elem_type
        self.body = Emitter(emit.opset, emit.taken, dict(emit.types), f"{emit.label}/{label}")
        self.label = label
        self.inputs: List[onnx.ValueInfoProto] = []

    def value(self, hint: str) -> str:
        """A body input: a state or one step's slice, [batch, n]."""
        name = self.body.fresh(hint)
        self.inputs.append(helper.make_tensor_value_info(name, self.elem_type, [None, None]))
        self.body.types[name] = helper.make_tensor_type_proto(self.elem_type, [None, None])
        return name

    def run(self, initial: Sequence[str], scanned: Sequence[str], outputs: Sequence[str], states: int,
            reverse: bool) -> List[str]:
        """The Scan over ``scanned`` (time first), starting from ``initial``; ``outputs``: the next states,
        then the per-step values. Returns the final states, then the stacked per-step values (in time
        order, also for a reverse Scan)."""
        body_outputs = [helper.make_tensor_value_info(n, self.elem_type, [None, None]) for n in outputs]
        graph = helper.make_graph(self.body.nodes, self.body.fresh("body"), self.inputs, body_outputs)
        count = len(scanned)
        return self.outer.node("Scan", list(initial) + list(scanned), len(outputs), body=graph,
                               num_scan_inputs=count, scan_input_directions=[int(reverse)] * count,
                               scan_output_directions=[int(reverse)] * (len(outputs) - states))


def _elem_type(emit: Emitter, x: str) -> int:
    return emit.elem_type(x) or TensorProto.FLOAT


# --- LSTM ------------------------------------------------------------------------------------------------------
def _split(emit: Emitter, x: str, sizes: Sequence[int]) -> List[str]:
    """``x`` cut along its last axis into parts of ``sizes`` (Split's form at the model's opset)."""
    if emit.opset >= 13:
        return emit.node("Split", [x, emit.const(np.array(sizes, np.int64))], len(sizes), axis=-1)
    return emit.node("Split", [x], len(sizes), axis=-1, split=list(sizes))


@lowers("LSTMTraining")
def lstm_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """LSTMTraining as one forward Scan (the whole cell per step), X·Wᵀ for all steps before it; the Scan's
    per-step values are the cell states and the gate values its gradient reads."""
    hidden = _check_attributes(node, ("sigmoid", "tanh", "tanh"))
    x, w, r = node.input[X], node.input[W], node.input[R]
    bias, peephole = _input(node, B), _input(node, P)
    from_x = _times_weight(emit, x, _one_direction(emit, w))
    if bias is not None:
        flat = _one_direction(emit, bias)
        both_biases = emit.one("Add", [_gate(emit, flat, hidden, 0, 4), _gate(emit, flat, hidden, 4, 4)])
        from_x = emit.one("Add", [from_x, both_biases])
    r_t = emit.one("Transpose", [_one_direction(emit, r)], perm=[1, 0])
    h0 = emit.squeeze(_state(emit, node, H0, x, hidden), [0])
    c0 = emit.squeeze(_state(emit, node, C0, x, hidden), [0])
    scan = _Scan(emit, _elem_type(emit, x), "lstm_forward")
    step = scan.body
    h, c, x_t = scan.value("h"), scan.value("c"), scan.value("from_x")
    pre = step.one("Add", [x_t, step.one("MatMul", [h, r_t])])
    if peephole is None:
        pre_iof, pre_c = _split(step, pre, [3 * hidden, hidden])
        sig = step.one("Sigmoid", [pre_iof])
        c_gate = step.one("Tanh", [pre_c])
        i_t, o_t, f_t = _split(step, sig, [hidden] * 3)
        c_next = step.one("Add", [step.one("Mul", [f_t, c]), step.one("Mul", [i_t, c_gate])])
        h_next = step.one("Mul", [o_t, step.one("Tanh", [c_next])])
        per_step = [sig, c_gate]
    else:
        p_i, p_o, p_f = _split(emit, _one_direction(emit, peephole), [hidden] * 3)
        pre_i, pre_o, pre_f, pre_c = _split(step, pre, [hidden] * 4)
        i_t = step.one("Sigmoid", [step.one("Add", [pre_i, step.one("Mul", [p_i, c])])])
        f_t = step.one("Sigmoid", [step.one("Add", [pre_f, step.one("Mul", [p_f, c])])])
        c_gate = step.one("Tanh", [pre_c])
        c_next = step.one("Add", [step.one("Mul", [f_t, c]), step.one("Mul", [i_t, c_gate])])
        o_t = step.one("Sigmoid", [step.one("Add", [pre_o, step.one("Mul", [p_o, c_next])])])
        h_next = step.one("Mul", [o_t, step.one("Tanh", [c_next])])
        per_step = [step.one("Concat", [i_t, o_t, f_t], axis=-1), c_gate]
    outputs = [h_next, c_next, step.one("Identity", [h_next]), step.one("Identity", [c_next])] + per_step
    final_h, final_c, all_h, all_c, sig_all, c_all = scan.run([h0, c0], [from_x], outputs, 2, reverse=False)
    emit.unsqueeze(all_h, [1], _output(node, 0) or None)
    if _output(node, 1):
        emit.unsqueeze(final_h, [0], _output(node, 1))
    if _output(node, 2):
        emit.unsqueeze(final_c, [0], _output(node, 2))
    if _output(node, 3):
        emit.unsqueeze(all_c, [1], _output(node, 3))
    if _output(node, 4):
        emit.unsqueeze(emit.one("Concat", [sig_all, c_all], axis=-1), [1], _output(node, 4))


@lowers("LSTMGrad")
def lstm_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """The gradients of an LSTMTraining node's inputs, as its kernel computes them."""
    hidden = _check_attributes(node, ("sigmoid", "tanh", "tanh"), lens=3)
    where = _describe(node)
    for index in (0, 1, 2, 6, 7, 8):
        if _input(node, index) is None:
            raise LoweringError(f"{where} lacks its input {LSTM_GRAD_INPUTS[index]} (position {index})")
    wanted = [_output(node, i) for i in range(7)]
    if not any(wanted):
        return
    x, w, r = node.input[0], node.input[1], node.input[2]
    all_h, all_c, iofc = (emit.squeeze(node.input[i], [1]) for i in (6, 7, 8))
    h0 = _state(emit, node, 4, x, hidden)
    c0 = _state(emit, node, 5, x, hidden)
    # factors of all steps, from the saved values
    i_gate, o_gate, f_gate, c_gate = _split(emit, iofc, [hidden] * 4)
    tanh_c = emit.one("Tanh", [all_c])
    c_prev = _previous(emit, c0, all_c)
    # dC_t += dH_t·o_t·(1 - tanh²C_t); the gates' gradients: di = dC·c·i', do = dH·tanh(C)·o',
    # df = dC·C_{t-1}·f', dc = dC·i·(1 - c²). The activations' slopes from their values in one pass over iofc:
    # (1 - g)·(g + shift), with shift 0 for the sigmoids (g·(1 - g)) and 1 for the tanh ((1 - c)·(1 + c))
    shift = np.concatenate([np.zeros(3 * hidden), np.ones(hidden)]).astype(emit.dtype(x) or np.float32)
    one = emit.const_like(1.0, c_gate)
    slopes = emit.one("Mul", [emit.one("Sub", [one, iofc]), emit.one("Add", [iofc, emit.const(shift)])])
    from_h = emit.one("Mul", [o_gate, _tanh_slope(emit, tanh_c)])
    factors = emit.one("Mul", [emit.one("Concat", [c_gate, tanh_c, c_prev, i_gate], axis=-1), slopes])
    recurrent = _one_direction(emit, r)  # [4H, H]: dH_{t-1} = da_t · R
    elem = _elem_type(emit, x)

    scan = _Scan(emit, elem, "lstm_backward")
    step = scan.body
    carry_h, carry_c = scan.value("dh"), scan.value("dc")
    scanned, grad_y = [], _input(node, 9)
    if grad_y is not None:
        scanned.append(emit.squeeze(grad_y, [1]))
        d_h = step.one("Add", [carry_h, scan.value("dy")])
    else:
        d_h = carry_h
    scanned += [from_h, factors, f_gate]
    from_h_t, factors_t, f_t = scan.value("from_h"), scan.value("factors"), scan.value("f")
    d_c = step.one("Add", [carry_c, step.one("Mul", [d_h, from_h_t])])
    d_a = step.one("Mul", [step.one("Concat", [d_c, d_h, d_c, d_c], axis=-1), factors_t])
    next_h = step.one("MatMul", [d_a, recurrent])
    next_c = step.one("Mul", [d_c, f_t])
    initial_h = emit.squeeze(_input(node, 10) or _zeros_state(emit, x, hidden), [0])
    initial_c = emit.squeeze(_input(node, 11) or _zeros_state(emit, x, hidden), [0])
    first_h, first_c, grad_a = scan.run([initial_h, initial_c], scanned, [next_h, next_c, d_a], 2, reverse=True)

    if wanted[0]:
        emit.one("MatMul", [grad_a, _one_direction(emit, w)], wanted[0])
    if wanted[1]:
        emit.unsqueeze(_weight_grad(emit, grad_a, x), [0], wanted[1])
    if wanted[2]:
        emit.unsqueeze(_weight_grad(emit, grad_a, _previous(emit, h0, all_h)), [0], wanted[2])
    if wanted[3]:
        total = _sum_steps(emit, grad_a)
        emit.unsqueeze(emit.one("Concat", [total, total], axis=0), [0], wanted[3])
    if wanted[4]:
        emit.unsqueeze(first_h, [0], wanted[4])
    if wanted[5]:
        emit.unsqueeze(first_c, [0], wanted[5])
    if wanted[6]:
        # dP_i = Σ di·C_{t-1}, dP_o = Σ do·C_t, dP_f = Σ df·C_{t-1}
        states = emit.one("Concat", [c_prev, all_c, c_prev], axis=-1)
        emit.unsqueeze(_sum_steps(emit, emit.one("Mul", [_gate(emit, grad_a, hidden, 0, 3), states])), [0], wanted[6])


# --- GRU -------------------------------------------------------------------------------------------------------
@lowers("GRUTraining")
def gru_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """GRUTraining as one forward Scan, X·Wᵀ for all steps before it; the Scan's per-step values are the
    gate values its gradient reads."""
    hidden = _check_attributes(node, ("sigmoid", "tanh"))
    lbr = int(attribute(node, "linear_before_reset", 0))
    x, w, r = node.input[X], node.input[W], node.input[R]
    bias = _input(node, B)
    from_x = _times_weight(emit, x, _one_direction(emit, w))
    r2 = _one_direction(emit, r)
    r_zr = emit.one("Transpose", [_slice(emit, r2, 0, 2 * hidden, 0)], perm=[1, 0])
    r_h = emit.one("Transpose", [_slice(emit, r2, 2 * hidden, 3 * hidden, 0)], perm=[1, 0])
    x_zr, x_h = _split(emit, from_x, [2 * hidden, hidden])
    r_bias_h = None
    if bias is not None:
        w_bz, w_bh, r_bz, r_bh = _split(emit, _one_direction(emit, bias), [2 * hidden, hidden, 2 * hidden, hidden])
        x_zr = emit.one("Add", [x_zr, emit.one("Add", [w_bz, r_bz])])
        if lbr:  # Rbh is inside the reset gate's product: it stays in the step
            x_h, r_bias_h = emit.one("Add", [x_h, w_bh]), r_bh
        else:
            x_h = emit.one("Add", [x_h, emit.one("Add", [w_bh, r_bh])])
    h0 = emit.squeeze(_state(emit, node, H0, x, hidden), [0])
    scan = _Scan(emit, _elem_type(emit, x), "gru_forward")
    step = scan.body
    h, x_zr_t, x_h_t = scan.value("h"), scan.value("from_x_zr"), scan.value("from_x_h")
    zr = step.one("Sigmoid", [step.one("Add", [x_zr_t, step.one("MatMul", [h, r_zr])])])
    z_t, r_t = _split(step, zr, [hidden, hidden])
    if lbr:
        recurrent = step.one("MatMul", [h, r_h])
        if r_bias_h is not None:
            recurrent = step.one("Add", [recurrent, r_bias_h])
        h_pre = step.one("Add", [x_h_t, step.one("Mul", [r_t, recurrent])])
    else:
        h_pre = step.one("Add", [x_h_t, step.one("MatMul", [step.one("Mul", [r_t, h]), r_h])])
    h_gate = step.one("Tanh", [h_pre])
    h_next = step.one("Add", [h_gate, step.one("Mul", [z_t, step.one("Sub", [h, h_gate])])])
    outputs = [h_next, step.one("Identity", [h_next]), zr, h_gate]
    final_h, all_h, zr_all, h_all = scan.run([h0], [x_zr, x_h], outputs, 1, reverse=False)
    emit.unsqueeze(all_h, [1], _output(node, 0) or None)
    if _output(node, 1):
        emit.unsqueeze(final_h, [0], _output(node, 1))
    if _output(node, 2):
        emit.unsqueeze(emit.one("Concat", [zr_all, h_all], axis=-1), [1], _output(node, 2))


@lowers("GRUGrad")
def gru_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """The gradients of a GRUTraining node's inputs, as its kernel computes them."""
    hidden = _check_attributes(node, ("sigmoid", "tanh"))
    where = _describe(node)
    for index in (0, 1, 2, 6, 7):
        if _input(node, index) is None:
            raise LoweringError(f"{where} lacks its input {GRU_GRAD_INPUTS[index]} (position {index})")
    wanted = [_output(node, i) for i in range(5)]
    if not any(wanted):
        return
    lbr = int(attribute(node, "linear_before_reset", 0))
    x, w, r = node.input[0], node.input[1], node.input[2]
    bias = _input(node, 3)
    all_h, zrh = emit.squeeze(node.input[6], [1]), emit.squeeze(node.input[7], [1])
    h_prev = _previous(emit, _state(emit, node, 5, x, hidden), all_h)
    z, reset, h_gate = (_gate(emit, zrh, hidden, k) for k in range(3))
    r2 = _one_direction(emit, r)
    # H_t = (1 - z)·h + z·H_{t-1}: dz = dH·(H_{t-1} - h)·z', dh = dH·(1 - z)·(1 - h²)
    from_z = emit.one("Mul", [emit.one("Sub", [h_prev, h_gate]), _sigmoid_slope(emit, z)])
    from_h = emit.one("Mul", [emit.one("Sub", [emit.const_like(1.0, z), z]), _tanh_slope(emit, h_gate)])
    reset_slope = _sigmoid_slope(emit, reset)
    elem = _elem_type(emit, x)
    scan = _Scan(emit, elem, "gru_backward")
    step = scan.body
    carry = scan.value("dh")
    scanned, grad_y = [], _input(node, 8)
    if grad_y is not None:
        scanned.append(emit.squeeze(grad_y, [1]))
        d_h = step.one("Add", [carry, scan.value("dy")])
    else:
        d_h = carry
    if lbr:
        # dr = dh_a·(H_{t-1}·Rhᵀ + Rbh), known for all steps: every gate gradient is dH times a factor, and
        # dH_{t-1} = dH·z + [dz, dr, dh·r]·R
        recurrent = _times_weight(emit, h_prev, _slice(emit, r2, 2 * hidden, 3 * hidden, 0))
        if bias is not None:
            recurrent = emit.one("Add", [recurrent, _gate(emit, _one_direction(emit, bias), hidden, 5)])
        from_r = emit.one("Mul", [from_h, emit.one("Mul", [recurrent, reset_slope])])
        back = emit.one("Concat", [from_z, from_r, emit.one("Mul", [from_h, reset])], axis=-1)
        scanned += [back, z]
        back_t, z_t = scan.value("back"), scan.value("z")
        through = step.one("MatMul", [step.one("Mul", [step.one("Concat", [d_h, d_h, d_h], axis=-1), back_t]), r2])
        next_h = step.one("Add", [step.one("Mul", [d_h, z_t]), through])
        d_out = step.one("Identity", [d_h])
        first, grad_hidden = scan.run([_zeros_or_final(emit, node, x, hidden)], scanned, [next_h, d_out], 1,
                                      reverse=True)
        grads = emit.one("Concat", [grad_hidden, grad_hidden, grad_hidden], axis=-1)
        grad_a = emit.one("Mul", [grads, emit.one("Concat", [from_z, from_r, from_h], axis=-1)])
        grad_recurrent = emit.one("Mul", [grads, back])  # [dz, dr, dh·r]: what R and Rb see
    else:
        # dr = (dh_a·Rh)·H_{t-1}·r': a product with Rh inside the step, before the one into H_{t-1}
        r_h = _slice(emit, r2, 2 * hidden, 3 * hidden, 0)
        r_zr = _slice(emit, r2, 0, 2 * hidden, 0)
        from_r = emit.one("Mul", [h_prev, reset_slope])
        scanned += [from_h, emit.one("Concat", [from_z, from_r], axis=-1), emit.one("Concat", [z, reset], axis=-1)]
        from_h_t, zr_factor_t, zr_t = scan.value("from_h"), scan.value("zr_factor"), scan.value("zr")
        through_h = step.one("MatMul", [step.one("Mul", [d_h, from_h_t]), r_h])  # (dh_a·Rh)
        both = step.one("Concat", [d_h, through_h], axis=-1)
        through_zr = step.one("MatMul", [step.one("Mul", [both, zr_factor_t]), r_zr])
        gated = step.one("Mul", [both, zr_t])  # [dH·z, (dh_a·Rh)·r]
        direct = step.one("Add", [_gate(step, gated, hidden, 0), _gate(step, gated, hidden, 1)])
        next_h = step.one("Add", [through_zr, direct])
        d_out, h_out = step.one("Identity", [d_h]), step.one("Identity", [through_h])
        first, grad_hidden, grad_through = scan.run([_zeros_or_final(emit, node, x, hidden)], scanned,
                                                    [next_h, d_out, h_out], 1, reverse=True)
        grad_z = emit.one("Mul", [grad_hidden, from_z])
        grad_r = emit.one("Mul", [grad_through, from_r])
        grad_h = emit.one("Mul", [grad_hidden, from_h])
        grad_a = emit.one("Concat", [grad_z, grad_r, grad_h], axis=-1)
        grad_recurrent = grad_a

    if wanted[0]:
        emit.one("MatMul", [grad_a, _one_direction(emit, w)], wanted[0])
    if wanted[1]:
        emit.unsqueeze(_weight_grad(emit, grad_a, x), [0], wanted[1])
    if wanted[2]:
        if lbr:
            emit.unsqueeze(_weight_grad(emit, grad_recurrent, h_prev), [0], wanted[2])
        else:
            zr_part = _weight_grad(emit, _gate(emit, grad_a, hidden, 0, 2), h_prev)
            h_part = _weight_grad(emit, _gate(emit, grad_a, hidden, 2), emit.one("Mul", [reset, h_prev]))
            emit.unsqueeze(emit.one("Concat", [zr_part, h_part], axis=0), [0], wanted[2])
    if wanted[3]:
        total = _sum_steps(emit, grad_a)
        recurrent_total = _sum_steps(emit, grad_recurrent) if lbr else total
        emit.unsqueeze(emit.one("Concat", [total, recurrent_total], axis=0), [0], wanted[3])
    if wanted[4]:
        emit.unsqueeze(first, [0], wanted[4])


def _zeros_or_final(emit: Emitter, node: onnx.NodeProto, x: str, hidden: int) -> str:
    """The gradient of the final hidden state (GRUGrad's input 9) [batch, hidden], or zeros."""
    return emit.squeeze(_input(node, 9) or _zeros_state(emit, x, hidden), [0])
