"""The torch names of parameters that torch's default exporter (``torch.onnx.export(..., dynamo=True)``)
renamed, read from the metadata it writes, so that ``requires_grad`` and ``frozen_params`` patterns can
name them as the module did.

That exporter keeps a parameter's name (``fc.bias``) where it feeds the graph as it is, and renames what it
folds: a Linear weight transposed for a MatMul becomes ``val_88``; an LSTM's or GRU's weights, reordered and
stacked into the ONNX operator's ``W``, ``R`` and ``B``, become ``val_111``, ``val_112``, ``val_113``. What
still names them (measured with torch 2.13 and onnxscript 0.7):

- the graph's ``metadata_props`` key ``pkg.torch.export.ExportedProgram.graph_signature``: one line per
  placeholder of the exported program, ``p_encoder_layers_0_linear1_weight: PARAMETER
  target='encoder.layers.0.linear1.weight'``;
- each node's ``pkg.torch.onnx.fx_node``: the torch operation the node comes from, with the placeholders
  it read (``aten.linear.default(args = (%layer_norm, %p_encoder_layers_0_linear1_weight, ...``);
- each node's ``namespace`` (``: __main__.Net/encoder: ...TransformerEncoder/encoder.layers.0: ...
  /encoder.layers.0.linear1: torch.nn.modules.linear.Linear/linear_2: aten.linear.default``) and
  ``pkg.torch.onnx.name_scopes`` (``['', 'encoder', 'encoder.layers.0', 'encoder.layers.0.linear1',
  'linear_2']``): the module the node was computed in.

A renamed initializer's torch name is found at the first node that reads it: the one parameter the node's
torch operation read that no initializer of the model is named after (``encoder.layers.0.linear1.weight``).
Where the operation read several (an LSTM's eight), the tensor holds parts of several parameters, and is
named by the module and the ONNX operator's input it feeds: ``lstm.W``, ``lstm.R``, ``lstm.B``. An
initializer whose reader read no renamed parameter is a constant the exporter made, and gets no name; the
graph signature tells such constants (``exporter_constants``) from the module's parameters and buffers, and
they are left out of the default selection. Models without this metadata (the TorchScript exporter, other
exporters) get no names; their numbers are told by rank (``exporter_constants``).

Python 3.8 syntax, the standard library at import time and ``onnx`` (its operator schemas) inside
``module_names``, as the other modules the artifacts child loads (graph_facts.py says why).
"""
import ast
import importlib
import re
import sys
from typing import Dict, List, Set

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))

SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
FX_NODE_KEY = "pkg.torch.onnx.fx_node"
NAMESPACE_KEY = "namespace"
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
# "p_fc_weight: PARAMETER target='fc.weight'"; buffers and constant tensors are placeholders the same way
SIGNATURE_LINE = re.compile(r"^\s*(\w+): (PARAMETER|BUFFER|CONSTANT_TENSOR)\b[^\n]*?target='([^']+)'", re.M)
MODULE_STATE = ("PARAMETER", "BUFFER")
PLACEHOLDER = re.compile(r"%(\w+)")


def signature_targets(model):
    """Placeholder name -> the torch name it stands for (``p_fc_weight`` -> ``fc.weight``), from the graph
    signature the exporter stored on the graph (or the model); {} when there is none."""
    targets: Dict[str, str] = {}
    for props in (model.metadata_props, getattr(model.graph, "metadata_props", ())):
        for prop in props:
            if prop.key == SIGNATURE_KEY:
                targets.update((placeholder, target) for placeholder, _, target in SIGNATURE_LINE.findall(prop.value))
    return targets


def module_state(model):
    """The torch names of the module's parameters and buffers, from the graph signature; empty without one."""
    state: Set[str] = set()
    for props in (model.metadata_props, getattr(model.graph, "metadata_props", ())):
        for prop in props:
            if prop.key == SIGNATURE_KEY:
                state.update(target for _, kind, target in SIGNATURE_LINE.findall(prop.value) if kind in MODULE_STATE)
    return state


def exporter_constants(onnx, model, names):
    """The floating-point initializers that are numbers an exporter wrote, not weights; they stay constants
    unless a pattern names them.

    - torch's default exporter: those that hold none of the module's parameters or buffers, neither named
      after one nor renamed from one (``names``, from ``module_names``): attention's scale, a divisor taken
      from a shape, the zeros an LSTM's state starts from. The TorchScript exporter writes these as
      Constant nodes.
    - Any other exporter that names itself (the model's ``producer_name``): those of rank 0. tf2onnx writes a LayerNormalization's epsilon, GELU's
      coefficients and the exponent of its Pow this way. Trained, the exponent's gradient (x^p ln x) turns
      NaN at the first negative x, and the rest would stop being what the model was built with.
    - The exceptions: the TorchScript exporter, whose rank-0 initializers are parameters (a learned scale,
      ``nn.Parameter(torch.tensor(1.0))``), except the ``onnx::`` ones its constant folding names; and a
      model that names no producer (built by hand with onnx.helper), whose every floating-point
      initializer is a parameter."""
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
    state = module_state(model)
    if state:
        return set(i.name for i in model.graph.initializer
                   if i.data_type in floats and i.name not in state and i.name not in names)
    if not model.producer_name:
        return set()
    torchscript = model.producer_name == "pytorch"
    return set(i.name for i in model.graph.initializer
               if i.data_type in floats and len(i.dims) == 0 and (not torchscript or i.name.startswith("onnx::")))


def module_path(metadata):
    """The path of the module a node was computed in (``encoder.layers.0.linear1``; "" for the model
    itself), from its ``namespace`` or ``pkg.torch.onnx.name_scopes``; None when neither says."""
    namespace = metadata.get(NAMESPACE_KEY)
    if namespace and "/" in namespace:
        scopes = [segment.split(": ", 1)[0] for segment in namespace.split("/")[:-1]]  # the last is the op
        return scopes[-1]
    scopes_text = metadata.get(NAME_SCOPES_KEY)
    if scopes_text:
        try:
            scopes = ast.literal_eval(scopes_text)
        except (ValueError, SyntaxError):
            return None
        if isinstance(scopes, list) and len(scopes) > 1 and all(isinstance(s, str) for s in scopes):
            return scopes[-2]
    return None


def read_parameters(metadata, targets):
    """The torch names of the placeholders the node's torch operation read, in order."""
    fx_node = metadata.get(FX_NODE_KEY, "")
    args = fx_node.split("args = ", 1)[1] if "args = " in fx_node else ""
    found: List[str] = []
    for placeholder in PLACEHOLDER.findall(args):
        target = targets.get(placeholder)
        if target is not None and target not in found:
            found.append(target)
    return found


def _input_name(onnx, node, position, opset):
    """The name the operator's schema gives input ``position`` of ``node`` (LSTM's 1 is "W")."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
        inputs = schema.inputs
        return inputs[min(position, len(inputs) - 1)].name
    except Exception:  # an operator onnx does not know: its position
        return "input{}".format(position)


def module_names(onnx, model):
    """{initializer name: its torch name} for the floating-point initializers of ``model`` that torch's
    default exporter renamed (the module docstring says how they are found); {} for a model without its
    metadata."""
    targets = signature_targets(model)
    graph = model.graph
    own_names = set(i.name for i in graph.initializer)
    kept = set(targets.values())
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
    renamed = set(i.name for i in graph.initializer if i.name not in kept and i.data_type in floats)
    if not targets or not renamed:
        return {}
    opsets = dict((o.domain, o.version) for o in model.opset_import)
    names: Dict[str, str] = {}
    for node in graph.node:
        if not node.metadata_props:
            continue
        for position, name in enumerate(node.input):
            if name not in renamed or name in names:
                continue
            metadata = dict((p.key, p.value) for p in node.metadata_props)
            read = [target for target in read_parameters(metadata, targets) if target not in own_names]
            if len(read) == 1:
                names[name] = read[0]
            elif read:
                path = module_path(metadata)
                if path is None:
                    path = read[0].rsplit(".", 1)[0] if "." in read[0] else ""
                opset = opsets.get(node.domain, opsets.get("ai.onnx" if node.domain == "" else node.domain, 1))
                suffix = _input_name(onnx, node, position, opset)
                if _holds_no_parameter(node, suffix, metadata):
                    continue
                names[name] = "{}.{}".format(path, suffix) if path else suffix
    return names


# Inputs that the operator an exporter decomposes a module's operation into reads beside the parameters, and
# that hold none of them: a recurrent operator's initial states (a module called without one starts from
# zeros the exporter writes), and the InstanceNormalization that GroupNorm is written with, whose scale and
# bias are ones and zeros per group (the module's weight and bias come after it, per channel, in a Mul and an
# Add). Named as parameters, they were trained beside the module's own.
STATE_INPUTS = {"LSTM": ("initial_h", "initial_c", "sequence_lens"), "GRU": ("initial_h", "sequence_lens"),
                "RNN": ("initial_h", "sequence_lens")}
GROUP_NORM = re.compile(r"target=torch\.ops\.aten\.(native_)?group_norm\.")


def _holds_no_parameter(node, input_name, metadata):
    if input_name in STATE_INPUTS.get(node.op_type, ()):
        return True
    return (node.op_type == "InstanceNormalization" and input_name in ("scale", "B")
            and bool(GROUP_NORM.search(metadata.get(FX_NODE_KEY, ""))))
