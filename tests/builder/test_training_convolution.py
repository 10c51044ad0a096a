"""Small models of the convolution and normalisation families train through a real training session with
ort_cffi's artifacts (symbolic batch): the loss falls, every parameter moves, and where ONNX Runtime's
generator accepts the model the losses equal those of its artifacts bit for bit."""
from __future__ import annotations

import subprocess
import sys
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
          weights: Dict[str, np.ndarray]) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, [output],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def cnn(path: Path) -> Path:
    """Conv, BatchNormalization (inference form: the preparation makes its statistics follow training),
    Relu, MaxPool, Conv with a bias and stride, GlobalAveragePool, a sum to [N, C] and Gemm."""
    rng = np.random.default_rng(3)
    weights = {"conv1.weight": rng.normal(0, 0.4, (6, 3, 3, 3)), "bn.weight": rng.uniform(0.8, 1.2, 6),
               "bn.bias": rng.normal(0, 0.1, 6), "bn.running_mean": rng.normal(0, 0.1, 6),
               "bn.running_var": rng.uniform(0.8, 1.2, 6), "conv2.weight": rng.normal(0, 0.3, (8, 6, 3, 3)),
               "conv2.bias": rng.normal(0, 0.1, 8), "fc.weight": rng.normal(0, 0.3, (4, 8)),
               "fc.bias": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Conv", ["input", "conv1.weight"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "bn.weight", "bn.bias", "bn.running_mean",
                                                     "bn.running_var"], ["b1"], momentum=0.9),
             helper.make_node("Relu", ["b1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("ReduceSum", ["g", "axes"], ["flat"], keepdims=0),
             helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    path = _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]), weights)
    model = onnx.load(path)
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes"))
    onnx.save(model, path)
    return path


def normalised_mlp(path: Path) -> Path:
    """Gemm, LayerNormalization (one output, as torch exports it), Relu, Dropout in training mode, Gemm,
    LogSoftmax."""
    rng = np.random.default_rng(5)
    weights = {"fc1.weight": rng.normal(0, 0.4, (16, 8)), "fc1.bias": rng.normal(0, 0.1, 16),
               "ln.weight": rng.uniform(0.8, 1.2, 16), "ln.bias": rng.normal(0, 0.1, 16),
               "fc2.weight": rng.normal(0, 0.3, (4, 16)), "fc2.bias": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Constant", [], ["ratio"], value=numpy_helper.from_array(np.array(0.1, np.float32))),
             helper.make_node("Constant", [], ["training"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Dropout", ["r", "ratio", "training"], ["d"]),
             helper.make_node("Gemm", ["d", "fc2.weight", "fc2.bias"], ["z"], transB=1),
             helper.make_node("LogSoftmax", ["z"], ["scores"], axis=-1)]
    return _save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                 helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 4]), weights)


def train(folder: Path, batches: List[Dict[str, np.ndarray]], steps: int) -> List[float]:
    """Losses of ``steps`` AdamW steps over ``batches`` in turn; the trainable parameters must all move."""
    with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                   str(folder / "eval_model.onnx"), str(folder / "optimizer_model.onnx")) as session:
        session.setLearningRate(0.01)
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


def image_batches() -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(9)
    found = []
    for size in (6, 10):  # two batch sizes through the one session: the batch is symbolic
        labels = rng.integers(0, 4, size)
        images = rng.normal(0, 0.3, (size, 3, 8, 8)).astype(np.float32)
        for i, label in enumerate(labels):
            images[i, label % 3, 2 * (label // 3):, :4] += 1.5
        found.append({"input": images, "labels": labels.astype(np.int64)})
    return found


def test_a_cnn_trains_with_symbolic_batches(tmp_path: Path) -> None:
    made = generate_artifacts(cnn(tmp_path / "cnn.onnx"), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.versions["generator"] == "ort_cffi"
    losses = train(tmp_path / "out", image_batches(), steps=30)
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4]), losses


def test_layer_norm_dropout_and_log_softmax_train(tmp_path: Path) -> None:
    made = generate_artifacts(normalised_mlp(tmp_path / "mlp.onnx"), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.versions["generator"] == "ort_cffi"
    rng = np.random.default_rng(2)
    x = rng.normal(size=(12, 8)).astype(np.float32)
    labels = np.argmax(x[:, :4], axis=1).astype(np.int64)  # cross-entropy over log-probabilities: the same
    losses = train(tmp_path / "out", [{"x": x, "labels": labels}], steps=30)
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4]), losses


def pools(path: Path) -> Path:
    """Conv, then an AveragePool with pads and a MaxPool whose inputs have a symbolic batch: ONNX Runtime's
    AveragePoolGrad dies of SIGFPE and its MaxPoolGrad segfaults there (docs/internals/runtime.md §8)."""
    rng = np.random.default_rng(4)
    weights = {"conv.weight": rng.normal(0, 0.4, (4, 3, 3, 3)), "fc.weight": rng.normal(0, 0.3, (4, 4)),
               "fc.bias": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Conv", ["input", "conv.weight"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["c"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalMaxPool", ["m"], ["g"]),
             helper.make_node("ReduceSum", ["g", "axes"], ["flat"], keepdims=0),
             helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    path = _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])],
                 helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]), weights)
    model = onnx.load(path)
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes"))
    onnx.save(model, path)
    return path


def test_pools_under_a_symbolic_batch_train_in_a_child(tmp_path: Path) -> None:
    """The rules keep the pools off the kernels that would crash: AveragePoolGrad takes its batch from the
    graph (a symbolic one reads as 0), MaxPoolGrad from dY, its other sizes from the graph (static here). A
    child process trains at batch sizes 3 and 5 in one session (a crash would kill only the child), with the
    model as it is (no preparation)."""
    generate_artifacts(pools(tmp_path / "pools.onnx"), artifact_directory=tmp_path / "out", prepare=False,
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    training = onnx.load(tmp_path / "out" / "training_model.onnx")
    ops = {n.op_type for n in training.graph.node}
    assert "AveragePoolGrad" not in ops and "MaxPoolGrad" in ops
    code = f"""
import numpy as np
from ort_cffi import OrtEnvironment
folder = {str(tmp_path / "out")!r}
env = OrtEnvironment.getEnvironment()
with env.createTrainingSession(folder + "/checkpoint", folder + "/training_model.onnx",
                               folder + "/eval_model.onnx", folder + "/optimizer_model.onnx") as session:
    for size in (3, 5, 3):
        feeds = {{"input": np.ones((size, 3, 8, 8), np.float32), "labels": np.zeros(size, np.int64)}}
        with session.trainStep(feeds) as result:
            print(float(result.get(0).getValue()))
        session.optimizerStep()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    losses = [float(v) for v in done.stdout.split()]
    assert len(losses) == 3 and all(np.isfinite(losses)), done.stdout


@pytest.mark.needs_onnxruntime_generator
def test_cnn_losses_equal_onnx_runtime_artifacts(tmp_path: Path) -> None:
    """ConvGrad, BatchNormInternal and BatchNormalizationGrad, the scale of GlobalAveragePool as ONNX
    Runtime's builder emits them, and MaxPool's scatter through its indices (MaxPoolGrad's additions in the
    same order): 20 AdamW steps give the very same losses."""
    model = cnn(tmp_path / "cnn.onnx")
    generate_artifacts(model, artifact_directory=tmp_path / "ours",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    batches = image_batches()
    assert train(tmp_path / "ours", batches, 20) == train(tmp_path / "theirs", batches, 20)


@pytest.mark.needs_onnxruntime_generator
def test_layer_norm_and_softmax_losses_equal_onnx_runtime_artifacts(tmp_path: Path) -> None:
    """LayerNormalizationGrad (its mean and inverse std-dev declared on the node) and SoftmaxGrad_13 as
    ONNX Runtime's builder emits them: the same 20 losses."""
    rng = np.random.default_rng(5)
    weights = {"fc1.weight": rng.normal(0, 0.4, (16, 8)), "fc1.bias": rng.normal(0, 0.1, 16),
               "ln.weight": rng.uniform(0.8, 1.2, 16), "ln.bias": rng.normal(0, 0.1, 16),
               "fc2.weight": rng.normal(0, 0.3, (4, 16)), "fc2.bias": rng.normal(0, 0.1, 4)}
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("LayerNormalization", ["h", "ln.weight", "ln.bias"], ["n"]),
             helper.make_node("Softmax", ["n"], ["s"], axis=-1),
             helper.make_node("Gemm", ["s", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    model = _save(tmp_path / "ln.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                  helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]), weights)
    generate_artifacts(model, artifact_directory=tmp_path / "ours",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    x = rng.normal(size=(12, 8)).astype(np.float32)
    batches = [{"x": x, "labels": np.argmax(x[:, :4], axis=1).astype(np.int64)}]
    assert train(tmp_path / "ours", batches, 20) == train(tmp_path / "theirs", batches, 20)


@pytest.mark.parametrize("op,attributes,why", [
    ("MaxPool", {"kernel_shape": [2, 2, 2], "storage_order": 1}, "storage_order=1"),
    ("ConvTranspose", {"output_shape": [9, 9], "strides": [2, 2]}, "output_shape"),
    ("ConvTranspose", {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "auto_pad=SAME_UPPER"),
])
def test_what_a_rule_cannot_differentiate_is_refused_by_name(op: str, attributes: Dict[str, object],
                                                            why: str) -> None:
    """A configuration a rule cannot differentiate is refused before any file is written, naming the node
    and why; never a wrong gradient. (A ConvTranspose's pads from output_shape or auto_pad need the input's
    spatial sizes: here they are symbolic.)"""
    from ort_cffi.artifacts.builder.context import BuilderError
    from ort_cffi.artifacts.builder.training_model import build_models

    node = helper.make_node(op, ["x", "w"] if op == "ConvTranspose" else ["x"], ["y"], name="the_node", **attributes)
    if op == "ConvTranspose":
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])]
        weights, trained = {"w": np.ones((2, 2, 3, 3), np.float32)}, ["w"]
    else:  # the pool's input is the parameter
        inputs, weights, trained = [], {"x": np.ones((1, 2, 4, 4, 4), np.float32)}, ["x"]
    graph = helper.make_graph([node], "refused", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BuilderError, match=f"the_node.*{why}"):
        build_models(model, trained, [], "MSELoss")
