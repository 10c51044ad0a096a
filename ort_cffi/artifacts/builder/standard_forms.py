"""The standard forms the builder writes into a training model where ONNX Runtime's training kernel is slower.

ort_cffi's builder differentiates a model as ONNX Runtime 1.19.2's generator does, into ``com.microsoft``
training operators (LSTMGrad, GatherGrad, ...). Its training engine (docs/guides/runtime.md) writes each of
them in standard ONNX operators when it makes a session, and for some operators that form runs faster than
the training build's own kernel, on the training build too: LSTMGrad and GRUGrad compute the gradient one
step and one batch row at a time, where the standard form makes the weight gradients batched matrix products
over the whole sequence; GatherGrad's kernel is slower than one ScatterND that adds.

Which operators get the standard form is a table, ``ort_cffi/data/standard_forms.json``: per operator, the
form (``standard`` or ``kernel``) with the measurement that chose it (each case's size, the ratio of the
standard form's time to the kernel's, the date, the machine, the runtime). ``scripts/measure_forms.py``
measures both forms of each operator on the training build and rewrites it; an operator the table does not
name keeps its kernel. Where the gain depends on a size (the recurrent gradients on the batch: at batch 1
the standard form's per-step operators cost as much as the kernel's work; a few operators on their count of
elements: a form of several operators loses on a few hundred elements), the entry says from which size
(``from_size``) and where the size is (``size_of``: the node's input, and its axis or, for none, all its
elements). A node whose size is smaller keeps the kernel. A dimension not known when the model is built (a
symbolic batch axis) counts as ``UNKNOWN_DIMENSION`` (16, the batch of the zoo's and most of the performance
guide's training runs): a recurrent gradient at a symbolic batch gets the standard form (batches under 4 are
rare in training, and there the loss is a few per cent), a ReluGrad over [batch, 512] keeps the kernel. The forms are the engine's own rules (``ort_cffi._facade.standard_forms``): one
implementation of each, covered by the engine's finite-difference and kernel-agreement tests.

The forms change the arithmetic's order, not what is computed: losses stay within 1e-5 relative of ONNX
Runtime's artifacts over 100 steps (tests/builder/test_standard_forms.py), no longer bit for bit.
``generate_artifacts(..., standard_forms=False)`` writes ONNX Runtime's kernels everywhere, for artifacts
bit-identical to its generator's.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import onnx

from ort_cffi._facade.standard_forms import lower_chosen_ops, lowered_op_types, without_weights

TABLE = Path(__file__).resolve().parents[2] / "data" / "standard_forms.json"
STANDARD, KERNEL = "standard", "kernel"
UNKNOWN_DIMENSION = 16  # what a dimension not known when the model is built counts as, against from_size
# The training operators, and the standard operators a rule writes in fewer or faster kernels (the forward
# SoftmaxCrossEntropyLoss: its 1.19.2 kernel takes 20 times its lean form over [512, 2000] logits)
FORMED_DOMAINS = frozenset({"com.microsoft", "", "ai.onnx"})


class StandardFormsTableError(ValueError):
    """The table of forms is not what ``scripts/measure_forms.py`` writes."""


@lru_cache(maxsize=None)
def table() -> Dict[str, Any]:
    """The table of forms, as read (``{"about": ..., "forms": {operator: entry}}``)."""
    try:
        found = json.loads(TABLE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StandardFormsTableError(f"the table of standard forms {TABLE} cannot be read: {exc}") from None
    forms = found.get("forms") if isinstance(found, dict) else None
    if not isinstance(forms, dict):
        raise StandardFormsTableError(f"the table of standard forms {TABLE} has no 'forms' mapping")
    lowerable = set(lowered_op_types())
    for op, entry in forms.items():
        if not isinstance(entry, dict) or entry.get("form") not in (STANDARD, KERNEL):
            raise StandardFormsTableError(f"{TABLE}: {op!r} has no form 'standard' or 'kernel': {entry!r}")
        if entry["form"] == STANDARD and op not in lowerable:
            raise StandardFormsTableError(f"{TABLE}: {op!r} is given the standard form, and no rule writes it")
        if entry.get("from_size") is not None and not isinstance(entry.get("size_of"), dict):
            raise StandardFormsTableError(f"{TABLE}: {op!r} gives from_size and not where the size is (size_of)")
    return found


def chosen_op_types() -> FrozenSet[str]:
    """The training operators the builder writes in their standard form."""
    return frozenset(op for op, entry in table()["forms"].items() if entry["form"] == STANDARD)


def _dims(model: onnx.ModelProto) -> Dict[str, List[Optional[int]]]:
    """The declared dimensions of the main graph's values (None where a dimension is symbolic or unknown)."""
    graph = model.graph
    found: Dict[str, List[Optional[int]]] = {t.name: [int(d) for d in t.dims] for t in graph.initializer}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor = value.type.tensor_type
        if value.type.HasField("tensor_type") and tensor.HasField("shape"):
            found[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return found


def _inferred_dims(model: onnx.ModelProto, names: FrozenSet[str]) -> Dict[str, List[Optional[int]]]:
    """The dimensions of ``names`` by ONNX shape inference over the main graph, where the model does not
    declare them (a forward value, such as the scores a loss reads, is not declared in a training model); an
    empty mapping where inference fails."""
    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model))
    except Exception:  # noqa: BLE001 - inference is a help here: a value it cannot type is a size not known
        return {}
    found: Dict[str, List[Optional[int]]] = {}
    for value in inferred.graph.value_info:
        tensor = value.type.tensor_type
        if value.name in names and value.type.HasField("tensor_type") and tensor.HasField("shape"):
            found[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return found


def _size_allows(entry: Dict[str, Any], node: onnx.NodeProto, dims: Dict[str, List[Optional[int]]]) -> bool:
    """Whether ``node``'s size lets the entry's standard form in: from ``from_size`` on, a dimension not known
    counting as ``UNKNOWN_DIMENSION``; a rank not known lets it in."""
    smallest = entry.get("from_size")
    if smallest is None:
        return True
    where = entry["size_of"]
    name = node.input[where["input"]] if where["input"] < len(node.input) else ""
    shape = dims.get(name)
    axis = where.get("axis")
    if shape is None or (axis is not None and axis >= len(shape)):
        return True
    sizes = [UNKNOWN_DIMENSION if d is None else d for d in shape]
    return (sizes[axis] if axis is not None else math.prod(sizes)) >= int(smallest)


def _size_input(entry: Dict[str, Any], node: onnx.NodeProto) -> str:
    """The name of the input whose size the entry's ``from_size`` is about ("" where none is)."""
    if entry.get("from_size") is None:
        return ""
    index = int(entry["size_of"]["input"])
    return node.input[index] if index < len(node.input) else ""


def _nodes(graph: onnx.GraphProto) -> List[onnx.NodeProto]:
    """The nodes of ``graph`` and of its subgraphs."""
    found = []
    for node in graph.node:
        found.append(node)
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                found.extend(_nodes(sub))
    return found


def _count(model: onnx.ModelProto, op_types: FrozenSet[str]) -> Dict[str, int]:
    counts: Dict[str, int] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            if node.op_type in op_types and node.domain in FORMED_DOMAINS:
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
            for attribute in node.attribute:
                for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    walk(sub)

    walk(model.graph)
    return counts


def apply_standard_forms(model: onnx.ModelProto) -> Tuple[onnx.ModelProto, Dict[str, int], List[str]]:
    """``model`` (a training model) with each node of a chosen operator written in its standard form. Returns
    the new model (``model`` itself where nothing was chosen), how many nodes of each operator were written,
    and the chosen operators left as kernels because the rule refused a node of theirs (an attribute it does
    not know): those keep ONNX Runtime's kernel, which runs them."""
    chosen = chosen_op_types()
    present = _count(model, chosen)
    if not present:
        return model, {}, []
    forms, dims = table()["forms"], _dims(model)
    undeclared = frozenset(_size_input(forms[node.op_type], node) for node in _nodes(model.graph)
                           if node.op_type in present and node.domain in FORMED_DOMAINS) - set(dims) - {""}
    if undeclared:
        dims.update(_inferred_dims(model, undeclared))
    lowered, kept = lower_chosen_ops(model, frozenset(present),
                                     lambda node: _size_allows(forms[node.op_type], node, dims))
    left = _count(lowered, frozenset(present))
    written = {op: n - left.get(op, 0) for op, n in present.items() if n - left.get(op, 0)}
    return lowered, written, kept
