"""Flower's deployment pieces as child processes: a SuperLink (in simulation mode for
``ort-cffi-federated``, or serving SuperNodes), SuperNodes, a Flower app project and ``flwr run``.

The simulation command runs the one way Flower 1.42 keeps for simulations, ``flwr run`` against a
SuperLink started with ``--simulation``; the deployment tests run a SuperLink and SuperNodes on loopback,
with TLS and SuperNode authentication. Every process here:

- runs in a Flower home folder of its own (``FLWR_HOME``): apps install there, never in ``~/.flwr``;
- listens on a port chosen free (`free_port`), on 127.0.0.1 unless told otherwise;
- writes its output to a log file, whose end an error quotes;
- dies with the process that started it (Linux: ``PR_SET_PDEATHSIG``), and is stopped with SIGTERM, then
  SIGKILL, by `FlowerProcess.stop`. Flower's own children (SuperExec, the simulation, the
  ClientApps) watch their parent's pid and stop when it goes.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

HOST = "127.0.0.1"


class DeploymentError(RuntimeError):
    """A Flower process did not start, or a Flower command failed; the message quotes its log."""


def free_port(host: str = HOST) -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def flower_command(name: str) -> str:
    """The path of one of Flower's commands, from this interpreter's environment first."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise DeploymentError(f"Flower's command {name!r} is not installed: pip install 'flwr[simulation]>=1.42' "
                              "(ort_cffi's [federated] extra)")
    return found


def flower_env(home: Path, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of a Flower process: its own ``FLWR_HOME``, no telemetry and no update check unless
    the environment sets ``FLWR_TELEMETRY_ENABLED`` or ``FLWR_DISABLE_UPDATE_CHECK`` (the user's values are
    kept), Ray's GPU notice silenced, and this interpreter's ``bin`` first on ``PATH`` (the SuperLink and
    SuperNodes start Flower's other commands by name)."""
    env = dict(os.environ)
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    env.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    env.update({"FLWR_HOME": str(home), "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "PYTHONUNBUFFERED": "1"})
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra or {})
    return env


def _die_with_parent() -> None:  # pragma: no cover  (runs in the child, between fork and exec)
    """Linux: SIGKILL this child when the thread that started it exits, so a killed parent leaves no server."""
    if sys.platform == "win32":
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _process_table() -> Dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process, read from /proc (Linux)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (command)": state, ppid, pgrp, ...
            table[int(entry)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def _groups_below(pid: int) -> Set[int]:
    """The process groups of ``pid`` and of every process below it. Flower's SuperExec starts a
    session of its own, and the simulation's Ray processes live in it: when the SuperLink goes, they
    are orphaned, not stopped, so they are stopped by group. Windows has no process groups to stop."""
    if sys.platform == "win32":
        return set()
    table = _process_table()
    children: Dict[int, List[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    groups, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current in table:
            groups.add(table[current][1])
        todo += children.get(current, [])
    return groups - {os.getpgid(0)}  # never our own group


def _stop_groups(groups: Set[int], grace: float) -> None:
    """SIGTERM every process of ``groups``, then SIGKILL what is left after ``grace`` seconds."""
    if sys.platform == "win32":  # no process groups there (_groups_below finds none)
        return
    def alive() -> bool:
        return any(group in groups for _, group in _process_table().values())

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive():
            return


#: The environment variable that marks every process of one `ort_cffi.flower.simulation.LocalSimulation`
#: (its value is the simulation's own token): the environment is inherited, so it also marks the
#: processes that Flower and Ray start in sessions of their own or that outlive their parent
#: (re-parented to PID 1), which a walk of the process tree would miss.
RUN_MARK = "ORT_CFFI_RUN"


def marked_processes(token: str) -> Set[int]:
    """The live processes (zombies excluded) whose environment holds ``RUN_MARK=token`` (Linux: /proc;
    only this user's processes can be read, which are the only ones a run starts)."""
    needle = f"{RUN_MARK}={token}".encode()
    found = set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue  # gone meanwhile, or another user's
        found.add(int(entry))
    return found


def descendant_pids(pid: int) -> Set[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    table = _process_table()
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        children = [child for child, (parent, _) in table.items() if parent == current and child not in found]
        found.update(children)
        todo += children
    return found


_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL: os.kill(pid, SIGTERM) terminates


def kill_now(find: Callable[[], Set[int]], grace: float = 1.0, timeout: float = 1.5) -> Set[int]:
    """Stop the processes ``find`` returns, fast: SIGTERM to each, SIGKILL to what is left after ``grace``
    seconds, then SIGKILL to whatever ``find`` still returns (a process started meanwhile) until nothing is
    left or ``timeout`` more seconds have passed. Returns the processes still alive then (none, normally).
    For an interrupted run: its files are committed atomically, so nothing gains from a longer wait."""
    own = {os.getpid(), os.getppid()}

    def alive() -> Set[int]:
        return find() - own

    def send(pids: Set[int], sig: int) -> None:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    send(alive(), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := alive()) and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        send(left, _KILL)
        time.sleep(0.05)
        left = alive()
    return left


class FlowerProcess:
    """One Flower command as a child process, in a session of its own, with its output in ``log``."""

    def __init__(self, args: Sequence[str], *, log: Path, env: Mapping[str, str], cwd: Optional[Path] = None) -> None:
        self.args = list(args)
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as output:
            self.process = subprocess.Popen(
                self.args, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(env),
                cwd=str(cwd) if cwd else None, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def alive(self) -> bool:
        """True while the child runs."""
        return self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the child's output."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def stop(self, grace: float = 10.0) -> Optional[int]:
        """SIGTERM, then SIGKILL after ``grace`` seconds; then the same for every process it started,
        whatever session they made for themselves (Flower's SuperExec, the simulation, its Ray
        cluster); returns the child's exit status (idempotent)."""
        groups = _groups_below(self.process.pid) if self.process.poll() is None else set()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        if groups:
            _stop_groups(groups, grace)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL now (a crash, as the tests make one) and reap the child."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(30)

    def __enter__(self) -> FlowerProcess:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


@dataclass(frozen=True)
class TLSFiles:
    """A SuperLink's TLS files (PEM): the CA that signed it, its certificate (with 127.0.0.1 among its
    subject alternative names for loopback) and its private key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


class SuperLink(FlowerProcess):
    """``flower-superlink`` on ``host:port`` (Fleet, Control and Runtime APIs share the port in Flower 1.42):
    insecure, or with ``tls``; with ``supernode_auth``, only SuperNodes whose public key was registered
    (`register_supernode`) may connect. ``simulation=True`` runs apps on the simulation engine
    instead. Apps' dependencies are never installed at run time (ort_cffi is already installed)."""

    def __init__(self, *, home: Path, log: Path, port: Optional[int] = None, host: str = HOST, simulation: bool = False,
                 tls: Optional[TLSFiles] = None, supernode_auth: bool = False,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.host, self.port, self.tls = host, port or free_port(host), tls
        self.home = Path(home)
        args = [flower_command("flower-superlink"), "--host", host, "--port", str(self.port),
                "--disable-runtime-dependency-installation"]
        if tls is None:
            args.append("--insecure")
        else:
            args += ["--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert),
                     "--ssl-keyfile", str(tls.server_key)]
        if supernode_auth:
            args.append("--enable-supernode-auth")
        if simulation:
            args.append("--simulation")
        super().__init__(args, log=log, env=flower_env(self.home, env))

    @property
    def address(self) -> str:
        """``host:port``, as SuperNodes and the ``flwr`` CLI connect to it."""
        return f"{self.host}:{self.port}"

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Wait until the SuperLink answers its health check; ``DeploymentError`` (quoting its log) when it
        exits or does not answer in ``timeout`` seconds."""
        scheme = "https" if self.tls else "http"
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert)) if self.tls else None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise DeploymentError(f"flower-superlink exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{scheme}://{self.address}/health", timeout=5, context=context) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise DeploymentError(f"flower-superlink did not answer on {self.address} within {timeout:g} s:\n{self.log_tail()}")


class SuperNode(FlowerProcess):
    """``flower-supernode`` connected to ``superlink``: insecure, or verifying the SuperLink's certificate
    with ``root_certificates``; signing its requests with ``private_key`` (an OpenSSH EC key) when given.
    ``node_config`` picks its data (``partition-id``/``num-partitions`` or ``data-path``). Its own Runtime
    API (for the ClientApp processes it starts) takes a free port. ``max_wait`` bounds how long it keeps
    trying to reach the SuperLink before it exits (default: for ever)."""

    def __init__(self, superlink: str, *, home: Path, log: Path, node_config: Mapping[str, Any],
                 root_certificates: Optional[Path] = None, private_key: Optional[Path] = None, insecure: bool = False,
                 max_wait: Optional[float] = None, env: Optional[Mapping[str, str]] = None) -> None:
        self.home = Path(home)
        args = [flower_command("flower-supernode"), "--superlink", superlink, "--port", str(free_port()),
                "--node-config", node_config_text(node_config)]
        if insecure:
            args.append("--insecure")
        if root_certificates is not None:
            args += ["--root-certificates", str(root_certificates)]
        if private_key is not None:
            args += ["--auth-supernode-private-key", str(private_key)]
        if max_wait is not None:
            args += ["--max-wait-time", f"{max_wait:g}"]
        super().__init__(args, log=log, env=flower_env(self.home, env))


def node_config_text(config: Mapping[str, Any]) -> str:
    """``--node-config`` text: ``key=value`` pairs, strings quoted (TOML values)."""
    return " ".join(f"{key}={toml_value(value)}" for key, value in config.items())


def toml_value(value: Any) -> str:
    """A TOML scalar: booleans, numbers, and strings (JSON's escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def write_app(folder: Path, *, run_config: Mapping[str, Any], name: str = "ort-cffi-federated",
              serverapp: str = "ort_cffi.flower:serverapp", clientapp: str = "ort_cffi.flower:clientapp") -> Path:
    """A Flower app project in ``folder``: a ``pyproject.toml`` naming the two apps (by default ort_cffi's)
    and the run config. Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    config = "\n".join(f"{key} = {toml_value(value)}" for key, value in run_config.items() if value is not None)
    (folder / "pyproject.toml").write_text(f"""\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
description = "ONNX Runtime training artifacts trained federated with Flower, through ort_cffi"
license = "MIT"
dependencies = ["ort_cffi[federated]"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "ortcffi"

[tool.flwr.app.components]
serverapp = "{serverapp}"
clientapp = "{clientapp}"

[tool.flwr.app.config]
{config}
""")
    return folder


def write_connection(home: Path, name: str, address: str, *, root_certificates: Optional[Path] = None) -> None:
    """``FLWR_HOME/config.toml`` with the one SuperLink connection ``name`` (TLS with ``root_certificates``,
    else insecure), made the default."""
    home.mkdir(parents=True, exist_ok=True)
    security = (f"root-certificates = {toml_value(str(root_certificates))}" if root_certificates is not None
                else "insecure = true")
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\naddress = "{address}"\n{security}\n')


def flwr(args: Sequence[str], *, home: Path, timeout: float = 300.0,
         env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    """Run the ``flwr`` CLI with ``FLWR_HOME=home`` and return its result (output captured)."""
    return subprocess.run([flower_command("flwr"), *args], capture_output=True, text=True, timeout=timeout,
                          env=flower_env(home, env), stdin=subprocess.DEVNULL)


def register_supernode(public_key: Path, *, connection: str, home: Path) -> int:
    """``flwr supernode register``: allow the SuperNode of ``public_key`` (OpenSSH format) to connect to an
    authenticating SuperLink; returns its node id. Raises `DeploymentError` with Flower's output."""
    result = flwr(["supernode", "register", str(public_key), connection, "--format", "json"], home=home)
    try:
        answer = json.loads(result.stdout[result.stdout.index("{"):])
        return int(answer["node-id"])
    except (ValueError, KeyError):
        raise DeploymentError(f"flwr supernode register failed ({result.returncode}):\n{result.stdout}{result.stderr}") from None


def run_app(app: Path, connection: str, *, home: Path, federation_config: Optional[Mapping[str, Any]] = None,
            on_line: Optional[Callable[[str], None]] = None, env: Optional[Mapping[str, str]] = None,
            log: Optional[Path] = None) -> int:
    """``flwr run APP CONNECTION --stream``: start the app's run and follow its log until it ends. Each
    output line goes to ``on_line``, and all of them to ``log``. Returns ``flwr``'s exit status."""
    args = [flower_command("flwr"), "run", str(app), connection, "--stream"]
    if federation_config:
        args += ["--federation-config", node_config_text(federation_config)]
    lines: List[str] = []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                          env=flower_env(home, env), stdin=subprocess.DEVNULL,
                          preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None) as follow:
        assert follow.stdout is not None
        try:
            for line in follow.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
        finally:
            if follow.poll() is None:
                follow.terminate()
            try:
                code = follow.wait(2.0)
            except subprocess.TimeoutExpired:  # it does not stop: an interrupted run must not wait for it
                follow.kill()
                code = follow.wait()
            if log is not None:
                log.parent.mkdir(parents=True, exist_ok=True)
                with open(log, "a", errors="replace") as file:
                    file.writelines(lines)
    return code
