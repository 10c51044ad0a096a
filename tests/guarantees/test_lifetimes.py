"""Lifetimes are safe in any order.

Dropping the last reference to the environment, a session, its checkpoint, a ``Result``, its values or
the numpy array behind a tensor, in any order (garbage collection, reference cycles, other threads,
interpreter exit), never frees memory still in use; a tensor made from a temporary array still
computes the right result after garbage collection. A use-after-free shows as a crash or as wrong
numbers, so everything runs in child processes: the cases through ``_childcases`` (which also checks
that nothing is left alive after each), the interpreter-exit scenarios as whole child programs.
"""
from __future__ import annotations

import gc
import random
import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from _childcases import artifact_session, case, cases, check
from conftest import ARTIFACTS, passthrough_models, run_child, tiny_batch
from ort_cffi import OnnxTensor, OrtCheckpointState, OrtEnvironment, OrtException, OrtTrainingSession

TINY = ARTIFACTS / "tiny"
LOSS_NAME = "onnx::loss::8"

BATCH = None
BIG_BATCH = None
LOSS = None
BIG_LOSS = None
TMP = None


def child_setup() -> None:
    global BATCH, BIG_BATCH, LOSS, BIG_LOSS, TMP
    OrtEnvironment.getEnvironment()
    BATCH = tiny_batch()
    BIG_BATCH = tiny_batch(batch=64, seed=3)  # 200 KB of input: freed with munmap, so a use-after-free faults
    with artifact_session("tiny", optim=False) as session:
        with session.trainStep(BATCH) as result:
            LOSS = result[0].getValue()
        with session.trainStep(BIG_BATCH) as result:
            BIG_LOSS = result[0].getValue()
    TMP = Path(tempfile.mkdtemp(prefix="ort_cffi_lifetimes_", dir=os.getcwd()))  # inside the scratch folder the harness removes


def churn(nbytes: int = 4 * 784 * 64, count: int = 64) -> list:
    """Allocate and fill memory of the sizes just freed, so that freed memory gets new contents."""
    blocks = [np.full(nbytes // 4, 1e30, np.float32) for _ in range(count)]
    blocks += [np.full(nbytes // 16, -7, np.int64) for _ in range(count)]
    return blocks


def _loss(result) -> np.ndarray:
    return result[0].getValue()


# --- dropping references in every order ------------------------------------------------------------

ORDER_NAMES = ("env", "state", "session", "result", "value", "tensor", "array", "pinned")


def _build(holder: dict) -> None:
    env = OrtEnvironment.getEnvironment()
    holder["env"] = env
    holder["state"] = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    holder["state"].addProperty("marker", 42)
    holder["session"] = artifact_session("tiny", optim=False, checkpoint=holder["state"])
    holder["array"] = BATCH["input"].copy()
    holder["tensor"] = OnnxTensor.createTensor(env, holder["array"])
    holder["pinned"] = OnnxTensor.createTensor(env, np.zeros((), np.float32))
    holder["result"] = holder["session"].trainStep({"input": holder["tensor"], "labels": BATCH["labels"]})
    holder["value"] = holder["session"].evalStep(BATCH)[0]  # its Result is dropped at once


def _use(holder: dict, where: str) -> None:
    if "session" in holder:
        inputs = {"input": holder.get("tensor", BATCH["input"]), "labels": BATCH["labels"]}
        with holder["session"].trainStep(inputs) as result:
            np.testing.assert_array_equal(_loss(result), LOSS, err_msg=where)
        if "pinned" in holder:
            with holder["session"].trainStep(inputs, {LOSS_NAME: holder["pinned"]}) as result:
                np.testing.assert_array_equal(result[LOSS_NAME].getValue(), LOSS, err_msg=where)
    if "result" in holder:
        np.testing.assert_array_equal(_loss(holder["result"]), LOSS, err_msg=where)
    if "value" in holder:
        assert holder["value"].getValue().shape == (), where
    if "tensor" in holder:
        np.testing.assert_array_equal(holder["tensor"].getValue(), BATCH["input"], err_msg=where)
    if "array" in holder:
        np.testing.assert_array_equal(holder["array"], BATCH["input"], err_msg=where)
    if "state" in holder:
        assert holder["state"].getIntProperty("marker") == 42, where
    if "env" in holder:
        assert holder["env"].getVersion()


@case
def dropping_references_in_many_orders() -> None:
    rng = random.Random(20240601)
    orders = [ORDER_NAMES, ORDER_NAMES[::-1]] + [tuple(rng.sample(ORDER_NAMES, len(ORDER_NAMES))) for _ in range(30)]
    for order in orders:
        holder: dict = {}
        _build(holder)
        for i, name in enumerate(order):
            del holder[name]
            gc.collect()
            blocks = churn()
            _use(holder, f"order {order}, after dropping {order[: i + 1]}")
            del blocks


@case
def dropping_references_inside_reference_cycles() -> None:
    """The collector finalizes a cycle's members in an order the program does not choose."""
    rng = random.Random(7)
    for _ in range(25):
        holder: dict = {}
        _build(holder)
        members = list(holder.values())
        rng.shuffle(members)
        members.append(members)  # a cycle: the list holds itself
        holder["session"].cycle = members  # and the session holds the list
        holder["state"].cycle = holder["session"]
        del holder, members
        gc.collect()
        churn()
    gc.collect()


@case
def closing_explicitly_in_many_orders() -> None:
    rng = random.Random(99)
    closable = ("state", "session", "result", "value", "tensor", "pinned")
    for _ in range(20):
        holder: dict = {}
        _build(holder)
        for name in rng.sample(closable, len(closable)):
            holder.pop(name).close()
            gc.collect()
            churn()
            _use(holder, f"after closing {name}")


# --- tensors over numpy memory -------------------------------------------------------------------


@case
def tensor_from_a_temporary_array_after_gc() -> None:
    env = OrtEnvironment.getEnvironment()
    with artifact_session("tiny", optim=False) as session:
        for batch, expected in ((BATCH, LOSS), (BIG_BATCH, BIG_LOSS)):
            n = batch["input"].shape[0]
            makers = {
                "astype temporary": lambda: OnnxTensor.createTensor(env, batch["input"].astype(np.float64).astype(np.float32)),
                "copy temporary": lambda: OnnxTensor.createTensor(env, batch["input"].copy()),
                "fortran temporary": lambda: OnnxTensor.createTensor(env, np.asfortranarray(batch["input"])),
                "reshaped temporary": lambda: OnnxTensor.createTensor(env, batch["input"].ravel().copy(), [n, 784]),
            }
            for how, make in makers.items():
                tensor = make()
                labels = OnnxTensor.createTensor(env, batch["labels"].copy())
                gc.collect()
                blocks = churn(batch["input"].nbytes)
                try:
                    np.testing.assert_array_equal(tensor.getValue(), batch["input"], err_msg=how)
                    with session.trainStep({"input": tensor, "labels": labels}) as result:
                        np.testing.assert_allclose(_loss(result), expected, rtol=1e-6, err_msg=how)
                finally:
                    tensor.close()
                    labels.close()
                del blocks


@case
def array_behind_a_tensor_deleted_or_resized() -> None:
    env = OrtEnvironment.getEnvironment()
    with artifact_session("tiny", optim=False) as session:
        array = BIG_BATCH["input"].copy()
        tensor = OnnxTensor.createTensor(env, array)
        del array
        gc.collect()
        blocks = churn(BIG_BATCH["input"].nbytes)
        with session.trainStep({"input": tensor, "labels": BIG_BATCH["labels"]}) as result:
            np.testing.assert_allclose(_loss(result), BIG_LOSS, rtol=1e-6)
        del blocks
        other = BIG_BATCH["input"].copy()
        second = OnnxTensor.createTensor(env, other)
        try:
            other.resize((1,), refcheck=True)
        except (ValueError, BufferError):
            pass  # numpy refuses: the tensor still exports the buffer
        else:
            raise AssertionError("the array behind a tensor could be resized (its memory reallocated)")
        with session.trainStep({"input": second, "labels": BIG_BATCH["labels"]}) as result:
            np.testing.assert_allclose(_loss(result), BIG_LOSS, rtol=1e-6)
        tensor.close()
        second.close()


@case
def values_outlive_their_result_and_session() -> None:
    state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    session = artifact_session("tiny", checkpoint=state)
    value = session.trainStep(BATCH)[0]  # the Result is dropped at once
    result = session.evalStep(BIG_BATCH)
    expected_eval = _loss(result)
    del session
    gc.collect()
    state.close()
    del state
    gc.collect()
    blocks = churn()
    np.testing.assert_array_equal(value.getValue(), LOSS)
    np.testing.assert_array_equal(_loss(result), expected_eval)
    del blocks, value, result


@case
def checkpoint_outlives_a_dropped_session() -> None:
    state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    session = artifact_session("tiny", checkpoint=state)
    session.trainStep(BATCH).close()
    del session  # never closed: garbage collected
    gc.collect()
    state.addProperty("after", 1)
    assert state.getIntProperty("after") == 1
    state.saveCheckpoint(TMP / "after-dropped-session.ckpt")
    with artifact_session("tiny", checkpoint=state) as again:  # the state is free to bind again
        with again.trainStep(BATCH) as result:
            np.testing.assert_array_equal(_loss(result), LOSS)
    state.close()


@case
def session_outlives_its_dropped_or_closed_checkpoint() -> None:
    state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint")
    session = artifact_session("tiny", checkpoint=state)
    del state
    gc.collect()
    blocks = churn()
    with session.trainStep(BATCH) as result:
        np.testing.assert_array_equal(_loss(result), LOSS)
    session.getCheckpointState().close()  # the caller closes the state the session still uses
    gc.collect()
    blocks = churn()
    with session.trainStep(BATCH) as result:
        np.testing.assert_array_equal(_loss(result), LOSS)
    session.optimizerStep()
    for call in (lambda: session.saveCheckpoint(TMP / "closed-state.ckpt"), lambda: session.getIntProperty("x")):
        try:
            call()  # allowed to work, or to refuse cleanly
        except OrtException:
            pass
    del session, blocks
    gc.collect()


@case
def pinned_output_and_its_array_dropped_while_the_result_lives() -> None:
    env = OrtEnvironment.getEnvironment()
    with artifact_session("tiny") as session:
        array = np.zeros((), np.float32)
        pinned = OnnxTensor.createTensor(env, array)
        result = session.trainStep(BATCH, {LOSS_NAME: pinned})
        del pinned, array
        gc.collect()
        blocks = churn(64, 1000)
        np.testing.assert_array_equal(result[LOSS_NAME].getValue(), LOSS)
        result.close()  # the pinned output is the caller's: it stays open until collected
        del result, blocks
        gc.collect()


@case
def references_dropped_in_other_threads() -> None:
    errors: list = []

    def in_thread(func) -> None:
        def run() -> None:
            try:
                func()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()

    for _ in range(10):
        holder: dict = {}
        _build(holder)
        names = list(holder)
        random.shuffle(names)
        for name in names[:4]:  # the last references, dropped in another thread
            box = [holder.pop(name)]
            in_thread(lambda: (box.clear(), gc.collect()))
            _use(holder, f"after dropping {name} in a thread")
        made: dict = {}
        in_thread(lambda: _build(made))  # made in a thread, dropped here
        made.clear()
        gc.collect()
        holder.clear()
        gc.collect()
    assert not errors, errors


@case
def environment_reference_dropped() -> None:
    env = OrtEnvironment.getEnvironment()
    session = artifact_session("tiny")
    del env
    gc.collect()
    with session.trainStep(BATCH) as result:
        np.testing.assert_array_equal(_loss(result), LOSS)
    env = OrtEnvironment.getEnvironment()
    env.close()  # Java's no-op
    del env
    gc.collect()
    with artifact_session("tiny") as second:
        second.trainStep(BATCH).close()
    session.close()


# --- outputs that are inputs -------------------------------------------------------------------------
# A model may list a graph input as an output (valid ONNX): ONNX Runtime then returns the input's own
# tensor, over the memory the input was made over (the caller's array, or ort_cffi's copy of it).


def _passthrough_model() -> bytes:
    """x (float), h (bfloat16), q (int4) and s (string) are outputs as well as inputs; y = x + 1."""
    import onnx
    from onnx import TensorProto, helper

    names = {"x": TensorProto.FLOAT, "h": TensorProto.BFLOAT16, "q": TensorProto.INT4, "s": TensorProto.STRING}
    values = [helper.make_tensor_value_info(n, t, [None]) for n, t in names.items()]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "passthrough", values,
        [values[0], helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])] + values[1:], [one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _passthrough_training(tmp: Path) -> OrtTrainingSession:
    """The tiny artifacts with the graph input ``input`` also an output of the training and eval models."""
    paths = passthrough_models(TINY, tmp)
    return OrtEnvironment.getEnvironment().createTrainingSession(str(TINY / "checkpoint"), *paths, None)


@case
def run_output_that_is_an_input_outlives_the_input() -> None:
    """It once read freed memory (a segfault): the input array, or the tensor that owned its copy,
    went away while the Result still read it."""
    from ort_cffi import OnnxJavaType, OnnxTensorType

    env = OrtEnvironment.getEnvironment()
    big = np.arange(4_000_000, dtype=np.float32)  # 16 MB: freed with munmap, so a use-after-free faults
    bf16 = np.array([0x3F80, 0x4000], np.uint16)  # 1.0, 2.0
    int4 = np.array([0x21, 0x03], np.uint8)  # 1, 2, 3
    with env.createSession(_passthrough_model()) as session:
        def inputs(x):
            return {
                "x": x,
                "h": OnnxTensor.createTensor(env, bf16.copy().view(np.uint8), [2], OnnxJavaType.BFLOAT16),
                "q": OnnxTensor.createTensor(env, int4.copy(), [3], OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4),
                "s": OnnxTensor.createTensor(env, ["a", "b"]),
            }

        given = inputs(big.copy())  # every input dropped after the run, the array included
        result = session.run(given)
        OnnxTensor.close(given)
        del given
        gc.collect()
        blocks = churn(big.nbytes, 4)
        np.testing.assert_array_equal(result["x"].getValue(), big)
        np.testing.assert_array_equal(result["y"].getValue(), big + 1)
        np.testing.assert_array_equal(result["h"].getValue(), [1.0, 2.0])
        np.testing.assert_array_equal(result["q"].getValue(), [1, 2, 3])
        assert result["s"].getValue().tolist() == ["a", "b"]
        result.close()
        del blocks
        given = inputs(OnnxTensor.createTensor(env, big[::2]))  # strided: the tensor owns a copy
        assert given["x"].ownsBuffer()
        with session.run(given, ["x"]) as result:
            OnnxTensor.close(given)
            del given
            gc.collect()
            blocks = churn(big.nbytes // 2, 4)
            np.testing.assert_array_equal(result[0].getValue(), big[::2])
        del blocks


@case
def train_and_eval_output_that_is_an_input_outlives_the_input() -> None:
    with _passthrough_training(TMP) as session:
        for step in (session.trainStep, session.evalStep):
            array = BIG_BATCH["input"].copy()
            result = step({"input": array, "labels": BIG_BATCH["labels"]})
            del array
            gc.collect()
            blocks = churn(BIG_BATCH["input"].nbytes)
            np.testing.assert_array_equal(result["input"].getValue(), BIG_BATCH["input"])
            result.close()
            del blocks
            tensor = OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), BIG_BATCH["input"].copy())
            with step({"input": tensor, "labels": BIG_BATCH["labels"]}, ["input"]) as result:
                tensor.close()
                del tensor
                gc.collect()
                blocks = churn(BIG_BATCH["input"].nbytes)
                np.testing.assert_array_equal(result[0].getValue(), BIG_BATCH["input"])
            del blocks


# --- interpreter exit (each a whole child program) -----------------------------------------------

PRELUDE = f"""
import gc, sys, threading, time
sys.path.insert(0, {str(ARTIFACTS.parent)!r})
import conftest  # noqa: F401  (puts the test folders and tests/support on sys.path)
import numpy as np
from conftest import tiny_batch
from _childcases import artifact_session
from ort_cffi import OnnxTensor, OrtCheckpointState, OrtEnvironment, OrtException
env = OrtEnvironment.getEnvironment()
BATCH = tiny_batch()
CKPT = {str(TINY / 'checkpoint')!r}
"""

EXIT_SCENARIOS = {
    "everything_open": """
        state = OrtCheckpointState.loadCheckpoint(CKPT)
        session = artifact_session("tiny", checkpoint=state)
        own = artifact_session("tiny")
        array = BATCH["input"].copy()
        tensor = OnnxTensor.createTensor(env, array)
        result = session.trainStep({"input": tensor, "labels": BATCH["labels"]})
        value = own.evalStep(BATCH)[0]
        pinned = OnnxTensor.createTensor(env, np.zeros((), np.float32))
        pinned_result = own.trainStep(BATCH, {"onnx::loss::8": pinned})
        del array
        print("done")
    """,
    "everything_in_reference_cycles": """
        for i in range(5):
            state = OrtCheckpointState.loadCheckpoint(CKPT)
            session = artifact_session("tiny", checkpoint=state)
            tensor = OnnxTensor.createTensor(env, BATCH["input"].copy())
            result = session.trainStep({"input": tensor, "labels": BATCH["labels"]})
            box = [result, tensor, session, state]
            box.append(box)
            session.box = box
            state.session = session
        gc.disable()  # leave the cycles to interpreter exit
        print("done")
    """,
    "checkpoint_closed_by_its_user_session_open": """
        state = OrtCheckpointState.loadCheckpoint(CKPT)
        session = artifact_session("tiny", checkpoint=state)
        state.close()
        result = session.trainStep(BATCH)
        print("done")
    """,
    "values_outliving_a_closed_session": """
        session = artifact_session("tiny")
        values = [session.trainStep(BATCH)[0] for _ in range(5)]
        session.close()
        print("done")
    """,
    "objects_held_by_another_module_and_a_thread_local": """
        import types
        holder = types.ModuleType("holder")
        sys.modules["holder"] = holder
        holder.session = artifact_session("tiny")
        holder.result = holder.session.trainStep(BATCH)
        local = threading.local()
        local.tensor = OnnxTensor.createTensor(env, BATCH["input"].copy())
        print("done")
    """,
    "unhandled_exception_with_objects_open": """
        session = artifact_session("tiny")
        result = session.trainStep(BATCH)
        print("done")
        raise SystemExit(3)
    """,
    "atexit_handler_before_the_bindings_shutdown": """
        import atexit
        session = artifact_session("tiny")
        tensor = OnnxTensor.createTensor(env, BATCH["input"].copy())
        def early():  # registered after ort_cffi's handler, so it runs before it
            session.trainStep({"input": tensor, "labels": BATCH["labels"]}).close()
            print("early: worked")
        atexit.register(early)
        print("done")
    """,
}


def _exit_child(body: str, expected_rc: int = 0) -> None:
    proc = run_child(PRELUDE + body.replace("\n        ", "\n"), check=False, timeout=120)
    assert proc.returncode == expected_rc, f"exit status {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"
    assert "done" in proc.stdout
    for bad in ("Fatal Python error", "Segmentation fault", "Exception ignored", "Traceback"):
        assert bad not in proc.stderr, f"{bad!r} at exit:\n{proc.stderr[-4000:]}"


@pytest.mark.parametrize("scenario", [s for s in EXIT_SCENARIOS if s != "unhandled_exception_with_objects_open"])
def test_interpreter_exit(scenario: str) -> None:
    _exit_child(EXIT_SCENARIOS[scenario])


def test_atexit_handler_running_after_the_bindings_shutdown() -> None:
    """A handler registered before ort_cffi was imported runs after its shutdown: what it does with
    the (now released) objects must raise cleanly, never touch freed memory."""
    proc = run_child(
        f"""
        import atexit, sys
        sys.path.insert(0, {str(ARTIFACTS.parent)!r})
        import conftest  # noqa: F401  (puts the test folders and tests/support on sys.path)
        state = {{}}
        def late():
            from ort_cffi import OrtException
            for what, call in (
                ("step", lambda: state["session"].trainStep({{"input": state["tensor"], "labels": state["labels"]}}).close()),
                ("value", lambda: state["value"].getValue()),
                ("property", lambda: state["checkpoint"].getIntProperty("p")),
                ("new session", lambda: __import__("_childcases").artifact_session("tiny").close()),
            ):
                try:
                    call()
                    print("late", what, "worked")
                except OrtException as exc:
                    print("late", what, "refused:", exc)
        atexit.register(late)
        from conftest import tiny_batch
        from _childcases import artifact_session
        from ort_cffi import OnnxTensor, OrtCheckpointState, OrtEnvironment
        env = OrtEnvironment.getEnvironment()
        batch = tiny_batch()
        state["checkpoint"] = OrtCheckpointState.loadCheckpoint({str(TINY / 'checkpoint')!r})
        state["checkpoint"].addProperty("p", 1)
        state["session"] = artifact_session("tiny")
        state["tensor"] = OnnxTensor.createTensor(env, batch["input"].copy())
        state["labels"] = batch["labels"]
        state["value"] = state["session"].trainStep(batch)[0]
        print("done")
        """,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.count("late ") == 4, proc.stdout + proc.stderr[-4000:]
    assert "Fatal Python error" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-4000:]


def test_interpreter_exit_after_unhandled_exit_code() -> None:
    _exit_child(EXIT_SCENARIOS["unhandled_exception_with_objects_open"], expected_rc=3)


def test_interpreter_exit_while_daemon_threads_are_inside_steps() -> None:
    """The exit handler closes sessions that daemon threads are stepping: it must wait for the step in
    progress (or make the next call raise), never free the session under it."""
    body = """
        session = artifact_session("big")
        batch = tiny_batch(batch=256)
        tensor = OnnxTensor.createTensor(env, batch["input"])
        started = threading.Barrier(4)
        def stepper(use_tensor):
            started.wait()
            while True:
                try:
                    inputs = {"input": tensor if use_tensor else batch["input"], "labels": batch["labels"]}
                    with session.trainStep(inputs) as result:
                        result[0].getValue()
                    session.optimizerStep()
                    session.lazyResetGrad()
                except OrtException:
                    return  # closed under us: the next call raised, as it should
        def reader():
            started.wait()
            while True:
                try:
                    with session.evalStep(batch) as result:
                        for _ in range(20):
                            result[0].getValue()
                except OrtException:
                    return
        for target, args in ((stepper, (True,)), (stepper, (False,)), (reader, ())):
            threading.Thread(target=target, args=args, daemon=True).start()
        started.wait()
        time.sleep(DELAY)
        print("done")
    """
    for delay in (0.0, 0.05, 0.2):
        proc = run_child(PRELUDE + f"DELAY = {delay}\n" + body.replace("\n        ", "\n"), check=False, timeout=120)
        assert proc.returncode == 0, f"delay {delay}: exit status {proc.returncode}\n{proc.stderr[-4000:]}"
        assert "Fatal Python error" not in proc.stderr, proc.stderr[-4000:]


def test_checkpoint_and_tensor_before_the_environment_exists() -> None:
    """Creation order is free too: a checkpoint or a tensor made before ``getEnvironment()`` works."""
    run_child(
        f"""
        import numpy as np
        from ort_cffi import OnnxTensor, OrtCheckpointState, OrtEnvironment
        state = OrtCheckpointState.loadCheckpoint({str(TINY / 'checkpoint')!r})
        tensor = OnnxTensor.createTensor(None, np.ones(3, np.float32))
        env = OrtEnvironment.getEnvironment()
        session = env.createTrainingSession(state, {str(TINY / 'training_model.onnx')!r})
        session.close(); state.close(); tensor.close()
        """
    )


@pytest.mark.parametrize("name", cases(__name__))
def test_lifetimes(name: str, request) -> None:
    check(__name__, name, timeout=300, request=request)
