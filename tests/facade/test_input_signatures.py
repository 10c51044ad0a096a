"""A step or run whose input has the wrong element type, rank or fixed dimension, or whose
inputs disagree on a symbolic dimension (the batch), fails before the native call, with an
``OrtException`` naming the input, what the model expects and what was given; and the runtime
prints nothing (it used to print an error line for a batch mismatch).

The training sessions' signatures come from ort_cffi's reader of the ONNX wire format
(``signature.graph_inputs``): it is checked here against the ``onnx`` package's own parse, on every
model in the repository and on generated ones (hypothesis), and fuzzed.
"""
from __future__ import annotations

import os
import random
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from _childcases import artifact_session, case, cases, check
from conftest import ARTIFACTS, DIGITS, ROOT, fixed_batch_artifacts, run_child, tiny_batch
from ort_cffi import OnnxTensor, OnnxTensorType, OrtClosedException, OrtEnvironment, OrtException
from ort_cffi._facade.sessions.signature import graph_inputs, model_inputs

SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
TINY = ARTIFACTS / "tiny"


def onnx_inputs(model: onnx.ModelProto) -> dict:
    """What the ``onnx`` package reads as each tensor input's (element type, dims or None)."""
    specs = {}
    for value in model.graph.input:
        if value.type.WhichOneof("value") != "tensor_type" or not value.name:
            continue
        tensor = value.type.tensor_type
        dims = None
        if tensor.HasField("shape"):
            dims = tuple(
                (d.dim_value if d.HasField("dim_value") else -1, d.dim_param) for d in tensor.shape.dim
            )
        specs[value.name] = (tensor.elem_type, dims)
    return specs


def ours(data: bytes) -> dict:
    return {name: (int(spec.onnx_type), spec.dims) for name, spec in graph_inputs(data).items()}


def repository_models() -> list:
    models = sorted(ARTIFACTS.glob("*/*.onnx")) + sorted(DIGITS.glob("*.onnx"))
    java = os.environ.get("ORT_CFFI_JAVA_TESTDATA")
    if java:
        models += sorted(Path(java).glob("*.onnx"))
    return models


@pytest.mark.parametrize("path", repository_models(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_wire_reader_matches_onnx_on_every_repository_model(path: Path) -> None:
    data = path.read_bytes()
    assert ours(data) == onnx_inputs(onnx.load_from_string(data))
    names = [v.name for v in onnx.load_from_string(data).graph.input]
    assert set(model_inputs(str(path), None, names)) == set(onnx_inputs(onnx.load_from_string(data)))  # mapped file


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
dims = st.one_of(st.integers(0, 2**40), names, st.none())


@st.composite
def models(draw) -> onnx.ModelProto:
    inputs = []
    for index, name in enumerate(draw(st.lists(names, min_size=1, max_size=5, unique=True))):
        kind = draw(st.sampled_from(["tensor", "tensor", "no shape", "sequence"]))
        # the element types ONNX Runtime 1.19 knows (IR version 10): a newer onnx has more (FLOAT4E2M1 in 1.18),
        # which the reader reports as UNDEFINED, as the runtime would refuse them
        elem_type = draw(st.sampled_from([int(t) for t in OnnxTensorType if t != 0]))
        if kind == "sequence":
            inputs.append(helper.make_tensor_sequence_value_info(name, elem_type, None))
        else:
            inputs.append(helper.make_tensor_value_info(name, elem_type, None if kind == "no shape" else draw(st.lists(dims, max_size=4))))
    initializer = None
    if draw(st.booleans()):  # a large field before or after the inputs, to be skipped
        size = draw(st.integers(0, 2000))
        initializer = helper.make_tensor("w", TensorProto.FLOAT, [size], bytes(4 * size), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", [inputs[0].name], ["out"])],
        "g", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[initializer] if initializer is not None else [],
    )
    model = helper.make_model(graph, producer_name=draw(names))
    model.metadata_props.add(key="k", value=draw(names))
    return model


@settings(max_examples=300, **SETTINGS)
@given(model=models())
def test_wire_reader_matches_onnx_on_generated_models(model: onnx.ModelProto) -> None:
    data = model.SerializeToString()
    assert ours(data) == onnx_inputs(model)


@settings(max_examples=400, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), how=st.sampled_from(["truncate", "flip", "insert"]))
def test_wire_reader_never_fails_but_cleanly(seed: int, how: str) -> None:
    """Damaged model bytes: a dict or a ValueError, nothing else (and model_inputs: a dict)."""
    data = bytearray((TINY / "eval_model.onnx").read_bytes())
    rng = random.Random(seed)
    position = rng.randrange(len(data))
    if how == "truncate":
        data = data[:position]
    elif how == "flip":
        data[position] ^= 1 << rng.randrange(8)
    else:
        data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
    try:
        result = graph_inputs(bytes(data))
    except ValueError:
        pass
    else:
        assert isinstance(result, dict)
    assert isinstance(model_inputs(None, bytes(data), ["input", "labels"]), dict)


# --- steps and runs (child process) -------------------------------------------------------------------

env = None
BATCH = None


def child_setup() -> None:
    global env, BATCH
    env = OrtEnvironment.getEnvironment()
    BATCH = tiny_batch()


WRONG = [  # (input, value, what the message must say)
    ("input", lambda b: b["input"].astype(np.float64), ["'input'", "element type", "tensor(float)", "tensor(double)", "[4, 784]"]),
    ("input", lambda b: b["input"][:, :100], ["'input'", "shape", "[batch, 784]", "[4, 100]"]),
    ("input", lambda b: b["input"][..., None], ["'input'", "rank", "[batch, 784]", "[4, 784, 1]"]),
    ("input", lambda b: b["input"][0], ["'input'", "rank", "[784]"]),
    ("labels", lambda b: b["labels"].astype(np.int32), ["'labels'", "element type", "tensor(int64)", "tensor(int32)"]),
    ("labels", lambda b: b["labels"][:3], ["'input' and 'labels'", "'batch'", "4", "3"]),
    ("input", lambda b: np.zeros((5, 784), np.float32), ["'input' and 'labels'", "'batch'", "5", "4"]),
    ("input", lambda b: np.full((4, 784), "x"), ["'input'", "element type", "tensor(string)"]),
]


def _assert_refused(call, fragments) -> None:
    with pytest.raises(OrtException) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@case
def training_and_eval_steps_refuse_wrong_inputs_naming_them() -> None:
    with artifact_session("tiny") as session:
        for name, make, fragments in WRONG:
            for kind, step in (("training", session.trainStep), ("eval", session.evalStep)):
                value = make(BATCH)
                _assert_refused(lambda: step(dict(BATCH, **{name: value})), [f"the {kind} model's"] + fragments)
                with OnnxTensor.createTensor(env, value) as tensor:  # the same as a tensor
                    _assert_refused(lambda: step(dict(BATCH, **{name: tensor})), fragments)
        with session.trainStep(BATCH) as result:  # and the session still works
            assert np.isfinite(result[0].getValue())


@case
def models_given_as_bytes_are_checked_too() -> None:
    models = [(TINY / f).read_bytes() for f in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")]
    with env.createTrainingSession(str(TINY / "checkpoint"), *models) as session:
        for name, make, fragments in WRONG:
            _assert_refused(lambda: session.trainStep(dict(BATCH, **{name: make(BATCH)})), fragments)


@case
def inference_runs_refuse_wrong_inputs_naming_them() -> None:
    import tempfile

    with artifact_session("tiny") as training, tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "inference.onnx")
        training.exportModelForInference(path, ["onnx::loss::8"])
        with env.createSession(path) as session:
            for name, make, fragments in WRONG:
                _assert_refused(lambda: session.run(dict(BATCH, **{name: make(BATCH)})), ["the model's"] + fragments)
            with session.run(BATCH) as result:
                assert np.isfinite(result[0].getValue())


@case
def a_fixed_batch_dimension_is_checked() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        fixed = fixed_batch_artifacts(Path(folder), 4)
        with env.createTrainingSession(str(fixed / "checkpoint"), str(fixed / "training_model.onnx"), str(fixed / "eval_model.onnx")) as session:
            batch = tiny_batch(batch=5, features=64)
            _assert_refused(lambda: session.trainStep(batch), ["'input'", "shape", "[4, 64]", "[5, 64]"])
            with session.trainStep(tiny_batch(batch=4, features=64)) as result:
                assert np.isfinite(result[0].getValue())


@case
def a_scalar_input_refuses_other_ranks_and_an_unshaped_one_takes_any() -> None:
    scalar = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    anything = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["z"], ["w"])], "g", [scalar, anything],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, []), helper.make_tensor_value_info("w", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    with env.createSession(model) as session:
        _assert_refused(lambda: session.run({"x": np.zeros(3, np.float32), "z": np.float32(1)}), ["'x'", "rank", "shape []", "[3]"])
        for z in (np.float32(1), np.zeros(3, np.float32), np.zeros((2, 2, 2), np.float32)):
            with session.run({"x": np.float32(2), "z": z}) as result:
                assert result["w"].getValue().shape == z.shape


@case
def a_tensor_that_passed_is_not_checked_again_and_batches_may_change() -> None:
    with artifact_session("tiny") as session:
        tensors = {name: OnnxTensor.createTensor(env, value) for name, value in BATCH.items()}
        try:
            with session.trainStep(tensors) as result:
                loss = result[0].getValue()
            spec = tensors["input"].passed_spec
            assert spec is not None and spec is session._train.specs[0]
            assert session._eval.specs[0] is spec  # the eval model's equal signature is the same object
            with session.evalStep(tensors):
                assert tensors["input"].passed_spec is spec
            for size in (1, 7, 4):  # one batch size per step, any size across steps
                with session.trainStep(tiny_batch(batch=size)) as result:
                    assert np.isfinite(result[0].getValue())
            with session.trainStep(tensors) as result:
                assert np.isfinite(result[0].getValue()) and loss.dtype == result[0].getValue().dtype
        finally:
            OnnxTensor.close(tensors)


@case
def a_closed_result_raises_ort_closed_exception() -> None:
    with artifact_session("tiny") as session:
        result = session.trainStep(BATCH)
        result.close()
        for call in (lambda: result.get(0), lambda: result.get("onnx::loss::8"), lambda: result[0], lambda: list(result)):
            with pytest.raises(OrtClosedException, match="Result is closed"):
                call()


@pytest.mark.parametrize("name", cases(__name__))
def test_input_signatures(name: str, request) -> None:
    check(__name__, name, timeout=300, request=request)


def test_refused_inputs_leave_no_runtime_log_line() -> None:
    """The runtime used to print an error line (in red) for a batch mismatch: refused before the
    native call, nothing reaches stderr. As a control, the same child then turns the session's
    checks off and makes the same step: the runtime fails it and prints its line, which shows that
    the check above could see one."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        import conftest  # noqa: F401  (puts the test folders and tests/support on sys.path)
        import numpy as np
        from _childcases import artifact_session
        from conftest import tiny_batch
        from ort_cffi import OrtException
        from ort_cffi._facade.sessions.inputs import ANY_INPUT
        batch = tiny_batch()
        mismatch = dict(batch, labels=batch["labels"][:3])
        with artifact_session("tiny") as session:
            for bad in (mismatch, dict(batch, input=batch["input"].astype(np.float64)), dict(batch, input=np.zeros((4, 100), np.float32))):
                for step in (session.trainStep, session.evalStep):
                    try:
                        step(bad).close()
                    except OrtException:
                        pass
                    else:
                        raise SystemExit("not refused")
            print("REFUSED-ALL", file=sys.stderr, flush=True)
            session._train.specs = [ANY_INPUT] * len(session._train.specs)  # the control: no checks
            session._train.pairs = ()
            try:
                session.trainStep(mismatch).close()
            except OrtException:
                pass
            else:
                raise SystemExit("the runtime accepted a batch mismatch")
    """)
    proc = run_child(code)
    before, marker, after = proc.stderr.partition("REFUSED-ALL")
    assert marker and "onnxruntime" not in before, f"the runtime printed while inputs were being refused:\n{before}"
    assert "[E:onnxruntime" in after, f"the control step did not make the runtime log (so the check above proves nothing):\n{after}"
