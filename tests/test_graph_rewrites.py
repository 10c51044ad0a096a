"""ort_cffi._graph_rewrites (issue #25): graph preparation before ONNX Runtime's gradient builder, against
the real runtime. Each table entry is proved twice: its forward values equal ONNX Runtime's own kernel for
the original operator, and the gradient ONNX Runtime builds for the rewritten graph equals central finite
differences of the original operator's forward values."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment, OrtException
from ort_cffi import _graph_rewrites as rewrites
from ort_cffi._graph_rewrites import PreparationError, prepare
from ort_cffi.artifacts import ArtifactsError, generate_artifacts

env = OrtEnvironment.getEnvironment()
IR_VERSION = 8  # what ONNX Runtime 1.19 and onnx 1.16 agree on for opsets up to 18; 10 for 19-21


def ir_for(opset: int) -> int:
    return IR_VERSION if opset <= 18 else 10


# --- models and running them ---------------------------------------------------------------------------------

class Case:
    """One table entry: an operator, its attributes, its input shapes (input 0 is the one the parameter W
    scales), constant int64 inputs by position, the opset, and the forward tolerance (rtol, atol) with why."""

    def __init__(self, id: str, op: str, shapes: Sequence[Optional[Tuple[int, ...]]], attrs: Optional[Dict[str, Any]] = None,
                 opset: int = 17, tol: Tuple[float, float] = (0.0, 0.0), why: str = "exact", ints: Optional[Dict[int, Sequence[int]]] = None,
                 scale: float = 1.0, values: Any = None, zero_gradient: bool = False, rule: str = "rewrite",
                 reference: Any = None):
        self.id, self.op, self.shapes, self.attrs, self.opset = id, op, list(shapes), attrs or {}, opset
        self.tol, self.why, self.ints, self.scale, self.values = tol, why, ints or {}, scale, values
        self.zero_gradient, self.rule = zero_gradient, rule
        self.reference = reference  # the operator's definition, where ONNX Runtime's kernel cannot run it

    def inputs(self, rng: np.random.Generator) -> Dict[str, np.ndarray]:
        """Float inputs by graph-input name (x0, x1, ...)."""
        found = {}
        for position, shape in enumerate(self.shapes):
            if position in self.ints or shape is None:
                continue
            if position == 0 and self.values is not None:
                found["x0"] = np.asarray(self.values(rng), np.float32)
            else:
                found[f"x{position}"] = (rng.standard_normal(shape) * self.scale).astype(np.float32)
        return found

    def node_inputs(self) -> List[str]:
        names = []
        for position, shape in enumerate(self.shapes):
            names.append(f"i{position}" if position in self.ints else (f"x{position}" if shape is not None else ""))
        return names

    def int_initializers(self) -> List[onnx.TensorProto]:
        return [numpy_helper.from_array(np.array(v, np.int64), f"i{p}") for p, v in self.ints.items()]


def single_op_model(case: Case, dtype: int = TensorProto.FLOAT, out_shape: Optional[Sequence[int]] = None) -> onnx.ModelProto:
    """The operator alone, every float input a graph input (output shape: ``out_shape``, else unknown)."""
    node = helper.make_node(case.op, case.node_inputs(), ["y"], name=f"the_{case.op}", **case.attrs)
    inputs = [helper.make_tensor_value_info(f"x{p}", dtype, list(s)) for p, s in enumerate(case.shapes)
              if s is not None and p not in case.ints]
    graph = helper.make_graph([node], "single", inputs, [helper.make_tensor_value_info("y", dtype, out_shape)],
                              case.int_initializers())
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = ir_for(case.opset)
    return model


def run(model: onnx.ModelProto, feeds: Dict[str, np.ndarray], output: int = 0) -> np.ndarray:
    with env.createSession(model.SerializeToString()) as session, session.run(feeds) as result:
        return np.array(result.get(output).getValue())


CASES = [
    # Activations: Mul/Add/Clip in another order than the fused kernels: one rounding apart at most.
    Case("HardSigmoid", "HardSigmoid", [(4, 6)], {"alpha": 0.3, "beta": 0.4}, scale=3, tol=(1e-6, 1e-7), why="one rounding"),
    Case("HardSigmoid-default", "HardSigmoid", [(4, 6)], scale=4, tol=(1e-6, 1e-7), why="one rounding"),
    Case("HardSwish", "HardSwish", [(4, 6)], opset=14, scale=4, tol=(1e-6, 1e-7), why="one rounding"),
    # Softplus: log1p emulated with its rounding-error correction, so relative accuracy holds for large -x.
    Case("Softplus", "Softplus", [(4, 6)], scale=6, tol=(1e-6, 0.0), why="a few ulps"),
    Case("Softplus-large", "Softplus", [(2, 4)], values=lambda r: [[-100, -30, -17, -1e-3], [1e-3, 17, 30, 100]],
         tol=(1e-6, 0.0), why="no overflow, asymptotes"),
    Case("Mish", "Mish", [(4, 6)], opset=18, scale=5, tol=(1e-6, 0.0), why="a few ulps"),
    # exp(x) - 1 in float32 as the kernels compute it (no expm1 in ONNX): a few ulps of 1 near 0.
    Case("Elu", "Elu", [(4, 6)], {"alpha": 0.7}, scale=3, tol=(1e-6, 1e-7), why="exp(x)-1 rounding"),
    Case("Selu", "Selu", [(4, 6)], scale=3, tol=(1e-6, 2e-7), why="exp(x)-1 rounding"),
    Case("Selu-attrs", "Selu", [(4, 6)], {"alpha": 1.5, "gamma": 2.0}, scale=3, tol=(1e-6, 2e-7), why="exp(x)-1 rounding"),
    Case("Celu", "Celu", [(4, 6)], {"alpha": 2.0}, opset=12, scale=3, tol=(1e-6, 2e-7), why="exp(x/a)-1 rounding"),
    Case("Softsign", "Softsign", [(4, 6)], scale=3, tol=(1e-6, 0.0), why="one rounding"),
    Case("PRelu", "PRelu", [(2, 3, 4), (3, 1)], scale=2, why="exact: x + 0 or 0 + slope*x"),
    Case("ThresholdedRelu", "ThresholdedRelu", [(4, 6)], {"alpha": 0.5}, scale=2, why="exact selection"),
    # Sum and Mean: Add in input order, as the kernel does (two-input sums are exact either way).
    Case("Sum", "Sum", [(3, 4), (3, 4), (1, 4)], tol=(1e-6, 1e-7), why="summation order"),
    Case("Sum-one", "Sum", [(3, 4)], why="exact"),
    Case("Mean", "Mean", [(3, 4), (3, 4), (3, 1)], tol=(1e-6, 1e-7), why="summation order"),
    # Hyperbolic and tan from exp, sin, cos: a few ulps; sinh cancels near 0 (absolute 2**-24 scale).
    Case("Sinh", "Sinh", [(4, 6)], scale=2, tol=(1e-6, 2e-7), why="exp difference cancels near 0"),
    Case("Cosh", "Cosh", [(4, 6)], scale=2, tol=(1e-6, 0.0), why="a few ulps"),
    Case("Tan", "Tan", [(4, 6)], scale=1.2, tol=(1e-5, 1e-7), why="sin/cos, a few ulps, larger near pi/2"),
    # Normalizations: mean and variance summed in another order than the kernels.
    Case("InstanceNormalization", "InstanceNormalization", [(2, 3, 4, 5), (3,), (3,)], {"epsilon": 1e-3},
         tol=(1e-5, 1e-5), why="reduction order"),
    Case("InstanceNormalization-1d", "InstanceNormalization", [(2, 3, 7), (3,), (3,)], tol=(1e-5, 1e-5), why="reduction order"),
    Case("GroupNormalization-18", "GroupNormalization", [(2, 6, 3, 3), (3,), (3,)], {"num_groups": 3, "epsilon": 1e-4},
         opset=18, tol=(1e-5, 1e-5), why="reduction order"),
    Case("GroupNormalization-21", "GroupNormalization", [(2, 6, 3, 3), (6,), (6,)], {"num_groups": 2},
         opset=21, tol=(1e-5, 1e-5), why="reduction order"),
    # Selections and data movement: exact.
    Case("GlobalMaxPool", "GlobalMaxPool", [(2, 3, 4, 5)]),
    Case("ReduceMax-attr", "ReduceMax", [(3, 4, 5)], {"axes": [0, 2], "keepdims": 1}, opset=13),
    Case("ReduceMax-attr-nokeep", "ReduceMax", [(3, 4, 5)], {"axes": [1], "keepdims": 0}, opset=13),
    Case("ReduceMax-all", "ReduceMax", [(3, 4, 5)], {"keepdims": 0}, opset=13),
    Case("ReduceMax-input", "ReduceMax", [(3, 4, 5), (1,)], {"keepdims": 1}, opset=18, ints={1: [-1]}),
    # ONNX Runtime 1.19's ReduceMax kernel fails on noop_with_empty_axes=1 without axes ("Reduction on all
    # axes, output size should be 1"): the definition (the input itself) is the reference.
    Case("ReduceMax-noop", "ReduceMax", [(3, 4)], {"noop_with_empty_axes": 1}, opset=18, reference=lambda x0: x0),
    Case("ReduceMin-attr", "ReduceMin", [(3, 4, 5)], {"axes": [-1, 0]}, opset=13),
    Case("ReduceMin-input", "ReduceMin", [(3, 4, 5), (2,)], {"keepdims": 0}, opset=18, ints={1: [1, 2]}),
    Case("ReduceSumSquare-attr", "ReduceSumSquare", [(3, 4, 5)], {"axes": [1]}, opset=13, tol=(1e-6, 1e-6), why="summation order"),
    Case("ReduceSumSquare-input", "ReduceSumSquare", [(3, 4, 5), (2,)], {"keepdims": 0}, opset=18, ints={1: [0, 2]},
         tol=(1e-6, 1e-6), why="summation order"),
    Case("ReduceL1", "ReduceL1", [(3, 4, 5)], {"axes": [0, 1], "keepdims": 0}, opset=13, tol=(1e-6, 1e-6), why="summation order"),
    Case("ReduceL1-input", "ReduceL1", [(3, 4, 5), (1,)], opset=18, ints={1: [2]}, tol=(1e-6, 1e-6), why="summation order"),
    Case("ReduceLogSum", "ReduceLogSum", [(3, 4, 5)], {"axes": [2]}, opset=13,
         values=lambda r: r.uniform(0.1, 2.0, (3, 4, 5)), tol=(1e-6, 1e-6), why="summation order"),
    Case("ReduceLogSum-all", "ReduceLogSum", [(3, 4)], {"keepdims": 0}, opset=18,
         values=lambda r: r.uniform(0.1, 2.0, (3, 4)), tol=(1e-6, 1e-6), why="summation order"),
    Case("DepthToSpace-DCR", "DepthToSpace", [(2, 8, 2, 3)], {"blocksize": 2}, opset=13),
    Case("DepthToSpace-CRD", "DepthToSpace", [(2, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, opset=13),
    Case("SpaceToDepth", "SpaceToDepth", [(2, 3, 4, 6)], {"blocksize": 2}, opset=13),
]

SPECIAL = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -3.5, 4.5, 0.49999997, -0.49999997, 1e-30, -1e-30,
           8388607.5, -8388607.5, 8388608.0, 16777215.0, 1e20, -1e20, 3.4e38, -3.4e38, 2.0 ** 65 + 2.0 ** 42,
           -(2.0 ** 66) - 2.0 ** 43, 2.0 ** 127, float("inf"), float("-inf"), float("nan")]


def special_values(rng: np.random.Generator) -> np.ndarray:
    """Every awkward value (halves, -0, the edges of exactness, the float32 range, inf, NaN) and random ones."""
    values = np.concatenate([np.array(SPECIAL, np.float32), (rng.standard_normal(35) * 50).astype(np.float32)])
    return values.reshape(8, 8)


ZERO_CASES = [
    Case(op, op, [(8, 8)], values=special_values, zero_gradient=True, rule="zero_gradient", why="exact, NaN and -0 aside")
    for op in ("Floor", "Ceil", "Round", "Sign")
]
ALL_CASES = CASES + ZERO_CASES


def test_the_table_has_one_entry_per_operator_and_covers_the_issue():
    wanted = {"HardSwish", "HardSigmoid", "Softplus", "Mish", "Elu", "Selu", "Celu", "Softsign", "PRelu",
              "ThresholdedRelu", "Sum", "Mean", "InstanceNormalization", "GroupNormalization", "GlobalMaxPool",
              "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "Sinh", "Cosh", "Tan",
              "DepthToSpace", "SpaceToDepth"}
    assert wanted <= set(rewrites.REWRITES)
    assert set(rewrites.ZERO_GRADIENT) == {"Floor", "Ceil", "Round", "Sign"}
    assert {c.op for c in CASES} == set(rewrites.REWRITES), "every rewrite has a forward and a gradient case"
    assert not (set(rewrites.REWRITES) | set(rewrites.ZERO_GRADIENT)) & rewrites.GRADIENT_OPS


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_forward_equals_the_operator(case: Case):
    rng = np.random.default_rng(sum(map(ord, case.id)))
    feeds = case.inputs(rng)
    expected = case.reference(**feeds) if case.reference else run(single_op_model(case), feeds)
    model = single_op_model(case, out_shape=expected.shape)
    prepared, records = prepare(model, requires_grad=set(feeds))
    assert prepared is not model
    assert [(r["rule"], r["op"], r["count"], r["nodes"]) for r in records] == [(case.rule, case.op, 1, [f"the_{case.op}"])]
    assert case.op not in {n.op_type for n in prepared.graph.node}
    onnx.checker.check_model(prepared, full_check=True)
    got = run(prepared, feeds)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    rtol, atol = case.tol
    # Tolerance per case (see CASES): exact where the rewrite selects or moves values, else the float32
    # rounding of evaluating the same formula in another order.
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=case.why)
    if case.zero_gradient:  # also the sign of zero where the operator defines it, and NaN where NaN
        assert np.array_equal(np.isnan(got), np.isnan(expected))
