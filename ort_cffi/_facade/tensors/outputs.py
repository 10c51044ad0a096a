"""What runs and steps do with the values the runtime returns: own each at once, copy an output that
aliases an input's memory, and release everything on failure."""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ort_cffi._facade.tensors.element_types import BITS_TYPES, STRING, byte_size, storage_dtype
from ort_cffi._facade.tensors.tensor import OnnxTensor, adopted_tensor, tensor_over_copy
from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._facade.tensors.value_info import calls, scratch, value_tensor_info
from ort_cffi._native.handles import pointer
from ort_cffi._native.tables import check_status, ffi


def adopt_outputs(out_values: Any, count: int) -> list[Optional[OnnxTensor]]:
    """Own, at once, every value a run or step allocated in ``out_values[0:count]`` (NULL slots give None)."""
    if count == 1:  # a loss alone: no slice of the C array (a new cdata object)
        value = out_values[0]
        return [adopted_tensor(value) if value else None]
    return [adopted_tensor(p) if p else None for p in out_values[0:count]]


def _own_copy(ptr: Any, info: TensorInfo) -> OnnxTensor:
    """A tensor over a numpy copy of the memory of the value ``ptr`` (a numeric tensor described by ``info``)."""
    storage = storage_dtype(info.onnxType)
    assert storage is not None  # not a string: the caller keeps those
    nbytes = byte_size(info.onnxType, info.getNumElements())
    copy = np.empty(nbytes // storage.itemsize, storage)
    if nbytes:
        data = scratch.data
        check_status(calls().GetTensorMutableData(ptr, data), "GetTensorMutableData")
        ffi.memmove(ffi.from_buffer(copy), data[0], nbytes)
    if info.onnxType not in BITS_TYPES:
        copy = copy.reshape(info.shape)
    return tensor_over_copy(copy, info.onnxType, info.shape)


def detach_aliased(values: list[Optional[OnnxTensor]], positions: Iterable[int]) -> None:
    """Give each output at ``positions`` (a graph input the model also lists as an output) memory of
    its own. ONNX Runtime returns such an output as the input's own tensor, over the memory the input
    was made over: the caller's numpy array, or the copy ort_cffi made of it, which is freed when
    that array or tensor goes away, and which the caller's later writes change. The output is
    replaced by a tensor over a copy, and closed; a string tensor, whose strings the runtime owns
    and shares, is kept. On failure every value is closed."""
    try:
        for position in positions:
            value = values[position]
            if value is None:  # a pinned output: the caller's own tensor
                continue
            info = value_tensor_info(pointer(value))
            if info.onnxType == STRING:
                continue
            values[position] = _own_copy(pointer(value), info)
            value.close()
    except BaseException:
        for value in values:
            if value is not None:
                value.close()
        raise


def check_outputs(status: Any, values: Sequence[Optional[OnnxTensor]], context: str) -> None:
    """After a run or step: on failure, release what it produced anyway, then raise."""
    if status:
        for value in values:
            if value is not None:
                value.close()
        check_status(status, context)
