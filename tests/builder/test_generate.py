"""ort_cffi's own generator end to end: ``generate_artifacts`` with no ``onnxruntime`` Python package
involved, checked against ONNX Runtime's generator where that one runs (the oracle), and by training."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _training_run import run_steps, train_artifacts

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsInputError, generate_artifacts

env = OrtEnvironment.getEnvironment()
rng = np.random.default_rng(7)


def mlp(path: Path, hidden: int = 16, classes: int = 4) -> Path:
    weights = {"fc1.weight": rng.normal(0, 0.3, (hidden, 8)), "fc1.bias": rng.normal(0, 0.1, hidden),
               "fc2.weight": rng.normal(0, 0.3, (classes, hidden)), "fc2.bias": rng.normal(0, 0.1, classes)}
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def train(folder: Path, feeds: Dict[str, np.ndarray], steps: int = 20) -> List[float]:
    with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                   str(folder / "eval_model.onnx"), str(folder / "optimizer_model.onnx")) as session:
        return run_steps(session, feeds, steps)


def test_generation_imports_no_onnxruntime_package(tmp_path: Path) -> None:
    """In a fresh interpreter, the artifacts are made and checked (a training session opens them) without any
    module of ONNX Runtime's Python package imported, and their loss falls: ort_cffi's builder needs nothing
    of that layer (on 3.13 and later it is not even installed)."""
    model = mlp(tmp_path / "mlp.onnx")
    code = f"""
import sys
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
made = generate_artifacts({str(model)!r}, ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                          artifact_directory={str(tmp_path / 'out')!r}, additional_output_names=MODEL_OUTPUTS)
print(made.versions["generator"], "onnxruntime" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ort_cffi", "False"]
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    losses = train(tmp_path / "out", feeds, steps=10)
    assert losses[-1] < losses[0]


def test_parameters_move_after_a_step(tmp_path: Path) -> None:
    """The silent failure a training model can have (no gradient accumulator): losses, and frozen weights."""
    made = generate_artifacts(mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    with env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model),
                                   str(made.optimizer_model)) as session:
        start = session.copyParametersToBuffer()
        session.trainStep(feeds).close()
        session.optimizerStep()
        after = session.copyParametersToBuffer()
    sizes = [int(np.prod(p.shape)) for p in made.trainable]
    moved = [not np.array_equal(a, b) for a, b in zip(np.split(start, np.cumsum(sizes)[:-1]),
                                                       np.split(after, np.cumsum(sizes)[:-1]))]
    assert len(moved) == 4 and all(moved), moved


def test_a_model_calling_local_functions_trains(tmp_path: Path) -> None:
    """torch's TorchScript exporter with ``export_modules_as_functions`` (and onnxscript) writes each module
    as a model-local function and calls it: the function is written into the graph before anything else,
    as ONNX Runtime does when it loads the model, so the builder sees the Gemm and Relu inside."""
    dense = helper.make_function("local", "Dense", ["x", "w", "b"], ["y"],
                                 [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
                                  helper.make_node("Relu", ["h"], ["y"])],
                                 [helper.make_opsetid("", 17)])
    weights = {"l1.w": rng.normal(0, 0.4, (16, 8)), "l1.b": rng.normal(0, 0.1, 16),
               "l2.w": rng.normal(0, 0.3, (16, 16)), "l2.b": rng.normal(0, 0.1, 16),
               "fc.w": rng.normal(0, 0.3, (4, 16)), "fc.b": rng.normal(0, 0.1, 4)}
    graph = helper.make_graph(
        [helper.make_node("Dense", ["x", "l1.w", "l1.b"], ["h1"], domain="local", name="l1"),
         helper.make_node("Dense", ["h1", "l2.w", "l2.b"], ["h2"], domain="local", name="l2"),
         helper.make_node("Gemm", ["h2", "fc.w", "fc.b"], ["logits"], transB=1)],
        "functions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, functions=[dense],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "functions.onnx")
    made = generate_artifacts(tmp_path / "functions.onnx", artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.notes == ("local function Dense written into the graph",)
    assert sorted(t.name for t in made.trainable) == sorted(weights)
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    run = train_artifacts(made, feeds, 30, learning_rate=0.02)
    assert all(run.moved), run.moved  # every tensor (a unit whose Relu never opens keeps its row)
    assert run.losses[0] == run.eval_loss and run.losses[-1] < 0.5 * run.losses[0], run.losses


def test_weights_written_as_constant_nodes_train_when_named(tmp_path: Path) -> None:
    """Some exporters write weights as Constant nodes, which no generator takes for parameters: by default
    generation says so and how to train them; named in requires_grad, they become parameters."""
    weights = {"w1": rng.normal(0, 0.4, (16, 8)), "w2": rng.normal(0, 0.3, (4, 16))}
    graph = helper.make_graph(
        [helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v.astype(np.float32), k))
         for k, v in weights.items()]
        + [helper.make_node("Gemm", ["x", "w1"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["t"]),
           helper.make_node("Gemm", ["t", "w2"], ["logits"], transB=1)],
        "constant_weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "constants.onnx")
    with pytest.raises(ArtifactsInputError, match=r"nothing to train.*Constant nodes \('w1', 'w2'\).*requires_grad"):
        generate_artifacts(tmp_path / "constants.onnx", artifact_directory=tmp_path / "refused",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    made = generate_artifacts(tmp_path / "constants.onnx", requires_grad="w*", artifact_directory=tmp_path / "out",
                              loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert sorted(t.name for t in made.trainable) == ["w1", "w2"]
    assert made.notes == ("Constant 'w1', 'w2' made parameters (requires_grad)",)
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    with env.createSession(str(tmp_path / "constants.onnx")) as original:
        with original.run({"x": feeds["x"]}) as result:
            exported = result.get(0).getValue()
    with env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model)) as session:
        with session.evalStep(feeds) as result:  # the eval model's outputs: the loss, then the logits
            assert np.array_equal(result.get(1).getValue(), exported)
    run = train_artifacts(made, feeds, 20)
    assert all(run.moved) and run.losses[0] == run.eval_loss and run.losses[-1] < run.losses[0], run


@pytest.mark.needs_onnxruntime_generator
def test_losses_are_bit_identical_to_onnx_runtime_artifacts(tmp_path: Path) -> None:
    model = mlp(tmp_path / "mlp.onnx")
    ours = generate_artifacts(model, artifact_directory=tmp_path / "ours",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    theirs = generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                                requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                                optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert ours.versions["generator"] == "ort_cffi" and theirs.versions["generator"] == "onnxruntime"
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    mine, reference = train(tmp_path / "ours", feeds), train(tmp_path / "theirs", feeds)
    assert mine == reference
    for name in ("checkpoint", "optimizer_model.onnx"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes(), name


def test_the_manifest_records_the_generator(tmp_path: Path) -> None:
    generate_artifacts(mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    manifest = json.loads((tmp_path / "out" / "artifacts.json").read_text())
    assert manifest["generator"]["generator"] == "ort_cffi" and manifest["options"]["generator"] == "ort_cffi"


def test_python_is_for_onnx_runtimes_generator_only(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsInputError, match="generator='onnxruntime'"):
        generate_artifacts(mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out", generator="ort_cffi",
                           python=sys.executable,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="none of"):
        generate_artifacts(mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out", generator="torch",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)


def external_mlp(folder: Path) -> Path:
    """The MLP with every initializer in an external-data file beside it."""
    model = onnx.load(str(mlp(folder / "inline.onnx")))
    onnx.save(model, str(folder / "mlp.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="mlp.onnx.data", size_threshold=0)
    return folder / "mlp.onnx"


def test_a_model_with_external_data_is_generated_without_loading_its_weights_into_the_graph(tmp_path: Path) -> None:
    """The weights go from the model's data file into the checkpoint; the training and eval models hold none
    (parameters are inputs), and they train."""
    path = external_mlp(tmp_path)
    made = generate_artifacts(path, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    for name in ("training_model.onnx", "eval_model.onnx"):
        written = onnx.load(str(tmp_path / "out" / name), load_external_data=False)
        assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in written.graph.initializer)
    inline = generate_artifacts(tmp_path / "inline.onnx", artifact_directory=tmp_path / "inline",
                                requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                                optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.checkpoint.read_bytes() == inline.checkpoint.read_bytes()
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    assert train(tmp_path / "out", feeds, steps=5) == train(tmp_path / "inline", feeds, steps=5)


def test_constants_with_external_data_are_written_into_the_training_and_eval_models(tmp_path: Path) -> None:
    """Initializers that do not train stay constants of the graphs: their data is read from the model's data
    file into the models written, never left pointing at a file beside the input model."""
    path = external_mlp(tmp_path)
    made = generate_artifacts(path, requires_grad="fc1.*", artifact_directory=tmp_path / "out",
                              loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    for name in ("training_model.onnx", "eval_model.onnx"):
        written = onnx.load(str(tmp_path / "out" / name))
        constants = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
        assert np.array_equal(constants["fc2.weight"], numpy_helper.to_array(
            onnx.load(str(tmp_path / "inline.onnx")).graph.initializer[2]))
    feeds = {"x": rng.normal(size=(16, 8)).astype(np.float32), "labels": rng.integers(0, 4, 16).astype(np.int64)}
    losses = train(made.folder, feeds, steps=5)
    assert losses[-1] < losses[0]
