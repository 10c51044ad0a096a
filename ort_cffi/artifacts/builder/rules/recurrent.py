"""Recurrent operators: LSTM, GRU and RNN, in every direction, with or without sequence lengths.

A forward-direction LSTM or GRU without ``sequence_lens`` is trained as ONNX Runtime 1.19.2's builder trains
it: the node of the training graph becomes ``com.microsoft`` LSTMTraining / GRUTraining (the same inputs and
attributes less ``layout``, and the extra outputs its gradient kernel reads: all cell states and the gate
values), and LSTMGrad / GRUGrad give every input's gradient. Its losses are then bit-identical to ONNX
Runtime's artifacts.

Those kernels run the forward direction only ("only supports the forward direction for now") and refuse
sequence lengths. Every other configuration goes through one mechanism, per direction: a direction is a
forward-direction recurrence over its own slice of the weights and initial states, and the reverse direction
one over the time-reversed sequence (``ReverseSequence`` with the node's ``sequence_lens``, the full length
where it has none: the padding past each sequence's end stays in place, as the operator leaves it). Its
gradient is then the forward kernel's, on the gradients of its slice of the outputs reversed the same way,
and the input gradient is reversed back. Sequence lengths become masks on the gradients entering the
recurrence (``_by_direction``).

This is done by the rule, in the backward graph, and not by lowering the forward graph before
differentiation: the forward node stays the node the model has (the eval model is a copy made before, but
the training graph's forward values stay those of the original operator too), nothing outside this module
changes, and the rule works wherever the engine runs it, in an If branch as in the main graph. The price is
that the direction's training recurrence is computed again in the backward graph (the original node's
outputs cannot serve: the kernels need the gate values it does not give).

RNN has no gradient kernel in ONNX Runtime: its backward pass is a reverse ``Scan`` over time, whose body
carries the hidden state's gradient (``dH_{t-1} = (dH_t + dY_t) * f'(a_t) @ R``); the pre-activations
``a_t`` and the activations' derivatives are computed for all steps at once outside the loop from the hidden
states the node computed (its output Y, declared where the model leaves it out: nothing is computed again),
and the weight gradients are batched matrix products over all steps. Activations Tanh, Sigmoid and Relu, and ``clip``.

What ONNX Runtime's kernels cannot compute is refused, naming the node: layout 1 (its CPU kernels of all
three operators refuse it, even for inference), and for LSTM and GRU other activations than the defaults,
``clip``, ``input_forget``, peephole weights (LSTMGrad does not read them) and, with sequence lengths, a
gradient of an LSTM's final cell state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from onnx import TensorProto, helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import MICROSOFT, gradient

Grads = List[Optional[str]]


@dataclass(frozen=True)
class Recurrence:
    """What differs between the three operators: the initial states, the outputs beside Y (final states),
    and the activations a direction takes."""

    op: str
    states: Tuple[int, ...]  # initial states, [num_directions, batch, hidden] in layout 0
    finals: int  # outputs after Y: the final states, in the order of ``states``
    activations: int  # activation functions per direction
    default_activations: Tuple[str, ...]


LSTM = Recurrence("LSTM", (5, 6), 2, 3, ("Sigmoid", "Tanh", "Tanh"))
GRU = Recurrence("GRU", (5,), 1, 2, ("Sigmoid", "Tanh"))
RNN = Recurrence("RNN", (5,), 1, 1, ("Tanh",))
SEQUENCE_LENS = 4


def _directions(node: NodeView) -> List[bool]:
    """One entry per direction of the node, True for a reversed one."""
    direction = node.attr("direction", "forward")
    if direction == "forward":
        return [False]
    if direction == "reverse":
        return [True]
    if direction == "bidirectional":
        return [False, True]
    raise BuilderError(f"{node.describe()}: unknown direction {direction!r}")


def _activations(node: NodeView, kind: Recurrence) -> List[List[str]]:
    """The activation functions of each direction, by name."""
    count = len(_directions(node))
    given = [a.decode() if isinstance(a, bytes) else str(a) for a in node.attr("activations", []) or []]
    if not given:
        return [list(kind.default_activations) for _ in range(count)]
    if len(given) != kind.activations * count:
        raise BuilderError(f"{node.describe()}: {len(given)} activations for {count} direction(s) of "
                           f"{kind.activations} each")
    return [given[d * kind.activations:(d + 1) * kind.activations] for d in range(count)]


def _input(node: NodeView, index: int) -> Optional[str]:
    return node.inputs[index] if node.has_input(index) else None


def _output_grad(node: NodeView, index: int) -> Optional[str]:
    return node.grad(index) if index < len(node.outputs) and node.outputs[index] else None


# --- ONNX Runtime's form -------------------------------------------------------------------------------------
def _kernel_attributes(node: NodeView) -> Dict[str, Any]:
    """The node's attributes for its training kernel, less ``layout`` (the kernels have none), the
    activations in lower case: the training kernels compare the names as written ("sigmoid"), where the
    inference kernels take any case (tf2onnx writes "Sigmoid")."""
    found = {a.name: helper.get_attribute_value(a) for a in node.proto.attribute if a.name != "layout"}
    if "activations" in found:
        found["activations"] = [(a.decode() if isinstance(a, bytes) else str(a)).lower() for a in found["activations"]]
    return found


def _in_place(g: GradientContext, node: NodeView, kind: Recurrence) -> Grads:
    """A forward-direction layout-0 LSTM or GRU, as ONNX Runtime's builder does it: the node becomes the
    training kernel, with the extra outputs its gradient kernel reads."""
    proto = node.proto
    saved = ["all_cell_states", "iofc"] if kind is LSTM else ["zrh"]
    g.forward_output(node, 0, "all_hidden_states")
    for index in range(1, 1 + kind.finals):
        while len(proto.output) <= index:
            proto.output.append("")
    saved_names = [g.fresh(f"{proto.name or proto.op_type}/{hint}") for hint in saved]
    proto.output.extend(saved_names)
    node.outputs = list(proto.output)
    attributes = _kernel_attributes(node)
    del proto.attribute[:]
    proto.attribute.extend(helper.make_attribute(k, v) for k, v in attributes.items())
    proto.op_type = f"{kind.op}Training"
    proto.domain = MICROSOFT
    hidden_all = proto.output[0]
    if kind is LSTM:
        state = [hidden_all, saved_names[0], saved_names[1]]
    else:
        state = [hidden_all, saved_names[0]]
    return _kernel_gradient(g, node, kind, node.inputs, state,
                            [_output_grad(node, i) for i in range(1 + kind.finals)], attributes)


def _kernel_gradient(g: GradientContext, node: NodeView, kind: Recurrence, inputs: Sequence[str],
                     saved: Sequence[str], output_grads: Sequence[Optional[str]],
                     attributes: Dict[str, Any], wanted: Optional[Sequence[bool]] = None, suffix: str = "") -> Grads:
    """LSTMGrad / GRUGrad on ``inputs`` (the training kernel's), the values it saved and the gradients of
    its outputs; returns one gradient (or None) per input position of the forward node."""
    count = len(inputs)
    present = [i < count and bool(inputs[i]) for i in range(max(count, 8))]
    wants = (lambda i: bool(wanted[i])) if wanted is not None else node.wants  # noqa: E731
    # LSTMGrad reads X, W, R, sequence_lens, H0, C0 (not B nor P); GRUGrad X, W, R, B, sequence_lens, H0
    read = [0, 1, 2, 4, 5, 6] if kind is LSTM else [0, 1, 2, 3, 4, 5]
    kernel_inputs: List[Optional[str]] = [inputs[i] if present[i] else None for i in read]
    kernel_inputs += list(saved) + list(output_grads)
    positions = [i for i in range(max(count, len(read))) if i != SEQUENCE_LENS]
    names: List[str] = []
    grads: Grads = [None] * max(count, 8)
    for i in positions:
        if i < count and present[i] and wants(i):
            grads[i] = g.fresh(f"{node.inputs[i]}_grad{suffix}")
            names.append(grads[i] or "")
        else:
            names.append("")
    while names and not names[-1]:
        names.pop()
    if names:
        g.node(f"{kind.op}Grad", kernel_inputs, names, MICROSOFT, **attributes)
    return grads[:count]


# --- one direction at a time ---------------------------------------------------------------------------------
class _Directions:
    """The node seen in layout 0, one direction at a time: slices of its weights, states and output
    gradients, in time order of that direction's forward recurrence."""

    def __init__(self, g: GradientContext, node: NodeView, kind: Recurrence):
        self.g, self.node, self.kind = g, node, kind
        self.reversed = _directions(node)
        self.x = node.inputs[0]
        self._lens: Optional[str] = None
        self._masks: Dict[str, str] = {}

    def mask(self, last: bool = False) -> str:
        """[time, batch, 1] in X's type: 1 for the steps within each sequence (``last``: at its last step
        only), 0 elsewhere; made once for all directions."""
        key = "last" if last else "within"
        if key not in self._masks:
            make = _last_step if last else _step_mask
            self._masks[key] = make(self.g, self, self.x, self.g.elem_type(self.x))
        return self._masks[key]

    def lens(self) -> str:
        """Each sequence's length, int64 [batch]: ``sequence_lens``, or the full length."""
        if self._lens is None:
            g = self.g
            given = _input(self.node, SEQUENCE_LENS)
            if given is not None:
                self._lens = g.op("Cast", given, to=TensorProto.INT64)
            else:
                shape = g.op("Shape", self.x)
                steps = g.op("Slice", shape, g.ints([0]), g.ints([1]))
                batch = g.op("Slice", shape, g.ints([1]), g.ints([2]))
                self._lens = g.op("Expand", steps, batch)
        return self._lens

    def reverse(self, value: str) -> str:
        """``value`` [time, batch, ...] with each sequence's steps in reverse order."""
        return self.g.op("ReverseSequence", value, self.lens(), batch_axis=1, time_axis=0)

    def of_direction(self, value: Optional[str], d: int, axis: int = 0) -> Optional[str]:
        """Direction ``d``'s slice of ``value`` along its ``axis`` of num_directions (kept, of size 1)."""
        if value is None or len(self.reversed) == 1:
            return value
        return self.g.op("Slice", value, self.g.ints([d]), self.g.ints([d + 1]), self.g.ints([axis]))

    def sliced(self, index: int, d: int) -> Optional[str]:
        """Direction ``d``'s slice [1, ...] of input ``index``: a weight, or an initial state [1, batch,
        hidden]."""
        return self.of_direction(_input(self.node, index), d)

    def input(self, d: int) -> str:
        return self.reverse(self.x) if self.reversed[d] else self.x

    def hidden_grad(self, d: int) -> Optional[str]:
        """The gradient of direction ``d``'s all hidden states, [time, 1, batch, hidden] in its time order."""
        dy = _output_grad(self.node, 0)
        if dy is None:
            return None
        g = self.g
        dy = self.of_direction(dy, d, axis=1) or dy
        if self.reversed[d]:
            dy = g.unsqueeze(self.reverse(g.squeeze(dy, [1])), [1])
        return dy

    def final_grad(self, output: int, d: int) -> Optional[str]:
        """The gradient of direction ``d``'s final state (output ``output``), [1, batch, hidden]."""
        return self.of_direction(_output_grad(self.node, output), d)

    def attributes(self, d: int) -> Dict[str, Any]:
        """The attributes of direction ``d``'s forward recurrence, less ``layout`` (the training kernels have
        none; torch's default exporter writes layout=0 explicitly)."""
        node = self.node
        found = {a.name: helper.get_attribute_value(a) for a in node.proto.attribute
                 if a.name not in ("direction", "activations", "activation_alpha", "activation_beta", "layout")}
        found["direction"] = "forward"
        if node.attr("activations") is not None:  # in lower case: _kernel_attributes says why
            found["activations"] = [a.lower() for a in _activations(node, self.kind)[d]]
        for name in ("activation_alpha", "activation_beta"):
            values = node.attr(name)
            if values:
                per = len(values) // len(self.reversed)
                found[name] = list(values[d * per:(d + 1) * per])
        return found

    # the gradients of the direction back into the node's inputs
    def input_grad(self, per_direction: Sequence[Optional[str]]) -> Optional[str]:
        g = self.g
        parts = []
        for d, grad in enumerate(per_direction):
            if grad is not None:
                parts.append(self.reverse(grad) if self.reversed[d] else grad)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else g.op("Sum", *parts)

    def stacked(self, per_direction: Sequence[Optional[str]]) -> Optional[str]:
        """The gradient of a weight or initial state: the directions' slices concatenated."""
        if any(p is None for p in per_direction):
            return None
        parts = [p for p in per_direction if p is not None]
        return parts[0] if len(parts) == 1 else self.g.op("Concat", *parts, axis=0)


def _by_direction(g: GradientContext, node: NodeView, kind: Recurrence) -> Grads:
    """Each direction as a forward recurrence of ONNX Runtime's training kernel over its own (reversed)
    sequence, computed again in the backward graph, and differentiated by the kernel's gradient.

    The kernels refuse sequence lengths, so with ``sequence_lens`` each direction runs over the whole padded
    length: its steps within each sequence are those of the operator (the recurrence only looks back), the
    steps past the end are not (the operator stops there and outputs zeros). So no gradient enters past
    the end: the gradient of Y is masked there, and that of the final hidden state enters at each sequence's
    last step, as a gradient of that step's hidden state. The final cell state of an LSTM has no such entry
    (LSTMGrad takes the gradient of the last step's cell state only): a gradient of Y_c is refused."""
    view = _Directions(g, node, kind)
    count = len(node.inputs)
    per_input: Dict[int, List[Optional[str]]] = {i: [] for i in range(count)}
    base = node.proto.name or node.op_type
    lens = node.has_input(SEQUENCE_LENS)
    if lens and kind is LSTM and _output_grad(node, 2) is not None:
        raise BuilderError(f"{node.describe()}: with sequence_lens, the gradient of its final cell state (Y_c) cannot "
                           "be given to ONNX Runtime's LSTMGrad (it takes that of the last padded step only)")
    for d in range(len(view.reversed)):
        inputs: List[str] = [view.input(d)] + [view.sliced(i, d) or "" for i in (1, 2, 3)] + [""]
        inputs += [view.sliced(i, d) or "" for i in kind.states]
        while inputs and not inputs[-1]:
            inputs.pop()
        attributes = view.attributes(d)
        extra = ["all_cell_states", "iofc"] if kind is LSTM else ["zrh"]
        outputs = ([g.fresh(f"{base}/direction{d}/all_hidden_states")] + [""] * kind.finals
                   + [g.fresh(f"{base}/direction{d}/{n}") for n in extra])
        g.node(f"{kind.op}Training", inputs, outputs, MICROSOFT, **attributes)
        saved = [outputs[0]] + outputs[1 + kind.finals:]
        grads_in = [view.hidden_grad(d)] + [view.final_grad(1 + k, d) for k in range(kind.finals)]
        if lens:
            grads_in = [_within_sequences(g, view, grads_in[0], grads_in[1])] + [None] * kind.finals
        wanted = [node.wants(i) for i in range(len(inputs))]
        found = _kernel_gradient(g, node, kind, inputs, saved, grads_in, attributes, wanted, f"/direction{d}")
        for i in range(count):
            per_input[i].append(found[i] if i < len(found) else None)
    return _combine(view, node, kind, per_input)


def _within_sequences(g: GradientContext, view: "_Directions", hidden: Optional[str],
                      final: Optional[str]) -> Optional[str]:
    """The gradient of all hidden states [time, 1, batch, hidden] of a recurrence run past each sequence's
    end: ``hidden`` (that of Y) masked past the end, plus ``final`` (that of the final state, [1, batch,
    hidden]) at each sequence's last step."""
    if hidden is None and final is None:
        return None
    parts = []
    if hidden is not None:
        parts.append(g.op("Mul", g.squeeze(hidden, [1]), view.mask()))
    if final is not None:
        parts.append(g.op("Mul", final, view.mask(last=True)))
    total = parts[0] if len(parts) == 1 else g.op("Add", parts[0], parts[1])
    return g.unsqueeze(total, [1])


def _combine(view: _Directions, node: NodeView, kind: Recurrence, per_input: Dict[int, List[Optional[str]]]) -> Grads:
    grads: Grads = [None] * len(node.inputs)
    for i in range(len(node.inputs)):
        if not node.wants(i):
            continue
        if i == 0:
            grads[i] = view.input_grad(per_input[i])
        elif i != SEQUENCE_LENS:
            grads[i] = view.stacked(per_input[i])
    return grads


def _refuse_layout(node: NodeView) -> None:
    if int(node.attr("layout", 0)) != 0:
        raise BuilderError(f"{node.describe()} has layout=1 (batch first), which ONNX Runtime 1.19.2's CPU kernels "
                           "refuse (\"Batchwise recurrent operations (layout == 1) are not supported\"): the model "
                           "cannot run, let alone train. Export it with layout 0 (torch's batch_first adds Transposes "
                           "around a layout-0 node)")


def _refuse_what_the_kernels_refuse(node: NodeView, kind: Recurrence) -> None:
    """ONNX Runtime 1.19.2's LSTMTraining/LSTMGrad and GRUTraining/GRUGrad compute the default activations
    only, without clip and (LSTM) input_forget (lstm_io_utils.cc, gru_io_utils.cc); LSTMGrad does not read
    the peephole weights. (Sequence lengths they refuse too: ``_by_direction`` does without them.)"""
    for activations in _activations(node, kind):
        if [a.lower() for a in activations] != [a.lower() for a in kind.default_activations]:
            raise BuilderError(f"{node.describe()}: ONNX Runtime 1.19.2's {kind.op}Grad computes the activations "
                               f"{', '.join(kind.default_activations)} only, not {', '.join(activations)}")
    if node.attr("clip") is not None:
        raise BuilderError(f"{node.describe()}: ONNX Runtime 1.19.2's {kind.op}Grad has no clip")
    if int(node.attr("input_forget", 0)):
        raise BuilderError(f"{node.describe()}: ONNX Runtime 1.19.2's LSTMGrad cannot combine the input and "
                           "forget gates (input_forget=1)")
    if kind is LSTM and node.has_input(7):
        raise BuilderError(f"{node.describe()} has peephole weights, which ONNX Runtime 1.19.2's LSTMGrad does not "
                           "read: its gradients would be those of an LSTM without them (measured against finite "
                           "differences)")


def _kernel_form(g: GradientContext, node: NodeView, kind: Recurrence) -> Grads:
    _refuse_layout(node)
    _refuse_what_the_kernels_refuse(node, kind)
    if _directions(node) == [False] and not node.has_input(SEQUENCE_LENS):
        return _in_place(g, node, kind)
    return _by_direction(g, node, kind)


@gradient("LSTM", inputs=(0, 1, 2, 3, 5, 6, 7))
def lstm(g: GradientContext, node: NodeView) -> Grads:
    return _kernel_form(g, node, LSTM)


@gradient("GRU", inputs=(0, 1, 2, 3, 5))
def gru(g: GradientContext, node: NodeView) -> Grads:
    return _kernel_form(g, node, GRU)


# --- RNN: a reverse Scan -------------------------------------------------------------------------------------
def _activation_slope(g: GradientContext, node: NodeView, name: str, clipped: str) -> str:
    """f'(a) of activation ``name`` at ``clipped`` (the clipped pre-activations)."""
    if name.lower() == "tanh":
        t = g.op("Tanh", clipped)
        return g.op("Sub", g.scalar(1.0, node.inputs[0]), g.op("Mul", t, t))
    if name.lower() == "sigmoid":
        s = g.op("Sigmoid", clipped)
        return g.op("Mul", s, g.op("Sub", g.scalar(1.0, node.inputs[0]), s))
    if name.lower() == "relu":
        return g.op("Cast", g.op("Greater", clipped, g.scalar(0.0, node.inputs[0])), to=g.elem_type(node.inputs[0]))
    raise BuilderError(f"{node.describe()}: ort_cffi's gradient of RNN knows the activations Tanh, Sigmoid and "
                       f"Relu, not {name}")


def _zeros(g: GradientContext, like: str, elem_type: int) -> str:
    zero = helper.make_tensor("value", elem_type, [1], [0])
    return g.op("ConstantOfShape", g.op("Shape", like), value=zero)


def _times(g: GradientContext, like: str) -> str:
    """0, 1, ... along the first (time) axis of ``like``: int64 [time, 1]."""
    steps = g.squeeze(g.op("Slice", g.op("Shape", like), g.ints([0]), g.ints([1])), [0])
    times = g.op("Range", g.const(0, TensorProto.INT64, hint="zero"), steps, g.const(1, TensorProto.INT64, hint="one"))
    return g.unsqueeze(times, [1])


def _step_mask(g: GradientContext, view: "_Directions", like: str, elem_type: int) -> str:
    """1 for the steps within each sequence's length, 0 past it: [time, batch, 1]."""
    within = g.op("Less", _times(g, like), g.unsqueeze(view.lens(), [0]))
    return g.unsqueeze(g.op("Cast", within, to=elem_type), [2])


def _last_step(g: GradientContext, view: "_Directions", like: str, elem_type: int) -> str:
    """1 at each sequence's last step, 0 elsewhere: [time, batch, 1]."""
    last = g.op("Sub", view.lens(), g.const(1, TensorProto.INT64, hint="one"))
    at = g.op("Equal", _times(g, like), g.unsqueeze(last, [0]))
    return g.unsqueeze(g.op("Cast", at, to=elem_type), [2])


def _backward_scan(g: GradientContext, recurrent_weight: str, elem_type: int, masked: bool,
                   carry: str, scanned: Sequence[str]) -> Tuple[str, str]:
    """The reverse Scan over time: carry dH [batch, hidden]; per step dY_t, f'(a_t) and (with sequence
    lengths) 1 - mask_t. Returns the gradient of the initial state and dA [time, batch, hidden]."""
    names = {k: g.fresh(f"rnn_backward/{k}") for k in ("carry", "dy", "slope", "keep", "total", "da", "back",
                                                      "carry_out", "da_out", "passed")}
    # every step value is [batch, hidden] (or [batch, 1]); ONNX Runtime's Scan wants the rank declared
    value = lambda n: helper.make_tensor_value_info(n, elem_type, [None, None])  # noqa: E731
    nodes = [helper.make_node("Add", [names["carry"], names["dy"]], [names["total"]]),
             helper.make_node("Mul", [names["total"], names["slope"]], [names["da"]]),
             helper.make_node("Identity", [names["da"]], [names["da_out"]])]
    if masked:
        nodes += [helper.make_node("MatMul", [names["da"], recurrent_weight], [names["back"]]),
                  helper.make_node("Mul", [names["total"], names["keep"]], [names["passed"]]),
                  helper.make_node("Add", [names["back"], names["passed"]], [names["carry_out"]])]
    else:
        nodes += [helper.make_node("MatMul", [names["da"], recurrent_weight], [names["carry_out"]])]
    inputs = [value(names["carry"]), value(names["dy"]), value(names["slope"])]
    if masked:
        inputs.append(value(names["keep"]))
    body = helper.make_graph(nodes, g.fresh("rnn_backward_step"), inputs,
                             [value(names["carry_out"]), value(names["da_out"])])
    count = len(scanned)
    first, da = g.node("Scan", [carry] + list(scanned), 2, body=body, num_scan_inputs=count,
                       scan_input_directions=[1] * count, scan_output_directions=[1])
    return first, da


@gradient("RNN", inputs=(0, 1, 2, 3, 5))
def rnn(g: GradientContext, node: NodeView) -> Grads:
    _refuse_layout(node)
    view = _Directions(g, node, RNN)
    activations = _activations(node, RNN)
    elem_type = g.elem_type(node.inputs[0])
    clip = node.attr("clip")
    masked = node.has_input(SEQUENCE_LENS)
    count = len(node.inputs)
    per_input: Dict[int, List[Optional[str]]] = {i: [] for i in range(count)}
    for d in range(len(view.reversed)):
        x = view.input(d)  # [time, batch, input]
        w, r, b = view.sliced(1, d), view.sliced(2, d), view.sliced(3, d)
        assert w is not None and r is not None
        h0 = view.sliced(5, d)
        # the hidden states this direction computed, in its own time order: its slice of Y, reversed with
        # the sequence for a reverse direction (Y is 0 past each sequence's end, before and after)
        hidden_all = view.of_direction(g.forward_output(node, 0, "all_hidden_states"), d, axis=1)
        assert hidden_all is not None
        hidden = g.squeeze(hidden_all, [1])  # [time, batch, hidden]
        if view.reversed[d]:
            hidden = view.reverse(hidden)
        first_state = g.op("Gather", hidden, g.const(0, TensorProto.INT64, hint="zero"), axis=0)
        start = g.squeeze(h0, [0]) if h0 is not None else _zeros(g, first_state, elem_type)
        earlier = g.op("Slice", hidden, g.ints([0]), g.ints([-1]), g.ints([0]))
        previous = g.op("Concat", g.unsqueeze(start, [0]), earlier, axis=0)  # h_{t-1}, [time, batch, hidden]
        w2, r2 = g.squeeze(w, [0]), g.squeeze(r, [0])
        pre = g.op("Add", g.op("MatMul", x, g.op("Transpose", w2, perm=[1, 0])),
                   g.op("MatMul", previous, g.op("Transpose", r2, perm=[1, 0])))
        if b is not None:
            bias_w, bias_r = _halves(g, b)
            pre = g.op("Add", pre, g.op("Add", bias_w, bias_r))
        clipped = pre
        if clip is not None:
            limit = float(clip)
            clipped = g.op("Clip", pre, g.scalar(-limit, node.inputs[0]), g.scalar(limit, node.inputs[0]))
        slope = _activation_slope(g, node, activations[d][0], clipped)
        if clip is not None:
            inside = g.op("LessOrEqual", g.op("Abs", pre), g.scalar(float(clip), node.inputs[0]))
            slope = g.op("Mul", slope, g.op("Cast", inside, to=elem_type))
        dy = view.hidden_grad(d)
        dy = g.squeeze(dy, [1]) if dy is not None else _zeros(g, hidden, elem_type)
        scanned = [dy, slope]
        if masked:
            mask = view.mask()
            scanned = [g.op("Mul", dy, mask), g.op("Mul", slope, mask),
                       g.op("Sub", g.scalar(1.0, node.inputs[0]), mask)]
        final = view.final_grad(1, d)
        carry = g.squeeze(final, [0]) if final is not None else _zeros(g, first_state, elem_type)
        initial_grad, da = _backward_scan(g, r2, elem_type, masked, carry, scanned)
        da_t = g.op("Transpose", da, perm=[0, 2, 1])  # [time, hidden, batch]
        grads: Dict[int, Optional[str]] = {}
        if node.wants(0):
            grads[0] = g.op("MatMul", da, w2)
        if node.wants(1):
            grads[1] = g.unsqueeze(g.reduce_sum(g.op("MatMul", da_t, x), [0], keepdims=0), [0])
        if node.wants(2):
            grads[2] = g.unsqueeze(g.reduce_sum(g.op("MatMul", da_t, previous), [0], keepdims=0), [0])
        if node.wants(3) and b is not None:
            db = g.reduce_sum(da, [0, 1], keepdims=0)
            grads[3] = g.unsqueeze(g.op("Concat", db, db, axis=0), [0])
        if node.wants(5) and h0 is not None:
            grads[5] = g.unsqueeze(initial_grad, [0])
        for i in range(count):
            per_input[i].append(grads.get(i))
    return _combine(view, node, RNN, per_input)


def _halves(g: GradientContext, bias: str) -> Tuple[str, str]:
    """Wb and Rb of a bias [1, 2 * hidden], each [hidden]."""
    flat = g.squeeze(bias, [0])
    if g.opset >= 18:
        parts = g.node("Split", [flat], 2, axis=0, num_outputs=2)
    else:
        parts = g.node("Split", [flat], 2, axis=0)
    return parts[0], parts[1]
