"""The lowerings of LSTMTraining / LSTMGrad and GRUTraining / GRUGrad against ONNX Runtime 1.19.2's own
kernels: one-node and two-node models (the training op, and its gradient wired as ONNX Runtime's builder
wires it) run on the training build's Python InferenceSession as they are, and lowered, on the same runtime
and on ONNX Runtime 1.31.1 (in a child process: it is the ``onnxruntime`` package too). Every output agrees
within 1e-5 relative to its largest value.

The cases: sequence lengths 1 and several, batch 1 and several, with and without bias and initial states,
peephole weights (LSTM), ``linear_before_reset`` 0 and 1 (GRU), and each subset of the output gradients the
gradient op can be given (Y's, Y_h's, Y_c's)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import ROOT
from ort_cffi._backends.engine.lowering import lower_training_ops
from ort_cffi._backends.engine.lowering.registry import (MICROSOFT, RULES, Emitter, LoweringError,
                                                          UnsupportedTrainingOpError)

pytestmark = pytest.mark.needs_onnxruntime_python

ort = pytest.importorskip("onnxruntime")
# scripts/test.sh installs 1.31.1; ORT_CFFI_TEST_ORT_VERSION (scripts/check_versions.py) names another release
CURRENT_VERSION = os.environ.get("ORT_CFFI_TEST_ORT_VERSION") or "1.31.1"
INFERENCE_1_31 = ROOT / ".cache" / f"ort-inference-{CURRENT_VERSION}"
OPSET = 17
INPUT, HIDDEN = 3, 5


def lower(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as the engine lowers it."""
    return lower_training_ops(model)


def run_119(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


# --- the cases ---------------------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    outputs: List[str] = field(default_factory=list)


def _model(nodes: Sequence[onnx.NodeProto], feeds: Dict[str, np.ndarray], outputs: Sequence[str],
           opset: int = OPSET) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    graph = helper.make_graph(list(nodes), "case", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MICROSOFT, 1)])


def _trim(names: List[str]) -> List[str]:
    while names and not names[-1]:
        names.pop()
    return names


def lstm_case(steps: int, batch: int, bias: bool, initial: bool, peephole: bool, grads: Tuple[str, ...],
              seed: int, opset: int = OPSET) -> Case:
    rng = np.random.default_rng(seed)
    u = lambda *shape: rng.uniform(-0.6, 0.6, shape).astype(np.float32)  # noqa: E731
    feeds = {"X": rng.standard_normal((steps, batch, INPUT)).astype(np.float32), "W": u(1, 4 * HIDDEN, INPUT),
             "R": u(1, 4 * HIDDEN, HIDDEN)}
    if bias:
        feeds["B"] = u(1, 8 * HIDDEN)
    if initial:
        feeds["H0"], feeds["C0"] = u(1, batch, HIDDEN), u(1, batch, HIDDEN)
    if peephole:
        feeds["P"] = u(1, 3 * HIDDEN)
    for g, shape in (("dY", (steps, 1, batch, HIDDEN)), ("dYh", (1, batch, HIDDEN)), ("dYc", (1, batch, HIDDEN))):
        if g in grads:
            feeds[g] = rng.standard_normal(shape).astype(np.float32)
    has = lambda k: k if k in feeds else ""  # noqa: E731
    forward = helper.make_node("LSTMTraining", _trim(["X", "W", "R", has("B"), "", has("H0"), has("C0"), has("P")]),
                               ["Y", "Yh", "Yc", "CA", "IOFC"], domain=MICROSOFT, hidden_size=HIDDEN, name="lstm")
    grad_outputs = _trim(["dX", "dW", "dR", "dB" if bias else "", "dH0" if initial else "", "dC0" if initial else "",
                          "dP" if peephole else ""])
    backward = helper.make_node("LSTMGrad", ["X", "W", "R", "", has("H0"), has("C0"), "Y", "CA", "IOFC",
                                             has("dY"), has("dYh"), has("dYc")],
                                grad_outputs, domain=MICROSOFT, hidden_size=HIDDEN, name="lstm_grad")
    outputs = ["Y", "Yh", "Yc", "CA", "IOFC"] + [o for o in grad_outputs if o]
    name = (f"lstm_T{steps}_B{batch}{'_bias' if bias else ''}{'_initial' if initial else ''}"
            f"{'_peephole' if peephole else ''}_{'+'.join(grads) or 'nograd'}"
            f"{'' if opset == OPSET else f'_opset{opset}'}")
    return Case(name, _model([forward, backward], feeds, outputs, opset), feeds, outputs)


def gru_case(steps: int, batch: int, bias: bool, initial: bool, lbr: int, grads: Tuple[str, ...], seed: int,
             opset: int = OPSET) -> Case:
    rng = np.random.default_rng(seed)
    u = lambda *shape: rng.uniform(-0.6, 0.6, shape).astype(np.float32)  # noqa: E731
    feeds = {"X": rng.standard_normal((steps, batch, INPUT)).astype(np.float32), "W": u(1, 3 * HIDDEN, INPUT),
             "R": u(1, 3 * HIDDEN, HIDDEN)}
    if bias:
        feeds["B"] = u(1, 6 * HIDDEN)
    if initial:
        feeds["H0"] = u(1, batch, HIDDEN)
    for g, shape in (("dY", (steps, 1, batch, HIDDEN)), ("dYh", (1, batch, HIDDEN))):
        if g in grads:
            feeds[g] = rng.standard_normal(shape).astype(np.float32)
    has = lambda k: k if k in feeds else ""  # noqa: E731
    attrs = dict(hidden_size=HIDDEN, linear_before_reset=lbr)
    forward = helper.make_node("GRUTraining", _trim(["X", "W", "R", has("B"), "", has("H0")]), ["Y", "Yh", "ZRH"],
                               domain=MICROSOFT, name="gru", **attrs)
    grad_outputs = _trim(["dX", "dW", "dR", "dB" if bias else "", "dH0" if initial else ""])
    backward = helper.make_node("GRUGrad", ["X", "W", "R", has("B"), "", has("H0"), "Y", "ZRH", has("dY"), has("dYh")],
                                grad_outputs, domain=MICROSOFT, name="gru_grad", **attrs)
    outputs = ["Y", "Yh", "ZRH"] + [o for o in grad_outputs if o]
    name = (f"gru_lbr{lbr}_T{steps}_B{batch}{'_bias' if bias else ''}{'_initial' if initial else ''}"
            f"_{'+'.join(grads) or 'nograd'}{'' if opset == OPSET else f'_opset{opset}'}")
    return Case(name, _model([forward, backward], feeds, outputs, opset), feeds, outputs)


def _cases() -> List[Case]:
    cases: List[Case] = []
    seed = 0
    shapes = [(1, 1), (6, 1), (1, 4), (7, 4)]
    for (steps, batch), bias, initial in itertools.product(shapes, (True, False), (True, False)):
        seed += 1
        cases.append(lstm_case(steps, batch, bias, initial, False, ("dY",), seed))
        cases.append(gru_case(steps, batch, bias, initial, seed % 2, ("dY",), seed))
    for lbr in (0, 1):
        for grads in (("dY", "dYh"), ("dYh",), ()):
            seed += 1
            cases.append(gru_case(5, 3, True, True, lbr, grads, seed))
    for grads in (("dY", "dYh", "dYc"), ("dYh", "dYc"), ("dYc",), ("dYh",), ()):
        seed += 1
        cases.append(lstm_case(5, 3, True, True, False, grads, seed))
    for steps, batch, initial in ((1, 1, False), (6, 3, True)):
        seed += 1
        cases.append(lstm_case(steps, batch, True, initial, True, ("dY", "dYh"), seed))
    for opset in (12, 13, 18, 21):  # the forms whose inputs and attributes move between opsets
        seed += 1
        cases.append(lstm_case(4, 2, True, True, True, ("dY", "dYh", "dYc"), seed, opset))
        cases.append(gru_case(4, 2, True, True, opset % 2, ("dY", "dYh"), seed, opset))
    return cases


CASES = _cases()


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Within 1e-5 relative to the tensor's largest value."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-30)
    error = float(np.abs(actual.astype(np.float64) - expected).max(initial=0.0)) / scale
    assert error <= 1e-5, f"{what}: {error:.2e} of its largest value {scale:.3g} off"


@pytest.fixture(scope="module")
def kernel_outputs() -> Dict[str, List[np.ndarray]]:
    return {c.name: run_119(c.model, c.feeds) for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_lowered_matches_the_kernels_on_1_19(case: Case, kernel_outputs: Dict[str, List[np.ndarray]]) -> None:
    lowered = lower(case.model)
    assert not [n.op_type for n in lowered.graph.node if n.domain == MICROSOFT]
    for name, got, want in zip(case.outputs, run_119(lowered, case.feeds), kernel_outputs[case.name]):
        assert_close(got, want, f"{case.name}: {name}")


@pytest.mark.parametrize("op", ["LSTMGrad", "GRUGrad"])
def test_gradient_alone_on_the_kernels_saved_values(op: str) -> None:
    """The gradient op lowered alone, fed what ONNX Runtime's forward kernel saved (not the lowered forward's)."""
    case = lstm_case(6, 3, True, True, False, ("dY", "dYh", "dYc"), 99) if op == "LSTMGrad" else \
        gru_case(6, 3, True, True, 1, ("dY", "dYh"), 99)
    forward, backward = case.model.graph.node
    saved = dict(zip(case.outputs, run_119(case.model, case.feeds)))
    feeds = {k: v for k, v in {**case.feeds, **saved}.items() if k in backward.input}
    outputs = [o for o in backward.output if o]
    alone = _model([backward], feeds, outputs)
    expected = run_119(alone, feeds)
    for name, got, want in zip(outputs, run_119(lower(alone), feeds), expected):
        assert_close(got, want, f"{op}: {name}")


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import onnxruntime as ort
    folder = sys.argv[1]
    assert ort.__version__ == sys.argv[2], ort.__version__
    names = json.load(open(folder + "/cases.json"))
    for name in names:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(folder + "/" + name + ".onnx", options, providers=["CPUExecutionProvider"])
        feeds = dict(np.load(folder + "/" + name + ".feeds.npz"))
        outputs = session.run(None, feeds)
        np.savez(folder + "/" + name + ".out.npz", *outputs)
""")


def test_lowered_runs_on_1_31_as_the_kernels_on_1_19(tmp_path: Path,
                                                     kernel_outputs: Dict[str, List[np.ndarray]]) -> None:
    """Every case's lowered model on ONNX Runtime 1.31.1 (no training kernels there), in one child process:
    the kernels' cases and the directional ones."""
    assert (INFERENCE_1_31 / "onnxruntime" / "__init__.py").is_file(), \
        f"ONNX Runtime {CURRENT_VERSION} is not unpacked at {INFERENCE_1_31} (scripts/test.sh installs it)"
    runs = [(case, dict(zip(case.outputs, kernel_outputs[case.name]))) for case in CASES]
    runs += [directional_case(op, direction, lens, seed=3, lbr=lbr, peephole=op == "LSTM")
             for op, direction, lens, lbr in DIRECTIONAL]
    for case, _ in runs:
        onnx.save(lower(case.model), tmp_path / f"{case.name}.onnx")
        np.savez(tmp_path / f"{case.name}.feeds.npz", **case.feeds)
    (tmp_path / "cases.json").write_text(json.dumps([case.name for case, _ in runs]))
    env = dict(os.environ, PYTHONPATH=str(INFERENCE_1_31))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), CURRENT_VERSION], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    for case, expected in runs:
        with np.load(tmp_path / f"{case.name}.out.npz") as found:
            got = {name: found[f"arr_{i}"] for i, name in enumerate(case.outputs)}
        check_outputs(case, got, expected, f"on {CURRENT_VERSION}")


def check_outputs(case: Case, got: Dict[str, np.ndarray], expected: Dict[str, np.ndarray], where: str = "") -> None:
    """Each expected output within 1e-5 of its largest value; the gate values only within each sequence
    (past its end nothing reads them)."""
    lengths = case.feeds.get("lens")
    for name, want in expected.items():
        value = got[name]
        if name in ("IOFC", "ZRH") and lengths is not None:
            within = np.arange(value.shape[0])[:, None] < lengths[None, :]  # [T, batch]
            value, want = value.transpose(0, 2, 1, 3)[within], want.transpose(0, 2, 1, 3)[within]
        assert_close(value, want, f"{case.name} {where}: {name}")


# --- the form: only the recurrence is serial ---------------------------------------------------------------------
def _scans(model: onnx.ModelProto) -> List[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type in ("Scan", "Loop")]


@pytest.mark.parametrize("op", ["LSTMGrad", "GRUGrad_lbr0", "GRUGrad_lbr1"])
def test_backward_loop_holds_only_the_recurrence(op: str) -> None:
    """One reverse Scan; its body multiplies by R only (never reads W or X), and the weight gradients are
    products over the whole sequence outside it."""
    case = lstm_case(4, 2, True, True, False, ("dY",), 5) if op == "LSTMGrad" else \
        gru_case(4, 2, True, True, int(op[-1]), ("dY",), 5)
    lowered = lower(case.model)
    backward = [n for n in _scans(lowered) if any(a.name == "scan_input_directions" and list(a.ints) and a.ints[0] == 1
                                                  for a in n.attribute)]
    assert len(backward) == 1
    body = helper.get_attribute_value(next(a for a in backward[0].attribute if a.name == "body"))
    read = {i for n in body.node for i in n.input}
    assert not read & {"X", "W"}
    products = [n for n in body.node if n.op_type in ("MatMul", "Gemm")]
    assert len(products) == (2 if op == "GRUGrad_lbr0" else 1)
    assert any(n.op_type == "Gemm" for n in lowered.graph.node), "the weight gradients are batched products"


@pytest.mark.parametrize("op", ["LSTMTraining", "GRUTraining_lbr0", "GRUTraining_lbr1"])
def test_forward_loop_holds_only_the_cell(op: str) -> None:
    """The forward Scan's body (a forward LSTM or GRU without peephole weights or sequence lengths) holds the
    cell and nothing else: its products with R are Gemms that add X·Wᵀ (or R's bias) themselves and read R as
    it is (no Transpose, no MatMul left for ONNX Runtime to fuse, which it does not where a training model's
    batch is symbolic); X·Wᵀ and the biases are one Gemm per part outside; nothing in the body joins values
    (no Concat), and the LSTM's Y is computed after the loop, not copied out of it step by step."""
    if op == "LSTMTraining":
        case = lstm_case(4, 2, True, True, False, ("dY",), 6)
        per_step = {"Gemm": 1, "Sigmoid": 3, "Tanh": 2, "Identity": 1}
    else:
        case = gru_case(4, 2, True, True, int(op[-1]), ("dY",), 6)
        per_step = {"Gemm": 2, "Sigmoid": 1, "Tanh": 1}
    lowered = lower(case.model)
    forward = [n for n in _scans(lowered) if not any(a.name == "scan_input_directions" and list(a.ints)
                                                     and a.ints[0] == 1 for a in n.attribute)]
    assert len(forward) == 1
    body = helper.get_attribute_value(next(a for a in forward[0].attribute if a.name == "body"))
    kinds = [n.op_type for n in body.node]
    for kind, count in per_step.items():
        assert kinds.count(kind) == count, f"{kind}: {kinds}"
    assert not {"MatMul", "Transpose", "Concat"} & set(kinds), kinds
    gemms = [n for n in body.node if n.op_type == "Gemm"]
    assert all(any(a.name == "transB" and a.i == 1 for a in n.attribute) for n in gemms)
    if op != "GRUTraining_lbr0":  # there the product reads r·h, made in the step
        assert all(n.input[0] == body.input[0].name for n in gemms), "the products read the hidden state"
    outside = [n.op_type for n in lowered.graph.node]
    assert outside.count("Gemm") >= (1 if op == "LSTMTraining" else 2), "X·Wᵀ over the whole sequence"


# --- what the kernels refuse, and what of it the lowering computes -----------------------------------------------
@pytest.mark.parametrize("op,attrs,fragment", [
    ("LSTMTraining", {"direction": "sideways"}, "unknown direction 'sideways'"),
    ("GRUTraining", {"activations": ["Relu", "Tanh"]}, "activations relu, tanh"),
    ("GRUGrad", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh"]}, "activations sigmoid, tanh"),
    ("LSTMTraining", {"clip": 3.0}, "clip"),
    ("LSTMGrad", {"input_forget": 1}, "input_forget=1"),
    ("GRUGrad", {"layout": 1}, "layout=1"),
])
def test_what_the_lowering_cannot_compute_is_refused_by_name(op: str, attrs: Dict[str, object], fragment: str) -> None:
    node = helper.make_node(op, ["X", "W", "R", "", "", "", "Y", "S", "G"], ["out"], domain=MICROSOFT,
                            hidden_size=HIDDEN, name="node", **attrs)
    with pytest.raises(LoweringError, match=fragment.replace("(", r"\(")) as raised:
        RULES[op](node, Emitter(OPSET, set(), {}, label="node"))
    assert "'node'" in str(raised.value)


def test_the_engine_refuses_a_model_by_name_before_anything_runs() -> None:
    case = lstm_case(3, 2, True, False, False, ("dY",), 7)
    for node in case.model.graph.node:
        node.attribute.append(helper.make_attribute("clip", 2.0))
    with pytest.raises(UnsupportedTrainingOpError, match="LSTMGrad, LSTMTraining") as refused:
        lower_training_ops(case.model)
    assert "has clip" in str(refused.value)


def directional_case(op: str, direction: str, lens: Optional[List[int]], seed: int, lbr: int = 0,
                     peephole: bool = False) -> Tuple[Case, Dict[str, np.ndarray]]:
    """A training op and its gradient in ``direction``, with sequence lengths ``lens`` (None: the full
    length), and the outputs ONNX Runtime's forward-direction kernels give for it: each direction of each
    sequence alone (its own steps, reversed for a reverse direction), batch 1, put back together."""
    steps, batch = 5, (len(lens) if lens else 3)
    directions = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(seed)
    u = lambda *shape: rng.uniform(-0.6, 0.6, shape).astype(np.float32)  # noqa: E731
    feeds = {"X": rng.standard_normal((steps, batch, INPUT)).astype(np.float32),
             "W": u(directions, gates * HIDDEN, INPUT), "R": u(directions, gates * HIDDEN, HIDDEN),
             "B": u(directions, 2 * gates * HIDDEN), "H0": u(directions, batch, HIDDEN)}
    if op == "LSTM":
        feeds["C0"] = u(directions, batch, HIDDEN)
        if peephole:
            feeds["P"] = u(directions, 3 * HIDDEN)
    lengths = np.array(lens if lens else [steps] * batch, np.int32)
    dy = rng.standard_normal((steps, directions, batch, HIDDEN)).astype(np.float32)
    within = np.arange(steps)[:, None] < lengths[None, :]  # [T, batch]
    dy *= within[:, None, :, None]  # Y is 0 past each sequence's end: a gradient there is never read
    feeds["dY"], feeds["dYh"] = dy, rng.standard_normal((directions, batch, HIDDEN)).astype(np.float32)
    if op == "LSTM":
        feeds["dYc"] = rng.standard_normal((directions, batch, HIDDEN)).astype(np.float32)
    if lens:
        feeds["lens"] = lengths
    length = "lens" if lens else ""
    attrs: Dict[str, Any] = dict(hidden_size=HIDDEN, direction=direction)
    if op == "LSTM":
        saved = ["CA", "IOFC"]
        forward_inputs = ["X", "W", "R", "B", length, "H0", "C0"] + (["P"] if peephole else [])
        grad_inputs = ["X", "W", "R", length, "H0", "C0", "Y", "CA", "IOFC", "dY", "dYh", "dYc"]
        grad_outputs = ["dX", "dW", "dR", "dB", "dH0", "dC0"] + (["dP"] if peephole else [])
        forward_outputs = ["Y", "Yh", "Yc"] + saved
    else:
        attrs["linear_before_reset"] = lbr
        saved = ["ZRH"]
        forward_inputs = ["X", "W", "R", "B", length, "H0"]
        grad_inputs = ["X", "W", "R", "B", length, "H0", "Y", "ZRH", "dY", "dYh"]
        grad_outputs = ["dX", "dW", "dR", "dB", "dH0"]
        forward_outputs = ["Y", "Yh"] + saved
    nodes = [helper.make_node(f"{op}Training", forward_inputs, forward_outputs, domain=MICROSOFT, **attrs),
             helper.make_node(f"{op}Grad", grad_inputs, grad_outputs, domain=MICROSOFT, **attrs)]
    outputs = forward_outputs + grad_outputs
    data = {k: v for k, v in feeds.items() if k != "lens"}
    model = _model(nodes, data, outputs)
    if lens:
        model.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))

    # the reference: ONNX Runtime's kernels, one direction of one sequence at a time
    expected = {name: np.zeros(feeds[name[1:]].shape if name.startswith("d") else (0,), np.float32)
                for name in grad_outputs}
    expected.update({"Y": np.zeros((steps, directions, batch, HIDDEN), np.float32),
                     "Yh": np.zeros((directions, batch, HIDDEN), np.float32)})
    if op == "LSTM":
        expected.update({"Yc": np.zeros((directions, batch, HIDDEN), np.float32),
                         "CA": np.zeros((steps, directions, batch, HIDDEN), np.float32),
                         "IOFC": np.zeros((steps, directions, batch, 4 * HIDDEN), np.float32)})
    else:
        expected["ZRH"] = np.zeros((steps, directions, batch, 3 * HIDDEN), np.float32)
    single = lstm_case(1, 1, True, True, peephole, ("dY", "dYh", "dYc"), 0) if op == "LSTM" else \
        gru_case(1, 1, True, True, lbr, ("dY", "dYh"), 0)
    for value in single.model.graph.input:  # any length, one sequence
        for position, dim in enumerate(value.type.tensor_type.shape.dim):
            dim.dim_param = f"{value.name}_{position}"
    session = ort.InferenceSession(single.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        for b, length_b in enumerate(lengths):
            if length_b == 0:  # no step: Y, the final states and every gradient through them are 0
                continue
            order = np.arange(length_b)[::-1] if reverse else np.arange(length_b)
            one = {"X": feeds["X"][order, b:b + 1], "W": feeds["W"][d:d + 1], "R": feeds["R"][d:d + 1],
                   "B": feeds["B"][d:d + 1], "H0": feeds["H0"][d:d + 1, b:b + 1],
                   "dY": feeds["dY"][order, d:d + 1, b:b + 1], "dYh": feeds["dYh"][d:d + 1, b:b + 1]}
            if op == "LSTM":
                one.update({"C0": feeds["C0"][d:d + 1, b:b + 1], "dYc": feeds["dYc"][d:d + 1, b:b + 1]})
                if peephole:
                    one["P"] = feeds["P"][d:d + 1]
            got = dict(zip(single.outputs, session.run(None, {k: v for k, v in one.items() if k in single.feeds})))
            for name in ("Y", "CA", "IOFC", "ZRH"):
                if name in expected:
                    expected[name][order, d, b] = got[name][:, 0, 0]
            for name in ("Yh", "Yc"):
                if name in expected:
                    expected[name][d, b] = got[name][0, 0]
            expected["dX"][order, b] += got["dX"][:, 0]
            for name in ("dW", "dR", "dB", "dP"):
                if name in expected:
                    expected[name][d] += got[name][0]
            for name in ("dH0", "dC0"):
                if name in expected:
                    expected[name][d, b] = got[name][0, 0]
    name = f"{op.lower()}{lbr if op == 'GRU' else ''}_{direction}_{'lens' if lens else 'full'}"
    return Case(name, model, feeds, outputs), expected


DIRECTIONAL = [(op, direction, lens, lbr) for op, lbr in (("LSTM", 0), ("GRU", 0), ("GRU", 1))
               for direction in ("forward", "reverse", "bidirectional") for lens in (None, [5, 2, 4, 1, 0])
               if (direction, lens) != ("forward", None)]


@pytest.mark.parametrize("op,direction,lens,lbr", DIRECTIONAL,
                         ids=[f"{o}{lbr if o == 'GRU' else ''}-{d}-{'lens' if n else 'full'}"
                              for o, d, n, lbr in DIRECTIONAL])
def test_directions_and_sequence_lengths_as_the_kernels_on_each_sequence(op: str, direction: str,
                                                                         lens: Optional[List[int]], lbr: int) -> None:
    """What ONNX Runtime's kernels refuse (a reverse or bidirectional op, sequence lengths) the lowering
    computes as they compute each direction of each sequence alone: the outputs within each sequence, and
    every gradient. Y is also the standard operator's."""
    case, expected = directional_case(op, direction, lens, seed=len(direction) + (len(lens) if lens else 0) + lbr,
                                      lbr=lbr, peephole=(op == "LSTM" and lens is not None))
    with pytest.raises(Exception):  # the kernels themselves refuse it
        run_119(case.model, case.feeds)
    got = dict(zip(case.outputs, run_119(lower(case.model), case.feeds)))
    check_outputs(case, got, expected)
    lengths = case.feeds.get("lens")
    standard = helper.make_node(op, [i for i in case.model.graph.node[0].input[:6 if op == "GRU" else 8]],
                                ["Y", "Yh"], hidden_size=HIDDEN, direction=direction,
                                **({"linear_before_reset": lbr} if op == "GRU" else {}))
    inputs = {k: v for k, v in case.feeds.items() if k in standard.input}
    plain = _model([standard], {k: v for k, v in inputs.items() if k != "lens"}, ["Y", "Yh"])
    if lengths is not None:
        plain.graph.input.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [len(lengths)]))
    for name, want in zip(["Y", "Yh"], run_119(plain, inputs)):
        assert_close(got[name], want, f"{case.name}: {name} against the {op} operator")


# --- the nodes the generators write ------------------------------------------------------------------------------
def recurrent_classifier(op: str = "GRU", direction: str = "forward") -> onnx.ModelProto:
    """x [N, 6, 4] -> MatMul (so that X takes a gradient) -> time first -> ``op`` in ``direction`` (a GRU with
    linear_before_reset=1 as torch exports it; initial states) -> mean over time of Y beside Y_h -> Gemm ->
    logits [N, 3]."""
    rng = np.random.default_rng(3)
    u = lambda *shape: numpy_helper.from_array(rng.uniform(-0.4, 0.4, shape).astype(np.float32))  # noqa: E731
    gates, directions = (4 if op == "LSTM" else 3), (2 if direction == "bidirectional" else 1)
    inits = {"proj": u(4, 4), "W": u(directions, gates * 8, 4), "R": u(directions, gates * 8, 8),
             "B": u(directions, 2 * gates * 8), "fc.weight": u(3, 2 * directions * 8), "fc.bias": u(3)}
    for name, tensor in inits.items():
        tensor.name = name
    initial = ["h0", "h0"] if op == "LSTM" else ["h0"]
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    nodes = [helper.make_node("MatMul", ["x", "proj"], ["projected"]),
             helper.make_node("Transpose", ["projected"], ["time_first"], perm=[1, 0, 2]),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Slice", ["x_shape", "zero", "one"], ["batch"]),
             helper.make_node("Concat", ["directions", "batch", "eight"], ["h0_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["h0_shape"], ["h0"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])),
             helper.make_node(op, ["time_first", "W", "R", "B", ""] + initial, ["Y", "Y_h"], hidden_size=8,
                              direction=direction, **attrs),
             helper.make_node("ReduceMean", ["Y"], ["mean"], axes=[0], keepdims=0),
             helper.make_node("Transpose", ["mean"], ["mean_batch_first"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["mean_batch_first", "flat"], ["mean_flat"]),
             helper.make_node("Transpose", ["Y_h"], ["last_batch_first"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["last_batch_first", "flat"], ["last_flat"]),
             helper.make_node("Concat", ["mean_flat", "last_flat"], ["both"], axis=1),
             helper.make_node("Gemm", ["both", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    constants = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                 (("zero", [0]), ("one", [1]), ("eight", [8]), ("directions", [directions]), ("flat", [0, -1]))]
    graph = helper.make_graph(nodes, f"{op.lower()}_classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                              list(inits.values()) + constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


RECURRENT = {"LSTMTraining", "LSTMGrad", "GRUTraining", "GRUGrad"}


# (model, generator): ONNX Runtime's generator runs the forward direction only; ort_cffi's builder writes each
# direction of a bidirectional one as a forward-direction training op over its own (reversed) sequence
GENERATED = [("lstm_text", "onnxruntime"), ("lstm_text", "ort_cffi"), ("gru_classifier", "onnxruntime"),
             ("gru_classifier", "ort_cffi"), ("bilstm_tagger", "ort_cffi"), ("bigru_classifier", "ort_cffi")]


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("model_name,generator", GENERATED, ids=["-".join(g) for g in GENERATED])
def test_the_generators_nodes_lowered_give_the_same_training_step(tmp_path: Path, generator: str,
                                                                  model_name: str) -> None:
    """A training model as a generator writes it (tests/zoo's recurrent models, or a forward GRU), its
    recurrent training nodes lowered and the rest kept: the loss, the recurrent nodes' outputs and every
    gradient they give agree with the unlowered model's, on 1.19.2."""
    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

    rng = np.random.default_rng(11)
    if model_name == "gru_classifier":
        source = tmp_path / "gru_classifier.onnx"
        onnx.save(recurrent_classifier(), source)
        data = {"x": rng.standard_normal((8, 6, 4)).astype(np.float32)}
    else:
        source = ROOT / "tests" / "zoo" / f"{model_name}.onnx"
        steps, vocabulary = (20, 64) if model_name == "lstm_text" else (12, 32)
        data = {"tokens": rng.integers(0, vocabulary, (8, steps)).astype(np.int64)}
    data["labels"] = rng.integers(0, 3, (8, 12) if model_name == "bilstm_tagger" else 8).astype(np.int64)
    # ort_cffi's builder with ONNX Runtime's kernels (standard_forms=False): the nodes this test lowers itself
    made = generate_artifacts(source, artifact_directory=tmp_path / "out", loss="CrossEntropyLoss",
                              generator=None if generator == "ort_cffi" else generator,
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                              **({"standard_forms": False} if generator == "ort_cffi" else {}))
    training = onnx.load(made.training_model)
    recurrent_nodes = [n for n in training.graph.node if n.domain == MICROSOFT and n.op_type in RECURRENT]
    kind = "LSTM" if "lstm" in model_name else "GRU"
    assert {n.op_type for n in recurrent_nodes} == {f"{kind}Training", f"{kind}Grad"}
    # every value the recurrent nodes give becomes an output of both models, to be compared
    watched = [o for n in recurrent_nodes for o in n.output if o]
    known = {o.name for o in training.graph.output}
    training.graph.output.extend(helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                 for o in watched if o not in known)
    feeds = training_feeds(training, source, data)
    names = [o.name for o in training.graph.output]
    for name, got, want in zip(names, run_119(lower_recurrent(training), feeds), run_119(training, feeds)):
        if want.dtype.kind == "f":
            assert_close(got, want, f"{model_name} ({generator}): {name}")


def lower_recurrent(training: onnx.ModelProto) -> onnx.ModelProto:
    """``training`` with its recurrent training nodes lowered and every other node kept."""
    lowered = onnx.ModelProto()
    lowered.CopyFrom(training)
    inferred = onnx.shape_inference.infer_shapes(training)
    types = {v.name: v.type for v in list(inferred.graph.input) + list(inferred.graph.value_info)}
    taken = {name for n in training.graph.node for name in list(n.input) + list(n.output) + [n.name]}
    replaced: List[onnx.NodeProto] = []
    for node in training.graph.node:
        if node.domain == MICROSOFT and node.op_type in RECURRENT:
            emit = Emitter(OPSET, taken, types, label=node.name or node.op_type)
            RULES[node.op_type](node, emit)
            replaced += emit.nodes
        else:
            replaced.append(node)
    assert len(replaced) > len(training.graph.node)
    del lowered.graph.node[:]
    lowered.graph.node.extend(replaced)
    return lowered


def training_feeds(training: onnx.ModelProto, source: Path, data: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The inputs of a training model: ``data``, the source model's parameters, empty gradient buffers."""
    parameters = {t.name: numpy_helper.to_array(t) for t in onnx.load(source).graph.initializer}
    feeds: Dict[str, np.ndarray] = {}
    for value in training.graph.input:
        if value.name in data:
            feeds[value.name] = data[value.name]
        elif value.name == "lazy_reset_grad":
            feeds[value.name] = np.array([True])
        elif value.name.endswith("_grad.accumulation.buffer"):
            feeds[value.name] = np.zeros_like(parameters[value.name[: -len("_grad.accumulation.buffer")]])
        else:
            feeds[value.name] = parameters[value.name]
    return feeds


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("model_name", ["bigru_classifier", "LSTM-bidirectional", "GRU-reverse", "LSTM-reverse"])
def test_onnx_runtimes_other_directions_train_as_ort_cffis_builder_trains_them(tmp_path: Path,
                                                                              model_name: str) -> None:
    """ONNX Runtime's generator writes one reverse or bidirectional GRUTraining/LSTMTraining for such a
    recurrence, which its kernels refuse to load. Lowered, its training step gives the loss and every
    parameter's gradient that ort_cffi's builder's artifacts give on 1.19.2's kernels (one forward-direction
    kernel per direction, a reverse one over the reversed sequence)."""
    from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

    rng = np.random.default_rng(5)
    if model_name == "bigru_classifier":
        source = ROOT / "tests" / "zoo" / f"{model_name}.onnx"
        data = {"tokens": rng.integers(0, 32, (8, 12)).astype(np.int64)}
        direction = "bidirectional"
    else:
        op, direction = model_name.split("-")
        source = tmp_path / "model.onnx"
        onnx.save(recurrent_classifier(op, direction), source)
        data = {"x": rng.standard_normal((8, 6, 4)).astype(np.float32)}
    data["labels"] = rng.integers(0, 3, 8).astype(np.int64)
    theirs = generate_artifacts(source, artifact_directory=tmp_path / "theirs", loss="CrossEntropyLoss",
                                generator="onnxruntime", prepare=False, check=False,
                                requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    ours = generate_artifacts(source, artifact_directory=tmp_path / "ours", loss="CrossEntropyLoss",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                              standard_forms=False)  # on 1.19.2's kernels
    results = []
    for made, lowering in ((theirs, True), (ours, False)):
        training = onnx.load(made.training_model)
        if lowering:
            directions = {helper.get_attribute_value(a) for n in training.graph.node if n.op_type in RECURRENT
                          for a in n.attribute if a.name == "direction"}
            assert directions == {direction.encode()}
        parameters = [v.name[: -len("_grad.accumulation.buffer")] for v in training.graph.input
                      if v.name.endswith("_grad.accumulation.buffer")]
        loss = training.graph.output[0].name
        del training.graph.output[:]
        training.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
                                     for name in [loss] + [f"{p}_grad" for p in parameters])
        model = lower_recurrent(training) if lowering else training
        results.append(dict(zip(["loss"] + parameters, run_119(model, training_feeds(training, source, data)))))
    lowered, reference = results
    assert sorted(lowered) == sorted(reference)
    for name, want in reference.items():
        assert_close(lowered[name], want, f"{model_name}: {name}")
