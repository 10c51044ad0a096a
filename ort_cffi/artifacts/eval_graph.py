"""The eval model of a training-mode export, in the inference form ONNX Runtime loads.

torch's ``TrainingMode.TRAINING`` export keeps BatchNormalization and Dropout trainable: BatchNormalization
with ``training_mode=1`` and three outputs (Y, running mean, running variance), Dropout with a ``training_mode``
input that is true. ONNX Runtime's generator copies the forward graph into the eval model as it is, and
1.19.2 refuses to load it ("This number of op outputs should be 1 when Training_mode = False": it loads eval
models with training off). ``inference_forms`` cuts each such BatchNormalization back to its one output,
without ``training_mode`` (it then normalises with the running statistics), in the eval model only: the
training model keeps the training form its gradients need. What computes only from the running statistics
it cuts, and reaches no output of the eval model, goes with them (batchnorm.py's variance in torch's
convention). (Dropout needs nothing: the generator already clears its ``training_mode`` input in the eval
model.)

Python 3.8 syntax, onnx only: the artifacts child loads it by file location.
"""
from typing import Any, Dict, List, Set

from onnx import helper


def _used(graph):
    """Names read by a node or given as a graph output."""
    names = set(o.name for o in graph.output)
    for node in graph.node:
        names.update(node.input)
    return names


def _drop_dead_statistics(graph):
    """Remove the nodes that reach no graph output and either read, directly or not, a BatchNormalization's
    running statistics or feed only nodes removed: what the training model computes from the statistics
    (and for them), dead in the eval model. Other dead nodes stay as they are."""
    downstream: Set[str] = set()
    for node in graph.node:  # topological order
        if node.op_type == "BatchNormalization" and node.domain in ("", "ai.onnx"):
            downstream.update(name for name in node.output[1:] if name)
        elif any(name in downstream for name in node.input):
            downstream.update(node.output)
    readers: Dict[str, List[int]] = {}
    for index, node in enumerate(graph.node):
        for name in node.input:
            readers.setdefault(name, []).append(index)
    needed = set(o.name for o in graph.output)
    removed = set()
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        outputs = [name for name in node.output if name]
        if any(name in needed for name in outputs):
            needed.update(node.input)
            continue
        fed = [reader for name in outputs for reader in readers.get(name, ())]
        if any(name in downstream for name in outputs) or (fed and all(reader in removed for reader in fed)):
            removed.add(index)
        else:
            needed.update(node.input)  # a dead node of the model's own: left alone, with what it reads
    kept = [node for index, node in enumerate(graph.node) if index not in removed]
    if removed:
        del graph.node[:]
        graph.node.extend(kept)


def inference_forms(model):
    """Put the training-form BatchNormalization nodes of ``model`` (an eval model) in inference form, in place. Returns the records, one per operator type: {"rule": "inference_form", "op", "count",
    "nodes"}; [] when the model has none (and is unchanged)."""
    graph = model.graph
    _drop_dead_statistics(graph)
    used = _used(graph)
    records: Dict[str, Any] = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        changed = False
        if node.op_type == "BatchNormalization":
            training = [a for a in node.attribute if a.name == "training_mode"]
            extra = [name for name in node.output[1:] if name]
            if (training and helper.get_attribute_value(training[0])) or extra:
                if any(name in used for name in extra):
                    continue  # something reads the running statistics: not the exporter's training form
                for attribute in training:
                    node.attribute.remove(attribute)
                del node.output[1:]
                changed = True
        if changed:
            record = records.setdefault(node.op_type, {"rule": "inference_form", "op": node.op_type, "count": 0,
                                                       "nodes": []})
            record["count"] += 1
            record["nodes"].append(node.name or node.output[0])
    return list(records.values())
