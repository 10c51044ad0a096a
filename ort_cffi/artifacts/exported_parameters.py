"""The parameters of a model torch's default exporter (``torch.onnx.export(..., dynamo=True)``) wrote, made
what the module has again before it is differentiated: that exporter's optimizer treats parameters as the
constants they are to ONNX, and merges, copies, drops and folds them. Measured with torch 2.13 and onnxscript
0.7 on modules trained against torch's gradients (docs/guides/models.md, the default exporter):

- ``untie_merged``: initializers of equal values merged (a fresh model's LayerNorm scales), apart again;
- ``retie_folded_copies``: a shared parameter copied, transposed, for one use (a head tied to its
  embedding), computed from the parameter again;
- ``restore_dropped_biases``: a Gemm's or Conv's bias of zeros left out, put back;
- ``retie_broadcast_copies``: a parameter broadcast and folded into a constant (an LSTMCell's first step
  from a zero state), computed from the parameter again;
- ``lost_parameters`` and ``unread_parameters``: what it dropped or folded away for good, said.

Each reads the exporter's metadata (module_names.py says which). ``weights``: where ort_cffi's builder set the
model's large and external initializers aside (builder/weights.py; their initializers are stubs), which
holds the values compared and keeps a copy's data under its name.

Python 3.8 syntax, the standard library at import time and ``onnx`` (and numpy) inside the functions, as the
other modules the artifacts child loads (graph_facts.py says why).
"""
import importlib
import re
import sys
from typing import Dict, List, Optional, Set

graph_facts = (sys.modules.get("_ort_cffi_artifacts_graph_facts")
               or importlib.import_module("ort_cffi.artifacts.graph_facts"))
names = graph_facts.sibling("module_names")
signature_targets, module_path, read_parameters = names.signature_targets, names.module_path, names.read_parameters
FX_NODE_KEY = names.FX_NODE_KEY
# the torch operations whose ONNX node (Gemm, Conv) takes the bias as its third input
BIASED_TARGET = re.compile(r"target=torch\.ops\.aten\.(linear|addmm|conv\w*|convolution)\.")


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
            read = read_parameters(_metadata(node), targets)  # type: Optional[List[str]]
            module = None
        else:
            read, module = None, _readers_module(node, consumers)
            if module is None:
                continue
        for position, name in enumerate(node.input):
            if name not in initializers or name not in parameters or readers.get(name, 0) < 2:
                continue
            owner, _, attribute = name.rpartition(".")
            if (read is not None and name in read) or (read is None and owner == module):
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
        read = [t for t in read_parameters(_metadata(first), targets) if t in parameters and t in initializers]
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
    return _computed_again(graph, derived, nodes, "copies the exporter folded out of shared parameters ({}), "
                                                  "computed from them again, so that the parameters stay shared")


def _computed_again(graph, derived, nodes, note):
    """(records): the constants of ``derived`` (constant -> the parameter it is computed from) taken out of
    ``graph``'s initializers, and ``nodes`` (computing those that are still read) put first in it; ``note``
    names the parameters where it says {}."""
    if not derived:
        return []
    kept = [i for i in graph.initializer if i.name not in derived]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for node in reversed(nodes):
        graph.node.insert(0, node)
    return [{"rule": "tied_parameters", "op": "initializer", "count": len(derived), "nodes": sorted(derived),
             "note": note.format(", ".join(sorted(set(derived.values()))[:4]))}]


def _size(dims):
    size = 1
    for d in dims:
        size *= d
    return size


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
            covered.update(read_parameters(_metadata(node), targets))
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
        dropped = [t for t in read_parameters(metadata, targets)
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
            read.update(read_parameters(_metadata(node), targets))
    return sorted((parameters & read) - _covered(model, targets))


def retie_broadcast_copies(onnx, model, weights=None):
    """(records): constants the exporter folded out of a parameter broadcast, computed from it again, in
    ``model`` (changed in place).

    torch's default exporter folds, as constants, computations that read only initializers, parameters
    included: an ``nn.LSTMCell`` run from a zero state computes its first step's ``h @ W_hh.T + b_hh`` as the
    bias ``b_hh`` broadcast over the batch, and that lands in the file as a constant of its own (``linear``):
    trained as it stands, that step's share of the bias's gradient is lost. A floating-point constant no
    parameter is named after whose values are a parameter's broadcast to its shape (the parameter holding at
    least two different values, so that a constant of zeros or ones is no parameter's copy) becomes an Expand
    of that parameter."""
    from onnx import helper, numpy_helper
    import numpy

    targets = signature_targets(model)
    if not targets:
        return []
    graph = model.graph
    state = set(targets.values())
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
    initializers = [i for i in graph.initializer if i.data_type in floats]
    parameters = [i for i in initializers if i.name in state and len(i.dims) > 0]
    constants = [i for i in initializers if i.name not in state and len(i.dims) > 0]

    def spreads(source_dims, dims):  # numpy's broadcasting of a smaller tensor to ``dims``
        if len(source_dims) > len(dims) or _size(source_dims) >= _size(dims):
            return False
        return all(s in (1, d) for s, d in zip(source_dims[::-1], dims[::-1]))

    derived: Dict[str, str] = {}
    nodes = []
    for tensor in constants:
        dims = list(tensor.dims)
        # the values are read only where the shapes allow it: a large model's weights are not all loaded
        candidates = [p for p in parameters if p.data_type == tensor.data_type and spreads(list(p.dims), dims)]
        if not candidates:
            continue
        try:
            value = _value(numpy_helper, tensor, weights)
        except Exception:  # no data to compare
            continue
        for parameter in candidates:
            try:
                source = _value(numpy_helper, parameter, weights)
            except Exception:
                continue
            if (source == source.reshape(-1)[0]).all() or not (numpy.broadcast_to(source, value.shape) == value).all():
                continue
            shape = helper.make_tensor(tensor.name + "_tied_shape", onnx.TensorProto.INT64, [value.ndim], dims)
            graph.initializer.append(shape)
            nodes.append(helper.make_node("Expand", [parameter.name, shape.name], [tensor.name],
                                          name=tensor.name + "_tied"))
            derived[tensor.name] = parameter.name
            break
    return _computed_again(graph, derived, nodes, "constants the exporter folded out of parameters ({}) "
                                                  "broadcast, computed from them again, so that their gradient "
                                                  "reaches them")


def unread_parameters(onnx, model):
    """(records): the module's parameters that nothing in the file reads, said.

    torch's default exporter folds, as constants, computations that read only parameters: a weight-normalised
    Linear's weight (``g * v / |v|``, from ``parametrizations.weight.original0`` and ``original1``), a
    parameter expanded to a static batch. The parameters are then gone from the file, and the constant
    stands in for them: trained as it stands, that part of the model does not learn. A parameter the file
    holds in no form and that no operation of the file reads is said, but for a second name of a shared
    parameter, which torch.export lists too: there an operation of the parameter's own module reads the other
    name (an embedding tied to the head reads ``head.weight``)."""
    targets = signature_targets(model)
    if not targets:
        return []
    parameters = set(target for placeholder, target in targets.items() if placeholder.startswith("p_"))
    read: Set[str] = set()
    read_in: Dict[str, Set[str]] = {}  # module path -> the parameters its operations read
    for node in model.graph.node:
        if node.metadata_props:
            metadata = _metadata(node)
            found = read_parameters(metadata, targets)
            read.update(found)
            read_in.setdefault(module_path(metadata) or "", set()).update(found)

    def shared(name):  # its module's own operation read another module's parameter of its attribute's name
        module, _, attribute = name.rpartition(".")
        return any(t != name and t.rpartition(".")[2] == attribute for t in read_in.get(module, ()))

    unread = sorted(n for n in parameters - read - _covered(model, targets) if not shared(n))
    if not unread:
        return []
    return [{"rule": "unread_parameters", "op": "parameter", "count": len(unread), "nodes": unread,
             "note": "no operation of the file reads them: torch's exporter folded what they compute into "
                     "constants, which do not train (torch.onnx.export(..., optimize=False) keeps them)"}]
