"""``ort_cffi.artifacts.generate_artifacts`` is ONNX Runtime's, default for default and argument for argument
(issue 37): code written for ``onnxruntime.training.artifacts`` runs with ``ort_cffi.artifacts`` in its place.
A model that computes its own loss needs no loss (``loss=None``); the training model outputs the loss alone,
so that ``loss += model(batch, labels)`` adds numbers; ``LossType(2)`` is cross-entropy; an onnxblock loss
block is stacked on the model; what ort_cffi cannot do is refused saying what to do instead. ort_cffi's former
defaults are asked for by name."""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import artifacts, onnxblock
from ort_cffi.api import CheckpointState, Module, Optimizer
from ort_cffi.training import artifacts as training_artifacts

ONNX_RUNTIMES_DEFAULTS = {  # onnxruntime.training.artifacts.generate_artifacts of ONNX Runtime 1.19, in order
    "requires_grad": None, "frozen_params": None, "loss": None, "optimizer": None, "artifact_directory": None,
    "prefix": "", "ort_format": False, "custom_op_library": None, "additional_output_names": None,
    "nominal_checkpoint": False, "loss_input_names": None,
}


def classifier(own_loss: bool = False) -> onnx.ModelProto:
    """x [batch, 4] -> logits [batch, 3] through fc (Gemm); with ``own_loss`` the model also takes int64
    labels and outputs its own mean cross-entropy first, as a transformers model given labels does."""
    rng = np.random.default_rng(37)
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])]
    if own_loss:
        nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], reduction="mean"))
        inputs.append(helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch"]))
        outputs.insert(0, helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "classifier", inputs, outputs, [
        numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(np.zeros(3, np.float32), "fc.bias"),
        numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")])  # an exporter's int64 constant
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def data() -> tuple:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0).astype(np.int64)


def train(made: artifacts.GeneratedArtifacts, steps: int = 15) -> tuple:
    """Train with ONNX Runtime's Python API as Microsoft's Android example does (``loss += model(...)``);
    returns the per-step losses and the parameters before and after."""
    state = CheckpointState.load_checkpoint(str(made.checkpoint))
    model = Module(str(made.training_model), state, str(made.eval_model))
    optimizer = Optimizer(str(made.optimizer_model), model)
    before = model.get_contiguous_parameters().numpy().copy()
    x, labels = data()
    losses = []
    model.train()
    for _ in range(steps):
        loss = 0
        loss += model(x, labels)  # the loss alone: a number, not a tuple
        optimizer.step()
        model.lazy_reset_grad()
        losses.append(float(np.asarray(loss).sum()))  # a block's loss may be of shape [1]
    return losses, before, model.get_contiguous_parameters().numpy()


def test_one_function_with_onnx_runtimes_signature_and_defaults() -> None:
    assert artifacts.generate_artifacts is training_artifacts.generate_artifacts
    assert artifacts.LossType is training_artifacts.LossType and artifacts.OptimType is training_artifacts.OptimType
    parameters = list(inspect.signature(artifacts.generate_artifacts).parameters.values())
    positional = [p for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [p.name for p in positional] == ["model", *ONNX_RUNTIMES_DEFAULTS]
    assert {p.name: p.default for p in positional[1:]} == ONNX_RUNTIMES_DEFAULTS
    assert artifacts.LossType(2) is artifacts.LossType.CrossEntropyLoss and artifacts.LossType.MSELoss.value == 1
    assert [(m.name, m.value) for m in artifacts.LossType] == [
        ("MSELoss", 1), ("CrossEntropyLoss", 2), ("BCEWithLogitsLoss", 3), ("L1Loss", 4)]
    assert [(m.name, m.value) for m in artifacts.OptimType] == [("AdamW", 1), ("SGD", 2)]
    assert artifacts.LossType("cross-entropy") is artifacts.LossType.CrossEntropyLoss  # ort_cffi's names too
    assert artifacts.OptimType("sgd") is artifacts.OptimType.SGD


def test_with_nothing_but_the_model_nothing_trains_and_no_optimizer_model_is_written(tmp_path: Path) -> None:
    made = artifacts.generate_artifacts(classifier(own_loss=True), artifact_directory=tmp_path)
    assert made.trainable == () and made.loss is None and made.optimizer_model is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifacts.json", "checkpoint", "eval_model.onnx",
                                                          "training_model.onnx"]
    with pytest.raises(artifacts.ArtifactsInputError, match="requires_grad=None trains nothing .*ALL_PARAMETERS"):
        artifacts.generate_artifacts(classifier(own_loss=True), optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_a_model_that_computes_its_own_loss_trains_with_loss_none(tmp_path: Path) -> None:
    """The MobileBERT example: a model given labels outputs its loss first; ONNX Runtime's loss=None takes
    that as the loss, where ort_cffi's former default asked which output a cross-entropy should read."""
    made = artifacts.generate_artifacts(classifier(own_loss=True), requires_grad=["fc.weight", "fc.bias"],
                                        frozen_params=["shape", "position_ids"],
                                        optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path)
    assert made.loss is None and made.loss_input == "loss" and made.added_inputs == ()
    assert made.eval_outputs == ("loss", "logits")  # with no loss the model's outputs are kept, as in ONNX Runtime
    # frozen_params as ONNX Runtime takes it: names that freeze nothing are passed over, and noted
    assert made.frozen == ()
    assert "frozen_params: position_ids: no initializer of the model (a value it computes); nothing to freeze" in made.notes
    assert "frozen_params: shape (int64): not floating-point; kept as constants of the graphs" in made.notes
    state = CheckpointState.load_checkpoint(str(made.checkpoint))
    model = Module(str(made.training_model), state, str(made.eval_model))
    optimizer = Optimizer(str(made.optimizer_model), model)
    before = model.get_contiguous_parameters().numpy().copy()
    x, labels = data()
    losses = []
    for _ in range(15):
        loss, logits = model(x, labels)
        assert logits.shape == (32, 3)
        optimizer.step()
        model.lazy_reset_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    assert not np.allclose(before, model.get_contiguous_parameters().numpy())


def test_a_loss_type_by_onnx_runtimes_number_outputs_the_loss_alone(tmp_path: Path) -> None:
    """The Android example: LossType.CrossEntropyLoss (here by its number), the outputs left at ONNX Runtime's
    default (the loss alone), and its training loop's ``loss += model(batch, labels)``."""
    made = artifacts.generate_artifacts(classifier(), requires_grad=["fc.weight", "fc.bias"], loss=artifacts.LossType(2),
                                        optimizer=artifacts.OptimType(1), artifact_directory=tmp_path)
    assert made.loss is artifacts.LossType.CrossEntropyLoss and made.optimizer is artifacts.OptimType.AdamW
    assert len(made.eval_outputs) == 1 and made.added_inputs == ("labels",)
    losses, before, after = train(made)
    assert losses[-1] < losses[0] and not np.allclose(before, after)


def test_an_onnxblock_loss_is_stacked_on_the_model(tmp_path: Path) -> None:
    """A custom loss written for ONNX Runtime (``class ...(onnxblock.Block)``), through ort_cffi.artifacts."""
    class HalfCrossEntropy(onnxblock.Block):
        def __init__(self) -> None:
            super().__init__()
            self.loss = onnxblock.loss.CrossEntropyLoss()
            self.half = onnxblock.blocks.Constant(0.5)
            self.mul = onnxblock.blocks.Mul()

        def build(self, scores: str) -> str:
            return self.mul(self.half(), self.loss(scores))

    made = artifacts.generate_artifacts(classifier(), requires_grad=["fc.weight", "fc.bias"], loss=HalfCrossEntropy(),
                                        optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path)
    assert len(made.eval_outputs) == 1  # the block's loss alone
    losses, before, after = train(made)
    assert losses[-1] < losses[0] and not np.allclose(before, after)


def test_ort_cffis_former_defaults_are_asked_for_by_name(tmp_path: Path) -> None:
    made = artifacts.generate_artifacts(classifier(), artifacts.ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                                        artifact_directory=tmp_path, additional_output_names=artifacts.MODEL_OUTPUTS)
    assert [p.name for p in made.trainable] == ["fc.weight", "fc.bias"] and made.optimizer_model is not None
    assert made.eval_outputs[1:] == ("logits",)


def test_what_ort_cffi_cannot_do_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    model = classifier()
    with pytest.raises(NotImplementedError, match=r"ort_format=True: .*generate with ort_format=False"):
        artifacts.generate_artifacts(model, ["fc.weight"], artifact_directory=tmp_path, ort_format=True)
    with pytest.raises(NotImplementedError, match=r"custom_op_library='ops.so': .*build the model from standard operators"):
        artifacts.generate_artifacts(model, ["fc.weight"], artifact_directory=tmp_path, custom_op_library="ops.so")
    with pytest.raises(RuntimeError, match="Unknown loss provided 'hinge'"):
        artifacts.generate_artifacts(model, ["fc.weight"], loss="hinge", artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="additional output names"):
        artifacts.generate_artifacts(model, ["fc.weight"], loss=artifacts.LossType.CrossEntropyLoss,
                                     artifact_directory=tmp_path, additional_output_names="logits")  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())
