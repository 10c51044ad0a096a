"""ONNX Runtime 1.19's own tests of its Python training API
(``orttraining/orttraining/test/python/orttraining_test_ort_apis_py_bindings.py``), ported to ``ort_cffi.api``.

What changed, and only that (docs/guides/porting-python.md lists the tests left out and why):

- the imports, ``onnxruntime`` changed to ``ort_cffi``: ``from ort_cffi.training import artifacts``,
  ``import ort_cffi.training.onnxblock as onnxblock``, ``from ort_cffi.training.api import ...``, and
  ``InferenceSession``, ``OrtValue`` and ``SessionOptions`` from ``ort_cffi.api``;
- torch: ``SimpleNet`` (784-500-10, Linear-ReLU-Linear) is built with ``onnx.helper`` as torch's exporter writes
  it (``input-0`` → Gemm → Relu → Gemm → ``output-0``), and a numpy reference of the same model with the same
  weights replaces the torch module (its forward pass, cross-entropy loss and parameters); random data comes
  from numpy;
- the artifacts of each configuration are generated once per test session and copied for each test (the
  original generates them in every test), by ``ort_cffi.training.artifacts.generate_artifacts``: ONNX
  Runtime's signature and defaults, on ort_cffi's own gradient builder.

Left out: ``test_cuda_execution_provider`` and the ``cuda`` case of ``test_get_and_set_parameter_values``
(a GPU and the CUDA build; ``tests/apps/test_python_api_semantics.py`` checks that ``device="cuda"`` reaches the
CUDA provider), and ``test_ort_custom_ops`` (a custom-op library built from ONNX Runtime's sources, and
``custom_op_library``, which ort_cffi's generator does not offer).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_cffi.training.onnxblock as onnxblock
from ort_cffi.api import InferenceSession, OrtValue
from ort_cffi.training import artifacts
from ort_cffi.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

BATCH_SIZE, INPUT_SIZE, HIDDEN_SIZE, OUTPUT_SIZE = 64, 784, 500, 10


class SimpleNet:
    """The numpy stand-in of the original's torch ``SimpleNet``: fc1 → ReLU → fc2, torch's ``Linear`` layout
    (weight ``[out, in]``) and initialisation (uniform in ±1/sqrt(in)), parameters by name."""

    def __init__(self, input_size: int, hidden_size: int, num_classes: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)

        def linear(fan_in: int, fan_out: int) -> Tuple[np.ndarray, np.ndarray]:
            bound = 1.0 / np.sqrt(fan_in)
            return (rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                    rng.uniform(-bound, bound, fan_out).astype(np.float32))

        fc1_weight, fc1_bias = linear(input_size, hidden_size)
        fc2_weight, fc2_bias = linear(hidden_size, num_classes)
        self.parameters: Dict[str, np.ndarray] = {
            "fc1.weight": fc1_weight, "fc1.bias": fc1_bias, "fc2.weight": fc2_weight, "fc2.bias": fc2_bias,
        }

    def named_parameters(self) -> List[Tuple[str, np.ndarray]]:
        return list(self.parameters.items())

    def state_dict(self) -> Dict[str, np.ndarray]:
        return dict(self.parameters)

    def __call__(self, model_input: np.ndarray) -> np.ndarray:
        p = self.parameters
        hidden = np.maximum(model_input @ p["fc1.weight"].T + p["fc1.bias"], 0)
        return hidden @ p["fc2.weight"].T + p["fc2.bias"]


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.float64:
    """torch.nn.CrossEntropyLoss() (mean reduction), in float64."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels].mean()


def _get_onnx_model(pt_model: SimpleNet) -> onnx.ModelProto:
    """SimpleNet as torch.onnx.export writes it at opset 14 (every dimension symbolic, as its dynamic_axes)."""
    nodes = [
        helper.make_node("Gemm", ["input-0", "fc1.weight", "fc1.bias"], ["fc1_out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1_out"], ["relu_out"], name="relu"),
        helper.make_node("Gemm", ["relu_out", "fc2.weight", "fc2.bias"], ["output-0"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, ["input-0_dim0", "input-0_dim1"])],
        [helper.make_tensor_value_info("output-0", TensorProto.FLOAT, ["output-0_dim0", "output-0_dim1"])],
        [numpy_helper.from_array(value, name) for name, value in pt_model.named_parameters()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)


def _get_models(batch_size: int, input_size: int, hidden_size: int, output_size: int) -> Tuple[SimpleNet, onnx.ModelProto]:
    pt_model = SimpleNet(input_size, hidden_size, output_size)
    return pt_model, _get_onnx_model(pt_model)


def randn(*shape: int) -> np.ndarray:
    return np.random.standard_normal(shape).astype(np.float32)


def randint(high: int, size: Tuple[int, ...]) -> np.ndarray:
    return np.random.randint(0, high, size=size).astype(np.int64)


@dataclass
class Artifacts:
    checkpoint_file_path: str
    training_model_file_path: str
    eval_model_file_path: str
    optimizer_model_file_path: str
    pt_model: SimpleNet
    nominal_checkpoint_file_path: Optional[str] = None


_GENERATED: Dict[Tuple[object, ...], Tuple[pathlib.Path, SimpleNet]] = {}


def _create_training_artifacts(
    artifact_directory: str,
    requires_grad: Optional[List[str]] = None,
    frozen_params: Optional[List[str]] = None,
    optimizer_type: artifacts.OptimType = artifacts.OptimType.AdamW,
    nominal_checkpoint: bool = False,
) -> Artifacts:
    pt_model, onnx_model = _get_models(BATCH_SIZE, INPUT_SIZE, HIDDEN_SIZE, OUTPUT_SIZE)

    if requires_grad is None:
        requires_grad = [name for name, _ in pt_model.named_parameters()]

    if frozen_params is None:
        frozen_params = []

    key = (tuple(requires_grad), tuple(frozen_params), optimizer_type, nominal_checkpoint)
    if key not in _GENERATED:  # generated once per configuration, then copied for each test
        made = pathlib.Path(tempfile.mkdtemp(prefix="ort_cffi-python-api-"))
        artifacts.generate_artifacts(
            onnx_model,
            optimizer=optimizer_type,
            loss=artifacts.LossType.CrossEntropyLoss,
            requires_grad=requires_grad,
            frozen_params=frozen_params,
            artifact_directory=made,
            nominal_checkpoint=nominal_checkpoint,
        )
        _GENERATED[key] = (made, pt_model)
    made, _ = _GENERATED[key]
    for name in os.listdir(made):
        shutil.copy(made / name, os.path.join(artifact_directory, name))

    training_model_file = os.path.join(artifact_directory, "training_model.onnx")
    eval_model_file = os.path.join(artifact_directory, "eval_model.onnx")
    optimizer_model_file = os.path.join(artifact_directory, "optimizer_model.onnx")
    checkpoint_file = os.path.join(artifact_directory, "checkpoint")
    nominal_checkpoint_file = None
    if nominal_checkpoint:
        nominal_checkpoint_file = os.path.join(artifact_directory, "nominal_checkpoint")

    return Artifacts(
        checkpoint_file, training_model_file, eval_model_file, optimizer_model_file, pt_model, nominal_checkpoint_file
    )


@pytest.fixture(scope="module", autouse=True)
def _remove_generated():
    np.random.seed(0)
    yield
    for made, _ in _GENERATED.values():
        shutil.rmtree(made, ignore_errors=True)
    _GENERATED.clear()


def test_train_step():
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module.
        model = Module(artifacts.training_model_file_path, state)
        model.train()
        ort_loss = model(inputs, labels)

        # Calculate loss using the numpy model to compare it with Module's output.
        pt_outputs = artifacts.pt_model(inputs)
        pt_loss = cross_entropy(pt_outputs, labels)

        assert np.allclose(ort_loss, pt_loss)


def test_eval_step():
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module.
        model = Module(artifacts.training_model_file_path, state, artifacts.eval_model_file_path)
        model.train()
        model(inputs, labels)

        model.eval()
        fetches = model(inputs, labels)
        assert fetches


@pytest.mark.parametrize("optimizer_type", [artifacts.OptimType.SGD, artifacts.OptimType.AdamW])
def test_optimizer_step(optimizer_type):
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir, optimizer_type=optimizer_type)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module and Optimizer.
        model = Module(artifacts.training_model_file_path, state)
        optimizer = Optimizer(artifacts.optimizer_model_file_path, model)

        model.train()
        old_flatten_params = model.get_contiguous_parameters()
        model(inputs, labels)

        optimizer.step()
        new_params = model.get_contiguous_parameters()
        # Assert that the parameters are updated.
        assert not np.array_equal(old_flatten_params.numpy(), new_params.numpy())


@pytest.mark.parametrize("optimizer_type", [artifacts.OptimType.SGD, artifacts.OptimType.AdamW])
def test_get_and_set_lr(optimizer_type):
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir, optimizer_type=optimizer_type)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module and Optimizer.
        model = Module(artifacts.training_model_file_path, state)
        optimizer = Optimizer(artifacts.optimizer_model_file_path, model)

        # Test get and set learning rate.
        lr = optimizer.get_learning_rate()
        assert round(lr, 3) == 0.001

        optimizer.set_learning_rate(0.5)
        new_lr = optimizer.get_learning_rate()

        assert np.isclose(new_lr, 0.5)
        assert lr != new_lr


@pytest.mark.parametrize("optimizer_type", [artifacts.OptimType.SGD, artifacts.OptimType.AdamW])
def test_scheduler_step(optimizer_type):
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir, optimizer_type=optimizer_type)
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module and Optimizer.
        model = Module(artifacts.training_model_file_path, state)
        optimizer = Optimizer(artifacts.optimizer_model_file_path, model)
        scheduler = LinearLRScheduler(optimizer, 1, 2, 0.2)

        # Test get and set learning rate.
        lr = optimizer.get_learning_rate()
        assert np.allclose(lr, 0.0)

        model.train()
        model(inputs, labels)
        optimizer.step()
        scheduler.step()

        # Get new learning rate.
        new_lr = optimizer.get_learning_rate()
        assert new_lr != lr


def test_training_module_checkpoint():
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Training Module and Training Optimizer.
        model = Module(artifacts.training_model_file_path, state)

        model.train()
        model(inputs, labels)

        checkpoint_save_path = os.path.join(temp_dir, "checkpoint_export.ckpt")

        CheckpointState.save_checkpoint(state, checkpoint_save_path)
        old_flatten_params = model.get_contiguous_parameters()

        # Assert the checkpoint was saved.
        assert os.path.exists(checkpoint_save_path)

        # Assert the checkpoint parameters remain after saving.
        new_state = CheckpointState.load_checkpoint(checkpoint_save_path)
        new_model = Module(artifacts.training_model_file_path, new_state)

        new_params = new_model.get_contiguous_parameters()

        assert np.array_equal(old_flatten_params.numpy(), new_params.numpy())


@pytest.mark.parametrize("optimizer_type", [artifacts.OptimType.SGD, artifacts.OptimType.AdamW])
@pytest.mark.parametrize("trainable_only", [True, False])
def test_copy_buffer_to_parameters(trainable_only, optimizer_type):
    # Generating random data for testing.
    inputs = randn(64, 784)
    labels = randint(10, (64,))

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(
            temp_dir,
            requires_grad=["fc2.weight", "fc2.bias"],
            frozen_params=["fc1.weight", "fc1.bias"],
            optimizer_type=optimizer_type,
        )
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)

        # Create a Module and Optimizer.
        model = Module(artifacts.training_model_file_path, state)
        optimizer = Optimizer(artifacts.optimizer_model_file_path, model)

        # Keep a copy of the parameters.
        old_output_params = model.get_contiguous_parameters(trainable_only=trainable_only)

        # Run a Training Step.
        model.train()
        model(inputs, labels)
        optimizer.step()

        # Get the new parameters.
        output_params = model.get_contiguous_parameters(trainable_only=trainable_only)
        # Make sure old params are different from new params.
        assert not np.array_equal(old_output_params.numpy(), output_params.numpy())

        # Copy the old parameters to the model.
        model.copy_buffer_to_parameters(old_output_params, trainable_only=trainable_only)

        # Get the saved parameters.
        saved_params = model.get_contiguous_parameters(trainable_only=trainable_only)

        # Make sure the saved parameters are the same as the old parameters.
        assert np.array_equal(old_output_params.numpy(), saved_params.numpy())


def test_export_model_for_inferencing():
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)

        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)

        # Create a Module.
        model = Module(artifacts.training_model_file_path, state, artifacts.eval_model_file_path)

        # Export inference model
        inference_model_file_path = os.path.join(temp_dir, "inference_model.onnx")
        model.export_model_for_inferencing(inference_model_file_path, ["output-0"])
        assert os.path.exists(inference_model_file_path)
        InferenceSession(inference_model_file_path)


@pytest.mark.parametrize(
    "property_value",
    [-1, 0, 1, 1234567890, -1.0, -0.1, 0.1, 1.0, 1234.0, "hello", "world", "onnxruntime"],
)
def test_add_get_property(property_value):
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)

        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)

        # Create a Module.
        _ = Module(artifacts.training_model_file_path, state)

        # Float values in python are double precision.
        # Convert to float32 to match the type of the property.
        if isinstance(property_value, float):
            property_value = float(np.float32(property_value))

        assert len(state.properties) == 0

        state.properties["property"] = property_value
        assert "property" in state.properties
        assert state.properties["property"] == property_value
        assert len(state.properties) == 1

        CheckpointState.save_checkpoint(state, artifacts.checkpoint_file_path)
        new_state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        assert "property" in new_state.properties
        assert new_state.properties["property"] == property_value
        assert len(new_state.properties) == 1


def test_get_input_output_names():
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)

        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)

        # Create a Module.
        model = Module(artifacts.training_model_file_path, state, artifacts.eval_model_file_path)

        training_model = onnx.load(artifacts.training_model_file_path)
        assert model.input_names() == [input.name for input in training_model.graph.input][:2]
        assert model.output_names() == [output.name for output in training_model.graph.output][:1]


def test_string_inputs():
    def _create_string_input_trainable_model():
        """This function creates an onnx model with string inputs"""

        class BlockWithStringInputs(onnxblock.ForwardBlock):
            def __init__(self):
                super().__init__()
                self.cast = onnxblock.blocks.Cast(to=onnx.TensorProto.FLOAT)
                self.linear = onnxblock.blocks.Linear(4, 2)

            def build(self, string_input):
                return self.linear(self.cast(string_input))

        string_block = BlockWithStringInputs()
        with onnxblock.empty_base() as model_accessor:
            model_accessor.model.graph.input.extend(
                [
                    onnx.helper.make_tensor_value_info("input", onnx.TensorProto.STRING, [1, 4]),
                ]
            )
            _ = string_block("input")

        return string_block.to_model_proto()

    onnx_model = _create_string_input_trainable_model()
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts.generate_artifacts(
            onnx_model,
            optimizer=artifacts.OptimType.AdamW,
            loss=artifacts.LossType.CrossEntropyLoss,
            requires_grad=[param.name for param in onnx_model.graph.initializer],
            artifact_directory=temp_dir,
        )

        training_model_file_path = pathlib.Path(temp_dir) / "training_model.onnx"
        eval_model_file_path = pathlib.Path(temp_dir) / "eval_model.onnx"
        checkpoint_file_path = pathlib.Path(temp_dir) / "checkpoint"

        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(checkpoint_file_path)

        # Create a Module.
        model = Module(training_model_file_path, state, eval_model_file_path)

        strs = np.array([["1.0", "2.0", "3.0", "4.0"]], dtype=str)
        labels = np.random.randint(0, 2, size=(1,), dtype=np.int64)

        model.train()
        _ = model(strs, labels)

        model.eval()
        _ = model(strs, labels)


def test_train_step_with_ort_values():
    # Generating random data for testing.
    inputs_np = randn(64, 784)
    inputs = OrtValue.ortvalue_from_numpy(inputs_np)
    labels_np = randint(10, (64,))
    labels = OrtValue.ortvalue_from_numpy(labels_np)

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)

        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module.
        model = Module(artifacts.training_model_file_path, state)
        model.train()
        ort_loss = model(inputs, labels)
        assert isinstance(ort_loss, OrtValue)

        # Calculate loss using the numpy model to compare it with Module's output.
        pt_outputs = artifacts.pt_model(inputs_np)
        pt_loss = cross_entropy(pt_outputs, labels_np)

        assert np.allclose(ort_loss.numpy(), pt_loss)


def test_eval_step_with_ort_values():
    # Generating random data for testing.
    inputs_np = randn(64, 784)
    inputs = OrtValue.ortvalue_from_numpy(inputs_np)
    labels_np = randint(10, (64,))
    labels = OrtValue.ortvalue_from_numpy(labels_np)

    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir)
        # Create Checkpoint State.
        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        # Create a Module.
        model = Module(artifacts.training_model_file_path, state, artifacts.eval_model_file_path)
        model.train()
        model(inputs, labels)

        model.eval()
        fetches = model(inputs, labels)
        assert isinstance(fetches, OrtValue)
        assert fetches


@pytest.mark.parametrize("device", ["cpu"])
def test_get_and_set_parameter_values(device):
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(
            temp_dir, requires_grad=["fc2.weight", "fc2.bias"], frozen_params=["fc1.weight", "fc1.bias"]
        )

        state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)

        model = Module(artifacts.training_model_file_path, state, artifacts.eval_model_file_path, device=device)

        state_dict = artifacts.pt_model.state_dict()
        assert len(state_dict) == len(state.parameters)
        for parameter_name, _ in state.parameters:
            assert parameter_name in state_dict

        for name, pt_param in artifacts.pt_model.named_parameters():
            ort_param = state.parameters[name]
            assert ort_param.name == name
            assert np.allclose(pt_param, ort_param.data)
            if name in ["fc1.weight", "fc1.bias"]:
                assert ort_param.requires_grad is False
                assert ort_param.grad is None
            else:
                assert ort_param.requires_grad is True
                assert np.allclose(ort_param.grad, np.zeros_like(ort_param.data, dtype=np.float32))

        original_param = state.parameters["fc1.weight"].data
        state.parameters["fc1.weight"].data = np.ones_like(state.parameters["fc1.weight"].data, dtype=np.float32)
        updated_param = state.parameters["fc1.weight"].data
        assert np.allclose(updated_param, np.ones_like(updated_param, dtype=np.float32))

        model.train()
        inputs = randn(64, 784)
        labels = randint(10, (64,))
        loss = model(inputs, labels)
        assert loss is not None
        for name, _ in artifacts.pt_model.named_parameters():
            ort_param = state.parameters[name]
            assert ort_param.name == name
            if name in ["fc1.weight", "fc1.bias"]:
                assert ort_param.requires_grad is False
                assert ort_param.grad is None
            else:
                assert ort_param.requires_grad is True
                assert ort_param.grad.any()

        state.parameters["fc1.weight"] = original_param
        assert np.allclose(state.parameters["fc1.weight"].data, original_param)


def test_model_construction_with_nominal_checkpoint():
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir, nominal_checkpoint=True)

        nominal_state = CheckpointState.load_checkpoint(artifacts.nominal_checkpoint_file_path)
        model_with_nominal_state = Module(
            artifacts.training_model_file_path, nominal_state, artifacts.eval_model_file_path
        )
        optimizer_with_nominal_state = Optimizer(artifacts.optimizer_model_file_path, model_with_nominal_state)

        inputs = randn(64, 784)
        labels = randint(10, (64,))

        err_msg = "Please load the parameter states first"

        # Accessing the checkpoint parameter raises
        state_dict = artifacts.pt_model.state_dict()
        for param_name in state_dict:
            assert param_name in nominal_state.parameters
        with pytest.raises(Exception) as exc_info:
            _ = nominal_state.parameters["fc1.weight"]

        assert err_msg in str(exc_info.value)

        err_msg = "Please load all the parameter states first"
        with pytest.raises(Exception) as exc_info:
            nominal_state.parameters["fc1.weight"] = np.ones((10, 10), dtype=np.float32)

        assert err_msg in str(exc_info.value)

        err_msg = "Please load the model parameters first."

        # Getting contiguous parameters raises
        with pytest.raises(Exception) as exc_info:
            _ = model_with_nominal_state.get_contiguous_parameters()

        assert err_msg in str(exc_info.value)

        # Train step raises
        with pytest.raises(Exception) as exc_info:
            model_with_nominal_state.train()
            model_with_nominal_state(inputs, labels)

        assert err_msg in str(exc_info.value)

        # Optimizer step raises
        with pytest.raises(Exception) as exc_info:
            optimizer_with_nominal_state.step()

        assert err_msg in str(exc_info.value)

        # Eval step raises
        with pytest.raises(Exception) as exc_info:
            model_with_nominal_state.eval()
            model_with_nominal_state(inputs, labels)

        assert err_msg in str(exc_info.value)

        # Get parameters size does not raise
        params_size = model_with_nominal_state.get_parameters_size()
        assert params_size > 0


def test_train_with_nominal_checkpoint():
    with tempfile.TemporaryDirectory() as temp_dir:
        artifacts = _create_training_artifacts(temp_dir, nominal_checkpoint=True)

        # Create Checkpoint State with nominal checkpoint as well as the complete checkpoint.
        complete_state = CheckpointState.load_checkpoint(artifacts.checkpoint_file_path)
        nominal_state = CheckpointState.load_checkpoint(artifacts.nominal_checkpoint_file_path)

        # Create a Module with both complete and nominal checkpoint states.
        model_with_complete_state = Module(artifacts.training_model_file_path, complete_state)
        model_with_nominal_state = Module(artifacts.training_model_file_path, nominal_state)

        optimizer_with_complete_state = Optimizer(artifacts.optimizer_model_file_path, model_with_complete_state)
        optimizer_with_nominal_state = Optimizer(artifacts.optimizer_model_file_path, model_with_nominal_state)

        parameter_buffer = model_with_complete_state.get_contiguous_parameters()
        model_with_nominal_state.copy_buffer_to_parameters(parameter_buffer, trainable_only=False)

        model_with_complete_state.train()
        model_with_nominal_state.train()

        # Generate random data for testing.
        inputs = randn(64, 784)
        labels = randint(10, (64,))

        ort_loss_1 = model_with_complete_state(inputs, labels)
        ort_loss_2 = model_with_nominal_state(inputs, labels)

        # Calculate loss using the numpy model to compare it with both the Modules' output.
        pt_outputs = artifacts.pt_model(inputs)
        pt_loss = cross_entropy(pt_outputs, labels)

        assert np.allclose(ort_loss_1, ort_loss_2)
        assert np.allclose(ort_loss_1, pt_loss)

        optimizer_with_complete_state.step()
        optimizer_with_nominal_state.step()

        new_params_1 = model_with_complete_state.get_contiguous_parameters()
        new_params_2 = model_with_nominal_state.get_contiguous_parameters()

        assert np.allclose(new_params_1.numpy(), new_params_2.numpy())
