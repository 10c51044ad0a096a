"""Java methods that the Java map (docs/java-map.md) found missing and that were cheap to add:
SessionOptions' optimized-model path, profiling, symbolic dimension values and deterministic
compute; the enums' getValue/getID/mapFromInt; OrtEnvironment.getEnvironment(name). Each is
checked for what it does on the real runtime, not only for being there."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import DIGITS, run_child
from ort_cffi import OrtEnvironment, OrtErrorCode, OrtException, OrtLoggingLevel, SessionOptions

env = OrtEnvironment.getEnvironment()


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory: pytest.TempPathFactory):
    """The embedded digits eval graph exported for inference (input "input" [batch, 64], output "logits")."""
    path = tmp_path_factory.mktemp("model") / "model.onnx"
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as s:
        s.exportModelForInference(path, ["logits"])
    return path


def images(n: int) -> np.ndarray:
    with np.load(DIGITS / "digits.npz") as data:
        return data["val_input"][:n]


def logits(model, x: np.ndarray, options=None) -> np.ndarray:
    with env.createSession(model, options) as session, session.run({"input": x}) as result:
        return result.get(0).getValue()


def test_optimized_model_file_is_written_and_gives_the_same_outputs(digits_model, tmp_path):
    optimized = tmp_path / "optimized.onnx"
    with SessionOptions() as options:
        options.setOptimizedModelFilePath(optimized)
        expected = logits(digits_model, images(5), options)
    assert optimized.stat().st_size > 0
    np.testing.assert_allclose(logits(optimized, images(5)), expected, rtol=1e-6)


def test_profiling_writes_a_trace_when_the_session_closes_and_disable_undoes_it(digits_model, tmp_path):
    with SessionOptions() as options:
        options.enableProfiling(tmp_path / "on")
        logits(digits_model, images(2), options)
    traces = list(tmp_path.glob("on_*.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())
    assert any(event.get("cat") == "Session" for event in events)
    with SessionOptions() as options:
        options.enableProfiling(tmp_path / "off")
        options.disableProfiling()
        logits(digits_model, images(2), options)
    assert not list(tmp_path.glob("off_*.json"))


def test_a_symbolic_dimension_set_to_a_value_is_fixed(digits_model):
    with SessionOptions() as options:
        options.setSymbolicDimensionValue("batch", 3)
        with env.createSession(digits_model, options) as session:
            assert session.getInputInfo()["input"].getInfo().getShape() == (3, 64)
            with session.run({"input": images(3)}) as result:
                assert result.get(0).getValue().shape == (3, 10)
            # refused before the native call, naming the input, the expected and the given
            with pytest.raises(OrtException, match=r"input 'input' has the wrong shape: .*\[3, 64\], got .*\[2, 64\]"):
                session.run({"input": images(2)})
    with env.createSession(digits_model) as session:  # without the override the batch stays open
        assert session.getInputInfo()["input"].getInfo().getShape() == (-1, 64)


def test_deterministic_compute_is_accepted_and_keeps_the_outputs(digits_model):
    with SessionOptions() as options:
        options.setDeterministicCompute(True)
        np.testing.assert_array_equal(logits(digits_model, images(4), options), logits(digits_model, images(4)))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda o: o.setSymbolicDimensionValue("", 1), "the dimension name must not be empty"),
        (lambda o: o.setSymbolicDimensionValue(b"batch", 1), "the dimension name must be a str, not bytes"),
        (lambda o: o.setSymbolicDimensionValue("batch", -1), "must be in"),
        (lambda o: o.setSymbolicDimensionValue("batch", True), "must be an int"),
        (lambda o: o.setDeterministicCompute(1), "takes a bool"),
        (lambda o: o.setOptimizedModelFilePath(None), "str or os.PathLike"),
        (lambda o: o.enableProfiling(""), "is empty"),
    ],
)
def test_bad_arguments_are_refused_before_the_runtime(call, message):
    with SessionOptions() as options:
        with pytest.raises(OrtException, match=message) as info:
            call(options)
        assert isinstance(info.value, ValueError)


def test_enum_methods_of_java():
    assert OrtLoggingLevel.ORT_LOGGING_LEVEL_ERROR.getValue() == 3
    assert OrtLoggingLevel.mapFromInt(0) is OrtLoggingLevel.ORT_LOGGING_LEVEL_VERBOSE
    assert OrtLoggingLevel.mapFromInt(4) is OrtLoggingLevel.ORT_LOGGING_LEVEL_FATAL
    with pytest.raises(OrtException, match="7 is not a logging level"):
        OrtLoggingLevel.mapFromInt(7)
    assert SessionOptions.OptLevel.ALL_OPT.getID() == 99
    assert SessionOptions.ExecutionMode.PARALLEL.getID() == 1
    assert OrtErrorCode.mapFromInt(10) is OrtErrorCode.ORT_INVALID_GRAPH
    assert OrtErrorCode.mapFromInt(12) is OrtErrorCode.ORT_JAVA_UNKNOWN


def test_get_environment_with_a_name_alone_is_javas_getEnvironment_String():
    """Java's getEnvironment(String name): a str alone is the name, not a logging level."""
    run_child(
        """
        from ort_cffi import OrtEnvironment
        env = OrtEnvironment.getEnvironment("my-app")
        assert OrtEnvironment.getEnvironment() is env is OrtEnvironment.getEnvironment("another name")
        """
    )


def test_an_exception_made_in_javas_argument_order():
    """Java's OrtException(OrtErrorCode code, String message) and (int code, String message)."""
    for code in (OrtErrorCode.ORT_NO_MODEL, 4):
        error = OrtException(code, "no model here")
        assert error.getCode() is OrtErrorCode.ORT_NO_MODEL and error.getMessage() == "no model here"
    assert OrtException(99, "m").getCode() is OrtErrorCode.ORT_JAVA_UNKNOWN  # Java's mapFromInt
    error = OrtException("message first", OrtErrorCode.ORT_FAIL)
    assert error.getCode() is OrtErrorCode.ORT_FAIL and str(error) == "message first"
    assert OrtException("alone").getCode() is OrtErrorCode.ORT_JAVA_UNKNOWN
