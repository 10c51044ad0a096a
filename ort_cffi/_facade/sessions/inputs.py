"""Inputs of a run or step, checked before the native call (facade, over ``tensor.py``).

Each input is an ``OnnxTensor`` or a numpy array; ``checked_input`` turns it into the tensor the
call passes and checks it against the model's signature (``signature.InputSpec``): element type,
rank, fixed dimensions, and no zero-sized dimension (ONNX Runtime 1.19 crashes on empty batches in
common operators). A tensor that passed remembers the spec it passed, so that the per-step cost of
passing it again is one identity test (the training session's hot path relies on it).
"""
from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np

from ort_cffi._facade.sessions.signature import InputSpec, mismatch, refuse
from ort_cffi._facade.tensors.conversions import refuse_dtype, string_elements
from ort_cffi._facade.tensors.element_types import DTYPE_TO_ONNX, STRING, OnnxTensorType
from ort_cffi._facade.tensors.tensor import OnnxTensor, OnnxValue
from ort_cffi._native.errors import OrtException

ANY_INPUT = InputSpec.of(0, None)  # the spec of an input whose signature is unknown: only emptiness is refused


def _refuse_empty(name: str, shape: Tuple[int, ...]) -> None:
    raise OrtException.invalid_argument(
        f"input {name!r} has a zero-sized dimension (shape {list(shape)}): "
        "ONNX Runtime crashes on empty batches, so they are refused"
    )


def _array_type(array: np.ndarray, what: str) -> OnnxTensorType:
    """The element type a tensor made over ``array`` would have (refusing what cannot be one)."""
    if array.dtype.kind in "USO":
        string_elements(array, what)  # an object array must hold str or bytes
        return STRING
    dtype = array.dtype
    onnx_type = DTYPE_TO_ONNX.get(dtype if dtype.byteorder in ("=", "|") else dtype.newbyteorder("="))
    if onnx_type is None:
        raise refuse_dtype(dtype, what)
    return onnx_type


def checked_input(what: str, name: str, value: Any, spec: InputSpec, made: List[OnnxTensor]) -> OnnxTensor:
    """The tensor for input ``name`` of a run or step, given as an ``OnnxTensor`` or a numpy array,
    checked before the native call: its element type, rank and fixed dimensions against ``spec``
    (an ``OrtException`` naming the input, the expected and the given), and refused when it has a
    zero-sized dimension. A tensor made here over an array is appended to ``made`` (the caller
    closes it after the call). A tensor that passes remembers ``spec``, so that passing it again
    costs one identity test."""
    if isinstance(value, OnnxTensor):
        info = value.getInfo()  # raises if closed
        onnx_type, shape = info.onnxType, info.shape
        array = None
    elif isinstance(value, OnnxValue):
        raise OrtException.invalid_argument(f"input {name!r}: only tensors are supported, not {type(value).__name__}")
    elif isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        onnx_type, shape = _array_type(array, f"input {name!r}"), array.shape
    else:
        raise OrtException.invalid_argument(f"input {name!r} must be an OnnxTensor or a numpy array, not {type(value).__name__}")
    reason = mismatch(spec, onnx_type, shape)
    if reason is not None:
        raise refuse(what, name, spec, onnx_type, shape, reason)
    if 0 in shape:
        _refuse_empty(name, shape)
    if array is None:
        tensor = value
    else:
        tensor = OnnxTensor.createTensor(None, array)
        made.append(tensor)
    tensor.passed_spec = spec
    tensor.passed_dims = shape
    return tensor
