"""Simulated federations, run the way Flower 1.42 supports (its ``run_simulation`` is deprecated): a
SuperLink in simulation mode on a free loopback port, a Flower app project whose run config carries the
settings, and ``flwr run --stream``. The server's progress lines are picked out of the run's log stream,
and the run's result is the ``history.json`` the server wrote.

Everything that would fail at the end is checked first, in this process, before Flower starts
(`preflight`).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Set

import numpy as np

from ort_cffi.flower import deploy
from ort_cffi.flower.model import FederatedError, GlobalModel
from ort_cffi.flower.server import LOG_MARK, ServerSettings
from ort_cffi.flower.store import RunStore, run_files
from ort_cffi.trainer.data import DYNAMIC_BATCH_HINT, find_artifacts, find_dataset
from ort_cffi.trainer.errors import SetupError
from ort_cffi.trainer.output import MadeFolders

CLIENT_APP = "ort_cffi.flower:clientapp"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def preflight(settings: ServerSettings) -> None:
    """Everything that would stop the run later, checked now (``SetupError``, ``StrategyError``): the
    settings, artifacts, dataset, enough training samples for the clients, the batch size a model may fix,
    the inference export, the output folder (made now), and what it holds (an unfinished run is only
    continued with ``resume``, and only with its own settings; a run is only replaced with
    ``overwrite``): Flower has not started, so each is a usage error. A check that fails leaves the file
    system as it was: the folders made for ``out`` are removed again."""
    settings.check()
    artifacts = Path(settings.artifacts)
    find_artifacts(artifacts)
    data_path = find_dataset(Path(settings.data) if settings.data else None, artifacts)
    n_train = train_samples(data_path)
    if n_train is not None and settings.clients > n_train:
        raise SetupError(
            f"--clients {settings.clients} is more than the {n_train} training samples of dataset {str(data_path)!r}: "
            f"every client needs training data, so use at most {n_train} clients")
    out = Path(settings.out)
    made = MadeFolders(out)
    try:
        _check_out(settings, artifacts, data_path, out)
    except BaseException:
        made.remove(with_contents=False)  # what this check made, if it holds nothing
        raise


def _check_out(settings: ServerSettings, artifacts: Path, data_path: Path, out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise SetupError(f"--out {str(out)!r} is a file, not a folder") from None
    except OSError as exc:
        raise SetupError(f"--out {str(out)!r} cannot be made: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise SetupError(f"--out {str(out)!r} is not a folder this process may write to")
    store = RunStore(out)
    checkpoint = None
    try:
        if settings.resume:
            if store.resume_point(settings.history_config(), run_files(artifacts, data_path)) is not None:
                checkpoint = store.checkpoint
        else:
            store.check_fresh(settings.overwrite)
    except FederatedError as exc:  # what --out holds does not fit the settings
        raise SetupError(str(exc)) from None
    exports = [n.strip() for n in settings.export_outputs.split(",") if n.strip()] if settings.export_outputs else None
    with GlobalModel(artifacts, data_path, checkpoint=checkpoint, export_outputs=exports) as model:
        if model.fixed_batch is not None and settings.batch_size != model.fixed_batch:
            raise SetupError(f"the model's inputs fix the batch size at {model.fixed_batch}: "
                             f"pass --batch-size {model.fixed_batch}" + DYNAMIC_BATCH_HINT)
        model.check_export()


def train_samples(path: Path) -> Optional[int]:
    """The number of training samples (of the first ``train_`` array) in the dataset, read from the .npy
    header only; None when the file cannot be read so (the full checks, later, say why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.startswith("train_") and n.endswith(".npy"))
            if not names:
                return None
            with archive.open(names[0]) as member:  # the .npy header only, not the array
                version = np.lib.format.read_magic(member)
                header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                          else np.lib.format.read_array_header_2_0)(member)
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    shape = header[0]
    return int(shape[0]) if shape else None


#: Ray makes AF_UNIX sockets in its session folder, ``<temp>/ray/session_<date>_<time>_<us>_<pid>/sockets/
#: plasma_store``, and refuses a path longer than 107 bytes: the simulation's home takes this many
#: bytes beyond the folder it is made in (``/ort-fl-XXXXXXXX/t``, Ray's part with a 7-digit pid).
RAY_SOCKET_TAIL = len("/ort-fl-XXXXXXXX/t/ray/session_2025-01-01_00-00-00_000000_1234567/sockets/plasma_store")


def _simulation_home() -> Path:
    """A new folder for one simulation: in the temporary folder (``TMPDIR``), or in ``/tmp`` when that is
    too long a path for Ray's sockets (see `RAY_SOCKET_TAIL`)."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + RAY_SOCKET_TAIL > 107 and os.access("/tmp", os.W_OK | os.X_OK):
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix="ort-fl-", dir=base))


class LocalSimulation:
    """A SuperLink in simulation mode that runs simulated federations one after another (`run`).
    It starts on the first run (or ``with``) in a temporary folder of its own (the home), on a free
    loopback port, and is stopped, its home removed, by `close`. ``env`` adds to the environment of
    Flower's processes (say, ``PYTHONPATH`` for a ClientApp of your own); its log goes to ``log_dir``
    (default: in the home).

    Everything Flower and Ray write to a temporary folder goes to the home too (``TMPDIR`` and
    ``RAY_TMPDIR`` point there: Ray's session folders would otherwise stay in ``/tmp/ray`` after every
    run), and every process they start carries the home's token in its environment (`deploy.RUN_MARK`),
    so that `close` and `abort` find each one, even one that left its session or outlived its parent."""

    def __init__(self, *, env: Optional[Mapping[str, str]] = None, log_dir: Optional[Path] = None) -> None:
        self.home = _simulation_home()
        self.token = self.home.name
        temp = self.home / "t"
        temp.mkdir()
        self.env = {**dict(env or {}), deploy.RUN_MARK: self.token, "TMPDIR": str(temp), "RAY_TMPDIR": str(temp)}
        self.log_dir = Path(log_dir) if log_dir else self.home / "logs"
        self.superlink: Optional[deploy.SuperLink] = None

    def start(self) -> None:
        """Start the SuperLink (once) and wait until it answers."""
        if self.superlink is not None and self.superlink.alive():
            return
        (self.home / "t").mkdir(parents=True, exist_ok=True)  # again after an `abort`
        self.superlink = deploy.SuperLink(home=self.home / "superlink", log=self.log_dir / "superlink.log",
                                          simulation=True, env=self.env)
        self.superlink.wait_ready()
        deploy.write_connection(self.home, "local", self.superlink.address)

    def run(self, out: Any, *, cpus: Optional[int] = None, verbose: bool = False,
            report: Optional[Callable[[str], None]] = None, client_app: str = CLIENT_APP, **settings: Any) -> Dict[str, Any]:
        """Run one simulated federation and return its history document. ``settings`` are
        `ServerSettings` fields; ``cpus`` is how many clients train at once (default: all cores, at
        most the clients); ``report`` gets the server's progress lines; ``verbose`` prints all of Flower's
        output; ``client_app`` names the ``ClientApp`` the clients run. Flower's log of the run goes to
        ``out/logs/run.log``. Raises ``SetupError``/``StrategyError`` (before anything starts) or
        `FederatedError` (the run failed; its history says where; ``resume=True`` continues it)."""
        out_dir = Path(out).resolve()
        for key in ("artifacts", "data"):  # Flower's processes run in other folders
            if settings.get(key) is not None:
                settings[key] = str(Path(settings[key]).resolve())
        server = ServerSettings(out=str(out_dir), **settings)
        preflight(server)
        store = RunStore(out_dir)
        try:
            return self._run(server, out_dir, cpus=cpus, verbose=verbose, report=report, client_app=client_app)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM as ort-cffi-federated turns it into one
            before = store.read_history()
            self.abort()  # first: no process of the run may write after the history says "interrupted"
            if before is not None and before.get("status") in ("running", "interrupted"):
                store.mark_interrupted(resume_command(out, client_app))
            raise

    def _run(self, server: ServerSettings, out_dir: Path, *, cpus: Optional[int], verbose: bool,
             report: Optional[Callable[[str], None]], client_app: str) -> Dict[str, Any]:
        self.start()
        assert self.superlink is not None
        run_config = server.to_run_config()
        app = deploy.write_app(self.home / f"app-{time.monotonic_ns()}", run_config=run_config, clientapp=client_app)
        cores = min(cpus or os.cpu_count() or 1, server.clients)
        federation = {"num-supernodes": server.clients, "client-resources-num-cpus": 1, "client-resources-num-gpus": 0,
                      "init-args-num-cpus": cores, "init-args-num-gpus": 0,
                      "init-args-logging-level": "INFO" if verbose else "ERROR",
                      "init-args-log-to-driver": verbose, "verbose": verbose}

        def on_line(line: str) -> None:
            text = ANSI.sub("", line)
            if LOG_MARK in text:
                if report is not None:
                    report(text.split(LOG_MARK, 1)[1])
            elif verbose:
                print(text, flush=True)

        history_path = out_dir / "history.json"
        before = history_path.stat().st_mtime_ns if history_path.exists() else 0
        log = out_dir / "logs" / "run.log"
        try:
            code = deploy.run_app(app, "local", home=self.home, federation_config=federation, on_line=on_line,
                                  env=self.env, log=log)
        finally:
            shutil.rmtree(app, ignore_errors=True)
        doc = _read(history_path) if history_path.exists() and history_path.stat().st_mtime_ns != before else None
        if doc is not None and doc.get("status") == "completed":
            return doc
        if doc is not None and doc.get("status") == "failed" and doc.get("error"):
            raise FederatedError(str(doc["error"]))
        if doc is not None and doc.get("rounds"):
            done = doc["rounds"][-1].get("round")
            raise FederatedError(
                f"the server stopped after round {done} of {server.rounds} without finishing (its process was "
                f"killed?): the global model and history of round {done} are in {out_dir}; continue the run with "
                f"--resume (resume=True). Flower's log is in {log}")
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.is_file() else ""
        raise FederatedError(f"the simulation ended before its last round (flwr run exited {code}); Flower's log "
                             f"is in {log}:\n{ANSI.sub('', tail)}")

    def processes(self) -> Set[int]:
        """The live processes of this simulation: the SuperLink, whatever it started, and every process
        marked with the simulation's token (`deploy.RUN_MARK`)."""
        found = deploy.marked_processes(self.token)
        if self.superlink is not None and self.superlink.alive():
            found |= {self.superlink.pid} | deploy.descendant_pids(self.superlink.pid)
        return found

    def close(self) -> None:
        """Stop the SuperLink (and with it the runs' processes), then any process of the simulation still
        alive, and remove the home (Flower's and Ray's temporary files with it)."""
        if self.superlink is not None:
            self.superlink.stop()
            self.superlink = None
        deploy.kill_now(self.processes)
        shutil.rmtree(self.home, ignore_errors=True)

    def abort(self) -> None:
        """Stop every process of the simulation now (SIGTERM, SIGKILL one second later: an interrupted run
        has nothing to finish, its files are committed atomically) and remove the home. A later `run`
        starts a new SuperLink."""
        deploy.kill_now(self.processes)
        if self.superlink is not None:
            self.superlink.kill()  # reaped
            self.superlink = None
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> LocalSimulation:
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def resume_command(out: Any, client_app: str = CLIENT_APP) -> str:
    """The command that continues the run in ``out`` (its settings come from its history)."""
    words = ["ort-cffi-federated", "--out", str(out), "--resume"]
    if client_app != CLIENT_APP:
        words += ["--client-app", client_app]
    return shlex.join(words)


def _read(path: Path) -> Optional[Dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def simulate(out: Any = Path("runs") / "federated", *, cpus: Optional[int] = None, verbose: bool = False,
             report: Optional[Callable[[str], None]] = None, client_app: str = CLIENT_APP,
             env: Optional[Mapping[str, str]] = None, **settings: Any) -> Dict[str, Any]:
    """One simulated federation on a SuperLink of its own (`LocalSimulation`), whose log goes to
    ``out/logs``; returns the history document. See `LocalSimulation.run` for the arguments."""
    simulation = LocalSimulation(env=env, log_dir=Path(out).resolve() / "logs")
    try:
        return simulation.run(out, cpus=cpus, verbose=verbose, report=report, client_app=client_app, **settings)
    finally:
        simulation.close()
