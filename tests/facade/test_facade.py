"""The Java-style facade beyond TrainingTest.java: what Java left untested (evalStep, requested outputs,
RunOptions, setSeed, saving with optimizer state, session-level properties) and each Java defect
that ort_cffi deliberately fixes (java-surface.md)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ort_cffi import (
    OnnxTensor,
    OrtCheckpointState,
    OrtEnvironment,
    OrtErrorCode,
    OrtException,
    OrtInvalidArgumentException,
    OrtLoggingLevel,
    OrtTrainingSession,
    RunOptions,
    SessionOptions,
)

from conftest import ARTIFACTS, DIGITS, passthrough_models, run_child

env = OrtEnvironment.getEnvironment()
TWOOUT = ARTIFACTS / "twoout"
DROPOUT = ARTIFACTS / "dropout"


def batch(seed: int = 0, n: int = 8, features: int = 20, classes: int = 3):
    rng = np.random.default_rng(seed)
    return {
        "input": rng.standard_normal((n, features)).astype(np.float32),
        "labels": rng.integers(0, classes, size=n).astype(np.int64),
    }


def session(folder=TWOOUT, eval=True, optimizer=True, **kw):
    return env.createTrainingSession(
        str(folder / "checkpoint"),
        str(folder / "training_model.onnx"),
        str(folder / "eval_model.onnx") if eval else None,
        str(folder / "optimizer_model.onnx") if optimizer else None,
        **kw,
    )


def loss_of(result) -> float:
    return float(result.get(0).getValue())


def test_names_are_ordered_read_only_sets():
    with session() as s:
        assert tuple(s.getTrainInputNames()) == ("input", "labels")
        assert s.getTrainOutputNames()[:2] == ("onnx::loss::20", "logits")
        assert tuple(s.getEvalOutputNames()) == ("onnx::loss::20", "logits")
        assert "labels" in s.getEvalInputNames() and s.getEvalInputNames().contains("input")
        with pytest.raises((TypeError, AttributeError)):
            s.getTrainInputNames().add("x")  # type: ignore[attr-defined]
    with session(eval=False) as s:
        assert s.getEvalInputNames().isEmpty() and s.getEvalOutputNames().size() == 0


def test_train_step_returns_every_output_named():
    with session() as s, s.trainStep(batch()) as result:
        assert result.size() == len(s.getTrainOutputNames()) == len(result)
        assert [name for name, _ in result] == list(s.getTrainOutputNames())
        assert result.get("logits").get() is result[1] is result["logits"]
        assert result.get("nope").isPresent() is False and result.get("nope").orElse(None) is None
        assert result["logits"].getValue().shape == (8, 3)
        assert result.get(0).getValue().shape == ()  # a 0-d array for a scalar


def test_inputs_are_matched_by_name_in_any_order():
    """Java passed inputs in map-iteration order: a dict in another order mislabelled them."""
    data = batch()
    with session() as s:
        with s.trainStep({"input": data["input"], "labels": data["labels"]}) as a:
            first = loss_of(a)
        s.lazyResetGrad()
        with s.trainStep({"labels": data["labels"], "input": data["input"]}) as b:
            assert loss_of(b) == first


def test_requested_outputs_in_any_order_and_subset():
    """Java failed on a strict subset and mislabelled outputs requested in another order."""
    data = batch()
    with session() as s:
        with s.trainStep(data) as full:
            loss, logits = full[0].getValue(), full["logits"].getValue()
        for requested in (["logits", "onnx::loss::20"], {"logits"}, ("onnx::loss::20",)):
            s.lazyResetGrad()
            with s.trainStep(data, requested) as r:
                assert r.keys() == list(requested)
                np.testing.assert_array_equal(r["logits"].getValue(), logits) if "logits" in requested else None
                assert "onnx::loss::20" not in requested or r["onnx::loss::20"].getValue() == loss
        with s.evalStep(data, requestedOutputs=["logits"]) as r:
            assert r.keys() == ["logits"]
        with pytest.raises(OrtException, match="unknown output names \\['nope'\\]"):
            s.trainStep(data, {"nope"})


def test_pinned_outputs_are_written_in_place_and_stay_open():
    data = batch()
    with session() as s:
        loss_buffer = np.zeros((), dtype=np.float32)
        logits_buffer = np.zeros((8, 3), dtype=np.float32)
        with OnnxTensor.createTensor(env, loss_buffer) as loss_t, OnnxTensor.createTensor(env, logits_buffer) as logits_t:
            with s.trainStep(data, {"logits": logits_t, "onnx::loss::20": loss_t}) as r:
                assert r.keys() == ["logits", "onnx::loss::20"]
                assert r["logits"] is logits_t
            assert not loss_t.closed and not logits_t.closed  # the caller's, not the Result's
            assert loss_buffer != 0 and np.abs(logits_buffer).sum() > 0
            s.lazyResetGrad()
            with s.trainStep(data, ["logits"], {"onnx::loss::20": loss_t}, RunOptions()) as r:
                assert r.keys() == ["logits", "onnx::loss::20"]
                np.testing.assert_array_equal(r["logits"].getValue(), logits_buffer)
            with pytest.raises(OrtException, match="both requested and pinned"):
                s.trainStep(data, ["logits"], {"logits": logits_t}, None)


def test_eval_step_and_its_five_forms():
    data = batch()
    with session() as s, RunOptions() as ro:
        with s.evalStep(data) as r:
            expected = loss_of(r)
        with s.evalStep(data, ro) as r:
            assert loss_of(r) == expected
        with s.evalStep(data, {"onnx::loss::20"}) as r:
            assert loss_of(r) == expected
        out = np.zeros((), np.float32)
        with OnnxTensor.createTensor(env, out) as t:
            with s.evalStep(data, {"onnx::loss::20": t}) as r:
                assert float(out) == expected
        with s.evalStep(data, ["logits"], None, ro) as r:
            assert r.keys() == ["logits"]
        with s.evalStep(data, runOptions=ro, requestedOutputs=["onnx::loss::20"]) as r:
            assert loss_of(r) == expected


def test_eval_does_not_train_and_train_then_optimize_lowers_eval_loss():
    data = batch()
    with session() as s:
        with s.evalStep(data) as r:
            before = loss_of(r)
        with s.evalStep(data) as r:
            assert loss_of(r) == before
        for _ in range(20):
            s.trainStep(data).close()
            s.optimizerStep()
            s.lazyResetGrad()
        with s.evalStep(data) as r:
            assert loss_of(r) < before


def test_run_options_are_accepted_everywhere():
    with session() as s, RunOptions() as ro:
        ro.setRunTag("tag")
        ro.setLogLevel(3)
        assert ro.getRunTag() == "tag" and int(ro.getLogLevel()) == 3
        s.trainStep(batch(), ro).close()
        s.trainStep(batch(), runOptions=ro).close()
        s.optimizerStep(ro)


def test_run_options_log_level_is_none_until_set():
    """The runtime holds -1 until a level is set (the run uses the session's); Java answers VERBOSE,
    and a direct enum lookup raised ValueError on a fresh RunOptions."""
    with RunOptions() as ro:
        assert ro.getLogLevel() is None
        ro.setLogLevel(OrtLoggingLevel.ORT_LOGGING_LEVEL_VERBOSE)
        assert ro.getLogLevel() is OrtLoggingLevel.ORT_LOGGING_LEVEL_VERBOSE


@pytest.mark.parametrize(
    "call",
    [
        lambda so, ro: so.setLoggerId(3),
        lambda so, ro: so.setLoggerId("a\0b"),
        lambda so, ro: so.addConfigEntry(b"key", "value"),
        lambda so, ro: so.addConfigEntry("key", None),
        lambda so, ro: so.setSymbolicDimensionValue(None, 4),
        lambda so, ro: so.setOptimizationLevel(5),
        lambda so, ro: so.setOptimizationLevel(True),
        lambda so, ro: so.setExecutionMode("parallel"),
        lambda so, ro: so.setSessionLogLevel(99),
        lambda so, ro: ro.setLogLevel(-1),
        lambda so, ro: ro.setRunTag(b"tag"),
        lambda so, ro: ro.setRunTag("a\0b"),
        lambda so, ro: ro.addRunConfigEntry(3, "x"),
        lambda so, ro: ro.addRunConfigEntry("x", 3),
        lambda so, ro: env.createSession(TWOOUT / "training_model.onnx", options=ro),
        # a lone surrogate (what os.fsdecode makes of undecodable bytes): a bare UnicodeEncodeError once
        lambda so, ro: so.setLoggerId("log \udcff"),
        lambda so, ro: so.addConfigEntry("key \udcff", "value"),
        lambda so, ro: so.addConfigEntry("key", "value \udcff"),
        lambda so, ro: so.setSymbolicDimensionValue("batch \udcff", 4),
        lambda so, ro: ro.setRunTag("tag \udcff"),
        lambda so, ro: ro.addRunConfigEntry("key", "value \udcff"),
    ],
)
def test_a_bad_option_is_an_invalid_argument_that_names_it(call):
    """Before, wrong types leaked AttributeError ('int' object has no attribute 'encode') and unknown
    enum values a bare ValueError; a str holding NUL was cut short silently by the C string."""
    with SessionOptions() as so, RunOptions() as ro:
        with pytest.raises(OrtInvalidArgumentException) as info:
            call(so, ro)
    assert info.value.getCode() == OrtErrorCode.ORT_INVALID_ARGUMENT
    assert re.search(r"logger id|config|dimension|optimization level|execution mode|log level|run tag|options", str(info.value))


def test_set_seed_makes_dropout_repeatable():
    data = batch()

    def losses(seed):
        OrtTrainingSession.setSeed(seed)
        with session(DROPOUT) as s:
            out = []
            for _ in range(5):
                with s.trainStep(data) as r:
                    out.append(loss_of(r))
                s.optimizerStep()
                s.lazyResetGrad()
            return out

    first, again, other = losses(1234), losses(1234), losses(99)
    assert first == again
    assert first != other  # the dropout model is random: a different seed gives different losses


def test_session_options_are_applied():
    with SessionOptions() as options:
        options.setIntraOpNumThreads(1)
        options.setInterOpNumThreads(1)
        options.setOptimizationLevel(SessionOptions.OptLevel.ALL_OPT)
        options.addConfigEntry("session.intra_op.allow_spinning", "0")
        options.setSessionLogLevel(3)
        with session(options=options) as s, s.trainStep(batch()) as r:
            assert np.isfinite(loss_of(r))
    with pytest.raises(OrtException):
        SessionOptions().setIntraOpNumThreads(-1)


def test_add_cuda_on_a_cpu_runtime_is_a_clear_error():
    with SessionOptions() as options, pytest.raises(OrtException, match="CUDA") as info:
        options.addCUDA(0)
    assert "onnxruntime-training==1.19.2" in str(info.value)


def test_save_with_optimizer_state_resumes_adam_exactly(tmp_path):
    data = batch()
    with session() as s:
        for _ in range(3):
            s.trainStep(data).close()
            s.optimizerStep()
            s.lazyResetGrad()
        s.saveCheckpoint(tmp_path / "with_opt", True)
        s.saveCheckpoint(str(tmp_path / "without_opt"), False)
        continued = []
        for _ in range(3):
            with s.trainStep(data) as r:
                continued.append(loss_of(r))
            s.optimizerStep()
            s.lazyResetGrad()
    assert (tmp_path / "with_opt").stat().st_size > (tmp_path / "without_opt").stat().st_size
    with env.createTrainingSession(
        str(tmp_path / "with_opt"), str(TWOOUT / "training_model.onnx"), None, str(TWOOUT / "optimizer_model.onnx")
    ) as resumed:
        again = []
        for _ in range(3):
            with resumed.trainStep(data) as r:
                again.append(loss_of(r))
            resumed.optimizerStep()
            resumed.lazyResetGrad()
    assert again == continued
    with session(optimizer=False) as s, pytest.raises(OrtException, match="no optimizer"):
        s.saveCheckpoint(tmp_path / "x", True)


def test_session_level_properties_round_trip_through_a_saved_checkpoint(tmp_path):
    with session() as s:
        s.addProperty("epoch", 3)
        s.addProperty("big", 2**62 + 1)
        s.addProperty("lr", 0.25)
        s.addProperty("name", "digits")
        s.saveCheckpoint(tmp_path / "ckpt")
        assert s.getIntProperty("epoch") == 3 and s.getFloatProperty("lr") == 0.25
    with OrtCheckpointState.loadCheckpoint(tmp_path / "ckpt") as state:
        assert state.getIntProperty(env.defaultAllocator, "big") == 2**62 + 1
        assert state.getStringProperty("name") == "digits"
        state.addProperty("epoch", "overwritten with another type")
        assert state.getStringProperty("epoch") == "overwritten with another type"


# --- Java defects, fixed -------------------------------------------------------------------------


def test_int_properties_are_true_int64():
    """Java stored an int into an int64_t slot (garbage upper half); ort_cffi stores int64 or refuses."""
    with OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint") as state:
        for value in (-(2**63), -1, 0, 2**31, 2**63 - 1):
            state.addProperty("n", value)
            assert state.getIntProperty("n") == value
        for value in (2**63, -(2**63) - 1):
            with pytest.raises(OrtException, match="does not fit in an int64"):
                state.addProperty("n", value)
        with pytest.raises(OrtException, match="bool is not a property type"):
            state.addProperty("flag", True)
        with pytest.raises(OrtException, match="values are int, float or str"):
            state.addProperty("list", [1])  # type: ignore[arg-type]


def test_property_methods_and_scheduler_check_closed():
    """Java had no closed checks there (use after free)."""
    state = OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint")
    state.close()
    for call in (lambda: state.addProperty("a", 1), lambda: state.getIntProperty("a"), lambda: state.saveCheckpoint("/tmp/x")):
        with pytest.raises(OrtException, match="closed"):
            call()
    s = session()
    s.close()
    for call in (
        lambda: s.registerLinearLRScheduler(1, 2, 0.1),
        lambda: s.addProperty("a", 1),
        lambda: s.getFloatProperty("a"),
        lambda: s.trainStep(batch()),
        lambda: s.schedulerStep(),
    ):
        with pytest.raises(OrtException, match="closed"):
            call()


def test_closing_twice_is_harmless():
    """Java freed a checkpoint twice and threw on a second session close."""
    state = OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint")
    state.close()
    state.close()
    s = session()
    s.close()
    s.close()


def test_checkpoint_released_when_session_creation_fails(tmp_path):
    """Java leaked the checkpoint it loaded when session creation failed (the leak fixture checks)."""
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(OrtException) as info:
        env.createTrainingSession(str(TWOOUT / "checkpoint"), str(broken))
    assert str(broken) in str(info.value)


def test_wrong_type_property_read_frees_the_value():
    """Java leaked the property value on a wrong-type read; the leak would show in a loop's RSS, and
    the error says what the property is."""
    with OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint") as state:
        state.addProperty("s", "x" * 10000)
        for _ in range(2000):
            with pytest.raises(OrtInvalidArgumentException, match="property 's' is a str, not an int") as info:
                state.getIntProperty("s")
        assert info.value.getCode() == OrtErrorCode.ORT_INVALID_ARGUMENT
        assert isinstance(info.value, ValueError)


def test_caller_checkpoint_stays_callers_and_outlives_an_early_close():
    state = OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint")
    s = env.createTrainingSession(state, str(TWOOUT / "training_model.onnx"))
    assert s.getCheckpointState() is state
    with pytest.raises(OrtException, match="already bound"):
        env.createTrainingSession(state, str(TWOOUT / "training_model.onnx"))
    state.close()  # closed for its user, released only when the session is done with it
    with s.trainStep(batch()) as r:
        assert np.isfinite(loss_of(r))
    s.close()
    state2 = OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint")
    with env.createTrainingSession(state2, str(TWOOUT / "training_model.onnx")) as s2:
        pass
    assert not state2.closed  # the caller's state stays open after its session closes
    state2.close()


def test_eval_step_does_not_leak(tmp_path):
    """The JNI leaked native memory on every evalStep: the leak fixture and a bounded loop check it."""
    data = batch()
    with session() as s:
        for _ in range(500):
            with s.evalStep(data) as r:
                r.get(0).getValue()


def test_pinned_outputs_are_never_released_by_the_binding():
    """A pinned output belongs to the caller: many steps into it, with garbage collection between,
    must neither free it nor crash (in a child: a double free would kill the interpreter)."""
    run_child(
        f"""
        import gc
        import numpy as np
        from ort_cffi import OnnxTensor, OrtEnvironment
        env = OrtEnvironment.getEnvironment()
        folder = {str(TWOOUT)!r}
        rng = np.random.default_rng(0)
        data = {{"input": rng.standard_normal((8, 20)).astype(np.float32), "labels": rng.integers(0, 3, 8).astype(np.int64)}}
        with env.createTrainingSession(folder + "/checkpoint", folder + "/training_model.onnx", None,
                                       folder + "/optimizer_model.onnx") as s:
            loss = np.zeros((), np.float32)
            with OnnxTensor.createTensor(env, loss) as pinned:
                for i in range(300):
                    s.trainStep(data, {{"onnx::loss::20": pinned}}).close()
                    s.optimizerStep()
                    s.lazyResetGrad()
                    if i % 50 == 0:
                        gc.collect()
                assert not pinned.closed and np.isfinite(float(pinned.getValue()))
        """
    )


def test_a_mapping_that_repeats_a_name_is_refused_not_crashed():
    """A Mapping whose iteration disagrees with its len() once left a slot with a stale pointer."""
    run_child(
        f"""
        from collections.abc import Mapping
        import numpy as np
        from ort_cffi import OrtEnvironment, OrtException
        folder = {str(TWOOUT)!r}
        rng = np.random.default_rng(0)
        data = {{"input": rng.standard_normal((8, 20)).astype(np.float32), "labels": rng.integers(0, 3, 8).astype(np.int64)}}

        class Repeats(Mapping):
            def __len__(self): return 2
            def __iter__(self): return iter(["input", "input"])
            def __getitem__(self, key): return data[key]

        with OrtEnvironment.getEnvironment().createTrainingSession(folder + "/checkpoint", folder + "/training_model.onnx") as s:
            s.trainStep(data).close()
            try:
                s.trainStep(Repeats())
                raise SystemExit("accepted")
            except OrtException as e:
                assert "missing inputs ['labels']" in str(e), e
        """
    )


def test_requested_outputs_as_a_set_come_in_model_order_and_results_iterate_as_entries():
    with session() as s, s.trainStep(batch(), {"logits", "onnx::loss::20"}) as r:
        assert r.keys() == ["onnx::loss::20", "logits"]  # a set has no order: the model's
        entries = list(r)
        assert [e.getKey() for e in entries] == r.keys() and entries[1].getValue() is r["logits"]
        name, value = entries[0]
        assert name == "onnx::loss::20" and value is r.get(0) is r[-2] is r.get(np.int64(0))
        with pytest.raises(IndexError):
            r.get(2)


def test_name_sets_compare_as_sets_and_keep_the_model_order():
    with session() as s:
        names = s.getTrainInputNames()
        assert names == {"labels", "input"} and list(names) == ["input", "labels"] and names[0] == "input"
        assert names.size() == 2 and names.contains("labels") and not names.isEmpty()


def test_a_session_keeps_using_the_state_its_caller_closed(tmp_path):
    """Closing a state a session still trains defers its release; the session's own calls on it
    (save, properties) keep working until the session closes."""
    state = OrtCheckpointState.loadCheckpoint(TWOOUT / "checkpoint")
    with env.createTrainingSession(state, str(TWOOUT / "training_model.onnx")) as s:
        state.close()
        with pytest.raises(OrtException, match="closed"):
            state.addProperty("x", 1)
        s.addProperty("epoch", 2)
        assert s.getIntProperty("epoch") == 2
        s.saveCheckpoint(tmp_path / "ckpt")
    with OrtCheckpointState.loadCheckpoint(tmp_path / "ckpt") as saved:
        assert saved.getIntProperty("epoch") == 2


def test_exceptions_survive_pickling():
    """Errors cross processes (multiprocessing, Ray): each comes back with its type, text and code."""
    import pickle

    from ort_cffi._native.errors import OrtClosedException, OrtFileNotFoundException

    for error in (OrtClosedException("OrtTrainingSession"), OrtException("m", OrtErrorCode.ORT_FAIL),
                  OrtFileNotFoundException("f", OrtErrorCode.ORT_NO_SUCHFILE)):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.getCode() == error.getCode()


def test_an_environment_constructed_directly_is_the_one_get_environment_returns():
    run_child(
        """
        import pytest
        from ort_cffi import OrtEnvironment, OrtInvalidArgumentException
        with pytest.raises(OrtInvalidArgumentException, match="logging level"):
            OrtEnvironment(99)
        env = OrtEnvironment()
        assert OrtEnvironment.getEnvironment() is env
        with pytest.raises(RuntimeError, match="getEnvironment"):
            OrtEnvironment()
        """
    )


def test_environment_logging_level_is_taken_from_the_first_call():
    run_child(
        """
        from ort_cffi import OrtEnvironment, OrtLoggingLevel
        env = OrtEnvironment.getEnvironment(OrtLoggingLevel.ORT_LOGGING_LEVEL_ERROR, "my-app")
        assert OrtEnvironment.getEnvironment() is env
        """
    )


def _model_returning_its_input() -> bytes:
    """A model with no nodes whose input x is also its output (valid ONNX)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    graph = helper.make_graph([], "identity", [x], [x])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def test_an_output_that_is_an_input_is_a_value_of_its_own():
    """ONNX Runtime returns such an output over the input's memory: the caller's later writes into
    its array (or the tensor's buffer) once showed in the Result. Java gives the output its own value."""
    with env.createSession(_model_returning_its_input()) as s:
        x = np.arange(4, dtype=np.float32)
        with s.run({"x": x}) as result:
            x[:] = 5
            np.testing.assert_array_equal(result["x"].getValue(), [0, 1, 2, 3])
        with OnnxTensor.createTensor(env, np.arange(4, dtype=np.float32)) as tensor, s.run({"x": tensor}) as result:
            tensor.getBufferRef().get()[:] = 7
            np.testing.assert_array_equal(result[0].getValue(), [0, 1, 2, 3])
            assert result[0].getInfo().shape == (4,)


def test_a_step_output_that_is_an_input_is_a_value_of_its_own(tmp_path):
    paths = passthrough_models(TWOOUT, tmp_path)
    with env.createTrainingSession(str(TWOOUT / "checkpoint"), *paths, None) as s:
        for step in (s.trainStep, s.evalStep):
            data = batch()
            expected = data["input"].copy()
            for extra in ((), (["input"],), ({"input", "onnx::loss::20"},)):
                with step(data, *extra) as result:
                    data["input"][:] = 5
                    np.testing.assert_array_equal(result["input"].getValue(), expected)
                data["input"][:] = expected


def test_a_name_utf8_cannot_encode_is_an_invalid_argument_that_names_it():
    """A lone surrogate in a property name or value, a parameter name or an export output name raised
    a bare UnicodeEncodeError."""
    with session() as s:
        state = s.getCheckpointState()
        for call in (
            lambda: state.addProperty("name \udcff", 1),
            lambda: state.addProperty("name", "value \udcff"),
            lambda: s.addProperty("name \udcff", 1.5),
            lambda: s.getIntProperty("name \udcff"),
            lambda: state.getStringProperty("name \udcff"),
            lambda: state.getParameter("fc1.weight \udcff"),
            lambda: s.exportModelForInference("/tmp/never.onnx", ["logits \udcff"]),
        ):
            with pytest.raises(OrtInvalidArgumentException, match=r"'(name|value|fc1\.weight|logits) \\udcff' is not valid Unicode"):
                call()


def test_an_environment_name_with_nul_or_a_lone_surrogate_is_refused():
    """'ab\\x00cd' was cut short at the NUL by the C string; '\\udcff' raised a bare UnicodeEncodeError."""
    run_child(
        """
        import pytest
        from ort_cffi import OrtEnvironment, OrtInvalidArgumentException
        with pytest.raises(OrtInvalidArgumentException, match="environment name .*NUL"):
            OrtEnvironment.getEnvironment("ab\\x00cd")
        with pytest.raises(OrtInvalidArgumentException, match="environment name .*not valid Unicode"):
            OrtEnvironment.getEnvironment(None, "ab\\udcff")
        assert OrtEnvironment.getEnvironment("ab").getVersion()
        """
    )


def test_an_export_output_the_eval_model_lacks_is_refused_naming_its_outputs(tmp_path):
    """The Java sample's ``new String[]{"output"}`` on the digits model got only the runtime's "Expected
    graph output for inference graph output could not be found. Please regenerate the eval graph.",
    which names no valid output and blames the eval graph. Now: refused before anything is written,
    naming the eval model's outputs; a value the graph computes (not an output) still exports."""
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx",
                                   DIGITS / "eval_model.onnx") as session:
        target = tmp_path / "inference.onnx"
        with pytest.raises(OrtInvalidArgumentException) as info:
            session.exportModelForInference(target, ["output"])
        assert str(info.value) == ("cannot export 'output' for inference: the eval model has no value of that name; its "
                                   "outputs are 'onnx::loss::2', 'logits' (a value its graph computes may be exported too)")
        with pytest.raises(OrtInvalidArgumentException, match=r"cannot export 'scores', 'probs' for inference: .* no value "
                                                              r"of these names"):
            session.exportModelForInference(target, ["logits", "scores", "probs"])
        assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file
        session.exportModelForInference(target, ["hidden1"])  # an intermediate value: the runtime takes it
        with env.createSession(target) as exported:
            assert list(exported.getOutputNames()) == ["hidden1"]
