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
states); X·Wᵀ and the biases are one Gemm over the whole sequence before it (per part the step reads, for a
GRU), and the Scan's per-step outputs are Y and the values the gradient reads. Every kernel in the step runs
once per time step, so the step holds only what is serial: the products with R are Gemms that add X·Wᵀ (or
R's bias) themselves and read R untransposed (ONNX Runtime fuses a MatMul and an Add only where it knows the
shapes, and a training model's batch is symbolic); the LSTM's gates are cut apart by one Split of the
product, each activated alone (no second Split of the sigmoids' output), and without peephole weights or
sequence lengths its Y = o·tanh(C) is one product over all steps after the loop instead of a copy out of
each step. (Keeping the standard LSTM / GRU operator, which gives Y bit for bit, and recomputing the gates
from Y after it measured 1.4 to 1.7 times slower: the recurrent product is then computed twice.)

The backward is a reverse ``Scan`` in which only the recurrence is serial: per step, the hidden state's
gradient (and the LSTM's cell state's), the gate gradients that they make (elementwise products with factors
computed for all steps before the loop), and one product with R back into the previous hidden state. The
gradients of X, W, R and the bias are then matrix products over the whole sequence, after the loop, where
ONNX Runtime's kernels compute them one step and one batch row at a time.

What it costs, by scripts/bench_recurrent.py (a training op and its gradient, one thread, on a shared and
noisy 2-core machine; the lowered model on 1.19.2 and on 1.31.1 alike): at T 50, batch 32, input 64, hidden
128 (the performance guide's LSTM classifier) 0.3-0.4 of the kernels' time for the LSTM and the GRU; at the
zoo's sizes (T 12-20, batch 16-32, hidden 24-48) 0.12-0.56. At batch 1 the per-step operators dominate and
the lowering is 1.3-2 times slower than the kernels (about 0.1 ms more at T 20, hidden 48). Memory: the
batched products hold [T, B, 4H] values for all steps (the gate gradients, their factors, X·Wᵀ), where the
kernels work step by step: a session's resident memory grew by about 45 MB instead of 11 at the guide's
sizes.

Beyond the kernels. They take the forward direction only and no sequence lengths (ONNX Runtime's generator
writes such nodes for a reverse or bidirectional LSTM or GRU all the same: its artifacts then fail to load on
1.19.2). These rules compute them as the kernels would compute each direction of each sequence alone: a
reverse direction is a Scan running backwards in time, a bidirectional node one Scan per direction, and with
sequence lengths a step past a sequence's end leaves the state as it was and gives 0, and a sequence of
length 0 has final states 0, as the LSTM and GRU operators do (the saved values are in time order, the
direction axis where the operators put it). Other
activations than the defaults, ``clip`` and ``input_forget`` (which the kernels refuse too) are refused by
name with a ``LoweringError``; ``layout`` (which the kernels do not read) must be 0.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

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


# --- what the rules accept -----------------------------------------------------------------------------------
def _describe(node: onnx.NodeProto) -> str:
    return f"com.microsoft::{node.op_type} node {node.name!r}" if node.name else f"a com.microsoft::{node.op_type} node"


DIRECTIONS = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}


def _input(node: onnx.NodeProto, index: int) -> Optional[str]:
    return node.input[index] if index < len(node.input) and node.input[index] else None


def _output(node: onnx.NodeProto, index: int) -> str:
    """The node's output name at ``index``; "" where it is left out (not needed)."""
    return node.output[index] if index < len(node.output) else ""


# --- small forms ---------------------------------------------------------------------------------------------
END = 2 ** 62  # a Slice's end past any axis


def _ints(emit: Emitter, *values: int) -> str:
    return emit.const(np.array(values, np.int64))


def _slice(emit: Emitter, x: str, start: int, end: int, axis: int) -> str:
    return emit.one("Slice", [x, _ints(emit, start), _ints(emit, end), _ints(emit, axis)])


def _gate(emit: Emitter, x: str, hidden: int, first: int, count: int = 1) -> str:
    """Gates ``first`` .. ``first + count - 1`` of ``x`` [..., gates * hidden], along its last axis."""
    return _slice(emit, x, first * hidden, (first + count) * hidden, -1)


def _split(emit: Emitter, x: str, sizes: Sequence[int]) -> List[str]:
    """``x`` cut along its last axis into parts of ``sizes`` (Split's form at the model's opset)."""
    if emit.opset >= 13:
        return emit.node("Split", [x, emit.const(np.array(sizes, np.int64))], len(sizes), axis=-1)
    return emit.node("Split", [x], len(sizes), axis=-1, split=list(sizes))


def _sigmoid_slope(emit: Emitter, s: str) -> str:
    """s·(1 - s): the sigmoid's derivative from its value."""
    return emit.one("Mul", [s, emit.one("Sub", [emit.const_like(1.0, s), s])])


def _tanh_slope(emit: Emitter, t: str) -> str:
    """1 - t²: tanh's derivative from its value."""
    return emit.one("Sub", [emit.const_like(1.0, t), emit.one("Mul", [t, t])])


def _projected(emit: Emitter, x: str, weight: str, bias: Optional[str]) -> str:
    """x [T, batch, n] · weightᵀ (+ bias), ``weight`` [m, n], ``bias`` [m]: [T, batch, m], as one Gemm over the
    flattened sequence (the bias added by the product, not in a pass of its own; no transposed copy of the
    weight)."""
    flat = emit.one("Gemm", [emit.one("Flatten", [x], axis=2), weight] + ([bias] if bias else []), transB=1)
    rows = _slice(emit, emit.one("Shape", [x]), 0, 2, 0)
    return emit.one("Reshape", [flat, emit.one("Concat", [rows, _ints(emit, -1)], axis=0)])


def _recurrent(step: Emitter, h: str, weight: str, added: Optional[str]) -> str:
    """h [batch, hidden] · weightᵀ (+ added), ``weight`` [m, hidden]: one Gemm in a Scan's body (ONNX Runtime
    fuses a MatMul and an Add only where it knows the shapes, which a training model's symbolic batch hides)."""
    return step.one("Gemm", [h, weight] + ([added] if added else []), transB=1)


def _weight_grad(emit: Emitter, grad: str, value: str) -> str:
    """Σ over steps and batch of gradᵀ·value: ``grad`` [T, batch, m], ``value`` [T, batch, n] -> [m, n], as
    one product over the flattened sequence."""
    return emit.one("Gemm", [emit.one("Flatten", [grad], axis=2), emit.one("Flatten", [value], axis=2)], transA=1)


def _sum_steps(emit: Emitter, x: str) -> str:
    """Σ over steps and batch of x [T, batch, n]: [n]."""
    return emit.reduce("ReduceSum", x, [0, 1], keepdims=False)


def _masked(emit: Emitter, x: str, mask: Optional[str]) -> str:
    return x if mask is None else emit.one("Mul", [x, mask])


class _Scan:
    """A ``Scan`` body written with its own emitter (names unique in the whole model): states first, then the
    per-step slices; the body reads the outer graph's values by name."""

    def __init__(self, emit: Emitter, elem_type: int, label: str):
        self.outer = emit
        self.elem_type = elem_type
        self.body = Emitter(emit.opset, emit.taken, dict(emit.types), f"{emit.label}/{label}")
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


class _View:
    """A node of one of the four operators, seen one direction at a time: the node's values sliced to a
    direction, the masks its sequence lengths make, and the results of the directions put back together."""

    def __init__(self, node: onnx.NodeProto, emit: Emitter, activations: Sequence[str], lens: int):
        where = _describe(node)
        self.node, self.emit, self.x = node, emit, node.input[0]
        hidden = attribute(node, "hidden_size")
        if hidden is None or int(hidden) <= 0:
            raise LoweringError(f"{where} has no positive hidden_size")
        self.hidden = int(hidden)
        direction = attribute(node, "direction", "forward")
        if direction not in DIRECTIONS:
            raise LoweringError(f"{where} has the unknown direction {direction!r}")
        self.reversed = DIRECTIONS[direction]
        given = [a.lower() for a in attribute(node, "activations", []) or []]
        if given and given != [a.lower() for a in activations] * len(self.reversed):
            raise LoweringError(f"{where} has the activations {', '.join(given)}: this lowering, as ONNX Runtime's "
                                f"training kernels, computes {', '.join(activations)} only")
        if attribute(node, "clip") is not None:
            raise LoweringError(f"{where} has clip, which ONNX Runtime's training kernels do not compute, nor does "
                                "this lowering")
        if int(attribute(node, "input_forget", 0)):
            raise LoweringError(f"{where} combines the input and forget gates (input_forget=1), which ONNX "
                                "Runtime's training kernels do not compute, nor does this lowering")
        if int(attribute(node, "layout", 0)):
            raise LoweringError(f"{where} has layout=1 (batch first); the training kernels read time first only")
        self.elem_type = emit.elem_type(self.x) or TensorProto.FLOAT
        self.lens = _input(node, lens)
        self._mask: Optional[str] = None
        self._keep: Optional[str] = None
        self._nonempty: Optional[str] = None
        self._zeros: Optional[str] = None

    def require(self, *positions: Tuple[int, str]) -> None:
        for index, name in positions:
            if _input(self.node, index) is None:
                raise LoweringError(f"{_describe(self.node)} lacks its input {name} (position {index})")

    def part(self, name: Optional[str], d: int, axis: int = 0) -> Optional[str]:
        """Direction ``d``'s part of ``name``, the directions' axis ``axis`` removed."""
        if name is None:
            return None
        if len(self.reversed) == 1:
            return self.emit.squeeze(name, [axis])
        return self.emit.one("Gather", [name, self.emit.const(np.array(d, np.int64))], axis=axis)

    def input(self, index: int, d: int, axis: int = 0) -> Optional[str]:
        return self.part(_input(self.node, index), d, axis)

    def zeros(self) -> str:
        """Zeros [batch, hidden] in X's element type: a missing initial state or final state's gradient."""
        if self._zeros is None:
            emit = self.emit
            batch = _slice(emit, emit.one("Shape", [self.x]), 1, 2, 0)
            shape = emit.one("Concat", [batch, _ints(emit, self.hidden)], axis=0)
            self._zeros = emit.one("ConstantOfShape", [shape],
                                   value=helper.make_tensor("zero", self.elem_type, [1], [0]))
        return self._zeros

    def state(self, index: int, d: int) -> str:
        """Input ``index`` (an initial state or a final state's gradient) of direction ``d``, [batch, hidden],
        or zeros."""
        return self.input(index, d) or self.zeros()

    def mask(self) -> Optional[str]:
        """[T, batch, 1]: 1 for the steps within each sequence, 0 past its length; None without lengths."""
        if self.lens is not None and self._mask is None:
            emit = self.emit
            steps = emit.squeeze(_slice(emit, emit.one("Shape", [self.x]), 0, 1, 0), [0])
            times = emit.one("Range", [emit.const(np.array(0, np.int64)), steps, emit.const(np.array(1, np.int64))])
            lens = emit.unsqueeze(emit.one("Cast", [self.lens], to=TensorProto.INT64), [0])
            within = emit.one("Less", [emit.unsqueeze(times, [1]), lens])
            self._mask = emit.unsqueeze(emit.one("Cast", [within], to=self.elem_type), [2])
        return self._mask

    def final(self, state: str) -> str:
        """A final state [batch, hidden] as the operators give it: 0 for a sequence of length 0 (the state
        that went through no step is not shown)."""
        if self.lens is None:
            return state
        if self._nonempty is None:
            emit = self.emit
            longer = emit.one("Greater", [self.lens, emit.const(np.array(0, helper.tensor_dtype_to_np_dtype(
                emit.elem_type(self.lens) or TensorProto.INT32)))])
            self._nonempty = emit.unsqueeze(emit.one("Cast", [longer], to=self.elem_type), [1])
        return self.emit.one("Mul", [state, self._nonempty])

    def keep(self) -> Optional[str]:
        """1 - mask: the steps past each sequence's end, where the state passes unchanged."""
        mask = self.mask()
        if mask is not None and self._keep is None:
            self._keep = self.emit.one("Sub", [self.emit.const_like(1.0, mask), mask])
        return self._keep

    def previous(self, initial: str, every: str, d: int) -> str:
        """The state before each step of direction ``d`` [T, batch, hidden], from its ``initial`` state
        [batch, hidden] and the states after each step ``every`` [T, batch, hidden] (0 past each sequence's
        end): the step before in a forward direction; in a reverse one the step after, or the initial state
        where that step is past the sequence's end (the state waits there)."""
        emit = self.emit
        first = emit.unsqueeze(initial, [0])
        if not self.reversed[d]:
            return emit.one("Concat", [first, _slice(emit, every, 0, -1, 0)], axis=0)
        after = emit.one("Concat", [_slice(emit, every, 1, END, 0), first], axis=0)
        keep = self.keep()
        if keep is None:
            return after
        nothing = emit.one("Mul", [_slice(emit, keep, 0, 1, 0), emit.const_like(0.0, keep)])
        waiting = emit.one("Concat", [_slice(emit, keep, 1, END, 0), nothing], axis=0)
        return emit.one("Add", [after, emit.one("Mul", [waiting, first])])

    def grad_y(self, index: int, d: int) -> Optional[str]:
        """Direction ``d``'s part of the gradient of Y (input ``index``), [T, batch, hidden], 0 past each
        sequence's end (Y is 0 there whatever the recurrence computes)."""
        part = self.input(index, d, axis=1)
        return None if part is None else _masked(self.emit, part, self.mask())

    def put_together(self, parts: Sequence[str], axis: int, output: str) -> None:
        """The directions' ``parts`` stacked along a new ``axis`` into ``output`` (if it is wanted)."""
        if not output:
            return
        if len(parts) == 1:
            self.emit.unsqueeze(parts[0], [axis], output)
        else:
            self.emit.one("Concat", [self.emit.unsqueeze(p, [axis]) for p in parts], output, axis=axis)

    def input_grad(self, grad_a: str, weight: str, output: str, parts: List[str]) -> None:
        """The gradient of X, grad_a·W: into ``output`` at once for one direction, else kept in ``parts`` for
        ``summed``."""
        if output:
            parts.append(self.emit.one("MatMul", [grad_a, weight], output if len(self.reversed) == 1 else None))

    def summed(self, parts: Sequence[str], output: str) -> None:
        """The directions' gradients of X added into ``output`` (where there are two)."""
        if output and len(parts) > 1:
            self.emit.one("Sum", list(parts), output)


# --- LSTM ------------------------------------------------------------------------------------------------------
LSTM_ACTIVATIONS = ("sigmoid", "tanh", "tanh")
GRU_ACTIVATIONS = ("sigmoid", "tanh")


@lowers("LSTMTraining")
def lstm_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """LSTMTraining as one Scan per direction (the whole cell per step), X·Wᵀ for all steps before it; the
    Scan's per-step values are Y, the cell states and the gate values the gradient reads."""
    view = _View(node, emit, LSTM_ACTIVATIONS, SEQUENCE_LENS)
    hidden, mask = view.hidden, view.mask()
    found: Dict[str, List[str]] = {k: [] for k in ("y", "final_h", "final_c", "all_c", "iofc")}
    for d, reverse in enumerate(view.reversed):
        w, r, bias, peephole = (view.input(i, d) for i in (W, R, B, P))
        assert w is not None and r is not None
        if bias is not None:
            w_bias, r_bias = _split(emit, bias, [4 * hidden, 4 * hidden])
            bias = emit.one("Add", [w_bias, r_bias])
        from_x = _projected(emit, view.x, w, bias)
        scan = _Scan(emit, view.elem_type, f"lstm_forward{d}")
        step = scan.body
        h, c, x_t = scan.value("h"), scan.value("c"), scan.value("from_x")
        pre = _recurrent(step, h, r, x_t)
        if peephole is None and mask is None:
            # the step holds only what is serial: Y = o·tanh(C) is one product over all steps after the Scan
            pre_i, pre_o, pre_f, pre_c = _split(step, pre, [hidden] * 4)
            i_t, o_t, f_t = (step.one("Sigmoid", [p]) for p in (pre_i, pre_o, pre_f))
            c_gate = step.one("Tanh", [pre_c])
            c_new = step.one("Add", [step.one("Mul", [f_t, c]), step.one("Mul", [i_t, c_gate])])
            tanh_c = step.one("Tanh", [c_new])
            final_h, final_c, all_c, all_tanh_c, *gates = scan.run(
                [view.state(H0, d), view.state(C0, d)], [from_x],
                [step.one("Mul", [o_t, tanh_c]), c_new, step.one("Identity", [c_new]), tanh_c, i_t, o_t, f_t, c_gate],
                2, reverse)
            found["y"].append(emit.one("Mul", [gates[1], all_tanh_c]))
            found["final_h"].append(final_h)
            found["final_c"].append(final_c)
            found["all_c"].append(all_c)
            found["iofc"].append(emit.one("Concat", gates, axis=-1))
            continue
        if peephole is None:
            pre_iof, pre_c = _split(step, pre, [3 * hidden, hidden])
            sig = step.one("Sigmoid", [pre_iof])
            c_gate = step.one("Tanh", [pre_c])
            i_t, o_t, f_t = _split(step, sig, [hidden] * 3)
            c_new = step.one("Add", [step.one("Mul", [f_t, c]), step.one("Mul", [i_t, c_gate])])
            h_new = step.one("Mul", [o_t, step.one("Tanh", [c_new])])
            per_step = [sig, c_gate]
        else:
            p_i, p_o, p_f = _split(emit, peephole, [hidden] * 3)
            pre_i, pre_o, pre_f, pre_c = _split(step, pre, [hidden] * 4)
            i_t = step.one("Sigmoid", [step.one("Add", [pre_i, step.one("Mul", [p_i, c])])])
            f_t = step.one("Sigmoid", [step.one("Add", [pre_f, step.one("Mul", [p_f, c])])])
            c_gate = step.one("Tanh", [pre_c])
            c_new = step.one("Add", [step.one("Mul", [f_t, c]), step.one("Mul", [i_t, c_gate])])
            o_t = step.one("Sigmoid", [step.one("Add", [pre_o, step.one("Mul", [p_o, c_new])])])
            h_new = step.one("Mul", [o_t, step.one("Tanh", [c_new])])
            per_step = [i_t, o_t, f_t, c_gate]
        states, shown = _within(scan, [(h, h_new), (c, c_new)], mask is not None)
        # the gate values leave the Scan in parts, put together once after it (not one Concat per step)
        final_h, final_c, y, all_c, *gates = scan.run(
            [view.state(H0, d), view.state(C0, d)], [from_x] + ([mask] if mask else []), states + shown + per_step,
            2, reverse)
        iofc = emit.one("Concat", gates, axis=-1)
        found["y"].append(y)
        found["final_h"].append(view.final(final_h))
        found["final_c"].append(view.final(final_c))
        found["all_c"].append(all_c)
        found["iofc"].append(iofc)
    for key, index, axis in (("y", 0, 1), ("final_h", 1, 0), ("final_c", 2, 0), ("all_c", 3, 1), ("iofc", 4, 1)):
        view.put_together(found[key], axis, _output(node, index))


def _within(scan: _Scan, pairs: Sequence[Tuple[str, str]], masked: bool) -> Tuple[List[str], List[str]]:
    """The next states and the per-step outputs of a forward Scan from (state, new value) ``pairs``. With
    sequence lengths (the Scan's last input is the step's mask), a state changes only within its sequence
    and the outputs are 0 past its end, as the LSTM and GRU operators leave them."""
    step = scan.body
    if not masked:
        return [new for _, new in pairs], [step.one("Identity", [new]) for _, new in pairs]
    mask = scan.value("mask")
    states = [step.one("Add", [old, step.one("Mul", [mask, step.one("Sub", [new, old])])]) for old, new in pairs]
    return states, [step.one("Mul", [new, mask]) for _, new in pairs]


@lowers("LSTMGrad")
def lstm_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """The gradients of an LSTMTraining node's inputs, as its kernel computes them."""
    view = _View(node, emit, LSTM_ACTIVATIONS, 3)
    view.require(*((i, LSTM_GRAD_INPUTS[i]) for i in (0, 1, 2, 6, 7, 8)))
    wanted = [_output(node, i) for i in range(7)]
    if not any(wanted):
        return
    hidden, x = view.hidden, view.x
    mask, keep = view.mask(), view.keep()
    found: Dict[int, List[str]] = {i: [] for i in range(7)}
    for d, reverse in enumerate(view.reversed):
        all_h, all_c, iofc = (view.input(i, d, axis=1) for i in (6, 7, 8))
        w, r = view.input(1, d), view.input(2, d)
        assert all_h is not None and all_c is not None and iofc is not None and w is not None and r is not None
        c0 = view.state(5, d)
        # factors of all steps, from the saved values
        i_gate, o_gate, f_gate, c_gate = _split(emit, iofc, [hidden] * 4)
        tanh_c = emit.one("Tanh", [all_c])
        c_prev = view.previous(c0, all_c, d)
        # dC_t += dH_t·o_t·(1 - tanh²C_t); the gates' gradients: di = dC·c·i', do = dH·tanh(C)·o',
        # df = dC·C_{t-1}·f', dc = dC·i·(1 - c²): each gate's factor from its own part of iofc, joined once
        # (the slopes over the whole [T, batch, 4H], then a Concat of the other factors and a product with
        # them, wrote 4H more per step of the sequence and measured slower)
        from_h = _masked(emit, emit.one("Mul", [o_gate, _tanh_slope(emit, tanh_c)]), mask)
        factors = _masked(emit, emit.one("Concat", [
            emit.one("Mul", [c_gate, _sigmoid_slope(emit, i_gate)]),
            emit.one("Mul", [tanh_c, _sigmoid_slope(emit, o_gate)]),
            emit.one("Mul", [c_prev, _sigmoid_slope(emit, f_gate)]),
            emit.one("Mul", [i_gate, _tanh_slope(emit, c_gate)])], axis=-1), mask)
        # past a sequence's end the states pass unchanged: dC_{t-1} = dC·f there, with f 1 past the end
        forget = f_gate if keep is None else emit.one("Add", [_masked(emit, f_gate, mask), keep])

        scan = _Scan(emit, view.elem_type, f"lstm_backward{d}")
        step = scan.body
        carry_h, carry_c = scan.value("dh"), scan.value("dc")
        grad_y = view.grad_y(9, d)
        scanned = [] if grad_y is None else [grad_y]
        d_h = carry_h if grad_y is None else step.one("Add", [carry_h, scan.value("dy")])
        scanned += [from_h, factors, forget]
        from_h_t, factors_t, f_t = scan.value("from_h"), scan.value("factors"), scan.value("f")
        d_c = step.one("Add", [carry_c, step.one("Mul", [d_h, from_h_t])])
        d_a = step.one("Mul", [step.one("Concat", [d_c, d_h, d_c, d_c], axis=-1), factors_t])
        next_h = step.one("MatMul", [d_a, r])  # dH_{t-1} = da_t · R, R [4H, H]
        if keep is not None:
            scanned.append(keep)
            next_h = step.one("Add", [next_h, step.one("Mul", [d_h, scan.value("keep")])])
        next_c = step.one("Mul", [d_c, f_t])
        first_h, first_c, grad_a = scan.run([view.final(view.state(10, d)), view.final(view.state(11, d))], scanned,
                                            [next_h, next_c, d_a], 2, reverse=not reverse)
        view.input_grad(grad_a, w, wanted[0], found[0])
        if wanted[1]:
            found[1].append(_weight_grad(emit, grad_a, x))
        if wanted[2]:
            found[2].append(_weight_grad(emit, grad_a, view.previous(view.state(4, d), all_h, d)))
        if wanted[3]:
            total = _sum_steps(emit, grad_a)
            found[3].append(emit.one("Concat", [total, total], axis=0))
        found[4].append(first_h)
        found[5].append(first_c)
        if wanted[6]:
            # dP_i = Σ di·C_{t-1}, dP_o = Σ do·C_t, dP_f = Σ df·C_{t-1}
            states = emit.one("Concat", [c_prev, all_c, c_prev], axis=-1)
            found[6].append(_sum_steps(emit, emit.one("Mul", [_gate(emit, grad_a, hidden, 0, 3), states])))
    view.summed(found[0], wanted[0])
    for i in range(1, 7):
        view.put_together(found[i], 0, wanted[i])


# --- GRU -------------------------------------------------------------------------------------------------------
@lowers("GRUTraining")
def gru_training(node: onnx.NodeProto, emit: Emitter) -> None:
    """GRUTraining as one Scan per direction, X·Wᵀ for all steps before it; the Scan's per-step values are Y
    and the gate values the gradient reads."""
    view = _View(node, emit, GRU_ACTIVATIONS, SEQUENCE_LENS)
    hidden, mask = view.hidden, view.mask()
    lbr = int(attribute(node, "linear_before_reset", 0))
    found: Dict[str, List[str]] = {k: [] for k in ("y", "final_h", "zrh")}
    for d, reverse in enumerate(view.reversed):
        w, r, bias = (view.input(i, d) for i in (W, R, B))
        assert w is not None and r is not None
        # X·Wᵀ and the biases outside the step, one Gemm per part the step reads (no Split of the whole)
        r_zr, r_h = _slice(emit, r, 0, 2 * hidden, 0), _slice(emit, r, 2 * hidden, 3 * hidden, 0)
        w_zr, w_h = _slice(emit, w, 0, 2 * hidden, 0), _slice(emit, w, 2 * hidden, 3 * hidden, 0)
        bias_zr = bias_h = r_bias_h = None
        if bias is not None:
            w_bz, w_bh, r_bz, r_bh = _split(emit, bias, [2 * hidden, hidden, 2 * hidden, hidden])
            bias_zr = emit.one("Add", [w_bz, r_bz])
            if lbr:  # Rbh is inside the reset gate's product: it stays in the step
                bias_h, r_bias_h = w_bh, r_bh
            else:
                bias_h = emit.one("Add", [w_bh, r_bh])
        x_zr, x_h = _projected(emit, view.x, w_zr, bias_zr), _projected(emit, view.x, w_h, bias_h)
        scan = _Scan(emit, view.elem_type, f"gru_forward{d}")
        step = scan.body
        h, x_zr_t, x_h_t = scan.value("h"), scan.value("from_x_zr"), scan.value("from_x_h")
        zr = step.one("Sigmoid", [_recurrent(step, h, r_zr, x_zr_t)])
        z_t, r_t = _split(step, zr, [hidden, hidden])
        if lbr:
            h_pre = step.one("Add", [x_h_t, step.one("Mul", [r_t, _recurrent(step, h, r_h, r_bias_h)])])
        else:
            h_pre = _recurrent(step, step.one("Mul", [r_t, h]), r_h, x_h_t)
        h_gate = step.one("Tanh", [h_pre])
        h_new = step.one("Add", [h_gate, step.one("Mul", [z_t, step.one("Sub", [h, h_gate])])])
        states, shown = _within(scan, [(h, h_new)], mask is not None)
        # zr and h leave the Scan apart, put together once after it (not one Concat per step)
        final_h, y, zr_all, h_all = scan.run([view.state(H0, d)], [x_zr, x_h] + ([mask] if mask else []),
                                             states + shown + [zr, h_gate], 1, reverse)
        zrh_all = emit.one("Concat", [zr_all, h_all], axis=-1)
        found["y"].append(y)
        found["final_h"].append(view.final(final_h))
        found["zrh"].append(zrh_all)
    for key, index, axis in (("y", 0, 1), ("final_h", 1, 0), ("zrh", 2, 1)):
        view.put_together(found[key], axis, _output(node, index))


@lowers("GRUGrad")
def gru_grad(node: onnx.NodeProto, emit: Emitter) -> None:
    """The gradients of a GRUTraining node's inputs, as its kernel computes them."""
    view = _View(node, emit, GRU_ACTIVATIONS, SEQUENCE_LENS)
    view.require(*((i, GRU_GRAD_INPUTS[i]) for i in (0, 1, 2, 6, 7)))
    wanted = [_output(node, i) for i in range(5)]
    if not any(wanted):
        return
    hidden, x = view.hidden, view.x
    mask, keep = view.mask(), view.keep()
    lbr = int(attribute(node, "linear_before_reset", 0))
    found: Dict[int, List[str]] = {i: [] for i in range(5)}
    for d, reverse in enumerate(view.reversed):
        all_h, zrh = view.input(6, d, axis=1), view.input(7, d, axis=1)
        w, r, bias = view.input(1, d), view.input(2, d), view.input(3, d)
        assert all_h is not None and zrh is not None and w is not None and r is not None
        h_prev = view.previous(view.state(5, d), all_h, d)
        z, reset, h_gate = _split(emit, zrh, [hidden] * 3)
        # H_t = (1 - z)·h + z·H_{t-1}: dz = dH·(H_{t-1} - h)·z', dh = dH·(1 - z)·(1 - h²), both 0 past the
        # end; there dH_{t-1} = dH, as if z were 1
        from_z = _masked(emit, emit.one("Mul", [emit.one("Sub", [h_prev, h_gate]), _sigmoid_slope(emit, z)]), mask)
        from_h = _masked(emit, emit.one("Mul", [emit.one("Sub", [emit.const_like(1.0, z), z]),
                                                _tanh_slope(emit, h_gate)]), mask)
        passed = z if keep is None else emit.one("Add", [_masked(emit, z, mask), keep])
        reset_slope = _sigmoid_slope(emit, reset)
        scan = _Scan(emit, view.elem_type, f"gru_backward{d}")
        step = scan.body
        carry = scan.value("dh")
        grad_y = view.grad_y(8, d)
        scanned = [] if grad_y is None else [grad_y]
        d_h = carry if grad_y is None else step.one("Add", [carry, scan.value("dy")])
        if lbr:
            # dr = dh_a·(H_{t-1}·Rhᵀ + Rbh), known for all steps: every gate gradient is dH times a factor,
            # and dH_{t-1} = dH·z + [dz, dr, dh·r]·R
            recurrent = _projected(emit, h_prev, _slice(emit, r, 2 * hidden, 3 * hidden, 0),
                                   None if bias is None else _gate(emit, bias, hidden, 5))
            from_r = emit.one("Mul", [from_h, emit.one("Mul", [recurrent, reset_slope])])
            back = emit.one("Concat", [from_z, from_r, emit.one("Mul", [from_h, reset])], axis=-1)
            scanned += [back, passed]
            back_t, z_t = scan.value("back"), scan.value("z")
            spread = step.one("Concat", [d_h, d_h, d_h], axis=-1)
            through = step.one("MatMul", [step.one("Mul", [spread, back_t]), r])
            next_h = step.one("Add", [step.one("Mul", [d_h, z_t]), through])
            first, grad_hidden = scan.run([view.final(view.state(9, d))], scanned,
                                          [next_h, step.one("Identity", [d_h])], 1, reverse=not reverse)
            grads = emit.one("Concat", [grad_hidden, grad_hidden, grad_hidden], axis=-1)
            grad_a = emit.one("Mul", [grads, emit.one("Concat", [from_z, from_r, from_h], axis=-1)])
            grad_recurrent = emit.one("Mul", [grads, back])  # [dz, dr, dh·r]: what R and Rb see
        else:
            # dr = (dh_a·Rh)·H_{t-1}·r': a product with Rh inside the step, before the one into H_{t-1}
            r_h, r_zr = _slice(emit, r, 2 * hidden, 3 * hidden, 0), _slice(emit, r, 0, 2 * hidden, 0)
            from_r = emit.one("Mul", [h_prev, reset_slope])
            scanned += [from_h, emit.one("Concat", [from_z, from_r], axis=-1),
                        emit.one("Concat", [passed, reset], axis=-1)]
            from_h_t, zr_factor_t, zr_t = scan.value("from_h"), scan.value("zr_factor"), scan.value("zr")
            through_h = step.one("MatMul", [step.one("Mul", [d_h, from_h_t]), r_h])  # (dh_a·Rh)
            both = step.one("Concat", [d_h, through_h], axis=-1)
            through_zr = step.one("MatMul", [step.one("Mul", [both, zr_factor_t]), r_zr])
            gated = step.one("Mul", [both, zr_t])  # [dH·z, (dh_a·Rh)·r]
            direct = step.one("Add", [_gate(step, gated, hidden, 0), _gate(step, gated, hidden, 1)])
            next_h = step.one("Add", [through_zr, direct])
            first, grad_hidden, grad_through = scan.run(
                [view.final(view.state(9, d))], scanned,
                [next_h, step.one("Identity", [d_h]), step.one("Identity", [through_h])], 1, reverse=not reverse)
            grad_a = emit.one("Concat", [emit.one("Mul", [grad_hidden, from_z]),
                                         emit.one("Mul", [grad_through, from_r]),
                                         emit.one("Mul", [grad_hidden, from_h])], axis=-1)
            grad_recurrent = grad_a
        view.input_grad(grad_a, w, wanted[0], found[0])
        if wanted[1]:
            found[1].append(_weight_grad(emit, grad_a, x))
        if wanted[2]:
            if lbr:
                found[2].append(_weight_grad(emit, grad_recurrent, h_prev))
            else:
                zr_part = _weight_grad(emit, _gate(emit, grad_a, hidden, 0, 2), h_prev)
                h_part = _weight_grad(emit, _gate(emit, grad_a, hidden, 2), emit.one("Mul", [reset, h_prev]))
                found[2].append(emit.one("Concat", [zr_part, h_part], axis=0))
        if wanted[3]:
            total = _sum_steps(emit, grad_a)
            recurrent_total = _sum_steps(emit, grad_recurrent) if lbr else total
            found[3].append(emit.one("Concat", [total, recurrent_total], axis=0))
        found[4].append(first)
    view.summed(found[0], wanted[0])
    for i in range(1, 5):
        view.put_together(found[i], 0, wanted[i])
