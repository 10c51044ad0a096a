"""Checking a gradient rule against central finite differences, through ONNX Runtime itself.

A case is a small model around one operator: some of its inputs are parameters (initializers, the
values whose gradients are checked), the others data fed at run time. The checked function is
``L = sum(Y_i * R_i)`` over the model's outputs with fixed random weights ``R``, so that every element of
every output's gradient matters. The gradient comes from one train step of ort_cffi's training model in a
training session (with ort_cffi's checkpoint); the finite differences from the forward model, run in an
inference session of the same runtime.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment

OPSET = 17


@dataclass
class Case:
    """One operator configuration: ``nodes`` on ``params`` (name -> initial value, the checked gradients)
    and ``data`` (name -> value fed at run time); ``outputs`` the values whose weighted sum is the loss.
    Tolerances are relative to the size of the directional derivative."""

    name: str
    nodes: List[onnx.NodeProto]
    params: Dict[str, np.ndarray]
    data: Dict[str, np.ndarray] = field(default_factory=dict)
    outputs: Optional[List[str]] = None
    opset: int = OPSET
    rtol: float = 2e-2
    atol: float = 1e-3
    eps: float = 1e-3
    symbolic_batch: bool = False  # declare the data inputs' first axis as a symbolic size
    extra_opsets: Dict[str, int] = field(default_factory=dict)


def case(name: str, op: str, inputs: Sequence[Tuple[str, Any]], params: Sequence[str], *, outputs: int = 1,
         domain: str = "", **attributes: Any) -> Case:
    """A one-node case: ``inputs`` in order as (name, value) (name "" for an omitted input); those named in
    ``params`` are parameters, the rest data."""
    names = [n for n, _ in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], domain=domain or None, **attributes)
    values = {n: np.asarray(v) for n, v in inputs if n}
    return Case(name, [node], {n: values[n] for n in params}, {n: v for n, v in values.items() if n not in params})


def _value_info(name: str, value: np.ndarray, symbolic: bool) -> onnx.ValueInfoProto:
    dims: List[Any] = list(value.shape)
    if symbolic and dims:
        dims[0] = "batch"
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), dims)


def forward_model(c: Case, weights: Dict[str, np.ndarray]) -> onnx.ModelProto:
    """The case's nodes, then ``loss = sum_i ReduceSum(Y_i * R_i)``; parameters as initializers."""
    outputs = c.outputs or [o for o in c.nodes[-1].output if o]
    nodes = list(c.nodes)
    terms = []
    for out in outputs:
        weighted = f"{out}_weighted"
        nodes.append(helper.make_node("Mul", [out, f"{out}_R"], [weighted]))
        total = f"{out}_total"
        nodes.append(helper.make_node("ReduceSum", [weighted], [total], keepdims=0))
        terms.append(total)
    if len(terms) > 1:
        nodes.append(helper.make_node("Sum", terms, ["loss"]))
    else:
        nodes.append(helper.make_node("Identity", terms, ["loss"]))
    initializers = [numpy_helper.from_array(v, n) for n, v in c.params.items()]
    initializers += [numpy_helper.from_array(weights[o], f"{o}_R") for o in outputs]
    graph = helper.make_graph(nodes, c.name, [_value_info(n, v, c.symbolic_batch) for n, v in c.data.items()],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializers)
    opsets = [helper.make_opsetid("", c.opset)] + [helper.make_opsetid(d, v) for d, v in c.extra_opsets.items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def save_model(c: Case, path: Path, output: str, classes: int) -> Path:
    """The case's nodes as a model file for ``generate_artifacts``: its data inputs with a symbolic batch,
    its parameters initializers, ``output`` ([batch, classes]) the model's output."""
    graph = helper.make_graph(c.nodes, path.stem, [_value_info(n, v, True) for n, v in c.data.items()],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", classes])],
                              [numpy_helper.from_array(v, n) for n, v in c.params.items()])
    opsets = [helper.make_opsetid("", c.opset)] + [helper.make_opsetid(d, v) for d, v in c.extra_opsets.items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, path)
    return path


def output_shapes(c: Case) -> Dict[str, Tuple[Tuple[int, ...], int]]:
    """Run the case's nodes once to learn its outputs' shapes and element types."""
    outputs = c.outputs or [o for o in c.nodes[-1].output if o]
    graph = helper.make_graph(
        list(c.nodes), c.name, [_value_info(n, v, False) for n, v in list(c.data.items()) + list(c.params.items())],
        [onnx.ValueInfoProto(name=o) for o in outputs])
    opsets = [helper.make_opsetid("", c.opset)] + [helper.make_opsetid(d, v) for d, v in c.extra_opsets.items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    from ort_cffi.artifacts.builder.spec_forms import rewrite_changed_operators

    rewrite_changed_operators(model)  # the shapes of the forward the artifacts compute (see check)
    env = OrtEnvironment.getEnvironment()
    with env.createSession(model.SerializeToString()) as session:
        with session.run({**c.data, **c.params}) as result:
            return {o: (np.asarray(result.get(i).getValue()).shape, np.asarray(result.get(i).getValue()).dtype)
                    for i, o in enumerate(outputs)}


def _loss(session: Any, feeds: Dict[str, np.ndarray]) -> float:
    with session.run(feeds) as result:
        return float(np.asarray(result.get(0).getValue(), dtype=np.float64))


@dataclass
class Comparison:
    parameter: str
    analytic: float
    numeric: float

    def ok(self, rtol: float, atol: float) -> bool:
        return abs(self.analytic - self.numeric) <= atol + rtol * max(abs(self.analytic), abs(self.numeric))


def check(c: Case, directions: int = 3, seed: int = 0, standard_forms: bool = False) -> List[Comparison]:
    """The directional derivatives of the case's loss along random directions in each parameter: from
    ort_cffi's gradient graph (analytic) and from central differences of the forward model (numeric).
    ``standard_forms``: the gradient graph with the builder's chosen standard forms (build_models')."""
    from ort_cffi.artifacts.builder.checkpoint import write_checkpoint
    from ort_cffi.artifacts.builder.spec_forms import rewrite_changed_operators
    from ort_cffi.artifacts.builder.training_model import GRADIENT_PROBE_PREFIX, build_models

    rng = np.random.default_rng(seed)
    shapes = output_shapes(c)
    weights = {o: rng.uniform(-1, 1, shape).astype(dtype) for o, (shape, dtype) in shapes.items()}
    forward = forward_model(c, weights)
    built = build_models(forward, list(c.params), [], None, None, None, expose_gradients=True,
                         standard_forms=standard_forms)
    env = OrtEnvironment.getEnvironment()
    feeds = {**c.data, **c.params}
    with tempfile.TemporaryDirectory() as folder:  # one train step of the training session gives the gradients
        training, checkpoint = Path(folder) / "training_model.onnx", Path(folder) / "checkpoint"
        onnx.save(built.training, training)
        write_checkpoint(checkpoint, built.trainable, built.frozen)
        with env.createTrainingSession(str(checkpoint), str(training)) as session:
            with session.trainStep(dict(c.data)) as result:
                grads = {name[len(GRADIENT_PROBE_PREFIX):]: np.asarray(value.getValue(), dtype=np.float64)
                         for name, value in result if name.startswith(GRADIENT_PROBE_PREFIX)}
    inference = forward_model(c, weights)
    # the forward the artifacts compute: the builder writes a node whose answer changed between ONNX Runtime
    # releases in a form every release computes alike (spec_forms), and differentiates that
    rewrite_changed_operators(inference)
    for initializer in list(inference.graph.initializer):  # parameters fed, to perturb them
        if initializer.name in c.params:
            inference.graph.initializer.remove(initializer)
            inference.graph.input.append(_value_info(initializer.name, c.params[initializer.name], False))
    comparisons = []
    with env.createSession(inference.SerializeToString()) as forward_session:
        for name, value in c.params.items():
            for _ in range(directions):
                direction = rng.normal(size=value.shape)
                direction /= max(float(np.linalg.norm(direction)), 1e-12)
                step = c.eps * max(1.0, float(np.abs(value).max()))
                plus = (value + step * direction).astype(value.dtype)
                minus = (value - step * direction).astype(value.dtype)
                numeric = (_loss(forward_session, {**feeds, name: plus})
                           - _loss(forward_session, {**feeds, name: minus})) / (2 * step)
                # the perturbation actually applied, after rounding to the parameter's type
                applied = (plus.astype(np.float64) - minus.astype(np.float64)) / (2 * step)
                comparisons.append(Comparison(name, float(np.sum(grads[name] * applied)), numeric))
    return comparisons


CaseFactory = Callable[[], List[Case]]
