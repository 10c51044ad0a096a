"""ort_cffi's engine on every ONNX Runtime inference release: fetch each into .cache/ and run checks on it.

    .venv/bin/python scripts/check_versions.py                       # every release below, every check
    .venv/bin/python scripts/check_versions.py --versions 1.22.1 1.27.0 --checks loads java
    .venv/bin/python scripts/check_versions.py --zoo-models sklearn_mlp cnn_dynamo   # a few zoo models only

Each release's cp311 manylinux x86_64 wheel goes into ``.cache/ort-inference-<version>`` as scripts/test.sh
fetches 1.31.1 (never on sys.path of .venv). The checks, each in child processes:

- ``loads``: the wheel, on PYTHONPATH as an installed ``onnxruntime``, is found by the loader and trains on the
  engine (``ort_cffi.backend() == "engine"``, the reported version is the release's). A release older than 1.19
  must be refused instead, with an error naming its version (docs/guides/runtime.md, versions).
- ``java``: ONNX Runtime's Java training tests ported (tests/java/test_training_java.py) on that wheel, with
  its golden data from ``$ORT_CFFI_JAVA_TESTDATA`` (default ../shared/testdata/ort-java-training).
- ``zoo``: tests/engine/test_engine_training.py with ``ORT_CFFI_TEST_ORT_VERSION``: the embedded example and the
  zoo's models, 100 steps each, losses within 1e-5 relative of the training build (1.19.2, in .venv).
- ``lowering``: tests/engine/test_lowering_*.py: every lowered training operator runs on that release as the
  training build's kernel computes it.
- ``apps``: tests/engine/test_engine_apps.py: the command-line trainer, and checkpoints crossing backends.

It ends with a table, release against check: passed, failed (with the log's path) or refused as expected, and
exits 1 when anything failed. The logs are under ``.cache/check-versions/``.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
LOGS = CACHE / "check-versions"
# The last patch release of each minor that PyPI has for cp311 manylinux x86_64 (measured 2026-12-07 with
# `pip index versions onnxruntime`), with 1.18.1: the newest release ort_cffi must refuse.
VERSIONS = ["1.18.1", "1.19.2", "1.20.1", "1.21.1", "1.22.1", "1.23.2", "1.24.4", "1.25.1", "1.26.0", "1.27.0",
            "1.28.0", "1.29.0", "1.30.0", "1.31.1", "1.32.0"]
OLDEST = (1, 19)
CHECKS = ["loads", "java", "zoo", "lowering", "apps"]
# what the engine's runs leave out (scripts/test.sh): the training build's own tests, and those importing
# ONNX Runtime's Python layer beside ort_cffi
ENGINE_MARKERS = "not needs_training_build and not needs_onnxruntime_python and not needs_onnxruntime_generator"

LOADS = """
import sys
want, refuse = sys.argv[1], sys.argv[2] == "1"
import ort_cffi
from ort_cffi import OrtEnvironment
try:
    OrtEnvironment.getEnvironment()
    from ort_cffi.capi import get_runtime
    runtime = get_runtime()
except Exception as error:  # the refusal of a release that is too old
    if refuse and want in str(error):
        named = [line.strip() for line in str(error).splitlines() if want in line]
        print(f"refused: {type(error).__name__}: " + max(named, key=lambda line: "1.19" in line))
        sys.exit(0)
    raise
if refuse:
    sys.exit(f"ONNX Runtime {runtime.version} loaded: it should have been refused")
print(f"ONNX Runtime {runtime.version} ({runtime.kind}) from {runtime.library}; backend: {ort_cffi.backend()}")
sys.exit(0 if ort_cffi.backend() == "engine" and runtime.version == want else "not the engine on " + want)
"""


def version_tuple(version: str) -> Tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def fetch(version: str) -> Path:
    """The release's wheel unpacked into .cache/ort-inference-<version>, once (under the lock scripts/test.sh
    takes: another run may be fetching into .cache)."""
    target = CACHE / f"ort-inference-{version}"
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "shared-downloads.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            subprocess.run(["rm", "-rf", str(target)], check=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                            "--only-binary=:all:", "--target", str(target), "--python-version", "3.11",
                            "--platform", "manylinux_2_28_x86_64", f"onnxruntime=={version}"], check=True)
            (target / ".complete").touch()
    return target


def engine_env(version: str, folder: Path) -> Dict[str, str]:
    """The wheel as an installed ``onnxruntime`` (PYTHONPATH, as scripts/test.sh's engine run), with no other
    runtime chosen, and a runtime store of its own (empty: nothing fetched elsewhere is found)."""
    return {**os.environ, "ORT_CFFI_BACKEND": "", "ORT_CFFI_LIBRARY": "", "ORT_CFFI_RUNTIME": "",
            "ORT_CFFI_RUNTIME_DIR": str(LOGS / "empty-store"), "PYTHONPATH": str(folder), "OMP_NUM_THREADS": "1"}


def tests_env(version: str) -> Dict[str, str]:
    """For the tests that start their engine children themselves: they read the release's folder from
    ORT_CFFI_TEST_ORT_VERSION (tests/engine/test_engine_training.py, tests/support/lowering_check.py)."""
    return {**os.environ, "ORT_CFFI_TEST_ORT_VERSION": version}


def pytest(paths: List[str], *extra: str) -> List[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *extra, *paths]


def command(check: str, version: str, folder: Path,
            zoo_models: Optional[List[str]]) -> Tuple[List[str], Dict[str, str]]:
    if check == "loads":
        return [sys.executable, "-c", LOADS, version, "1" if version_tuple(version) < OLDEST else "0"], \
            engine_env(version, folder)
    if check == "java":
        java = (os.environ.get("ORT_CFFI_JAVA_TESTDATA")
                or str(ROOT.parent / "shared" / "testdata" / "ort-java-training"))
        return pytest(["tests/java/test_training_java.py"], "-m", ENGINE_MARKERS), \
            {**engine_env(version, folder), "ORT_CFFI_JAVA_TESTDATA": java}
    if check == "zoo":
        module = "tests/engine/test_engine_training.py"
        zoo = json.loads((ROOT / "tests" / "zoo" / "zoo.json").read_text())["models"]
        paths = [module] if not zoo_models else [
            f"{module}::test_the_embedded_example_trains_alike_on_both_backends",
            *(f"{module}::test_zoo_models_train_alike_on_both_backends[{name}]" for name in zoo_models),
            *(f"{module}::test_onnx_runtimes_artifacts_of_the_zoo_train_alike_on_both_backends[{name}]"
              for name in zoo_models if zoo[name]["generator_onnxruntime_1_19_2"]["result"] == "ok")]
        return pytest(paths), tests_env(version)
    if check == "lowering":
        paths = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "engine").glob("test_lowering_*.py"))
        return pytest(paths), tests_env(version)
    if check == "apps":
        return pytest(["tests/engine/test_engine_apps.py"]), tests_env(version)
    raise ValueError(check)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=VERSIONS, metavar="VERSION",
                        help="onnxruntime releases to check (default: the last patch of each minor, 1.18.1 to 1.32.0)")
    parser.add_argument("--checks", nargs="+", default=CHECKS, choices=CHECKS)
    parser.add_argument("--zoo-models", nargs="+", metavar="NAME",
                        help="the zoo check on these models of tests/zoo/zoo.json only (and the embedded example)")
    args = parser.parse_args(argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / "empty-store").mkdir(exist_ok=True)
    results: Dict[str, Dict[str, str]] = {}
    failed = False
    for version in args.versions:
        results[version] = {}
        try:
            folder = fetch(version)
        except subprocess.CalledProcessError:
            failed = True
            missing = "not fetched (pip has no cp311 manylinux x86_64 wheel?)"
            results[version] = {check: missing for check in args.checks}
            print(f"{version}: not fetched", flush=True)
            continue
        too_old = version_tuple(version) < OLDEST
        for check in args.checks:
            if too_old and check != "loads":
                results[version][check] = "-"  # refused at load: nothing else can run
                continue
            cmd, env = command(check, version, folder, args.zoo_models)
            log = LOGS / f"{version}-{check}.log"
            start = time.monotonic()
            with open(log, "w") as out:
                done = subprocess.run(cmd, env=env, cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT)
            seconds = time.monotonic() - start
            if done.returncode == 0:
                results[version][check] = f"{'refused' if too_old else 'passed'} ({seconds:.0f} s)"
            else:
                failed = True
                results[version][check] = f"FAILED ({log.relative_to(ROOT)})"
            print(f"{version} {check}: {results[version][check]}", flush=True)
    widths = [max(len("version"), *map(len, results))] + [
        max(len(check), *(len(results[v][check]) for v in results)) for check in args.checks]
    rows = [["version", *args.checks]] + [[v, *(results[v][c] for c in args.checks)] for v in results]
    print()
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
