"""Simulated federations, run the way Flower 1.42 supports them (``flwr run`` on a local SuperLink in
simulation mode), with real clients training through ort_cffi: clients that fail or send broken updates
are left out and named, the run ends cleanly below the minimum, robust strategies resist an attacker, a
killed server resumes, and the defaults still reach their accuracy. No test leaves a process behind.

Flower's deprecations are errors: in this process (see _flower_guard), and in the logs of Flower's
processes (SuperLink, simulation), which every run's test reads."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List

import numpy as np
import pytest

from conftest import DIGITS, ROOT, run_child
from ort_cffi import OrtCheckpointState, OrtEnvironment

if sys.version_info < (3, 11):  # Flower 1.42 needs Python 3.11; the extra is not installable before
    pytest.skip("the federated extra (flwr) needs Python 3.11+", allow_module_level=True)

from _federation import (  # noqa: E402
    command_line, descendants, processes_matching, processes_with_env, python_path, wait_gone, write_hostile_app,
)
from _flower_guard import deprecations_in, flower_deprecations, import_flower  # noqa: E402,F401  (the fixture)

federated, flower = import_flower()
pytestmark = [pytest.mark.filterwarnings("error::DeprecationWarning:flwr"), pytest.mark.usefixtures("flower_deprecations"),
              pytest.mark.needs_ray]  # every test here runs Flower's simulation engine

ROUND_LINE = re.compile(r"^round +(\d+)/(\d+)  train loss [\d.]+  val loss [\d.]+  val acc (\d\.\d{4})  lr ", re.M)


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the tests' own ClientApp modules, on the Flower processes' PYTHONPATH."""
    return tmp_path_factory.mktemp("apps")


@pytest.fixture(scope="module")
def simulation(apps: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator["flower.LocalSimulation"]:
    """One SuperLink in simulation mode for this module's runs; stopped at the end, leaving nothing."""
    sim = flower.LocalSimulation(env={"PYTHONPATH": python_path(apps, ROOT)}, log_dir=tmp_path_factory.mktemp("logs"))
    sim.start()
    assert sim.superlink is not None
    try:
        yield sim
    finally:
        superlink = sim.superlink
        sim.close()
        log = superlink.log.read_text(errors="replace")
        assert not deprecations_in(log), deprecations_in(log)
        assert not wait_gone(descendants(os.getpid()), 60), "Flower processes outlived the SuperLink"


def _logs_are_clean(out: Path) -> None:
    for log in (out / "logs").glob("*.log"):
        found = deprecations_in(log.read_text(errors="replace"))
        assert not found, f"{log.name}: {found}"


def _weighted_mean(updates: Path) -> Dict[str, np.ndarray]:
    """FedAvg's result from the updates a round accepted (updates/round-N.npz): the example-weighted mean."""
    with np.load(updates) as saved:
        clients = sorted({key.split("/", 1)[0] for key in saved.files})
        weights = np.array([float(saved[f"{c}/num-examples"]) for c in clients])
        names = [key.split("/", 1)[1] for key in saved.files if key.startswith(f"{clients[0]}/") and not key.endswith("num-examples")]
        return {name: sum(w * saved[f"{c}/{name}"].astype(np.float64) for c, w in zip(clients, weights)) / weights.sum()
                for name in names}


def test_failing_and_broken_clients_are_left_out_named_and_never_averaged_in(
        simulation: "flower.LocalSimulation", apps: Path, small_data: Path, tmp_path: Path) -> None:
    """Eight clients: one sends NaN, one Inf, one an array of the wrong size, one float64 arrays, one raises
    mid-round; three are honest. Every round aggregates exactly the honest three (the global model is
    their example-weighted mean) and the history names each of the others with its reason."""
    attacks = {0: "nan", 1: "inf", 2: "size", 3: "dtype", 4: "raise"}
    app = write_hostile_app(apps, "broken_clients", attacks)
    out = tmp_path / "run"
    lines: List[str] = []
    history = simulation.run(out, client_app=app, data=str(small_data), clients=8, rounds=2, local_epochs=2,
                             batch_size=16, min_fit_clients=3, save_updates=True, cpus=2, report=lines.append)
    assert history["status"] == "completed"
    reasons = {
        "client 0": r"update rejected: fc1\.weight holds 1 NaN and 0 infinite value\(s\)",
        "client 1": r"update rejected: fc1\.weight holds 0 NaN and 4096 infinite value\(s\)",
        "client 2": r"update rejected: wrong size: fc1\.weight has shape \[4099\] \(4099 values\), but the model's is "
                    r"\[64, 64\] \(4096 values\)",
        "client 3": r"update rejected: wrong dtype: fc1\.weight is float64, but the model's parameters are float32",
        "client 4": r"failed: .*RuntimeError: this client broke on purpose",
    }
    for record in history["rounds"][1:]:
        assert sorted(c["client"] for c in record["accepted"]) == ["client 5", "client 6", "client 7"], record
        assert len({c["node"] for c in record["accepted"]} | {f["node"] for f in record["failed"]}) == 8  # node ids
        assert record["clients"] == 3 and record["examples"] == 150
        failed = {f["client"] or f"node {f['node']}": f["reason"] for f in record["failed"]}
        for client, reason in reasons.items():
            if client == "client 4" and record["round"] == 1 and client not in failed:
                client = next(k for k in failed if k.startswith("node"))  # it failed before ever naming itself
            assert re.fullmatch(reason, failed[client]), (record["round"], client, failed)
        assert len(failed) == 5
    assert any("left out: update rejected: wrong dtype" in line for line in lines)
    # Never averaged in: the saved updates are the honest ones, and the global model is their mean.
    with np.load(out / "updates" / "round-2.npz") as saved:
        assert len({key.split("/")[0] for key in saved.files}) == 3
        assert all(np.isfinite(saved[key]).all() and saved[key].dtype in (np.float32, np.float64) for key in saved.files)
    expected = _weighted_mean(out / "updates" / "round-2.npz")
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(out / "global_checkpoint", DIGITS / "training_model.onnx") as session:
        state = session.getCheckpointState()
        for name, value in expected.items():
            np.testing.assert_allclose(state.getParameter(name), value, rtol=1e-5, atol=1e-6)
    # The three honest clients still train a better model, and the run's files are all there.
    assert history["rounds"][-1]["val_accuracy"] > history["rounds"][0]["val_accuracy"] + 0.3
    assert history["rounds"][-1]["clients_val_accuracy"] is not None  # the federated evaluation ran
    for name in ("global_checkpoint", "inference_model.onnx", "history.json", "federated.png"):
        assert (out / name).is_file(), name
    assert json.loads((out / "history.json").read_text())["rounds"] == history["rounds"]
    with OrtCheckpointState.loadCheckpoint(out / "global_checkpoint") as checkpoint:
        assert checkpoint.getIntProperty("round") == 2
    assert history["inference"]["val_accuracy"] == pytest.approx(history["rounds"][-1]["val_accuracy"])
    _logs_are_clean(out)


def test_below_min_fit_clients_the_run_ends_and_keeps_the_last_checkpoint(
        simulation: "flower.LocalSimulation", apps: Path, small_data: Path, tmp_path: Path) -> None:
    """Two of three clients fail from round 2 on; min-fit-clients is 2: round 2 ends the run with an error
    that says why, the history records who failed, and the global checkpoint stays that of round 1.

    Round 1 runs with client-side DP clipping (Flower's wrapper and its client mod; noise 0 so that the
    result can be checked): each update the server accepted moved the model by at most the clipping norm,
    and the checkpoint kept is their mean."""
    app = write_hostile_app(apps, "failing_from_round_2", {0: "raise", 1: "raise"}, from_round=2)
    out = tmp_path / "run"
    with pytest.raises(flower.FederatedError) as failure:
        simulation.run(out, client_app=app, data=str(small_data), clients=3, rounds=3, batch_size=16, min_fit_clients=2,
                       fraction_evaluate=0.0, cpus=2, dp_clipping=0.5, dp_noise=0.0, dp_side="client", save_updates=True)
    message = str(failure.value)
    assert re.search(r"round 2: only 1 of 3 client\(s\) returned a usable update, fewer than min-fit-clients 2 \(", message), message
    assert message.count("RuntimeError: this client broke on purpose") == 2
    assert f"The global model of round 1 is in {out / 'global_checkpoint'}: resume with --resume" in message
    with OrtCheckpointState.loadCheckpoint(out / "global_checkpoint") as checkpoint:
        assert checkpoint.getIntProperty("round") == 1
    env = OrtEnvironment.getEnvironment()
    start = {}
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx") as initial:
        for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
            start[name] = initial.getCheckpointState().getParameter(name)
    with np.load(out / "updates" / "round-1.npz") as saved:
        for client in sorted({key.split("/")[0] for key in saved.files}):
            moved = np.sqrt(sum(float(np.sum((saved[f"{client}/{n}"] - start[n]) ** 2)) for n in start))
            assert 0.3 < moved <= 0.5 + 1e-5, moved  # clipped to the norm (and it did train)
    expected = _weighted_mean(out / "updates" / "round-1.npz")
    with env.createTrainingSession(out / "global_checkpoint", DIGITS / "training_model.onnx") as kept:
        for name, value in expected.items():
            np.testing.assert_allclose(kept.getCheckpointState().getParameter(name), value, rtol=1e-5, atol=1e-6)
    history = json.loads((out / "history.json").read_text())
    assert history["status"] == "failed" and history["error"].startswith("FederatedError: round 2: only 1 of 3")
    assert [r["round"] for r in history["rounds"]] == [0, 1]
    assert history["failed_round"]["round"] == 2 and len(history["failed_round"]["failed"]) == 2
    _logs_are_clean(out)


def _accuracy_of(arrays: Dict[str, np.ndarray], data: Path) -> float:
    """The validation accuracy of a model given as named arrays, through the server's own session."""
    with flower.GlobalModel(DIGITS, data) as model:
        record = model.layout.to_record(np.concatenate([arrays[n].astype(np.float32).reshape(-1) for n in model.layout.names]))
        accuracy = model.evaluate(record)[1]
    assert accuracy is not None
    return accuracy


def test_fedmedian_and_krum_resist_one_attacker(simulation: "flower.LocalSimulation", apps: Path, tmp_path: Path) -> None:
    """Five clients, one hostile. The bound: with --strategy fedmedian (attacker sending random weights) or
    --strategy krum (attacker sending its model scaled by -30), the global model's validation accuracy after
    3 rounds is within 0.05 of what the five clients reach when all are honest (FedAvg), and above 0.85.
    (Krum keeps one client's model a round rather than a mean: without any attacker it lags FedAvg by about
    0.01-0.02 here.) The attack is real: FedAvg of the same round's updates, attacker included, is no better
    than chance."""
    common = dict(clients=5, rounds=3, local_epochs=2, fraction_evaluate=0.0, cpus=2)
    honest = simulation.run(tmp_path / "honest", **common)["rounds"][-1]["val_accuracy"]
    median = simulation.run(tmp_path / "median", client_app=write_hostile_app(apps, "random_attacker", {0: "random"}),
                            strategy="fedmedian", **common)
    krum = simulation.run(tmp_path / "krum", client_app=write_hostile_app(apps, "scaled_attacker", {0: "scaled"}),
                          strategy="krum", save_updates=True, **common)
    assert honest > 0.85
    for history in (median, krum):
        accuracy = history["rounds"][-1]["val_accuracy"]
        assert accuracy >= honest - 0.05 and accuracy > 0.85, (history["config"]["strategy"], accuracy, honest)
        assert all(r["clients"] == 5 for r in history["rounds"][1:])  # the attacker's update was well-formed
    averaged = _accuracy_of(_weighted_mean(tmp_path / "krum" / "updates" / "round-3.npz"), DIGITS / "digits.npz")
    assert averaged < 0.3, averaged


def test_default_run_reaches_the_target(tmp_path: Path) -> None:
    """``ort-cffi-federated`` with its defaults (10 clients, 20 rounds of FedAvg, the whole digits set)."""
    out = tmp_path / "default"
    proc = run_child(f"""
        import sys
        from ort_cffi.cli.federated import main
        sys.exit(main(["--out", {str(out)!r}]))
    """, timeout=900)
    lines = ROUND_LINE.findall(proc.stdout)
    assert [int(r) for r, _, _ in lines] == list(range(1, 21)), proc.stdout
    accuracy = float(re.findall(r"^inference model accuracy on validation: (\d\.\d{4})$", proc.stdout, re.M)[-1])
    assert accuracy >= 0.96 and float(lines[-1][2]) == accuracy
    assert not deprecations_in(proc.stdout + proc.stderr) and "Traceback" not in proc.stderr
    for name in ("global_checkpoint", "inference_model.onnx", "history.json", "federated.png"):
        assert (out / name).is_file(), name
    _logs_are_clean(out)


def _numbers(history: Dict) -> List[Dict]:
    """A history's rounds without what differs from run to run by nature: the seconds, and the Flower node
    ids (the SuperLink draws them at random) beside the client names."""
    def strip(record: Dict) -> Dict:
        kept = {k: v for k, v in record.items() if k != "seconds"}
        for key in ("accepted", "failed", "evaluate_failed"):
            if key in kept:
                kept[key] = [{k: v for k, v in entry.items() if k != "node"} for entry in kept[key]]
        return kept
    return [strip(r) for r in history["rounds"]]


def test_the_default_run_repeats_itself_exactly(tmp_path: Path) -> None:
    """The command's defaults (10 clients on two CPUs, FedAvg, seed 0), two rounds, twice: the same numbers
    in every round, to the last bit, and the same global model. The replies arrive in another order each
    time, and each Ray actor serves whichever client comes next: before, the runs differed from round 2
    on (a client's AdamW state was that of whichever actor served it last; the updates were summed in the
    order they arrived)."""
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        proc = subprocess.run([sys.executable, "-m", "ort_cffi.cli.federated", "--rounds", "2", "--cpus", "2", "--no-plot",
                               "--out", str(out)], capture_output=True, text=True, cwd=str(ROOT), timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        runs.append(out)
    first, second = (json.loads((out / "history.json").read_text()) for out in runs)
    assert [r["round"] for r in first["rounds"]] == [0, 1, 2]
    assert _numbers(first) == _numbers(second)
    assert first["inference"] == second["inference"]
    assert [c["client"] for c in first["rounds"][2]["accepted"]] == [f"client {n}" for n in range(10)]
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(runs[0] / "global_checkpoint", DIGITS / "training_model.onnx") as a, \
            env.createTrainingSession(runs[1] / "global_checkpoint", DIGITS / "training_model.onnx") as b:
        np.testing.assert_array_equal(a.copyParametersToBuffer(True), b.copyParametersToBuffer(True))


def _wait_for_line(proc: subprocess.Popen, pattern: str, seen: List[str], timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if re.match(pattern, line):
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"no line matching {pattern!r} within {timeout:g} s:\n{''.join(seen)}")


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_stopping_the_command_mid_run_stops_every_flower_and_ray_process(how: str, small_data: Path, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) or SIGTERM (to the command
    alone) while rounds run: within 3 seconds the command has exited with 130, no process of the run is
    left (Flower's SuperExec and simulation and Ray's processes make sessions of their own, and outlived
    the command by ~17 s), nothing it made in the temporary folder is left (Ray's session folders
    stayed), and history.json says ``interrupted``, with the command that continues the run."""
    out = tmp_path / "run"
    mark = f"{os.getpid()}-{how}"
    temp = Path(tempfile.mkdtemp(prefix="fl", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = dict(os.environ, ORT_CFFI_TEST_RUN=mark, TMPDIR=str(temp))
    args = [sys.executable, "-m", "ort_cffi.cli.federated", "--data", str(small_data), "--clients", "3", "--rounds", "200",
            "--batch-size", "16", "--fraction-evaluate", "0", "--cpus", "2", "--out", str(out)]
    seen: List[str] = []
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT), env=env,
                            start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        _wait_for_line(proc, r"round +2/200 ", seen, 600)
        family = processes_with_env("ORT_CFFI_TEST_RUN", mark)
        assert any("ray::" in command_line(pid) for pid in family), [command_line(pid) for pid in family]
        assert any("flwr-simulation" in command_line(pid) for pid in family), [command_line(pid) for pid in family]
        assert list(temp.iterdir())  # the run's temporary files (Ray's session folder among them)
        stopped = time.monotonic()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=3)
        elapsed = time.monotonic() - stopped
        left = wait_gone(processes_with_env("ORT_CFFI_TEST_RUN", mark), max(0.0, 3.0 - (time.monotonic() - stopped)))
        # ONNX Runtime's own telemetry session file (from 1.30 on, its 1DS telemetry on Linux keeps `.ses` in the
        # temporary folder, made when the first environment is, and kept on purpose from process to process; its
        # opt-out is $ORT_DISABLE_TELEMETRY=1) is not the run's: the runtime writes it with or without ort_cffi
        temp_left = sorted(str(p) for p in temp.rglob("*") if p.relative_to(temp) != Path(".ses"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in processes_with_env("ORT_CFFI_TEST_RUN", mark):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
    seen.append(rest)
    assert proc.returncode == 130, "".join(seen)
    assert elapsed < 3.0, elapsed
    assert not left, [command_line(pid) for pid in left]
    assert not temp_left, temp_left
    history = json.loads((out / "history.json").read_text())
    resume = f"ort-cffi-federated --out {out} --resume"
    assert history["status"] == "interrupted" and history["resume"] == resume, {k: history.get(k) for k in ("status", "resume")}
    done = history["interrupted"]["after_round"]
    with OrtCheckpointState.loadCheckpoint(out / "global_checkpoint") as checkpoint:
        assert done >= 2 and checkpoint.getIntProperty("round") == done
    assert f"interrupted: the last global model (round {done}) is in {out / 'global_checkpoint'}; continue with: {resume}\n" in rest
    assert federated.parse_args(shlex.split(resume)[1:]).resume  # the command as printed parses


def test_a_killed_server_resumes_from_its_last_completed_round(small_data: Path, tmp_path: Path, apps: Path) -> None:
    """The server process (Flower's simulation process, which runs the ServerApp) is killed with SIGKILL
    during round 3 of 5, which one slow client holds open; the command is then stopped; nothing is left
    running. ``--resume`` continues from round 2 with the same history and learning-rate schedule, and
    finishes. The strategy is FedAdam, whose moments are part of the server's state: they are committed
    with every round and restored."""
    out = tmp_path / "run"
    slow = write_hostile_app(apps, "slow_from_round_3", {0: "slow"}, from_round=3)
    args = [sys.executable, "-m", "ort_cffi.cli.federated", "--data", str(small_data), "--clients", "3", "--rounds", "5",
            "--batch-size", "16", "--fraction-evaluate", "0", "--cpus", "2", "--strategy", "fedadam", "--out", str(out),
            "--client-app", slow]
    seen: List[str] = []
    env = dict(os.environ, PYTHONPATH=python_path(apps, ROOT))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(ROOT), env=env)
    try:
        _wait_for_line(proc, r"round 2/5 ", seen, 600)
        family = descendants(proc.pid)
        server = [pid for pid in family if "flwr-simulation" in command_line(pid)]
        assert len(server) == 1, [command_line(pid) for pid in family]
        os.kill(server[0], signal.SIGKILL)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # the user gives up waiting for Flower to notice
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seen.append(rest)
    assert proc.returncode == 130, "".join(seen)
    resume = f"ort-cffi-federated --out {out} --resume --client-app {slow}"
    assert f"interrupted: the last global model (round 2) is in {out / 'global_checkpoint'}; continue with: {resume}" in rest
    assert not wait_gone(family, 60), [command_line(pid) for pid in family if command_line(pid)]
    before = json.loads((out / "history.json").read_text())
    assert before["status"] == "interrupted" and before["resume"] == resume
    done = before["rounds"][-1]["round"]
    assert done == 2  # round 3 waits a minute for its slow client: the kill came in the middle of it
    with OrtCheckpointState.loadCheckpoint(out / "global_checkpoint") as checkpoint:
        assert checkpoint.getIntProperty("round") == done
    assert (out / "server_state" / f"round-{done}.npz").is_file()

    resumed = subprocess.run([sys.executable, "-m", "ort_cffi.cli.federated", "--out", str(out), "--resume"],
                             capture_output=True, text=True, cwd=str(ROOT), timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "(resuming)" in resumed.stdout and f"resuming after round {done} of 5" in resumed.stdout
    assert [int(r) for r, _, _ in ROUND_LINE.findall(resumed.stdout)] == list(range(done + 1, 6))
    after = json.loads((out / "history.json").read_text())
    assert after["status"] == "completed" and [r["round"] for r in after["rounds"]] == list(range(6))
    assert "resume" not in after and "interrupted" not in after
    assert after["rounds"][:done + 1] == before["rounds"][:done + 1]  # the same history
    settings = flower.ServerSettings(rounds=5)
    assert [r["lr"] for r in after["rounds"][1:]] == pytest.approx([settings.lr_for(n) for n in range(1, 6)])
    assert after["resumed"][0]["after_round"] == done and after["config"]["strategy"] == "fedadam"
    assert sorted(p.name for p in (out / "server_state").iterdir()) == ["round-5.npz"]
    assert after["rounds"][-1]["val_accuracy"] > 0.8
    _logs_are_clean(out)
    assert not processes_matching(str(out))
