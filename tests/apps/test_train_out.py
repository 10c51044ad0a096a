"""``ort-cffi-train``'s --out: a run in it is never replaced unasked (--resume continues it, --overwrite
replaces it), and a run that fails before its first epoch leaves the file system as it found it."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import DIGITS, ROOT
from ort_cffi import OrtEnvironment
from ort_cffi.cli import train as cli
from ort_cffi.trainer import loop as train_loop

QUIET = ("--no-progress", "--no-plot")


def run(capsys: pytest.CaptureFixture, *args: object) -> "tuple[int, str, str]":
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def snapshot(folder: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_in_out_is_never_replaced_unasked(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted run, then the same --out with --epochs 1 and no --resume, exited 0 and replaced the
    checkpoints; so did a finished run. Now both are refused, pointing at what was probably meant."""
    out = tmp_path / "cnn_int"
    evaluate, calls = train_loop.evaluate, []

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 3:  # epochs 1 and 2, then Ctrl-C in epoch 3's validation
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(train_loop, "evaluate", interrupted)
    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 3, "--out", out, *QUIET)
    assert code == 130 and f"interrupted: resume with --out {out} --resume" in stderr
    monkeypatch.setattr(train_loop, "evaluate", evaluate)
    kept = snapshot(out)

    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)
    assert code == 2
    assert stderr == (f"error: {out} holds a run that stopped after epoch 2 of 3: continue it with --resume "
                      f"(ort-cffi-train --out {out} --resume), or write the new run to another --out (--overwrite "
                      "would discard it)\n")
    assert snapshot(out) == kept

    assert run(capsys, "--out", out, "--resume", *QUIET)[0] == 0
    finished = snapshot(out)
    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)
    assert code == 2
    assert stderr == (f"error: {out} holds a finished run (3 of 3 epochs, inference model exported): a run is never "
                      "overwritten unless asked. To train again in this folder, replacing it, pass --overwrite; or "
                      "write the new run to another --out\n")
    assert snapshot(out) == finished

    with pytest.raises(SystemExit) as exited:  # a contradiction: argparse's usage error
        cli.main(["--out", str(out), "--resume", "--overwrite"])
    assert exited.value.code == 2 and "--resume and --overwrite exclude each other" in capsys.readouterr().err

    code, stdout, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", out, "--overwrite", *QUIET)
    assert code == 0, stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert [e["epoch"] for e in metrics["epochs"]] == [1] and metrics["config"]["epochs"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["best_checkpoint", "inference_model.onnx", "last_checkpoint",
                                                     "metrics.json"]


def test_overwrite_removes_what_the_new_run_does_not_write(tmp_path: Path, small_data: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """The old run's plot and a best checkpoint the new run might not beat must not pass for the new run's."""
    out = tmp_path / "run"
    assert run(capsys, "--data", small_data, "--epochs", 1, "--out", out, "--no-progress")[0] == 0
    assert (out / "training.png").is_file()
    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", out, "--overwrite", "--lr", 1e-9, *QUIET)
    assert code == 0, stderr
    assert not (out / "training.png").exists()
    assert json.loads((out / "metrics.json").read_text())["epochs"][0]["best"]  # the best is this run's


def test_an_inference_model_in_out_is_not_replaced_unasked(tmp_path: Path, small_data: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    """The export follows the run-folder rule: an --out holding an inference model (no checkpoint to resume)
    is refused too, with --overwrite as the way on."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "inference_model.onnx").write_bytes(b"the user's model")
    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)
    assert code == 2 and stderr == (f"error: {out} holds inference_model.onnx of an earlier run (and no last_checkpoint "
                                    "to resume): a run's files are never overwritten unless asked. To train in this "
                                    "folder, replacing them, pass --overwrite; or write the new run to another --out\n")
    assert (out / "inference_model.onnx").read_bytes() == b"the user's model"
    assert run(capsys, "--data", small_data, "--epochs", 1, "--out", out, "--overwrite", *QUIET)[0] == 0
    assert (out / "inference_model.onnx").read_bytes() != b"the user's model"


def _npz(tmp_path: Path, change: Callable[[dict], None]) -> Path:
    with np.load(DIGITS / "digits.npz") as digits:
        arrays = {key: digits[key][:200] for key in digits.files}
    change(arrays)
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def _rename(arrays: dict) -> None:
    arrays["train_image"] = arrays.pop("train_input")


def _float64(arrays: dict) -> None:
    arrays["train_input"] = arrays["train_input"].astype(np.float64)


def _half_validation(arrays: dict) -> None:  # no validation at all is split off the training data (--val-split)
    del arrays["val_labels"]


def _labels_out_of_range(arrays: dict) -> None:
    arrays["train_labels"][0] = 12


@pytest.mark.parametrize("change", [_rename, _float64, _half_validation, _labels_out_of_range],
                         ids=["keys", "float64", "half-validation", "labels"])
def test_a_failed_preflight_leaves_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture, change) -> None:
    """Each of these left an empty --out folder (and the parents it made)."""
    data = _npz(tmp_path, change)
    code, _, stderr = run(capsys, "--data", data, "--out", tmp_path / "new" / "out", *QUIET)
    assert code == 2 and stderr.startswith("error: dataset "), stderr
    assert not (tmp_path / "new").exists()
    existing = tmp_path / "existing"  # a folder the user made: kept, as it was
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert run(capsys, "--data", data, "--out", existing, *QUIET)[0] == 2
    assert snapshot(existing) == {"notes.txt": b"mine"} and sorted(p.name for p in existing.iterdir()) == ["notes.txt"]


def test_a_file_that_is_not_npz_leaves_no_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = tmp_path / "data.npz"
    data.write_text("not an archive")
    code, _, stderr = run(capsys, "--data", data, "--out", tmp_path / "out", *QUIET)
    assert code == 2 and "is not an .npz file" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npz"]


def _digits_model(path: Path) -> Path:
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as s:
        s.exportModelForInference(path, ["logits"])
    return path


def _no_parameters(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["input"], ["logits"])], "none",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("make, extra", [(_digits_model, ["--trainable", "nothing.*"]), (_no_parameters, [])],
                         ids=["failed-generation", "no-parameters"])
def test_a_failed_generation_leaves_no_folder(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture,
                                              make, extra) -> None:
    model = make(tmp_path / "model.onnx")
    code, _, stderr = run(capsys, "--model", model, "--data", small_data, *extra, "--out", tmp_path / "runs" / "x", *QUIET)
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    existing = tmp_path / "existing"  # an --out that existed keeps nothing of the run: no artifacts/ either
    existing.mkdir()
    assert run(capsys, "--model", model, "--data", small_data, *extra, "--out", existing, *QUIET)[0] == 2
    assert list(existing.iterdir()) == []


def test_a_failed_preflight_after_generating_removes_the_artifacts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Artifacts generated, then the dataset refused: the run made OUT/artifacts, so it goes again."""
    model = _digits_model(tmp_path / "model.onnx")
    data = _npz(tmp_path, _float64)
    existing = tmp_path / "existing"
    existing.mkdir()
    code, _, stderr = run(capsys, "--model", model, "--data", data, "--out", existing, *QUIET)
    assert code == 2 and "train_input is float64" in stderr, stderr
    assert list(existing.iterdir()) == []


def test_overwrite_keeps_the_old_run_and_artifacts_when_the_preflight_fails(
        tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    """--overwrite --model regenerates the artifacts; they wait beside the old ones until the checks pass.
    A dataset refused after the generation leaves the old run and its artifacts exactly as they were (the
    regenerated artifacts used to stay, under a run whose checkpoints belong to the old ones); a pre-flight
    that passes puts the new artifacts in place, where the run's record names them."""
    model = _digits_model(tmp_path / "model.onnx")
    out = tmp_path / "run"
    assert run(capsys, "--model", model, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)[0] == 0
    before = snapshot(out)
    code, _, stderr = run(capsys, "--model", model, "--data", _npz(tmp_path, _float64), "--trainable", "fc2.*",
                          "--epochs", 1, "--out", out, "--overwrite", *QUIET)
    assert code == 2 and "train_input is float64" in stderr, stderr
    assert snapshot(out) == before
    code, stdout, stderr = run(capsys, "--model", model, "--data", small_data, "--trainable", "fc2.*", "--epochs", 1,
                               "--out", out, "--overwrite", *QUIET)
    assert code == 0, stderr
    assert "they replace" in stdout and not (out / ".artifacts-staged").exists()
    manifest = json.loads((out / "artifacts" / "artifacts.json").read_text())
    assert manifest["options"]["requires_grad"] == ["fc2.*"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["artifacts"]["path"] == str((out / "artifacts").resolve())


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder``, made so that nothing can be created, written or renamed in it. chmod does not stop root
    (these tests run as root in CI): there the folder is made immutable (chattr +i), or, on a file system
    without that attribute (overlayfs) or without chattr (the Debian sid root of scripts/newest_pythons.sh), a
    read-only bind mount of itself."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    elif shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        undo = ["chattr", "-i", str(folder)]
    else:
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        undo = ["umount", str(folder)]
    try:
        with pytest.raises(OSError):  # the premise: the folder really cannot be written
            (folder / "probe").write_text("")
        yield folder
    finally:
        subprocess.run(undo, check=True)


def child_train(*args: object, cwd: Path, before: str = "") -> "subprocess.CompletedProcess[str]":
    """``ort-cffi-train`` in a child process (``before``: Python run first, in it), as a user would see it."""
    code = before + "\nimport sys\nfrom ort_cffi.cli import train\nsys.exit(train.main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)


def test_a_read_only_out_is_refused_before_training(tmp_path: Path, small_data: Path) -> None:
    """An immutable --out trained the whole epoch, then failed with a traceback on the checkpoint's temporary
    file: the epoch was lost. Now a probe file (created, written, renamed) finds it before anything runs."""
    with read_only(tmp_path / "ro") as out:
        for extra in ((), ("--data", small_data)):  # the default example (--out alone), and a dataset given
            proc = child_train(*extra, "--epochs", 1, "--out", out, "--no-progress", cwd=tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert re.fullmatch(f"error: --out {re.escape(repr(str(out)))} cannot be written "
                                r"\((Operation not permitted|Permission denied|Read-only file system): a probe file "
                                r"could not be created, written and renamed there\): nothing was trained; choose "
                                r"another --out, or make this one writable\n", proc.stderr), proc.stderr
            assert "epoch 1/" not in proc.stdout and "before training" not in proc.stdout
        assert list(out.iterdir()) == []


# The child: after epoch 1 is saved, the disk "fills": files may not grow past 1 KiB (RLIMIT_FSIZE, with
# SIGXFSZ ignored, so that writes fail with EFBIG as on a full disk instead of killing the process).
FILL_THE_DISK_AFTER_EPOCH_1 = """
import resource, signal
from ort_cffi.trainer import loop
evaluate, calls = loop.evaluate, []
def evaluate_then_fill(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # epoch 2's validation: its checkpoints come next
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return evaluate(*args, **kwargs)
loop.evaluate = evaluate_then_fill
"""


def test_a_full_disk_during_training_says_what_was_kept(tmp_path: Path, small_data: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    proc = child_train("--data", small_data, "--epochs", 3, "--out", out, *QUIET, cwd=tmp_path,
                       before=FILL_THE_DISK_AFTER_EPOCH_1)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "epoch 1/3" in proc.stdout and "epoch 2/3" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot write {out}{os.sep}"), proc.stderr
    assert lines[0].endswith(f"Kept: last_checkpoint, best_checkpoint, metrics.json in {out}, last_checkpoint at "
                             f"epoch 1 of 3; once {out} can be written, continue with: ort-cffi-train --out {out} "
                             "--resume"), proc.stderr
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind
    code, stdout, stderr = run(capsys, "--out", out, "--resume", *QUIET)  # what was kept is whole
    assert code == 0, stderr
    assert "resuming:" in stdout and "at epoch 1, step" in stdout and "epoch 3/3" in stdout
