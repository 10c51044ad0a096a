"""Helpers of the federated tests: a CA, a SuperLink certificate and SuperNode key pairs made here (the
``cryptography`` package), the processes a test started and their descendants (read from /proc), and a
hostile ClientApp module for the simulations."""
from __future__ import annotations

import datetime
import ipaddress
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_ca(folder: Path, name: str = "ca") -> Tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA: ``<name>.crt`` (and its key, kept in memory)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(f"ort_cffi test {name}")).issuer_name(_name(f"ort_cffi test {name}"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    path = folder / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def make_server_cert(folder: Path, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> Tuple[Path, Path]:
    """The SuperLink's certificate (for 127.0.0.1 and localhost) signed by the CA, and its key."""
    key = ec.generate_private_key(ec.SECP384R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            # Python 3.13 and later verify strictly (ssl.VERIFY_X509_STRICT): a certificate a CA signed must
            # name that CA's key ("Missing Authority Key Identifier" otherwise).
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return cert_path, key_path


def make_node_keys(folder: Path, name: str) -> Tuple[Path, Path]:
    """A SuperNode's EC key pair in OpenSSH format (what ``ssh-keygen -t ecdsa -b 384`` writes):
    ``<name>`` (private) and ``<name>.pub``."""
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / name, folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return private, public


# --- processes ------------------------------------------------------------------------------------

def _ppids() -> Dict[int, int]:
    parents: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":  # a zombie is gone already, only not reaped
            parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> List[int]:
    """The live descendants of ``pid`` (children, their children, ...)."""
    parents = _ppids()
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        children = [child for child, parent in parents.items() if parent == current]
        found.extend(children)
        frontier.extend(children)
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid`` ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_matching(text: str) -> List[int]:
    """Live processes whose command line holds ``text``."""
    return [pid for pid in _ppids() if text in command_line(pid)]


def processes_with_env(name: str, value: str) -> List[int]:
    """Live processes whose environment holds ``name=value``: the environment is inherited, so this finds
    every process a command started with it, even one that left its session or outlived its parent."""
    needle = f"{name}={value}".encode()
    found = []
    for pid in _ppids():
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            continue
    return found


def wait_gone(pids: List[int], timeout: float = 120.0) -> List[int]:
    """Wait until none of ``pids`` is alive; returns those still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        live = _ppids()
        alive = [pid for pid in alive if pid in live]
        if alive:
            time.sleep(0.5)
    return alive


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.5, what: str = "condition") -> None:
    """Poll ``predicate`` until it is true; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


HOSTILE_APP = '''\
"""A ClientApp that wraps ort_cffi's: honest, except the clients whose partition-id is in ATTACKS, which
send a broken or hostile update (or raise, or take SLOW_SECONDS longer) instead of their trained model,
from round FROM_ROUND on."""
import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from ort_cffi.flower import ClientSettings, learner_for
from ort_cffi.flower.client import client_side_clipping

ATTACKS, FROM_ROUND, SLOW_SECONDS = {attacks!r}, {from_round}, 60
app_settings = ClientSettings()
clientapp = ClientApp(mods=[client_side_clipping])  # as ort_cffi's own: DP clipping when the server asks


def corrupt(record: ArrayRecord, attack: str) -> ArrayRecord:
    arrays = {{name: record[name].numpy() for name in record.keys()}}
    first = next(iter(arrays))
    if attack == "nan":
        arrays[first] = arrays[first].copy()
        arrays[first].flat[0] = np.nan
    elif attack == "inf":
        arrays[first] = np.full_like(arrays[first], np.inf)
    elif attack == "size":
        arrays[first] = np.zeros(arrays[first].size + 3, np.float32)
    elif attack == "dtype":
        arrays = {{name: value.astype(np.float64) for name, value in arrays.items()}}
    elif attack == "scaled":
        arrays = {{name: value * np.float32(-30.0) for name, value in arrays.items()}}
    elif attack == "random":
        rng = np.random.default_rng(7)
        arrays = {{name: rng.normal(0, 3, value.shape).astype(np.float32) for name, value in arrays.items()}}
    return ArrayRecord({{name: Array(np.ascontiguousarray(value)) for name, value in arrays.items()}})


@clientapp.train()
def train(msg: Message, context: Context) -> Message:
    attack = ATTACKS.get(int(context.node_config.get("partition-id", -1)))
    hostile = attack is not None and int(msg.content["config"]["server-round"]) >= FROM_ROUND
    if hostile and attack == "raise":
        raise RuntimeError("this client broke on purpose")
    if hostile and attack == "slow":  # an honest update, late: holds the round open for the server's killer
        time.sleep(SLOW_SECONDS)
        attack = None
    reply = learner_for(app_settings, context).train_reply(msg.content)
    if hostile:
        reply["arrays"] = corrupt(reply["arrays"], attack)
    return Message(reply, reply_to=msg)


@clientapp.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return Message(learner_for(app_settings, context).evaluate_reply(msg.content), reply_to=msg)
'''


def write_hostile_app(folder: Path, module: str, attacks: Dict[int, str], from_round: int = 1) -> str:
    """``folder/module.py``: a ClientApp whose clients ``attacks`` (partition-id -> nan, inf, size, dtype,
    scaled, random, raise or slow) misbehave from round ``from_round``; returns its ``--client-app`` spec
    (``folder`` must be on the Flower processes' PYTHONPATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(HOSTILE_APP.format(attacks=dict(attacks), from_round=from_round))
    return f"{module}:clientapp"


def python_path(*folders: Path, extra: Optional[str] = None) -> str:
    """A PYTHONPATH with ``folders`` first."""
    parts = [str(f) for f in folders] + ([extra] if extra else []) + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return os.pathsep.join(parts)
