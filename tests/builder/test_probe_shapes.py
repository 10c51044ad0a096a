"""Broadcast axes the symbolic shapes cannot tell (onnx's inference names each broadcast's result anew)
are decided from the sizes inferred under two made-up assignments of the input sizes: no run-time sum is
left, and the gradients equal central finite differences, a batch of one included."""
from __future__ import annotations

from typing import List

import numpy as np
import onnx
import pytest
from gradcheck import Case, check, forward_model
from onnx import helper, numpy_helper

from ort_cffi.artifacts.builder.probe_shapes import probe_sizes
from ort_cffi.artifacts.builder.training_model import build_models


def _ints(name: str, values: List[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64), name))


def renamed_sizes(batch: int) -> Case:
    """Two reshapes of the batch (each -1: a fresh symbolic size), added; the first row of one, sliced off
    (a size shape inference cannot tell is 1), added to the sum: broadcast along the batch."""
    rng = np.random.default_rng(2)
    nodes = [_ints("shape", [-1, 2, 3]), _ints("zero", [0]), _ints("one", [1]),
             helper.make_node("MatMul", ["x", "w1"], ["h1"]),
             helper.make_node("MatMul", ["x", "w2"], ["h2"]),
             helper.make_node("Reshape", ["h1", "shape"], ["a"]),
             helper.make_node("Reshape", ["h2", "shape"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Slice", ["b", "zero", "one", "zero"], ["first"]),
             helper.make_node("Mul", ["s", "first"], ["y"])]
    params = {"w1": rng.normal(size=(4, 6)).astype(np.float32), "w2": rng.normal(size=(4, 6)).astype(np.float32)}
    return Case(f"renamed_sizes_{batch}", nodes, params, {"x": rng.normal(size=(batch, 4)).astype(np.float32)},
                symbolic_batch=True)


def test_the_probes_tell_sizes_the_symbolic_shapes_do_not() -> None:
    model = forward_model(renamed_sizes(5), {"y": np.ones((5, 2, 3), np.float32)})
    probes = probe_sizes(model)
    assert [p["first"][0] for p in probes] == [1, 1]
    assert probes[0]["a"][0] == probes[0]["b"][0] != probes[1]["a"][0] == probes[1]["b"][0]


@pytest.mark.parametrize("batch", [5, 1])
def test_broadcasts_decided_by_probes_have_the_gradients_of_finite_differences(batch: int) -> None:
    c = renamed_sizes(batch)
    # The loss's weights broadcast along the batch (check() weighs each element, fixing the batch size)
    built = build_models(forward_model(c, {"y": np.ones((1, 2, 3), np.float32)}), list(c.params), [], None)
    assert "BroadcastGradientArgs" not in [n.op_type for n in built.training.graph.node]
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad
