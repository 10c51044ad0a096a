"""The training model computes once, when it is built, what the model computes from sizes it declares and
from constants (builder/folding.py). Checked here:
- an attention-like reshape and scale: the arithmetic on declared sizes is gone, the batch's stays, the
  gradients equal finite differences, and the first training loss is the eval loss bit for bit at two batch
  sizes;
- arithmetic IEEE does not round exactly (Exp) and results past the size limit stay computed at run time."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
from gradcheck import Case, check, forward_model, save_model
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
from ort_cffi.artifacts.builder.training_model import build_models


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def heads_nodes() -> List[onnx.NodeProto]:
    """x [N, 8] -> h = x w1 -> [N, 2, width] with width = size(h, 1) / 2 -> divided by sqrt(width) ->
    Softmax -> back to [N, 8] -> y = . w2. The target shapes and the scale are computed from Shape, as
    exporters write them; only N is not declared."""
    return [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Shape", ["h"], ["h_shape"]),
        _const("zero", np.array(0, np.int64)), _const("one", np.array(1, np.int64)),
        _const("axes", np.array([0], np.int64)), _const("heads", np.array([2], np.int64)),
        _const("two", np.array(2, np.int64)), _const("minus_one", np.array([-1], np.int64)),
        helper.make_node("Gather", ["h_shape", "zero"], ["batch"]),
        helper.make_node("Gather", ["h_shape", "one"], ["features"]),
        helper.make_node("Div", ["features", "two"], ["width"]),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1"]),
        helper.make_node("Unsqueeze", ["width", "axes"], ["width_1"]),
        helper.make_node("Concat", ["batch_1", "heads", "width_1"], ["split_shape"], axis=0),
        helper.make_node("Reshape", ["h", "split_shape"], ["r"]),
        helper.make_node("Shape", ["r"], ["r_shape"]),
        helper.make_node("Gather", ["r_shape", "minus_one"], ["last"]),
        helper.make_node("Cast", ["last"], ["last_f"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["last_f"], ["scale"]),
        helper.make_node("Div", ["r", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attention"], axis=-1),
        helper.make_node("Concat", ["batch_1", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["attention", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w2"], ["y"]),
    ]


def heads_case() -> Case:
    rng = np.random.default_rng(11)
    params = {"w1": rng.normal(0, 0.7, (8, 8)).astype(np.float32), "w2": rng.normal(0, 0.5, (8, 3)).astype(np.float32)}
    return Case("heads", heads_nodes(), params, {"x": rng.normal(size=(5, 8)).astype(np.float32)}, symbolic_batch=True)


def _ops(model: onnx.ModelProto) -> List[str]:
    return [n.op_type for n in model.graph.node]


def _forward_ops(model: onnx.ModelProto) -> List[str]:
    """The training model's nodes before the loss block (its Mul of the output by its weights)."""
    ops = []
    for node in model.graph.node:
        if node.op_type == "Mul" and "y" in node.input:
            break
        ops.append(node.op_type)
    return ops


def test_arithmetic_on_declared_sizes_is_folded_and_the_gradients_hold() -> None:
    c = heads_case()
    built = build_models(forward_model(c, {"y": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    forward = _forward_ops(built.training)
    assert forward.count("Shape") == 1 and forward.count("Gather") == 1, forward  # the batch's, for the Reshapes
    assert not {"Sqrt", "Cast"} & set(forward) and forward.count("Div") == 1, forward  # r / scale only
    assert "Sqrt" in _ops(built.eval) and _ops(built.eval).count("Shape") == 2  # the eval model as exported
    computed = {name for node in built.training.graph.node if node.op_type != "Constant" for name in node.output}
    assert {v.name for v in built.training.graph.value_info} <= computed  # nothing declared of what was folded
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad


def _first_losses(folder: Path, batch: int) -> List[float]:
    """The eval loss, then the first training loss, on one batch."""
    rng = np.random.default_rng(batch)
    x = rng.normal(size=(batch, 8)).astype(np.float32)
    feeds = {"x": x, "labels": np.argmax(x[:, :3], axis=1).astype(np.int64)}
    with OrtEnvironment.getEnvironment().createTrainingSession(
            str(folder / "checkpoint"), str(folder / "training_model.onnx"), str(folder / "eval_model.onnx"),
            str(folder / "optimizer_model.onnx")) as session:
        with session.evalStep(feeds) as result:
            eval_loss = float(result.get(0).getValue())
        start = session.copyParametersToBuffer()
        with session.trainStep(feeds) as result:
            train_loss = float(result.get(0).getValue())
        session.optimizerStep()
        assert np.count_nonzero(start != session.copyParametersToBuffer()) == start.size
    return [eval_loss, train_loss]


def test_the_training_model_computes_the_exported_values_at_any_batch_size(tmp_path: Path) -> None:
    path = save_model(heads_case(), tmp_path / "heads.onnx", "y", 3)
    made = generate_artifacts(path, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    forward = _forward_ops(onnx.load(str(made.training_model)))
    assert "Sqrt" not in forward and forward.count("Gather") == 1, forward
    for batch in (3, 5, 6):
        eval_loss, train_loss = _first_losses(tmp_path / "out", batch)
        assert train_loss == eval_loss, (batch, train_loss, eval_loss)


def _scaled(scale_nodes: List[onnx.NodeProto]) -> Case:
    """y = (x w) * s, where ``scale_nodes`` compute s from constants."""
    rng = np.random.default_rng(12)
    nodes = scale_nodes + [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Mul", ["h", "s"], ["y"])]
    return Case("scaled", nodes, {"w": rng.normal(size=(4, 3)).astype(np.float32)},
                {"x": rng.normal(size=(5, 4)).astype(np.float32)}, symbolic_batch=True)


def test_what_ieee_does_not_round_exactly_stays_computed() -> None:
    c = _scaled([_const("half", np.array(0.5, np.float32)), helper.make_node("Exp", ["half"], ["s"])])
    built = build_models(forward_model(c, {"y": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    assert "Exp" in _forward_ops(built.training)


def test_a_result_past_the_size_limit_stays_computed() -> None:
    """s = ReduceMean(ConstantOfShape([300, 300])): the 90000 ones are made at run time, not stored."""
    c = _scaled([_const("big", np.array([300, 300], np.int64)),
                 helper.make_node("ConstantOfShape", ["big"], ["ones"],
                                  value=numpy_helper.from_array(np.array([1.0], np.float32))),
                 helper.make_node("ReduceMean", ["ones"], ["s"], keepdims=0)])
    built = build_models(forward_model(c, {"y": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    assert "ConstantOfShape" in _forward_ops(built.training)
    assert all(n.attribute[0].t.ByteSize() < 1024 for n in built.training.graph.node if n.op_type == "Constant")
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad
