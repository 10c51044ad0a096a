"""GELU written out, with Erf or with the tanh approximation, in the forms exporters write, is computed in the
training model by ONNX Runtime's Gelu and FastGelu kernels, as its own generator does. Checked here:
- the gradients equal central finite differences;
- the eval model keeps the exported form;
- a pattern whose inner values feed anything else stays as written;
- where ONNX Runtime's generator runs, 20 steps give its very losses."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import numpy as np
import onnx
import pytest
from _training_run import train_artifacts
from gradcheck import Case, check, forward_model, save_model
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
from ort_cffi.artifacts.builder.training_model import build_models

SQRT_2 = float(np.sqrt(2.0))
K = float(np.sqrt(2.0 / np.pi))


def _const(name: str, value: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32), name))


def _mul(a: str, b: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Mul", [a, b], [out])


# Each form computes GELU of "h" into "g" (the constants first).
ERF_FORMS: Dict[str, Callable[[], List[onnx.NodeProto]]] = {
    # torch's TorchScript export: ((h * (erf(h / sqrt 2) + 1)) * 0.5
    "div_then_half_last": lambda: [_const("c_root", SQRT_2), _const("c_one", 1.0), _const("c_half", 0.5),
                                   helper.make_node("Div", ["h", "c_root"], ["e_in"]),
                                   helper.make_node("Erf", ["e_in"], ["e"]),
                                   helper.make_node("Add", ["e", "c_one"], ["u"]),
                                   _mul("h", "u", "hu"), _mul("hu", "c_half", "g")],
    # 0.5 h first, a multiplication by 1/sqrt 2, 1 + erf
    "mul_half_first": lambda: [_const("c_root", 1 / SQRT_2), _const("c_one", 1.0), _const("c_half", 0.5),
                               _mul("h", "c_half", "half"),
                               _mul("c_root", "h", "e_in"),
                               helper.make_node("Erf", ["e_in"], ["e"]),
                               helper.make_node("Add", ["c_one", "e"], ["u"]),
                               _mul("half", "u", "g")],
    # (1 + erf) * 0.5, then h
    "half_of_factor": lambda: [_const("c_root", SQRT_2), _const("c_one", 1.0), _const("c_half", 0.5),
                               helper.make_node("Div", ["h", "c_root"], ["e_in"]),
                               helper.make_node("Erf", ["e_in"], ["e"]),
                               helper.make_node("Add", ["e", "c_one"], ["u"]),
                               _mul("u", "c_half", "uh"), _mul("uh", "h", "g")],
}
TANH_FORMS: Dict[str, Callable[[], List[onnx.NodeProto]]] = {
    # Hugging Face's GPT-2 (NewGELUActivation), TorchScript export
    "pow": lambda: [_const("c_half", 0.5), _const("c_three", 3.0), _const("c_cubic", 0.044715),
                    _const("c_k", K), _const("c_one", 1.0),
                    _mul("h", "c_half", "half"),
                    helper.make_node("Pow", ["h", "c_three"], ["cube"]),
                    _mul("cube", "c_cubic", "term"),
                    helper.make_node("Add", ["h", "term"], ["inner"]),
                    _mul("inner", "c_k", "t_in"),
                    helper.make_node("Tanh", ["t_in"], ["t"]),
                    helper.make_node("Add", ["t", "c_one"], ["u"]),
                    _mul("half", "u", "g")],
    # h * h * h, the constants first, 0.5 last
    "products": lambda: [_const("c_half", 0.5), _const("c_cubic", 0.044715), _const("c_k", K),
                         _const("c_one", 1.0),
                         _mul("h", "h", "square"), _mul("h", "square", "cube"),
                         _mul("c_cubic", "cube", "term"),
                         helper.make_node("Add", ["term", "h"], ["inner"]),
                         _mul("c_k", "inner", "t_in"),
                         helper.make_node("Tanh", ["t_in"], ["t"]),
                         helper.make_node("Add", ["c_one", "t"], ["u"]),
                         _mul("h", "u", "hu"), _mul("hu", "c_half", "g")],
}
FUSED = {**{name: ("Gelu", "Erf", form) for name, form in ERF_FORMS.items()},
         **{name: ("FastGelu", "Tanh", form) for name, form in TANH_FORMS.items()}}


def mlp_case(name: str, gelu: List[onnx.NodeProto], after: Sequence[onnx.NodeProto] = ()) -> Case:
    """x -> Gemm -> GELU -> MatMul (then ``after``), every weight trained."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1)] + gelu + [
        helper.make_node("MatMul", ["g", "w2"], ["y"])] + list(after)
    params = {"w1": rng.normal(0, 0.8, (6, 4)).astype(np.float32), "b1": rng.normal(0, 0.3, 6).astype(np.float32),
              "w2": rng.normal(0, 0.5, (6, 3)).astype(np.float32)}
    return Case(name, nodes, params, {"x": rng.normal(size=(5, 4)).astype(np.float32)}, symbolic_batch=True)


def _ops(model: onnx.ModelProto) -> List[str]:
    return [n.op_type for n in model.graph.node]


def _no_orphan_constants(model: onnx.ModelProto) -> None:
    """The constants only the fused nodes read are gone too (ONNX Runtime warns of each one left)."""
    read = {name for node in model.graph.node for name in node.input}
    assert all(n.output[0] in read for n in model.graph.node if n.op_type == "Constant")
    assert all(i.name in read for i in model.graph.initializer)


@pytest.mark.parametrize("name", sorted(FUSED))
def test_gelu_forms_become_one_kernel_with_the_gradients_of_finite_differences(name: str) -> None:
    fused_op, anchor, form = FUSED[name]
    c = mlp_case(name, form())
    built = build_models(forward_model(c, {"y": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    assert _ops(built.training).count(fused_op) == 1 and anchor not in _ops(built.training), _ops(built.training)
    assert f"{fused_op}Grad" in _ops(built.training)
    _no_orphan_constants(built.training)
    assert anchor in _ops(built.eval) and fused_op not in _ops(built.eval)  # the eval model as exported
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad


def test_a_gelu_whose_inner_value_is_read_elsewhere_stays_as_written() -> None:
    """The erf value also feeds a second branch: fusing would lose it, so the nodes stay, and their own
    gradients (Erf, Mul, Add) still equal finite differences."""
    gelu = ERF_FORMS["div_then_half_last"]()
    c = mlp_case("shared_erf", gelu, after=[helper.make_node("ReduceMean", ["e"], ["e_mean"], axes=[1], keepdims=1),
                                            helper.make_node("Add", ["y", "e_mean"], ["out"])])
    built = build_models(forward_model(c, {"out": np.ones((5, 3), np.float32)}), list(c.params), [], None)
    assert "Gelu" not in _ops(built.training) and "Erf" in _ops(built.training)
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad


def test_a_double_gelu_is_not_fused() -> None:
    """ONNX Runtime's Gelu kernels are float32 only: a float64 model keeps its nodes."""
    gelu = [n for n in ERF_FORMS["div_then_half_last"]() if n.op_type != "Constant"]
    consts = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(np.array(v, np.float64), k))
              for k, v in (("c_root", SQRT_2), ("c_one", 1.0), ("c_half", 0.5))]
    graph = helper.make_graph(consts + [helper.make_node("MatMul", ["x", "w"], ["h"])] + gelu
                              + [helper.make_node("ReduceSum", ["g"], ["loss"], keepdims=0)], "double",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.DOUBLE, [])],
                              [numpy_helper.from_array(np.ones((3, 2)), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = build_models(model, ["w"], [], None)
    assert "Gelu" not in _ops(built.training) and "Erf" in _ops(built.training)


def _classifier(path: Path, form: List[onnx.NodeProto]) -> Path:
    return save_model(mlp_case(path.stem, form), path, "y", 3)


def _losses(made: Any, steps: int) -> List[float]:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    run = train_artifacts(made, {"x": x, "labels": np.argmax(x[:, :3], axis=1).astype(np.int64)}, steps,
                          learning_rate=0.05)
    assert all(run.moved), run.moved
    assert abs(run.losses[0] - run.eval_loss) <= 1e-5 * abs(run.eval_loss)  # the fused kernel computes the exported GELU
    return run.losses


@pytest.mark.parametrize("name", ["div_then_half_last", "pow"])
def test_a_gelu_classifier_trains(name: str, tmp_path: Path) -> None:
    fused_op, _, form = FUSED[name]
    made = generate_artifacts(_classifier(tmp_path / f"{name}.onnx", form()), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert fused_op in _ops(onnx.load(str(made.training_model)))
    losses = _losses(made, 30)
    assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("name", ["div_then_half_last", "pow"])
def test_gelu_losses_equal_onnx_runtime_artifacts(name: str, tmp_path: Path) -> None:
    """ONNX Runtime's generator fuses these forms too: the same kernels, the very same losses."""
    model = _classifier(tmp_path / f"{name}.onnx", FUSED[name][2]())
    ours = generate_artifacts(model, artifact_directory=tmp_path / "ours",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                              standard_forms=False)  # GeluGrad's kernel, as ONNX Runtime's: bit for bit
    theirs = generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                                requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                                optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert _losses(ours, 20) == _losses(theirs, 20)


def packed_rows_case(indices: Sequence[int], opset: int = 17) -> Case:
    """A packed projection [N, 6] viewed as [3, N, 2] and taken apart row by row with Gathers of constant
    scalar indices (as torch's dynamo exporter writes attention's query, key and value), then combined."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([-1, 3, 2]), "shape")),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["packed"], perm=[1, 0, 2])]
    for i in indices:
        nodes.append(helper.make_node("Constant", [], [f"i{i}"], value=numpy_helper.from_array(np.array(i), f"i{i}")))
        nodes.append(helper.make_node("Gather", ["packed", f"i{i}"], [f"row{i}"], axis=0))
    rows = [f"row{i}" for i in indices]
    nodes.append(helper.make_node("Mul", rows[:2], ["product"]))
    nodes.append(helper.make_node("Add", ["product", rows[-1]], ["y"]))
    return Case(f"packed_rows_{len(indices)}_{opset}", nodes, {"w": rng.normal(size=(4, 6)).astype(np.float32)},
                {"x": rng.normal(size=(5, 4)).astype(np.float32)}, opset=opset,
                symbolic_batch=opset >= 13)  # before 13 a run-time broadcast sum has no form: a static batch


@pytest.mark.parametrize("indices, opset, split", [([0, 1, 2], 17, True), ([2, -2, 0], 11, True), ([0, 1], 17, False)])
def test_rows_taken_apart_by_gathers_become_one_split(indices: List[int], opset: int, split: bool) -> None:
    """Every row: one Split (its gradient a Concat, not a GatherGrad per row), in the opset's own form; some
    rows only: the Gathers stay. The gradients equal finite differences either way."""
    c = packed_rows_case(indices, opset)
    built = build_models(forward_model(c, {"y": np.ones((5, 2), np.float32)}), list(c.params), [], None)
    ops = _ops(built.training)
    assert (ops.count("Split") >= 1 and "GatherGrad" not in ops and "Gather" not in ops) == split, ops
    _no_orphan_constants(built.training)
    assert "Gather" in _ops(built.eval)  # the eval model as exported
    bad = [cmp for cmp in check(c) if not cmp.ok(c.rtol, c.atol)]
    assert not bad, bad
