"""Facade: ``OnnxValue`` and ``OnnxTensor`` (Java's ai.onnxruntime classes), numpy in and out.

The element types are in ``element_types``, their Java description ``TensorInfo`` in ``tensor_info``;
turning Python data into arrays, and raw bits into values, in ``conversions``; string tensors in
``strings``; what runs and steps do with the values they return in ``outputs``. Here, the tensor itself:

- Memory. ``createTensor(env, array)`` does not copy a C-contiguous, aligned, native-order numeric
  array: the tensor is created over its memory (``CreateTensorWithDataAsOrtValue``) and keeps the
  array alive; any other array is copied once. So do ``createTensor(env, buffer, shape[, type])``
  over numpy arrays and bytes-like objects. Python data (scalars, str, nested lists) is copied
  into memory the tensor owns. String tensors live in the runtime (``CreateTensorAsOrtValue`` +
  ``FillStringTensor``).
- Java's buffer semantics: ``getBufferRef()`` gives the array a tensor made over a buffer reads
  and writes (the caller's own memory, or the copy made of it: then ``ownsBuffer()`` is True);
  tensors made from Python data, and those the runtime allocated, have none.
- Reading. ``getValue()`` always returns a fresh array the caller owns (0-d for a scalar); the
  ``get*Buffer()`` getters a fresh flat copy, or None where Java returns null (another type).
  Nothing handed out aliases memory that ``close()`` frees.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ort_cffi._facade.tensors.conversions import array_for, buffer_array, data_array, values_from_bits
from ort_cffi._facade.tensors.element_types import (
    BITS_TYPES,
    DTYPE_TO_ONNX,
    NUMPY_DTYPES,
    STRING,
    VALUE_DTYPES,
    OnnxTensorType,
    OnnxValueType,
    byte_size,
    storage_dtype,
)
from ort_cffi._facade.tensors.fp16 import bf16_to_float, mlas_fp16_to_float
from ort_cffi._facade.tensors.optional import Optional_
from ort_cffi._facade.tensors.strings import (
    decode_strings,
    encode_elements,
    fill_string_tensor,
    new_string_tensor,
    read_strings,
)
from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._facade.tensors.value_info import (
    calls,
    scratch,
    value_tensor_info,
)
from ort_cffi._native.errors import OrtException
from ort_cffi._native.handles import NativeHandle, process
from ort_cffi._native.tables import check_status, ffi

_T = OnnxTensorType
_DTYPE_BY_CODE: Dict[int, np.dtype] = {int(onnx_type): dtype for onnx_type, dtype in NUMPY_DTYPES.items()}
class OnnxValue(NativeHandle):
    """A value the runtime reads or produced (`OrtValue`): the base class of `OnnxTensor`.

    Training models produce only tensors, so every value ort_cffi makes is an `OnnxTensor`.

    Java: `ai.onnxruntime.OnnxValue` (an interface there, also for sequences, maps and sparse tensors).
    """

    _kind = "OnnxValue"

    def getValue(self) -> Any:
        """The value as Python data; `OnnxTensor.getValue` is the one implementation.

        Java: `Object getValue()`.

        Returns:
            For a tensor, a new numpy array the caller owns (see `OnnxTensor.getValue`).

        Raises:
            NotImplementedError: Called on `OnnxValue` itself, which no value ort_cffi makes is.
        """
        raise NotImplementedError

    def getType(self) -> OnnxValueType:
        """The kind of value: always `OnnxValueType.ONNX_TYPE_TENSOR`.

        Java: `OnnxValue.OnnxValueType getType()`.

        Raises:
            OrtClosedException: The value is closed.
        """
        self._handle()
        return OnnxValueType.ONNX_TYPE_TENSOR

    def close(self) -> None:
        """Close this value; called on the class with a mapping or an iterable, close every value in it.

        `value.close()` releases the native value (after a call in progress on it in another thread);
        idempotent. `OnnxValue.close(values)` closes each `OnnxValue` of a list, or of a dict's values,
        and skips anything else.

        Java: `void close()`, `static void close(Iterable<? extends OnnxValue> itr)`,
        `static void close(Map<String, ? extends OnnxValue> map)`.
        """
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


# What each typed getter accepts: element type → the dtype of the copy it returns.
_FLOAT_BUFFER = dict.fromkeys((_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16))
_SHORT_BUFFER = {
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: np.dtype(np.int16), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: np.dtype(np.uint16),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: np.dtype(np.int16), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: np.dtype(np.int16),
}
_INT_BUFFER = {_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: np.dtype(np.int32), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: np.dtype(np.uint32)}
_LONG_BUFFER = {_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: np.dtype(np.int64), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: np.dtype(np.uint64)}
_DOUBLE_BUFFER = {_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: np.dtype(np.float64)}


class OnnxTensor(OnnxValue):
    """A tensor: over numpy memory (`createTensor`), or allocated by the runtime (outputs, strings).

    The caller owns a tensor it made and closes it (or uses a `with` block); a step's or run's outputs
    belong to their `Result`. Whatever a tensor hands out (`getValue()`, the `get*Buffer()` copies) is a
    new array that stays valid after `close()`; only `getBufferRef()` shares the tensor's memory, which
    is numpy's. Once closed, every method but `close()`, `isClosed()`, `closed` and `toString()` raises
    `OrtClosedException`.

    Java: `ai.onnxruntime.OnnxTensor`.
    """

    _kind = "OnnxTensor"
    _array: Optional[np.ndarray] = None  # the memory the tensor is over (None: the runtime's)
    _plain = True  # ``_array`` holds the values themselves (not the raw bits of a type numpy lacks)
    _info: Optional[TensorInfo] = None
    _writable = True  # the runtime may write into its memory (decided once, at creation)
    _buffer: Any = None
    _ref: Optional[np.ndarray] = None  # what getBufferRef() hands out
    _owns = False  # the memory is a copy ort_cffi made of the caller's buffer (Java's ownsBuffer)
    passed_spec: Any = None  # the input signature (an InputSpec) this tensor last passed: see inputs.checked_input
    passed_dims: Optional[Tuple[int, ...]] = None  # its shape, recorded with passed_spec

    @classmethod
    def createTensor(cls, env: Any, data: Any, shape: Optional[Sequence[int]] = None, type: Any = None) -> OnnxTensor:
        """A tensor of `data` (`CreateTensorWithDataAsOrtValue`; strings: `CreateTensorAsOrtValue`, `FillStringTensor`).

        - `createTensor(env, data)`: `data` is a Python scalar (`bool`, `int` → int64, `float` →
          float64, `str`), a numpy scalar or array of any supported dtype (str too), a bytes-like
          object (raw bytes → int8), or nested lists/tuples of these.
        - `createTensor(env, buffer, shape)` and `createTensor(env, buffer, shape, type)`: the elements
          of a numpy array or bytes-like `buffer` as a tensor of `shape`; `type` reads raw memory as
          that element type (e.g. `OnnxJavaType.BFLOAT16` over bytes). A flat list of str or numbers
          with a shape works too.

        A C-contiguous, aligned, native-order array (or buffer) is not copied: the tensor reads and
        writes its memory (`getBufferRef()`); other memory is copied once (`ownsBuffer()` is then
        True). Python data is copied. There is no limit of 8 dimensions.

        Java: `static OnnxTensor createTensor(OrtEnvironment env, Object data)`,
        `createTensor(env, String[] data, long[] shape)`, `createTensor(env, FloatBuffer data,
        long[] shape)` (and the `DoubleBuffer`, `ShortBuffer`, `IntBuffer`, `LongBuffer`, `ByteBuffer`
        forms), `createTensor(env, ByteBuffer data, long[] shape, OnnxJavaType type)`.

        Args:
            env: The `OrtEnvironment`, as in Java (the tensor does not depend on it).
            data: The data or buffer, as above.
            shape: The tensor's shape, a sequence of non-negative ints whose product is the number of
                elements in `data`; None to take the shape of `data`.
            type: An `OnnxJavaType`, or beyond Java any `OnnxTensorType` (float8, int4, unsigned): the
                element type the buffer's bytes hold; needs `shape`.

        Returns:
            A new `OnnxTensor` the caller owns and must close (or use in a `with` block). Made over the
                caller's array or buffer without a copy, it keeps that memory alive, and writing into
                either changes the other.

        Raises:
            OrtInvalidArgumentException: `data` cannot be a tensor (ragged or mixed sequences, an empty
                list, an object of another kind, an int beyond int64, a complex or other unsupported
                dtype, an object array holding anything but `str` and `bytes`); `shape` is not a
                sequence of ints, has a negative dimension or does not match the buffer's size; `type`
                is no `OnnxJavaType` or `OnnxTensorType` member, or is given without `shape`, or is
                not what the buffer's dtype holds, or a number in Python data does not fit in it
                (the message names the number).
        """
        if shape is None and type is None:
            if isinstance(data, np.ndarray):  # a buffer: zero-copy when its layout allows
                array, onnx_type = array_for(data)
                if onnx_type == STRING:
                    return cls._of_strings(array, array.shape)
                tensor = cls._over_array(array, onnx_type)
                tensor._ref, tensor._owns = array, array is not data and not np.may_share_memory(array, data)
                return tensor
            array, onnx_type = data_array(data)
            if onnx_type == STRING:
                return cls._of_strings(array, array.shape)
            tensor = cls._over_array(array, onnx_type)
            if _is_buffer(data):  # bytes-like: read in place, as Java's ByteBuffer
                tensor._ref, tensor._owns = array, not _shares_buffer(array, data)
            return tensor
        if shape is None:
            raise OrtException.invalid_argument("an element type needs a shape: createTensor(env, buffer, shape, type)")
        array, onnx_type, dims, copied = buffer_array(data, shape, type)
        if onnx_type == STRING:
            return cls._of_strings(array, dims)
        tensor = cls._over_array(array, onnx_type, dims)
        if isinstance(data, np.ndarray) or _is_buffer(data):  # Java's Buffer overloads
            tensor._ref, tensor._owns = array, copied
        return tensor

    @classmethod
    def _over_array(cls, array: np.ndarray, onnx_type: Optional[OnnxTensorType] = None, dims: Optional[Sequence[int]] = None) -> OnnxTensor:
        """A tensor over a conforming array (see ``as_tensor_array``) without copying it. ``onnx_type``
        and ``dims`` describe memory that holds raw bits (bfloat16, float8, packed int4)."""
        c = calls()
        tensor = cls.__new__(cls)
        buffer = ffi.from_buffer("char[]", array, require_writable=False)
        if onnx_type is None:
            onnx_type = DTYPE_TO_ONNX[array.dtype]
        shape = array.shape if dims is None else tuple(dims)
        ndim = len(shape)
        out = scratch.value
        status = c.CreateTensorWithDataAsOrtValue(
            process.memory_info()._handle(), buffer, array.nbytes,
            ffi.new("int64_t[]", shape) if ndim else ffi.NULL, ndim, onnx_type, out,
        )
        if status:
            check_status(status, "CreateTensorWithDataAsOrtValue")
        tensor._own(out[0], c.ReleaseValue)
        tensor._array = array  # the memory the tensor reads and writes: kept alive with it
        tensor._buffer = buffer
        tensor._writable = bool(array.flags.writeable)
        if onnx_type in BITS_TYPES:
            tensor._plain = False
            tensor._info = TensorInfo(onnx_type, shape)
        return tensor

    @classmethod
    def _of_strings(cls, elements: np.ndarray, shape: Sequence[int]) -> OnnxTensor:
        """A string tensor of ``shape`` holding ``elements`` (an object array of str/bytes): allocated
        by the runtime (``CreateTensorAsOrtValue``), filled with ``FillStringTensor``."""
        encoded = encode_elements(elements)  # before anything native: a bad element leaks nothing
        shape = tuple(shape)
        tensor = cls._adopt(new_string_tensor(shape))
        try:
            fill_string_tensor(tensor._ptr, encoded)
        except BaseException:
            tensor.close()
            raise
        tensor._info = TensorInfo(STRING, shape)
        return tensor

    @classmethod
    def _adopt(cls, value_ptr: Any) -> OnnxTensor:
        """Own a value the runtime allocated (a step's output). Called right after the native call."""
        tensor = cls.__new__(cls)
        tensor._own(value_ptr, calls().ReleaseValue)
        return tensor

    @property
    def writable(self) -> bool:
        """False for a tensor over read-only memory (a `bytes` object, a read-only array); never raises.

        Such a tensor cannot be a pinned output.

        Java: none (ort_cffi addition).
        """
        return self._writable

    def ownsBuffer(self) -> bool:
        """True when the tensor's memory is a copy ort_cffi made of the buffer it was given.

        That is a strided, misaligned or byte-swapped array, say. False for a tensor over the caller's
        own memory, one made from Python data, and one the runtime allocated.

        Java: `boolean ownsBuffer()`.

        Raises:
            OrtClosedException: The tensor is closed.
        """
        self._handle()
        return self._owns

    def getBufferRef(self) -> Optional_[np.ndarray]:
        """The numpy array a tensor made over a buffer reads and writes: writing into it changes the tensor.

        Java: `Optional<Buffer> getBufferRef()`.

        Returns:
            An Optional (`isPresent()`, `get()`, `orElse()`) of the array, in the tensor's shape (raw
                bits for BFLOAT16, float8 and int4): the caller's own array, or the copy ort_cffi made
                of its buffer, shared with the tensor and not copied. numpy owns that memory, so it
                stays valid after the tensor closes. Empty for tensors made from Python data and
                those the runtime allocated.

        Raises:
            OrtClosedException: The tensor is closed.
        """
        self._handle()
        return Optional_(self._ref)

    def getInfo(self) -> TensorInfo:
        """The tensor's element type and shape (`GetTensorTypeAndShape`).

        Java: `TensorInfo getInfo()`.

        Returns:
            The `TensorInfo` the tensor owns (cached: the same object at every call), plain Python data
                with no native memory that the caller may keep, also after `close()`.

        Raises:
            OrtClosedException: The tensor is closed.
        """
        if self._info is not None:
            self._handle()
            return self._info
        if self._array is not None:  # over a numpy array: its own dtype and shape
            self._handle()
            self._info = TensorInfo(DTYPE_TO_ONNX[self._array.dtype], self._array.shape)
            return self._info
        ptr = self._use()  # pinned: a close() from another thread waits until the read is done
        try:
            self._info = value_tensor_info(ptr)
        finally:
            self._unuse()
        return self._info

    def getValue(self) -> np.ndarray:
        """The tensor's values, copied into a numpy array in the tensor's shape (0-d for a scalar).

        numpy's dtypes where numpy has the type (float16 stays float16, uint8 uint8); bfloat16 and the
        float8 types as float32 (exact), int4/uint4 as int8/uint8, strings as an object array of `str`.

        Java: `Object getValue()` (a boxed value or a Java array there).

        Returns:
            A new numpy array the caller owns: it never aliases the tensor's memory, so it stays valid
                after `close()` and writing into it does not change the tensor.

        Raises:
            OrtClosedException: The tensor is closed.
            OrtInvalidArgumentException: A string is not valid UTF-8 (read it with
                `getStringTensor(raw=True)`), or the element type is one ort_cffi cannot read.
        """
        if self._array is not None and self._plain:
            self._handle()
            return self._array.copy()  # numpy's memory, held by this object: no native read
        ptr = self._use()  # pinned: a close() from another thread waits until the read is done
        try:
            info = self._info
            if info is None:
                info = self._info = value_tensor_info(ptr)
            dtype = _DTYPE_BY_CODE.get(info.onnxType)
            if dtype is None:
                return self._special_value(ptr, info)
            shape = info.shape
            count = 1
            for dim in shape:
                count *= dim
            if count == 0:
                return np.empty(shape, dtype=dtype)
            data = scratch.data
            status = calls().GetTensorMutableData(ptr, data)
            if status:
                check_status(status, "GetTensorMutableData")
            if not shape:
                scalar_view = scratch.scalar_views.get(dtype)
                if scalar_view is not None:  # a loss: one element, read directly
                    return np.array(scalar_view[0][0], dtype=dtype)
            return np.frombuffer(ffi.buffer(data[0], count * dtype.itemsize), dtype=dtype).reshape(shape).copy()
        finally:
            self._unuse()

    def _special_value(self, ptr: Any, info: TensorInfo) -> np.ndarray:
        """getValue() of a string tensor or a type numpy lacks."""
        count = info.getNumElements()
        if info.onnxType == STRING:
            return decode_strings(read_strings(ptr, count), info.shape)
        if info.onnxType in BITS_TYPES:
            return values_from_bits(info.onnxType, self._storage(ptr, info), count).reshape(info.shape)
        raise OrtException.invalid_argument(f"ort_cffi cannot read a tensor of element type {info.onnxType.name}")

    def _storage(self, ptr: Any, info: TensorInfo) -> np.ndarray:
        """A flat copy of the tensor's memory, in its storage dtype (uint8 for packed int4)."""
        storage = storage_dtype(info.onnxType)
        if storage is None:
            raise OrtException.invalid_argument(f"a {info.onnxType.name} tensor has no numeric memory to read")
        nbytes = byte_size(info.onnxType, info.getNumElements())
        if nbytes == 0:
            return np.empty(0, storage)
        data = scratch.data
        check_status(calls().GetTensorMutableData(ptr, data), "GetTensorMutableData")
        return np.frombuffer(ffi.buffer(data[0], nbytes), dtype=storage).copy()

    def _read_as(self, accept: Any, convert: Any = None) -> Optional[np.ndarray]:
        """A flat copy of the memory viewed as ``accept[element type]`` (None for other types), then
        ``convert(copy, element type)`` if given."""
        ptr = self._use()
        try:
            info = self._info
            if info is None:
                info = self._info = value_tensor_info(ptr)
            if info.onnxType not in accept:
                return None
            raw = self._storage(ptr, info)
        finally:
            self._unuse()
        if convert is not None:
            return convert(raw, info.onnxType)
        return raw.view(accept[info.onnxType])

    def getByteBuffer(self) -> Optional[np.ndarray]:
        """A flat copy of the tensor's memory as bytes, in native byte order.

        Java: `ByteBuffer getByteBuffer()`.

        Returns:
            A new flat numpy array the caller owns (uint8; Java's bytes are signed), or None for a
                string tensor, whose strings live outside its memory.

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_ANY_NUMERIC, lambda raw, _: raw.view(np.uint8))

    def getFloatBuffer(self) -> Optional[np.ndarray]:
        """A flat float32 copy of a FLOAT tensor, or of a FLOAT16 or BFLOAT16 one converted up.

        Java: `FloatBuffer getFloatBuffer()`.

        Returns:
            A new flat numpy array the caller owns (float32; FLOAT16 and BFLOAT16 converted bit-exact to Java's `Fp16Conversions`), or None for a tensor of another element
                type (Java returns null).

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_FLOAT_BUFFER, _to_float32)

    def getDoubleBuffer(self) -> Optional[np.ndarray]:
        """A flat float64 copy of a DOUBLE tensor.

        Java: `DoubleBuffer getDoubleBuffer()`.

        Returns:
            A new flat numpy array the caller owns (float64), or None for a tensor of another element
                type (Java returns null).

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_DOUBLE_BUFFER)

    def getShortBuffer(self) -> Optional[np.ndarray]:
        """A flat copy of a 16-bit tensor: INT16, UINT16, or the raw bits of FLOAT16 and BFLOAT16.

        Java: `ShortBuffer getShortBuffer()`.

        Returns:
            A new flat numpy array the caller owns (int16 for INT16, uint16 for UINT16 (Java: signed), the bits as int16 for
                FLOAT16 and BFLOAT16), or None for a tensor of another element
                type (Java returns null).

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_SHORT_BUFFER)

    def getIntBuffer(self) -> Optional[np.ndarray]:
        """A flat copy of an INT32 or UINT32 tensor.

        Java: `IntBuffer getIntBuffer()`.

        Returns:
            A new flat numpy array the caller owns (int32, or uint32 for UINT32 (Java: signed)), or None for a tensor of another element
                type (Java returns null).

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_INT_BUFFER)

    def getLongBuffer(self) -> Optional[np.ndarray]:
        """A flat copy of an INT64 or UINT64 tensor.

        Java: `LongBuffer getLongBuffer()`.

        Returns:
            A new flat numpy array the caller owns (int64, or uint64 for UINT64 (Java: signed)), or None for a tensor of another element
                type (Java returns null).

        Raises:
            OrtClosedException: The tensor is closed.
        """
        return self._read_as(_LONG_BUFFER)

    def getStringTensor(self, raw: bool = False) -> np.ndarray:
        """The strings of a STRING tensor (`GetStringTensorDataLength`, `GetStringTensorContent`).

        Java: none (ort_cffi addition).

        Args:
            raw: False: the strings decoded from UTF-8 (`str`); True: the `bytes` the runtime holds.

        Returns:
            A new object array in the tensor's shape that the caller owns.

        Raises:
            OrtClosedException: The tensor is closed.
            OrtInvalidArgumentException: The tensor holds another element type, or (without `raw`) a
                string is not valid UTF-8.
        """
        ptr = self._use()
        try:
            info = self._info
            if info is None:
                info = self._info = value_tensor_info(ptr)
            if info.onnxType != STRING:
                raise OrtException.invalid_argument(f"this tensor holds {info.onnxType.name}, not strings")
            return decode_strings(read_strings(ptr, info.getNumElements()), info.shape, raw)
        finally:
            self._unuse()

    def toString(self) -> str:
        """Java's text for the tensor: `OnnxTensor(info=TensorInfo(...),closed=false)`; `repr()` is shorter.

        It answers on a closed tensor too (`closed=true`), as Java's does.

        Java: `String toString()`.
        """
        info = self._info if self._closed else self.getInfo()
        closed = "true" if self._closed else "false"
        return f"OnnxTensor(info={info.toString() if info is not None else 'unknown'},closed={closed})"

    def __repr__(self) -> str:
        if self._closed:
            return "<OnnxTensor closed>"
        return f"<OnnxTensor {self.getInfo()!r}>"


_ANY_NUMERIC = {t: None for t in VALUE_DTYPES if t != STRING}


def _to_float32(raw: np.ndarray, onnx_type: OnnxTensorType) -> np.ndarray:
    if onnx_type == _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
        return np.asarray(mlas_fp16_to_float(raw.view(np.uint16)), dtype=np.float32).reshape(-1)
    if onnx_type == _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
        return np.asarray(bf16_to_float(raw.view(np.uint16)), dtype=np.float32).reshape(-1)
    return raw.view(np.float32)


def _is_buffer(obj: Any) -> bool:
    """True for a bytes-like object that is not Python data (bytes, bytearray, memoryview, array.array, ...)."""
    if isinstance(obj, (str, list, tuple, int, float, np.generic, np.ndarray)):
        return False
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


def _shares_buffer(array: np.ndarray, buffer: Any) -> bool:
    """Whether ``array`` lies in ``buffer``'s memory (False when the buffer had to be copied)."""
    view = memoryview(buffer)
    return view.c_contiguous and np.may_share_memory(array, np.frombuffer(view, dtype=np.uint8))


def adopted_tensor(value_ptr: Any) -> OnnxTensor:
    """An ``OnnxTensor`` that owns ``value_ptr``, a value the runtime allocated (a run's or step's output)."""
    return OnnxTensor._adopt(value_ptr)


def tensor_over_copy(copy: np.ndarray, onnx_type: Optional[OnnxTensorType] = None,
                     shape: Optional[Sequence[int]] = None) -> OnnxTensor:
    """An ``OnnxTensor`` over ``copy``, an array ort_cffi made (or checked with ``as_tensor_array``), without
    copying it; the tensor keeps it alive. ``onnx_type`` and ``shape`` describe raw bits (bfloat16, float8,
    packed int4)."""
    return OnnxTensor._over_array(copy, onnx_type, shape)


__all__ = ["OnnxTensor", "OnnxValue", "adopted_tensor", "close_all", "tensor_over_copy"]
