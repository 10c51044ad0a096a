"""The lowering as a whole: what it keeps, what it refuses (by name, before anything runs), subgraphs, and
the inference contrib operators it may target, which every build from 1.19.2 to 1.31.1 has."""
from __future__ import annotations

import numpy as np
import pytest
from lowering_check import (assert_close, check_lowering, current_runtime,  # noqa: F401  (a fixture)
                            one_node_model, run_training_build)
from onnx import TensorProto, helper

from ort_cffi._backends.engine.lowering import (KEPT_FOR_THE_ENGINE, UnsupportedTrainingOpError,
                                                lower_training_ops, unlowerable_ops)
from ort_cffi._backends.engine.lowering.registry import CONTRIB_TARGETS, MICROSOFT

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

rng = np.random.default_rng(1)


def values(shape):
    return rng.standard_normal(shape).astype(np.float32)


CONTRIB_CASES = {
    "FusedMatMul": ({"A": values((2, 4, 3)), "B": values((2, 5, 4))}, {"transA": 1, "transB": 1, "alpha": 0.5},
                    (2, 3, 5)),
    "Gelu": ({"X": values((3, 4))}, {}, (3, 4)),
    "FastGelu": ({"X": values((3, 4)), "bias": values((4,))}, {}, (3, 4)),
    "BiasGelu": ({"A": values((3, 4)), "B": values((4,))}, {}, (3, 4)),
    "QuickGelu": ({"X": values((3, 4))}, {"alpha": 1.5}, (3, 4)),
}


def test_the_contrib_targets_are_the_ones_checked():
    assert set(CONTRIB_CASES) == set(CONTRIB_TARGETS)


@pytest.mark.parametrize("op", sorted(CONTRIB_CASES))
def test_each_contrib_target_runs_alike_on_1_19_2_and_1_31_1(op, current_runtime):
    feeds, attributes, shape = CONTRIB_CASES[op]
    model = one_node_model(op, feeds, [("Y", np.float32, shape)], **attributes)
    assert lower_training_ops(model).graph.node[0].op_type == op  # kept as it is
    assert_close(current_runtime.run(model, feeds), run_training_build(model, feeds), 1e-6, op)


@pytest.mark.parametrize("op", ["LayerNormalization", "SimplifiedLayerNormalization"])
def test_layer_norms_onnx_runtime_registers_before_opset_17_stay(op, current_runtime):
    """ONNX has LayerNormalization from opset 17; ONNX Runtime's builds run it (and the RMS norm) in the default
    domain at any opset, so a training model of opset 14 keeps them."""
    feeds = {"X": values((2, 4)), "scale": values((4,))}
    if op == "LayerNormalization":
        feeds["B"] = values((4,))
    outputs = [("Y", np.float32, (2, 4)), ("inv_std", np.float32, (2, 1))]
    if op == "LayerNormalization":
        outputs.insert(1, ("mean", np.float32, (2, 1)))
    model = one_node_model(op, feeds, outputs, domain="", opset=14, axis=-1, epsilon=1e-5)
    lowered = lower_training_ops(model)
    assert [n.op_type for n in lowered.graph.node] == [op]
    assert_close(current_runtime.run(lowered, feeds), run_training_build(model, feeds), 1e-6, op)


def test_what_the_engine_runs_itself_stays():
    feeds = {"buffer": values((3,)), "gradient": values((3,)), "reset": np.array(False)}
    model = one_node_model("InPlaceAccumulatorV2", feeds, [("flag", np.bool_, ()), ("out", np.float32, (3,))])
    lowered = lower_training_ops(model)
    assert [n.op_type for n in lowered.graph.node] == ["InPlaceAccumulatorV2"]
    assert any(o.domain == MICROSOFT for o in lowered.opset_import)
    assert {"InPlaceAccumulatorV2", "AdamWOptimizer", "SGDOptimizerV2"} == set(KEPT_FOR_THE_ENGINE)


def test_the_model_given_is_not_changed_and_its_contrib_import_goes_when_unused():
    feeds = {"dY": values((2, 3)), "X": values((2, 3))}
    model = one_node_model("ReluGrad", feeds, [("dX", np.float32, (2, 3))])
    before = model.SerializeToString()
    lowered = lower_training_ops(model)
    assert model.SerializeToString() == before
    assert [o.domain for o in lowered.opset_import] == [""]


def test_operators_with_no_rule_are_all_named_before_anything_runs():
    nodes = [helper.make_node("ZeroGradient", ["a", "b"], ["c"], domain=MICROSOFT),
             helper.make_node("ReluGrad", ["c", "a"], ["d"], domain=MICROSOFT),
             helper.make_node("YieldOp", ["d"], ["e"], domain=MICROSOFT, full_shape_outputs=[0]),
             helper.make_node("SinGrad", ["e", "a"], ["f"])]  # default domain, not standard
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
                              [helper.make_tensor_value_info("f", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
    assert unlowerable_ops(model) == ["SinGrad", "YieldOp", "ZeroGradient"]
    with pytest.raises(UnsupportedTrainingOpError) as refused:
        lower_training_ops(model)
    assert refused.value.ops == ["SinGrad", "YieldOp", "ZeroGradient"]
    assert "SinGrad, YieldOp, ZeroGradient" in str(refused.value) and isinstance(refused.value, ValueError)


def test_a_node_its_rule_cannot_write_is_refused_with_the_reason():
    """ConvGrad with SAME pads needs the sizes before run time."""
    feeds = {"dY": values((1, 3, 4, 3)), "X": values((1, 2, 7, 6)), "W": values((3, 2, 3, 3))}
    model = one_node_model("ConvGrad", feeds, [("dX", np.float32, None)], symbolic=True, auto_pad="SAME_LOWER",
                           strides=[2, 2])
    assert unlowerable_ops(model) == []
    with pytest.raises(UnsupportedTrainingOpError, match="ConvGrad with auto_pad SAME_LOWER needs") as refused:
        lower_training_ops(model)
    assert refused.value.ops == ["ConvGrad"]


@pytest.mark.parametrize("opset", [13, 14, 15])
def test_the_opset_is_raised_where_a_lowering_needs_it_and_nothing_changes_meaning(opset, current_runtime):
    feeds = {"shape": np.array([5, 3], np.int64), "indices": np.array([1, 1, 4], np.int64), "dY": values((3, 3))}
    model = one_node_model("GatherGrad", feeds, [("dX", np.float32, (5, 3))], opset=opset)
    lowered = check_lowering(model, feeds, current_runtime)
    assert [(o.domain, o.version) for o in lowered.opset_import] == [("", 16)]


def test_the_opset_stays_where_raising_it_would_change_a_meaning():
    """RoiAlign's default coordinate mode changed at opset 16: a model of opset 15 that has one keeps its
    import, and the lowering that needs 16 is refused by name, saying why."""
    feeds = {"shape": np.array([5, 3], np.int64), "indices": np.array([1, 1, 4], np.int64), "dY": values((3, 3))}
    model = one_node_model("GatherGrad", feeds, [("dX", np.float32, (5, 3))], opset=15)
    model.graph.node.append(helper.make_node("RoiAlign", ["X", "rois", "batch"], ["pooled"]))
    with pytest.raises(UnsupportedTrainingOpError, match="needs opset 16; the model imports 15") as refused:
        lower_training_ops(model)
    assert refused.value.ops == ["GatherGrad"]


def branch(name, op):
    return helper.make_graph([helper.make_node(op, ["dY", "X"], [f"{name}_out"], domain=MICROSOFT)], name, [],
                             [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])])


def test_training_operators_inside_if_and_loop_are_lowered(current_runtime):
    """If's branches and a Loop's body read the outer dY and X; each holds a training operator."""
    body = helper.make_graph(
        [helper.make_node("TanhGrad", ["dY", "acc_in"], ["tg"], domain=MICROSOFT),
         helper.make_node("Add", ["tg", "X"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("If", ["flag"], ["chosen"], then_branch=branch("then", "ReluGrad"),
                              else_branch=branch("else", "SigmoidGrad")),
             helper.make_node("Loop", ["trips", "", "chosen"], ["looped"], body=body)]
    graph = helper.make_graph(nodes, "outer", [
        helper.make_tensor_value_info("dY", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        helper.make_tensor_value_info("trips", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("looped", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)],
                              ir_version=8)
    for flag in (True, False):
        feeds = {"dY": values((2, 3)), "X": values((2, 3)) * 0.3, "flag": np.array(flag), "trips": np.array(3, np.int64)}
        lowered = check_lowering(model, feeds, current_runtime)
    inner = [n for graph in (lowered.graph.node[0].attribute[0].g, lowered.graph.node[0].attribute[1].g,
                             lowered.graph.node[1].attribute[0].g) for n in graph.node]
    assert inner and all(n.domain == "" for n in inner)
