"""The documentation is tested: every Python example of the README and of docs/ runs (Sybil), every
public name has a docstring, and the Java map (docs/java-map.md) matches the code.

Examples: the ```python blocks of one page run top to bottom in one namespace, in a fresh temporary
folder, against the real runtime. A block that cannot run as written (a deployment, a fragment of a
larger program) is preceded by ``<!-- fragment: the reason -->``: it is compiled, so that it cannot
rot into invalid Python, but not run.
"""
from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any, Iterable, Optional

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser

from conftest import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FRAGMENT = re.compile(r"<!--\s*fragment:\s*(?P<why>.*?)\s*-->")
# ``<!-- marker: needs_ray (why) -->`` on a page: its examples need what the marker names (pytest.ini), and
# scripts/test.sh leaves the page out where that cannot run, saying so.
PAGE_MARKER = re.compile(r"<!--\s*marker:\s*(?P<name>needs_\w+)\s*\((?P<why>[^)]+)\)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$", re.MULTILINE)


def compile_only(example: Example) -> Optional[str]:
    compile(str(example.parsed), f"{example.path}:{example.line}", "exec")
    return None


class PythonBlocks:
    """Sybil's Markdown Python blocks; those marked as fragments are compiled only."""

    def __init__(self) -> None:
        self.blocks = PythonCodeBlockParser()

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.blocks(document):
            preceding = document.text[: region.start].rstrip().rsplit("\n", 1)[-1].strip()
            marker = FRAGMENT.fullmatch(preceding)
            if marker:
                if not marker["why"]:
                    raise ValueError(f"{document.path}: a fragment marker must say why the block cannot run")
                region.evaluator = compile_only
            yield region


SYBIL = Sybil(parsers=[PythonBlocks()], path=str(ROOT))


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def with_page_markers(page: Path) -> Any:
    marks = [getattr(pytest.mark, m["name"]) for m in PAGE_MARKER.finditer(page.read_text())]
    return pytest.param(page, marks=marks, id=page_id(page))


@pytest.mark.parametrize("page", [with_page_markers(page) for page in DOCUMENTS])
def test_every_python_example_runs(page: Path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    document = SYBIL.parse(page)
    examples = list(document)
    try:
        for example in examples:
            example.evaluate()
    finally:
        namespace: Any = document.namespace
        for value in list(namespace.values()):  # what a page leaves open is closed, as its reader's exit would
            close = getattr(value, "close", None)
            if callable(close) and type(value).__module__.startswith("ort_cffi") and type(value).__name__ != "OrtEnvironment":
                close()
        namespace.clear()
        gc.collect()


@pytest.mark.parametrize("page", DOCUMENTS, ids=page_id)
def test_code_blocks_say_their_language(page: Path):
    """A Python block tagged otherwise (```py, ```python3) would silently escape the example test."""
    text = page.read_text()
    infos = [m["info"].strip() for m in FENCE.finditer(text)]
    opening = infos[0::2]  # fences alternate: opening, closing
    odd = [info for info in opening if info.split()[:1] and info.split()[0] in ("py", "python3", "pycon", "Python")]
    assert not odd, f"{page_id(page)}: tag Python blocks ```python (found {odd})"
    for marker in FRAGMENT.finditer(text):
        following = text[marker.end():].lstrip("\n")
        assert following.startswith("```python"), f"{page_id(page)}: a fragment marker must precede a ```python block"


INSTALL_LINE = re.compile(r"""pip install (?:\.|"\.\[(?P<extras>[a-z0-9,-]+)\]")(?P<rest>[^\n#]*)""")


def installs_a_runtime(extras: "set[str]", python: str) -> bool:
    """Whether ``pip install ".[extras]"`` installs an ONNX Runtime build ort_cffi trains on (the training build,
    or a current inference build for its engine) on CPython ``python`` (Linux x86_64), by the package's own
    requirement markers."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    for text in requires("ort_cffi") or []:
        requirement = Requirement(text)
        if requirement.name not in ("onnxruntime-training", "onnxruntime-training-cpu", "onnxruntime", "onnxruntime-gpu"):
            continue
        for extra in extras:
            if requirement.marker is None or requirement.marker.evaluate(
                    {"python_version": python, "platform_machine": "x86_64", "extra": extra}):
                return True
    return False


def test_each_install_line_alone_gives_a_working_command():
    """The README's `pip install ".[federated]"` installed no runtime on 3.11: ort-cffi-federated then
    failed to load one. Each install line of the README and the guides must install a runtime by itself
    on CPython 3.11 (the Python every line claims), or fetch one with `ort-cffi-runtime install`."""
    lines = [(page.relative_to(ROOT), match) for page in DOCUMENTS
             for match in INSTALL_LINE.finditer(page.read_text(encoding="utf-8"))]
    assert len(lines) >= 8  # the lines are found at all
    broken = [f"{page}: {match.group(0).strip()}" for page, match in lines
              if "ort-cffi-runtime install" not in match.group("rest")
              and not installs_a_runtime(set((match.group("extras") or "").split(",")) - {""}, "3.11")]
    assert broken == []
