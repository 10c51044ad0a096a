"""Models brought to what ONNX Runtime 1.19 loads, before and after generation: local functions written
into the graph (``inline_functions``), the default-domain opset down to 21 and the IR version down to 10
(``bring_down``), or a refusal that says why a model cannot be brought down.

The child brings down the model it is given (saved by a newer ``onnx``) and the files the generator
writes: the optimizer model carries the installed ``onnx``'s IR version, which ONNX Runtime 1.19 refuses
from onnx 1.18 on.

Python 3.8 syntax and the standard library at import time (``onnx`` comes as an argument, or inside the
functions), as the other modules the artifacts child loads by file location (graph_facts.py says why).
"""
import importlib
import sys

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
Refusal = graph_facts.sibling("refusal").Refusal
type_name = graph_facts.type_name

# What ONNX Runtime 1.19 accepts: it refuses IR versions above 10 ("Unsupported model IR version"), and its
# operator schemas are ONNX 1.16's, whose newest default-domain opset is 21.
MAX_IR_VERSION = 10
MAX_OPSET = 21
# The newest element type of IR version 10 (INT4); later types need a newer IR version.
MAX_IR10_TYPE = 22


def _newest_type(graph):
    """The highest tensor element type the model uses (to see whether IR version 10 can hold it)."""
    newest = 0
    for g in graph_facts.graph_and_subgraphs(graph):
        for value in list(g.input) + list(g.output) + list(g.value_info):
            if value.type.WhichOneof("value") == "tensor_type":
                newest = max(newest, value.type.tensor_type.elem_type)
        for initializer in g.initializer:
            newest = max(newest, initializer.data_type)
        for node in g.node:
            for attribute in node.attribute:
                if node.op_type in ("Cast", "CastLike", "EyeLike", "RandomNormal", "RandomUniform") and attribute.name in ("to", "dtype"):
                    newest = max(newest, attribute.i)
                if attribute.HasField("t"):
                    newest = max(newest, attribute.t.data_type)
    return newest


def inline_functions(model):
    """Write the model's local functions into its graph (torch's TorchScript exporter with
    ``export_modules_as_functions``, onnxscript's functions), as ONNX Runtime does when it loads a model: the
    preparation and the gradient builders then see the operators inside, which they know, rather than
    calls of a function, which they do not. Returns the notes of what changed (none with an onnx older than
    1.16, which has no inliner: the functions stay)."""
    if not len(model.functions):
        return []
    try:
        inliner = importlib.import_module("onnx.inliner")
    except ImportError:
        return []
    names = sorted(set(f.name for f in model.functions))
    model.CopyFrom(inliner.inline_local_functions(model))
    return ["local function{} {} written into the graph".format("s" if len(names) > 1 else "", ", ".join(names))]


def bring_down(onnx, model, what):
    """Make ``model`` loadable by ONNX Runtime 1.19: the default-domain opset down to 21 (through onnx's
    version converter) and the IR version down to 10. Returns the notes of what changed."""
    notes = []
    opset = graph_facts.default_opset(model)
    if opset is not None and opset > MAX_OPSET:
        try:
            converted = onnx.version_converter.convert_version(model, MAX_OPSET)
        except Exception as exc:
            raise Refusal(
                "ir",
                "{} uses opset {} of the ONNX operators, and ONNX Runtime 1.19 knows opsets up to {}; onnx's "
                "version converter could not bring it down ({}): export the model with opset {} or lower".format(
                    what, opset, MAX_OPSET, str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__,
                    MAX_OPSET),
            )
        model.CopyFrom(converted)
        notes.append("opset {} converted to {}".format(opset, MAX_OPSET))
    if model.ir_version > MAX_IR_VERSION:
        newest = _newest_type(model.graph)
        if newest > MAX_IR10_TYPE:
            raise Refusal(
                "ir",
                "{} has IR version {} and uses the element type {}, which IR version {} (the newest ONNX Runtime "
                "1.19 accepts) does not have".format(what, model.ir_version, type_name(onnx, newest), MAX_IR_VERSION),
            )
        notes.append("IR version {} brought down to {}".format(model.ir_version, MAX_IR_VERSION))
        model.ir_version = MAX_IR_VERSION
    return notes
