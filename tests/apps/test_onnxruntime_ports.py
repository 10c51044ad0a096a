"""Microsoft's on-device training examples (``onnxruntime-training-examples``, ``on_device_training/``) and
ONNX Runtime's documented custom loss, ported to ort_cffi with only the imports changed, on small models
built with ``onnx.helper`` and synthetic data.

Each example is one piece of code, run twice in a child process: once after ONNX Runtime's imports (its
Python layer, ``onnxruntime.training``), once after ort_cffi's (``ort_cffi.training``, ``ort_cffi.api``).
What each prints is compared: the losses of every step and of the eval step, and the inference model's
predictions. ort_cffi's run is also checked on its own (parameters change, losses fall), also where
ONNX Runtime's layer cannot run.

The examples: the desktop MNIST notebook (``desktop/python/mnist.ipynb``, both its methods: generate_artifacts,
and a TrainingBlock with the optimizer block and save_checkpoint), the Android ``prepare_for_training`` flow
(frozen parameters that include an int64 initializer and a buffer that is no initializer, the loss alone as
output), the iOS ``artifacts_gen.py`` custom ``CustomCELoss(onnxblock.Block)``, ONNX Runtime's docs'
``WeightedAverageLoss``, and a model that computes its own loss as a transformers model given labels writes it
(SoftmaxCrossEntropyLoss declaring the loss alone), generated with ONNX Runtime's default ``loss=None``.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import onnx
import pytest
from conftest import ROOT, run_child
from onnx import TensorProto, helper, numpy_helper

FEATURES, HIDDEN, CLASSES = 20, 16, 5

# The imports, and only they, differ. ONNX Runtime's: its training layer, with the package inits that import
# torch bypassed as ort_cffi's generator child does (ort_cffi/artifacts/_child.py, loaded by file location).
HEADERS = {
    "onnxruntime": f"""
import importlib.util
_spec = importlib.util.spec_from_file_location("_ort_child", {str(ROOT / "ort_cffi" / "artifacts" / "_child.py")!r})
_child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_child)
onnx, onnxruntime, artifacts = _child.import_generator()
from onnxruntime.training import onnxblock
from onnxruntime.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from onnxruntime import InferenceSession
from onnxruntime.capi import _pybind_state as C
""",
    "ort_cffi": """
import onnx
from ort_cffi.training import artifacts, onnxblock
from ort_cffi.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer
from ort_cffi.api import InferenceSession
import ort_cffi.api as C
""",
}

COMMON = """
import json, os
import numpy as np
rng = np.random.default_rng(7)
train_x = rng.standard_normal((6, 8, {features})).astype(np.float32)
train_y = rng.integers(0, {classes}, (6, 8)).astype(np.int64)
""".format(features=FEATURES, classes=CLASSES)


def _linear(rng: np.random.Generator, name: str, fan_in: int, fan_out: int) -> List[onnx.TensorProto]:
    bound = 1 / np.sqrt(fan_in)
    return [numpy_helper.from_array(rng.uniform(-bound, bound, shape).astype(np.float32), f"{name}.{part}")
            for part, shape in (("weight", (fan_out, fan_in)), ("bias", (fan_out,)))]


def _save(path: Path, nodes: List[onnx.NodeProto], inputs: List[onnx.ValueInfoProto],
          outputs: List[onnx.ValueInfoProto], initializers: List[onnx.TensorProto]) -> str:
    model = helper.make_model(helper.make_graph(nodes, "main_graph", inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return str(path)


def mlp(path: Path, second_output: bool = False) -> str:
    """torch's Linear-ReLU-Linear as its exporter writes it; ``second_output``: the hidden activations too
    (a model with two outputs, as the iOS example's)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["fc1_out"], transB=1),
             helper.make_node("Relu", ["fc1_out"], ["hidden"]),
             helper.make_node("Gemm", ["hidden", "fc2.weight", "fc2.bias"], ["output"], transB=1)]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", CLASSES])]
    if second_output:
        outputs.append(helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", HIDDEN]))
    return _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES])],
                 outputs, _linear(rng, "fc1", FEATURES, HIDDEN) + _linear(rng, "fc2", HIDDEN, CLASSES))


def mlp_with_exporter_constants(path: Path) -> str:
    """The MLP with what torch's default exporter adds: an int64 initializer (``val_475``, a Reshape's shape)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["fc1_out"], transB=1),
             helper.make_node("Relu", ["fc1_out"], ["relu_out"]),
             helper.make_node("Reshape", ["relu_out", "val_475"], ["hidden"]),
             helper.make_node("Gemm", ["hidden", "fc2.weight", "fc2.bias"], ["output"], transB=1)]
    shape = numpy_helper.from_array(np.array([-1, HIDDEN], dtype=np.int64), "val_475")
    return _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES])],
                 [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", CLASSES])],
                 _linear(rng, "fc1", FEATURES, HIDDEN) + _linear(rng, "fc2", HIDDEN, CLASSES) + [shape])


def two_heads(path: Path) -> str:
    """Two regression heads on one hidden layer, for a loss that weighs two MSEs."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["fc1_out"], transB=1),
             helper.make_node("Relu", ["fc1_out"], ["hidden"]),
             helper.make_node("Gemm", ["hidden", "head1.weight", "head1.bias"], ["output1"], transB=1),
             helper.make_node("Gemm", ["hidden", "head2.weight", "head2.bias"], ["output2"], transB=1)]
    return _save(path, nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES])],
                 [helper.make_tensor_value_info("output1", TensorProto.FLOAT, ["batch", 3]),
                  helper.make_tensor_value_info("output2", TensorProto.FLOAT, ["batch", 2])],
                 _linear(rng, "fc1", FEATURES, HIDDEN) + _linear(rng, "head1", HIDDEN, 3) + _linear(rng, "head2", HIDDEN, 2))


def own_loss(path: Path, runtime: str = "ort_cffi") -> str:
    """A classifier that computes its own loss from ``labels``, as a transformers model given labels is
    exported: outputs (loss, logits), its SoftmaxCrossEntropyLoss declaring the loss alone. ONNX Runtime
    1.19.2's gradient builder asserts on that (``GradientBuilderBase::O ... i < node_->OutputDefs().size()``):
    for its run the node declares the log-probabilities too, the same computation."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Gemm", ["input_ids", "encoder.weight", "encoder.bias"], ["encoded"], transB=1),
             helper.make_node("Tanh", ["encoded"], ["activated"]),
             helper.make_node("Gemm", ["activated", "classifier.weight", "classifier.bias"], ["logits"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"],
                              ["loss"] + (["log_prob"] if runtime == "onnxruntime" else []), reduction="mean")]
    return _save(path, nodes, [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, ["batch", FEATURES]),
                               helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch"])],
                 [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                  helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
                 _linear(rng, "encoder", FEATURES, HIDDEN) + _linear(rng, "classifier", HIDDEN, CLASSES))


# --- the examples, as their authors wrote them (model and folder names aside) ---------------------------

DESKTOP_METHOD_1 = """
onnx_model = onnx.load(MODEL)
requires_grad = [param.name for param in onnx_model.graph.initializer]
frozen_params = []
artifacts.generate_artifacts(
    onnx_model,
    optimizer=artifacts.OptimType.AdamW,
    loss=artifacts.LossType.CrossEntropyLoss,
    requires_grad=requires_grad,
    frozen_params=frozen_params,
    artifact_directory=OUT,
    additional_output_names=["output"])

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = state.parameters["fc1.weight"].data.copy()
losses = []
model.train()
for data, target in zip(train_x, train_y):
    train_loss, _ = model(data, target)
    optimizer.step()
    model.lazy_reset_grad()
    losses.append(float(train_loss))
model.eval()
test_loss, logits = model(train_x[0], train_y[0])
changed = not np.array_equal(before, state.parameters["fc1.weight"].data)

model.export_model_for_inferencing(os.path.join(OUT, "inference_artifacts.onnx"), ["output"])
session = InferenceSession(os.path.join(OUT, "inference_artifacts.onnx"), providers=["CPUExecutionProvider"])
input_name = session.get_inputs()[0].name
output_names = [output.name for output in session.get_outputs()]
predictions = session.run(output_names, {input_name: train_x[1]})[0]
result = {"losses": losses + [float(test_loss)], "changed": changed, "predictions": predictions.tolist(),
          "signature": [input_name, session.get_inputs()[0].type, session.get_inputs()[0].shape, output_names]}
"""

DESKTOP_METHOD_2 = """
onnx_model = onnx.load(MODEL)

class MNISTTrainingBlock(onnxblock.TrainingBlock):
    def __init__(self):
        super(MNISTTrainingBlock, self).__init__()
        self.loss = onnxblock.loss.CrossEntropyLoss()

    def build(self, output_name):
        return self.loss(output_name), output_name

training_block = MNISTTrainingBlock()
for param in onnx_model.graph.initializer:
    training_block.requires_grad(param.name, True)

with onnxblock.base(onnx_model):
    _ = training_block(*[output.name for output in onnx_model.graph.output])
    training_model, eval_model = training_block.to_model_proto()
    model_params = training_block.parameters()

optimizer_block = onnxblock.optim.AdamW()
with onnxblock.empty_base() as accessor:
    _ = optimizer_block(model_params)
    optimizer_model = optimizer_block.to_model_proto()

onnxblock.save_checkpoint(training_block.parameters(), os.path.join(OUT, "checkpoint"))
onnx.save(training_model, os.path.join(OUT, "training_model.onnx"))
onnx.save(optimizer_model, os.path.join(OUT, "optimizer_model.onnx"))
onnx.save(eval_model, os.path.join(OUT, "eval_model.onnx"))

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = state.parameters["fc2.weight"].data.copy()
losses = []
for data, target in zip(train_x, train_y):
    train_loss, _ = model(data, target)
    optimizer.step()
    model.lazy_reset_grad()
    losses.append(float(train_loss))
model.eval()
test_loss, _ = model(train_x[0], train_y[0])
result = {"losses": losses + [float(test_loss)],
          "changed": not np.array_equal(before, state.parameters["fc2.weight"].data),
          "parameters": sorted(p.name for p in model_params[0]), "frozen": sorted(p.name for p in model_params[1])}
"""

ANDROID = """
onnx_model = onnx.load(MODEL)
requires_grad = ["fc2.weight", "fc2.bias"]
frozen_params = [param.name for param in onnx_model.graph.initializer if param.name not in requires_grad]
frozen_params.append("model.embeddings.position_ids")  # a buffer the exporter computes: no initializer
artifacts.generate_artifacts(
    onnx_model,
    requires_grad=requires_grad,
    frozen_params=frozen_params,
    loss=artifacts.LossType.CrossEntropyLoss,
    optimizer=artifacts.OptimType.AdamW,
    artifact_directory=OUT)

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = [state.parameters[name].data.copy() for name in ("fc1.weight", "fc2.weight")]
losses = []
model.train()
for epoch in range(2):
    loss = 0
    for batch, labels in zip(train_x, train_y):
        loss += model(batch, labels)
        optimizer.step()
        model.lazy_reset_grad()
    losses.append(float(loss) / len(train_x))
after = [state.parameters[name].data for name in ("fc1.weight", "fc2.weight")]

model.export_model_for_inferencing(os.path.join(OUT, "inference.onnx"), ["output"])
session = InferenceSession(os.path.join(OUT, "inference.onnx"), providers=C.get_available_providers())
logits = session.run(["output"], {"input": np.stack([train_x[0][0]])})
result = {"losses": losses, "changed": not np.array_equal(before[1], after[1]),
          "frozen_unchanged": bool(np.array_equal(before[0], after[0])), "predictions": logits[0].tolist(),
          "outputs": model.output_names(), "trainable": sorted(n for n, p in state.parameters if p.requires_grad)}
"""

IOS = """
onnx_model = onnx.load(MODEL)

class CustomCELoss(onnxblock.Block):
    def __init__(self):
        super().__init__()
        self.celoss = onnxblock.loss.CrossEntropyLoss()

    def build(self, logits, *args):
        return self.celoss(logits)

requires_grad = ["fc2.weight", "fc2.bias"]
frozen_params = [param.name for param in onnx_model.graph.initializer if param.name not in requires_grad]
artifacts.generate_artifacts(
    onnx_model,
    requires_grad=requires_grad,
    frozen_params=frozen_params,
    loss=CustomCELoss(),
    optimizer=artifacts.OptimType.AdamW,
    artifact_directory=OUT)

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = state.parameters["fc2.weight"].data.copy()
losses = []
for data, target in zip(train_x, train_y):
    losses.append(float(model(data, target)))
    optimizer.step()
    model.lazy_reset_grad()
result = {"losses": losses, "changed": not np.array_equal(before, state.parameters["fc2.weight"].data),
          "inputs": model.input_names()}
"""

WEIGHTED_AVERAGE = """
onnx_model = onnx.load(MODEL)

class WeightedAverageLoss(onnxblock.Block):
    def __init__(self):
        self._loss1 = onnxblock.loss.MSELoss()
        self._loss2 = onnxblock.loss.MSELoss()
        self._w1 = onnxblock.blocks.Constant(0.4)
        self._w2 = onnxblock.blocks.Constant(0.6)
        self._add = onnxblock.blocks.Add()
        self._mul = onnxblock.blocks.Mul()

    def build(self, loss_input_name1, loss_input_name2):
        return self._add(
            self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
            self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2")),
        )

artifacts.generate_artifacts(
    onnx_model,
    requires_grad=[param.name for param in onnx_model.graph.initializer],
    loss=WeightedAverageLoss(),
    optimizer=artifacts.OptimType.SGD,
    artifact_directory=OUT)

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
optimizer.set_learning_rate(0.05)
target1 = rng.standard_normal((6, 8, 3)).astype(np.float32)
target2 = rng.standard_normal((6, 8, 2)).astype(np.float32)
before = state.parameters["head2.weight"].data.copy()
losses = []
for data, first, second in zip(train_x, target1, target2):
    losses.append(float(np.asarray(model(data, first, second)).reshape(-1)[0]))
    optimizer.step()
    model.lazy_reset_grad()
result = {"losses": losses, "changed": not np.array_equal(before, state.parameters["head2.weight"].data),
          "inputs": model.input_names()}
"""

OWN_LOSS = """
onnx_model = onnx.load(MODEL)
requires_grad = ["classifier.weight", "classifier.bias"]
frozen_params = ["encoder.weight", "encoder.bias", "model.mobilebert.embeddings.position_ids"]
artifacts.generate_artifacts(
    onnx_model,
    requires_grad=requires_grad,
    frozen_params=frozen_params,
    optimizer=artifacts.OptimType.AdamW,
    artifact_directory=OUT)

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = state.parameters["classifier.weight"].data.copy()
losses = []
for data, target in zip(train_x, train_y):
    loss, logits = model(data, target)
    optimizer.step()
    model.lazy_reset_grad()
    losses.append(float(loss))
result = {"losses": losses, "changed": not np.array_equal(before, state.parameters["classifier.weight"].data),
          "outputs": model.output_names(), "logits": list(logits.shape)}
"""

# ONNX Runtime's docs and the desktop notebook's training loop with a linear schedule: what a port sees is the
# rate ONNX Runtime's layer gives, step for step (its layer hands warmup and total to the native scheduler in
# the other order, and ported code is tuned to that).
SCHEDULE = """
onnx_model = onnx.load(MODEL)
artifacts.generate_artifacts(
    onnx_model,
    requires_grad=[param.name for param in onnx_model.graph.initializer],
    loss=artifacts.LossType.CrossEntropyLoss,
    optimizer=artifacts.OptimType.AdamW,
    artifact_directory=OUT)

state = CheckpointState.load_checkpoint(os.path.join(OUT, "checkpoint"))
model = Module(os.path.join(OUT, "training_model.onnx"), state, os.path.join(OUT, "eval_model.onnx"))
optimizer = Optimizer(os.path.join(OUT, "optimizer_model.onnx"), model)
before = state.parameters["fc1.weight"].data.copy()
rates, losses = {}, []
for warmup, total in ((2, 4), (1, 2), (0, 3), (3, 3), (4, 2)):
    scheduler = LinearLRScheduler(optimizer, warmup, total, 0.1)
    seen = [optimizer.get_learning_rate()]
    for data, target in zip(train_x, train_y):
        losses.append(float(model(data, target)))
        optimizer.step()
        scheduler.step()
        model.lazy_reset_grad()
        seen.append(optimizer.get_learning_rate())
    rates[f"{warmup}/{total}"] = seen
result = {"losses": losses, "rates": rates,
          "changed": not np.array_equal(before, state.parameters["fc1.weight"].data)}
"""

# name -> (the model it runs on, written for a runtime, and the example's code)
EXAMPLES: Dict[str, Tuple[Callable[[Path, str], str], str]] = {
    "desktop method 1": (lambda path, _: mlp(path), DESKTOP_METHOD_1),
    "desktop method 2": (lambda path, _: mlp(path), DESKTOP_METHOD_2),
    "android": (lambda path, _: mlp_with_exporter_constants(path), ANDROID),
    "ios custom CELoss": (lambda path, _: mlp(path, second_output=True), IOS),
    "weighted average loss": (lambda path, _: two_heads(path), WEIGHTED_AVERAGE),
    "model's own loss": (own_loss, OWN_LOSS),
    "linear schedule": (lambda path, _: mlp(path), SCHEDULE),
}


def run_example(name: str, runtime: str, folder: Path) -> Dict[str, Any]:
    """The example ``name`` after ``runtime``'s imports, in a child process; what it printed."""
    make_model, body = EXAMPLES[name]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out").mkdir(exist_ok=True)
    model = make_model(folder / "model.onnx", runtime)
    code = "\n".join([HEADERS[runtime], COMMON, f"MODEL = {model!r}\nOUT = {str(folder / 'out')!r}\n", body,
                      "print('RESULT ' + json.dumps(result))"])
    (folder / "example.py").write_text(code)
    proc = run_child(code, timeout=300)
    line = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


_RUNS: Dict[Tuple[str, str], Dict[str, Any]] = {}


def ported(name: str, runtime: str, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    if (name, runtime) not in _RUNS:
        _RUNS[name, runtime] = run_example(name, runtime, tmp_path_factory.mktemp(runtime))
    return _RUNS[name, runtime]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_ported_example_trains(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    result = ported(name, "ort_cffi", tmp_path_factory)
    assert result["changed"], "no trained parameter moved"
    losses = result["losses"]
    assert all(np.isfinite(losses)) and len(losses) >= 2


@pytest.mark.needs_onnxruntime_python
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_ported_example_gives_onnx_runtimes_results(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    ours = ported(name, "ort_cffi", tmp_path_factory)
    theirs = ported(name, "onnxruntime", tmp_path_factory)
    assert set(ours) == set(theirs)
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-5, atol=1e-6)
    for key in set(ours) - {"losses"}:
        if key == "predictions":
            np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-5, atol=1e-6)
        else:
            assert ours[key] == theirs[key], key


def test_the_examples_see_onnx_runtimes_defaults(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the ports rely on: the loss alone by default (Android's ``loss += model(...)``), a model's own loss
    kept with the model's other outputs under loss=None, the int64 initializer and the buffer left out of the
    frozen parameters."""
    android = ported("android", "ort_cffi", tmp_path_factory)
    assert len(android["outputs"]) == 1 and android["frozen_unchanged"]
    assert android["trainable"] == ["fc2.bias", "fc2.weight"]
    own = ported("model's own loss", "ort_cffi", tmp_path_factory)
    assert own["outputs"] == ["loss", "logits"] and own["logits"] == [8, CLASSES]
    weighted = ported("weighted average loss", "ort_cffi", tmp_path_factory)
    assert weighted["inputs"] == ["input", "target1", "target2"]
    desktop = ported("desktop method 1", "ort_cffi", tmp_path_factory)
    assert desktop["signature"] == ["input", "tensor(float)", ["batch", FEATURES], ["output"]]
