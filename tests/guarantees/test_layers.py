"""The package's layers, read from its imports: no module imports one of a higher layer, applications stay on
the facade (never below it), the library never imports its command lines, and there is no import cycle.

The layers, lowest first (docs/layout.md draws the same map):

0. ``ort_cffi._native``: errors, files, the loader and its ELF reading and store, the declarations, the
   tables with the status chokepoint, the handles;
0.5 ``ort_cffi._backends``: what runs a training session, the training C API or ort_cffi's engine over the
   inference API (it keeps the same contract);
1. ``ort_cffi.capi`` (the raw layer's public face) and ``ort_cffi._facade`` less its sessions: the
   element-type catalogue, conversions, tensors, and the helpers the applications share;
2. ``ort_cffi._facade.sessions``: options, signatures, results, sessions, checkpoint, steps, training,
   environment;
3. ``ort_cffi`` itself, the facade's public face;
4. the applications: ``ort_cffi.artifacts``, ``ort_cffi.runtime``, ``ort_cffi.api`` and ``ort_cffi.onnxblock`` (on
   the artifacts' builder), then ``ort_cffi.training`` (ONNX Runtime's ``onnxruntime.training`` over the api, the
   artifacts and onnxblock), then ``ort_cffi.trainer`` (which uses the artifacts), then ``ort_cffi.flower`` (which
   uses the trainer);
5. ``ort_cffi.cli``, the commands, and the ``__main__`` modules that run them.

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a cycle dodged by importing
late is still a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

from conftest import ROOT

PACKAGE = ROOT / "ort_cffi"
# (module prefix, rank): the longest matching prefix gives a module its rank.
LAYERS: List[Tuple[str, float]] = [
    ("ort_cffi._native", 0),
    ("ort_cffi._backends", 0.5),
    ("ort_cffi.capi", 1),
    ("ort_cffi._facade", 1),
    ("ort_cffi._facade.sessions", 2),
    ("ort_cffi", 3),
    ("ort_cffi.artifacts", 4),
    ("ort_cffi.runtime", 4),
    ("ort_cffi.api", 4),
    ("ort_cffi.onnxblock", 4),
    ("ort_cffi.training", 4.2),
    ("ort_cffi.trainer", 4.5),
    ("ort_cffi.flower", 4.7),
    ("ort_cffi.cli", 5),
]
APPLICATIONS = 4  # from this rank up, a module may not import ort_cffi._native


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "ffi_abi.py"}


def rank(module: str) -> float:
    if module.rsplit(".", 1)[-1] == "__main__":
        return 5  # `python -m ort_cffi.X` runs a command
    best, found = "", None
    for prefix, value in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
            best, found = prefix, value
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def imports(module: str, path: Path, known: Set[str]) -> Set[str]:
    """The package's modules that ``module`` imports, anywhere in its text."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "ort_cffi")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "ort_cffi":
                continue
            for alias in node.names:  # `from ort_cffi.x import y`: y may be a module
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != module}


def import_graph() -> Dict[str, Set[str]]:
    known = modules()
    return {name: imports(name, path, set(known)) for name, path in known.items()}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def problems(graph: Dict[str, Set[str]]) -> List[str]:
    """What breaks the layering: upward imports, applications below the facade, cycles."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if rank(target) > rank(module):
                found.append(f"{module} (layer {rank(module)}) imports {target}, of a higher layer ({rank(target)})")
            elif rank(module) >= APPLICATIONS and rank(target) < 1:
                found.append(f"{module}, an application, imports {target}, below the facade")
    found += [f"import cycle: {' -> '.join(component)}" for component in cycles(graph)]
    return found


def test_no_module_imports_a_higher_layer_and_there_is_no_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the whole package was read
    assert not problems(graph), "\n".join(problems(graph))


def test_the_check_catches_an_upward_import_an_application_below_the_facade_and_a_cycle() -> None:
    graph = import_graph()
    upward = {**graph, "ort_cffi._native.handles": graph["ort_cffi._native.handles"] | {"ort_cffi._facade.tensors.tensor"}}
    assert any("ort_cffi._native.handles (layer 0) imports ort_cffi._facade.tensors.tensor" in p for p in problems(upward))
    below = {**graph, "ort_cffi.trainer.job": graph["ort_cffi.trainer.job"] | {"ort_cffi._native.tables"}}
    assert any("ort_cffi.trainer.job, an application, imports ort_cffi._native.tables" in p for p in problems(below))
    library_to_cli = {**graph, "ort_cffi.artifacts.generate": graph["ort_cffi.artifacts.generate"] | {"ort_cffi.cli.artifacts"}}
    assert any("imports ort_cffi.cli.artifacts" in p for p in problems(library_to_cli))
    circle = {**graph, "ort_cffi._facade.tensors.element_types": graph["ort_cffi._facade.tensors.element_types"]
              | {"ort_cffi._facade.tensors.conversions"}}
    assert any(p.startswith("import cycle:") and "element_types" in p for p in problems(circle))


def test_a_late_import_inside_a_function_counts(tmp_path: Path) -> None:
    """An import inside a function (how the old conversions/tensor_info cycle was dodged) is an edge too."""
    module = tmp_path / "late.py"
    module.write_text("def f():\n    from ort_cffi._facade.tensors import conversions\n    return conversions\n")
    assert imports("ort_cffi._facade.tensors.late", module, set(modules())) == {"ort_cffi._facade.tensors.conversions"}
