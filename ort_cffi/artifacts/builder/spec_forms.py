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
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

# the element-wise part each reduction keeps when it reduces nothing (None: the input itself)
_ELEMENTWISE: Dict[str, Optional[str]] = {
    "ReduceL1": "Abs", "ReduceL2": "Abs", "ReduceSumSquare": "Square", "ReduceLogSum": "Log",
    "ReduceLogSumExp": None, "ReduceSum": None, "ReduceMean": None, "ReduceMax": None, "ReduceMin": None,
    "ReduceProd": None,
}


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _constants(graph: onnx.GraphProto) -> Dict[str, np.ndarray]:
    """The values known before run time: initializers that are no graph input, and Constant nodes' values."""
    inputs = {v.name for v in graph.input}
    known = {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.name not in inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
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


def rewrite_changed_operators(model: onnx.ModelProto) -> List[str]:
    """Rewrite, in place, the top-level nodes of ``model`` whose answer differs between ONNX Runtime releases
    (see the module's notes); returns the names of the nodes rewritten."""
    graph = model.graph
    opset = _opset(model)
    known = _constants(graph)
    rewritten: List[str] = []
    nodes: List[onnx.NodeProto] = []
    for node in graph.node:
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
    return rewritten
