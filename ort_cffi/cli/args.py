"""Argument types the commands share (argparse reports a bad value as a usage error, exit 2), and messages
put in the command line's words."""
from __future__ import annotations

import argparse
import math
import re


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def fraction(text: str) -> float:
    value = float(text)
    if not (0 < value < 1):
        raise argparse.ArgumentTypeError(f"must be a fraction between 0 and 1, got {text}")
    return value


def number_list(text: str) -> "list[float]":
    """One number, or several separated by commas (one per channel): ``0.5`` or ``0.485,0.456,0.406``."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or numbers separated by commas, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"must be finite numbers, got {text!r}")
    return values


def parameter_rows(text: str) -> "tuple[str, list[int]]":
    """A parameter and row indices along its first axis: ``embeddings.weight=0`` or ``table=0,3``."""
    name, sign, rows = text.rpartition("=")
    try:
        indices = [int(part) for part in rows.split(",")] if sign and name else []
    except ValueError:
        indices = []
    if not indices or any(i < 0 for i in indices):
        raise argparse.ArgumentTypeError(f"must be NAME=ROW or NAME=ROW,ROW,... (rows from 0), got {text!r}")
    return name, indices


# The API's parameter words and the command-line flags that set them (--trainable sets requires_grad).
_FLAG_WORDS = {"requires_grad": "--trainable", "frozen_params": "--frozen", "frozen_rows": "--frozen-rows"}


def in_flag_words(message: str) -> str:
    """A message of ``generate_artifacts`` in the words of the command line: the flags the user typed, not
    the API parameters they set."""
    return re.sub(r"\b(" + "|".join(_FLAG_WORDS) + r")\b", lambda m: _FLAG_WORDS[m.group(1)], message)
