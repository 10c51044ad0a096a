"""The table of gradient rules: one rule per operator, registered once, looked up by the engine.

A rule is a function ``rule(g, node) -> [gradient name or None, one per input of the node]``. ``g`` is the
``GradientContext`` (``context.py``) that emits the backward nodes; ``node`` is a ``NodeView`` that gives
the forward node's inputs, outputs, attributes and output gradients (``node.dy(i)``), and which input
gradients are wanted (``node.wants(i)``). Rules live in ``rules/``, one file per family; importing
``rules`` registers them all (the engine does).

A rule returns None for an input that takes no gradient (an index, a shape, a condition) or that is not
wanted. An operator through which no gradient can flow at all (a comparison, ``Shape``) is registered with
``no_gradient`` so that the engine can tell "no gradient here, by nature" from "no rule known".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# rule(g: GradientContext, node: NodeView) (context.py; not imported here: context imports this module)
Rule = Callable[[Any, Any], Sequence[Optional[str]]]
DEFAULT_DOMAIN = ""
MICROSOFT = "com.microsoft"


@dataclass(frozen=True)
class Registered:
    """A rule and what it says about its operator: the inputs a gradient can flow into (None: every
    input the rule answers for), and where the rule was written (for messages and the tests)."""

    op: str
    domain: str
    rule: Optional[Rule]  # None: no gradient flows through this operator by nature
    differentiable: Optional[Tuple[int, ...]]
    family: str


_RULES: Dict[Tuple[str, str], Registered] = {}


def _key(op: str, domain: str) -> Tuple[str, str]:
    return (DEFAULT_DOMAIN if domain == "ai.onnx" else domain, op)


def gradient(*ops: str, domain: str = DEFAULT_DOMAIN,
             inputs: Optional[Tuple[int, ...]] = None) -> Callable[[Rule], Rule]:
    """Register the decorated function as the gradient rule of ``ops``. ``inputs``: the positions of the
    inputs a gradient can flow into (default: any); the engine asks for no others."""

    def register(rule: Rule) -> Rule:
        family = rule.__module__.rsplit(".", 1)[-1]
        for op in ops:
            key = _key(op, domain)
            if key in _RULES:
                raise RuntimeError(f"two gradient rules for {domain or 'ai.onnx'}::{op}: "
                                   f"{_RULES[key].family} and {family}")
            _RULES[key] = Registered(op, domain, rule, inputs, family)
        return rule

    return register


def no_gradient(*ops: str, domain: str = DEFAULT_DOMAIN, family: str = "no_gradient") -> None:
    """Register ``ops`` as operators whose outputs carry no gradient back to any input (comparisons,
    shapes, argmax, random numbers): a path through them ends there."""
    for op in ops:
        key = _key(op, domain)
        if key in _RULES:
            raise RuntimeError(f"{domain or 'ai.onnx'}::{op} is registered twice")
        _RULES[key] = Registered(op, domain, None, (), family)


def lookup(op: str, domain: str) -> Optional[Registered]:
    """The registered rule of ``domain::op``, or None when no rule is known (``rules`` must have been
    imported: the engine imports it)."""
    return _RULES.get(_key(op, domain))


def registered() -> Iterator[Registered]:
    """Every registered operator, in a stable order (the tests are driven from this)."""
    for key in sorted(_RULES):
        yield _RULES[key]


def families() -> List[str]:
    return sorted({r.family for r in registered()})
