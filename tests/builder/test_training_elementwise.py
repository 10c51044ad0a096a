"""Small models of the elementwise, reduction, matrix and loss families train through a real training
session with ort_cffi's artifacts (symbolic batch): the loss falls and the parameters move; where ONNX
Runtime's generator accepts the model, the losses equal those of its artifacts."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

env = OrtEnvironment.getEnvironment()


def _save(path: Path, nodes: List[onnx.NodeProto], inputs: List[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
          weights: Dict[str, np.ndarray], constants: Dict[str, np.ndarray] = {}) -> Path:  # noqa: B006 (read only)
    """The model; ``constants`` as Constant nodes (float initializers would be trained)."""
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    fixed = [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k)) for k, v in constants.items()]
    graph = helper.make_graph(fixed + nodes, path.stem, inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def rms_mlp(path: Path) -> Path:
    """Gemm, an RMS norm (Pow, ReduceMean, Sqrt, Add, Div with both operands trained through), a learned
    scale, Tanh, Pow, Sigmoid, Clip, LeakyRelu, Erf, Max, Sub, Exp, Log and Gemm: operators ONNX Runtime's
    own builder also differentiates."""
    rng = np.random.default_rng(4)
    weights = {"fc1.weight": rng.normal(0, 0.4, (16, 8)), "fc1.bias": rng.normal(0, 0.1, 16),
               "norm.scale": rng.uniform(0.8, 1.2, 16), "fc2.weight": rng.normal(0, 0.3, (4, 16)),
               "fc2.bias": rng.normal(0, 0.1, 4)}
    constants = {"eps": np.array(1e-5, np.float32), "two": np.array(2.0, np.float32),
                 "low": np.array(-0.9, np.float32), "high": np.array(0.9, np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Pow", ["h", "two"], ["h2"]),
             helper.make_node("ReduceMean", ["h2"], ["ms"], axes=[-1]),
             helper.make_node("Sqrt", ["ms"], ["rms"]),
             helper.make_node("Add", ["rms", "eps"], ["rms_eps"]),  # eps after the root: no fusion to a norm
             helper.make_node("Div", ["h", "rms_eps"], ["n"]),
             helper.make_node("Mul", ["n", "norm.scale"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Sigmoid", ["s"], ["gate"]),
             helper.make_node("Mul", ["t", "gate"], ["u"]),
             helper.make_node("Clip", ["u", "low", "high"], ["c"]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.1),
             helper.make_node("Erf", ["l"], ["e"]),
             helper.make_node("Max", ["e", "u"], ["m"]),
             helper.make_node("Exp", ["m"], ["ex"]),
             helper.make_node("Log", ["ex"], ["lg"]),
             helper.make_node("Sub", ["lg", "t"], ["d"]),
             helper.make_node("Gemm", ["d", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]), weights, constants)


def einsum_attention(path: Path) -> Path:
    """Self-attention written with Einsum (projections, scores, weighted values), Softmax, a ReduceMax
    pooling over the sequence, Where, HardSwish-free activations (Softplus, Mish is opset 18), and the
    model's own loss: LogSoftmax and NegativeLogLikelihoodLoss with ignore_index (the first output)."""
    rng = np.random.default_rng(6)
    weights = {"wq": rng.normal(0, 0.4, (6, 6)), "wk": rng.normal(0, 0.4, (6, 6)), "wv": rng.normal(0, 0.4, (6, 6)),
               "wo": rng.normal(0, 0.4, (6, 3)), "bias": rng.normal(0, 0.1, 3)}
    constants = {"scale": np.array(1 / np.sqrt(6), np.float32), "zero": np.array(0.0, np.float32)}
    nodes = [helper.make_node("Einsum", ["x", "wq"], ["q"], equation="nsd,de->nse"),
             helper.make_node("Einsum", ["x", "wk"], ["k"], equation="nsd,de->nse"),
             helper.make_node("Einsum", ["x", "wv"], ["v"], equation="nsd,de->nse"),
             helper.make_node("Einsum", ["q", "k"], ["scores"], equation="nqe,nke->nqk"),
             helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
             helper.make_node("Softmax", ["scaled"], ["attention"], axis=-1),
             helper.make_node("Einsum", ["attention", "v"], ["mixed"], equation="nqk,nke->nqe"),
             helper.make_node("Softplus", ["mixed"], ["activated"]),
             helper.make_node("ReduceMax", ["activated"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("Einsum", ["pooled", "wo"], ["projected"], equation="ne,ec->nc"),
             helper.make_node("Add", ["projected", "bias"], ["logits"]),
             helper.make_node("Greater", ["logits", "zero"], ["positive"]),
             helper.make_node("Where", ["positive", "logits", "projected"], ["chosen"]),
             helper.make_node("LogSoftmax", ["chosen"], ["log_probabilities"], axis=-1),
             helper.make_node("NegativeLogLikelihoodLoss", ["log_probabilities", "labels"], ["loss"],
                              ignore_index=-1)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 6]),
                               helper.make_tensor_value_info("labels", TensorProto.INT64, ["N"])],
                 helper.make_tensor_value_info("loss", TensorProto.FLOAT, []), weights, constants)


def train(folder: Path, batches: List[Dict[str, np.ndarray]], steps: int) -> List[float]:
    """Losses of ``steps`` AdamW steps over ``batches`` in turn; the trainable parameters must all move."""
    with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                   str(folder / "eval_model.onnx"), str(folder / "optimizer_model.onnx")) as session:
        session.setLearningRate(0.02)
        start = session.copyParametersToBuffer()
        losses = []
        for step in range(steps):
            with session.trainStep(batches[step % len(batches)]) as result:
                losses.append(float(result.get(0).getValue()))
            session.optimizerStep()
            session.lazyResetGrad()
        moved = session.copyParametersToBuffer()
    assert np.count_nonzero(start != moved) > 0.9 * start.size
    return losses


def vector_batches() -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(8)
    found = []
    for size in (12, 7):  # two batch sizes through the one session: the batch is symbolic
        x = rng.normal(size=(size, 8)).astype(np.float32)
        found.append({"x": x, "labels": np.argmax(x[:, :4], axis=1).astype(np.int64)})
    return found


def test_an_rms_normalised_mlp_trains_with_symbolic_batches(tmp_path: Path) -> None:
    made = generate_artifacts(rms_mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.versions["generator"] == "ort_cffi"
    losses = train(tmp_path / "out", vector_batches(), steps=40)
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4]), losses


def test_einsum_attention_trains_on_its_own_nll_loss(tmp_path: Path) -> None:
    made = generate_artifacts(einsum_attention(tmp_path / "attention.onnx"), loss=None,
                              artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.versions["generator"] == "ort_cffi"
    rng = np.random.default_rng(1)
    batches = []
    for size in (8, 5):
        x = rng.normal(size=(size, 5, 6)).astype(np.float32)
        labels = np.argmax(x.sum(axis=1)[:, :3], axis=1).astype(np.int64)
        labels[0] = -1  # ignored
        batches.append({"x": x, "labels": labels})
    losses = train(tmp_path / "out", batches, steps=40)
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4]), losses


@pytest.mark.needs_onnxruntime_generator
def test_mlp_losses_equal_onnx_runtime_artifacts(tmp_path: Path) -> None:
    """DivGrad, TanhGrad, SigmoidGrad, LeakyReluGrad, ReduceMean's Scale and the standard-operator forms
    of Pow, Sqrt, Erf, Clip, Max, Exp and Log as ONNX Runtime's builder writes them: 20 AdamW steps give
    the very same losses."""
    model = rms_mlp(tmp_path / "mlp.onnx")
    generate_artifacts(model, artifact_directory=tmp_path / "ours",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    batches = vector_batches()
    assert train(tmp_path / "ours", batches, 20) == train(tmp_path / "theirs", batches, 20)
