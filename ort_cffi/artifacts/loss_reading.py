"""What the cross-entropy loss reads, fitted to ONNX Runtime's ``SoftmaxCrossEntropyLoss`` before generation.

ONNX Runtime's loss block takes the scores with the classes on axis 1 ([N, C] or [N, C, d1, ...]) and makes
the labels input from the scores' shape less its LAST axis, and it applies its own softmax. Models as
exported often differ, and ``fit_cross_entropy`` fits the graph, on the loss's side only:

- ``zipmap``: skl2onnx's default classifier output is a ZipMap (``ai.onnx.ml``), a sequence of maps that
  cannot take a loss: the loss reads ZipMap's input, the probabilities tensor.
- ``logits``: scores computed by Softmax or LogSoftmax over the class axis are probabilities; a second
  softmax would flatten them: the loss reads that node's input, the logits.
- ``class_axis``: scores of rank 3 and more with the classes last (per token, [N, T, V]) are transposed
  to [N, V, T] for the loss; with the classes on axis 1 (per pixel, [N, C, H, W]) they stay. Either way,
  the labels input gets the shape the user has: the scores' shape less the class axis ([N, T], [N, H, W]).

Which axis holds the classes, for rank 3 and more: the operator that computes the scores says it, past
elementwise operators. Conv, ConvTranspose, pooling and the normalizations over channels write channels
first (axis 1); MatMul, Gemm, Einsum and LayerNormalization write features last. Otherwise the shape says
it: a fixed last axis after a symbolic one is the classes (per token), else axis 1.

A model whose loss tensor is computed by ``ai.onnx.ml`` operators with no trainable initializer before it
(LinearClassifier, SVMClassifier, tree ensembles: their learned values are node attributes) is refused.

Python 3.8 syntax, the standard library and onnx only: the artifacts child loads it by file location
(graph_facts.py says how the graph modules find each other).
"""
import importlib
import sys
from typing import List

from onnx import TensorProto, helper

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
ML_DOMAIN = graph_facts.ML_DOMAIN
FLOAT_TYPES = graph_facts.FLOAT_TYPES
CHANNELS_FIRST = frozenset([
    "Conv", "ConvTranspose", "BatchNormalization", "InstanceNormalization", "GroupNormalization", "MaxPool",
    "AveragePool", "LpPool", "LRN", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "MaxUnpool",
])
FEATURES_LAST = frozenset(["MatMul", "Gemm", "Einsum", "LayerNormalization", "MatMulInteger", "Attention"])
# Operators whose output has the layout of their first input: the search for the scores' producer passes them.
SAME_LAYOUT = frozenset([
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "Tanh", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "Clip", "Identity", "Dropout", "Cast", "Neg", "Abs",
    "Exp", "Log", "Sqrt", "Pow", "PRelu", "Erf", "Where",
])
PROBABILITIES = frozenset(["Softmax", "LogSoftmax"])


class LossReadingError(ValueError):
    """The loss's input cannot be fitted (a classifier of ai.onnx.ml operators with nothing to train)."""


def _unique(names, base):
    name, count = base, 1
    while name in names:
        name = "{}_{}".format(base, count)
        count += 1
    names.add(name)
    return name


def _ancestors(graph, tensor, producer):
    """Indices of the nodes ``tensor`` is computed from."""
    found, stack = set(), [tensor]
    while stack:
        index = producer.get(stack.pop())
        if index is None or index in found:
            continue
        found.add(index)
        stack.extend(name for name in graph.node[index].input if name)
    return found


def _refuse_attribute_classifiers(graph, tensor, producer):
    """Refuse a loss tensor computed by ai.onnx.ml operators with no floating-point initializer before it:
    what such a classifier learned is in node attributes, which no gradient reaches."""
    ancestors = sorted(_ancestors(graph, tensor, producer))
    floats = set(t.name for t in graph.initializer if t.data_type in FLOAT_TYPES)
    if any(name in floats for index in ancestors for name in graph.node[index].input):
        return
    ml = [graph.node[index] for index in ancestors if graph.node[index].domain == ML_DOMAIN]
    if ml:
        first = ml[0]
        raise LossReadingError(
            "the loss reads {!r}, which {} computes: operators of the {} domain have no gradient in ONNX Runtime, "
            "and {} keeps what it learned in node attributes, not in initializers, so there is nothing to train. "
            "What can be done: train it in scikit-learn, or bring a model made of ONNX operators (for a linear "
            "classifier, scikit-learn's MLPClassifier or a torch nn.Linear exported with torch.onnx.export)".format(
                tensor, graph_facts.node_description(first), ML_DOMAIN, first.op_type))


def _class_axis(graph, tensor, producer, dims):
    """The axis of ``tensor`` (rank >= 3) that holds the classes, and why (for the record). The operator that
    computed it says it, found past elementwise operators through any of their computed inputs (a head may be
    ``Add(bias, MatMul(x, W))``, the bias first), nearest first."""
    seen, frontier = set(), [tensor]
    while frontier:
        following = []  # type: List[str]
        for name in frontier:
            if name in seen or name not in producer:
                continue
            seen.add(name)
            node = graph.node[producer[name]]
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type in CHANNELS_FIRST:
                return 1, "{} writes channels first".format(graph_facts.node_description(node))
            if node.op_type in FEATURES_LAST:
                return len(dims) - 1, "{} writes features last".format(graph_facts.node_description(node))
            if node.op_type in SAME_LAYOUT:
                following.extend(i for i in node.input if i in producer)
        frontier = following
    last, second = dims[-1], dims[1]
    if isinstance(last, int) and last > 0 and not (isinstance(second, int) and second > 0):
        return len(dims) - 1, "its last axis is fixed and its second is not"
    return 1, "classes on axis 1 unless the shape says otherwise"


def fit_cross_entropy(model, scores, class_axis=None):
    """Fit the model's output ``scores`` (the one the cross-entropy loss reads) to ONNX Runtime's loss.
    ``class_axis``: the axis of the scores that holds the classes, as the user says it (None: found as the
    module docstring says).

    Returns ``(model, reading, records)``: the very same ``model`` and ``[]`` when nothing needs changing,
    else a changed copy whose new graph output is what the loss reads; ``reading`` is
    ``{"tensor": what the loss reads, "output": scores, "accuracy_scores": the tensor whose argmax along
    "class_axis" is the prediction, "class_axis", "labels_shape": the labels' dims (None: the generator's
    own are right), "extra_output": a tensor to keep as an eval output for accuracy, or None}``.
    Raises LossReadingError for classifiers of ai.onnx.ml operators with nothing to train.
    """
    graph = model.graph
    producer = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if name:
                producer[name] = index
    records = []
    tensor = scores
    extra_output = None
    node = graph.node[producer[tensor]] if tensor in producer else None
    if node is not None and node.domain == ML_DOMAIN and node.op_type == "ZipMap":
        tensor = node.input[0]
        extra_output = tensor
        records.append({"rule": "loss_input", "op": "ZipMap", "count": 1, "nodes": [node.name or tensor],
                        "note": "the loss reads ZipMap's input {!r}: a sequence of maps cannot take a loss; by "
                                "default the eval model outputs {!r} in its place".format(tensor, tensor)})
    _refuse_attribute_classifiers(graph, tensor, producer)
    shapes = graph_facts.tensor_types(model, keep_names=True)
    elem_type, dims = shapes.get(tensor, (0, None))
    accuracy_scores = tensor if extra_output is not None else scores
    # Past Identity to a Softmax or LogSoftmax over the class axis: its input is the logits.
    name = tensor
    while name in producer and graph.node[producer[name]].op_type == "Identity":
        name = graph.node[producer[name]].input[0]
    node = graph.node[producer[name]] if name in producer else None
    if node is not None and node.op_type in PROBABILITIES and node.domain in ("", "ai.onnx") and dims:
        axis = graph_facts.attribute(node, "axis", -1 if (graph_facts.default_opset(model) or 1) >= 13 else 1)
        rank = len(dims)
        if axis % rank == rank - 1 or (rank == 2 and axis % rank == 1):
            tensor = node.input[0]
            elem_type, dims = shapes.get(tensor, (elem_type, dims))
            records.append({"rule": "logits", "op": node.op_type, "count": 1, "nodes": [node.name or name],
                            "note": "cross-entropy reads its input {!r}, the logits: the loss applies its own "
                                    "softmax, and {!r} holds probabilities".format(tensor, name)})
    labels_shape = None
    given = class_axis
    class_axis = 1
    if given is not None:
        scores_rank = len(dims) if dims is not None else 0
        if (scores_rank < 2 or not -scores_rank <= given < scores_rank or given % scores_rank == 0
                or (scores_rank == 2 and given % 2 != 1)):
            raise LossReadingError(
                "class_axis {} does not fit {!r}, {}: the classes are an axis other than the first (the batch){}".format(
                    given, tensor, graph_facts.show_dims(dims),
                    "; with rank 2 they are axis 1" if scores_rank == 2 else ""))
        given = given % scores_rank
    if dims is not None and len(dims) >= 3:
        if given is None:
            class_axis, why = _class_axis(graph, tensor, producer, dims)
        else:
            class_axis, why = given, "as class_axis says"
        labels_shape = [d for axis, d in enumerate(dims) if axis != class_axis]
        if class_axis != 1:
            records.append({"rule": "class_axis", "op": "Transpose", "count": 1, "nodes": [tensor],
                            "note": "the classes of {!r} are on axis {} ({}): transposed to axis 1 for the loss; "
                                    "labels {}".format(tensor, class_axis, why, graph_facts.show_dims(labels_shape))})
        else:
            records.append({"rule": "class_axis", "op": "labels", "count": 1, "nodes": [tensor],
                            "note": "the classes of {!r} are on axis 1 ({}); labels {}".format(
                                tensor, why, graph_facts.show_dims(labels_shape))})
    if not records:
        return model, {"tensor": scores, "output": scores, "accuracy_scores": scores, "class_axis": 1,
                       "labels_shape": None, "extra_output": None}, []
    from onnx import ModelProto
    result = ModelProto()
    result.CopyFrom(model)
    names = set(n for node in graph.node for n in list(node.input) + list(node.output))
    names.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    loss_tensor = tensor
    if class_axis != 1:
        loss_tensor = _unique(names, tensor + "/classes_first")
        perm = [0, class_axis] + [axis for axis in range(1, len(dims)) if axis != class_axis]
        result.graph.node.append(helper.make_node("Transpose", [tensor], [loss_tensor], perm=perm,
                                                  name=_unique(names, tensor + "/Transpose_classes_first")))
        dims = [dims[axis] for axis in perm]
    outputs = set(o.name for o in result.graph.output)
    for extra in ([loss_tensor] + ([extra_output] if extra_output else [])):
        if extra not in outputs:
            kind = elem_type if extra == loss_tensor else shapes.get(extra, (elem_type, None))[0]
            shape = dims if extra == loss_tensor else shapes.get(extra, (0, None))[1]
            result.graph.output.append(helper.make_tensor_value_info(extra, kind or TensorProto.FLOAT, shape))
            outputs.add(extra)
    reading = {"tensor": loss_tensor, "output": scores, "accuracy_scores": accuracy_scores,
               "class_axis": class_axis,
               "labels_shape": labels_shape, "extra_output": extra_output}
    return result, reading, records
