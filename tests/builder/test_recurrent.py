"""Recurrent models through ort_cffi's builder: what ONNX Runtime's kernels cannot do is refused by name, a
forward LSTM trains bit for bit as ONNX Runtime's artifacts do, and a bidirectional-LSTM tagger and
bidirectional-GRU and -RNN classifiers, written as torch's TorchScript exporter writes them, train."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import onnx
import pytest
from cases_recurrent import recurrent
from gradcheck import forward_model
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment, SessionOptions
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsError, generate_artifacts
from ort_cffi.artifacts.builder.context import BuilderError
from ort_cffi.artifacts.builder.standard_forms import chosen_op_types
from ort_cffi.artifacts.builder.training_model import build_models

ZOO = Path(__file__).resolve().parents[1] / "zoo"
env = OrtEnvironment.getEnvironment()
rng = np.random.default_rng(5)


def _build(case: Any) -> None:
    weights = {o: np.ones(1, np.float32) for o in case.outputs}
    build_models(forward_model(case, weights), list(case.params), [], None)


@pytest.mark.parametrize("op,attributes,extra,match", [
    ("LSTM", {}, {"lens": True}, "final cell state"),
    ("LSTM", {}, {"peephole": True}, "peephole weights"),
    ("LSTM", {"clip": 1.0}, {}, "has no clip"),
    ("GRU", {"clip": 1.0}, {}, "has no clip"),
    ("LSTM", {"input_forget": 1}, {}, "input_forget"),
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}, {}, "activations"),
    ("GRU", {"activations": ["Sigmoid", "Tanh", "Sigmoid", "Relu"], "direction": "bidirectional"}, {}, "activations"),
    ("RNN", {"activations": ["Softsign"]}, {}, "Tanh, Sigmoid and Relu, not Softsign"),
    ("RNN", {"layout": 1}, {}, "layout=1"),
    ("LSTM", {"layout": 1}, {}, "layout=1"),
])
def test_what_the_kernels_cannot_do_is_refused_by_name(op: str, attributes: Dict[str, Any], extra: Dict[str, Any],
                                                       match: str) -> None:
    direction = attributes.pop("direction", "forward")
    case = recurrent(f"refused_{op}", op, direction, **extra, **attributes)
    case.nodes[-1].name = "the_recurrence"
    with pytest.raises(BuilderError, match=match) as caught:
        _build(case)
    assert "the_recurrence" in str(caught.value)


# --- models as torch's exporter writes them ------------------------------------------------------------------
def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _zero_states(prefix: str, directions: int, hidden: int, source: str) -> List[onnx.NodeProto]:
    """torch's initial states: zeros of [directions, batch, hidden], the batch read from ``source`` (batch
    first)."""
    return [
        helper.make_node("Shape", [source], [f"{prefix}/shape"]),
        _const(f"{prefix}/first", np.array(0, np.int64)),
        helper.make_node("Gather", [f"{prefix}/shape", f"{prefix}/first"], [f"{prefix}/batch"], axis=0),
        _const(f"{prefix}/axes", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", [f"{prefix}/batch", f"{prefix}/axes"], [f"{prefix}/batch1"]),
        _const(f"{prefix}/directions", np.array([directions], np.int64)),
        _const(f"{prefix}/hidden", np.array([hidden], np.int64)),
        helper.make_node("Concat", [f"{prefix}/directions", f"{prefix}/batch1", f"{prefix}/hidden"],
                         [f"{prefix}/state_shape"], axis=0),
        helper.make_node("ConstantOfShape", [f"{prefix}/state_shape"], [f"{prefix}/zeros"]),
    ]


def _recurrent_weights(op: str, directions: int, hidden: int, inputs: int, name: str) -> List[onnx.TensorProto]:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    scale = 1 / np.sqrt(hidden)
    shapes = [(directions, gates * hidden, inputs), (directions, gates * hidden, hidden),
              (directions, 2 * gates * hidden)]
    return [numpy_helper.from_array(rng.uniform(-scale, scale, s).astype(np.float32), f"onnx::{op}_{name}_{i}")
            for i, s in enumerate(shapes)]


def _model(nodes: List[onnx.NodeProto], initializers: List[onnx.TensorProto], steps: int,
           output: onnx.ValueInfoProto) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "recurrent", [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                                                                 ["N", steps])],
                              [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def bilstm_tagger(vocab: int = 20, dim: int = 8, hidden: int = 8, tags: int = 5, steps: int = 6) -> onnx.ModelProto:
    """Embedding -> bidirectional LSTM (batch_first) -> a tag per token: torch's export of it."""
    weights = _recurrent_weights("LSTM", 2, hidden, dim, "lstm")
    nodes = [helper.make_node("Gather", ["embedding.weight", "tokens"], ["embedded"]),
             helper.make_node("Transpose", ["embedded"], ["time_first"], perm=[1, 0, 2])]
    nodes += _zero_states("/lstm", 2, hidden, "embedded")
    nodes += [helper.make_node("LSTM", ["time_first"] + [w.name for w in weights] + ["", "/lstm/zeros", "/lstm/zeros"],
                               ["lstm_y", "lstm_h", "lstm_c"], hidden_size=hidden, direction="bidirectional"),
              helper.make_node("Transpose", ["lstm_y"], ["batch_first"], perm=[2, 0, 1, 3]),
              _const("/merge", np.array([0, 0, -1], np.int64)),
              helper.make_node("Reshape", ["batch_first", "/merge"], ["features"]),
              helper.make_node("MatMul", ["features", "fc.weight"], ["scores"]),
              helper.make_node("Add", ["scores", "fc.bias"], ["tag_scores"]),
              helper.make_node("Transpose", ["tag_scores"], ["logits"], perm=[0, 2, 1])]
    initializers = weights + [
        numpy_helper.from_array(rng.normal(0, 0.5, (vocab, dim)).astype(np.float32), "embedding.weight"),
        numpy_helper.from_array(rng.normal(0, 0.3, (2 * hidden, tags)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(np.zeros(tags, np.float32), "fc.bias")]
    return _model(nodes, initializers, steps, helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                                            ["N", tags, steps]))


def bigru_classifier(vocab: int = 20, dim: int = 8, hidden: int = 8, classes: int = 3,
                     steps: int = 6, op: str = "GRU") -> onnx.ModelProto:
    """Embedding -> bidirectional GRU (torch writes linear_before_reset=1) or RNN -> both final states -> a
    class."""
    weights = _recurrent_weights(op, 2, hidden, dim, "gru")
    nodes = [helper.make_node("Gather", ["embedding.weight", "tokens"], ["embedded"]),
             helper.make_node("Transpose", ["embedded"], ["time_first"], perm=[1, 0, 2])]
    nodes += _zero_states("/gru", 2, hidden, "embedded")
    nodes += [helper.make_node(op, ["time_first"] + [w.name for w in weights] + ["", "/gru/zeros"],
                               ["gru_y", "gru_h"], hidden_size=hidden, direction="bidirectional",
                               **({"linear_before_reset": 1} if op == "GRU" else {})),
              helper.make_node("Transpose", ["gru_h"], ["finals"], perm=[1, 0, 2]),
              _const("/flatten", np.array([0, -1], np.int64)),
              helper.make_node("Reshape", ["finals", "/flatten"], ["features"]),
              helper.make_node("Gemm", ["features", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    initializers = weights + [
        numpy_helper.from_array(rng.normal(0, 0.5, (vocab, dim)).astype(np.float32), "embedding.weight"),
        numpy_helper.from_array(rng.normal(0, 0.3, (classes, 2 * hidden)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc.bias")]
    return _model(nodes, initializers, steps, helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                                            ["N", classes]))


def _train(folder: Path, batches: List[Dict[str, np.ndarray]], steps: int,
           one_thread: bool = False) -> Tuple[List[float], np.ndarray, np.ndarray]:
    """Losses of ``steps`` train steps and the parameters before and after. ``one_thread``: ONNX Runtime's
    intra-op threads sum in a varying order (two runs of its own artifacts differ in the last bit), one
    thread does not."""
    with SessionOptions() as options:
        if one_thread:
            options.setIntraOpNumThreads(1)
        return _steps(folder, batches, steps, options)


def _steps(folder: Path, batches: List[Dict[str, np.ndarray]], steps: int,
           options: SessionOptions) -> Tuple[List[float], np.ndarray, np.ndarray]:
    with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                   str(folder / "eval_model.onnx"), str(folder / "optimizer_model.onnx"),
                                   options) as session:
        start = session.copyParametersToBuffer()
        losses = []
        for step in range(steps):
            with session.trainStep(batches[step % len(batches)]) as result:
                losses.append(float(result.get(0).getValue()))
            session.optimizerStep()
            session.lazyResetGrad()
        return losses, start, session.copyParametersToBuffer()


def _op_types(path: Path) -> List[Tuple[str, str]]:
    return [(n.op_type, n.domain) for n in onnx.load(path).graph.node]


def birnn_classifier() -> onnx.ModelProto:
    return bigru_classifier(op="RNN")


@pytest.mark.parametrize("make,op,labels_shape", [(bilstm_tagger, "LSTM", (6,)), (bigru_classifier, "GRU", ()),
                                                  (birnn_classifier, "RNN", ())])
def test_bidirectional_models_train(tmp_path: Path, make: Any, op: str, labels_shape: Tuple[int, ...]) -> None:
    """Batches of two sizes in one session (the batch is symbolic); the loss falls, every parameter moves, and
    the eval model keeps the original bidirectional node."""
    model = make()
    onnx.save(model, tmp_path / "model.onnx")
    made = generate_artifacts(tmp_path / "model.onnx", artifact_directory=tmp_path / "out",
                              loss="CrossEntropyLoss",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    batches = []
    for size in (8, 5):
        tokens = rng.integers(0, 20, (size, 6)).astype(np.int64)
        labels = (tokens % classes) if labels_shape else (tokens[:, 0] % classes)  # learnable from the tokens
        batches.append({"tokens": tokens, "labels": labels.astype(np.int64)})
    losses, start, after = _train(tmp_path / "out", batches, steps=40)
    assert losses[-2] < 0.97 * losses[0] and losses[-1] < 0.97 * losses[1], losses  # each batch's loss
    sizes = [int(np.prod(p.shape)) for p in made.trainable]
    cut = np.cumsum(sizes)[:-1]
    assert all(not np.array_equal(a, b) for a, b in zip(np.split(start, cut), np.split(after, cut)))
    eval_nodes = [n for n in onnx.load(made.eval_model).graph.node if n.op_type == op]
    assert len(eval_nodes) == 1 and helper.get_attribute_value(
        next(a for a in eval_nodes[0].attribute if a.name == "direction")) == b"bidirectional"
    # RNN's backward is a Scan; LSTM's and GRU's too where the standard form is chosen (a symbolic batch here)
    lowered = op == "RNN" or f"{op}Grad" in chosen_op_types()
    backward = ("Scan", "") if lowered else (f"{op}Grad", "com.microsoft")
    assert backward in _op_types(made.training_model)


@pytest.mark.needs_onnxruntime_generator
def test_onnx_runtimes_generator_still_refuses_a_bidirectional_gru(tmp_path: Path) -> None:
    onnx.save(bigru_classifier(), tmp_path / "model.onnx")
    with pytest.raises(ArtifactsError, match="forward direction only"):
        generate_artifacts(tmp_path / "model.onnx", artifact_directory=tmp_path / "out", loss="CrossEntropyLoss",
                           generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)


@pytest.mark.needs_onnxruntime_generator
def test_a_forward_lstm_trains_bit_identically_to_onnx_runtimes_artifacts(tmp_path: Path) -> None:
    """tests/zoo/lstm_text.onnx (torch's export: Gather, Transpose, LSTM, Squeeze, Gather, Gemm), 20 AdamW
    steps: the same losses, to the bit, and the same parameters after."""
    model = ZOO / "lstm_text.onnx"
    ours = generate_artifacts(model, artifact_directory=tmp_path / "ours", loss="CrossEntropyLoss",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                              standard_forms=False)  # ONNX Runtime's kernels: bit for bit
    theirs = generate_artifacts(model, artifact_directory=tmp_path / "theirs", loss="CrossEntropyLoss",
                                generator="onnxruntime",
                                requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert ours.versions["generator"] == "ort_cffi" and theirs.versions["generator"] == "onnxruntime"
    assert ("LSTMGrad", "com.microsoft") in _op_types(ours.training_model)
    batches = [{"tokens": rng.integers(0, 64, (16, 20)).astype(np.int64),
                "labels": rng.integers(0, 4, 16).astype(np.int64)} for _ in range(4)]
    mine, _, mine_after = _train(tmp_path / "ours", batches, steps=20, one_thread=True)
    reference, _, reference_after = _train(tmp_path / "theirs", batches, steps=20, one_thread=True)
    assert mine == reference
    assert np.array_equal(mine_after, reference_after)
