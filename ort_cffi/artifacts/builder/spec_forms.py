"""Forward operators whose answer changed between ONNX Runtime releases, written in a form every release
computes alike, before the model is differentiated (docs/guides/models.md, operators that changed meaning).

A gradient rule must match the forward the runtime computes. Where ONNX Runtime's releases compute different
things for one node, the training model would train on one and be differentiated as the other: the node is
rewritten into standard operators whose answer is the ONNX specification's on every release, and the
gradient rules then see those operators.

- **A reduction over nothing** (``noop_with_empty_axes=1`` with empty or absent axes, opset 18 on; ReduceSum
  from 13). The specification says the input is not reduced; onnx clarified in 2025 (onnx/onnx#7394) that the
  reduction's element-wise part still applies: ReduceL1 gives |x|, ReduceL2 sqrt(x^2) = |x|, ReduceSumSquare
  x^2, ReduceLogSum log(x), ReduceLogSumExp log(exp(x)) = x, the others x. ONNX Runtime 1.19.2 returns x for
  all of them; 1.31.1 computes the clarified answer (microsoft/onnxruntime#26436). The node becomes Abs, Mul,
  Log or Identity. Axes known only at run time cannot be told apart from an empty list: such a node stays,
  and the reductions whose gradient differs refuse it by name (rules/reduction.py).
- **An average pool whose ceil_mode windows reach past the padding.** The specification (and PyTorch) drop a
  last window that would start in the end padding, and divide a window with count_include_pad=1 by its taps
  inside the padded input. ONNX Runtime 1.31.1 does so; 1.19.2 keeps that window (an output of 0) and divides
  by the whole kernel. Where its input's spatial sizes are known, the pool becomes explicit: the input padded
  (zeros: the pads, then what the last window reaches beyond them), pooled with no padding and no ceil_mode,
  divided by the same pool over a mask of the taps that count (ones over the input, and over the pads with
  count_include_pad=1). A pool whose windows stay inside the padding computes alike on both and stays.
  MaxPool and LpPool (ceil_mode from opset 10 and 18) drop or keep that last window alike: there the pool
  takes ceil_mode=0 with the end pads that give the specification's windows (a pad is no part of a max, and
  adds 0 to a sum of |x|^p).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ort_cffi.artifacts.builder.folding import fold_constants


# the element-wise part each reduction keeps when it reduces nothing (None: the input itself)
_ELEMENTWISE: Dict[str, Optional[str]] = {
    "ReduceL1": "Abs", "ReduceL2": "Abs", "ReduceSumSquare": "Square", "ReduceLogSum": "Log",
    "ReduceLogSumExp": None, "ReduceSum": None, "ReduceMean": None, "ReduceMax": None, "ReduceMin": None,
    "ReduceProd": None,
}


_POOLS = ("AveragePool", "MaxPool", "LpPool")  # the pools with ceil_mode


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _constants(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    """The reductions' axes known before run time: initializers that are no graph input, and Constant nodes'
    values (only those: a model's weights may lie in external data, not read here)."""
    axes = {node.input[1] for node in graph.node if node.op_type in _ELEMENTWISE and len(node.input) > 1}
    inputs = {v.name for v in graph.input}
    known = {i.name: numpy_helper.to_array(i) for i in graph.initializer
             if i.name in axes and i.name not in inputs and i.data_location != onnx.TensorProto.EXTERNAL}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output[0] in axes:
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                known[node.output[0]] = numpy_helper.to_array(value.t)
            ints = next((a for a in node.attribute if a.name == "value_ints"), None)
            if ints is not None:
                known[node.output[0]] = np.array(list(ints.ints), np.int64)
    return known


def _reduces_nothing(node: onnx.NodeProto, opset: int, known: Dict[str, np.ndarray]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type not in _ELEMENTWISE:
        return False
    if opset < (13 if node.op_type == "ReduceSum" else 18):  # axes as an attribute: no noop_with_empty_axes
        return False
    noop = next((a.i for a in node.attribute if a.name == "noop_with_empty_axes"), 0)
    if not noop:
        return False
    if len(node.input) < 2 or not node.input[1]:
        return True
    value = known.get(node.input[1])
    return value is not None and value.size == 0


def _inferred(model: onnx.ModelProto) -> Dict[str, Tuple[int, List[Optional[int]]]]:
    """Element type and dims (None where symbolic) of each value shape inference can tell."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (a model onnx cannot infer: nothing is known, nothing is rewritten)
        return {}
    found: Dict[str, Tuple[int, List[Optional[int]]]] = {}
    for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            found[value.name] = (tensor.elem_type, [d.dim_value if d.HasField("dim_value") else None
                                                    for d in tensor.shape.dim])
    for initializer in model.graph.initializer:  # a parameter is one (no graph input) before it is trained
        found.setdefault(initializer.name, (initializer.data_type, [int(d) for d in initializer.dims]))
    return found


def _with_folded_sizes(model: onnx.ModelProto, found: Dict[str, Tuple[int, List[Optional[int]]]],
                       names: List[str]) -> None:
    """Fill in, for ``names``, the sizes shape inference left unknown that it can tell once the model's
    arithmetic on sizes is folded (folding.py), or that come out the same under both made-up assignments of
    the inputs' symbolic sizes (probe_shapes.py): they do not depend on them. A TorchScript export's
    ConstantPad1d computes its pads from the input's shape at run time, and with a symbolic batch onnx loses
    every spatial size after it, though none depends on the batch. Only a copy is folded: the model is
    rewritten as it is."""
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    parameters = [i.name for i in model.graph.initializer if i.data_type in _FLOATS]  # kept as they are
    types, probes = fold_constants(folded, parameters)
    for name in names:
        elem, known = types.get(name, (found[name][0] if name in found else 0, None))
        if known is not None:
            dims: Optional[List[Optional[int]]] = [d if isinstance(d, int) else None for d in known]
        else:
            dims = list(found[name][1]) if name in found else None
        sizes = [probe.get(name) for probe in probes]
        if dims is not None and len(sizes) >= 2 and all(s is not None and len(s) == len(dims) for s in sizes):
            dims = [d if d is not None else _agreed([s[axis] for s in sizes if s is not None])
                    for axis, d in enumerate(dims)]
        if dims is not None:
            found[name] = (elem, dims)


def _agreed(sizes: List[Optional[int]]) -> Optional[int]:
    """The size every probe gave, or None where they differ."""
    return sizes[0] if len(set(sizes)) == 1 else None


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)


def _ceil_mode(node: onnx.NodeProto) -> bool:
    return any(a.name == "ceil_mode" and a.i for a in node.attribute)


def _spatial_sizes_unknown(typed: Optional[Tuple[int, List[Optional[int]]]]) -> bool:
    return typed is None or len(typed[1]) < 3 or None in typed[1][2:]


def _pool_plan(node: onnx.NodeProto, dims: Optional[List[Optional[int]]]) -> Optional[Dict[str, Any]]:
    """For an AveragePool whose answer differs between releases: its windows as the specification takes them
    (output sizes, explicit pads, the extra end padding the last windows reach); else None."""
    if node.op_type not in _POOLS or node.domain not in ("", "ai.onnx") or dims is None:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    spatial = len(kernel)
    if not attrs.get("ceil_mode", 0) or not kernel or len(dims) != spatial + 2:
        return None
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    sizes = dims[2:]
    if any(size is None for size in sizes):
        return None  # symbolic spatial sizes: which windows exist is not known before run time
    strides = [int(v) for v in attrs.get("strides", [1] * spatial)]
    dilations = [int(v) for v in attrs.get("dilations", [1] * spatial)]
    pads = [int(v) for v in attrs.get("pads", [0] * (2 * spatial))]
    include = node.op_type == "AveragePool" and bool(attrs.get("count_include_pad", 0))
    outs, extra, differs = [], [], False
    for i, size in enumerate(sizes):
        assert size is not None
        begin, end = pads[i], pads[spatial + i]
        reach = (kernel[i] - 1) * dilations[i] + 1
        out = -(-(size + begin + end - reach) // strides[i]) + 1
        last_start = (out - 1) * strides[i]
        if last_start >= size + begin:  # a last window starting in the end padding: the specification drops it
            out -= 1
            differs = True
        beyond = max((out - 1) * strides[i] + reach - (size + begin + end), 0)
        if beyond and include:  # divided by its taps inside the padded input (1.19.2: the whole kernel)
            differs = True
        outs.append(out)
        extra.append(beyond)
    if not differs:
        return None
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads, "include": include,
            "outs": outs, "extra": extra, "explicit_dilations": "dilations" in attrs, "sizes": sizes}


def _floor_pool(node: onnx.NodeProto, plan: Dict[str, Any]) -> Optional[onnx.NodeProto]:
    """A MaxPool or LpPool of ``plan`` as the same operator with ceil_mode=0 and the end pads that give the
    specification's windows (a pad takes no part in a max, and adds 0 to a sum of |x|^p: the windows that both
    keep are the same); None where the pads that would take are not ones ONNX Runtime accepts (negative, or
    not smaller than the kernel)."""
    spatial = len(plan["kernel"])
    ends = []
    for i, size in enumerate(plan["sizes"]):
        reach = (plan["kernel"][i] - 1) * plan["dilations"][i] + 1
        ends.append((plan["outs"][i] - 1) * plan["strides"][i] + reach - plan["pads"][i] - size)  # floor: outs
    if any(end < 0 or end >= k for end, k in zip(ends, plan["kernel"])):
        return None
    replacement = onnx.NodeProto()
    replacement.CopyFrom(node)
    del replacement.attribute[:]
    for attribute in node.attribute:
        if attribute.name not in ("ceil_mode", "pads"):
            replacement.attribute.append(attribute)
    replacement.attribute.append(helper.make_attribute("pads", plan["pads"][:spatial] + ends))
    return replacement


def _explicit_pool(node: onnx.NodeProto, plan: Dict[str, Any], elem_type: int, opset: int,
                   initializers: List[onnx.TensorProto]) -> List[onnx.NodeProto]:
    """The pool of ``plan`` as Pad, AveragePool (no padding, no ceil_mode) and a division by the taps counted."""
    x, y = node.input[0], node.output[0]
    base = node.name or y
    spatial = len(plan["kernel"])
    begins, ends = plan["pads"][:spatial], plan["pads"][spatial:]
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)

    def constant(suffix: str, value: np.ndarray) -> str:
        initializers.append(numpy_helper.from_array(value, f"{base}/{suffix}"))
        return initializers[-1].name

    def pad(data: str, before: List[int], after: List[int], fill: float, out: str) -> onnx.NodeProto:
        pads = [0, 0] + list(before) + [0, 0] + list(after)
        if opset < 11:
            return helper.make_node("Pad", [data], [out], name=out, pads=pads, value=float(fill))
        return helper.make_node("Pad", [data, constant(f"{out}_pads", np.array(pads, np.int64)),
                                        constant(f"{out}_fill", np.array(fill, dtype))], [out], name=out)

    pool: Dict[str, Any] = {"kernel_shape": plan["kernel"], "strides": plan["strides"]}
    if plan["explicit_dilations"]:
        pool["dilations"] = plan["dilations"]
    whole = [e + x_ for e, x_ in zip(ends, plan["extra"])]
    ones = f"{base}/ones"
    shape = f"{base}/shape"
    nodes = [
        pad(x, begins, whole, 0.0, f"{base}/padded"),
        helper.make_node("AveragePool", [f"{base}/padded"], [f"{base}/sums"], name=f"{base}/sums", **pool),
        helper.make_node("Shape", [x], [shape], name=shape),
        helper.make_node("ConstantOfShape", [shape], [ones], name=ones,
                         value=numpy_helper.from_array(np.array([1], dtype))),
    ]
    if plan["include"]:  # the pads count, what lies beyond them does not
        nodes.append(pad(ones, begins, ends, 1.0, f"{base}/counted_pads"))
        nodes.append(pad(f"{base}/counted_pads", [0] * spatial, plan["extra"], 0.0, f"{base}/mask"))
    else:
        nodes.append(pad(ones, begins, whole, 0.0, f"{base}/mask"))
    nodes.append(helper.make_node("AveragePool", [f"{base}/mask"], [f"{base}/counts"], name=f"{base}/counts",
                                  **pool))
    # a window with no tap that counts has a sum of 0 too: any positive divisor below 1/kernel gives it 0
    floor = constant("floor", np.array(0.5 / float(np.prod(plan["kernel"])), dtype))
    nodes.append(helper.make_node("Max", [f"{base}/counts", floor], [f"{base}/divisor"], name=f"{base}/divisor"))
    nodes.append(helper.make_node("Div", [f"{base}/sums", f"{base}/divisor"], [y], name=base))
    return nodes


def _redeclare(graph: onnx.GraphProto, name: str, outs: List[int]) -> None:
    """The rewritten pool's output declared with the specification's spatial sizes (a declaration made for
    another release's answer would contradict it)."""
    for values in (graph.value_info, graph.output):
        for value in values:
            if value.name == name and value.type.tensor_type.HasField("shape"):
                dims = value.type.tensor_type.shape.dim
                for dim, size in zip(list(dims)[2:], outs):
                    dim.Clear()
                    dim.dim_value = size


def rewrite_changed_operators(model: onnx.ModelProto) -> List[str]:
    """Rewrite, in place, the top-level nodes of ``model`` whose answer differs between ONNX Runtime releases
    (see the module's notes); returns the names of the nodes rewritten."""
    graph = model.graph
    opset = _opset(model)
    known = _constants(graph)
    types = _inferred(model) if any(n.op_type in _POOLS for n in graph.node) else {}
    unsized = [n.input[0] for n in graph.node if n.op_type in _POOLS and n.input and _ceil_mode(n)
               and _spatial_sizes_unknown(types.get(n.input[0]))]
    if unsized:
        _with_folded_sizes(model, types, unsized)
    rewritten: List[str] = []
    nodes: List[onnx.NodeProto] = []
    initializers: List[onnx.TensorProto] = []
    for node in graph.node:
        typed = types.get(node.input[0]) if node.input else None
        plan = _pool_plan(node, typed[1] if typed else None)
        if plan is not None and typed is not None:
            if node.op_type == "AveragePool":
                nodes.extend(_explicit_pool(node, plan, typed[0] or onnx.TensorProto.FLOAT, opset, initializers))
            else:
                floored = _floor_pool(node, plan)
                if floored is None:
                    nodes.append(node)
                    continue
                nodes.append(floored)
            _redeclare(graph, node.output[0], plan["outs"])
            rewritten.append(node.name or node.output[0])
            continue
        if not _reduces_nothing(node, opset, known):
            nodes.append(node)
            continue
        x, y = node.input[0], node.output[0]
        form = _ELEMENTWISE[node.op_type]
        name = node.name or y
        if form == "Square":
            replacement = helper.make_node("Mul", [x, x], [y], name=name)
        else:
            replacement = helper.make_node(form or "Identity", [x], [y], name=name)
        nodes.append(replacement)
        rewritten.append(name)
    if rewritten:  # the axes they read, now unread, go with the models' unread constants later
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(initializers)
    return rewritten
