"""What the artifacts child's graph modules read from a model, in one place: element types and their names,
the opset, the subgraphs, the shapes shape inference can tell, attributes and node names.

How the child's modules find each other. ``_child.py`` runs ONNX Runtime's generator in a child process,
possibly under another interpreter where ort_cffi is not installed, or where importing the ``ort_cffi``
package would load the binding for nothing. So it loads this folder's graph modules (``graph_facts``,
``rewrite_rules``, ``rewrites``, ``loss_reading``, ``batchnorm``, ``eval_graph``, ``module_names``,
``parameter_selection``, ``ir_opset``, and ``refusal``, the child's error) by file location, under the
names ``SIBLING_PREFIX + name``, the modules they import first. A module that imports a sibling takes it
from ``sys.modules`` under that name, and only where it is absent (imported as ``ort_cffi.artifacts.X``, as
the tests and the package do) from the package: ``sibling(...)`` below, copied by nobody, is the one way.

Python 3.8 syntax and the standard library only at import time (``onnx`` inside the functions that read
models): the child imports this module before it knows whether onnx is installed, and says so as a refusal.
"""
import sys
from typing import Any, Dict

# TensorProto element types (onnx.TensorProto's numbers, here without importing onnx) that a parameter can be
# trained in, with their names (float8 types have no gradient kernels).
FLOAT_TYPE_NAMES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
FLOAT_TYPES = frozenset(FLOAT_TYPE_NAMES)
INT64 = 7
DEFAULT_DOMAINS = ("", "ai.onnx")
ML_DOMAIN = "ai.onnx.ml"
INFERRED_NAME_PREFIX = "unk__"  # shape inference's names for sizes it cannot tell
SIBLING_PREFIX = "_ort_cffi_artifacts_"


def sibling(name):
    """The graph module ``name`` of this folder: as the child loaded it by file location, else from the
    package (the module docstring says why both)."""
    loaded = sys.modules.get(SIBLING_PREFIX + name)
    if loaded is not None:
        return loaded
    import importlib
    return importlib.import_module("ort_cffi.artifacts." + name)


def type_name(onnx, elem_type):
    """How messages name element type ``elem_type``: numpy's name, else onnx's (``onnx`` is the module)."""
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except Exception:  # bfloat16 and float8 have no numpy dtype in older onnx, newer types no name either
        try:
            return onnx.TensorProto.DataType.Name(elem_type).lower()
        except ValueError:
            return "type {} (unknown to onnx {})".format(elem_type, onnx.__version__)


def graph_and_subgraphs(graph):
    """The graph and every subgraph (If, Loop, Scan bodies) inside it."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                for sub in graph_and_subgraphs(attribute.g):
                    yield sub
            for sub_graph in attribute.graphs:
                for sub in graph_and_subgraphs(sub_graph):
                    yield sub


def readers(graph):
    """name -> how many node inputs read it, in ``graph`` and the subgraphs inside it (a Loop's body reading an
    initializer of the main graph counts)."""
    counts: Dict[str, int] = {}
    for inner in graph_and_subgraphs(graph):
        for node in inner.node:
            for name in node.input:
                counts[name] = counts.get(name, 0) + 1
    return counts


def default_opset(model):
    """The model's opset of the default (ONNX) domain, or None when it imports none."""
    for opset in model.opset_import:
        if opset.domain in DEFAULT_DOMAINS:
            return opset.version
    return None


def attributes(node):
    """name -> value of ``node``'s attributes."""
    from onnx import helper
    return dict((a.name, helper.get_attribute_value(a)) for a in node.attribute)


def attribute(node, name, default):
    for found in node.attribute:
        if found.name == name:
            from onnx import helper
            return helper.get_attribute_value(found)
    return default


def node_description(node):
    """How messages name a node: its operator and name."""
    return "{} node {!r}".format(node.op_type, node.name) if node.name else "an unnamed {} node".format(node.op_type)


def shape_dims(tensor_type, keep_names=True, keep_inferred_names=True):
    """The dims of a ``TypeProto.Tensor``'s shape, or None when it has none: ints for fixed sizes; symbolic
    names (``keep_names``; shape inference's own ``unk__`` names too with ``keep_inferred_names``) or None."""
    if not tensor_type.HasField("shape"):
        return None
    dims = []
    for dim in tensor_type.shape.dim:
        which = dim.WhichOneof("value")
        if which == "dim_value":
            dims.append(dim.dim_value)
            continue
        name = dim.dim_param if which == "dim_param" and keep_names else None
        if name and not keep_inferred_names and name.startswith(INFERRED_NAME_PREFIX):
            name = None
        dims.append(name or None)
    return dims


def tensor_types(model, keep_names=False, data_prop=False):
    """name -> (elem_type, dims or None) of the main graph's tensors that shape inference can tell (what the
    model declares where inference fails: custom domains, broken models). Dims are ints, or for sizes it
    cannot fix None, or with ``keep_names`` the model's symbolic names (not inference's ``unk__`` ones).
    ``data_prop``: inference follows Shape values into Reshape, Concat, ... (torch's GroupNorm export)."""
    from onnx import shape_inference
    try:
        graph = shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop).graph
    except Exception:
        graph = model.graph
    found: Dict[str, Any] = {}
    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        if value.type.WhichOneof("value") != "tensor_type":
            found.setdefault(value.name, (0, None))
            continue
        tensor = value.type.tensor_type
        if tensor.elem_type or value.name not in found:
            found[value.name] = (tensor.elem_type, shape_dims(tensor, keep_names, keep_inferred_names=False))
    for initializer in graph.initializer:  # what an initializer holds is its shape, whatever is declared
        found[initializer.name] = (initializer.data_type, list(initializer.dims))
    return found


def show_dims(dims):
    """[N, 3, ?] for dims of ints, names and None; "of unknown shape" for None."""
    if dims is None:
        return "of unknown shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
