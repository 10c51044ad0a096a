"""A model that computes its own loss (``loss=None``: its first output is the loss), as transformers models
given labels and torch's exports of ``nn.CrossEntropyLoss`` write it, trains whichever of the loss node's
outputs the model declares: SoftmaxCrossEntropyLoss declaring the loss alone, or its log-probabilities too
(read further on, by a second term of the loss), and LogSoftmax + NegativeLogLikelihoodLoss (one output). Each is
trained on the training build and on the engine, each run in a child process; the parameters move and the
two backends agree. The rules themselves are checked against finite differences in cases_losses.py."""
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

from ort_cffi.artifacts import OptimType, generate_artifacts

RUN = ROOT / "tests" / "support" / "_engine_run.py"
BACKENDS = {"training build": "training-api", "engine": "engine"}
FEATURES, CLASSES, BATCH = 5, 4, 6


def model_with_own_loss(form: str) -> onnx.ModelProto:
    """logits = x W + b, then the loss against ``labels`` in the given ``form``; the loss the one output."""
    rng = np.random.default_rng(17)
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["logits"])]
    if form == "softmax_ce_loss_only":
        nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], reduction="mean"))
    elif form == "softmax_ce_with_log_prob":  # the log-probabilities declared, and read by a second term
        nodes += [helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["ce", "log_prob"],
                                   reduction="mean", ignore_index=3),
                  helper.make_node("ReduceMean", ["log_prob"], ["mean_log_prob"], keepdims=0),
                  helper.make_node("Mul", ["mean_log_prob", "minus_tenth"], ["smoothing"]),
                  helper.make_node("Add", ["ce", "smoothing"], ["loss"])]
    elif form == "nll_after_log_softmax":
        nodes += [helper.make_node("LogSoftmax", ["logits"], ["log_prob"], axis=1),
                  helper.make_node("NegativeLogLikelihoodLoss", ["log_prob", "labels", "class_weight"], ["loss"],
                               reduction="mean")]
    else:
        raise ValueError(form)
    initializers = [numpy_helper.from_array(rng.normal(0, 0.5, (FEATURES, CLASSES)).astype(np.float32), "fc.weight"),
                    numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc.bias"),
                    numpy_helper.from_array(np.array(-0.1, np.float32), "minus_tenth"),
                    numpy_helper.from_array(np.array([1.0, 0.5, 2.0, 1.0], np.float32), "class_weight")]
    graph = helper.make_graph(nodes, form, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", FEATURES]),
                                            helper.make_tensor_value_info("labels", TensorProto.INT64, ["N"])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def train(artifacts: Path, data: Path, out: Path, backend: str) -> Dict[str, np.ndarray]:
    proc = subprocess.run([sys.executable, str(RUN), str(artifacts), str(data), "4", str(out), "--batch", str(BATCH),
                           "--lr", "0.05"], env={**os.environ, "OMP_NUM_THREADS": "1", "ORT_CFFI_BACKEND": backend,
                                                  "ORT_CFFI_LIBRARY": ""},
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, f"{backend}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return dict(np.load(out))


@pytest.mark.needs_training_build  # the losses are compared with the training build's own run
@pytest.mark.parametrize("form", ["softmax_ce_loss_only", "softmax_ce_with_log_prob", "nll_after_log_softmax"])
def test_a_models_own_loss_trains_whatever_outputs_it_declares(form: str, tmp_path: Path) -> None:
    model = model_with_own_loss(form)
    made = generate_artifacts(model, requires_grad=["fc.weight", "fc.bias"], frozen_params=[], loss=None,
                              optimizer=OptimType.AdamW, artifact_directory=tmp_path / "artifacts",
                              additional_output_names=[])
    assert made.eval_outputs[0] == "loss"
    rng = np.random.default_rng(3)
    data = tmp_path / "data.npz"
    np.savez(data, train_x=rng.normal(size=(BATCH, FEATURES)).astype(np.float32),
             train_labels=rng.integers(0, CLASSES, BATCH).astype(np.int64))
    runs = {name: train(tmp_path / "artifacts", data, tmp_path / f"{backend}.npz", backend)
            for name, backend in BACKENDS.items()}
    for name, backend in BACKENDS.items():
        record = runs[name]
        assert str(record["backend"]) == backend
        assert np.max(np.abs(record["after"] - record["before"])) > 0, f"{name}: the parameters did not move"
        assert record["losses"][-1] < record["losses"][0], f"{name}: the loss did not fall: {record['losses']}"
        assert np.allclose(record["losses"], runs["training build"]["losses"], rtol=1e-5, atol=1e-6), name
