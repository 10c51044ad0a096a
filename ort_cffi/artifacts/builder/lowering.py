"""Forward operators whose ONNX Runtime 1.19.2 CPU kernel is scalar code, written out in the training model
with vectorised kernels once the backward pass is built, so that their gradient rules still see the one
operator (Softplus's gradient stays dy * Sigmoid(x), two kernels, rather than the gradients of a dozen).

- Softplus: ONNX Runtime computes it element by element with the C library's exp and log1p. The same value
  as Relu(x) + log1p(exp(-|x|)), in the form the preparation for ONNX Runtime's generator writes
  (``rewrite_rules.softplus_of``), took 1.0 ms where the kernel took 3.8 ms on 524288 floats, within 1.7e-7
  relative of the exact value (the kernel: 1.2e-7).
- Mish (opset 18) runs through that same Softplus kernel: x * Tanh(Softplus(x)), Softplus written out.

Measured on the zoo's mish_cnn (three Softplus on the path): a step 1.08x as long as with ONNX Runtime's
artifacts before this (which run that decomposition), 0.76-0.79x after it (docs/guides/performance.md).
The eval model keeps the exported form, as with the fusions."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import onnx
from onnx import TensorProto, helper

from ort_cffi.artifacts import rewrite_rules
from ort_cffi.artifacts.builder.context import Dims, unique_name

LOWERED_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE)


class _Writer:
    """What ``rewrite_rules``' forms ask of an emitter (``one`` and ``const``), writing into a list of nodes
    with names derived from the node it stands for and unique in the graph."""

    def __init__(self, taken: Set[str], label: str, elem_type: int):
        self.taken, self.label, self.elem_type = taken, label, elem_type
        self.nodes: List[onnx.NodeProto] = []

    def name(self, hint: str) -> str:
        return unique_name(self.taken, f"{self.label}/{hint}")

    def one(self, op_type: str, inputs: Sequence[str], output: Optional[str] = None, **attributes: Any) -> str:
        output = output or self.name(f"{op_type}_out")
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=self.name(op_type), **attributes))
        return output

    def const(self, value: float) -> str:
        tensor = helper.make_tensor(self.name("const"), self.elem_type, [], [float(value)])
        return self.one("Constant", [], value=tensor)


def _softplus(w: _Writer, node: onnx.NodeProto) -> None:
    rewrite_rules.softplus_of(w, node.input[0], node.output[0])


def _mish(w: _Writer, node: onnx.NodeProto) -> None:
    x = node.input[0]
    w.one("Mul", [x, w.one("Tanh", [rewrite_rules.softplus_of(w, x)])], node.output[0])


LOWERINGS = {"Softplus": _softplus, "Mish": _mish}


def lower_slow_kernels(graph: onnx.GraphProto, types: Dict[str, Tuple[int, Dims]]) -> Dict[str, int]:
    """Write out, in place, each default-domain node of ``LOWERINGS`` in ``graph`` whose input is float or
    double (``types``: name -> (element type, dims)). Returns how many of each were written out."""
    taken = {name for node in graph.node for name in list(node.input) + list(node.output) + [node.name]}
    taken.update(i.name for i in graph.initializer)
    taken.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    counts: Dict[str, int] = {}
    nodes: List[onnx.NodeProto] = []
    for node in graph.node:
        lower = LOWERINGS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        elem_type = types.get(node.input[0], (0, None))[0] if lower is not None else 0
        if lower is None or elem_type not in LOWERED_TYPES:
            nodes.append(node)
            continue
        writer = _Writer(taken, node.name or f"{node.output[0]}/{node.op_type}", elem_type)
        lower(writer, node)
        nodes.extend(writer.nodes)
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    if counts:
        del graph.node[:]
        graph.node.extend(nodes)
    return counts
