"""What the C training API has beyond the Java binding: parameter buffers, single parameters,
checkpoints and models from bytes, nominal checkpoints, inference on the same runtime, federated
averaging."""
from __future__ import annotations

import math

import numpy as np
import pytest

from ort_cffi import OnnxTensorType, OrtCheckpointState, OrtEnvironment, OrtErrorCode, OrtException, TensorInfo

from conftest import ARTIFACTS, run_child

env = OrtEnvironment.getEnvironment()
TINY = ARTIFACTS / "tiny"
PARAMETER_COUNT = 784 * 16 + 16 + 16 * 10 + 10


def batch(seed=0, n=4):
    rng = np.random.default_rng(seed)
    return {
        "input": rng.standard_normal((n, 784)).astype(np.float32),
        "labels": rng.integers(0, 10, size=n).astype(np.int64),
    }


def tiny(checkpoint="checkpoint", eval=True, optimizer=True, folder=TINY):
    ckpt = checkpoint if isinstance(checkpoint, OrtCheckpointState) else str(folder / checkpoint)
    return env.createTrainingSession(
        ckpt,
        str(folder / "training_model.onnx"),
        str(folder / "eval_model.onnx") if eval else None,
        str(folder / "optimizer_model.onnx") if optimizer else None,
    )


def train(session, steps, seed=0):
    losses = []
    for i in range(steps):
        with session.trainStep(batch(seed + i)) as r:
            losses.append(r.get(0).getValue().item())
        session.optimizerStep()
        session.lazyResetGrad()
    return losses


def test_parameter_buffer_round_trip_and_zero_weights_give_log_10():
    with tiny() as s:
        assert s.getParametersSize(True) == s.getParametersSize(False) == PARAMETER_COUNT
        buffer = s.copyParametersToBuffer(True)
        assert buffer.dtype == np.float32 and buffer.shape == (PARAMETER_COUNT,)
        s.copyBufferToParameters(np.zeros(PARAMETER_COUNT, np.float32), True)
        with s.trainStep(batch()) as r:
            # Zero weights give uniform logits: the loss is log(10) up to the runtime's exp/log kernels, whose last
            # bits depend on the CPU. abs=1e-6 is about 4 ulps at 2.30 (measured on an AVX-512 EPYC: 0 ulps).
            assert r.get(0).getValue().item() == pytest.approx(math.log(10), abs=1e-6)
        s.copyBufferToParameters(buffer, True)
        np.testing.assert_array_equal(s.copyParametersToBuffer(False), buffer)


def test_buffer_size_and_dtype_are_checked_before_c():
    with tiny() as s:
        for bad, message in (
            (np.zeros(PARAMETER_COUNT - 1, np.float32), f"1-D with {PARAMETER_COUNT} elements"),
            (np.zeros((PARAMETER_COUNT, 1), np.float32), "1-D"),
            (np.zeros(PARAMETER_COUNT, np.float64), "must be float32"),
            ([0.0] * PARAMETER_COUNT, "must be a numpy array"),
        ):
            with pytest.raises(OrtException, match=message):
                s.copyBufferToParameters(bad, True)
        strided = np.zeros(2 * PARAMETER_COUNT, np.float32)[::2]  # right size, not contiguous: copied once
        s.copyBufferToParameters(strided, True)


def test_single_parameter_get_update_and_type_and_shape():
    with tiny() as s:
        state = s.getCheckpointState()
        info = state.getParameterTypeAndShape("fc2.weight")
        assert isinstance(info, TensorInfo)
        assert info.getShape() == (10, 16) and info.onnxType == OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
        before = state.getParameter("fc2.bias")
        assert before.shape == (10,)
        state.updateParameter("fc2.bias", np.arange(10, dtype=np.float32))
        np.testing.assert_array_equal(state.getParameter("fc2.bias"), np.arange(10, dtype=np.float32))
        buffer = s.copyParametersToBuffer(True)
        np.testing.assert_array_equal(buffer[-10:], np.arange(10, dtype=np.float32))  # training-input order
        with pytest.raises(OrtException, match="is float32 of shape \\[10\\]"):
            state.updateParameter("fc2.bias", np.zeros(11, np.float32))
        with pytest.raises(OrtException, match="nope"):
            state.getParameter("nope")
    with OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") as unbound:
        with pytest.raises(OrtException, match="while a training session is bound"):
            unbound.getParameter("fc2.bias")


def test_same_losses_from_files_and_from_bytes():
    files = train_losses_from(tiny())
    blobs = {name: (TINY / name).read_bytes() for name in ("checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")}
    state = OrtCheckpointState.loadCheckpointFromBuffer(blobs["checkpoint"])
    from_bytes = env.createTrainingSession(state, blobs["training_model.onnx"], blobs["eval_model.onnx"], blobs["optimizer_model.onnx"])
    with from_bytes:
        assert train(from_bytes, 5) == files
        with pytest.raises(OrtException, match="cannot export a model for inference when the eval model was loaded from bytes") as info:
            from_bytes.exportModelForInference("/tmp/never.onnx", ["logits"])
        assert info.value.getCode() == OrtErrorCode.ORT_NOT_IMPLEMENTED
    state.close()
    with pytest.raises(OrtException, match="all models as paths or all as bytes"):
        env.createTrainingSession(str(TINY / "checkpoint"), blobs["training_model.onnx"], str(TINY / "eval_model.onnx"))


def train_losses_from(session):
    with session:
        return train(session, 5)


def test_nominal_checkpoint_refuses_steps_until_filled_then_trains_exactly_as_the_full_one():
    with tiny() as trained:
        train(trained, 3, seed=100)
        weights = trained.copyParametersToBuffer(False)
        with trained.evalStep(batch(7)) as r:
            eval_full = r.get(0).getValue().item()
    with tiny("nominal_checkpoint") as nominal:
        with pytest.raises(OrtException, match="nominal"):
            nominal.trainStep(batch())
        with pytest.raises(OrtException, match="nominal"):
            nominal.exportModelForInference("/tmp/never.onnx", ["logits"])
        nominal.copyBufferToParameters(weights, False)
        with nominal.evalStep(batch(7)) as r:
            assert r.get(0).getValue().item() == eval_full
        nominal_losses = train(nominal, 5)
    with tiny() as full:
        full.copyBufferToParameters(weights, False)
        assert train(full, 5) == nominal_losses


@pytest.mark.needs_onnxruntime_python
def test_inference_outputs_equal_onnxruntime_inference_session(tmp_path):
    model = tmp_path / "inference.onnx"
    with tiny() as s:
        train(s, 5)
        s.exportModelForInference(model, ["logits"])
    x = batch(3, n=16)["input"]
    with env.createSession(str(model)) as inference:
        assert inference.getInputNames() == {"input"} and tuple(inference.getOutputNames()) == ("logits",)
        assert inference.getInputInfo()["input"].getShape() == (-1, 784)
        assert inference.getInputInfo()["input"].getInfo().getShape() == (-1, 784)  # Java's NodeInfo.getInfo()
        assert inference.getInputInfo()["input"].getName() == "input"
        assert inference.getOutputInfo()["logits"].onnxType == OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
        with inference.run({"input": x}) as r:
            ours = r["logits"].getValue()
        with inference.run({"input": x}, ["logits"]) as r:
            np.testing.assert_array_equal(r.get(0).getValue(), ours)
    with env.createSession(model.read_bytes()) as from_bytes, from_bytes.run({"input": x}) as r:
        np.testing.assert_array_equal(r.get(0).getValue(), ours)
    np.save(tmp_path / "x.npy", x)
    run_child(
        f"""
        import numpy as np, onnxruntime
        sess = onnxruntime.InferenceSession({str(model)!r}, providers=["CPUExecutionProvider"])
        np.save({str(tmp_path / 'theirs.npy')!r}, sess.run(["logits"], {{"input": np.load({str(tmp_path / 'x.npy')!r})}})[0])
        """
    )
    np.testing.assert_array_equal(ours, np.load(tmp_path / "theirs.npy"))


def test_inference_session_errors_are_clear(tmp_path):
    with pytest.raises(OrtException, match="does not exist"):
        env.createSession(str(tmp_path / "missing.onnx"))
    with tiny() as s:
        s.exportModelForInference(tmp_path / "m.onnx", ["logits"])
    with env.createSession(tmp_path / "m.onnx") as inference:
        with pytest.raises(OrtException, match="unknown input names \\['nope'\\]"):
            inference.run({"nope": np.zeros((1, 784), np.float32)})
        with pytest.raises(OrtException, match="unknown or no requested outputs"):
            inference.run({"input": np.zeros((1, 784), np.float32)}, ["nope"])
        with pytest.raises(OrtException):
            inference.run({"input": np.zeros((1, 783), np.float32)})


def test_federated_averaging_round():
    """Two clients train on their own data; the example-weighted average loads into a third."""
    with tiny() as server:
        global_weights = server.copyParametersToBuffer(True)
    client_weights, counts = [], [3, 5]
    for client, steps in enumerate(counts):
        with tiny() as s:
            s.copyBufferToParameters(global_weights, True)
            train(s, steps, seed=1000 * (client + 1))
            client_weights.append(s.copyParametersToBuffer(True))
    assert not np.array_equal(client_weights[0], client_weights[1])
    average = (client_weights[0] * counts[0] + client_weights[1] * counts[1]) / sum(counts)
    with tiny() as third:
        third.copyBufferToParameters(average.astype(np.float32), True)
        np.testing.assert_array_equal(third.copyParametersToBuffer(True), average.astype(np.float32))
        with third.evalStep(batch(0)) as r:
            assert np.isfinite(r.get(0).getValue().item())


def test_cuda_check_script_reports_a_cpu_runtime_clearly():
    """scripts/check_cuda.py compares CUDA with CPU losses where a GPU exists; here, the error path."""
    proc = run_child(
        "import runpy, sys; sys.argv = ['check_cuda.py', '--steps', '2']; runpy.run_path('scripts/check_cuda.py', run_name='__main__')",
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "no CUDA here" in proc.stderr and "onnxruntime-training==1.19.2" in proc.stderr
