"""Elementwise operators: arithmetic with broadcasting, and activations."""
from __future__ import annotations

from typing import List, Optional

from ort_cffi.artifacts.builder.context import GradientContext, NodeView
from ort_cffi.artifacts.builder.registry import gradient

Grads = List[Optional[str]]


@gradient("Add", "Sub")
def add_sub(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    assert dy is not None
    out = node.outputs[0]
    da = g.unbroadcast(dy, a, out) if node.wants(0) else None
    db = None
    if node.wants(1):
        db = g.unbroadcast(dy, b, out)
        if node.op_type == "Sub":
            db = g.op("Neg", db)
    return [da, db]


@gradient("Mul")
def mul(g: GradientContext, node: NodeView) -> Grads:
    a, b = node.inputs[:2]
    dy = node.dy()
    out = node.outputs[0]
    da = g.unbroadcast(g.op("Mul", dy, b), a, out) if node.wants(0) else None
    db = g.unbroadcast(g.op("Mul", dy, a), b, out) if node.wants(1) else None
    return [da, db]


@gradient("Relu")
def relu(g: GradientContext, node: NodeView) -> Grads:
    return [g.ms("ReluGrad", node.dy(), node.outputs[0])[0]]


@gradient("Identity")
def identity(g: GradientContext, node: NodeView) -> Grads:
    return [node.dy()]
