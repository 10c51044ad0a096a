"""The install extras never put two ONNX Runtime distributions in one environment.

``onnxruntime``, ``onnxruntime-gpu``, ``onnxruntime-training`` and ``onnxruntime-training-cpu`` all install the
same ``onnxruntime/`` package folder: one environment cannot hold two of them (uninstalling one removes files
of the other). setup.py gives each its own extra; these tests read setup.py's real requirements and every
install line of the README and the docs, and evaluate their markers on every interpreter and platform ONNX
Runtime ships for."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set
from unittest import mock

import pytest
from packaging.requirements import Requirement

from conftest import ROOT

RUNTIMES = {"onnxruntime", "onnxruntime-gpu", "onnxruntime-training", "onnxruntime-training-cpu"}
ENVIRONMENTS = [
    {"python_version": f"3.{minor}", "platform_machine": machine, "sys_platform": system}
    for minor in range(9, 16)
    for machine, system in [("x86_64", "linux"), ("aarch64", "linux"), ("arm64", "darwin"), ("x86_64", "darwin"), ("AMD64", "win32")]
]
# An install line of the docs: pip install ".[a,b]" (a checkout), "ort_cffi[a,b]", or . alone.
INSTALL_LINE = re.compile(r"pip install (?:-e )?['\"]?(?:\.|ort_cffi)(?:\[([\w,-]+)\])?['\"]?(?=\s|$|`)")


def setup_arguments() -> dict:
    import setuptools

    with mock.patch.object(setuptools, "setup") as setup:
        source = (ROOT / "setup.py").read_text()
        exec(compile(source, str(ROOT / "setup.py"), "exec"), {"__name__": "setup_under_test"})
    return dict(setup.call_args.kwargs)


def runtimes_installed(requirements: List[str], environment: Dict[str, str]) -> Set[str]:
    names = set()
    for text in requirements:
        requirement = Requirement(text)
        if requirement.name in RUNTIMES and (requirement.marker is None or requirement.marker.evaluate(environment)):
            names.add(requirement.name)
    return names


def documented_extras() -> Dict[str, List[str]]:
    """Every install line of the README and the docs: its extras, by where it is."""
    found: Dict[str, List[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in INSTALL_LINE.finditer(line):
                found[f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"] = (match.group(1) or "").split(",") if match.group(1) else []
    return found


def test_the_bare_install_carries_no_runtime_and_each_runtime_extra_one():
    arguments = setup_arguments()
    extras = arguments["extras_require"]
    for environment in ENVIRONMENTS:
        assert runtimes_installed(arguments["install_requires"], environment) == set()
        assert runtimes_installed(extras["onnxruntime"], environment) == {"onnxruntime"}
        assert runtimes_installed(extras["gpu"], environment) == {"onnxruntime-gpu"}
    # The training build where it was published (and the loader reads it): x86_64, CPython <= 3.12 (CUDA <= 3.11).
    linux = {"platform_machine": "x86_64", "sys_platform": "linux"}
    assert runtimes_installed(extras["cpu"], dict(linux, python_version="3.12")) == {"onnxruntime-training-cpu"}
    assert runtimes_installed(extras["cuda"], dict(linux, python_version="3.11")) == {"onnxruntime-training"}
    assert runtimes_installed(extras["cpu"], dict(linux, python_version="3.13")) == set()


def test_no_documented_install_line_puts_two_runtimes_in_one_environment():
    extras = setup_arguments()["extras_require"]
    lines = documented_extras()
    assert len(lines) > 10 and any("onnxruntime" in names for names in lines.values())  # the reader finds them
    for where, names in lines.items():
        unknown = [name for name in names if name not in extras]
        assert not unknown, f"{where}: no such extra {unknown}"
        requirements = [requirement for name in names for requirement in extras[name]]
        for environment in ENVIRONMENTS:
            installed = runtimes_installed(requirements, environment)
            assert len(installed) <= 1, f"{where} installs {sorted(installed)} together on {environment}"


@pytest.mark.parametrize("combination", [["onnxruntime", "cpu"], ["gpu", "cpu"], ["onnxruntime", "onnxruntime-generator"]])
def test_the_check_sees_a_clash(combination):
    """The check above can fail: these combinations, which no documented line uses, clash on 3.11 x86_64 Linux."""
    extras = setup_arguments()["extras_require"]
    requirements = [requirement for name in combination for requirement in extras[name]]
    environment = {"python_version": "3.11", "platform_machine": "x86_64", "sys_platform": "linux"}
    assert len(runtimes_installed(requirements, environment)) == 2
