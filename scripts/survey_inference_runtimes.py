#!/usr/bin/env python3
"""Survey ONNX Runtime's current inference wheels; write ort_cffi/data/inference_runtimes.json.

``ort-cffi-runtime install --inference`` fetches the C library of an ``onnxruntime`` (or ``onnxruntime-gpu``)
wheel into ort_cffi's runtime store, for interpreters and machines pip has no wheel for. That library links no
CPython, so one wheel per machine serves every interpreter: the survey takes the newest CPython's. It downloads
each wheel with pip (which checks PyPI's hash) and records the wheel's sha256 and size, and the sha256 of every
native library the installer keeps from it (``onnxruntime/capi/libonnxruntime*.so*``: the runtime and its
execution-provider libraries, not the Python extension). The installer refuses a file whose hash differs.

    python scripts/survey_inference_runtimes.py [--downloads DIR] [--version 1.31.1] [--python-version 3.14]

The CUDA wheel (onnxruntime-gpu) is about 260 MB; the survey downloads about 300 MB the first time.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "ort_cffi" / "data" / "inference_runtimes.json"
# What is surveyed: (distribution, machine). ONNX Runtime publishes onnxruntime-gpu for Linux x86_64 only.
SURVEYED = [("onnxruntime", "x86_64"), ("onnxruntime", "aarch64"), ("onnxruntime-gpu", "x86_64")]
PREFIX = "onnxruntime/capi/"


def platform_tags(machine: str) -> "list[str]":
    """Every manylinux tag pip must be told for a manylinux_2_28 wheel to be found (each older one named)."""
    return [f"manylinux_2_28_{machine}", f"manylinux_2_27_{machine}", f"manylinux_2_17_{machine}", f"manylinux2014_{machine}"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def kept(name: str) -> bool:
    """The files the installer keeps: the C library and its provider libraries."""
    return name.startswith(PREFIX) and name[len(PREFIX):].startswith("libonnxruntime") and ".so" in name


def survey(distribution: str, machine: str, version: str, python_version: str, downloads: Path) -> dict:
    before = set(downloads.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--dest", str(downloads),
               "--python-version", python_version, f"{distribution}=={version}"]
    for tag in platform_tags(machine):
        command += ["--platform", tag]
    subprocess.run(command, check=True)
    prefix = f"{distribution.replace('-', '_')}-{version}-cp{python_version.replace('.', '')}-"
    wheels = [w for w in downloads.glob(f"{prefix}*.whl") if machine in w.name]
    if len(wheels) != 1:
        raise SystemExit(f"expected one {prefix}*{machine} wheel in {downloads}, found {wheels or 'none'} ({len(before)} before)")
    wheel = wheels[0]
    data = wheel.read_bytes()
    files = {}
    library = None
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(archive.namelist()):
            if kept(member):
                name = member[len(PREFIX):]
                files[name] = sha256(archive.read(member))
                if name.startswith("libonnxruntime.so."):
                    library = name
    if library is None:
        raise SystemExit(f"{wheel.name} has no {PREFIX}libonnxruntime.so.*")
    return {
        "distribution": distribution, "version": version, "machine": machine, "python_tag": f"cp{python_version.replace('.', '')}",
        "platform": ".".join(platform_tags(machine)), "wheel": wheel.name, "wheel_size": len(data), "wheel_sha256": sha256(data),
        "library": library, "files": files,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--downloads", type=Path, default=ROOT / ".cache" / "inference-wheels")
    parser.add_argument("--version", default="1.31.1")
    parser.add_argument("--python-version", default="3.14")
    args = parser.parse_args()
    args.downloads.mkdir(parents=True, exist_ok=True)
    rows = [survey(d, m, args.version, args.python_version, args.downloads) for d, m in SURVEYED]
    old = json.loads(TABLE.read_text())["files"] if TABLE.exists() else []
    rows = [r for r in old if r["version"] != args.version] + rows
    TABLE.write_text(json.dumps({
        "about": "ONNX Runtime inference wheels whose C library `ort-cffi-runtime install --inference` fetches, with the sha256 "
                 "of each wheel and of each library kept from it. Written by scripts/survey_inference_runtimes.py.",
        "files": rows,
    }, indent=1) + "\n")
    print(f"wrote {len(rows)} rows to {TABLE}")


if __name__ == "__main__":
    main()
