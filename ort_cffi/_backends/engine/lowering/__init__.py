"""The lowering of training operators to standard ONNX operators, done once when a session is created.

Training artifacts (ort_cffi's builder's, or ONNX Runtime 1.19.2's generator's) hold operators that only a
training build has kernels for: ``com.microsoft`` gradients (ConvGrad, SoftmaxCrossEntropyLossGrad, ...) and a
few default-domain ones that are not in the ONNX standard (MaxPoolGrad, AveragePoolGrad). ``lower_training_ops``
writes each as standard operators valid at the model's opset, or as inference contrib operators every build
has (``registry.CONTRIB_TARGETS``), so that a current inference build runs the model. The engine itself runs
``KEPT_FOR_THE_ENGINE`` (gradient accumulation and the optimizers): they stay.

The rules are in ``registry.RULES`` (``registry`` says what a rule is), one file per family beside it. An
operator with no rule, or a node its rule cannot write, is refused by name before anything runs
(``UnsupportedTrainingOpError``).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import AbstractSet, Callable, Dict, Iterator, List, Optional, Set, Tuple

import onnx
from onnx import helper

from ort_cffi._backends.engine.lowering.registry import (
    CONTRIB_TARGETS, MICROSOFT, RESTATED_STANDARD, RULES, RUNTIME_DEFAULT_DOMAIN, Emitter, LoweringError,
    UnsupportedTrainingOpError, infer_types)
from ort_cffi._backends.engine.lowering.shape_targets import constant_reshape_targets

# run by the engine itself on its own state, not by the session's graph
KEPT_FOR_THE_ENGINE = frozenset({"InPlaceAccumulatorV2", "AdamWOptimizer", "SGDOptimizerV2"})

# importing a family's module registers its rules: every module beside this one is a family
for _family in pkgutil.iter_modules(__path__):
    if _family.name not in ("registry", "shape_targets"):
        importlib.import_module(f"{__name__}.{_family.name}")

__all__ = ["KEPT_FOR_THE_ENGINE", "LoweringError", "UnsupportedTrainingOpError", "lower_chosen_ops",
           "lower_training_ops", "lowered_op_types", "needs_lowering", "unlowerable_ops"]


def default_opset(model: onnx.ModelProto) -> int:
    """The version of the model's default-domain opset import."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def _is_standard(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return True


def needs_lowering(node: onnx.NodeProto, opset: int) -> bool:
    """Whether ``node`` is a training operator the engine must write in standard operators: a
    ``com.microsoft`` operator other than the inference ones every build has and those the engine keeps, or a
    default-domain operator that the ONNX standard lacks at ``opset`` (MaxPoolGrad, AveragePoolGrad), or a standard
    one that inference builds run as its function and a rule writes leaner (``RESTATED_STANDARD``)."""
    if node.domain == MICROSOFT:
        return node.op_type not in KEPT_FOR_THE_ENGINE and node.op_type not in CONTRIB_TARGETS
    if node.domain in ("", "ai.onnx"):
        if node.op_type in RESTATED_STANDARD:
            return True
        return node.op_type not in RUNTIME_DEFAULT_DOMAIN and not _is_standard(node.op_type, opset)
    return False


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for sub in _subgraphs(node):
            yield from _nodes(sub)


def unlowerable_ops(model: onnx.ModelProto) -> List[str]:
    """The training operator types in ``model`` (subgraphs included) that have no lowering rule, sorted."""
    opset = default_opset(model)
    return sorted({n.op_type for n in _nodes(model.graph) if needs_lowering(n, opset) and n.op_type not in RULES})


def _names(graph: onnx.GraphProto, taken: Set[str]) -> None:
    for collection in (graph.input, graph.output, graph.value_info):
        taken.update(v.name for v in collection)
    taken.update(t.name for t in graph.initializer)
    for node in graph.node:
        taken.update(node.input)
        taken.update(node.output)
        if node.name:
            taken.add(node.name)
        for sub in _subgraphs(node):
            _names(sub, taken)


def _types(graph: onnx.GraphProto, types: Dict[str, onnx.TypeProto], data: Dict[str, onnx.TensorProto]) -> None:
    for collection in (graph.input, graph.output, graph.value_info):
        for value in collection:
            if value.type.WhichOneof("value"):
                types.setdefault(value.name, value.type)
    for tensor in graph.initializer:
        data[tensor.name] = tensor
        types.setdefault(tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    for node in graph.node:
        for sub in _subgraphs(node):
            _types(sub, types, data)


def _known(model: onnx.ModelProto) -> Tuple[Dict[str, onnx.TypeProto], Dict[str, onnx.TensorProto]]:
    """Types of values (onnx's shape inference where it can tell) and the values known before run time."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model onnx cannot infer (too large, an op it rejects): the declared types still count
        inferred = model
    types: Dict[str, onnx.TypeProto] = {}
    data: Dict[str, onnx.TensorProto] = {}
    _types(inferred.graph, types, data)
    return types, data


NodeFilter = Callable[[onnx.NodeProto], bool]


class _Lowering:
    def __init__(self, model: onnx.ModelProto, only: Optional[NodeFilter] = None, intra_op_threads: int = 1):
        self.opset = default_opset(model)
        self.intra_op_threads = intra_op_threads
        self.only = only  # which training operators' nodes to lower (None: every one)
        self.taken: Set[str] = set()
        _names(model.graph, self.taken)
        self.types, self.data = _known(model)
        self.producers: Dict[str, onnx.NodeProto] = {}
        self.refused: List[Tuple[str, LoweringError]] = []

    def graph(self, graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for out in node.output:
                if out:
                    self.producers[out] = node
        lowered: List[onnx.NodeProto] = []
        for node in graph.node:
            for sub in _subgraphs(node):
                self.graph(sub)
            if not needs_lowering(node, self.opset) or (self.only is not None and not self.only(node)):
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 \
                        and node.attribute[0].name == "value":
                    self.data[node.output[0]] = node.attribute[0].t
                infer_types(node, self.opset, self.types, self.data)
                lowered.append(node)
                continue
            lowered.extend(self.node(node))
        del graph.node[:]
        graph.node.extend(lowered)

    def node(self, node: onnx.NodeProto) -> List[onnx.NodeProto]:
        label = node.name or f"{node.op_type}_{node.output[0] if node.output else ''}"
        emit = Emitter(self.opset, self.taken, self.types, label=label, data=self.data, producers=self.producers)
        emit.intra_op_threads = self.intra_op_threads
        try:
            RULES[node.op_type](node, emit)
        except LoweringError as refused:
            self.refused.append((node.op_type, refused))
            return [node]
        made = {out for n in emit.nodes for out in n.output}
        missing = [out for out in node.output if out and out not in made]
        if missing:  # a rule's own mistake: say so rather than run a graph with a value nobody computes
            raise RuntimeError(f"the lowering of {node.op_type} node {label!r} left outputs {missing} uncomputed")
        return emit.nodes


# Raising the opset import to what a lowering needs keeps every node's meaning only where no operator of the
# model changed meaning in between. From opset 13 on, the changes up to 16 add types, optional inputs and
# attributes whose defaults keep the old meaning, but for two: RoiAlign's default coordinate mode (16), and
# BatchNormalization's outputs (14: no saved statistics). Below 13, Softmax, Squeeze, Split and the reductions
# changed: no raise from there.
RAISE_FROM, RAISE_TO = 13, 16


def _can_raise(model: onnx.ModelProto, opset: int, target: int) -> bool:
    if opset < RAISE_FROM or target > RAISE_TO:
        return False
    for node in _nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "RoiAlign" and opset < 16:
            return False
        if node.op_type == "BatchNormalization" and opset < 14 and len([o for o in node.output if o]) > 1:
            return False
    return True


def _lowered(model: onnx.ModelProto, only: Optional[NodeFilter] = None,
             intra_op_threads: int = 1) -> Tuple[onnx.ModelProto, List[Tuple[str, LoweringError]]]:
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    lowering = _Lowering(lowered, only, intra_op_threads)
    lowering.graph(lowered.graph)
    return lowered, lowering.refused


def lower_training_ops(model: onnx.ModelProto, intra_op_threads: int = 1) -> onnx.ModelProto:
    """A new model in which every training operator of ``model`` (subgraphs of Loop, If and Scan included) is
    written in standard operators, in the forms measured fastest for sessions of ``intra_op_threads`` threads;
    ``KEPT_FOR_THE_ENGINE`` stay. ``model`` is not changed. Where a lowering
    needs a newer opset than the model imports (a scatter that adds: 16), the import is raised if no operator
    of the model changes meaning on the way (``_can_raise``). Raises ``UnsupportedTrainingOpError`` naming every
    operator that has no lowering or whose lowering refused a node."""
    missing = unlowerable_ops(model)
    if missing:
        raise UnsupportedTrainingOpError(missing)
    lowered, refused = _lowered(model, None, intra_op_threads)
    needed = [error.needs_opset for _, error in refused]
    opset = default_opset(model)
    if refused and all(needed) and _can_raise(model, opset, max(n for n in needed if n)):
        raised = onnx.ModelProto()
        raised.CopyFrom(model)
        for entry in raised.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = RAISE_TO
        lowered, refused = _lowered(raised, None, intra_op_threads)
    if refused:
        raise UnsupportedTrainingOpError([op for op, _ in refused], [str(error) for _, error in refused])
    _import_contrib_as_used(lowered)
    constant_reshape_targets(lowered)
    return lowered


def lowered_op_types() -> List[str]:
    """The operator types that have a lowering rule (training operators, and ``RESTATED_STANDARD``), sorted."""
    return sorted(RULES)


def lower_chosen_ops(model: onnx.ModelProto, op_types: AbstractSet[str],
                     where: Optional[NodeFilter] = None) -> Tuple[onnx.ModelProto, List[str]]:
    """A new model in which the nodes of ``model`` whose operator type is in ``op_types`` (subgraphs included),
    and for which ``where(node)`` holds where it is given, are written in standard operators, each by the rule
    the engine lowers it with; every other node stays as it is, to run on the training build's kernels.
    ``model`` is not changed. A node its rule refuses stays as it is too (where a newer opset is all it lacks,
    the import is raised if that is safe, as ``lower_training_ops`` does). Returns the new model and the
    operator types left as they were, sorted."""
    types = frozenset(op for op in op_types if op in RULES)

    def chosen(node: onnx.NodeProto) -> bool:
        return node.op_type in types and (where is None or where(node))

    lowered, refused = _lowered(model, chosen)
    needed = [error.needs_opset for _, error in refused]
    opset = default_opset(model)
    if refused and any(needed) and _can_raise(model, opset, max(n for n in needed if n)):
        raised = onnx.ModelProto()
        raised.CopyFrom(model)
        for entry in raised.opset_import:
            if entry.domain in ("", "ai.onnx"):
                entry.version = RAISE_TO
        lowered, refused = _lowered(raised, chosen)
    _import_contrib_as_used(lowered)
    return lowered, sorted({op for op, _ in refused})


def _import_contrib_as_used(lowered: onnx.ModelProto) -> None:
    """The com.microsoft opset imported where a node of that domain is left or was written, else not."""
    uses_contrib = any(n.domain == MICROSOFT for n in _nodes(lowered.graph))
    imports_contrib = any(entry.domain == MICROSOFT for entry in lowered.opset_import)
    if uses_contrib and not imports_contrib:  # a lowering wrote an inference contrib operator (FusedMatMul)
        lowered.opset_import.append(helper.make_opsetid(MICROSOFT, 1))
    elif imports_contrib and not uses_contrib:
        kept = [entry for entry in lowered.opset_import if entry.domain != MICROSOFT]
        del lowered.opset_import[:]
        lowered.opset_import.extend(kept)
