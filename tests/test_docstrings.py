"""Every public name of the documented modules has a docstring: the API reference is generated from
them (docs/reference/), so a name without one would be a blank entry there.

Public: the names in a module's ``__all__`` (or, without one, those not starting with ``_``), and the
public methods, properties and nested classes of each public class, inherited ones from ort_cffi's
own bases included. Members inherited from Python itself (``enum``, ``Exception``) are not ours.
"""
from __future__ import annotations

import enum
import importlib
import inspect
from typing import Any, Iterator, Tuple

import pytest

MODULES = ("ort_cffi", "ort_cffi.capi", "ort_cffi.artifacts", "ort_cffi.flower", "ort_cffi.runtime")


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

    pages = (Path(__file__).resolve().parent.parent / "docs" / "reference").glob("*.md")
    listed = {name for page in pages for name in re.findall(r"^::: ort_cffi\.(\w+)$", page.read_text(), re.M)}
    listed -= {"capi", "artifacts", "flower"}  # the modules with a page of their own
    assert sorted(set(ort_cffi.__all__) - listed) == []
    assert sorted(listed - set(ort_cffi.__all__)) == []
