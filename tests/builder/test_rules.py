"""Every gradient rule of ort_cffi's builder agrees with central finite differences of the forward model,
both run by ONNX Runtime. Driven from the registry: a rule without a case fails the suite."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Dict, List

import pytest
from gradcheck import Case, check

import ort_cffi.artifacts.builder.rules  # noqa: F401  (registers the rules)
from ort_cffi.artifacts.builder.registry import registered

HERE = Path(__file__).resolve().parent
CASES: Dict[str, List[Case]] = {}
for path in sorted(HERE.glob("cases_*.py")):  # one module of cases per family of rules
    module = importlib.import_module(path.stem)
    for op, found in module.CASES.items():
        assert op not in CASES, f"{op} has cases in two modules"
        CASES[op] = found

RULES = sorted({r.op for r in registered() if r.rule is not None})  # an op of two domains: one entry


@pytest.mark.parametrize("op", RULES)
def test_every_rule_has_a_case(op: str) -> None:
    assert CASES.get(op), f"the gradient rule of {op} has no finite-difference case in tests/builder/cases_*.py"


ALL = [(op, c) for op in RULES for c in CASES.get(op, [])]


@pytest.mark.parametrize("op,c", ALL, ids=[c.name for _, c in ALL])
def test_rule_matches_finite_differences(op: str, c: Case) -> None:
    assert any(n.op_type == op for n in c.nodes), f"case {c.name} does not use {op}"
    comparisons = check(c)
    bad = [f"{x.parameter}: analytic {x.analytic:.6g}, numeric {x.numeric:.6g}" for x in comparisons
           if not x.ok(c.rtol, c.atol)]
    assert not bad, f"{c.name}: " + "; ".join(bad)
