"""Ctrl-C at any moment of every command, through the entry points pip's console scripts call
(``ort_cffi_commands``): while the interpreter imports the command, while it generates artifacts, while it
trains. Each case runs the command in a child process the way pip's wrapper does, sends it a real SIGINT,
and asserts exit status 130, one line on stderr, and nothing left behind (the working folder and the
temporary folder as they were, no half-made run folder).

The moment comes from the child: it writes a marker to a pipe of its own (so that stderr holds only the
command's own words) as the wrapper starts or when it reaches a chosen function, and this process sends the
signal a set time after it."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from conftest import DIGITS, ROOT
from ort_cffi import OrtEnvironment

# pip's console-script wrapper, with a marker first (after the interpreter's own start-up) and optionally a
# function of the command that stops and writes the marker when reached, or an import that does.
WRAPPER = textwrap.dedent("""
    import os, sys, time
    marker_fd, function, script, hook_module, hook_function, hook_import, *argv = sys.argv[1:]

    def reached():
        os.write(int(marker_fd), b"marker\\n")
        time.sleep(60)  # the SIGINT arrives here

    if hook_module:
        import importlib
        hook_function, _, nth = hook_function.partition("#")  # name#N: at its Nth call
        calls = []
        target = importlib.import_module(hook_module)
        original = getattr(target, hook_function)

        def hooked(*args, **kwargs):
            calls.append(1)
            if len(calls) == int(nth or 1):
                reached()
            return original(*args, **kwargs)

        setattr(target, hook_function, hooked)
    elif hook_import:
        def on_import(event, args):
            if event == "import" and args[0] == hook_import:
                reached()

        sys.addaudithook(on_import)
    else:
        os.write(int(marker_fd), b"marker\\n")
    import ort_cffi_commands
    sys.argv = [script, *argv]
    sys.exit(getattr(ort_cffi_commands, function)())
""")


def console_scripts() -> Dict[str, str]:
    """setup.py's console scripts: name -> the function of ort_cffi_commands (every one goes through it)."""
    text = (ROOT / "setup.py").read_text()
    found = dict(re.findall(r'"(ort-cffi-[a-z]+)=([\w.:]+)"', text))
    assert found and all(target.startswith("ort_cffi_commands:") for target in found.values()), found
    return {name: target.split(":")[1] for name, target in found.items()}


def run_interrupted(script: str, argv: Sequence[object], cwd: Path, delay: float = 0.0,
                    hook: Optional[Tuple[str, str]] = None, hook_import: str = "") -> Tuple[int, str, List[str]]:
    """Run ``script`` as pip's wrapper would, send SIGINT ``delay`` seconds after the marker, and return its
    exit status, stderr, and what the temporary folder held afterwards."""
    tmp = cwd.parent / (cwd.name + "-tmp")
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp))
    read_end, write_end = os.pipe()
    hook_module, hook_function = hook or ("", "")
    try:
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, str(write_end), console_scripts()[script], script, hook_module,
                                 hook_function, hook_import, *map(str, argv)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as marker:
        seen = marker.readline()
        try:
            assert seen == b"marker\n", f"the child ended before the moment: {proc.communicate(timeout=60)}"
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, stderr, sorted(p.name for p in tmp.iterdir())


def assert_one_line(code: int, stderr: str, left_in_tmp: List[str]) -> str:
    assert code == 130, (code, stderr)
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert not left_in_tmp, left_in_tmp
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "digits.onnx"
    with OrtEnvironment.getEnvironment().createTrainingSession(
            DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as session:
        session.exportModelForInference(path, ["logits"])
    return path


def arguments(script: str, model: Path, out: Path) -> List[object]:
    """Arguments that keep each command at work for a while after its imports."""
    return {
        "ort-cffi-train": ["--model", model, "--data", DIGITS / "digits.npz", "--out", out, "--no-progress"],
        "ort-cffi-artifacts": [model, "--out", out],
        "ort-cffi-runtime": ["list"],
        "ort-cffi-federated": ["--rounds", 1, "--clients", 2, "--out", out],
        "ort-cffi-predict": [model, DIGITS / "digits.npz"],
    }.get(script, ["--help"])


def work_folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_every_console_script_enters_through_ort_cffi_commands() -> None:
    """The cases below cover each command setup.py installs; one that bypassed the entry module would
    take Ctrl-C during its imports as a traceback again."""
    assert {"ort-cffi-train", "ort-cffi-artifacts", "ort-cffi-runtime", "ort-cffi-federated"} <= set(console_scripts())


# Commands that work for seconds after their imports; ort-cffi-runtime list and ort-cffi-predict are done
# within 0.3 s, so the moments inside their imports are the ones below (and 0.05 s).
LONG_RUNNING = ("ort-cffi-train", "ort-cffi-artifacts", "ort-cffi-federated")


@pytest.mark.parametrize("script,delay", [(script, 0.05) for script in sorted(console_scripts())]
                         + [(script, 0.3) for script in LONG_RUNNING])
def test_ctrl_c_while_a_command_starts(tmp_path: Path, model: Path, script: str, delay: float) -> None:
    """0.3 s into ``ort-cffi-train --model M.onnx``: exit status -2 and a 33-line traceback, before. At
    0.05 s every command is importing; at 0.3 s it imports or has begun its work."""
    work = work_folder(tmp_path)
    out = work / "out"
    code, stderr, left = run_interrupted(script, arguments(script, model, out), work, delay)
    assert_one_line(code, stderr, left)
    assert sorted(p.name for p in work.iterdir()) == [], "the command left files behind"


@pytest.mark.parametrize("script", sorted(console_scripts()))
@pytest.mark.parametrize("module", ["ort_cffi._facade", "numpy", "argparse"])
def test_ctrl_c_while_the_command_imports(tmp_path: Path, model: Path, script: str, module: str) -> None:
    """A deterministic moment inside the imports: the signal arrives as ``module`` begins to import."""
    work = work_folder(tmp_path)
    code, stderr, left = run_interrupted(script, arguments(script, model, work / "out"), work, hook_import=module)
    line = assert_one_line(code, stderr, left)
    assert line == f"{script}: interrupted while starting: nothing was done"
    assert sorted(p.name for p in work.iterdir()) == []


def test_ctrl_c_while_artifacts_are_generated_through_the_entry_point(tmp_path: Path, model: Path) -> None:
    work = work_folder(tmp_path)
    out = work / "artifacts"
    code, stderr, left = run_interrupted("ort-cffi-artifacts", [model, "--out", out], work,
                                         hook=("ort_cffi.artifacts.writer", "run_here"))
    assert assert_one_line(code, stderr, left) == f"interrupted: no artifacts were written to {out}"
    assert sorted(p.name for p in work.iterdir()) == []


def test_ctrl_c_while_train_generates_artifacts_through_the_entry_point(tmp_path: Path, model: Path) -> None:
    work = work_folder(tmp_path)
    out = work / "run"
    code, stderr, left = run_interrupted(
        "ort-cffi-train", ["--model", model, "--data", DIGITS / "digits.npz", "--out", out, "--no-progress"], work,
        hook=("ort_cffi.artifacts.writer", "run_here"))
    assert assert_one_line(code, stderr, left) == f"interrupted before training began: {out} is as it was"
    assert sorted(p.name for p in work.iterdir()) == []


def test_ctrl_c_in_the_first_epoch_keeps_nothing(tmp_path: Path) -> None:
    """Before, the line said to resume a run folder that held nothing to resume from, and the folder stayed."""
    work = work_folder(tmp_path)
    out = work / "run"
    code, stderr, left = run_interrupted("ort-cffi-train", ["--epochs", 3, "--out", out, "--no-progress", "--no-plot"],
                                         work, hook=("ort_cffi.trainer.loop", "train_epoch"))
    line = assert_one_line(code, stderr, left)
    assert line == f"interrupted before the first epoch ended: nothing was kept in {out}"
    assert sorted(p.name for p in work.iterdir()) == []


def test_ctrl_c_after_an_epoch_keeps_a_run_that_resumes(tmp_path: Path) -> None:
    """Once an epoch has ended, its checkpoint is kept, complete, and the line says how to go on."""
    work = work_folder(tmp_path)
    out = work / "run"
    code, stderr, left = run_interrupted("ort-cffi-train", ["--epochs", 3, "--out", out, "--no-progress", "--no-plot"],
                                         work, hook=("ort_cffi.trainer.loop", "train_epoch#2"))
    line = assert_one_line(code, stderr, left)
    assert line == f"interrupted: resume with --out {out} --resume"
    assert sorted(p.name for p in out.iterdir()) == ["best_checkpoint", "last_checkpoint", "metrics.json"]
    resumed = subprocess.run([sys.executable, "-m", "ort_cffi.cli.train", "--out", str(out), "--resume", "--no-progress",
                              "--no-plot"], capture_output=True, text=True, cwd=work, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert resumed.returncode == 0, resumed.stderr
    assert "epoch 2/3" in resumed.stdout and "epoch 1/3" not in resumed.stdout, resumed.stdout


def test_ctrl_c_during_the_learning_rate_range_test(tmp_path: Path) -> None:
    """--lr auto runs its range test before training: Ctrl-C there leaves nothing."""
    work = work_folder(tmp_path)
    out = work / "run"
    code, stderr, left = run_interrupted("ort-cffi-train", ["--lr", "auto", "--epochs", 2, "--out", out, "--no-progress",
                                                            "--no-plot"], work, hook=("ort_cffi.trainer.job", "range_test"))
    assert assert_one_line(code, stderr, left) == f"interrupted before training began: {out} is as it was"
    assert sorted(p.name for p in work.iterdir()) == []
