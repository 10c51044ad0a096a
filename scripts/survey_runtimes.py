#!/usr/bin/env python3
"""Survey the published ONNX Runtime 1.19.2 training wheels; write ort_cffi/data/runtimes.json.

For every wheel of onnxruntime-training-cpu and onnxruntime-training 1.19.2 on PyPI (the last
training builds ever published), it records the file name, size and sha256 PyPI states. For each
Linux wheel it then downloads the file (with pip, which checks PyPI's hash), and records the
runtime extension inside it (``onnxruntime/capi/onnxruntime_pybind11_state*.so``): its sha256,
size, the CPython symbols it imports, where its ``OrtApiBase`` lies as ort_cffi's static
finder reads it (``ort_cffi._native.elf.find_api_base``), and where the string lies that pybind11's
interpreter check compares with (``pybind11_version_check``: ``elf.find_version_check``; null when it is
not found unambiguously). The loader refuses a known file whose static answer differs from this table;
``ort-cffi-runtime install`` picks the wheel to fetch from it, and patches the version check of the
generator's private copy only at the offset recorded here.

Wheels that are not ELF (macOS, Windows) are listed with the reason they are not surveyed. ONNX
Runtime published no Linux aarch64 training wheel; to check the static finder's aarch64 decoding on
real files, the survey also reads the inference wheel ``onnxruntime`` 1.19.2 for x86_64 and aarch64,
whose ``libonnxruntime.so`` exports ``OrtGetApiBase``: the finder's answer must equal the table
that function returns (decoded from its code) in both the library and the Python extension's
neighbour. These are the ``reference`` rows.

    python scripts/survey_runtimes.py [--downloads DIR]     # DIR keeps the wheels between runs

The CUDA wheels are about 300 MB each; the whole survey downloads about 1.3 GB the first time.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ort_cffi._native import elf as _elf  # noqa: E402  (the static finder under survey)
from ort_cffi._native.files import file_sha256  # noqa: E402

VERSION = "1.19.2"
DISTRIBUTIONS = {"onnxruntime-training-cpu": "cpu", "onnxruntime-training": "cuda"}
REFERENCE = "onnxruntime"  # the inference wheel, whose library exports OrtGetApiBase
REFERENCE_TAGS = ("cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64")
OUTPUT = ROOT / "ort_cffi" / "data" / "runtimes.json"


def published(distribution: str) -> list:
    """PyPI's files of ``distribution`` at VERSION (its simple JSON API), with their sha256."""
    request = urllib.request.Request(
        f"https://pypi.org/simple/{distribution}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    return [f for f in files if f"-{VERSION}-" in f["filename"] and f["filename"].endswith(".whl")]


def download(distribution: str, filename: str, sha256: str, folder: Path) -> Path:
    """The wheel in ``folder``, fetched with pip unless a file with the right hash is there already."""
    path = folder / filename
    if path.is_file() and file_sha256(path) == sha256:
        return path
    python_tag, _, platform = filename[:-4].split("-")[-3:]
    version = f"{python_tag[2]}.{python_tag[3:]}"
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", version, "--dest", str(folder), f"{distribution}=={VERSION}",
    ]
    for tag in platform.split("."):
        command += ["--platform", tag]
    subprocess.run(command, check=True)
    if file_sha256(path) != sha256:
        raise SystemExit(f"{path}: sha256 differs from PyPI's")
    return path


def extension_row(wheel: Path, member: str, version: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as archive:
            extracted = Path(archive.extract(member, tmp))
        location = _elf.find_api_base(extracted, version)
        return {
            "extension": member,
            "extension_sha256": file_sha256(extracted),
            "extension_size": extracted.stat().st_size,
            "cpython_imports": len(_elf.cpython_imports(extracted)),
            **location.as_record(),
            "offset_from_anchor": location.offset,
        }


def version_check(wheel: Path, member: str, python_tag: str) -> "dict | None":
    """Where the extension holds the CPython version pybind11 checks at import ("3.12" for cp312), or None."""
    compiled_for = f"{python_tag[2]}.{python_tag[3:]}"
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as archive:
            extracted = Path(archive.extract(member, tmp))
        offset = _elf.find_version_check(extracted, compiled_for)
    return None if offset is None else {"compiled_for": compiled_for, "offset": offset}


def survey_training(downloads: Path) -> "tuple[list, list]":
    rows, not_surveyed = [], []
    for distribution, flavour in DISTRIBUTIONS.items():
        for entry in published(distribution):
            filename, sha256 = entry["filename"], entry["hashes"]["sha256"]
            python_tag, _, platform = filename[:-4].split("-")[-3:]
            if "manylinux" not in platform:
                not_surveyed.append({"wheel": filename, "why": "not a Linux wheel (Mach-O or PE inside, not ELF)"})
                continue
            print(f"surveying {filename}", flush=True)
            wheel = download(distribution, filename, sha256, downloads)
            with zipfile.ZipFile(wheel) as archive:
                (member,) = [n for n in archive.namelist() if n.startswith("onnxruntime/capi/onnxruntime_pybind11_state")]
            rows.append({
                "distribution": distribution,
                "flavour": flavour,
                "version": VERSION,
                "wheel": filename,
                "wheel_sha256": sha256,
                "wheel_size": entry["size"],
                "python_tag": python_tag,
                "platform": platform,
                **extension_row(wheel, member, VERSION),
                "pybind11_version_check": version_check(wheel, member, python_tag),
            })
    return rows, not_surveyed


def survey_reference(downloads: Path) -> list:
    rows = []
    for entry in published(REFERENCE):
        filename = entry["filename"]
        if not any(filename.endswith(f"-{tag}.whl") for tag in REFERENCE_TAGS):
            continue
        print(f"surveying {filename} (reference)", flush=True)
        wheel = download(REFERENCE, filename, entry["hashes"]["sha256"], downloads)
        with zipfile.ZipFile(wheel) as archive:
            members = [n for n in archive.namelist() if n.startswith("onnxruntime/capi/") and ".so" in n]
            library = next(n for n in members if "/libonnxruntime.so" in n)
            extension = next(n for n in members if "onnxruntime_pybind11_state" in n)
            with tempfile.TemporaryDirectory() as tmp:
                lib_path = Path(archive.extract(library, tmp))
                exported = _elf.returned_by_export(lib_path, "OrtGetApiBase")
        lib_row = extension_row(wheel, library, VERSION)
        ext_row = extension_row(wheel, extension, VERSION)
        rows.append({
            "wheel": filename,
            "wheel_sha256": entry["hashes"]["sha256"],
            "machine": lib_row["machine"],
            "library": {**lib_row, "OrtGetApiBase_returns": exported, "agrees": exported == lib_row["api_base"]},
            "extension": ext_row,
        })
        if exported != lib_row["api_base"]:
            raise SystemExit(f"{filename}: the static finder ({lib_row['api_base']:#x}) disagrees with OrtGetApiBase ({exported:#x})")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--downloads", type=Path, default=ROOT / ".cache" / "survey", help="where the wheels are kept")
    args = parser.parse_args()
    args.downloads.mkdir(parents=True, exist_ok=True)
    files, not_surveyed = survey_training(args.downloads)
    machines = {row["machine"] for row in files}
    survey = {
        "about": "ONNX Runtime 1.19.2 training wheels on PyPI and where their OrtApiBase lies "
        "(addresses are virtual addresses from the file's load base). Written by scripts/survey_runtimes.py.",
        "version": VERSION,
        "files": sorted(files, key=lambda r: (r["flavour"], r["platform"], r["python_tag"])),
        "not_surveyed": sorted(not_surveyed, key=lambda r: r["wheel"]),
        "absent": [
            f"no Linux {machine} training wheel was published for {VERSION}"
            for machine in ("x86_64", "aarch64") if machine not in machines
        ] + ["onnxruntime-training (CUDA) was published for cp38-cp311 only, x86_64 only"],
        "reference": survey_reference(args.downloads),
    }
    OUTPUT.write_text(json.dumps(survey, indent=1) + "\n")
    print(f"wrote {OUTPUT}: {len(files)} runtime files, {len(not_surveyed)} wheels not surveyed")


if __name__ == "__main__":
    main()
