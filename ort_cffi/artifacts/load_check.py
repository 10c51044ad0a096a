"""The half of the artifacts' load check that needs no runtime: the checkpoint held against the training model.

``generate._check_loads`` has the runtime open the training, eval and optimizer models over the nominal
checkpoint (names, element types and trainable flags, no data), which costs what the graphs cost rather than
what the parameters do. What that leaves unchecked is the real checkpoint: this module reads its layout
through a memory map (``ort_cffi.api.checkpoint_file``: only its tables are touched, never the tensors' data)
and compares it with the nominal one and with the parameter inputs the training model declares.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ort_cffi.api.checkpoint_file import CheckpointLayout, StoredParameter, read_layout

# Bytes per element of the ONNX element types a checkpoint may hold (the loader's list, docs/internals/runtime.md §9).
_ITEM_SIZES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_SHOWN = 3  # names listed in a message


def _declared_inputs(training_model: Path) -> Dict[str, Tuple[int, Tuple[Optional[int], ...]]]:
    """The training model's inputs: name -> (ONNX element type, dims; None for a dim given by name or not at all).
    Read without its external data (a training model has none: its parameters are inputs)."""
    import onnx

    model = onnx.load(os.fspath(training_model), load_external_data=False)
    declared = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
        declared[value.name] = (tensor.elem_type, dims)
    return declared


def _names(names: List[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _parameter_problem(stored: StoredParameter, declared: Tuple[int, Tuple[Optional[int], ...]]) -> Optional[str]:
    element_type, dims = declared
    name = stored.name
    if stored.onnx_type != element_type:
        return f"parameter {name!r} is stored as ONNX element type {stored.onnx_type}, the training model takes {element_type}"
    if len(stored.dims) != len(dims) or any(d is not None and d != s for d, s in zip(dims, stored.dims)):
        shown = [d if d is not None else "?" for d in dims]
        return f"parameter {name!r} is stored with shape {list(stored.dims)}, the training model takes {shown}"
    size = _ITEM_SIZES.get(stored.onnx_type)
    expected = math.prod(stored.dims) * size if size is not None else None
    if stored.data_at is None or (expected is not None and stored.data_at[1] != expected):
        held = "no data" if stored.data_at is None else f"{stored.data_at[1]} bytes"
        return f"parameter {name!r} holds {held} in the checkpoint, its shape {list(stored.dims)} needs {expected}"
    return None


def checkpoint_mismatch(checkpoint: Path, nominal_checkpoint: Path, training_model: Path) -> Optional[str]:
    """What makes ``checkpoint`` fail to load with ``training_model`` where its nominal form loads, in words;
    None when nothing does. A checkpoint whose data lies in ``<checkpoint>.data`` (past 1.8 GiB) is compared
    by its tables only (names, types, shapes)."""
    real: Optional[CheckpointLayout] = read_layout(os.fspath(checkpoint))
    nominal = read_layout(os.fspath(nominal_checkpoint))
    if real is None or real.nominal:
        return f"{checkpoint.name} is not a checkpoint the runtime can follow" if real is None else \
            f"{checkpoint.name} is a nominal checkpoint (shapes only), not the parameters"
    if nominal is None:
        return f"{nominal_checkpoint.name} is not a checkpoint the runtime can follow"
    missing = [n for n in nominal.parameters if n not in real.parameters]
    extra = [n for n in real.parameters if n not in nominal.parameters]
    if missing or extra:
        return "; ".join(part for part in (
            f"the checkpoint lacks {_names(missing)}" if missing else "",
            f"the checkpoint holds {_names(extra)}, which the training model does not take" if extra else "") if part)
    flags = [n for n, p in real.parameters.items() if p.requires_grad != nominal.parameters[n].requires_grad]
    if flags:
        return f"the checkpoint and the training model disagree on which parameters train: {_names(flags)}"
    declared = _declared_inputs(training_model)
    external = (checkpoint.parent / (checkpoint.name + ".data")).is_file()
    for name, stored in real.parameters.items():
        if name not in declared:
            return f"the training model takes no input {name!r}, which the checkpoint holds"
        if external and stored.data_at is None:  # the data is in the .data file: compare the tables only
            stored = stored._replace(data_at=(0, math.prod(stored.dims) * _ITEM_SIZES.get(stored.onnx_type, 0)))
        problem = _parameter_problem(stored, declared[name])
        if problem is not None:
            return problem
    return None
