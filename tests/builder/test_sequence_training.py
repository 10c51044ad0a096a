"""An ``nn.EmbeddingBag`` classifier as torch's default exporter writes it (a Loop appending each bag's row to a
sequence, ConcatFromSequence after it) trains through ort_cffi's artifacts: on the training build and on the
engine (over 1.19.2 and over the current inference build, as tests/engine runs it), each run in a child
process (one runtime per process), the same artifacts and batches. Two models: the
exporter's own file (tests/data/embedding_bag_dynamo.onnx, made by scripts/export_embedding_bag.py, its bags'
mean with an empty bag handled by an If), and the same structure written here with onnx.helper.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from conftest import ROOT
from onnx import TensorProto, helper, numpy_helper
from test_artifact_warnings import runtime_warnings
from test_engine_training import backends

from ort_cffi.artifacts import LossType, OptimType, generate_artifacts

DATA = ROOT / "tests" / "data"
RUN = ROOT / "tests" / "support" / "_engine_run.py"
VOCABULARY, WIDTH, CLASSES = 12, 4, 3
STEPS = 6


def written_bag_model() -> onnx.ModelProto:
    """EmbeddingBag(mode="sum") + Linear in the exporter's structure: Gather the ids' rows, then a Loop without
    trip count carrying the sequence of bag rows and the bag index, each iteration slicing one bag's rows
    (between two offsets) and appending their sum; ConcatFromSequence stacks the rows."""
    rng = np.random.default_rng(7)
    body = helper.make_graph([
        helper.make_node("Reshape", ["k", "minus_one"], ["k1"]),
        helper.make_node("Add", ["k1", "one"], ["k1_next"]),
        helper.make_node("Add", ["k1", "two"], ["k1_after"]),
        helper.make_node("Slice", ["bounds", "k1", "k1_next"], ["start"]),
        helper.make_node("Slice", ["bounds", "k1_next", "k1_after"], ["end"]),
        helper.make_node("Slice", ["rows", "start", "end"], ["bag_rows"]),
        helper.make_node("ReduceSum", ["bag_rows", "axis0"], ["bag_row"], keepdims=1),
        helper.make_node("SequenceInsert", ["built", "bag_row"], ["built_next"]),
        helper.make_node("Add", ["k", "one_scalar"], ["k_next"]),
        helper.make_node("Less", ["k_next", "bags"], ["cond_out"])], "bag_body",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("built", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("k", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("built_next", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("k_next", TensorProto.INT64, [])])
    nodes = [
        helper.make_node("Gather", ["bag.weight", "ids"], ["rows"]),
        helper.make_node("Shape", ["ids"], ["count"]),
        helper.make_node("Concat", ["offsets", "count"], ["bounds"], axis=0),
        helper.make_node("Size", ["offsets"], ["bags"]),
        helper.make_node("SequenceEmpty", [], ["nothing"], dtype=TensorProto.FLOAT),
        helper.make_node("Less", ["zero", "bags"], ["any_bag"]),
        helper.make_node("Loop", ["", "any_bag", "nothing", "zero"], ["bag_sequence", "bags_done"], body=body),
        helper.make_node("ConcatFromSequence", ["bag_sequence"], ["pooled"], axis=0),
        helper.make_node("Gemm", ["pooled", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    initializers = [
        numpy_helper.from_array(rng.normal(0, 1, (VOCABULARY, WIDTH)).astype(np.float32), "bag.weight"),
        numpy_helper.from_array(rng.uniform(-0.5, 0.5, (CLASSES, WIDTH)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc.bias"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array(1, np.int64), "one_scalar"),
        numpy_helper.from_array(np.array(0, np.int64), "zero")]
    graph = helper.make_graph(nodes, "embedding_bag",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"]),
                               helper.make_tensor_value_info("offsets", TensorProto.INT64, ["B"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", CLASSES])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def exported_bag_model() -> onnx.ModelProto:
    return onnx.load(str(DATA / "embedding_bag_dynamo.onnx"))


def dataset(path: Path) -> Path:
    """One batch of 5 bags (one empty, which the exporter's model gives a row of zeros) and their labels."""
    ids = np.array([1, 2, 4, 5, 4, 3, 2, 9, 7, 11, 0, 6], np.int64)
    offsets = np.array([0, 4, 4, 7, 9], np.int64)
    labels = np.array([0, 2, 1, 1, 2], np.int64)
    np.savez(path, train_ids=ids, train_offsets=offsets, train_labels=labels)
    return path


def train(artifacts: Path, data: Path, out: Path, name: str, env: Dict[str, str]) -> Dict[str, np.ndarray]:
    """STEPS steps of the whole batch (--batch larger than any input: every input is fed whole)."""
    proc = subprocess.run([sys.executable, str(RUN), str(artifacts), str(data), str(STEPS), str(out), "--batch", "1000",
                           "--lr", "0.05"], env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return dict(np.load(out))


@pytest.mark.needs_training_build  # the losses are compared with the training build's own run
@pytest.mark.parametrize("make", [exported_bag_model, written_bag_model], ids=["exported", "written"])
def test_an_embedding_bag_trains_on_both_backends(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = make()
    ops = {node.op_type for node in model.graph.node}
    assert {"Loop", "SequenceEmpty", "ConcatFromSequence"} <= ops
    made = generate_artifacts(model, requires_grad=["bag.weight", "fc.weight", "fc.bias"], frozen_params=[],
                              loss=LossType.CrossEntropyLoss, optimizer=OptimType.AdamW,
                              artifact_directory=tmp_path / "artifacts", additional_output_names=["logits"])
    training = onnx.load(str(made.training_model))
    assert "SplitToSequence" in {n.op_type for n in training.graph.node}  # ConcatFromSequence's gradient
    data = dataset(tmp_path / "bags.npz")
    runs = {name: train(tmp_path / "artifacts", data, tmp_path / f"run{k}.npz", name, env)
            for k, (name, env) in enumerate(backends().items())}
    reference = runs["training build"]
    assert str(reference["backend"]) == "training-api"
    for name, record in runs.items():
        assert str(record["backend"]) == ("training-api" if name == "training build" else "engine"), name
        assert np.max(np.abs(record["after"] - record["before"])) > 0, f"{name}: the parameters did not move"
        assert record["losses"][-1] < record["losses"][0], f"{name}: the loss did not fall: {record['losses']}"
        assert np.allclose(record["losses"], reference["losses"], rtol=1e-5, atol=1e-6), \
            f"{name}: losses {record['losses']} against the training build's {reference['losses']}"
        assert np.allclose(record["after"], reference["after"], rtol=1e-4, atol=1e-6), name
    # and ONNX Runtime says nothing of the artifacts that it does not say of the model (tests/apps/
    # test_artifact_warnings.py: the sequence gradients leave no value unread)
    onnx.save(model, tmp_path / "model.onnx")
    found = runtime_warnings([("model", tmp_path / "model.onnx"), ("artifacts", tmp_path / "artifacts")])
    assert not found[str(tmp_path / "artifacts")] - found[str(tmp_path / "model.onnx")], found


def test_a_loop_reading_back_a_sequence_it_does_not_only_append_to_is_refused_by_name() -> None:
    """Each iteration reads the last element of the sequence it carries and erases its first: the backward
    pass would need that sequence as it was at every iteration, which no scan output can stack and which
    cannot be rebuilt from the final one (what was erased is gone; cases_sequences.py trains a body that only
    appends). Refused, saying so."""
    from ort_cffi.artifacts.builder.context import BuilderError
    from ort_cffi.artifacts.builder.training_model import build_models

    body = helper.make_graph([
        helper.make_node("SequenceAt", ["built", "last"], ["previous"]),
        helper.make_node("Mul", ["previous", "p"], ["next_row"]),
        helper.make_node("SequenceErase", ["built", "first_position"], ["built_rest"]),
        helper.make_node("SequenceInsert", ["built_rest", "next_row"], ["built_next"]),
        helper.make_node("Identity", ["cond"], ["cond_out"])], "reads_back",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("built", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("built_next", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["first"]),
             helper.make_node("Loop", ["steps", ""], ["rows"], body=body),
             helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=0),
             helper.make_node("ReduceSum", ["stacked"], ["loss"], keepdims=0)]
    nodes[1].input.append("first")
    graph = helper.make_graph(nodes, "reads_back", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              [numpy_helper.from_array(np.full((1, 3), 0.5, np.float32), "p"),
                               numpy_helper.from_array(np.array(3, np.int64), "steps"),
                               numpy_helper.from_array(np.array(-1, np.int64), "last"),
                               numpy_helper.from_array(np.array(0, np.int64), "first_position")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BuilderError, match="otherwise than by appending") as raised:
        build_models(model, ["p"], [], None)
    assert "'first'" in str(raised.value) and "SequenceAt" in str(raised.value), str(raised.value)


ON_ENGINE = """
import sys
sys.path[:0] = [sys.argv[1]]
import ort_cffi
import cases_losses, cases_sequences
from gradcheck import check
assert ort_cffi.backend() == "engine", ort_cffi.backend()
cases = [c for found in cases_sequences.CASES.values() for c in found]
cases += [c for found in cases_losses.CASES.values() for c in found if c.name in sys.argv[2:]]
bad = [f"{c.name} {x.parameter}: analytic {x.analytic:.6g}, numeric {x.numeric:.6g}"
       for c in cases for x in check(c) if not x.ok(c.rtol, c.atol)]
print(len(cases), "cases", *bad, sep="\\n")
sys.exit(1 if bad else 0)
"""


def test_the_sequence_and_loss_rules_match_finite_differences_on_the_engine() -> None:
    """test_rules.py checks every rule on the training build; the sequence family's cases (and the loss cases
    added with them) run here on the engine too, in a child process (the backend is chosen once per process)."""
    losses = ["softmax_ce_read_log_prob_only", "softmax_ce_both_read_log_prob", "softmax_ce_both_read_both",
              "softmax_ce_loss_only", "nll_after_log_softmax_mean", "nll_after_log_softmax_none"]
    proc = subprocess.run([sys.executable, "-c", ON_ENGINE, str(Path(__file__).resolve().parent), *losses],
                          env={**os.environ, "OMP_NUM_THREADS": "1", "ORT_CFFI_BACKEND": "engine",
                               "ORT_CFFI_LIBRARY": ""},
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    import cases_sequences
    assert proc.stdout.split()[0] == str(sum(len(c) for c in cases_sequences.CASES.values()) + len(losses)), proc.stdout
