"""Every public name of the documented modules has a docstring: the API reference is generated from
them (docs/reference/), so a name without one would be a blank entry there. And the docstrings of the
Java-mapped classes say what the reference promises (see the rules below the first tests): each names
its Java counterpart, each method that returns an object says who owns it, and each method that raises
on a closed object says so.

Public: the names in a module's ``__all__`` (or, without one, those not starting with ``_``), and the
public methods, properties and nested classes of each public class, inherited ones from ort_cffi's
own bases included. Members inherited from Python itself (``enum``, ``Exception``) are not ours.
"""
from __future__ import annotations

import enum
import importlib
import inspect
import re
from typing import Any, Iterator, Tuple

import numpy as np
import pytest

from ort_cffi import OrtErrorCode

MODULES = ("ort_cffi", "ort_cffi.capi", "ort_cffi.api", "ort_cffi.artifacts", "ort_cffi.flower", "ort_cffi.runtime", "ort_cffi.trainer",
           "ort_cffi.onnxblock", "ort_cffi.onnxblock.blocks", "ort_cffi.onnxblock.loss", "ort_cffi.onnxblock.optim",
           "ort_cffi.training", "ort_cffi.training.artifacts")


def public_names(module: Any) -> "list[str]":
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", module.__name__) == module.__name__]
    return sorted(names)


def own_members(cls: type) -> Iterator[Tuple[str, Any]]:
    """Public members defined in ort_cffi (on the class or on an ort_cffi base)."""
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("ort_cffi"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property) or inspect.isclass(value):
                yield name, value


def documented(value: Any) -> bool:
    doc = value.__doc__ if not isinstance(value, property) else (value.fget.__doc__ if value.fget else None)
    return bool(doc and doc.strip())


def undocumented(module_name: str) -> "list[str]":
    module = importlib.import_module(module_name)
    missing = [] if documented(module) else [module_name]
    for name in public_names(module):
        value = getattr(module, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue  # data (``ffi``, ``API_VERSION``) is described in the module's docstring
        if not documented(value):
            missing.append(f"{module_name}.{name}")
        if inspect.isclass(value) and not issubclass(value, enum.Enum):
            for member, attribute in own_members(value):
                if not documented(attribute):
                    missing.append(f"{module_name}.{name}.{member}")
    return missing


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_has_a_docstring(module_name):
    missing = undocumented(module_name)
    assert not missing, f"{len(missing)} public names without a docstring:\n  " + "\n  ".join(missing)


def test_the_reference_pages_list_every_public_name():
    """The reference pages (docs/reference/*.md) render each public class of ``ort_cffi`` with a
    ``::: ort_cffi.Name`` directive: a name added to ``__all__`` and to no page would be missing."""
    import re
    from pathlib import Path

    import ort_cffi

    pages = (Path(__file__).resolve().parents[2] / "docs" / "reference").glob("*.md")
    listed = {name for page in pages for name in re.findall(r"^::: ort_cffi\.(\w+)$", page.read_text(), re.M)}
    listed -= {"capi", "api", "artifacts", "flower", "trainer", "onnxblock"}  # the modules with a page of their own
    assert sorted(set(ort_cffi.__all__) - listed) == []
    assert sorted(listed - set(ort_cffi.__all__)) == []


# --- What the docstrings of the Java-mapped classes say ---------------------------------------------
#
# The classes: those the Java map (docs/java-map.md) maps, its SECTIONS, and every class `ort_cffi`
# exports (`OrtException`'s subclasses included), with the classes nested in them. Their members: the
# public methods and properties defined on them or on an ort_cffi base (`own_members`). Three rules:
#
# 1. Java: the docstring of each class, method and property has a line starting `Java:` that names the
#    Java counterpart, or says "none" for an ort_cffi addition.
# 2. Ownership: each method (and each public function of `ort_cffi.capi`) whose return annotation is
#    anything but None, bool, int, float, str or an enum has a `Returns:` section that says who owns
#    what comes back (it uses the word "own": "a new numpy array the caller owns", "owned by the
#    Result", "nobody owns it").
# 3. Closed: each method that tests/guarantees/test_closed.py proves raises `OrtClosedException` on a closed
#    object lists `OrtClosedException` in its `Raises:` section.

JAVA_LINE = re.compile(r"^\s*Java: \S", re.M)
SECTION = re.compile(r"^(\s*)(\w[\w ]*):\s*$", re.M)
PLAIN_RETURNS = (type(None), bool, int, float, str)


def docstring(value: Any) -> str:
    if isinstance(value, property):
        value = value.fget
    return inspect.getdoc(value) or ""


def section(doc: str, title: str) -> "str | None":
    """The text of a Google-style section (`Returns:`, `Raises:`), or None when the docstring has none."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        match = SECTION.match(line)
        if match and match.group(2) == title:
            indent = len(match.group(1))
            body = []
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            return "\n".join(body)
    return None


def java_mapped_classes() -> "dict[str, type]":
    """Dotted name → class: the Java map's classes, `ort_cffi`'s exported classes, and their nested classes."""
    from test_java_map import SECTIONS  # the map's own list of the classes it maps

    import ort_cffi

    found: "dict[str, type]" = {}
    pending = list(SECTIONS.values()) + [getattr(ort_cffi, n) for n in ort_cffi.__all__ if inspect.isclass(getattr(ort_cffi, n))]
    while pending:
        cls = pending.pop()
        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in found:
            continue
        found[name] = cls
        pending += [value for _, value in own_members(cls) if inspect.isclass(value)]
    return dict(sorted(found.items()))


def class_members(cls: type) -> Iterator[Tuple[str, Any]]:
    """The class itself (as ``""``), then its public methods and properties (nested classes are checked as classes)."""
    yield "", cls
    for member, value in own_members(cls):
        if not inspect.isclass(value):
            yield member, value


def returns_plain(function: Any, owner: Any = None) -> bool:
    """Whether ``function`` is annotated to return None, a bool, an int, a float, a str or an enum member."""
    annotation = function.__annotations__["return"]  # every public function is annotated (mypy checks)
    while isinstance(annotation, str):  # postponed (``from __future__ import annotations``), maybe quoted too
        annotation = eval(annotation, {**function.__globals__, **vars(owner or object)})  # noqa: S307
    if annotation is None:
        return True
    return annotation in PLAIN_RETURNS or (inspect.isclass(annotation) and issubclass(annotation, enum.Enum))


def ownership_problem(name: str, function: Any, owner: Any = None) -> "str | None":
    if returns_plain(function, owner):
        return None
    returns = section(docstring(function), "Returns")
    if returns is None:
        return f"{name}: returns {function.__annotations__.get('return')} but has no Returns: section"
    if not re.search(r"\bown", returns, re.I):
        return f"{name}: its Returns: section does not say who owns the value (no 'own'): {returns.strip()[:80]!r}"
    return None


def missing_java_lines(classes: "dict[str, type]") -> "list[str]":
    return [
        f"{name}.{member}".rstrip(".")
        for name, cls in classes.items()
        for member, value in class_members(cls)
        if not JAVA_LINE.search(docstring(value))
    ]


def missing_ownership(classes: "dict[str, type]") -> "list[str]":
    problems = []
    for name, cls in classes.items():
        for member, value in class_members(cls):
            if inspect.isfunction(value):  # methods, static and class methods (own_members unwraps them)
                problem = ownership_problem(f"{name}.{member}", value, cls)
                if problem:
                    problems.append(problem)
    return problems


def missing_closed_raises(tables: "dict[type, set[str]]") -> "list[str]":
    """The methods of ``tables`` (class → method names) whose Raises: section does not list OrtClosedException."""
    missing = []
    for cls, methods in tables.items():
        for method in sorted(methods):
            raises = section(docstring(getattr(cls, method)), "Raises") or ""
            if not re.search(r"^\s*OrtClosedException:", raises, re.M):
                missing.append(f"{cls.__name__}.{method}")
    return missing


def test_every_java_mapped_class_and_member_names_its_java_counterpart():
    """Rule 1: every Java-mapped class, and each of its public methods and properties, has a line starting
    `Java:` that names the counterpart (or says "none" for an ort_cffi addition)."""
    missing = missing_java_lines(java_mapped_classes())
    assert not missing, f"{len(missing)} docstrings without a 'Java:' line:\n  " + "\n  ".join(missing)


def test_every_method_returning_an_object_says_who_owns_it():
    """Rule 2: a method of those classes, or a public function of `ort_cffi.capi`, whose return annotation
    is anything but None, bool, int, float, str or an enum, has a `Returns:` section using the word
    "own" (the caller owns it, the Result owns it, nobody owns it)."""
    problems = missing_ownership(java_mapped_classes())
    capi = importlib.import_module("ort_cffi.capi")
    for name in public_names(capi):
        value = getattr(capi, name)
        if inspect.isfunction(value):
            problem = ownership_problem(f"ort_cffi.capi.{name}", value)
            if problem:
                problems.append(problem)
    assert not problems, f"{len(problems)} problems:\n  " + "\n  ".join(problems)


def test_every_method_that_raises_when_closed_says_so():
    """Rule 3, grounded in tests/guarantees/test_closed.py: the methods it calls on closed objects (and proves raise)."""
    import ort_cffi
    from test_closed import RESULT_CALLS, TABLES

    tables = {cls: set(calls) for cls, calls in TABLES.items()}
    tables[ort_cffi.Result] = {call.split("(")[0] for call in RESULT_CALLS if hasattr(ort_cffi.Result, call.split("(")[0])}
    missing = missing_closed_raises(tables)
    assert not missing, f"{len(missing)} methods that raise on a closed object without saying so:\n  " + "\n  ".join(missing)


def test_the_docstring_rules_catch_a_bad_docstring():
    """The three checks above fail on docstrings that break them (so they cannot pass vacuously)."""

    class Terse:
        """A class without its Java counterpart."""

        __module__ = "ort_cffi.example"  # own_members looks at ort_cffi's classes only

        def toArray(self) -> np.ndarray:
            """The values (`GetTensorMutableData`).

            Java: `float[] toArray()`.
            """
            return np.zeros(1)

        def toCopy(self) -> np.ndarray:
            """A copy.

            Java: none (ort_cffi addition).

            Returns:
                A numpy array.
            """
            return np.zeros(1)

        def size(self) -> int:
            """The size, without a Java line."""
            return 1

        def kind(self) -> OrtErrorCode:
            """An enum member needs no Returns section.

            Java: `OrtErrorCode kind()`.

            Raises:
                OrtException: Not the closed one; a Raises section of another method mentions it:
                    OrtClosedException.
            """
            return OrtErrorCode.ORT_OK

    classes = {"Terse": Terse}
    assert missing_java_lines(classes) == ["Terse", "Terse.size"]
    problems = missing_ownership(classes)
    assert [p.split(":")[0] for p in problems] == ["Terse.toArray", "Terse.toCopy"]
    assert "no Returns: section" in problems[0] and "who owns" in problems[1]
    assert section(docstring(Terse.toCopy), "Returns").strip() == "A numpy array."
    assert missing_closed_raises({Terse: {"toArray", "kind"}}) == ["Terse.kind", "Terse.toArray"]
