"""100 training steps give the same losses, bit for bit, as ONNX Runtime's own Python training layer,
on every interpreter ort_cffi runs on.

The oracle is ONNX Runtime's Python training layer (``onnxruntime.capi._pybind_state``, run by
tests/support/oracle_child.py), and its losses are always made **on this machine**: ONNX Runtime picks its
float32 kernels by the CPU's instruction set (MLAS reads CPUID when it starts: SSE, AVX, FMA3 or
AVX-512 GEMM kernels), so the same program gives other bits on another kind of CPU (one ulp at step 4
between an AVX-512 EPYC and the machine a former golden file was written on). Nothing here is ever
compared with numbers from another machine. Where the oracle's numbers come from, in this order:

1. this interpreter, when it has the Python layer (CPython 3.10-3.12 legs with the training wheel):
   run now, and stored in the cache below for the legs that lack it;
2. the cache, ``.cache/oracle-losses/`` in the checkout: an entry is used only where its key matches
   this machine's CPU (model name and instruction-set flags of /proc/cpuinfo), the runtime ort_cffi
   loads (version and build string), and the inputs (artifacts, data, program); CI's 3.11 leg writes it
   before the 3.13, 3.14 and 3.15 legs (.ci/run), which cannot import the training wheel (3.14 and 3.15 run
   in a Debian sid root, scripts/newest_pythons.sh, which sees the checkout and its cache at the same path);
3. another interpreter that has the Python layer: ``$ORT_CFFI_ORACLE_PYTHON``, else the checkout's
   ``.venv/bin/python`` (scripts/test.sh's 3.11 environment); its numbers are stored too.

Where none can run, the test skips, saying why; with ``ORT_CFFI_REQUIRE_ORACLE`` set (CI sets it) that
skip is a failure.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import pytest

from conftest import REQUIRE_ORACLE_ENV, skip_unless_required
from test_oracle import CHILD, ROOT, STEPS, make_data, programs, run_cffi

CACHE = ROOT / ".cache" / "oracle-losses"
ORACLE_PYTHON_ENV = "ORT_CFFI_ORACLE_PYTHON"
PROGRAM = "losses_tiny"


# --- what the oracle's numbers depend on -----------------------------------------------------------


def parse_cpuinfo(text: str) -> Optional[Dict[str, str]]:
    """The first processor's identity in /proc/cpuinfo: its model and its instruction-set flags.

    x86 lists ``model name`` and ``flags``; aarch64 lists ``CPU implementer``/``CPU part``/... and
    ``Features``. None where no flag list is found: then no cache entry can be trusted to be this CPU's."""
    fields: Dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = fields.get("flags") or fields.get("Features")
    if not flags:
        return None
    model = fields.get("model name") or " ".join(
        f"{key}={fields[key]}" for key in ("CPU implementer", "CPU architecture", "CPU variant", "CPU part") if key in fields
    )
    return {"machine": platform.machine(), "model": model, "flags": " ".join(sorted(flags.split()))}


def cpu_identity() -> Optional[Dict[str, str]]:
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return None


def runtime_identity() -> Dict[str, str]:
    """The runtime ort_cffi loads: its version and build string (git commit, compiler flags)."""
    from ort_cffi.capi import ffi, get_runtime

    runtime = get_runtime()
    return {"version": runtime.version, "build_info": ffi.string(runtime.api.GetBuildInfoString()).decode()}


def inputs_digest(data: Path) -> str:
    """sha256 over everything the program reads: the tiny artifacts' files, the batches and the ops."""
    program = programs("oracle", data.parent)[PROGRAM]
    digest = hashlib.sha256(json.dumps(program["ops"]).encode())
    for path in sorted(Path(program["artifacts"]).iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    with np.load(data) as npz:
        for key in sorted(npz.files):
            digest.update(key.encode() + b"\0" + np.ascontiguousarray(npz[key]).tobytes())
    return digest.hexdigest()


def cache_path(key: Dict[str, Any]) -> Path:
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return CACHE / f"{PROGRAM}-{name}.json"


# --- running the oracle, and the cache ---------------------------------------------------------------


def has_python_layer(python: str) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec("onnxruntime") is not None
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('onnxruntime') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except OSError:
        return False


def run_oracle(python: str, tmp: Path) -> "tuple[np.ndarray, Dict[str, str]]":
    """The oracle's STEPS losses (float32) and the runtime it ran, from ``python`` in a child process."""
    plan = {"data": str(tmp / "data.npz"), "out": str(tmp), "programs": {PROGRAM: programs("oracle", tmp)[PROGRAM]}}
    (tmp / "plan.json").write_text(json.dumps(plan))
    proc = subprocess.run([python, str(CHILD), str(tmp / "plan.json")], capture_output=True, text=True, cwd=str(ROOT),
                          timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"the oracle ({python}) exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                             f"--- stderr\n{proc.stderr}")
    with np.load(tmp / f"{PROGRAM}.npz") as npz:
        losses = npz["t.0"].astype(np.float32)
    return losses, json.loads((tmp / "oracle_runtime.json").read_text())


def bits(losses: np.ndarray) -> "list[str]":
    return [f"{b:08x}" for b in losses.view(np.uint32).tolist()]


def from_bits(hexes: "list[str]") -> np.ndarray:
    return np.array([int(h, 16) for h in hexes], dtype=np.uint32).view(np.float32)


def store(key: Dict[str, Any], losses: np.ndarray, oracle: Dict[str, str]) -> Path:
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "oracle": oracle, "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loss_bits": bits(losses)}
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, path)  # a reader sees the old entry or the new one, never half of one
    return path


def load(key: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    path = cache_path(key)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    # The file name is a hash of the key; the key inside must be this machine's too, all of it.
    return record if record.get("key") == key and len(record.get("loss_bits", [])) == STEPS else None


@dataclass
class Oracle:
    losses: np.ndarray  # float32, STEPS
    source: str  # where they come from, for messages
    key: Optional[Dict[str, Any]]  # None: this CPU cannot be identified, nothing is cached
    data: Path


def same_runtime(oracle: Dict[str, str], ours: Dict[str, str]) -> bool:
    return (oracle["onnxruntime"], oracle["build_info"]) == (ours["version"], ours["build_info"])


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    tmp = tmp_path_factory.mktemp("cross")
    make_data(tmp / "data.npz")
    cpu, ours = cpu_identity(), runtime_identity()
    key = None if cpu is None else {"cpu": cpu, "onnxruntime": ours, "inputs": inputs_digest(tmp / "data.npz")}
    where = "" if cpu is None else f" on this CPU ({cpu['model']})"

    python: Optional[str] = sys.executable if has_python_layer(sys.executable) else None
    if python is None and key is not None:
        record = load(key)
        if record is not None:
            return Oracle(from_bits(record["loss_bits"]), f"{cache_path(key)}: run by Python {record['oracle']['python']} "
                          f"at {record['written']}{where}", key, tmp / "data.npz")
    if python is None:
        candidates = [os.environ.get(ORACLE_PYTHON_ENV), str(ROOT / ".venv" / "bin" / "python")]
        python = next((c for c in candidates if c and os.path.exists(c) and has_python_layer(c)), None)
    if python is None:
        skip_unless_required(
            f"no ONNX Runtime Python layer to run the oracle on this machine: this interpreter lacks it, no cache entry "
            f"for this CPU and runtime{' (the CPU cannot be identified: no /proc/cpuinfo flags)' if key is None else ''} "
            f"in {CACHE}, and neither ${ORACLE_PYTHON_ENV} nor {ROOT / '.venv' / 'bin' / 'python'} imports onnxruntime "
            f"(run the 3.11 leg of scripts/test.sh first, or set {ORACLE_PYTHON_ENV})", REQUIRE_ORACLE_ENV)
    losses, runtime = run_oracle(python, tmp)
    if not same_runtime(runtime, ours):
        skip_unless_required(
            f"the oracle interpreter {python} has onnxruntime {runtime['onnxruntime']} ({runtime['build_info']}), but "
            f"ort_cffi loads {ours['version']} ({ours['build_info']}): their losses need not agree", REQUIRE_ORACLE_ENV)
    if key is not None:
        store(key, losses, runtime)
    return Oracle(losses, f"ONNX Runtime's Python layer run now by {python} (Python {runtime['python']}){where}", key,
                  tmp / "data.npz")


def facade_losses(data: Path) -> np.ndarray:
    with np.load(data) as npz:
        arrays = {k: npz[k] for k in npz.files}
    records = run_cffi(programs("cffi", data.parent)[PROGRAM], arrays)
    return records["t.0"].astype(np.float32)


# --- tests -----------------------------------------------------------------------------------------


@pytest.mark.needs_training_build  # bit-identity with ONNX Runtime's own training needs its build loaded
def test_100_training_steps_are_bit_identical_to_onnx_runtimes_own(oracle: Oracle) -> None:
    """Exact: ort_cffi and the oracle run the same kernels (same build, same CPU) on the same inputs
    with one intra-op thread, so any difference, even one ulp, is a binding bug."""
    from ort_cffi.capi import get_runtime

    ours = facade_losses(oracle.data)
    assert len(oracle.losses) == STEPS == len(ours)
    runtime = get_runtime()
    print(f"{sys.version.split()[0]} with {Path(runtime.library).name} (renamed: {runtime.renamed or 'nothing'}): "
          f"losses {ours[0]:.7f} ... {ours[-1]:.7f}; oracle: {oracle.source}")
    mismatched = np.flatnonzero(ours.view(np.uint32) != oracle.losses.view(np.uint32))
    assert mismatched.size == 0, (f"steps {mismatched.tolist()[:10]} differ: {ours[mismatched][:5]} (ort_cffi) vs "
                                  f"{oracle.losses[mismatched][:5]} (oracle: {oracle.source})")


@pytest.mark.needs_onnxruntime_python
@pytest.mark.needs_training_build  # bit-identity with ONNX Runtime's own training needs its build loaded
def test_the_oracle_repeats_itself_bit_for_bit_on_this_machine(oracle: Oracle, tmp_path: Path) -> None:
    """What the cache stands on: a second run of ONNX Runtime's Python layer, in a fresh process on the
    same machine, gives the same bits; and the cache entry for this machine holds exactly them."""
    make_data(tmp_path / "data.npz")
    again, _ = run_oracle(sys.executable, tmp_path)
    assert bits(again) == bits(oracle.losses), f"the oracle ({oracle.source}) gave other losses on a second run"
    if oracle.key is not None:
        record = load(oracle.key)
        assert record is not None and record["loss_bits"] == bits(again), cache_path(oracle.key)


def test_a_cache_entry_belongs_to_one_cpu_runtime_and_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache key holds the CPU's model and every instruction-set flag, the runtime's version and
    build, and the inputs: changing any one of them names another entry, and an entry whose stored key
    differs from the one asked for is not used."""
    x86 = parse_cpuinfo("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
                        "flags\t\t: fpu sse2 avx2 avx512f\n\nprocessor\t: 1\nmodel name\t: other\n")
    assert x86 is not None and x86["model"] == "AMD EPYC" and x86["flags"] == "avx2 avx512f fpu sse2"
    arm = parse_cpuinfo("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
                        "CPU part\t: 0xd40\n")
    assert arm is not None and arm["model"] == "CPU implementer=0x41 CPU part=0xd40" and arm["flags"] == "asimd fp sve"
    assert parse_cpuinfo("processor\t: 0\nmodel name\t: no flags listed\n") is None
    here = cpu_identity()
    if platform.machine() in ("x86_64", "AMD64") and here is not None:
        assert "sse2" in here["flags"].split() and here["model"]

    key = {"cpu": x86, "onnxruntime": {"version": "1.19.2", "build_info": "b"}, "inputs": "0" * 64}
    variants = [
        {**key, "cpu": {**x86, "flags": "avx2 fpu sse2"}},  # the same model without AVX-512
        {**key, "cpu": {**x86, "model": "AMD EPYC 9654"}},
        {**key, "onnxruntime": {"version": "1.19.2", "build_info": "c"}},
        {**key, "inputs": "1" * 64},
    ]
    assert len({cache_path(k) for k in [key, *variants]}) == 1 + len(variants)
    assert cache_path(key).parent == CACHE

    monkeypatch.setattr(sys.modules[__name__], "CACHE", tmp_path)  # leave the real cache alone
    losses = np.arange(STEPS, dtype=np.float32)
    path = store(key, losses, {"python": "3.11.7"})
    assert path.parent == tmp_path and not list(tmp_path.glob("*.tmp"))
    record = load(key)
    assert record is not None and from_bits(record["loss_bits"]).tobytes() == losses.tobytes()
    assert all(load(k) is None for k in variants)
    forged = json.loads(path.read_text())
    forged["key"] = variants[0]  # another CPU's numbers under this CPU's file name
    path.write_text(json.dumps(forged))
    assert load(key) is None
