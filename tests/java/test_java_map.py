"""The Java map (docs/java-map.md) checked against the code.

Each ``### `Heading` `` section of the map is a table ``| Java | Python | Difference |`` for one
class, named in SECTIONS. For every section:

- every code span of the Python column that is a name (``trainStep(inputs)``,
  ``OrtEnvironment.getEnvironment()``, ``closed``) must exist: the dotted name is looked up on the
  section's class (also among the attributes its methods set on ``self``), else in ``ort_cffi``,
  else among Python's built-ins (``len(result)``). Spans that are not names (``result[0]``,
  ``name in names``) and Python keywords (``with``) are prose;
- every public method of the class (no leading underscore, not a dunder, defined on the class or on
  one of its bases in ort_cffi), every property and every enum member must appear there.

Also: a section of the map that is not listed here fails (nothing escapes the check), and so does a
name of ``ort_cffi.__all__`` that the map never mentions.
"""
from __future__ import annotations

import ast
import builtins
import enum
import functools
import inspect
import keyword
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from conftest import ROOT

import ort_cffi
from ort_cffi._facade.sessions.options import ExecutionMode, OptLevel
from ort_cffi._facade.sessions.results import Entry, NameSet
from ort_cffi._facade.tensors.optional import Optional_

MAP = ROOT / "docs" / "java-map.md"

# Section heading of the map (Java's name) -> the ort_cffi class it maps.
SECTIONS: Dict[str, type] = {
    "OrtTrainingSession": ort_cffi.OrtTrainingSession,
    "OrtTrainingSession.OrtCheckpointState": ort_cffi.OrtCheckpointState,
    "OrtEnvironment": ort_cffi.OrtEnvironment,
    "OrtLoggingLevel": ort_cffi.OrtLoggingLevel,
    "OrtSession": ort_cffi.OrtSession,
    "OrtSession.Result": ort_cffi.Result,
    "OrtSession.RunOptions": ort_cffi.RunOptions,
    "OrtSession.SessionOptions": ort_cffi.SessionOptions,
    "OrtSession.SessionOptions.OptLevel": OptLevel,
    "OrtSession.SessionOptions.ExecutionMode": ExecutionMode,
    "NodeInfo": ort_cffi.NodeInfo,
    "OnnxModelMetadata": ort_cffi.OnnxModelMetadata,
    "Set<String>": NameSet,
    "Optional<OnnxValue>": Optional_,
    "Map.Entry<String, OnnxValue>": Entry,
    "OnnxValue": ort_cffi.OnnxValue,
    "OnnxTensorLike": ort_cffi.OnnxTensorLike,
    "OnnxValue.OnnxValueType": ort_cffi.OnnxValueType,
    "OrtAllocator": ort_cffi.OrtAllocator,
    "OrtException": ort_cffi.OrtException,
    "OrtException.OrtErrorCode": ort_cffi.OrtErrorCode,
}

# The Tensors half of the map, merged: these sections are checked like the others.
SECTIONS.update({
    "OnnxTensor": ort_cffi.OnnxTensor,
    "TensorInfo": ort_cffi.TensorInfo,
    "TensorInfo.OnnxTensorType": ort_cffi.OnnxTensorType,
    "OnnxJavaType": ort_cffi.OnnxJavaType,
    "platform.Fp16Conversions": ort_cffi.Fp16Conversions,
})
TENSOR_SECTIONS: Dict[str, str] = {}  # sections accepted unchecked: none any more

HEADING = re.compile(r"^(#{2,3}) (.*?)\s*$")
CLASS_HEADING = re.compile(r"^`([^`]+)`$")
CODE_SPAN = re.compile(r"`([^`]+)`")
NAME = re.compile(r"^(?P<path>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\(.*\))?$")


@dataclass
class Row:
    line: int
    java: str
    python: str
    difference: str


def split_cells(line: str) -> List[str]:
    """The cells of a Markdown table row (a `|` inside a code span does not split)."""
    cells, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append(current.strip())
    return cells


def parse(text: str) -> Tuple[Dict[str, List[Row]], List[str]]:
    """Section heading -> its table rows, and the problems of form (a row without three cells)."""
    sections: Dict[str, List[Row]] = {}
    problems: List[str] = []
    current: Optional[str] = None
    for number, line in enumerate(text.splitlines(), 1):
        heading = HEADING.match(line)
        if heading:
            current = None
            if heading.group(1) == "###":
                name = CLASS_HEADING.match(heading.group(2))
                if not name:
                    problems.append(f"line {number}: a ### heading must be a class name in backticks: {line!r}")
                    continue
                current = name.group(1)
                if current in sections:
                    problems.append(f"line {number}: section {current!r} appears twice")
                sections[current] = []
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = split_cells(line)
        if cells == ["Java", "Python", "Difference"] or set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != 3 or not cells[0] or not cells[1]:
            problems.append(f"line {number}: a row needs a Java cell, a Python cell and a Difference cell: {line!r}")
            continue
        sections[current].append(Row(number, *cells))
    return sections, problems


@functools.lru_cache(maxsize=None)
def instance_attributes(cls: type) -> Set[str]:
    """Names the methods of ``cls`` and of its ort_cffi bases set on ``self`` (``self.code = ...``)."""
    names: Set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ort_cffi"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    names.add(target.attr)
    return names


def public_members(cls: type) -> Set[str]:
    """What the map must show of ``cls``: public methods and properties of it and its ort_cffi bases,
    and its enum members."""
    names: Set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ort_cffi"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property)):
                names.add(name)
    if isinstance(cls, enum.EnumMeta):
        names |= set(cls.__members__)
    return names


_INSTANCE_ATTRIBUTE = object()


def resolve(path: str, cls: type) -> Optional[Tuple[Any, str]]:
    """(the object that owns the last name, the last name) of a dotted ``path`` looked up on ``cls``,
    then in ort_cffi, then among the built-ins; None if it does not exist."""
    parts = path.split(".")
    for start in (cls, ort_cffi, builtins):
        if hasattr(start, parts[0]) or (isinstance(start, type) and parts[0] in instance_attributes(start)):
            break
    else:
        return None
    owner, obj = None, start
    for index, part in enumerate(parts):
        if obj is _INSTANCE_ATTRIBUTE:
            return None  # no attribute of an attribute set in __init__ is looked at
        owner = obj
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, type) and part in instance_attributes(obj):
            obj = _INSTANCE_ATTRIBUTE
        else:
            return None
    return owner, parts[-1]


def problems(text: str) -> List[str]:
    """Everything wrong between the map's text and the code, as messages (none: the map is right)."""
    sections, found = parse(text)
    mentioned: Set[str] = set()
    for heading in sections:
        if heading not in SECTIONS and heading not in TENSOR_SECTIONS:
            found.append(f"section {heading!r} maps no class: add it to SECTIONS in tests/java/test_java_map.py")
    for heading, cls in SECTIONS.items():
        if heading not in sections:
            found.append(f"section {heading!r} ({cls.__name__}) is missing from the map")
            continue
        covered: Set[str] = set()
        for row in sections[heading]:
            for span in CODE_SPAN.findall(row.python):
                name = NAME.match(span.strip())
                if not name or keyword.iskeyword(name.group("path").split(".")[0]):
                    continue  # an expression or a keyword written as prose: result[0], name in names, with
                resolved = resolve(name.group("path"), cls)
                if resolved is None:
                    found.append(f"line {row.line}: {heading}: `{span}` does not exist in ort_cffi")
                    continue
                owner, last = resolved
                mentioned.add(name.group("path").split(".")[0])
                if owner is cls:
                    covered.add(last)
        for member in sorted(public_members(cls) - covered):
            found.append(f"{heading}: {cls.__name__}.{member} has no row in the map")
    for name in ort_cffi.__all__:
        cls = getattr(ort_cffi, name)
        if cls in SECTIONS.values() or name in TENSOR_SECTIONS.values() or name in mentioned:
            continue
        found.append(f"ort_cffi.{name} is public but the map never mentions it")
    return found


def test_the_map_matches_the_code() -> None:
    found = problems(MAP.read_text())
    assert not found, "docs/java-map.md does not match ort_cffi:\n  " + "\n  ".join(found)


def test_the_map_shows_every_java_class_of_the_issue() -> None:
    """The Java binding has these classes; each has its own section (the tensor ones come from the
    Tensors half of the map)."""
    required = {"OrtTrainingSession", "OrtTrainingSession.OrtCheckpointState", "OrtEnvironment", "OrtSession.Result",
                "OrtSession.RunOptions", "OrtSession.SessionOptions", "OrtException"}
    sections, _ = parse(MAP.read_text())
    assert required <= set(sections)
    assert "OnnxTensor" in TENSOR_SECTIONS or "OnnxTensor" in SECTIONS


def _without_line(text: str, fragment: str) -> str:
    lines = text.splitlines()
    matching = [i for i, line in enumerate(lines) if fragment in line]
    assert len(matching) == 1, f"{fragment!r} is on {len(matching)} lines of the map"
    del lines[matching[0]]
    return "\n".join(lines)


def test_the_check_fails_when_the_map_is_wrong() -> None:
    """The check can fail: a row removed, a name misspelled, a section missing or unknown, an
    exported name never mentioned, each is reported."""
    text = MAP.read_text()
    assert not problems(text)

    removed = _without_line(text, "| `void lazyResetGrad()` |")
    assert "OrtTrainingSession: OrtTrainingSession.lazyResetGrad has no row in the map" in problems(removed)

    misspelled = text.replace("| `getLearningRate()` |", "| `getLearningRte()` |")
    assert any("`getLearningRte()` does not exist" in p for p in problems(misspelled))

    wrong_class = text.replace("`OrtEnvironment.getEnvironment(name)`", "`OrtSession.getEnvironment(name)`")
    assert any("`OrtSession.getEnvironment(name)` does not exist" in p for p in problems(wrong_class))

    members = text.replace("`OrtErrorCode.ORT_EP_FAIL`", "`OrtErrorCode.ORT_FAIL`")
    assert "OrtException.OrtErrorCode: OrtErrorCode.ORT_EP_FAIL has no row in the map" in problems(members)

    no_section = text.replace("### `NodeInfo`", "### `NodeInformation`")
    found = problems(no_section)
    assert "section 'NodeInfo' (NodeInfo) is missing from the map" in found
    assert any("section 'NodeInformation' maps no class" in p for p in found)

    broken_row = text.replace("| `int size()` | `size()`, or `len(result)` | |", "| `int size()` | `size()` |")
    assert any("a row needs a Java cell" in p for p in problems(broken_row))
