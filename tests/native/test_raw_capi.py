"""The raw layer, used as its users would: the declared tables against known slot indices, and a
whole training step written with raw C API calls only."""
from __future__ import annotations

import numpy as np
import pytest

from ort_cffi.capi import API_VERSION, check_status, ffi, get_runtime

from conftest import load_java_input, load_java_output

POINTER = ffi.sizeof("void*")


def slot(table: str, name: str) -> int:
    return ffi.offsetof(table, name) // POINTER


@pytest.mark.parametrize(
    "name, index",
    [
        ("CreateStatus", 0),
        ("ReleaseCustomOpDomain", 101),
        ("ReleaseKernelInfo", 218),
        ("GetTrainingApi", 219),
        ("ReleaseCANNProviderOptions", 224),
        ("GetSessionConfigEntry", 238),
        ("GetBuildInfoString", 254),
    ],
)
def test_ortapi_slot_indices(name, index):
    assert slot("OrtApi", name) == index


TRAINING_SLOTS = (
    "LoadCheckpoint SaveCheckpoint CreateTrainingSession CreateTrainingSessionFromBuffer "
    "TrainingSessionGetTrainingModelOutputCount TrainingSessionGetEvalModelOutputCount "
    "TrainingSessionGetTrainingModelOutputName TrainingSessionGetEvalModelOutputName LazyResetGrad TrainStep "
    "EvalStep SetLearningRate GetLearningRate OptimizerStep RegisterLinearLRScheduler SchedulerStep "
    "GetParametersSize CopyParametersToBuffer CopyBufferToParameters ReleaseTrainingSession "
    "ReleaseCheckpointState ExportModelForInferencing SetSeed TrainingSessionGetTrainingModelInputCount "
    "TrainingSessionGetEvalModelInputCount TrainingSessionGetTrainingModelInputName "
    "TrainingSessionGetEvalModelInputName AddProperty GetProperty LoadCheckpointFromBuffer "
    "GetParameterTypeAndShape UpdateParameter GetParameter"
).split()


def test_training_api_has_all_33_slots_in_order():
    assert len(TRAINING_SLOTS) == 33
    assert ffi.sizeof("OrtTrainingApi") == 33 * POINTER
    for index, name in enumerate(TRAINING_SLOTS):
        assert slot("OrtTrainingApi", name) == index, name


def test_tables_are_typed_function_pointers():
    """Every slot of both tables is a typed function pointer (cffi's kind 'function'), none a void*."""
    for table in ("OrtApi", "OrtTrainingApi"):
        kinds = {name: field.type.kind for name, field in ffi.typeof(table).fields}
        assert set(kinds.values()) == {"function"}, table
    train_step = dict(ffi.typeof("OrtTrainingApi").fields)["TrainStep"].type
    assert train_step.result is ffi.typeof("OrtStatus*")
    assert train_step.args[2:] == tuple(ffi.typeof(t) for t in ("size_t", "OrtValue**", "size_t", "OrtValue**"))


@pytest.mark.needs_training_build  # the raw OrtTrainingApi table of the 1.19.2 build
def test_runtime_tables():
    rt = get_runtime()
    assert rt.version == "1.19.2"
    assert rt.api != ffi.NULL and rt.training_api != ffi.NULL
    assert ffi.string(rt.api_base.GetVersionString()).decode() == rt.version
    assert rt.training_api.SetSeed(42) == ffi.NULL
    # The table is the one GetTrainingApi hands out for the declared API version.
    assert rt.api.GetTrainingApi(API_VERSION) == rt.training_api
    build_info = ffi.string(rt.api.GetBuildInfoString()).decode()
    assert "1.19.2" in build_info or "ORT Build Info" in build_info


def test_status_chokepoint_recovers_the_wrapped_code():
    from ort_cffi import OrtErrorCode, OrtException

    rt = get_runtime()
    status = rt.api.CreateStatus(6, b"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : something")
    with pytest.raises(OrtException) as info:
        check_status(status, "context")
    assert info.value.getCode() == OrtErrorCode.ORT_INVALID_ARGUMENT
    assert "context: [ONNXRuntimeError]" in str(info.value)


@pytest.mark.needs_training_build  # the raw OrtTrainingApi table of the 1.19.2 build
def test_a_whole_train_step_with_raw_calls(java_data):
    """Checkpoint, session, tensors, train step, optimizer step, releases: the C API from Python."""
    rt = get_runtime()
    api, train = rt.api, rt.training_api

    def ok(status):
        if status != ffi.NULL:
            message = ffi.string(api.GetErrorMessage(status)).decode()
            api.ReleaseStatus(status)
            raise AssertionError(message)

    env = ffi.new("OrtEnv**")
    ok(api.CreateEnv(3, b"raw-test", env))
    options = ffi.new("OrtSessionOptions**")
    ok(api.CreateSessionOptions(options))
    state = ffi.new("OrtCheckpointState**")
    ok(train.LoadCheckpoint(str(java_data / "checkpoint.ckpt").encode(), state))
    session = ffi.new("OrtTrainingSession**")
    ok(
        train.CreateTrainingSession(
            env[0], options[0], state[0],
            str(java_data / "training_model.onnx").encode(), ffi.NULL, str(java_data / "adamw.onnx").encode(),
            session,
        )
    )
    count = ffi.new("size_t*")
    ok(train.TrainingSessionGetTrainingModelInputCount(session[0], count))
    assert count[0] == 2
    allocator = ffi.new("OrtAllocator**")
    ok(api.GetAllocatorWithDefaultOptions(allocator))
    name = ffi.new("char**")
    ok(train.TrainingSessionGetTrainingModelInputName(session[0], 0, allocator[0], name))
    assert ffi.string(name[0]) == b"input-0"
    ok(api.AllocatorFree(allocator[0], name[0]))

    memory = ffi.new("OrtMemoryInfo**")
    ok(api.CreateCpuMemoryInfo(0, 0, memory))
    images = load_java_input(java_data).reshape(2, 784)
    labels = np.array([1, 1], dtype=np.int32)
    inputs = ffi.new("OrtValue*[2]")
    for i, (array, onnx_type) in enumerate(((images, 1), (labels, 6))):
        shape = ffi.new("int64_t[]", array.shape)
        ok(api.CreateTensorWithDataAsOrtValue(
            memory[0], ffi.from_buffer(array), array.nbytes, shape, array.ndim, onnx_type, ffi.addressof(inputs, i)
        ))
    outputs = ffi.new("OrtValue*[1]")
    losses = []
    for _ in range(2):
        ok(train.TrainStep(session[0], ffi.NULL, 2, inputs, 1, outputs))
        data = ffi.new("void**")
        ok(api.GetTensorMutableData(outputs[0], data))
        losses.append(ffi.cast("float*", data[0])[0])
        api.ReleaseValue(outputs[0])
        outputs[0] = ffi.NULL
        ok(train.OptimizerStep(session[0], ffi.NULL))
        ok(train.LazyResetGrad(session[0]))

    expected_1 = load_java_output(java_data / "loss_1.out")[0]
    expected_2 = load_java_output(java_data / "loss_2.out")[0]
    # ONNX Runtime's .out files were written on another machine, and the runtime's float32 kernels depend on
    # the CPU (MLAS dispatches on its instruction set): not bit-comparable. Measured on an AVX-512 EPYC: 1 ulp
    # off each (2.4e-7 and 3e-8). abs=1e-5 allows about 40 ulps at 2.18, far below what a wrong input
    # order, a skipped optimizer step (0.36 vs 2.18) or a wrong dtype would give. (The Java test allows 1e-3.)
    assert losses[0] == pytest.approx(expected_1, abs=1e-5)
    assert losses[1] == pytest.approx(expected_2, abs=1e-5)

    for i in range(2):
        api.ReleaseValue(inputs[i])
    api.ReleaseMemoryInfo(memory[0])
    train.ReleaseTrainingSession(session[0])
    train.ReleaseCheckpointState(state[0])  # after its session, never before
    api.ReleaseSessionOptions(options[0])
    api.ReleaseEnv(env[0])


def test_the_generated_declarations_are_the_headers():
    """ort_cffi/_native/ffi_abi.py (cffi's out-of-line ABI mode, made by scripts/make_ffi.py) is exactly what
    the headers in include/ give, and it is the one in use: a stale module would mean declarations
    other than the headers' (the loader would then parse the headers instead, slowly)."""
    import subprocess
    import sys

    from conftest import ROOT
    from ort_cffi._native import ffi as _ffi
    from ort_cffi._native import ffi_abi as _ffi_abi

    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_ffi.py"), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _ffi_abi.HEADERS_SHA256 == _ffi.headers_digest(_ffi.header_texts())
    assert _ffi.ffi is _ffi_abi.ffi
    parsed = _ffi.parse_headers(_ffi.header_texts())  # the slow path agrees on every table's layout
    for table in ("OrtApiBase", "OrtApi", "OrtTrainingApi"):
        assert _ffi.ffi.sizeof(table) == parsed.sizeof(table)
        for field, _ in parsed.typeof(table).fields:
            assert _ffi.ffi.offsetof(table, field) == parsed.offsetof(table, field), (table, field)
