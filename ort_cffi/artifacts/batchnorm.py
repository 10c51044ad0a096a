"""BatchNormalization whose running statistics follow training (onnxruntime issue #19370).

ONNX Runtime's training graph normalises every BatchNormalization with the batch's statistics
(BatchNormInternal), while the eval graph normalises with the running mean and variance of the checkpoint,
which training never updates: a model fine-tuned on other data validates with stale statistics, and its
validation loss explodes while its training loss falls (the zoo's MobileNetV2: 2.31 -> 77.4).

``follow_batch_statistics`` makes the running statistics trainer state: each BatchNormalization (opset 14
and newer, statistics in initializers read by it alone) gets ``training_mode=1`` and named outputs for
the updated running mean and variance, which the artifacts list as additional outputs of the training
model, with the statistics as frozen parameters. A training step then returns the statistics that
BatchNormInternal computed, ``momentum * running + (1 - momentum) * batch`` (the node's momentum; torch's
momentum m is exported as 1 - m), and the trainer writes them into the frozen parameters after each step
(``updateParameter``), as torch's train mode does. The eval model keeps the inference form (eval_graph.py).

Python 3.8 syntax, onnx only: the artifacts child loads it by file location (graph_facts.py says how the
graph modules find each other).
"""
import importlib
import sys
from typing import Dict

from onnx import ModelProto, helper

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
DEFAULT_MOMENTUM = 0.9  # ONNX's default for BatchNormalization


def follow_batch_statistics(model):
    """(model, statistics, records): a changed copy of ``model`` whose BatchNormalization nodes output their
    updated running statistics, with ``statistics`` = [{"node", "mean", "var", "mean_output", "var_output",
    "momentum"}] (parameter names, then output names); the same model, [] and [] when none qualifies."""
    if (graph_facts.default_opset(model) or 1) < 14:
        return model, [], []  # training_mode is an attribute from opset 14 on
    graph = model.graph
    floats = set(t.name for t in graph.initializer if t.data_type in graph_facts.FLOAT_TYPES)
    readers: Dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    outputs = set(o.name for o in graph.output)
    names = set(n for node in graph.node for n in list(node.input) + list(node.output) + [node.name])
    chosen = []
    for index, node in enumerate(graph.node):
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or len(node.input) < 5:
            continue
        mean, var = node.input[3], node.input[4]
        if mean not in floats or var not in floats or readers.get(mean) != 1 or readers.get(var) != 1:
            continue  # statistics computed, or shared: not the exporters' form
        if any(name in outputs for name in node.output[1:] if name):
            continue  # the model itself outputs them: leave it be
        chosen.append(index)
    if not chosen:
        return model, [], []
    result = ModelProto()
    result.CopyFrom(model)
    statistics = []
    for index in chosen:
        node = result.graph.node[index]
        label = node.name or "BatchNormalization_{}".format(index)
        momentum = DEFAULT_MOMENTUM
        for attribute in list(node.attribute):
            if attribute.name == "training_mode":
                node.attribute.remove(attribute)
            elif attribute.name == "momentum":
                momentum = helper.get_attribute_value(attribute)
        node.attribute.extend([helper.make_attribute("training_mode", 1)])
        present = [node.output[0]] + [name for name in node.output[1:3] if name]
        for what in ("running_mean", "running_var")[len(present) - 1:]:
            name, count = "{}/{}".format(label, what), 1
            while name in names:
                name, count = "{}/{}_{}".format(label, what, count), count + 1
            names.add(name)
            present.append(name)
        del node.output[:]
        node.output.extend(present)
        statistics.append({"node": label, "mean": node.input[3], "var": node.input[4], "mean_output": present[1],
                           "var_output": present[2], "momentum": momentum})
    momenta = sorted(set(round(s["momentum"], 6) for s in statistics))
    records = [{"rule": "batchnorm_statistics", "op": "BatchNormalization", "count": len(statistics),
                "nodes": [s["node"] for s in statistics],
                "note": "the running statistics follow training: frozen parameters, updated after each step "
                        "from the training model's outputs with momentum {} (running = momentum * running + "
                        "(1 - momentum) * batch)".format(", ".join(str(m) for m in momenta))}]
    return result, statistics, records
