"""OrtValues over memory the engine owns, and numpy views of the values the runtime hands it.

The engine keeps every tensor of a training session (parameters, gradients, optimizer moments) in numpy
buffers of its own and gives the runtime ``OrtValue``s that borrow them (``CreateTensorWithDataAsOrtValue``):
a step writes straight into them and nothing is copied. The owner of such a value keeps its array alive for as
long as the value lives.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ort_cffi._native.handles import process
from ort_cffi._native.tables import check_status, ffi, get_runtime

# ONNX element types (TensorProto.DataType) and the numpy type that stores each. bfloat16 has no numpy type:
# its bits are kept as uint16, which is all the engine does with them (copy, save, load).
NUMPY_OF: Dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
    16: np.dtype(np.uint16),
}
ELEMENT_OF: Dict[np.dtype, int] = {dtype: element for element, dtype in NUMPY_OF.items() if element != 16}
FLOAT = 1


def element_type(array: np.ndarray) -> int:
    try:
        return ELEMENT_OF[array.dtype]
    except KeyError:
        raise TypeError(f"the engine keeps no tensors of numpy type {array.dtype}") from None


def borrow(array: np.ndarray, element: int = 0) -> Any:
    """A new ``OrtValue*`` over ``array``'s memory (C-contiguous); the caller releases it and keeps
    ``array`` alive until then."""
    if not array.flags.c_contiguous:
        raise ValueError("the engine lends only contiguous memory to the runtime")
    rt = get_runtime()
    shape = ffi.new("int64_t[]", [int(d) for d in array.shape] or [0])
    out = ffi.new("OrtValue**")
    data = ffi.cast("void*", array.ctypes.data) if array.size else ffi.cast("void*", _EMPTY.ctypes.data)
    check_status(
        rt.api.CreateTensorWithDataAsOrtValue(pointer_of_memory_info(), data, array.nbytes, shape, array.ndim,
                                              element or element_type(array), out),
        "lending a buffer to the runtime",
    )
    return out[0]


_EMPTY = np.zeros(1, np.float64)  # a real address for tensors with no elements


def pointer_of_memory_info() -> Any:
    return process.memory_info()._handle()


def release(value: Any) -> None:
    if value != ffi.NULL:
        get_runtime().api.ReleaseValue(value)


def type_and_shape(value: Any) -> Tuple[int, Tuple[int, ...]]:
    """The element type and shape of a tensor ``OrtValue*``."""
    api = get_runtime().api
    is_tensor = ffi.new("int*")
    check_status(api.IsTensor(value, is_tensor), "reading a value")
    if not is_tensor[0]:
        raise TypeError("the value is not a tensor")
    info = ffi.new("OrtTensorTypeAndShapeInfo**")
    check_status(api.GetTensorTypeAndShape(value, info), "reading a tensor's type and shape")
    try:
        element = ffi.new("enum ONNXTensorElementDataType*")
        check_status(api.GetTensorElementType(info[0], element), "reading a tensor's element type")
        count = ffi.new("size_t*")
        check_status(api.GetDimensionsCount(info[0], count), "reading a tensor's rank")
        dims = ffi.new("int64_t[]", max(1, count[0]))
        check_status(api.GetDimensions(info[0], dims, count[0]), "reading a tensor's shape")
        return int(element[0]), tuple(int(dims[i]) for i in range(count[0]))
    finally:
        api.ReleaseTensorTypeAndShapeInfo(info[0])


def view(value: Any) -> np.ndarray:
    """A numpy view of a CPU tensor ``OrtValue*``'s memory, valid while the value lives."""
    element, shape = type_and_shape(value)
    if element not in NUMPY_OF:
        raise TypeError(f"the engine reads no tensors of ONNX element type {element}")
    dtype = NUMPY_OF[element]
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count == 0:
        return np.zeros(shape, dtype)
    data = ffi.new("void**")
    check_status(get_runtime().api.GetTensorMutableData(value, data), "reading a tensor's data")
    return np.frombuffer(ffi.buffer(data[0], count * dtype.itemsize), dtype).reshape(shape)


def copy_out(array: np.ndarray, into: Any) -> Any:
    """``array``'s values in a tensor the caller owns: ``into`` when it is one (written in place), else a new
    ``OrtValue*`` from the runtime's default allocator."""
    if into == ffi.NULL:
        shape = ffi.new("int64_t[]", [int(d) for d in array.shape] or [0])
        out = ffi.new("OrtValue**")
        check_status(get_runtime().api.CreateTensorAsOrtValue(process.allocator(), shape, array.ndim,
                                                              element_type(array), out), "CreateTensorAsOrtValue")
        into = out[0]
    target = view(into)
    if target.shape != array.shape or target.dtype != array.dtype:
        raise ValueError(f"the output tensor given is {target.dtype}{list(target.shape)}, not "
                         f"{array.dtype}{list(array.shape)}")
    target[...] = array
    return into


def c_strings(names: Sequence[str]) -> Tuple[Any, List[Any]]:
    """A ``const char*[]`` of ``names`` and the buffers it points into (keep both alive)."""
    keep = [ffi.new("char[]", name.encode()) for name in names]
    return ffi.new("const char*[]", keep or [ffi.NULL]), keep
