"""The standard forms the builder writes where the training build's kernel is slower
(ort_cffi/artifacts/builder/standard_forms.py): the table chooses them only where every measured case ran
faster; each form matches finite differences in every builder case whose gradient graph holds the operator;
and artifacts with the forms train as those with ONNX Runtime's kernels do, within 1e-5 relative over 100
steps on the training build, on every zoo model they change."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import numpy as np
import onnx
import pytest
from conftest import ROOT
from gradcheck import Case, check, forward_model, output_shapes

from ort_cffi.artifacts.builder import standard_forms
from ort_cffi.artifacts.builder.training_model import build_models

HERE = Path(__file__).resolve().parent
CHOSEN = standard_forms.chosen_op_types()


def _microsoft_ops(model: onnx.ModelProto) -> Set[str]:
    found: Set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            if node.domain == "com.microsoft":
                found.add(node.op_type)
            for attribute in node.attribute:
                for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    walk(sub)

    walk(model.graph)
    return found


def test_the_table_chooses_the_standard_form_only_where_every_case_ran_faster() -> None:
    forms = standard_forms.table()["forms"]
    assert {"LSTMGrad", "GRUGrad", "GatherGrad", "ReluGrad", "LSTMTraining", "GRUTraining"} <= set(forms)
    for op, entry in forms.items():
        measured = entry["measured"]
        assert measured["onnxruntime"] == "1.19.2" and measured["date"] and measured["machine"], op
        ratios = [case["ratio"] for case in entry["cases"]]
        smallest = entry.get("from_size")
        if smallest is not None:  # the standard form from that size on: every case there ran faster
            assert entry["form"] == "standard" and max(ratios) > measured["margin"], op
            ratios = [case["ratio"] for case in entry["cases"] if case["size"] >= smallest]
        assert ratios and entry["worst_ratio"] == max(ratios), op
        assert (entry["form"] == "standard") == (max(ratios) <= measured["margin"]), (op, entry["form"], ratios)


def test_a_bad_table_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "standard_forms.json"
    bad.write_text(json.dumps({"forms": {"NoSuchGrad": {"form": "standard"}}}))
    monkeypatch.setattr(standard_forms, "TABLE", bad)
    standard_forms.table.cache_clear()
    try:
        with pytest.raises(standard_forms.StandardFormsTableError, match="NoSuchGrad"):
            standard_forms.chosen_op_types()
    finally:
        standard_forms.table.cache_clear()


def _builder_cases() -> List[Tuple[str, Case]]:
    """Every finite-difference case of the builder's rules whose gradient graph, in ONNX Runtime's form,
    holds an operator the table gives the standard form."""
    found = []
    for path in sorted(HERE.glob("cases_*.py")):
        for op, cases in importlib.import_module(path.stem).CASES.items():
            for c in cases:
                weights = {o: np.ones(shape, dtype) for o, (shape, dtype) in output_shapes(c).items()}
                try:
                    built = build_models(forward_model(c, weights), list(c.params), [], None, None, None)
                except Exception:  # noqa: BLE001 - a case of a refusal: its own test says so
                    continue
                if _microsoft_ops(built.training) & CHOSEN:
                    found.append((op, c))
    return found


BUILDER_CASES = _builder_cases()


def test_a_recurrent_gradient_below_the_measured_batch_keeps_its_kernel() -> None:
    entry = standard_forms.table()["forms"]["LSTMGrad"]
    smallest = entry.get("from_size") if entry.get("size_of", {}).get("axis") == 1 else None
    c = next(c for op, c in BUILDER_CASES if c.name == "lstm_forward")
    weights = {o: np.ones(shape, dtype) for o, (shape, dtype) in output_shapes(c).items()}
    built = build_models(forward_model(c, weights), list(c.params), [], None, None, None, standard_forms=True)
    batch = c.params["x"].shape[1]  # X [T, batch, input], a parameter of known shape
    kept = "LSTMGrad" in _microsoft_ops(built.training)
    assert kept == (smallest is not None and batch < smallest), (batch, smallest)


def test_the_forms_are_checked_on_the_families_they_serve() -> None:
    families = {op for op, _ in BUILDER_CASES}
    assert {"LSTM", "GRU", "Gather"} <= families, families


@pytest.fixture
def at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table with no size threshold: each form is checked at the cases' small sizes too."""
    forms = {op: {k: v for k, v in entry.items() if k != "from_size"}
             for op, entry in standard_forms.table()["forms"].items()}
    monkeypatch.setattr(standard_forms, "table", lambda: {"forms": forms})


@pytest.mark.parametrize("op,c", BUILDER_CASES, ids=[c.name for _, c in BUILDER_CASES])
def test_standard_forms_match_finite_differences(op: str, c: Case, at_every_size: None) -> None:
    weights = {o: np.ones(shape, dtype) for o, (shape, dtype) in output_shapes(c).items()}
    built = build_models(forward_model(c, weights), list(c.params), [], None, None, None, standard_forms=True)
    left = _microsoft_ops(built.training) & CHOSEN
    assert not left and built.standard_forms, f"{c.name}: {sorted(left)} left as kernels"
    comparisons = check(c, standard_forms=True)
    bad = [f"{x.parameter}: analytic {x.analytic:.6g}, numeric {x.numeric:.6g}" for x in comparisons
           if not x.ok(c.rtol, c.atol)]
    assert not bad, f"{c.name}: " + "; ".join(bad)


# --- 100 steps on the training build, the zoo's models the forms change -----------------------------------------
ZOO_DIR = ROOT / "tests" / "zoo"
ZOO = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]
# measured: the zoo models whose training graphs hold an operator the table gives the standard form
CHANGED = ["bert_tiny", "bigru_classifier", "bigru_classifier_dynamo", "bilstm_tagger", "bilstm_tagger_dynamo",
           "conv1d_regressor", "einsum_attention", "einsum_attention_dynamo", "gpt2_tiny", "lstm_text",
           "segnet", "transformer_dynamo"]
STEPS, TOLERANCE, STRICT_STEPS = 100, 1e-5, 5
TRAINING_BUILD = {"ORT_CFFI_BACKEND": "training-api", "OMP_NUM_THREADS": "1"}


def _artifacts(name: str, folder: Path, forms: bool) -> Path:
    from ort_cffi.artifacts import ALL_PARAMETERS, generate_artifacts

    model = ZOO[name]
    generate_artifacts(ZOO_DIR / model["file"], requires_grad=ALL_PARAMETERS, loss=model["loss"], optimizer="adamw",
                       loss_input_names=[model["loss_reads"]], additional_output_names=None, artifact_directory=folder,
                       standard_forms=forms)
    return folder


def _run(artifacts: Path, dataset: Path, out: Path, *extra: str) -> Dict[str, np.ndarray]:
    env = {key: value for key, value in os.environ.items() if key != "ORT_CFFI_LIBRARY"}
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "support" / "_engine_run.py"), str(artifacts),
                           str(dataset), str(STEPS), str(out), *extra], env={**env, **TRAINING_BUILD},
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = dict(np.load(out))
    assert str(record["backend"]) == "training-api"
    return record


def _relative(record: Dict[str, np.ndarray], reference: Dict[str, np.ndarray]) -> np.ndarray:
    return np.abs(record["losses"] - reference["losses"]) / np.maximum(np.abs(reference["losses"]), 1e-12)


@pytest.mark.needs_training_build
@pytest.mark.parametrize("name", CHANGED)
def test_zoo_models_train_with_the_forms_as_with_onnx_runtimes_kernels(name: str, tmp_path: Path) -> None:
    kernels = _artifacts(name, tmp_path / "kernels", False)
    forms = _artifacts(name, tmp_path / "forms", True)
    before = _microsoft_ops(onnx.load(kernels / "training_model.onnx", load_external_data=False))
    after = _microsoft_ops(onnx.load(forms / "training_model.onnx", load_external_data=False))
    # written in standard operators: every node of some chosen operator (others may stay below their size)
    assert (before & CHOSEN) - after, (name, sorted(before & CHOSEN), sorted(after & CHOSEN))
    dataset = ZOO_DIR / ZOO[name]["dataset"]["file"]
    reference = _run(kernels, dataset, tmp_path / "kernels.npz")
    record = _run(forms, dataset, tmp_path / "forms.npz")
    assert np.array_equal(record["before"], reference["before"])
    assert np.max(np.abs(record["after"] - record["before"])) > 0, "the parameters did not move"
    relative = _relative(record, reference)
    if relative.max() > TOLERANCE:
        # A chaotic model (tests/engine/test_engine_training.py): the training build's own run from one float32
        # step away leaves the tolerance too. The first steps must agree, then it must train as far.
        nudged = _relative(_run(kernels, dataset, tmp_path / "nudged.npz", "--nudge"), reference)
        assert nudged.max() > TOLERANCE, f"{name}: losses {relative.max():.3g} relative apart, not chaotic"
        assert relative[:STRICT_STEPS].max() <= TOLERANCE, relative[:STRICT_STEPS]
        tail = slice(-10, None)
        assert np.mean(record["losses"][tail]) <= 1.5 * np.mean(reference["losses"][tail]) + 1e-3
    assert np.allclose(record["eval"], reference["eval"], rtol=1e-4, atol=1e-6) or relative.max() > TOLERANCE


def test_the_command_keeps_onnx_runtimes_kernels_when_asked(tmp_path: Path) -> None:
    """``ort-cffi-artifacts --kernel-forms``: the training model ONNX Runtime's generator writes (LSTMGrad,
    GatherGrad), recorded in artifacts.json; by default the forms the table chose."""
    from ort_cffi.cli.artifacts import main as artifacts_main

    model = ZOO_DIR / ZOO["lstm_text"]["file"]
    for flags, folder in (([], "forms"), (["--kernel-forms"], "kernels")):
        assert artifacts_main([str(model), "--out", str(tmp_path / folder), "--loss-input", "logits", *flags]) == 0
    kernels = _microsoft_ops(onnx.load(tmp_path / "kernels" / "training_model.onnx", load_external_data=False))
    forms = _microsoft_ops(onnx.load(tmp_path / "forms" / "training_model.onnx", load_external_data=False))
    assert {"LSTMGrad", "GatherGrad"} <= kernels and not forms & {"LSTMGrad", "GatherGrad"}
    recorded = json.loads((tmp_path / "kernels" / "artifacts.json").read_text())["options"]
    assert recorded["standard_forms"] is False
    assert "standard_forms" not in json.loads((tmp_path / "forms" / "artifacts.json").read_text())["options"]


def test_a_node_its_rule_refuses_keeps_its_kernel() -> None:
    """GatherGrad's form adds with ScatterND (opset 16); a model at opset 12 cannot be raised there safely, so
    the node stays ONNX Runtime's kernel and is named, and a chosen node the rule can write is written."""
    from onnx import TensorProto, helper

    from ort_cffi._facade.standard_forms import lower_chosen_ops

    def model(opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(
            [helper.make_node("GatherGrad", ["shape", "indices", "dY"], ["dX"], domain="com.microsoft")], "g",
            [helper.make_tensor_value_info("indices", TensorProto.INT64, [4]),
             helper.make_tensor_value_info("dY", TensorProto.FLOAT, [4, 3])],
            [helper.make_tensor_value_info("dX", TensorProto.FLOAT, [5, 3])],
            initializer=[helper.make_tensor("shape", TensorProto.INT64, [2], [5, 3])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                       helper.make_opsetid("com.microsoft", 1)])

    kept_model, kept = lower_chosen_ops(model(12), {"GatherGrad"})
    assert kept == ["GatherGrad"] and _microsoft_ops(kept_model) == {"GatherGrad"}
    written, none_kept = lower_chosen_ops(model(17), {"GatherGrad"})
    assert none_kept == [] and not _microsoft_ops(written)
    assert any(n.op_type == "ScatterND" for n in written.graph.node)


@pytest.mark.parametrize("classes", [10, 1000])
def test_the_cross_entropy_loss_takes_its_form_by_the_size_of_its_scores(classes: int, tmp_path: Path) -> None:
    """The forward SoftmaxCrossEntropyLoss (a standard operator) and its gradient take the standard form from the
    table's size on: the scores a loss reads are not declared in the training model, so their size comes from
    shape inference; a [4, 10] classifier keeps ONNX Runtime's kernels, [4, 1000] logits get the forms."""
    from onnx import TensorProto, helper

    from ort_cffi.artifacts import ALL_PARAMETERS, generate_artifacts

    rng = np.random.default_rng(0)
    weight = helper.make_tensor("weight", TensorProto.FLOAT, [8, classes], rng.standard_normal((8, classes)).ravel())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "weight"], ["logits"])], "classifier",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, classes])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    generate_artifacts(model, requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                       loss_input_names=["logits"], artifact_directory=tmp_path)
    kinds = {n.op_type for n in onnx.load(tmp_path / "training_model.onnx").graph.node}
    forms = standard_forms.table()["forms"]
    for op, size in (("SoftmaxCrossEntropyLoss", 4 * classes), ("SoftmaxCrossEntropyLossGrad", 4 * classes)):
        entry = forms[op]
        standard = entry["form"] == "standard" and size >= int(entry.get("from_size") or 0)
        assert (op not in kinds) == standard, (op, size, sorted(kinds))
    assert classes < 100 or {"LogSoftmax", "ScatterElements"} <= kinds, sorted(kinds)


def _dropout_case(name: str) -> Case:
    import cases_normalization

    return next(c for c in cases_normalization.CASES["Dropout"] if c.name == name)


def test_a_dropout_of_ratio_0_is_the_identity_with_the_forms() -> None:
    """A training-mode Dropout of constant ratio 0 (torch's layers at dropout=0.0) returns its input and a mask
    of ones: with the forms it is an Identity (no Dropout kernel forward, no DropoutGrad backward) and its
    gradient still matches finite differences; with ONNX Runtime's kernels it stays, as its generator writes it;
    a ratio that drops something keeps the Dropout."""
    c = _dropout_case("dropout_training_keeps_all")
    weights = {o: np.ones(shape, dtype) for o, (shape, dtype) in output_shapes(c).items()}
    forward = forward_model(c, weights)
    kinds = {flag: [n.op_type for n in build_models(forward, list(c.params), [], None, None, None,
                                                    standard_forms=flag).training.graph.node]
             for flag in (False, True)}
    assert "Dropout" in kinds[False] and "DropoutGrad" in kinds[False], kinds[False]
    assert "Dropout" not in kinds[True] and "DropoutGrad" not in kinds[True] and "Identity" in kinds[True]
    comparisons = check(c, standard_forms=True)
    assert all(x.ok(c.rtol, c.atol) for x in comparisons), comparisons

    from onnx import TensorProto, helper

    from ort_cffi.artifacts.builder.fusions import drop_inert_dropouts

    for ratio, mask_read, kept in ((0.0, False, 0), (0.1, False, 1), (0.0, True, 1)):
        ratio_value = helper.make_tensor("r", TensorProto.FLOAT, [], [ratio])
        flag_value = helper.make_tensor("t", TensorProto.BOOL, [], [True])
        nodes = [helper.make_node("Constant", [], ["ratio"], value=ratio_value),
                 helper.make_node("Constant", [], ["training"], value=flag_value),
                 helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask" if mask_read else ""])]
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]
        if mask_read:
            outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [3]))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])]
        model = helper.make_model(helper.make_graph(nodes, "d", inputs, outputs))
        assert drop_inert_dropouts(model) == 1 - kept
        assert sum(n.op_type == "Dropout" for n in model.graph.node) == kept
