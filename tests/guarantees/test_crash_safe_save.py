"""Checkpoints survive crashes.

``saveCheckpoint`` never leaves a partial file at the target path: it writes a temporary file beside
the target, flushes it to disk, then renames it over the target; on any failure the temporary file
is removed and the old checkpoint kept. A process killed with SIGKILL at any moment of a save leaves
the previous or the new checkpoint, loadable.

Saving is ordinary use, so most tests run in this process (with ``os`` calls spied on or made to
fail); the SIGKILL test kills child processes, and what they leave is checked in a child too.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import ort_cffi._facade.sessions.checkpoint as checkpoint
from _childcases import artifact_session
from conftest import ARTIFACTS, ROOT, run_child, tiny_batch
from ort_cffi import OrtCheckpointState, OrtEnvironment, OrtErrorCode, OrtException

TINY = ARTIFACTS / "tiny"
BIG = ARTIFACTS / "big"


@pytest.fixture
def env():
    return OrtEnvironment.getEnvironment()


@pytest.fixture
def session(env):
    with artifact_session("tiny") as s:
        yield s


def _listing(folder: Path) -> set:
    return set(os.listdir(folder))


def _property(path: Path, name: str = "generation") -> int:
    with OrtCheckpointState.loadCheckpoint(path) as state:
        return state.getIntProperty(name)


def _save_generation(session, path: Path, generation: int, optimizer: bool = False) -> None:
    session.addProperty("generation", generation)
    session.saveCheckpoint(path, optimizer)


# --- the ordinary path ----------------------------------------------------------------------------


def test_save_writes_a_loadable_file_and_leaves_nothing_else(session, tmp_path) -> None:
    target = tmp_path / "model.ckpt"
    _save_generation(session, target, 1, optimizer=True)
    assert _listing(tmp_path) == {"model.ckpt"}
    assert _property(target) == 1
    _save_generation(session, target, 2)
    assert _listing(tmp_path) == {"model.ckpt"}
    assert _property(target) == 2
    with OrtCheckpointState.loadCheckpoint(target) as state:
        with artifact_session("tiny", checkpoint=state) as again:
            with session.trainStep(tiny_batch()) as a, again.trainStep(tiny_batch()) as b:
                np.testing.assert_array_equal(a[0].getValue(), b[0].getValue())


def test_save_accepts_str_and_pathlike_and_relative_paths(session, tmp_path, monkeypatch) -> None:
    session.saveCheckpoint(str(tmp_path / "a.ckpt"))
    session.saveCheckpoint(tmp_path / "b.ckpt")
    monkeypatch.chdir(tmp_path)
    session.saveCheckpoint("c.ckpt")
    assert _listing(tmp_path) == {"a.ckpt", "b.ckpt", "c.ckpt"}


def test_save_goes_through_a_flushed_temporary_file_beside_the_target(session, tmp_path, monkeypatch) -> None:
    """Spy on the file system calls: the data is written to another file in the target's folder,
    that file is fsynced, and only then renamed over the target (whose old content stays until then);
    the folder is fsynced after the rename."""
    target = tmp_path / "model.ckpt"
    _save_generation(session, target, 1)
    old = target.read_bytes()
    events: list = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fd_path(fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return "?"

    def fsync(fd):
        events.append(("fsync", fd_path(fd)))
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        events.append(("replace", os.fspath(src), os.fspath(dst), target.read_bytes() == old))
        return real_replace(src, dst, *args, **kwargs)

    def rename(src, dst, *args, **kwargs):
        events.append(("replace", os.fspath(src), os.fspath(dst), target.read_bytes() == old))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    _save_generation(session, target, 2)
    monkeypatch.undo()

    renames = [e for e in events if e[0] == "replace"]
    assert len(renames) == 1, events
    _, src, dst, target_untouched = renames[0]
    assert os.path.abspath(dst) == str(target)
    assert os.path.dirname(os.path.abspath(src)) == str(tmp_path), "the temporary file is not beside the target"
    assert os.path.abspath(src) != str(target)
    assert target_untouched, "the target was modified before the rename"
    position = events.index(renames[0])
    assert ("fsync", os.path.abspath(src)) in events[:position], f"the temporary file was not fsynced before the rename: {events}"
    assert ("fsync", str(tmp_path)) in events[position:], f"the folder was not fsynced after the rename: {events}"
    assert _property(target) == 2
    assert _listing(tmp_path) == {"model.ckpt"}


def test_save_and_load_with_a_non_ascii_path(session, tmp_path) -> None:
    folder = tmp_path / "Prüfung ✓ 模型"
    folder.mkdir()
    target = folder / "zustand é.ckpt"
    _save_generation(session, target, 5)
    assert _property(target) == 5
    assert _listing(folder) == {target.name}


# --- failures keep the old checkpoint and remove the temporary file --------------------------------


def _assert_kept(tmp_path: Path, target: Path, old: bytes) -> None:
    assert target.read_bytes() == old, "the old checkpoint was changed by a failed save"
    assert _listing(tmp_path) == {target.name}, f"files left behind: {_listing(tmp_path) - {target.name}}"
    assert _property(target) == 1


@pytest.mark.parametrize("failing", ["fsync", "replace", "native save", "native save after writing"])
def test_a_failed_save_keeps_the_old_checkpoint_and_removes_the_temporary_file(session, tmp_path, monkeypatch, failing) -> None:
    target = tmp_path / "model.ckpt"
    _save_generation(session, target, 1)
    old = target.read_bytes()
    session.addProperty("generation", 2)

    class Injected(OSError):
        pass

    if failing == "fsync":
        def fsync(fd):
            raise Injected("injected fsync failure")

        monkeypatch.setattr(os, "fsync", fsync)
    elif failing == "replace":
        def replace(*args, **kwargs):
            raise Injected("injected rename failure")

        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "rename", replace)
    else:
        real_check_status = checkpoint.check_status

        def check_status(status, context=None):
            real_check_status(status, context)  # the native call has run (and written its file)
            if context and "saving checkpoint" in context:
                if failing == "native save":
                    raise OrtException("injected native failure", OrtErrorCode.ORT_FAIL)
                raise Injected("injected failure after the native write")

        monkeypatch.setattr(checkpoint, "check_status", check_status)
    with pytest.raises((OSError, OrtException)):
        session.saveCheckpoint(target)
    monkeypatch.undo()
    _assert_kept(tmp_path, target, old)


def test_a_save_over_a_folder_fails_and_keeps_the_folder(session, tmp_path) -> None:
    target = tmp_path / "model.ckpt"
    target.mkdir()
    (target / "inside").write_text("x")
    with pytest.raises((OSError, OrtException)):
        session.saveCheckpoint(target)
    assert (target / "inside").read_text() == "x"
    assert _listing(tmp_path) == {"model.ckpt"}


def test_a_save_into_a_missing_folder_names_the_path(session, tmp_path) -> None:
    target = tmp_path / "missing" / "model.ckpt"
    with pytest.raises(FileNotFoundError) as info:
        session.saveCheckpoint(target)
    assert str(target) in str(info.value)
    assert _listing(tmp_path) == set()


def test_a_refused_save_writes_nothing(tmp_path) -> None:
    target = tmp_path / "model.ckpt"
    with artifact_session("tiny", optim=False) as session:
        with pytest.raises(OrtException):
            session.saveCheckpoint(target, True)  # no optimizer model: no optimizer state to save
    assert _listing(tmp_path) == set()


def test_a_failed_export_leaves_no_file(session, tmp_path) -> None:
    target = tmp_path / "inference.onnx"
    target.write_bytes(b"old")
    with pytest.raises(OrtException):
        session.exportModelForInference(target, ["no such output"])
    assert target.read_bytes() == b"old"
    assert _listing(tmp_path) == {"inference.onnx"}


def test_checkpoint_state_save_is_crash_safe_too(tmp_path, monkeypatch, env) -> None:
    target = tmp_path / "state.ckpt"
    with OrtCheckpointState.loadCheckpoint(TINY / "checkpoint") as state:
        state.addProperty("generation", 1)
        state.saveCheckpoint(target)
        old = target.read_bytes()
        state.addProperty("generation", 2)

        def fsync(fd):
            raise OSError("injected")

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(OSError):
            state.saveCheckpoint(target)
        monkeypatch.undo()
    _assert_kept(tmp_path, target, old)


# --- SIGKILL at random moments of a save loop ---------------------------------------------------

SAVER = """
import sys
sys.path.insert(0, {tests!r})
import conftest  # noqa: F401  (puts the test folders and tests/support on sys.path)
from conftest import tiny_batch
from _childcases import artifact_session
from ort_cffi import OrtEnvironment
OrtEnvironment.getEnvironment()
target = {target!r}
generation = {start}
session = artifact_session("big")
batch = tiny_batch(batch=16)
print("READY", flush=True)
while True:
    generation += 1
    session.trainStep(batch).close()
    session.optimizerStep()
    session.lazyResetGrad()
    session.addProperty("generation", generation)
    session.saveCheckpoint(target, True)
    print("SAVED", generation, flush=True)
"""

VERIFY = """
import json, sys
sys.path.insert(0, {tests!r})
import conftest  # noqa: F401  (puts the test folders and tests/support on sys.path)
import numpy as np
from conftest import tiny_batch
from _childcases import artifact_session
from ort_cffi import OrtEnvironment
from ort_cffi import OrtCheckpointState
OrtEnvironment.getEnvironment()
report = []
for path in {paths!r}:
    with OrtCheckpointState.loadCheckpoint(path) as state:
        generation = state.getIntProperty("generation")
        with artifact_session("big", checkpoint=state) as session:
            with session.trainStep(tiny_batch(batch=16)) as result:
                loss = float(result[0].getValue())
            session.optimizerStep()
    report.append([path, generation, loss])
print("REPORT", json.dumps(report))
"""


def test_sigkill_during_saves_leaves_a_whole_checkpoint(tmp_path) -> None:
    """A child trains the 784-500-10 model (a 4.8 MB checkpoint with optimizer state) and saves after
    every step; it is killed with SIGKILL at a random moment, again and again. After each kill the
    target must hold the last checkpoint the child reported saved, or the one it was saving."""
    target = tmp_path / "model.ckpt"
    rng = random.Random(4)
    snapshots, expected = [], []
    generation = 0
    kills = 8
    for round_ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", SAVER.format(tests=str(ROOT / "tests"), target=str(target), start=generation)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
        )
        try:
            assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
            consumed = []  # lines read before the kill: the first SAVED among them counts too
            if round_ == 0:  # make sure there is a previous checkpoint
                while not consumed or not consumed[-1].startswith("SAVED"):
                    consumed.append(proc.stdout.readline())
                    assert consumed[-1], f"the saver ended before its first save: {proc.stderr.read()[-3000:]}"
            time.sleep(rng.uniform(0.0, 0.4))
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err[-3000:]
        lines = [line.strip() for line in consumed] + out.splitlines()
        saved = [int(line.split()[1]) for line in lines if line.startswith("SAVED")]
        assert target.exists(), "no checkpoint at the target after a kill"
        snapshot = tmp_path / f"snapshot-{round_}.ckpt"
        snapshot.write_bytes(target.read_bytes())
        snapshots.append(str(snapshot))
        if saved:  # the last save reported, or the one under way (renamed, not yet reported)
            allowed = {saved[-1], saved[-1] + 1}
        else:  # killed before its first save finished: what was there, or that first save
            allowed = set(expected[-1] if expected else ()) | {generation + 1}
        expected.append(tuple(sorted(allowed)))
        generation = max(allowed)  # the next child continues the count (generations are never reused)
    assert len(expected) == kills
    proc = run_child(VERIFY.format(tests=str(ROOT / "tests"), paths=snapshots), timeout=300, check=False)
    assert proc.returncode == 0, f"a checkpoint left by a killed save does not load (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.split("REPORT", 1)[1])
    for (path, found, loss), allowed in zip(report, expected):
        assert found in allowed, f"{path}: generation {found}, expected one of {allowed}"
        assert np.isfinite(loss)
    leftovers = [name for name in os.listdir(tmp_path) if name != "model.ckpt" and not name.startswith("snapshot-")]
    # SIGKILL cannot clean up: temporary files may stay, but only beside the target, never at it.
    for name in leftovers:
        assert name != target.name


def test_saved_files_get_ordinary_permissions(tmp_path):
    """The temporary file of a crash-safe save is made 0600; the saved file must not keep that."""
    import os
    import stat

    from ort_cffi import OrtEnvironment

    folder = ARTIFACTS / "twoout"
    env = OrtEnvironment.getEnvironment()
    old_umask = os.umask(0o022)
    try:
        with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                       str(folder / "eval_model.onnx")) as session:
            session.saveCheckpoint(tmp_path / "ckpt")
            session.exportModelForInference(tmp_path / "model.onnx", ["logits"])
            assert stat.S_IMODE(os.stat(tmp_path / "ckpt").st_mode) == 0o644
            assert stat.S_IMODE(os.stat(tmp_path / "model.onnx").st_mode) == 0o644
            os.chmod(tmp_path / "ckpt", 0o640)  # an existing file keeps its mode
            session.saveCheckpoint(tmp_path / "ckpt")
            assert stat.S_IMODE(os.stat(tmp_path / "ckpt").st_mode) == 0o640
    finally:
        os.umask(old_umask)
