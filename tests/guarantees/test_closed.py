"""Closed means closed.

Every public method of every handle-owning object raises a clear error (an ``OrtException`` that
says "closed") after ``close()``; closing twice, in any order, is harmless; a value taken from a
``Result`` is unusable once the ``Result`` is closed; a closed tensor (or options object, or
checkpoint state) passed to a call raises. A missing closed check is a use-after-free, so the cases
run in child processes (``_childcases``), which also check that nothing is left alive.
"""
from __future__ import annotations

import inspect
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from _childcases import artifact_session, case, cases, check
from conftest import ARTIFACTS, tiny_batch
from ort_cffi import (
    OnnxTensor,
    OrtEnvironment,
    OrtException,
    OrtSession,
    OrtTrainingSession,
    Result,
    RunOptions,
    SessionOptions,
)
from ort_cffi import OrtCheckpointState

TINY = ARTIFACTS / "tiny"
LOSS = "onnx::loss::8"

env = None
BATCH = None
TMP = None
INFERENCE_MODEL = None
N_PARAMS = 0


def child_setup() -> None:
    global env, BATCH, TMP, INFERENCE_MODEL, N_PARAMS
    env = OrtEnvironment.getEnvironment()
    BATCH = tiny_batch()
    TMP = Path(tempfile.mkdtemp(prefix="ort_cffi_closed_", dir=os.getcwd()))  # inside the scratch folder the harness removes
    INFERENCE_MODEL = TMP / "inference.onnx"
    with artifact_session("tiny") as session:
        session.exportModelForInference(INFERENCE_MODEL, [LOSS])
        N_PARAMS = session.getParametersSize()


def _allocator():
    return OrtEnvironment.getEnvironment().defaultAllocator


# The call made on a closed object, for every public method of each class. A method missing here
# fails test_every_public_method_is_covered: add it when the class grows.
SESSION_CALLS = {
    "addProperty": lambda o: o.addProperty("p", 1),
    "copyBufferToParameters": lambda o: o.copyBufferToParameters(np.zeros(N_PARAMS, np.float32)),
    "copyParametersToBuffer": lambda o: o.copyParametersToBuffer(),
    "evalStep": lambda o: o.evalStep(BATCH),
    "exportModelForInference": lambda o: o.exportModelForInference(TMP / "closed-export.onnx", [LOSS]),
    "getCheckpointState": lambda o: o.getCheckpointState(),
    "getEvalInputNames": lambda o: o.getEvalInputNames(),
    "getEvalOutputNames": lambda o: o.getEvalOutputNames(),
    "getFloatProperty": lambda o: o.getFloatProperty("p"),
    "getIntProperty": lambda o: o.getIntProperty(_allocator(), "p"),
    "getStringProperty": lambda o: o.getStringProperty("p"),
    "getLearningRate": lambda o: o.getLearningRate(),
    "getParametersSize": lambda o: o.getParametersSize(),
    "getTrainInputNames": lambda o: o.getTrainInputNames(),
    "getTrainOutputNames": lambda o: o.getTrainOutputNames(),
    "lazyResetGrad": lambda o: o.lazyResetGrad(),
    "optimizerStep": lambda o: o.optimizerStep(),
    "registerLinearLRScheduler": lambda o: o.registerLinearLRScheduler(1, 10, 0.1),
    "saveCheckpoint": lambda o: o.saveCheckpoint(TMP / "closed.ckpt"),
    "schedulerStep": lambda o: o.schedulerStep(),
    "setLearningRate": lambda o: o.setLearningRate(0.1),
    "trainStep": lambda o: o.trainStep(BATCH),
}
STATE_CALLS = {
    "addProperty": lambda o: o.addProperty("p", "v"),
    "getFloatProperty": lambda o: o.getFloatProperty("p"),
    "getIntProperty": lambda o: o.getIntProperty("p"),
    "getStringProperty": lambda o: o.getStringProperty(_allocator(), "p"),
    "getParameter": lambda o: o.getParameter("fc1.bias"),
    "getParameterTypeAndShape": lambda o: o.getParameterTypeAndShape("fc1.bias"),
    "saveCheckpoint": lambda o: o.saveCheckpoint(TMP / "closed-state.ckpt"),
    "updateParameter": lambda o: o.updateParameter("fc1.bias", np.zeros(16, np.float32)),
}
TENSOR_CALLS = {
    "getInfo": lambda o: o.getInfo(),
    "getType": lambda o: o.getType(),
    "getValue": lambda o: o.getValue(),
    "getBufferRef": lambda o: o.getBufferRef(),
    "ownsBuffer": lambda o: o.ownsBuffer(),
    "getByteBuffer": lambda o: o.getByteBuffer(),
    "getFloatBuffer": lambda o: o.getFloatBuffer(),
    "getDoubleBuffer": lambda o: o.getDoubleBuffer(),
    "getShortBuffer": lambda o: o.getShortBuffer(),
    "getIntBuffer": lambda o: o.getIntBuffer(),
    "getLongBuffer": lambda o: o.getLongBuffer(),
    "getStringTensor": lambda o: o.getStringTensor(),
}
SESSION_OPTIONS_CALLS = {
    "addCUDA": lambda o: o.addCUDA(0),
    "addConfigEntry": lambda o: o.addConfigEntry("session.intra_op.allow_spinning", "0"),
    "getConfigEntries": lambda o: o.getConfigEntries(),
    "disableProfiling": lambda o: o.disableProfiling(),
    "enableProfiling": lambda o: o.enableProfiling(TMP / "closed-profile"),
    "setCPUArenaAllocator": lambda o: o.setCPUArenaAllocator(False),
    "setDeterministicCompute": lambda o: o.setDeterministicCompute(True),
    "setExecutionMode": lambda o: o.setExecutionMode(SessionOptions.ExecutionMode.SEQUENTIAL),
    "setInterOpNumThreads": lambda o: o.setInterOpNumThreads(1),
    "setIntraOpNumThreads": lambda o: o.setIntraOpNumThreads(1),
    "setLogLevel": lambda o: o.setLogLevel(3),
    "setLoggerId": lambda o: o.setLoggerId("x"),
    "setMemoryPatternOptimization": lambda o: o.setMemoryPatternOptimization(False),
    "setOptimizationLevel": lambda o: o.setOptimizationLevel(SessionOptions.OptLevel.NO_OPT),
    "setOptimizedModelFilePath": lambda o: o.setOptimizedModelFilePath(TMP / "closed-optimized.onnx"),
    "setSessionLogLevel": lambda o: o.setSessionLogLevel(3),
    "setSessionLogVerbosityLevel": lambda o: o.setSessionLogVerbosityLevel(0),
    "setSymbolicDimensionValue": lambda o: o.setSymbolicDimensionValue("batch", 2),
}
RUN_OPTIONS_CALLS = {
    "addRunConfigEntry": lambda o: o.addRunConfigEntry("k", "v"),
    "getLogLevel": lambda o: o.getLogLevel(),
    "getLogVerbosityLevel": lambda o: o.getLogVerbosityLevel(),
    "getRunTag": lambda o: o.getRunTag(),
    "setLogLevel": lambda o: o.setLogLevel(3),
    "setLogVerbosityLevel": lambda o: o.setLogVerbosityLevel(0),
    "setRunTag": lambda o: o.setRunTag("tag"),
    "setTerminate": lambda o: o.setTerminate(True),
}
INFERENCE_CALLS = {
    "getInputInfo": lambda o: o.getInputInfo(),
    "getInputNames": lambda o: o.getInputNames(),
    "getMetadata": lambda o: o.getMetadata(),
    "getNumInputs": lambda o: o.getNumInputs(),
    "getNumOutputs": lambda o: o.getNumOutputs(),
    "getOutputInfo": lambda o: o.getOutputInfo(),
    "getOutputNames": lambda o: o.getOutputNames(),
    "run": lambda o: o.run(BATCH),
}
RESULT_CALLS = {  # what hands out values must raise; size/len/keys/`in` may still answer
    "get(int)": lambda o: o.get(0),
    "get(str)": lambda o: o.get(LOSS),
    "[int]": lambda o: o[0],
    "[str]": lambda o: o[LOSS],
    "iter": lambda o: list(iter(o)),
    "values": lambda o: o.values(),
    "items": lambda o: o.items(),
}
RESULT_MAY_ANSWER = {"size", "keys"}

TABLES = {
    OrtTrainingSession: SESSION_CALLS,
    OrtCheckpointState: STATE_CALLS,
    OnnxTensor: TENSOR_CALLS,
    SessionOptions: SESSION_OPTIONS_CALLS,
    RunOptions: RUN_OPTIONS_CALLS,
    OrtSession: INFERENCE_CALLS,
}
NOT_INSTANCE_METHODS = {"close", "isClosed", "toString"}  # toString answers, as repr does (Java prints closed=true)


def _closed_failures(obj, calls: dict) -> list:
    """Each call of ``calls`` on ``obj`` that does not raise an OrtException saying 'closed'."""
    failures = []
    for name, call in calls.items():
        try:
            value = call(obj)
        except OrtException as exc:
            if "closed" not in str(exc).lower():
                failures.append(f"{name}: OrtException without 'closed': {exc}")
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            failures.append(f"{name}: returned {value!r} instead of raising")
    return failures


def _assert_all_raise_closed(obj, calls: dict, what: str) -> None:
    failures = _closed_failures(obj, calls)
    assert not failures, f"closed {what}:\n  " + "\n  ".join(failures)
    repr(obj)  # still printable
    assert obj.closed and obj.isClosed() if hasattr(obj, "isClosed") else obj.closed


# --- every method after close ----------------------------------------------------------------------


@case
def closed_training_session_with_its_own_checkpoint() -> None:
    session = artifact_session("tiny")
    state = session.getCheckpointState()
    session.close()
    _assert_all_raise_closed(session, SESSION_CALLS, "training session")
    _assert_all_raise_closed(state, STATE_CALLS, "checkpoint state the session loaded (closed with it)")
    for form in ((RunOptions(),), ({LOSS},), ({LOSS}, None, None)):
        for step in (session.trainStep, session.evalStep):
            with pytest.raises(OrtException, match="closed"):
                step(BATCH, *form)
        for obj in form:
            if isinstance(obj, RunOptions):
                obj.close()


@case
def closed_training_session_with_the_callers_checkpoint() -> None:
    with OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") as state:
        session = artifact_session("tiny", checkpoint=state)
        session.close()
        _assert_all_raise_closed(session, SESSION_CALLS, "training session")
        state.addProperty("still", 1)  # the caller's state stays usable
        assert state.getIntProperty("still") == 1
        state.saveCheckpoint(TMP / "after-session-closed.ckpt")


@case
def closed_checkpoint_state() -> None:
    state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    state.close()
    _assert_all_raise_closed(state, STATE_CALLS, "checkpoint state")
    with pytest.raises(OrtException, match="closed"):
        artifact_session("tiny", checkpoint=state)


@case
def callers_checkpoint_closed_while_its_session_is_open() -> None:
    """Closed for its user at once; the session keeps it alive (or refuses cleanly) until it closes."""
    state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    session = artifact_session("tiny", checkpoint=state)
    with session.trainStep(BATCH) as result:
        expected = result[0].getValue()
    state.close()
    _assert_all_raise_closed(state, STATE_CALLS, "checkpoint state (bound)")
    with session.trainStep(BATCH) as result:
        np.testing.assert_array_equal(result[0].getValue(), expected)
    session.optimizerStep()
    session.close()


@case
def closed_tensor_over_an_array() -> None:
    tensor = OnnxTensor.createTensor(env, np.ones((2, 3), np.float32))
    tensor.close()
    _assert_all_raise_closed(tensor, TENSOR_CALLS, "tensor over an array")
    assert tensor.toString().endswith(",closed=true)")  # Java's toString answers on a closed tensor


@case
def closed_string_tensor() -> None:
    tensor = OnnxTensor.createTensor(env, ["a", "b"])
    tensor.close()
    _assert_all_raise_closed(tensor, TENSOR_CALLS, "string tensor")


@case
def closed_tensor_the_runtime_allocated() -> None:
    with artifact_session("tiny") as session:
        result = session.trainStep(BATCH)
        value = result[0]
        value.close()
        try:
            _assert_all_raise_closed(value, TENSOR_CALLS, "tensor the runtime allocated")
        finally:
            result.close()


@case
def closed_result_and_the_values_taken_from_it() -> None:
    with artifact_session("tiny") as session:
        result = session.trainStep(BATCH)
        value = result[0]
        by_name = result.get(LOSS).get()
        entries = list(result)
        result.close()
        failures = _closed_failures(result, RESULT_CALLS)
        calls = {k: v for k, v in TENSOR_CALLS.items() if k != "getType"}  # getType is checked elsewhere
        for taken in (value, by_name, entries[0][1]):
            _assert_all_raise_closed(taken, calls, "value taken from a closed Result")
            for step in (session.trainStep, session.evalStep):
                with pytest.raises(OrtException, match="closed"):
                    step({"input": taken, "labels": BATCH["labels"]})
        assert result.size() == 1 and len(result) == 1 and result.keys() == [LOSS]  # metadata may answer
        assert not failures, "closed Result:\n  " + "\n  ".join(failures)


@case
def pinned_outputs_stay_open_after_their_result_closes() -> None:
    with artifact_session("tiny") as session:
        with OnnxTensor.createTensor(env, np.zeros((), np.float32)) as pinned:
            result = session.trainStep(BATCH, {LOSS: pinned})
            result.close()
            assert not pinned.closed
            assert pinned.getValue() != 0
            with session.trainStep(BATCH, {LOSS: pinned}) as again:  # and usable again
                assert again[LOSS] is pinned


@case
def closed_session_options() -> None:
    options = SessionOptions()
    options.close()
    _assert_all_raise_closed(options, SESSION_OPTIONS_CALLS, "SessionOptions")


@case
def closed_run_options() -> None:
    run_options = RunOptions()
    run_options.close()
    _assert_all_raise_closed(run_options, RUN_OPTIONS_CALLS, "RunOptions")


@case
def closed_inference_session() -> None:
    session = env.createSession(str(INFERENCE_MODEL))
    with session.run(BATCH) as result:
        assert result[0].getValue().shape == ()
    session.close()
    _assert_all_raise_closed(session, INFERENCE_CALLS, "OrtSession")


# --- closed objects passed to calls ---------------------------------------------------------------


@case
def closed_tensor_passed_as_input_raises() -> None:
    with artifact_session("tiny") as session:
        closed = OnnxTensor.createTensor(env, BATCH["input"])
        closed.close()
        labels = OnnxTensor.createTensor(env, BATCH["labels"])
        with RunOptions() as run_options, OnnxTensor.createTensor(env, np.zeros((), np.float32)) as pinned:
            for step in (session.trainStep, session.evalStep):
                for form in ((), (run_options,), ({LOSS},), ({LOSS: pinned},), ({LOSS}, None, run_options)):
                    with pytest.raises(OrtException, match="closed"):
                        step({"input": closed, "labels": labels}, *form)
        labels.close()
        with pytest.raises(OrtException, match="closed"):
            session.trainStep({"input": BATCH["input"], "labels": labels})
    inference = env.createSession(str(INFERENCE_MODEL))
    with inference:
        with pytest.raises(OrtException, match="closed"):
            inference.run({"input": closed, "labels": BATCH["labels"]})


@case
def closed_pinned_output_raises() -> None:
    with artifact_session("tiny") as session:
        pinned = OnnxTensor.createTensor(env, np.zeros((), np.float32))
        pinned.close()
        for step in (session.trainStep, session.evalStep):
            with pytest.raises(OrtException, match="closed"):
                step(BATCH, {LOSS: pinned})


@case
def closed_run_options_raise() -> None:
    run_options = RunOptions()
    run_options.close()
    with artifact_session("tiny") as session:
        for call in (
            lambda: session.trainStep(BATCH, run_options),
            lambda: session.evalStep(BATCH, runOptions=run_options),
            lambda: session.optimizerStep(run_options),
        ):
            with pytest.raises(OrtException, match="closed"):
                call()
    with env.createSession(str(INFERENCE_MODEL)) as inference:
        with pytest.raises(OrtException, match="closed"):
            inference.run(BATCH, run_options)


@case
def closed_session_options_raise_and_release_the_checkpoint() -> None:
    options = SessionOptions()
    options.close()
    with pytest.raises(OrtException, match="closed"):
        artifact_session("tiny", options=options)  # the checkpoint it loaded must not leak (harness)
    with OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") as state:
        with pytest.raises(OrtException, match="closed"):
            artifact_session("tiny", checkpoint=state, options=options)
        with artifact_session("tiny", checkpoint=state) as session:  # not left bound to a dead session
            session.trainStep(BATCH).close()
    with pytest.raises(OrtException, match="closed"):
        env.createSession(str(INFERENCE_MODEL), options)


# --- closing twice, in every order ------------------------------------------------------------------


@case
def closing_twice_is_harmless() -> None:
    objects = [SessionOptions(), RunOptions(), OnnxTensor.createTensor(env, np.zeros(3, np.float32))]
    objects.append(OrtCheckpointState.loadCheckpoint(TINY / "checkpoint"))
    objects.append(artifact_session("tiny"))
    objects.append(env.createSession(str(INFERENCE_MODEL)))
    with objects[4].trainStep(BATCH) as result:
        objects.append(result)
    objects.append(objects[4].trainStep(BATCH))
    for obj in objects:
        obj.close()
        obj.close()
        with obj:  # entering and leaving a closed object is harmless too
            pass
        obj.close()
    env.close()
    env.close()
    with artifact_session("tiny") as session:  # the environment's close is Java's no-op
        session.trainStep(BATCH).close()


@case
def closing_session_and_checkpoint_in_every_order() -> None:
    for order in ("state, session", "session, state", "state twice, session twice", "session, state, session"):
        state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
        session = artifact_session("tiny", checkpoint=state)
        result = session.trainStep(BATCH)
        value = result[0]
        named = {"state": state, "session": session}
        for step in order.split(", "):
            obj = named[step.split()[0]]
            obj.close()
            if "twice" in step:
                obj.close()
        value.getValue()  # a value the runtime allocated is independent of its session
        result.close()
        result.close()
        value.close()


@case
def closing_values_before_and_after_their_result() -> None:
    with artifact_session("twoout") as session:
        batch = tiny_batch(batch=8, features=20, classes=3)
        result = session.evalStep(batch)
        result[0].close()
        result.close()
        result = session.evalStep(batch)
        first, second = result[0], result[1]
        result.close()
        first.close()
        second.close()


# --- the parent side ----------------------------------------------------------------------------------


def _public_methods(cls) -> set:
    names = set()
    for name in dir(cls):
        if name.startswith("_") or name in NOT_INSTANCE_METHODS:
            continue
        attribute = inspect.getattr_static(cls, name)
        if isinstance(attribute, (staticmethod, classmethod, property, type)):
            continue
        if callable(attribute):
            names.add(name)
    return names


@pytest.mark.parametrize("cls", list(TABLES), ids=lambda c: c.__name__)
def test_every_public_method_is_covered(cls) -> None:
    """The tables above must name every public method, so that each is tried on a closed object."""
    missing = _public_methods(cls) - set(TABLES[cls])
    assert not missing, f"{cls.__name__} methods without a closed-object call in test_closed.py: {sorted(missing)}"


def test_result_methods_are_covered() -> None:
    covered = {"get", "values", "items"} | RESULT_MAY_ANSWER
    missing = _public_methods(Result) - covered
    assert not missing, f"Result methods without a closed-object check: {sorted(missing)}"


@pytest.mark.parametrize("name", cases(__name__))
def test_closed(name: str, request) -> None:
    check(__name__, name, timeout=300, request=request)
