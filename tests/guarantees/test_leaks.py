"""No leaks.

Thousands of steps with fresh tensors and results left to the garbage collector, and hundreds of
sessions created and closed (or dropped), do not grow resident memory: each case warms up, measures
RSS (``/proc/self/statm``, after ``malloc_trim``), repeats, and bounds the growth. The bounds sit far
below what one leaked object per iteration would cost (noted per case) and far above the noise
measured (well under 1 MiB). The cases run in child processes (a fresh heap each; see
``_childcases``), which also check that no native handle is left alive after each case; the
``no_native_leaks`` fixture of ``conftest.py`` does the same after every test of the suite, and a test
here checks that the fixture does fail a test that leaves a handle open.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from _childcases import artifact_session, case, cases, check, rss_bytes
from conftest import ARTIFACTS, ROOT, run_child, tiny_batch
from ort_cffi import OnnxTensor, OrtEnvironment
from ort_cffi._native.handles import live_handles
from ort_cffi import OrtCheckpointState

TINY = ARTIFACTS / "tiny"
MIB = 2**20


def child_setup() -> None:
    OrtEnvironment.getEnvironment()  # (a checkpoint loaded before it is test_lifetimes' business)


def bounded(label: str, run, warmup: int, count: int, bound_mib: float) -> None:
    for i in range(warmup):
        run(i)
    before = rss_bytes()
    for i in range(count):
        run(i)
    grown = (rss_bytes() - before) / MIB
    print(f"{label}: {grown:+.2f} MiB over {count}", file=sys.stderr)
    assert grown < bound_mib, f"{label}: resident memory grew {grown:.1f} MiB over {count} iterations (bound {bound_mib} MiB)"


@case
def thousands_of_steps_with_fresh_tensors_and_results_left_to_gc() -> None:
    """twoout at batch 1024: a leaked logits output is 12 KiB (3000 of them: 36 MiB), a leaked input
    tensor keeps its 80 KiB array (240 MiB)."""
    env = OrtEnvironment.getEnvironment()
    session = artifact_session("twoout")
    batch = tiny_batch(batch=1024, features=20, classes=3)

    def step(i: int) -> None:
        if i % 2:
            inputs = {
                "input": OnnxTensor.createTensor(env, batch["input"].copy()),
                "labels": OnnxTensor.createTensor(env, batch["labels"].copy()),
            }
        else:
            inputs = {"input": batch["input"].copy(), "labels": batch["labels"]}  # tensors made by the step
        result = session.trainStep(inputs, {"logits"})
        result["logits"].getValue()
        evaluation = session.evalStep(inputs)
        evaluation[1].getInfo()
        if i % 10 == 0:
            pinned = OnnxTensor.createTensor(env, np.zeros((1024, 3), np.float32))
            session.evalStep(inputs, {"logits": pinned})
        session.optimizerStep()
        session.lazyResetGrad()
        # nothing closed: results, values and tensors go with their last reference

    try:
        bounded("3000 steps", step, warmup=300, count=3000, bound_mib=10)
    finally:
        session.close()


@case
def hundreds_of_sessions_created_and_closed_or_dropped() -> None:
    """A leaked tiny session (models, state, optimizer) costs about 0.9 MiB: 200 would be ~180 MiB."""
    batch = tiny_batch()

    def session_cycle(i: int) -> None:
        state = OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") if i % 2 == 0 else None
        session = artifact_session("tiny", checkpoint=state)
        session.trainStep(batch)
        session.optimizerStep()
        session.evalStep(batch)
        session.addProperty("i", i)
        if i % 3 != 0:  # every third one is only dropped, never closed
            session.close()
            if state is not None:
                state.close()

    bounded("200 sessions", session_cycle, warmup=20, count=200, bound_mib=15)


@case
def inference_sessions_and_runs() -> None:
    folder = Path(tempfile.mkdtemp(prefix="ort_cffi_leaks_"))
    model = folder / "inference.onnx"
    with artifact_session("tiny") as training:
        training.exportModelForInference(model, ["onnx::loss::8"])
    env = OrtEnvironment.getEnvironment()
    batch = tiny_batch(batch=512)

    def session_cycle(i: int) -> None:
        session = env.createSession(str(model))
        session.run(batch)[0].getValue()
        session.getInputInfo()
        if i % 2:
            session.close()

    bounded("100 inference sessions", session_cycle, warmup=10, count=100, bound_mib=15)
    with env.createSession(str(model)) as session:
        bounded("2000 runs", lambda i: session.run(batch)[0].getValue(), warmup=200, count=2000, bound_mib=10)
    shutil.rmtree(folder)


@case
def checkpoints_properties_and_parameters() -> None:
    """A leaked big checkpoint is 1.6 MB, a leaked 100 KB string property 100 KB, a leaked parameter
    copy 1.6 MB: each bound is a fraction of what a leak per iteration would cost."""
    big = ARTIFACTS / "big" / "checkpoint"
    folder = Path(tempfile.mkdtemp(prefix="ort_cffi_leaks_"))
    bounded("300 checkpoint loads", lambda i: OrtCheckpointState.loadCheckpoint(big), warmup=20, count=300, bound_mib=30)
    with OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") as state:
        text = "p" * 100_000

        def properties(i: int) -> None:
            state.addProperty("text", text)
            assert len(state.getStringProperty("text")) == 100_000
            state.addProperty("n", i)
            state.getIntProperty(OrtEnvironment.getEnvironment().defaultAllocator, "n")

        bounded("2000 property round trips", properties, warmup=100, count=2000, bound_mib=20)
        bounded("100 saves", lambda i: state.saveCheckpoint(folder / "c.ckpt"), warmup=10, count=100, bound_mib=10)
    with artifact_session("big", eval=False) as session:
        def parameters(i: int) -> None:
            buffer = session.copyParametersToBuffer()
            session.copyBufferToParameters(buffer)
            session.getCheckpointState().getParameter("fc1.weight")

        bounded("300 parameter copies", parameters, warmup=20, count=300, bound_mib=40)
    shutil.rmtree(folder)


# --- the parent side ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases(__name__))
def test_leaks(name: str, request) -> None:
    check(__name__, name, timeout=300, request=request)


def test_live_handles_lists_what_is_open() -> None:
    env = OrtEnvironment.getEnvironment()
    before = set(map(id, live_handles()))
    tensor = OnnxTensor.createTensor(env, np.zeros(3, np.float32))
    with artifact_session("tiny") as session:
        result = session.trainStep(tiny_batch())
        opened = [h for h in live_handles() if id(h) not in before]
        assert tensor in opened and session in opened and result[0] in opened
        assert session.getCheckpointState() in opened
        result.close()
    tensor.close()
    assert not [h for h in live_handles() if id(h) not in before]


def test_the_leak_fixture_fails_a_test_that_leaves_a_handle_open(tmp_path) -> None:
    """conftest's autouse ``no_native_leaks`` must turn a forgotten handle into a test error."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leaky.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            from ort_cffi import OnnxTensor, OrtEnvironment
            kept = []
            def test_closes_everything():
                OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), np.zeros(3, np.float32)).close()
            def test_leaves_a_tensor_open():
                kept.append(OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), np.zeros(3, np.float32)))
            """
        )
    )
    proc = run_child(
        f"import sys, pytest; sys.exit(pytest.main([{str(tmp_path)!r}, '-q', '-p', 'no:cacheprovider', '--rootdir', {str(tmp_path)!r}]))",
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "native handles left alive" in proc.stdout
    assert "2 passed, 1 error" in proc.stdout, proc.stdout[-3000:]  # the leaky test errors at teardown
