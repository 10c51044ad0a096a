"""``frozen_rows``: rows of a trained parameter that training leaves as they are (an embedding's padding row,
torch's ``nn.Embedding(padding_idx=k)``, which the export does not record), while the rest of it trains.

The oracle is the same model's artifacts without the option: their gradient, less the frozen rows, is the
gradient with it, and their training moves those rows."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.api import CheckpointState, Module, Optimizer
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsInputError, generate_artifacts, read_manifest
from ort_cffi.cli.artifacts import main as artifacts_main

PADDING, ROWS, WIDTH, CLASSES = 0, 12, 4, 3


def embedding_classifier() -> onnx.ModelProto:
    """Gather(embeddings.weight, ids [N, 6]), mean over the tokens, a Linear: a bag-of-words classifier whose
    sequences are padded with token 0."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Gather", ["embeddings.weight", "ids"], ["tokens"]),
             helper.make_node("ReduceMean", ["tokens"], ["pooled"], axes=[1], keepdims=0),
             helper.make_node("Gemm", ["pooled", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "bag_of_words", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        [numpy_helper.from_array(rng.normal(0, 0.5, (ROWS, WIDTH)).astype(np.float32), "embeddings.weight"),
         numpy_helper.from_array(rng.normal(0, 0.5, (CLASSES, WIDTH)).astype(np.float32), "fc.weight"),
         numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc.bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def padded_batch(seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, ROWS, (16, 6))
    ids[:, 4:] = PADDING  # every sequence ends in padding
    ids[::3, 2] = 5  # and token 5 is common
    return ids.astype(np.int64), rng.integers(0, CLASSES, 16).astype(np.int64)


def train(folder: Path, steps: int = 8) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the table before, its first gradient, the table after ``steps`` AdamW steps on one batch)."""
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    module = Module(folder / "training_model.onnx", state)
    optimizer = Optimizer(folder / "optimizer_model.onnx", module)
    before = state.parameters["embeddings.weight"].data
    ids, labels = padded_batch()
    gradient = None
    for _ in range(steps):
        module(ids, labels)
        if gradient is None:
            gradient = state.parameters["embeddings.weight"].grad
        optimizer.step()
        module.lazy_reset_grad()
    assert gradient is not None
    return before, gradient, state.parameters["embeddings.weight"].data


def test_a_frozen_row_stays_while_the_rest_of_the_embedding_trains(tmp_path: Path) -> None:
    model = embedding_classifier()
    generate_artifacts(model, artifact_directory=tmp_path / "all",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(model, artifact_directory=tmp_path / "frozen", frozen_rows={"embeddings.weight": [PADDING]},
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert read_manifest(tmp_path / "frozen")["options"]["frozen_rows"] == {"embeddings.weight": [PADDING]}
    before, everywhere, moved = train(tmp_path / "all")
    same_start, gradient, trained = train(tmp_path / "frozen")
    assert np.array_equal(before, same_start)
    assert everywhere[PADDING].any() and not np.array_equal(moved[PADDING], before[PADDING])  # without: it trains
    expected = everywhere.copy()
    expected[PADDING] = 0
    assert np.array_equal(gradient, expected)  # the frozen row's gradient only is gone
    assert np.array_equal(trained[PADDING], before[PADDING])
    used = sorted(set(padded_batch()[0].ravel()) - {PADDING})
    assert all(not np.array_equal(trained[row], before[row]) for row in used)


def test_the_option_is_recorded_only_when_given_and_refused_where_it_cannot_hold(tmp_path: Path) -> None:
    model = embedding_classifier()
    generate_artifacts(model, artifact_directory=tmp_path / "plain", check=False,
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert "frozen_rows" not in read_manifest(tmp_path / "plain")["options"]  # artifacts made before the option compare as they did
    with pytest.raises(ArtifactsInputError, match=r"frozen_rows of 'embeddings.weight' \(shape \[12, 4\]\).*12 is not"):
        generate_artifacts(model, artifact_directory=tmp_path / "a", frozen_rows={"embeddings.weight": [1, 12]},
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="no initializer of that name"):
        generate_artifacts(model, artifact_directory=tmp_path / "b", frozen_rows={"embedding.weight": 0},
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="'embeddings.weight', which is not trained"):
        generate_artifacts(model, artifact_directory=tmp_path / "c", frozen_params=["embeddings.weight"],
                           frozen_rows={"embeddings.weight": 0},
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="ONNX Runtime's generator trains every row"):
        generate_artifacts(model, artifact_directory=tmp_path / "d", generator="onnxruntime",
                           frozen_rows={"embeddings.weight": 0},
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="row indices"):
        generate_artifacts(model, artifact_directory=tmp_path / "e", frozen_rows={"embeddings.weight": [-1]},
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(TypeError, match="frozen_rows must map"):
        generate_artifacts(model, artifact_directory=tmp_path / "f", frozen_rows=[0],
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)  # type: ignore[arg-type]


def test_the_command_takes_frozen_rows_per_parameter(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    onnx.save(embedding_classifier(), tmp_path / "model.onnx")
    assert artifacts_main([str(tmp_path / "model.onnx"), "--out", str(tmp_path / "out"),
                           "--frozen-rows", "embeddings.weight=0,3", "--frozen-rows", "embeddings.weight=7"]) == 0
    options: Dict[str, object] = json.loads((tmp_path / "out" / "artifacts.json").read_text())["options"]
    assert options["frozen_rows"] == {"embeddings.weight": [0, 3, 7]}
    with pytest.raises(SystemExit) as exited:
        artifacts_main([str(tmp_path / "model.onnx"), "--out", str(tmp_path / "bad"), "--frozen-rows", "embeddings.weight"])
    assert exited.value.code == 2 and "NAME=ROW" in capsys.readouterr().err
    assert artifacts_main([str(tmp_path / "model.onnx"), "--out", str(tmp_path / "bad"),
                           "--frozen-rows", "fc.weight=5"]) == 2
    assert "--frozen-rows of 'fc.weight'" in capsys.readouterr().err
