"""Flower's deployment engine on loopback, secured as the guide shows it: a SuperLink with TLS (a CA and
certificate made here) and SuperNode authentication, SuperNodes whose public keys were registered with
``flwr supernode register``, and ``flwr run`` over TLS. Authenticated SuperNodes train, and the run goes on
without one that is killed with SIGKILL mid-run; a SuperNode whose key was not registered is refused; a
SuperNode (or the ``flwr`` CLI) that does not trust the SuperLink's certificate cannot connect. Every
process is stopped at the end, and no Flower log announces a deprecation."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from conftest import ROOT

if sys.version_info < (3, 11):  # Flower 1.42 needs Python 3.11; the extra is not installable before
    pytest.skip("the federated extra (flwr) needs Python 3.11+", allow_module_level=True)

from _federation import (  # noqa: E402
    command_line, descendants, make_ca, make_node_keys, make_server_cert, python_path, wait_for, wait_gone,
)
from _flower_guard import deprecations_in, flower_deprecations, import_flower  # noqa: E402,F401  (the fixture)

federated, flower = import_flower()
from ort_cffi.flower import deploy  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("error::DeprecationWarning:flwr"), pytest.mark.usefixtures("flower_deprecations")]


class Federation:
    """A SuperLink with TLS and SuperNode authentication, the CLI's connection to it, and key pairs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        certs = root / "certs"
        self.ca, ca_cert, ca_key = make_ca(certs)
        self.other_ca, _, _ = make_ca(certs, "other-ca")
        server_cert, server_key = make_server_cert(certs, ca_cert, ca_key)
        self.cli_home = root / "cli"
        self.superlink = deploy.SuperLink(home=root / "superlink", log=root / "logs" / "superlink.log",
                                          tls=deploy.TLSFiles(self.ca, server_cert, server_key), supernode_auth=True,
                                          env={"PYTHONPATH": python_path(ROOT)})
        self.nodes: List[deploy.SuperNode] = []
        self.keys = {name: make_node_keys(certs, name) for name in ("node0", "node1", "node2", "node3", "stranger")}
        self.registered: Dict[str, int] = {}

    def start(self) -> None:
        self.superlink.wait_ready()
        deploy.write_connection(self.cli_home, "secure", self.superlink.address, root_certificates=self.ca)
        for name in ("node0", "node1", "node2", "node3"):  # not the stranger's
            self.registered[name] = deploy.register_supernode(self.keys[name][1], connection="secure", home=self.cli_home)

    def supernode(self, name: str, node_config: Dict[str, object], *, ca: Optional[Path] = None,
                  max_wait: Optional[float] = None) -> deploy.SuperNode:
        node = deploy.SuperNode(self.superlink.address, home=self.root / name, log=self.root / "logs" / f"{name}.log",
                                node_config=node_config, root_certificates=ca or self.ca,
                                private_key=self.keys[name][0], max_wait=max_wait)
        self.nodes.append(node)
        return node

    def online(self) -> List[int]:
        """The node ids the SuperLink lists as online (``flwr supernode ls``, over TLS)."""
        result = deploy.flwr(["supernode", "ls", "secure", "--format", "json"], home=self.cli_home)
        listing = json.loads(result.stdout[result.stdout.index("{"):])
        return [int(node["node-id"]) for node in listing["nodes"] if node.get("status") == "online"]

    def close(self) -> List[str]:
        """Stop every process; return the logs' deprecation lines."""
        for node in self.nodes:
            node.stop()
        self.superlink.stop()
        found = []
        for log in (self.root / "logs").glob("*.log"):
            found += [f"{log.name}: {line}" for line in deprecations_in(log.read_text(errors="replace"))]
        return found


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    fed = Federation(tmp_path_factory.mktemp("federation"))
    try:
        fed.start()
        yield fed
    finally:
        family = descendants(os.getpid())
        deprecations = fed.close()
        assert not wait_gone(family, 90), [command_line(pid) for pid in family if command_line(pid)]
        assert not deprecations, deprecations


def test_authenticated_supernodes_train_over_tls_and_the_run_survives_a_killed_one(
        federation: Federation, small_data: Path, tmp_path: Path) -> None:
    """Three authenticated SuperNodes train; after round 1 one of them is killed with SIGKILL. The rounds
    after it aggregate the two that reply (min-fit-clients 2), the history names the lost client and why,
    and the run finishes."""
    nodes = [federation.supernode(f"node{i}", {"partition-id": i, "num-partitions": 3}) for i in range(3)]
    wait_for(lambda: len(set(federation.online()) & {federation.registered[f"node{i}"] for i in range(3)}) == 3,
             180, what="three authenticated SuperNodes online")
    out = tmp_path / "out"
    app = deploy.write_app(tmp_path / "app", run_config={
        "data": str(small_data), "clients": 3, "num-server-rounds": 3, "min-fit-clients": 2, "batch-size": 16,
        "fraction-evaluate": 0.0, "out": str(out)})
    lines: List[str] = []
    killed: List[int] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if "[ort_cffi] round 1/3" in line and not killed:
            killed.extend([nodes[2].pid] + descendants(nodes[2].pid))
            nodes[2].kill()

    code = deploy.run_app(app, "secure", home=federation.cli_home, on_line=on_line, log=out / "run.log")
    assert code == 0, "\n".join(lines[-30:])
    assert killed and not wait_gone(killed, 60)  # the lost SuperNode left nothing running
    history = json.loads((out / "history.json").read_text())
    assert history["status"] == "completed", history.get("error")
    rounds = history["rounds"]
    nodes = {f"client {i}": federation.registered[f"node{i}"] for i in range(3)}  # the registered keys' node ids
    assert sorted((c["client"], c["node"]) for c in rounds[1]["accepted"]) == sorted(nodes.items())
    assert not rounds[1]["failed"]
    assert sorted((c["client"], c["node"]) for c in rounds[2]["accepted"]) == sorted(list(nodes.items())[:2])
    (lost,) = rounds[2]["failed"]
    assert lost["client"] == "client 2" and lost["node"] == federation.registered["node2"]
    assert re.search(r"Node Unavailable|no reply", lost["reason"]), lost
    assert all(r["clients"] == 2 for r in rounds[3:])
    assert len(rounds) == 4 and rounds[-1]["val_accuracy"] > 0.8
    assert any("client 2 (node" in line and "left out" in line for line in lines)
    assert not deprecations_in("\n".join(lines))


def test_a_supernode_without_a_registered_key_is_refused(federation: Federation) -> None:
    stranger = federation.supernode("stranger", {"partition-id": 0, "num-partitions": 3}, max_wait=60)
    wait_for(lambda: not stranger.alive(), 180, what="the unregistered SuperNode to give up")
    assert stranger.process.returncode != 0
    assert "Failed to activate SuperNode" in stranger.log.read_text(errors="replace")
    assert set(federation.online()) <= set(federation.registered.values())


def test_a_client_that_does_not_trust_the_certificate_cannot_connect(federation: Federation, tmp_path: Path) -> None:
    """A SuperNode with a registered key, but which trusts another CA, fails the TLS handshake; so does the
    ``flwr`` CLI configured with that CA."""
    doubter = federation.supernode("node3", {"partition-id": 0, "num-partitions": 3}, ca=federation.other_ca, max_wait=60)
    wait_for(lambda: not doubter.alive(), 180, what="the SuperNode that distrusts the certificate to give up")
    assert doubter.process.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in doubter.log.read_text(errors="replace")
    assert federation.registered["node3"] not in federation.online()
    home = tmp_path / "doubting-cli"
    deploy.write_connection(home, "secure", federation.superlink.address, root_certificates=federation.other_ca)
    result = deploy.flwr(["supernode", "ls", "secure"], home=home)
    # Flower words a failed handshake as an unreachable SuperLink; the SuperLink is up (the same command,
    # trusting the right CA, answers), so what failed is the trust.
    assert result.returncode != 0 and "Connection to the SuperLink is unavailable" in result.stdout + result.stderr
    assert federation.online()
