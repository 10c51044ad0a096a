"""``ort_cffi.api`` beyond ONNX Runtime's own test file: the behaviour its Python layer has that a port relies
on, where ort_cffi differs on purpose (docs/guides/porting-python.md), and what must never crash.

These use the committed artifacts (tests/artifacts/tiny: 784-16-10, loss only, with a nominal checkpoint;
ort_cffi/data/digits: 64-64-10, loss and logits), so they run on every interpreter, generator or not. The
numpy references read the weights through the facade (``OrtTrainingSession``), not through the code tested.
"""
from __future__ import annotations

import gc
import shutil
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest

from conftest import ARTIFACTS, DIGITS, run_child
from ort_cffi import OnnxTensor, OrtEnvironment, OrtException, SessionOptions
from ort_cffi.api import CheckpointState, LinearLRScheduler, Module, Optimizer, OrtValue

TINY = ARTIFACTS / "tiny"


def facade_weights(folder: Path) -> Dict[str, np.ndarray]:
    """The checkpoint's parameters, read through the facade (an independent path to the same values)."""
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(folder / "checkpoint", folder / "training_model.onnx") as session:
        state = session.getCheckpointState()
        return {name: state.getParameter(name) for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")}


def forward(weights: Dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    hidden = np.maximum(x @ weights["fc1.weight"].T + weights["fc1.bias"], 0)
    return hidden @ weights["fc2.weight"].T + weights["fc2.bias"]


def loss_and_bias_gradient(weights: Dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray) -> Tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to fc2.bias (mean over the batch of softmax - one-hot)."""
    logits = forward(weights, x).astype(np.float64)
    z = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(probs[np.arange(len(labels)), labels]).mean()
    probs[np.arange(len(labels)), labels] -= 1
    return float(loss), probs.mean(axis=0)


def batch(features: int, size: int = 8, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, features)).astype(np.float32), rng.integers(0, 10, size).astype(np.int64)


def copy_artifacts(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / folder.name
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("*.npz"))
    return target


# --- CheckpointState ------------------------------------------------------------------------------


def test_a_state_lists_and_reads_its_parameters_before_any_module():
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    weights = facade_weights(TINY)
    assert len(state.parameters) == 4 and "fc1.weight" in state.parameters and "nothing" not in state.parameters
    assert [name for name, _ in state.parameters] == sorted(weights)  # ONNX Runtime lists them by name
    for name, parameter in state.parameters:
        assert parameter.name == name and parameter.requires_grad is True
        assert np.array_equal(parameter.data, weights[name])
        assert parameter.grad is None  # no Module: no gradient buffer yet
    assert repr(state.parameters["fc2.bias"]) == "Parameter(name=fc2.bias, requires_grad=True)"


def test_writing_a_parameter_needs_a_module_and_missing_names_are_key_errors():
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    with pytest.raises(OrtException, match="without a Module over this state"):
        state.parameters["fc2.bias"] = np.zeros(10, np.float32)
    with pytest.raises(KeyError, match="Parameter nothing not found."):
        state.parameters["nothing"]
    with pytest.raises(KeyError, match="Parameter nothing not found."):
        state.parameters["nothing"] = np.zeros(1, np.float32)
    with pytest.raises(KeyError, match="Property nothing not found."):
        state.properties["nothing"]


def test_parameter_writes_reach_training_and_a_wrong_shape_is_refused():
    state = CheckpointState.load_checkpoint(DIGITS / "checkpoint")
    model = Module(DIGITS / "training_model.onnx", state)
    x, labels = batch(64)
    weights = facade_weights(DIGITS)
    weights["fc2.bias"] = np.arange(10, dtype=np.float32)
    state.parameters["fc2.bias"].data = weights["fc2.bias"]
    loss, logits = model(x, labels)
    assert np.allclose(logits, forward(weights, x), atol=1e-5)
    assert np.isclose(loss, loss_and_bias_gradient(weights, x, labels)[0], atol=1e-5)
    with pytest.raises(OrtException, match="fc2.bias"):
        state.parameters["fc2.bias"] = np.zeros(3, np.float32)


def test_properties_iterate_by_name_keep_their_types_and_survive_a_save(tmp_path: Path):
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    state.properties["epoch"] = 3
    state.properties["best"] = 0.25
    state.properties["name"] = "run"
    state.properties["done"] = True  # ONNX Runtime's binding stores a bool as the int64 1
    state.properties["epoch"] = 4  # replaced
    assert list(state.properties) == [("best", 0.25), ("done", 1), ("epoch", 4), ("name", "run")]
    assert len(state.properties) == 4 and repr(state.properties) == "['best', 'done', 'epoch', 'name']"
    CheckpointState.save_checkpoint(state, tmp_path / "saved")
    again = CheckpointState.load_checkpoint(tmp_path / "saved")
    assert list(again.properties) == [("best", 0.25), ("done", 1), ("epoch", 4), ("name", "run")]
    assert type(again.properties["epoch"]) is int and type(again.properties["best"]) is float
    with pytest.raises(OrtException, match="list"):
        state.properties["bad"] = [1]
    assert "bad" not in state.properties


def test_loading_and_saving_name_what_is_wrong(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="missing"):
        CheckpointState.load_checkpoint(tmp_path / "missing")
    (tmp_path / "garbage").write_bytes(b"not a checkpoint at all")
    with pytest.raises(OrtException, match="not an ONNX Runtime checkpoint"):
        CheckpointState.load_checkpoint(tmp_path / "garbage")
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    with pytest.raises(FileNotFoundError):
        CheckpointState.save_checkpoint(state, tmp_path / "no" / "folder" / "checkpoint")
    with pytest.raises(TypeError):
        CheckpointState.save_checkpoint("state", tmp_path / "checkpoint")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CheckpointState("state")  # type: ignore[arg-type]


# --- Module and Optimizer -------------------------------------------------------------------------


def test_the_loss_matches_numpy_and_training_changes_the_parameters():
    state = CheckpointState.load_checkpoint(DIGITS / "checkpoint")
    model = Module(DIGITS / "training_model.onnx", state, DIGITS / "eval_model.onnx")
    optimizer = Optimizer(DIGITS / "optimizer_model.onnx", model)
    x, labels = batch(64)
    weights = facade_weights(DIGITS)
    assert model.input_names() == ["input", "labels"] and model.output_names() == ["onnx::loss::2", "logits"]
    loss, logits = model(x, labels)
    expected_loss, bias_gradient = loss_and_bias_gradient(weights, x, labels)
    assert np.isclose(loss, expected_loss, atol=1e-5) and np.allclose(logits, forward(weights, x), atol=1e-5)
    assert np.allclose(state.parameters["fc2.bias"].grad, bias_gradient, atol=1e-6)
    before = model.get_contiguous_parameters().numpy()
    losses = [float(loss)]
    for _ in range(20):
        optimizer.step()
        model.lazy_reset_grad()
        losses.append(float(model(x, labels)[0]))
    after = model.get_contiguous_parameters()
    assert not np.array_equal(before, after.numpy()) and losses[-1] < losses[0]
    assert after.shape() == [model.get_parameters_size()] == [len(before)]
    model.eval()
    eval_loss, eval_logits = model(x, labels)
    assert eval_logits.shape == (8, 10) and model.input_names() == ["input", "labels"]


def test_gradients_accumulate_until_lazy_reset_grad():
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    model = Module(TINY / "training_model.onnx", state)
    assert np.array_equal(state.parameters["fc2.bias"].grad, np.zeros(10, np.float32))
    x, labels = batch(784)
    _, gradient = loss_and_bias_gradient(facade_weights(TINY), x, labels)
    model(x, labels)
    assert np.allclose(state.parameters["fc2.bias"].grad, gradient, atol=1e-6)
    model(x, labels)
    assert np.allclose(state.parameters["fc2.bias"].grad, 2 * gradient, atol=1e-6)
    model.lazy_reset_grad()
    assert np.allclose(state.parameters["fc2.bias"].grad, 2 * gradient, atol=1e-6)  # lazily: at the next step
    model(x, labels)
    assert np.allclose(state.parameters["fc2.bias"].grad, gradient, atol=1e-6)


def test_a_training_model_whose_gradients_cannot_be_read_still_trains(tmp_path: Path):
    """Accumulators that already have their second output (not ONNX Runtime's generator's) are left as they are:
    training works, and Parameter.grad says why it cannot answer."""
    import onnx

    folder = copy_artifacts(TINY, tmp_path)
    model_proto = onnx.load(str(folder / "training_model.onnx"))
    for node in model_proto.graph.node:
        if node.op_type == "InPlaceAccumulatorV2":
            node.output.append(node.input[0] + ".out")
    onnx.save(model_proto, str(folder / "training_model.onnx"))
    state = CheckpointState.load_checkpoint(folder / "checkpoint")
    model = Module(folder / "training_model.onnx", state)
    optimizer = Optimizer(folder / "optimizer_model.onnx", model)
    before = state.parameters["fc2.bias"].data
    model(*batch(784))
    optimizer.step()
    assert not np.array_equal(before, state.parameters["fc2.bias"].data)
    with pytest.raises(OrtException, match="gradient of 'fc2.bias' cannot be read: .* none of its 4 InPlaceAccumulatorV2"):
        state.parameters["fc2.bias"].grad


def test_an_optimizer_after_training_steps_is_refused_until_the_gradients_are_reset():
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    model = Module(TINY / "training_model.onnx", state)
    x, labels = batch(784)
    model(x, labels)
    with pytest.raises(OrtException, match="lazy_reset_grad"):
        Optimizer(TINY / "optimizer_model.onnx", model)
    model(x, labels)  # the Module still trains after the refusal
    gradient = state.parameters["fc2.bias"].grad
    model.lazy_reset_grad()
    optimizer = Optimizer(TINY / "optimizer_model.onnx", model)
    assert np.array_equal(state.parameters["fc2.bias"].grad, gradient)  # kept across the new session
    with pytest.raises(FileNotFoundError):
        Optimizer(TINY / "missing.onnx", model)
    model(x, labels)  # the Module still works after a failed Optimizer, and the first one too
    before = state.parameters["fc2.bias"].data
    optimizer.step()
    assert not np.array_equal(before, state.parameters["fc2.bias"].data)
    model.lazy_reset_grad()
    newer = Optimizer(TINY / "optimizer_model.onnx", model)
    with pytest.raises(OrtException, match="replaced"):
        optimizer.step()
    newer.set_learning_rate(0.25)
    assert newer.get_learning_rate() == 0.25


def test_a_new_module_over_a_state_takes_it_over():
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    first = Module(TINY / "training_model.onnx", state)
    x, labels = batch(784)
    with pytest.raises(FileNotFoundError):
        Module(TINY / "missing.onnx", state)
    assert np.ndim(first(x, labels)) == 0  # a Module that failed to start took nothing over
    second = Module(TINY / "training_model.onnx", state)
    with pytest.raises(OrtException, match="took it over"):
        first(x, labels)
    assert np.ndim(second(x, labels)) == 0
    del second
    gc.collect()
    with pytest.raises(OrtException, match="the Module that trained it is gone"):
        state.parameters["fc2.bias"].data


def test_bad_calls_name_what_is_wrong(tmp_path: Path):
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    (tmp_path / "eval_model.onnx").write_bytes(b"not a model")
    with pytest.raises(OrtException) as refused:
        Module(TINY / "training_model.onnx", state, tmp_path / "eval_model.onnx")
    # the user's files, not the copy ort_cffi made of the training model: here the eval model it refused
    assert str(tmp_path / "eval_model.onnx") in str(refused.value) and "not an ONNX model" in str(refused.value)
    model = Module(TINY / "training_model.onnx", state)
    x, labels = batch(784)
    with pytest.raises(OrtException, match=r"takes 2 inputs \['input', 'labels'\], got 1"):
        model(x)
    with pytest.raises(OrtException, match="'labels' is None"):
        model(x, None)
    with pytest.raises(OrtException, match="labels"):
        model(x, labels.astype(np.float32))
    with pytest.raises(OrtException, match="no eval model"):
        model.eval()(x, labels)
    with pytest.raises(TypeError):
        Module(TINY / "training_model.onnx", "state")  # type: ignore[arg-type]
    with pytest.raises(OrtException, match="Unsupported device type: tpu"):
        Module(TINY / "training_model.onnx", state, device="tpu")
    with pytest.raises(TypeError):
        Optimizer(TINY / "optimizer_model.onnx", "model")  # type: ignore[arg-type]


def test_cuda_goes_through_the_cuda_execution_provider():
    """On the CPU build the provider is refused by the runtime, saying so; with the CUDA build and a GPU the
    same call creates the session there."""
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    with pytest.raises(OrtException, match="CUDA"):
        Module(TINY / "training_model.onnx", state, device="cuda:0")
    with SessionOptions() as options:
        with pytest.raises(OrtException, match="CUDA"):
            Module(TINY / "training_model.onnx", state, device="cuda", session_options=options)


def test_the_scheduler_gives_onnx_runtimes_python_rates():
    """ONNX Runtime's Python layer hands the two counts to its native scheduler the other way round; ported code
    is tuned to the rates that gives (tests/apps/test_onnxruntime_ports.py compares them with ONNX Runtime's)."""
    state = CheckpointState.load_checkpoint(TINY / "checkpoint")
    model = Module(TINY / "training_model.onnx", state)
    optimizer = Optimizer(TINY / "optimizer_model.onnx", model)
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=4, initial_lr=0.1)
    rates = [optimizer.get_learning_rate()]
    x, labels = batch(784)
    for _ in range(4):
        model(x, labels)
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.get_learning_rate())
    assert np.allclose(rates, [0.0, 0.025, 0.05, 0.075, 0.0])


def test_a_nominal_state_fills_from_a_buffer_and_then_trains():
    complete = CheckpointState.load_checkpoint(TINY / "checkpoint")
    nominal = CheckpointState.load_checkpoint(TINY / "nominal_checkpoint")
    source = Module(TINY / "training_model.onnx", complete)
    model = Module(TINY / "training_model.onnx", nominal)
    assert "fc1.weight" in nominal.parameters and len(nominal.parameters) == 4
    with pytest.raises(OrtException, match="Please load the parameter states first"):
        nominal.parameters["fc1.weight"]
    assert model.get_parameters_size(False) == source.get_parameters_size(False) == 12730
    buffer = source.get_contiguous_parameters()
    with pytest.raises(OrtException, match="after creating the Optimizer"):  # the C API would crash
        model.copy_buffer_to_parameters(buffer, trainable_only=False)
    with pytest.raises(OrtException, match="trainable_only = false"):
        model.copy_buffer_to_parameters(source.get_contiguous_parameters(True), trainable_only=True)
    Optimizer(TINY / "optimizer_model.onnx", model)
    model.copy_buffer_to_parameters(buffer, trainable_only=False)
    assert np.array_equal(nominal.parameters["fc2.bias"].data, complete.parameters["fc2.bias"].data)
    x, labels = batch(784)
    assert np.isclose(model(x, labels), source(x, labels))


def test_export_gives_a_model_that_runs_the_trained_weights(tmp_path: Path):
    state = CheckpointState.load_checkpoint(DIGITS / "checkpoint")
    model = Module(DIGITS / "training_model.onnx", state, DIGITS / "eval_model.onnx")
    optimizer = Optimizer(DIGITS / "optimizer_model.onnx", model)
    x, labels = batch(64)
    model(x, labels)
    optimizer.step()
    model.export_model_for_inferencing(tmp_path / "inference.onnx", ["logits"])
    weights = {name: parameter.data for name, parameter in state.parameters}
    with OrtEnvironment.getEnvironment().createSession(str(tmp_path / "inference.onnx")) as session:
        with session.run({"input": x}) as result:
            assert np.allclose(result[0].getValue(), forward(weights, x), atol=1e-5)
    with pytest.raises(OrtException, match="nothing"):
        model.export_model_for_inferencing(tmp_path / "other.onnx", ["nothing"])


# --- OrtValue -------------------------------------------------------------------------------------


def test_ort_value_has_onnx_runtimes_face_and_converts_to_and_from_onnx_tensor():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    value = OrtValue.ortvalue_from_numpy(array)
    assert value.shape() == [2, 3] and value.data_type() == "tensor(float)" and value.element_type() == 1
    assert value.device_name() == "cpu" and value.has_value() and value.is_tensor()
    assert not value.is_sparse_tensor() and not value.is_tensor_sequence()
    assert value.data_ptr() == array.ctypes.data  # read in place, as ONNX Runtime's on the CPU
    array[0, 0] = 10
    assert value.numpy()[0, 0] == 10
    value.update_inplace(np.ones(6, np.float32))
    assert np.array_equal(array, np.ones((2, 3), np.float32))
    labels = OrtValue.ortvalue_from_shape_and_type([4], np.int64)
    assert labels.element_type() == 7 and np.array_equal(labels.numpy(), np.zeros(4, np.int64))
    with OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), np.array([1.5], np.float64)) as tensor:
        wrapped = OrtValue(tensor)
        assert wrapped.as_onnx_tensor() is tensor and wrapped.data_type() == "tensor(double)"
        wrapped.close()
        assert not tensor.isClosed()  # a wrapped tensor stays its caller's
    with pytest.raises(ValueError):
        OrtValue(array)  # type: ignore[arg-type]
    with pytest.raises(OrtException, match="CPU memory"):
        OrtValue.ortvalue_from_numpy(array, "cuda")
    with pytest.raises(ValueError, match="element_type"):
        OrtValue.ortvalue_from_shape_and_type([2])
    with pytest.raises(OrtException):
        value.update_inplace(np.ones(6, np.float64))
    value.close()
    labels.close()


def test_ort_value_steps_return_ort_values_and_mixed_inputs_return_numpy():
    state = CheckpointState.load_checkpoint(DIGITS / "checkpoint")
    model = Module(DIGITS / "training_model.onnx", state)
    x, labels = batch(64)
    loss, logits = model(OrtValue.ortvalue_from_numpy(x), OrtValue.ortvalue_from_numpy(labels))
    assert isinstance(loss, OrtValue) and isinstance(logits, OrtValue) and logits.shape() == [8, 10]
    mixed = model(x, OrtValue.ortvalue_from_numpy(labels))
    assert isinstance(mixed[0], np.ndarray) and np.isclose(mixed[0], loss.numpy())


# --- What must never crash ------------------------------------------------------------------------


def test_parameters_and_values_outliving_their_state_and_module_do_not_crash(tmp_path: Path):
    """A Parameter holds its state; outputs are copies: once the Module is gone, they answer or raise an
    exception that says why (in a child process: a crash there fails this test, not the run)."""
    folder = copy_artifacts(TINY, tmp_path)
    child = run_child(f"""
        import gc
        import numpy as np
        from ort_cffi.api import CheckpointState, Module
        state = CheckpointState.load_checkpoint({str(folder / "checkpoint")!r})
        model = Module({str(folder / "training_model.onnx")!r}, state)
        parameter = state.parameters["fc2.bias"]
        loss_value = model(np.zeros((2, 784), np.float32), np.zeros(2, np.int64))
        del state, model
        gc.collect()
        print(parameter.requires_grad, parameter.grad, float(loss_value))
        try:
            parameter.data
        except Exception as exc:
            print(type(exc).__name__)
    """)
    words = child.stdout.split()
    assert words[:2] == ["True", "None"] and float(words[2]) > 0 and words[3] == "OrtException", child.stdout


def test_misuse_after_close_raises_and_never_crashes(tmp_path: Path):
    """Closed states and values, and a Module over a closed state: each call raises (in a child process: a
    crash there fails this test, not the run)."""
    folder = copy_artifacts(TINY, tmp_path)
    child = run_child(f"""
        import numpy as np
        from ort_cffi.api import CheckpointState, Module, Optimizer, OrtValue
        folder = {str(folder)!r}
        x, labels = np.zeros((2, 784), np.float32), np.zeros(2, np.int64)
        state = CheckpointState.load_checkpoint(folder + "/checkpoint")
        model = Module(folder + "/training_model.onnx", state, folder + "/eval_model.onnx")
        optimizer = Optimizer(folder + "/optimizer_model.onnx", model)
        state.close()  # the Module keeps it alive for itself
        print(float(model(x, labels)) > 0)
        optimizer.step()
        calls = [
            lambda: state.properties.__setitem__("a", 1),
            lambda: CheckpointState.save_checkpoint(state, folder + "/saved"),
            lambda: Module(folder + "/training_model.onnx", CheckpointState.load_checkpoint(folder + "/checkpoint"))(x),
        ]
        value = OrtValue.ortvalue_from_numpy(x)
        value.close()
        calls += [lambda: value.numpy(), lambda: model(value, OrtValue.ortvalue_from_numpy(labels)), value.shape]
        for call in calls:
            try:
                call()
                print("no error")
            except Exception as exc:
                print(type(exc).__name__)
    """)
    assert child.stdout.split() == ["True", "OrtClosedException", "OrtClosedException", "OrtInvalidArgumentException",
                                    "OrtClosedException", "OrtClosedException", "OrtClosedException"], child.stdout
