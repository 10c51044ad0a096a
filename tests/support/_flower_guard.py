"""Flower's deprecations as test failures: a ``DeprecationWarning`` raised from Flower's code is an error
(``filterwarnings("error::DeprecationWarning:flwr")`` on the federated test modules), and so is a
deprecation Flower only logs (its ``DEPRECATED FEATURE`` records, the way Flower 1.42 announces most of
them). In Flower's child processes the same text must not appear in their logs (the tests read them)."""
from __future__ import annotations

import logging
import os
import re
import warnings
from typing import Any, Iterator, List, Tuple

import pytest

# What Flower prints when something deprecated is used: its DEPRECATED FEATURE records, and the
# "... is deprecated" warnings of its command-line tools.
DEPRECATION = re.compile(r"DEPRECATED FEATURE|\bis deprecated\b|\bare deprecated\b", re.I)


def import_flower() -> Tuple[Any, Any]:
    """``ort_cffi.cli.federated`` and ``ort_cffi.flower``, with telemetry off. Flower imports typer, which warns
    about click's deprecations while it loads (not Flower's own): those are let through at import."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"(typer|click)(\.|$)")
        warnings.filterwarnings("error", category=DeprecationWarning, module=r"flwr(\.|$)")
        from ort_cffi import flower
        from ort_cffi.cli import federated
    return federated, flower


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if DEPRECATION.search(message):
            self.found.append(message)


@pytest.fixture
def flower_deprecations() -> Iterator[None]:
    """Fail the test when Flower logged a deprecation in this process."""
    collect = _Collect()
    logger = logging.getLogger("flwr")
    logger.addHandler(collect)
    try:
        yield
    finally:
        logger.removeHandler(collect)
    assert not collect.found, f"Flower logged deprecations: {collect.found}"


def deprecations_in(text: str) -> List[str]:
    """The lines of a Flower process's log that announce a deprecation."""
    return [line for line in text.splitlines() if DEPRECATION.search(line)]
