"""BatchNormalization whose running statistics follow training (onnxruntime issue #19370).

ONNX Runtime's training graph normalises every BatchNormalization with the batch's statistics
(BatchNormInternal), while the eval graph normalises with the running mean and variance of the checkpoint,
which training never updates: a model fine-tuned on other data validates with stale statistics, and its
validation loss explodes while its training loss falls (the zoo's MobileNetV2: 2.31 -> 77.4).

``follow_batch_statistics`` makes the running statistics trainer state: each BatchNormalization (opset 14
and newer, statistics in initializers) gets ``training_mode=1`` and named outputs for the updated running
mean and variance, which the artifacts list as additional outputs of the training model, with the
statistics as frozen parameters. Statistics that another input reads too get a copy of their own first:
torch's ONNX exporter merges initializers of equal values, so a fresh layer's running mean (zeros) and
variance (ones) may be its bias and scale, or another layer's statistics, in the exported file. Trained as
they stand, the layer would normalise with its own trainable scale and bias as statistics, and ONNX
Runtime's BatchNormInternal would write the running variance into the scale's buffer. A training step then
returns the statistics that BatchNormInternal computed, ``momentum * running + (1 - momentum) * batch`` (the
node's momentum; torch's momentum m is exported as 1 - m), and the trainer writes them into the frozen
parameters after each step (``updateParameter``), as torch's train mode does. The eval model keeps the
inference form (eval_graph.py).

The running variance follows torch's convention: BatchNormInternal updates it with the biased batch variance
(the one it normalises with), torch with the unbiased one, ``batch * n / (n - 1)`` with n the elements per
channel in the batch (``size(X) / C``). A few nodes after each BatchNormalization correct the output:
``R + (R - momentum * running) / (n - 1)``, where ``R - momentum * running`` is ``(1 - momentum) * batch``
(n - 1 is kept at least 1: a single element per channel has no unbiased variance, and torch refuses it).
Nothing of it lies between the parameters and the loss: no gradient goes through these nodes. The
BatchNormalization reads its variance through an Abs (exact: a variance is not negative): BatchNormInternal
writes the updated variance into the buffer of its variance input when that output is no graph output (its
kernel aliases them), so the correction, which reads the running variance too, would otherwise find the
updated one there.

Python 3.8 syntax, onnx only: the artifacts child loads it by file location (graph_facts.py says how the
graph modules find each other).
"""
import importlib
import sys

from onnx import ModelProto, TensorProto, helper

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
DEFAULT_MOMENTUM = 0.9  # ONNX's default for BatchNormalization
VARIANCE = "unbiased"  # the convention of the running variance the training model outputs (torch's)


def follow_batch_statistics(model, trained=None):
    """(model, statistics, records): a changed copy of ``model`` whose BatchNormalization nodes output their
    updated running statistics, with ``statistics`` = [{"node", "mean", "var", "mean_output", "var_output",
    "momentum"}] (parameter names, then output names); the same model, [] and [] when none qualifies.

    ``trained``: the names of the parameters to train (None: all). A layer whose scale and bias are both
    frozen keeps its running statistics and normalises with them in training too, as a frozen backbone in
    torch's eval() does: fine-tuning a head leaves the backbone as it was (a record says which layers)."""
    if (graph_facts.default_opset(model) or 1) < 14:
        return model, [], []  # training_mode is an attribute from opset 14 on
    graph = model.graph
    floats = set(t.name for t in graph.initializer if t.data_type in graph_facts.FLOAT_TYPES)
    readers = graph_facts.readers(graph)
    outputs = set(o.name for o in graph.output)
    names = set(n for node in graph.node for n in list(node.input) + list(node.output) + [node.name])
    names.update(t.name for t in graph.initializer)
    names.update(v.name for v in list(graph.input) + list(graph.output))
    chosen, kept = [], []
    for index, node in enumerate(graph.node):
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or len(node.input) < 5:
            continue
        if trained is not None and node.input[1] not in trained and node.input[2] not in trained:
            kept.append(node.name or "BatchNormalization_{}".format(index))
            continue  # a frozen layer: its statistics stay too (the node keeps its inference form)
        mean, var = node.input[3], node.input[4]
        if mean not in floats or var not in floats:
            continue  # statistics computed: not the exporters' form
        if any(name in outputs for name in node.output[1:] if name):
            continue  # the model itself outputs them: leave it be
        chosen.append(index)
    frozen_records = [{"rule": "batchnorm_statistics", "op": "BatchNormalization", "count": len(kept),
                       "nodes": kept, "note": "scale and bias frozen: the running statistics stay as they are and "
                                              "the layer normalises with them, as torch's eval() of a frozen "
                                              "layer does"}] if kept else []
    if not chosen:
        return model, [], frozen_records
    result = ModelProto()
    result.CopyFrom(model)
    types = dict((t.name, t.data_type) for t in graph.initializer)

    def fresh(base):
        name, count = base, 1
        while name in names:
            name, count = "{}_{}".format(base, count), count + 1
        names.add(name)
        return name

    values = dict((t.name, t) for t in graph.initializer)
    statistics, nodes, before, after, unshared, copied = [], list(result.graph.node), {}, {}, [], set()
    for index in chosen:
        node = nodes[index]
        label = node.name or "BatchNormalization_{}".format(index)
        for slot, what in ((3, "running_mean"), (4, "running_var")):
            if readers[node.input[slot]] > 1:  # read elsewhere too: this layer's statistics get their own copy
                shared = node.input[slot]
                copied.add(shared)
                node.input[slot] = fresh(_statistic_name(node, label, what))
                copy = result.graph.initializer.add()
                copy.CopyFrom(values[shared])
                copy.name = node.input[slot]
                types[copy.name] = copy.data_type
                if label not in unshared:
                    unshared.append(label)
        momentum = DEFAULT_MOMENTUM
        for attribute in list(node.attribute):
            if attribute.name == "training_mode":
                node.attribute.remove(attribute)
            elif attribute.name == "momentum":
                momentum = helper.get_attribute_value(attribute)
        node.attribute.extend([helper.make_attribute("training_mode", 1)])
        present = [node.output[0]] + [name for name in node.output[1:3] if name]
        for what in ("running_mean", "running_var")[len(present) - 1:]:
            present.append(fresh("{}/{}".format(label, what)))
        biased = fresh("{}/running_var_biased".format(label))
        del node.output[:]
        node.output.extend(present[:2] + [biased])
        running = node.input[4]
        own_copy = fresh("{}/var_input".format(label))
        node.input[4] = own_copy
        before[index] = [helper.make_node("Abs", [running], [own_copy], name=own_copy)]
        after[index] = _unbiased_variance(node.input[0], running, biased, present[2], momentum, types[running],
                                          label, fresh)
        statistics.append({"node": label, "mean": node.input[3], "var": running, "mean_output": present[1],
                           "var_output": present[2], "momentum": momentum, "variance": VARIANCE})
    del result.graph.node[:]
    for index, node in enumerate(nodes):
        result.graph.node.extend(before.get(index, []) + [node] + after.get(index, []))
    read = set(graph_facts.readers(result.graph)) | outputs
    orphans = set(name for name in copied if name not in read)
    if orphans:  # a statistic that only statistics read is read through their copies now: it goes
        kept_initializers = [t for t in result.graph.initializer if t.name not in orphans]
        del result.graph.initializer[:]
        result.graph.initializer.extend(kept_initializers)
    momenta = sorted(set(round(s["momentum"], 6) for s in statistics))
    records = [{"rule": "batchnorm_statistics", "op": "BatchNormalization", "count": len(statistics),
                "nodes": [s["node"] for s in statistics],
                "note": "the running statistics follow training: frozen parameters, updated after each step "
                        "from the training model's outputs with momentum {} (running = momentum * running + "
                        "(1 - momentum) * batch, torch's unbiased batch variance)".format(
                            ", ".join(str(m) for m in momenta))}]
    if unshared:
        records.append({"rule": "batchnorm_statistics", "op": "BatchNormalization", "count": len(unshared),
                        "nodes": unshared,
                        "note": "statistics that other inputs read too (an exporter merges initializers of equal "
                                "values, such as a fresh layer's zero mean and bias) got copies of their own, as "
                                "the model's layers had them"})
    return result, statistics, records + frozen_records


def _statistic_name(node, label, what):
    """A name for a layer's own copy of a running statistic: torch's (``bn.running_mean``) where the scale is
    named ``bn.weight``, else the node's label and ``what``."""
    scale = node.input[1]
    if scale.endswith(".weight"):
        return scale[:-len("weight")] + what
    return "{}.{}".format(label, what)


def _unbiased_variance(x, running, biased, output, momentum, data_type, label, fresh):
    """The nodes that compute ``output``, torch's running variance, from ``biased``, the one BatchNormInternal
    updated with the biased batch variance: ``biased + (biased - momentum * running) / max(n - 1, 1)`` with n =
    size(x) / channels (x's axis 1), in the statistics' element type."""
    def constant(name, value, kind):
        return helper.make_node("Constant", [], [name], name=name,
                                value=helper.make_tensor(name, kind, [], [value]))

    n = dict((key, fresh("{}/var_{}".format(label, key))) for key in (
        "size", "shape", "axis", "channels", "count", "count_float", "one", "less_one", "divisor", "momentum",
        "kept", "batch_part", "correction"))
    return [
        helper.make_node("Size", [x], [n["size"]], name=n["size"]),
        helper.make_node("Shape", [x], [n["shape"]], name=n["shape"]),
        constant(n["axis"], 1, TensorProto.INT64),
        helper.make_node("Gather", [n["shape"], n["axis"]], [n["channels"]], name=n["channels"], axis=0),
        helper.make_node("Div", [n["size"], n["channels"]], [n["count"]], name=n["count"]),
        helper.make_node("Cast", [n["count"]], [n["count_float"]], name=n["count_float"], to=data_type),
        constant(n["one"], 1.0, data_type),
        helper.make_node("Sub", [n["count_float"], n["one"]], [n["less_one"]], name=n["less_one"]),
        helper.make_node("Max", [n["less_one"], n["one"]], [n["divisor"]], name=n["divisor"]),
        constant(n["momentum"], float(momentum), data_type),
        helper.make_node("Mul", [running, n["momentum"]], [n["kept"]], name=n["kept"]),
        helper.make_node("Sub", [biased, n["kept"]], [n["batch_part"]], name=n["batch_part"]),
        helper.make_node("Div", [n["batch_part"], n["divisor"]], [n["correction"]], name=n["correction"]),
        helper.make_node("Add", [biased, n["correction"]], [output], name=output),
    ]
