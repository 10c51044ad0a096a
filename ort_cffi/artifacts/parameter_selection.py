"""Which parameters train: the request's names and glob patterns resolved against the model's initializers.

``resolve`` takes ``requires_grad``, ``frozen_params`` and ``frozen_rows`` names as ONNX Runtime's generator
takes them: an initializer's name, or the torch name its exporter renamed it from (module_names.py), or a
glob pattern of either; ``skipped_order`` orders the notes of what it passed over. ``frozen_rows_of`` checks
the rows of the ``frozen_rows`` option against the trained parameters. ``constants_as_parameters`` makes
the floating-point Constant nodes the patterns name initializers, so that they can be trained, and
``no_gradient_reason`` (with ``consumers``) says, before generation, why no gradient can reach an
initializer that feeds only inputs no gradient flows through.

Python 3.8 syntax and the standard library at import time (``onnx`` comes as an argument), as the other
modules the artifacts child loads by file location (graph_facts.py says why).
"""
import fnmatch
import importlib
import sys
from typing import Dict, List, Tuple

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
Refusal = graph_facts.sibling("refusal").Refusal
FLOAT_TYPES = graph_facts.FLOAT_TYPES
type_name = graph_facts.type_name

# Inputs (by position) of common operators through which no gradient flows: a floating-point initializer
# feeding only these (a dropout ratio, batch-norm running statistics, clip bounds) is no parameter.
NO_GRADIENT_INPUTS = {
    "Dropout": {1, 2},
    "BatchNormalization": {3, 4},
    "Clip": {1, 2},
    "Resize": {1, 2, 3},
    "Upsample": {1},
    "Pad": {1, 2, 3},
}
GLOB_CHARACTERS = "*?["


def consumers(graph):
    """name -> [(op_type, node name, input position)] for the top-level graph; subgraph uses count as
    differentiable (position -1)."""
    uses: Dict[str, List[Tuple[str, str, int]]] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            uses.setdefault(name, []).append((node.op_type, node.name, position))
        for attribute in node.attribute:
            subgraphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
            for sub in subgraphs:
                for inner in graph_facts.graph_and_subgraphs(sub):
                    for inner_node in inner.node:
                        for name in inner_node.input:
                            uses.setdefault(name, []).append((node.op_type, node.name, -1))
    return uses


def no_gradient_reason(name, uses, outputs):
    """Why no gradient can reach initializer ``name``, or None when one may."""
    if name in outputs:
        return None
    found = uses.get(name, [])
    if not found:
        return "no node of the model uses it"
    if all(position in NO_GRADIENT_INPUTS.get(op, ()) for op, _, position in found):
        op, node, position = found[0]
        where = "{} node {!r}".format(op, node) if node else "a {} node".format(op)
        return "it only feeds input {} of {}, through which no gradient flows".format(position, where)
    return None


def float_constants(model):
    """The main graph's Constant nodes that hold a floating-point tensor, by output name."""
    found = {}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in graph_facts.DEFAULT_DOMAINS:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.t.data_type in FLOAT_TYPES:
                    found[node.output[0]] = node
    return found


def constants_as_parameters(model, patterns):
    """Make the floating-point Constant nodes that ``patterns`` name (exactly or as globs) initializers of
    the same name: some exporters write weights as Constant nodes, which only initializers can replace as
    parameters. Returns the notes of what changed."""
    constants = float_constants(model)
    chosen = [name for name in constants if any(fnmatch.fnmatchcase(name, p) for p in patterns or ())]
    if not chosen:
        return []
    for name in chosen:
        tensor = next(a.t for a in constants[name].attribute if a.name == "value")
        tensor.name = name
        model.graph.initializer.append(tensor)
    kept = [node for node in model.graph.node if not (node.op_type == "Constant" and node.output[0] in chosen)]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return ["Constant {} made {} (requires_grad)".format(", ".join(repr(n) for n in chosen),
                                                         "parameters" if len(chosen) > 1 else "a parameter")]


def resolve(onnx, patterns, what, initializers, module_names, skipped=None):
    """The floating-point initializers ``patterns`` select, as {name: exact}, where exact tells a plain
    name from a glob match. A pattern matches an initializer's name or the torch name its exporter renamed
    it from (``module_names``: initializer -> torch name). Refuses a pattern that matches nothing and a name
    or pattern that selects only tensors that are not floating-point.

    ``skipped`` (a list), for requires_grad and frozen_params: names are taken as ONNX Runtime's generator
    takes them, and what is passed over is said in ``skipped``: the name of an initializer that is not
    floating-point (code that lists every initializer lists the exporter's int64 shapes too) and, for
    frozen_params, a name or pattern that matches no initializer (a buffer the model computes) are passed
    over; a plain name counts as a pattern's match, so that one no gradient reaches (a dropout ratio) is
    left out rather than refused."""
    floats = [i.name for i in initializers if i.data_type in FLOAT_TYPES]
    by_name = dict((i.name, i) for i in initializers)
    shown = ["{} ({})".format(name, module_names[name]) if name in module_names else name for name in floats]
    listed = ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "") if shown else "none"
    chosen = {}
    for pattern in patterns:
        if not any(c in pattern for c in GLOB_CHARACTERS):
            owners = [name for name in floats if module_names.get(name) == pattern] if pattern not in by_name else []
            for name in owners:  # a torch name: the tensors made from that parameter
                chosen[name] = skipped is None
            if owners:
                continue
            initializer = by_name.get(pattern)
            if initializer is None and skipped is not None and what == "frozen_params":
                skipped.append((what, pattern, "no initializer of the model (a value it computes); nothing to freeze"))
                continue
            if initializer is not None and skipped is not None and initializer.data_type not in FLOAT_TYPES:
                skipped.append((what, "{} ({})".format(pattern, type_name(onnx, initializer.data_type)),
                                "not floating-point; kept as constants of the graphs"))
                continue
            if initializer is None:
                raise Refusal("pattern", "{} names {!r}, but the model has no initializer of that name (its "
                                         "floating-point initializers: {})".format(what, pattern, listed))
            if initializer.data_type not in FLOAT_TYPES:
                raise Refusal("dtype", "{} names {!r}, a tensor of type {}: only floating-point parameters can be "
                                       "trained or frozen".format(what, pattern, type_name(onnx, initializer.data_type)))
            chosen[pattern] = skipped is None
            continue
        matched = [i for i in initializers if fnmatch.fnmatchcase(i.name, pattern)
                   or (i.name in module_names and fnmatch.fnmatchcase(module_names[i.name], pattern))]
        if not matched and skipped is not None and what == "frozen_params":
            skipped.append((what, pattern, "a pattern that matches no initializer of the model; nothing to freeze"))
            continue
        if not matched:
            raise Refusal("pattern", "{} pattern {!r} matches no initializer of the model (its floating-point "
                                     "initializers: {})".format(what, pattern, listed))
        matched_floats = [i.name for i in matched if i.data_type in FLOAT_TYPES]
        if not matched_floats:
            kinds = ", ".join("{} ({})".format(i.name, type_name(onnx, i.data_type)) for i in matched[:4])
            raise Refusal("dtype", "{} pattern {!r} matches only tensors that are not floating-point: {}; only "
                                   "floating-point parameters can be trained or frozen".format(what, pattern, kinds))
        for name in matched_floats:
            chosen.setdefault(name, False)
    return chosen


def skipped_order(skipped):
    """The sort key that notes what ``resolve`` passed over in the order it was met."""
    first = {}  # type: Dict[Tuple[str, str], int]
    for index, (option, _, reason) in enumerate(skipped):
        first.setdefault((option, reason), index)
    return lambda key: first[key]


def frozen_rows_of(onnx, given, initializers, module_names, wanted):
    """{parameter: sorted rows} from the ``frozen_rows`` option ({name, torch name or pattern: rows}): every
    parameter it selects must be trained, and every row lie on that parameter's first axis."""
    by_name = dict((i.name, i) for i in initializers)
    found = {}  # type: Dict[str, List[int]]
    for name, rows in sorted(given.items()):
        for parameter in resolve(onnx, [name], "frozen_rows", initializers, module_names):
            if parameter not in wanted:
                raise Refusal("options", "frozen_rows names {!r}, which is not trained here: rows of a trained "
                                         "parameter only".format(parameter))
            dims = list(by_name[parameter].dims)
            outside = [row for row in rows if not dims or not 0 <= row < dims[0]]
            if outside:
                raise Refusal("options", "frozen_rows of {!r} (shape {}) are indices along its first axis, 0 to {}: "
                                         "{} is not one".format(parameter, dims, dims[0] - 1 if dims else "none",
                                                                outside[0]))
            chosen = set(rows)
            if parameter in found:  # selected by two names or patterns
                chosen.update(found[parameter])
            found[parameter] = sorted(chosen)
    return found
