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
from typing import Dict, List, Optional, Set

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
# the torch operations whose ONNX node (Gemm, Conv) takes the bias as its third input
BIASED_TARGET = re.compile(r"target=torch\.ops\.aten\.(linear|addmm|conv\w*|convolution)\.")


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


def _read_parameters(metadata, targets):
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
            read = [target for target in _read_parameters(metadata, targets) if target not in own_names]
            if len(read) == 1:
                names[name] = read[0]
            elif read:
                path = module_path(metadata)
                if path is None:
                    path = read[0].rsplit(".", 1)[0] if "." in read[0] else ""
                opset = opsets.get(node.domain, opsets.get("ai.onnx" if node.domain == "" else node.domain, 1))
                suffix = _input_name(onnx, node, position, opset)
                names[name] = "{}.{}".format(path, suffix) if path else suffix
    return names


def _consumers(graph):
    """name -> the nodes of ``graph`` that read it."""
    found: Dict[str, List] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _metadata(node):
    return dict((p.key, p.value) for p in node.metadata_props)


def _readers_module(node, consumers):
    """The module a node without the exporter's metadata was computed in, as the nodes reading its outputs
    tell it (the optimizer that splits an attention's packed bias writes its Split without metadata): their
    one module path, or None where they name none or several."""
    paths = set()
    for output in node.output:
        for reader in consumers.get(output, ()):
            if reader.metadata_props:
                paths.add(module_path(_metadata(reader)))
    return paths.pop() if len(paths) == 1 and None not in paths else None


def untie_merged(onnx, model, weights=None):
    """(records): the parameters torch's default exporter merged, apart again, in ``model`` (changed in place).

    That exporter merges initializers of equal values, so a fresh model's LayerNorms of one width, whose
    scales are all ones and biases all zeros, read one scale and one bias in the file (``n1.weight`` for
    ``n1`` and ``n2``): trained as it stands, the layers would share them, which the module's did not. A node
    reads a merged parameter where its input is named after a parameter its own torch operation did not read,
    and that operation read a parameter of the same attribute name (``weight``) that is no initializer of the
    model (``n2.weight``): the node then gets a copy of the value under that name. A node the exporter wrote
    without its metadata (the Split of a cross-attention's packed ``in_proj_bias``, which reads the self-
    attention's when both are zeros) is placed by the nodes reading its outputs: where they all belong to one
    module, a parameter of that module with the attribute's name that is no initializer is its own. A
    parameter the module itself shares (tied embeddings) is read by every use under its one name, and stays
    shared. Buffers are not touched here (a BatchNorm's statistics: batchnorm.py gives them their own
    copies). ``weights``: where ort_cffi's builder set the model's large and external initializers aside
    (builder/weights.py; their initializers are stubs), which keeps a copy's data under its name too."""
    targets = signature_targets(model)
    if not targets:
        return []
    graph = model.graph
    initializers = dict((i.name, i) for i in graph.initializer)
    parameters = set(target for placeholder, target in targets.items() if placeholder.startswith("p_"))
    readers = graph_facts.readers(graph)
    consumers = _consumers(graph)
    made: Dict[str, str] = {}  # new initializer -> the merged one it copies
    for node in graph.node:
        if node.metadata_props:
            read = _read_parameters(_metadata(node), targets)  # type: Optional[List[str]]
            module = None
        else:
            read, module = None, _readers_module(node, consumers)
            if module is None:
                continue
        for position, name in enumerate(node.input):
            if name not in initializers or name not in parameters or readers.get(name, 0) < 2:
                continue
            owner, _, attribute = name.rpartition(".")
            if read is not None and name in read or read is None and owner == module:
                continue
            pool = read if read is not None else [t for t in parameters if t.rpartition(".")[0] == module]
            own = [t for t in pool if t in parameters and t.rpartition(".")[2] == attribute
                   and (t not in initializers or made.get(t) == name)]
            if len(own) != 1:
                continue
            if own[0] not in initializers:
                copy = graph.initializer.add()
                copy.CopyFrom(initializers[name])
                copy.name = own[0]
                initializers[own[0]] = copy
                made[own[0]] = name
                if weights is not None:
                    weights.alias(own[0], name)
            node.input[position] = own[0]
    if not made:
        return []
    return [{"rule": "merged_parameters", "op": "initializer", "count": len(made),
             "nodes": sorted(made),
             "note": "the exporter had merged them into parameters of equal values ({}); each layer reads its own "
                     "again".format(", ".join(sorted(set(made.values()))[:4]))}]


def retie_folded_copies(onnx, model, weights=None):
    """(records): a shared parameter the exporter copied for one of its uses, read through the parameter
    again, in ``model`` (changed in place).

    torch's default exporter folds a Linear's weight, transposed for its MatMul, into a new initializer
    (``val_97``). Where the module shares that weight (a language model's head tied to its embedding), the
    other use still reads the parameter (``head.weight``), and the file holds two tensors: trained as it
    stands, the tie is gone, the head and the embedding part after the first step, and neither gets the
    gradient torch gives the shared weight (its two parts summed). Such a copy is known by its reader, whose
    torch operation read one parameter that is itself an initializer of the model; where the copy holds that
    parameter's values as they are, transposed (2-D) or reshaped, it is replaced by that operation on the
    parameter (a Transpose or a Reshape, which ONNX Runtime computes once per step). ``weights``: as for
    ``untie_merged``; the values compared are read from there."""
    from onnx import helper, numpy_helper

    targets = signature_targets(model)
    if not targets:
        return []
    graph = model.graph
    initializers = dict((i.name, i) for i in graph.initializer)
    parameters = set(target for placeholder, target in targets.items() if placeholder.startswith("p_"))
    state = set(targets.values())
    consumers = _consumers(graph)
    derived: Dict[str, str] = {}  # copy -> the parameter it is derived from
    nodes = []
    for name, copy in initializers.items():
        if name in state:
            continue
        first = next((n for n in consumers.get(name, ()) if n.metadata_props), None)
        if first is None:
            continue
        read = [t for t in _read_parameters(_metadata(first), targets) if t in parameters and t in initializers]
        if len(read) != 1 or initializers[read[0]].data_type != copy.data_type:
            continue
        try:
            value, source = _value(numpy_helper, copy, weights), _value(numpy_helper, initializers[read[0]], weights)
        except Exception:  # no data to compare: left as it is
            continue
        if value.size != source.size:
            continue
        if value.shape == source.shape and (value == source).all():
            node = None
        elif value.ndim == 2 and source.ndim == 2 and value.shape == source.shape[::-1] and (value == source.T).all():
            node = helper.make_node("Transpose", [read[0]], [name], name=name + "_tied", perm=[1, 0])
        elif (value.reshape(-1) == source.reshape(-1)).all():
            shape = helper.make_tensor(name + "_tied_shape", onnx.TensorProto.INT64, [value.ndim], list(value.shape))
            graph.initializer.append(shape)
            node = helper.make_node("Reshape", [read[0], shape.name], [name], name=name + "_tied")
        else:
            continue
        derived[name] = read[0]
        if node is None:  # the same values: its readers read the parameter
            for reader in graph.node:
                for position, input_name in enumerate(reader.input):
                    if input_name == name:
                        reader.input[position] = read[0]
        else:
            nodes.append(node)
    if not derived:
        return []
    kept = [i for i in graph.initializer if i.name not in derived]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for node in reversed(nodes):
        graph.node.insert(0, node)
    return [{"rule": "tied_parameters", "op": "initializer", "count": len(derived), "nodes": sorted(derived),
             "note": "copies the exporter folded out of shared parameters ({}), computed from them again, so "
                     "that the parameters stay shared".format(", ".join(sorted(set(derived.values()))[:4]))}]


def _value(numpy_helper, initializer, weights):
    """An initializer's values, from where ort_cffi's builder set them aside where it did."""
    if weights is not None and initializer.name in weights.tensors:
        initializer = weights.materialized(initializer.name)
    return numpy_helper.to_array(initializer)


def _covered(model, targets):
    """The torch names of the parameters the model still holds: initializers named after them, and those that
    the readers of an initializer the exporter renamed (a folded or stacked copy) read."""
    graph = model.graph
    initializers = set(i.name for i in graph.initializer)
    state = set(targets.values())
    covered = initializers & state
    for node in graph.node:
        if node.metadata_props and any(name in initializers and name not in state for name in node.input):
            covered.update(_read_parameters(_metadata(node), targets))
    return covered


def restore_dropped_biases(onnx, model):
    """(records): the biases of zeros torch's default exporter left out of a Gemm or a Conv, put back, in
    ``model`` (changed in place).

    Its optimizer drops a bias input that is all zeros (a fresh ``nn.MultiheadAttention``'s ``out_proj.bias``,
    read by a Gemm over the flattened tokens): the module's parameter is then in no file, and training would
    leave it at zero where torch trains it. Where a Gemm (or a Conv) without its bias input comes from a torch
    operation that read a ``bias`` parameter the model no longer holds, that parameter comes back as zeros of
    the product's width, under its torch name."""
    import numpy
    from onnx import helper, numpy_helper

    targets = signature_targets(model)
    if not targets:
        return []
    graph = model.graph
    initializers = dict((i.name, i) for i in graph.initializer)
    parameters = set(target for placeholder, target in targets.items() if placeholder.startswith("p_"))
    covered = _covered(model, targets)
    restored = []
    for node in graph.node:
        if node.op_type not in ("Gemm", "Conv") or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        if not node.metadata_props or node.input[1] not in initializers:
            continue
        metadata = _metadata(node)
        if not BIASED_TARGET.search(metadata.get(FX_NODE_KEY, "")):  # a fused node's metadata is another's
            continue
        dropped = [t for t in _read_parameters(metadata, targets)
                   if t in parameters and t not in covered and t.rpartition(".")[2] == "bias"]
        if len(dropped) != 1 or dropped[0] in initializers:
            continue
        dims = list(initializers[node.input[1]].dims)
        if node.op_type == "Gemm":
            transposed = any(a.name == "transB" and a.i for a in node.attribute)
            width = dims[0] if transposed else dims[-1]
        else:
            width = dims[0]
        zeros = numpy_helper.from_array(numpy.zeros(width, helper.tensor_dtype_to_np_dtype(
            initializers[node.input[1]].data_type)), dropped[0])
        graph.initializer.append(zeros)
        initializers[dropped[0]] = zeros
        node.input.append(dropped[0])
        restored.append(dropped[0])
    if not restored:
        return []
    return [{"rule": "dropped_biases", "op": "initializer", "count": len(restored), "nodes": sorted(restored),
             "note": "the exporter had left these biases of zeros out; they are parameters of the module, and "
                     "train again"}]


def lost_parameters(onnx, model):
    """The torch names of the module's parameters that a torch operation of the model read and that the file
    no longer holds in any form: the exporter dropped them, with the operation that read them (torch 2.13 with
    onnxscript 0.7 drops a training-mode BatchNorm that follows a Conv: the model then computes no
    normalization at all). They cannot be trained. A parameter no operation read is a tied one's second name
    (torch.export lists both), and is not lost."""
    targets = signature_targets(model)
    parameters = set(target for placeholder, target in targets.items() if placeholder.startswith("p_"))
    read: Set[str] = set()
    for node in model.graph.node:
        if node.metadata_props:
            read.update(_read_parameters(_metadata(node), targets))
    return sorted((parameters & read) - _covered(model, targets))
