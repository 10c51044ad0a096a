"""Reading a value's element type and shape from the runtime, on the hot path (every output a step
returns): the C functions looked up once, per-thread out-parameters, and the owners of the runtime's type
descriptions (``TensorTypeAndShapeInfo``, ``TypeInfo``)."""
from __future__ import annotations

import threading
from typing import Any, Optional, Tuple

import numpy as np

from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._native.errors import OrtException
from ort_cffi._native.handles import NativeHandle
from ort_cffi._native.tables import check_status, ffi, get_runtime

_SCALAR_POINTER_POINTERS = {  # to read a one-element tensor directly (float16 has no C type)
    np.dtype(dtype): ffi.typeof(ctype)
    for dtype, ctype in (
        (np.float32, "float**"), (np.float64, "double**"), (np.bool_, "_Bool**"),
        (np.int8, "int8_t**"), (np.int16, "int16_t**"), (np.int32, "int32_t**"), (np.int64, "int64_t**"),
        (np.uint8, "uint8_t**"), (np.uint16, "uint16_t**"), (np.uint32, "uint32_t**"), (np.uint64, "uint64_t**"),
    )
}


class Scratch(threading.local):
    """Out-parameters for reading a tensor's type and shape, allocated once per thread (this runs
    for every output a step returns)."""

    def __init__(self) -> None:
        self.info = ffi.new("OrtTensorTypeAndShapeInfo**")
        self.element_type = ffi.new("ONNXTensorElementDataType*")
        self.count = ffi.new("size_t*")
        self.dims = ffi.new("int64_t[]", 16)
        self.data = ffi.new("void**")
        self.value = ffi.new("OrtValue**")
        # ``data`` seen as a pointer to a pointer to each scalar type: a one-element tensor is read
        # with two index operations (an ``ffi.cast`` per read costs as much as a native call)
        self.scalar_views = {dtype: ffi.cast(ctype, self.data) for dtype, ctype in _SCALAR_POINTER_POINTERS.items()}


scratch = Scratch()


class Calls:
    """The C functions the per-output path calls, looked up once (each access to a field of the
    ``OrtApi`` struct makes a new cdata object)."""

    def __init__(self, api: Any) -> None:
        self.GetTensorTypeAndShape = api.GetTensorTypeAndShape
        self.GetTensorElementType = api.GetTensorElementType
        self.GetDimensionsCount = api.GetDimensionsCount
        self.GetDimensions = api.GetDimensions
        self.ReleaseTensorTypeAndShapeInfo = api.ReleaseTensorTypeAndShapeInfo
        self.GetTensorMutableData = api.GetTensorMutableData
        self.ReleaseValue = api.ReleaseValue
        self.CreateTensorWithDataAsOrtValue = api.CreateTensorWithDataAsOrtValue


_calls: Optional[Calls] = None


def calls() -> Calls:
    """The per-output C functions, looked up on first use (the runtime loads then)."""
    global _calls
    if _calls is None:
        _calls = Calls(get_runtime().api)
    return _calls


def read_tensor_info(info_ptr: Any, with_names: bool = False) -> TensorInfo:
    """A ``TensorInfo`` from an ``OrtTensorTypeAndShapeInfo*`` (which the caller still owns). On the
    hot path (every output read): per-thread out-parameters. ``with_names``: also the symbolic
    dimension names (``GetSymbolicDimensions``; a model signature's)."""
    c = _calls or calls()
    element_type, count = scratch.element_type, scratch.count
    status = c.GetTensorElementType(info_ptr, element_type)
    if status:
        check_status(status, "GetTensorElementType")
    status = c.GetDimensionsCount(info_ptr, count)
    if status:
        check_status(status, "GetDimensionsCount")
    rank = count[0]
    shape: Tuple[int, ...] = ()
    names: Tuple[str, ...] = ()
    if rank:
        dims = scratch.dims if rank <= 16 else ffi.new("int64_t[]", rank)
        check_status(c.GetDimensions(info_ptr, dims, rank), "GetDimensions")
        shape = tuple(dims[0:rank])
        if with_names:
            symbolic = ffi.new("const char*[]", rank)
            check_status(get_runtime().api.GetSymbolicDimensions(info_ptr, symbolic, rank), "GetSymbolicDimensions")
            names = tuple(ffi.string(p).decode("utf-8", "replace") if p else "" for p in symbolic)
    return TensorInfo(element_type[0], shape, names)


class TensorTypeAndShapeInfo(NativeHandle):
    """Owns an ``OrtTensorTypeAndShapeInfo*`` (``ReleaseTensorTypeAndShapeInfo``)."""

    _kind = "OrtTensorTypeAndShapeInfo"

    def __init__(self, ptr: Any) -> None:
        self._own(ptr, get_runtime().api.ReleaseTensorTypeAndShapeInfo)

    def toTensorInfo(self) -> TensorInfo:
        """The element type and shape it describes."""
        return read_tensor_info(self._handle())


class TypeInfo(NativeHandle):
    """Owns an ``OrtTypeInfo*`` (``ReleaseTypeInfo``), e.g. a session input's signature."""

    _kind = "OrtTypeInfo"

    def __init__(self, ptr: Any) -> None:
        self._own(ptr, get_runtime().api.ReleaseTypeInfo)

    def toTensorInfo(self, what: str) -> TensorInfo:
        """The tensor type, shape and dimension names (``CastTypeInfoToTensorInfo``: borrowed, owned by this TypeInfo)."""
        rt = get_runtime()
        tensor_info = ffi.new("const OrtTensorTypeAndShapeInfo**")
        check_status(rt.api.CastTypeInfoToTensorInfo(self._handle(), tensor_info), "CastTypeInfoToTensorInfo")
        if not tensor_info[0]:
            raise OrtException.invalid_argument(f"{what} is not a tensor")
        return read_tensor_info(tensor_info[0], with_names=True)


def value_tensor_info(value_ptr: Any) -> TensorInfo:
    """The type and shape of a tensor value (``GetTensorTypeAndShape``). On the hot path (every output
    read): the info object lives for these lines only, released in ``finally``, with no Python owner."""
    c, out = _calls or calls(), scratch.info
    status = c.GetTensorTypeAndShape(value_ptr, out)
    if status:
        check_status(status, "GetTensorTypeAndShape")
    info_ptr = out[0]
    try:
        return read_tensor_info(info_ptr)
    finally:
        c.ReleaseTensorTypeAndShapeInfo(info_ptr)
