"""Facade: ``OnnxValue``, ``OnnxTensor`` and ``TensorInfo`` (Java's ai.onnxruntime classes), numpy in and out.

The numpy boundary, in one place:

- ``DTYPE_TO_ONNX`` maps numpy dtypes to ONNX element types (every numeric type the CPU runtime
  handles, plus bool); anything else (strings, objects, complex) is refused with a clear error.
- ``OnnxTensor.createTensor(env, array)`` does not copy a C-contiguous, aligned, native-order array:
  the tensor is created over its memory (``CreateTensorWithDataAsOrtValue``) and keeps the array
  alive. Any other array (Fortran order, strided views, byte-swapped) is copied once.
- ``getValue()`` always returns a fresh array the caller owns (0-d for a scalar): nothing handed
  out aliases memory that ``close()`` frees.
"""
from __future__ import annotations

import enum
import threading
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._errors import OrtException
from ._handles import NativeHandle, process
from .capi import check_status, ffi, get_runtime


class OnnxTensorType(enum.IntEnum):
    """ONNX tensor element types (``ONNXTensorElementDataType``)."""

    ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 = 2
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 = 3
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16 = 4
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 = 5
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7
    ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING = 8
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL = 9
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10
    ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 = 12
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 = 13
    ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64 = 14
    ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128 = 15
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN = 17
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ = 18
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2 = 19
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ = 20

    @classmethod
    def mapFromInt(cls, value: int) -> "OnnxTensorType":
        return _ONNX_TYPES.get(value, cls.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)


_ONNX_TYPES = {int(t): t for t in OnnxTensorType}  # a dict lookup: the enum's own call is slow
_T = OnnxTensorType
DTYPE_TO_ONNX: Dict[np.dtype, OnnxTensorType] = {
    np.dtype(np.float32): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    np.dtype(np.uint8): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    np.dtype(np.int8): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    np.dtype(np.uint16): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
    np.dtype(np.int16): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    np.dtype(np.int32): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    np.dtype(np.int64): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    np.dtype(np.bool_): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
    np.dtype(np.float16): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    np.dtype(np.float64): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
    np.dtype(np.uint32): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
    np.dtype(np.uint64): _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
}
ONNX_TO_DTYPE = {onnx_type: dtype for dtype, onnx_type in DTYPE_TO_ONNX.items()}
_DTYPE_BY_CODE: Dict[int, np.dtype] = {int(onnx_type): dtype for onnx_type, dtype in ONNX_TO_DTYPE.items()}
_SCALAR_POINTER_POINTERS = {  # to read a one-element tensor directly (float16 has no C type)
    np.dtype(dtype): ffi.typeof(ctype)
    for dtype, ctype in (
        (np.float32, "float**"), (np.float64, "double**"), (np.bool_, "_Bool**"),
        (np.int8, "int8_t**"), (np.int16, "int16_t**"), (np.int32, "int32_t**"), (np.int64, "int64_t**"),
        (np.uint8, "uint8_t**"), (np.uint16, "uint16_t**"), (np.uint32, "uint32_t**"), (np.uint64, "uint64_t**"),
    )
}


class OnnxValueType(enum.IntEnum):
    """``ONNXType``: what kind of value an ``OnnxValue`` holds."""

    ONNX_TYPE_UNKNOWN = 0
    ONNX_TYPE_TENSOR = 1
    ONNX_TYPE_SEQUENCE = 2
    ONNX_TYPE_MAP = 3
    ONNX_TYPE_OPAQUE = 4
    ONNX_TYPE_SPARSETENSOR = 5
    ONNX_TYPE_OPTIONAL = 6


class TensorInfo:
    """Element type and shape of a tensor (Java's ``TensorInfo``); ``-1`` marks a dimension unknown
    in a model's signature."""

    OnnxTensorType = OnnxTensorType

    def __init__(self, onnx_type: int, shape: Sequence[int], dim_names: Sequence[str] = ()) -> None:
        self.onnxType = _ONNX_TYPES.get(onnx_type, OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)
        self.shape: Tuple[int, ...] = shape if type(shape) is tuple else tuple(int(d) for d in shape)
        self.dimensionNames: Tuple[str, ...] = tuple(dim_names) if dim_names else ()

    @property
    def dtype(self) -> Optional[np.dtype]:
        """The numpy dtype of the elements (None for a type numpy lacks)."""
        return ONNX_TO_DTYPE.get(self.onnxType)

    def getShape(self) -> Tuple[int, ...]:
        return self.shape

    def isScalar(self) -> bool:
        return len(self.shape) == 0

    def getNumElements(self) -> int:
        if any(d < 0 for d in self.shape):
            raise OrtException.invalid_argument(f"shape {list(self.shape)} has unknown dimensions")
        return int(np.prod(self.shape, dtype=np.int64))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and (self.onnxType, self.shape) == (other.onnxType, other.shape)

    def __hash__(self) -> int:
        return hash((self.onnxType, self.shape))

    def __repr__(self) -> str:
        return f"TensorInfo(onnxType={self.onnxType.name}, shape={list(self.shape)})"


class _Scratch(threading.local):
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


_scratch = _Scratch()


class _Calls:
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


_calls: Optional[_Calls] = None


def calls() -> _Calls:
    global _calls
    if _calls is None:
        _calls = _Calls(get_runtime().api)
    return _calls


def read_tensor_info(info_ptr: Any) -> TensorInfo:
    """A ``TensorInfo`` from an ``OrtTensorTypeAndShapeInfo*`` (which the caller still owns). On the
    hot path (every output read): per-thread out-parameters."""
    c, scratch = _calls or calls(), _scratch
    element_type, count = scratch.element_type, scratch.count
    status = c.GetTensorElementType(info_ptr, element_type)
    if status:
        check_status(status, "GetTensorElementType")
    status = c.GetDimensionsCount(info_ptr, count)
    if status:
        check_status(status, "GetDimensionsCount")
    rank = count[0]
    shape: Tuple[int, ...] = ()
    if rank:
        dims = scratch.dims if rank <= 16 else ffi.new("int64_t[]", rank)
        check_status(c.GetDimensions(info_ptr, dims, rank), "GetDimensions")
        shape = tuple(dims[0:rank])
    return TensorInfo(element_type[0], shape)


class TensorTypeAndShapeInfo(NativeHandle):
    """Owns an ``OrtTensorTypeAndShapeInfo*`` (``ReleaseTensorTypeAndShapeInfo``)."""

    _kind = "OrtTensorTypeAndShapeInfo"

    def __init__(self, ptr: Any) -> None:
        self._own(ptr, get_runtime().api.ReleaseTensorTypeAndShapeInfo)

    def toTensorInfo(self) -> TensorInfo:
        return read_tensor_info(self._handle())


class TypeInfo(NativeHandle):
    """Owns an ``OrtTypeInfo*`` (``ReleaseTypeInfo``), e.g. a session input's signature."""

    _kind = "OrtTypeInfo"

    def __init__(self, ptr: Any) -> None:
        self._own(ptr, get_runtime().api.ReleaseTypeInfo)

    def toTensorInfo(self, what: str) -> TensorInfo:
        """The tensor type and shape (``CastTypeInfoToTensorInfo``: borrowed, owned by this TypeInfo)."""
        rt = get_runtime()
        tensor_info = ffi.new("const OrtTensorTypeAndShapeInfo**")
        check_status(rt.api.CastTypeInfoToTensorInfo(self._handle(), tensor_info), "CastTypeInfoToTensorInfo")
        if not tensor_info[0]:
            raise OrtException.invalid_argument(f"{what} is not a tensor")
        return read_tensor_info(tensor_info[0])


def _value_tensor_info(value_ptr: Any) -> TensorInfo:
    """The type and shape of a tensor value (``GetTensorTypeAndShape``). On the hot path (every output
    read): the info object lives for these lines only, released in ``finally``, with no Python owner."""
    c, out = _calls or calls(), _scratch.info
    status = c.GetTensorTypeAndShape(value_ptr, out)
    if status:
        check_status(status, "GetTensorTypeAndShape")
    info_ptr = out[0]
    try:
        return read_tensor_info(info_ptr)
    finally:
        c.ReleaseTensorTypeAndShapeInfo(info_ptr)


def as_tensor_array(data: Any, what: str = "tensor data") -> np.ndarray:
    """``data`` as an array the runtime can read in place: supported dtype, native order, C-contiguous, aligned.

    A conforming array comes back as it is; any other is copied once."""
    array = data if isinstance(data, np.ndarray) else np.asarray(data)
    dtype = array.dtype
    if dtype not in DTYPE_TO_ONNX:
        native = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
        if native not in DTYPE_TO_ONNX:
            kinds = ", ".join(sorted(str(d) for d in DTYPE_TO_ONNX))
            raise OrtException.invalid_argument(
                f"{what} has dtype {dtype}, which ort_cffi cannot pass to ONNX Runtime (supported: {kinds})"
            )
        return np.array(array, dtype=native, order="C")
    if not (array.flags.c_contiguous and array.flags.aligned):
        return np.array(array, order="C")
    return array


class OnnxValue(NativeHandle):
    """A value the runtime reads or produced (``OrtValue``). Only tensors are produced by training models."""

    _kind = "OnnxValue"

    def getValue(self) -> Any:
        raise NotImplementedError

    def getType(self) -> OnnxValueType:
        self._handle()
        return OnnxValueType.ONNX_TYPE_TENSOR

    def close(self) -> None:
        """Close this value. Called as ``OnnxValue.close(mapping_or_iterable)`` (Java's static
        ``OnnxValue.close(Map)``), closes every value in it."""
        if not isinstance(self, OnnxValue):
            close_all(self)
            return
        NativeHandle.close(self)


def close_all(values: Union[Mapping[Any, Any], Iterable[Any]]) -> None:
    """Close every ``OnnxValue`` in a mapping (its values) or an iterable."""
    items = values.values() if isinstance(values, Mapping) else values
    for value in list(items):
        if isinstance(value, NativeHandle):
            value.close()


class OnnxTensor(OnnxValue):
    """A tensor: over a numpy array's memory (``createTensor``), or allocated by the runtime (outputs)."""

    _kind = "OnnxTensor"
    _array: Optional[np.ndarray] = None
    _info: Optional[TensorInfo] = None
    _empty: Optional[bool] = None  # has a zero-sized dimension (None: not known yet)
    _writable = True  # the runtime may write into its memory (decided once, at creation)
    _buffer: Any = None

    @classmethod
    def createTensor(cls, env: Any, data: Any, shape: Optional[Sequence[int]] = None) -> "OnnxTensor":
        """A tensor over ``data`` (numpy array, scalar or nested sequence), optionally reshaped.

        ``env`` is the ``OrtEnvironment`` (Java's first argument); a C-contiguous array is not copied
        and is kept alive by the tensor (``CreateTensorWithDataAsOrtValue``)."""
        array = as_tensor_array(data)
        if shape is not None:
            shape = tuple(int(d) for d in shape)
            count = int(np.prod(shape, dtype=np.int64))
            if count != array.size or any(d < 0 for d in shape):
                raise OrtException.invalid_argument(
                    f"cannot view {array.size} elements of shape {list(array.shape)} as shape {list(shape)}"
                )
            array = array.reshape(shape)  # a view: the array is contiguous
        return cls._over_array(array)

    @classmethod
    def _over_array(cls, array: np.ndarray) -> "OnnxTensor":
        """A tensor over a conforming array (see ``as_tensor_array``) without copying it."""
        c = calls()
        tensor = cls.__new__(cls)
        buffer = ffi.from_buffer("char[]", array, require_writable=False)
        ndim = array.ndim
        out = _scratch.value
        status = c.CreateTensorWithDataAsOrtValue(
            process.memory_info()._handle(), buffer, array.nbytes,
            ffi.new("int64_t[]", array.shape) if ndim else ffi.NULL, ndim, DTYPE_TO_ONNX[array.dtype], out,
        )
        if status:
            check_status(status, "CreateTensorWithDataAsOrtValue")
        tensor._own(out[0], c.ReleaseValue)
        tensor._array = array  # the memory the tensor reads and writes: kept alive with it
        tensor._buffer = buffer
        tensor._empty = array.size == 0
        tensor._writable = bool(array.flags.writeable)
        return tensor

    @classmethod
    def _adopt(cls, value_ptr: Any) -> "OnnxTensor":
        """Own a value the runtime allocated (a step's output). Called right after the native call."""
        tensor = cls.__new__(cls)
        tensor._own(value_ptr, (_calls or calls()).ReleaseValue)
        return tensor

    @property
    def writable(self) -> bool:
        """False for a tensor over read-only memory (it cannot be a pinned output)."""
        return self._writable

    def getInfo(self) -> TensorInfo:
        """Element type and shape (``GetTensorTypeAndShape``)."""
        if self._info is not None:
            self._handle()
            return self._info
        if self._array is not None:  # over a numpy array: its own dtype and shape
            self._handle()
            self._info = TensorInfo(DTYPE_TO_ONNX[self._array.dtype], self._array.shape)
            return self._info
        ptr = self._use()  # pinned: a close() from another thread waits until the read is done
        try:
            self._info = _value_tensor_info(ptr)
        finally:
            self._unuse()
        return self._info

    def getValue(self) -> np.ndarray:
        """A copy of the data as a numpy array the caller owns (0-d for a scalar)."""
        if self._array is not None:
            self._handle()
            return self._array.copy()  # numpy's memory, held by this object: no native read
        ptr = self._use()  # pinned: a close() from another thread waits until the read is done
        try:
            info = self._info
            if info is None:
                info = self._info = _value_tensor_info(ptr)
            dtype = _DTYPE_BY_CODE.get(info.onnxType)
            if dtype is None:
                raise OrtException.invalid_argument(f"tensor element type {info.onnxType.name} has no numpy equivalent")
            shape = info.shape
            count = 1
            for dim in shape:
                count *= dim
            if count == 0:
                return np.empty(shape, dtype=dtype)
            scratch = _scratch
            data = scratch.data
            status = (_calls or calls()).GetTensorMutableData(ptr, data)
            if status:
                check_status(status, "GetTensorMutableData")
            if not shape:
                scalar_view = scratch.scalar_views.get(dtype)
                if scalar_view is not None:  # a loss: one element, read directly
                    return np.array(scalar_view[0][0], dtype=dtype)
            return np.frombuffer(ffi.buffer(data[0], count * dtype.itemsize), dtype=dtype).reshape(shape).copy()
        finally:
            self._unuse()

    def _has_zero_sized_dimension(self) -> bool:
        if self._empty is None:
            self._empty = 0 in self.getInfo().shape
        return self._empty

    def __repr__(self) -> str:
        if self._closed:
            return "<OnnxTensor closed>"
        return f"<OnnxTensor {self.getInfo()!r}>"


def adopt_outputs(out_values: Any, count: int) -> "list[Optional[OnnxTensor]]":
    """Own, at once, every value a run or step allocated in ``out_values[0:count]`` (NULL slots give None)."""
    if count == 1:  # a loss alone: no slice of the C array (a new cdata object)
        value = out_values[0]
        return [OnnxTensor._adopt(value) if value else None]
    return [OnnxTensor._adopt(p) if p else None for p in out_values[0:count]]


def check_outputs(status: Any, values: "Sequence[Optional[OnnxTensor]]", context: str) -> None:
    """After a run or step: on failure, release what it produced anyway, then raise."""
    if status:
        for value in values:
            if value is not None:
                value.close()
        check_status(status, context)


def refuse_zero_sized(name: str, tensor: OnnxTensor) -> None:
    """ONNX Runtime 1.19 dies (SIGFPE) on zero-sized inputs in common operators (Gemm,
    SoftmaxCrossEntropyLoss): refuse them before the native call."""
    if tensor._has_zero_sized_dimension():
        raise OrtException.invalid_argument(
            f"input {name!r} has a zero-sized dimension (shape {list(tensor.getInfo().shape)}): "
            "ONNX Runtime crashes on empty batches, so they are refused"
        )


def tensor_for_input(name: str, value: Any) -> Tuple[OnnxTensor, bool]:
    """(tensor, made_here) for an input given as an ``OnnxTensor`` or a numpy array."""
    if isinstance(value, OnnxTensor):
        return value, False
    if isinstance(value, OnnxValue):
        raise OrtException.invalid_argument(f"input {name!r}: only tensors are supported, not {type(value).__name__}")
    if not isinstance(value, (np.ndarray, np.generic)):
        raise OrtException.invalid_argument(
            f"input {name!r} must be an OnnxTensor or a numpy array, not {type(value).__name__}"
        )
    return OnnxTensor._over_array(as_tensor_array(value, f"input {name!r}")), True
