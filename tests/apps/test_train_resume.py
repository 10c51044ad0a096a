"""``ort-cffi-train --resume`` keeps its promise: the run's configuration (learning rate, schedule, warm-up,
batch size, epochs, seed, dataset, artifacts) is stored with every checkpoint and restored, contradictions
are refused unless --override, and a resume with nothing left to do says so. The first three tests are the
failures a new user met with the trainer that stored only the epoch and step."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import DIGITS, ROOT
from ort_cffi import OrtCheckpointState
from ort_cffi.cli import train as cli
from ort_cffi.trainer import loop as train_loop

QUIET = ["--no-plot"]


def run(capsys: pytest.CaptureFixture, *args: object) -> "tuple[int, str, str]":
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def interrupt_during_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int) -> None:
    """Ctrl-C during the validation of ``epoch``: the last checkpoint is the one before."""
    evaluate, calls = train_loop.evaluate, []

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == epoch:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(train_loop, "evaluate", interrupted)


def test_a_resume_keeps_the_learning_rate(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Started with --lr 1e-3 and resumed without it, the run jumped to the default 0.01. Now `--resume`
    alone restores it, and the dataset and epochs with it: the resumed run is the uninterrupted one."""
    run_options = ["--data", small_data, "--epochs", 4, "--lr", "1e-3", "--warmup-steps", 5, "--seed", 3, *QUIET]
    code, _, stderr = run(capsys, *run_options, "--out", tmp_path / "straight")
    assert code == 0, stderr

    out = tmp_path / "resumed"
    interrupt_during_epoch(monkeypatch, 3)
    assert run(capsys, *run_options, "--out", out)[0] == 130
    monkeypatch.undo()
    code, stdout, stderr = run(capsys, "--out", out, "--resume", *QUIET)
    assert code == 0, stderr
    assert "training:  4 epochs x 13 steps, batch 32, lr 0.001 (linear schedule, warm-up 5 steps), seed 3" in stdout
    assert f"resuming:  {out / 'last_checkpoint'} at epoch 2, step 26 with the run's stored configuration" in stdout
    assert f"dataset:   {small_data.resolve()}" in stdout
    assert metrics(out)["steps"] == metrics(tmp_path / "straight")["steps"]


def test_resuming_a_named_checkpoint_continues_its_run_and_keeps_its_history(tmp_path: Path, small_data: Path,
                                                                             capsys: pytest.CaptureFixture,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`--resume DIR/last_checkpoint` without --out wrote into runs/<artifacts> (another run's folder)
    and started a new history; and every resume blanked the validation before training."""
    out = tmp_path / "run"
    assert run(capsys, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)[0] == 0
    first = metrics(out)
    assert first["before"]["val_loss"] > 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where runs/ would be made
    code, stdout, stderr = run(capsys, "--resume", out / "last_checkpoint", "--epochs", 2, "--override", *QUIET)
    assert code == 0, stderr
    assert f"output:    {out}" in stdout and not (elsewhere / "runs").exists()
    again = metrics(out)
    assert again["before"] == first["before"]
    assert again["epochs"][0] == first["epochs"][0] and [e["epoch"] for e in again["epochs"]] == [1, 2]


def test_another_batch_size_is_refused_or_overridden(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    """Resumed with another --batch-size, the run trained at a learning rate of 0 (its schedule counted the
    steps of the new batch size from the start). Now it is refused, or with --override the schedule ends
    after the remaining epochs at the new batch size."""
    out = tmp_path / "run"
    assert run(capsys, "--data", small_data, "--epochs", 2, "--batch-size", 16, "--out", out, *QUIET)[0] == 0
    code, _, stderr = run(capsys, "--out", out, "--resume", "--epochs", 4, "--batch-size", 64, *QUIET)
    assert code == 2
    assert stderr.startswith("error: --epochs 4 and --batch-size 64 contradict the run being resumed, which has "
                             "--epochs 2 and --batch-size 16 (--epochs 2, --batch-size 16, --lr 0.01, --schedule linear, "
                             "--warmup-steps 25, --seed 0, --bn-reestimate, --patience off). Leave them out to continue the run as it was, or add "
                             "--override to change the run from here on"), stderr

    code, stdout, stderr = run(capsys, "--out", out, "--resume", "--epochs", 4, "--batch-size", 64, "--override", *QUIET)
    assert code == 0, stderr
    assert "overriding: --epochs 2 -> 4\noverriding: --batch-size 16 -> 64\n" in stdout
    resumed = [s for s in metrics(out)["steps"] if s["epoch"] > 2]
    assert [s["step"] for s in resumed] == list(range(51, 51 + 2 * 7))  # 400 samples: 7 batches of 64 an epoch
    lrs = [s["lr"] for s in resumed]
    assert all(lr > 0 for lr in lrs) and lrs == sorted(lrs, reverse=True)
    # Linear decay to 0 at the new end, step 64: the rate of step s is 0.01 * (64 - (s - 1)) / (64 - 25).
    assert lrs[0] == pytest.approx(0.01 * (64 - 50) / (64 - 25), rel=1e-5)
    with OrtCheckpointState.loadCheckpoint(out / "last_checkpoint") as state:
        stored = json.loads(state.getStringProperty("run_config"))
    assert (stored["epochs"], stored["batch_size"]) == (4, 64)  # the overrides are the run's from now on


def test_fewer_epochs_than_done_and_nothing_left(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    """--epochs 10 on a checkpoint at epoch 20 did nothing and exited 0. Now the contradiction is refused,
    and a resume with nothing left to do says so (and still exports the inference model)."""
    out = tmp_path / "run"
    assert run(capsys, "--data", small_data, "--epochs", 3, "--out", out, *QUIET)[0] == 0
    code, stdout, stderr = run(capsys, "--out", out, "--resume", "--epochs", 2, *QUIET)
    assert code == 2 and "error: --epochs 2 contradicts the run being resumed, which has --epochs 3" in stderr
    assert "Leave it out to continue the run as it was" in stderr

    code, stdout, stderr = run(capsys, "--out", out, "--resume", *QUIET)
    assert code == 0, stderr
    assert ("nothing left to do: the checkpoint is at epoch 3 and the run has 3 epochs; to train further, resume "
            "with --epochs N (more than 3) --override") in stdout
    assert "inference model accuracy on validation:" in stdout and "epoch 1/" not in stdout

    code, stdout, _ = run(capsys, "--out", out, "--resume", "--epochs", 2, "--override", *QUIET)
    assert code == 0 and "nothing left to do: the checkpoint is at epoch 3 and the run has 2 epochs" in stdout

    code, stdout, stderr = run(capsys, "--out", out, "--resume", "--epochs", 5, "--override", *QUIET)
    assert code == 0, stderr
    assert [line.split()[1] for line in stdout.splitlines() if line.startswith("epoch ")] == ["4/5", "5/5"]


def test_repeating_the_options_is_no_contradiction(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    options = ["--data", small_data, "--epochs", 2, "--lr", "0.005", "--schedule", "constant", "--batch-size", 50,
               "--seed", 1, "--out", out, *QUIET]
    assert run(capsys, *options)[0] == 0
    code, stdout, stderr = run(capsys, *options, "--resume")
    assert code == 0 and "nothing left to do" in stdout, stderr


def test_another_dataset_or_changed_artifacts(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    artifacts = tmp_path / "artifacts"
    shutil.copytree(DIGITS, artifacts)
    out = tmp_path / "run"
    assert run(capsys, "--artifacts", artifacts, "--data", small_data, "--epochs", 1, "--out", out, *QUIET)[0] == 0

    other = tmp_path / "other.npz"
    with np.load(small_data) as data:
        np.savez(other, **{key: value[: len(value) // 2] for key, value in data.items()})
    code, _, stderr = run(capsys, "--out", out, "--resume", "--epochs", 2, "--override", "--data", other, *QUIET)
    assert code == 0, stderr  # --override accepts it, and says so
    code, _, stderr = run(capsys, "--out", out, "--resume", "--epochs", 3, "--override", "--data", small_data, *QUIET)
    assert code == 0
    code, _, stderr = run(capsys, "--out", out, "--resume", "--data", other, *QUIET)
    assert code == 2 and stderr.startswith(
        f"error: the dataset '{other.resolve()}' is not the one the run started with ('{small_data.resolve()}'): name "
        "the run's dataset with --data, or add --override to continue the run on it"), stderr

    model = onnx.load(str(artifacts / "eval_model.onnx"))
    model.doc_string = "changed"
    onnx.save(model, str(artifacts / "eval_model.onnx"))
    code, _, stderr = run(capsys, "--out", out, "--resume", *QUIET)
    assert code == 2 and stderr.startswith(
        f"error: the artifacts '{artifacts.resolve()}' changed since the run started: the run's checkpoint belongs to "
        "the artifacts it started with, or add --override to continue the run on them"), stderr
    code, stdout, _ = run(capsys, "--out", out, "--resume", "--override", "--epochs", 4, *QUIET)
    assert code == 0 and f"overriding: artifacts: {artifacts.resolve()} (not what the run started with)" in stdout


def test_a_checkpoint_without_a_stored_configuration(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    """Checkpoints of the trainer before the configuration was stored resume with the options given."""
    out = tmp_path / "run"
    out.mkdir()
    with OrtCheckpointState.loadCheckpoint(DIGITS / "checkpoint") as state:
        state.addProperty("epoch", 1)
        state.addProperty("step", 13)
        state.saveCheckpoint(out / "last_checkpoint", False)
    code, stdout, stderr = run(capsys, "--data", small_data, "--epochs", 2, "--out", out, "--resume", *QUIET)
    assert code == 0, stderr
    assert ("the checkpoint holds no run configuration (an older ort-cffi-train wrote it): resuming with the options "
            "given and the defaults") in stdout
    assert [line.split()[1] for line in stdout.splitlines() if line.startswith("epoch ")] == ["2/2"]


# --- smaller points -----------------------------------------------------------------------------------------

def test_the_progress_bar_only_on_a_terminal(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    code, _, stderr = run(capsys, "--data", small_data, "--epochs", 1, "--out", tmp_path / "a", *QUIET)
    assert code == 0 and stderr == ""  # captured: not a terminal, no bar
    # On a terminal it is on by default.
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # tqdm draws nothing in 0 columns
    proc = subprocess.Popen(
        [sys.executable, "-m", "ort_cffi.cli.train", "--data", str(small_data), "--epochs", "1", "--out", str(tmp_path / "b"),
         "--no-plot"], stdout=subprocess.DEVNULL, stderr=secondary, env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closes when the child exits
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert proc.wait(timeout=120) == 0
    assert b"epoch 1/1" in seen and b"sample" in seen  # tqdm's bar, in samples


def test_a_batch_larger_than_the_training_split(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture) -> None:
    code, _, stderr = run(capsys, "--data", small_data, "--batch-size", 500, "--out", tmp_path / "out", *QUIET)
    assert code == 2
    assert stderr == (f"error: dataset '{small_data}': --batch-size 500 is larger than the training split (400 samples): "
                      "every epoch would be a single, partial batch; pass --batch-size 400 or less\n")


@pytest.mark.parametrize("split, values, message", [
    ("train", [-1], "train_labels holds 1 label outside the model's 10 classes (0 to 9): -1."),
    ("val", [10, 1000, 10], "val_labels holds 3 labels outside the model's 10 classes (0 to 9): 10, 1000."),
])
def test_labels_outside_the_models_classes(tmp_path: Path, small_data: Path, capsys: pytest.CaptureFixture,
                                           split: str, values: list, message: str) -> None:
    """ONNX Runtime's cross-entropy gives 0 for a label just outside the classes and crashes far outside:
    the trainer refuses them before training, with the class count taken from the eval model's logits."""
    with np.load(small_data) as data:
        arrays = dict(data)
    arrays[f"{split}_labels"][: len(values)] = values
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    code, _, stderr = run(capsys, "--data", bad, "--out", tmp_path / "out", *QUIET)
    assert code == 2
    assert stderr.startswith(f"error: dataset '{bad}': {message} The class count is the last dimension of the eval "
                             "model's output 'logits'; relabel the data or give the model that many classes"), stderr
    assert not (tmp_path / "out" / "last_checkpoint").exists()
