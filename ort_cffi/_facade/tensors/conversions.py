"""The numpy boundary of tensors: Python data and buffers in, values out (below ``tensor.py``).

In:

- ``as_tensor_array``: a numeric numpy array as the runtime can read it in place (supported dtype,
  native order, C-contiguous, aligned): returned as it is when it already is, else copied once.
- ``data_array``: what ``createTensor(env, data)`` makes a tensor of: Python scalars (``bool`` →
  BOOL, ``int`` → INT64, ``float`` → DOUBLE, ``str`` → STRING), numpy scalars and arrays (their
  dtype; str, bytes and object arrays of str → STRING), bytes-like objects (raw bytes → INT8, as
  Java's ``byte[]``; ``array.array`` and typed memoryviews → their item type), and nested lists
  and tuples of these (rectangular: a ragged one is refused, naming the depth and lengths).
- ``buffer_array``: what ``createTensor(env, buffer, shape[, type])`` makes a tensor of: the
  buffer's memory viewed as ``shape`` elements of ``type``. Raw memory (bytes-like objects, and
  uint8/int8 arrays; 16-bit integer arrays for the 16-bit float types) is reinterpreted; a typed
  array must already hold that type. The byte count must match the shape exactly.

Out: ``values_from_bits`` turns the raw storage of the types numpy lacks into values (bfloat16
and float8 → float32, exactly; int4/uint4 → int8/uint8, unpacked low nibble first).
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ort_cffi._facade.tensors.element_types import (
    BITS_TYPES,
    DTYPE_TO_ONNX,
    NUMPY_DTYPES,
    PACKED_TYPES,
    STRING,
    UNSUPPORTED_TYPES,
    OnnxJavaType,
    OnnxTensorType,
    byte_size,
    storage_dtype,
)
from ort_cffi._facade.tensors.fp16 import bf16_to_float
from ort_cffi._native.errors import OrtException

_T = OnnxTensorType
INT64_MAX = 2**63 - 1
_RAW_FORMATS = ("B", "b", "c")  # a memoryview of plain bytes


def _supported_dtypes() -> str:
    return ", ".join(sorted(str(d) for d in DTYPE_TO_ONNX)) + ", str"


def refuse_dtype(dtype: np.dtype, what: str) -> OrtException:
    if dtype.kind == "c":
        return OrtException.invalid_argument(
            f"{what} has dtype {dtype}: ONNX Runtime 1.19 has no complex tensors (it refuses COMPLEX64 and COMPLEX128)"
        )
    return OrtException.invalid_argument(
        f"{what} has dtype {dtype}, which ort_cffi cannot pass to ONNX Runtime (supported: {_supported_dtypes()})"
    )


def as_tensor_array(data: Any, what: str = "tensor data") -> np.ndarray:
    """``data`` as a numeric array the runtime can read in place: supported dtype, native order,
    C-contiguous, aligned. A conforming array comes back as it is; any other is copied once."""
    array = data if isinstance(data, np.ndarray) else np.asarray(data)
    dtype = array.dtype
    if dtype not in DTYPE_TO_ONNX:
        native = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
        if native not in DTYPE_TO_ONNX:
            raise refuse_dtype(dtype, what)
        return np.array(array, dtype=native, order="C")
    if not (array.flags.c_contiguous and array.flags.aligned):
        return np.array(array, order="C")
    return array


def is_string_array(array: np.ndarray) -> bool:
    """True for arrays that make string tensors: str ('U'), bytes ('S') and object dtypes."""
    return array.dtype.kind in "USO"


def string_elements(array: np.ndarray, what: str = "tensor data") -> np.ndarray:
    """A str/bytes/object array as an object array of ``str``/``bytes`` elements (same shape); an
    object array holding anything else is refused, naming the first such element."""
    if array.dtype.kind in "US":
        return np.array(array.tolist() if array.ndim else array.item(), dtype=object).reshape(array.shape)
    flat = array.reshape(-1)
    for index, element in enumerate(flat):
        if not isinstance(element, (str, bytes)):
            where = np.unravel_index(index, array.shape) if array.ndim else ()
            raise OrtException.invalid_argument(
                f"{what} is an object array holding {type(element).__name__} at index {tuple(int(i) for i in where)}: "
                "object arrays make string tensors and may hold only str or bytes (give numbers a numeric dtype)"
            )
    return array


def array_for(array: np.ndarray, what: str = "tensor data") -> Tuple[np.ndarray, OnnxTensorType]:
    """(array the tensor is made over, element type) for a numpy array of any supported dtype."""
    onnx_type = DTYPE_TO_ONNX.get(array.dtype)
    if onnx_type is not None:  # the common case first, in as few steps as possible (createTensor's hot path)
        flags = array.flags
        if flags.c_contiguous and flags.aligned:
            return array, onnx_type
    if array.dtype.kind in "USO":
        return string_elements(array, what), STRING
    result = as_tensor_array(array, what)
    return result, DTYPE_TO_ONNX[result.dtype]


def _buffer_view(obj: Any) -> Optional[np.ndarray]:
    """A numpy view of a bytes-like object's memory (raw bytes as int8, as Java's ByteBuffer; a typed
    memoryview or ``array.array`` as its item type), or None for an object without the buffer protocol."""
    try:
        view = memoryview(obj)
    except TypeError:
        return None
    if view.format in _RAW_FORMATS:
        raw = np.frombuffer(view, dtype=np.uint8) if view.c_contiguous else np.array(view, dtype=np.uint8).reshape(-1)
        return raw.view(np.int8)
    try:
        return np.asarray(view)
    except (TypeError, ValueError):  # a format numpy cannot read: pointers, wide characters, ...
        raise OrtException.invalid_argument(
            f"cannot make a tensor from a {_name(obj)} buffer of format {view.format!r}, which numpy cannot read: "
            "give a numpy array, or a buffer of numbers or raw bytes"
        ) from None


def _leaf_kind(value: Any) -> Optional[str]:
    if isinstance(value, (str, bytes)):
        return "str"
    if isinstance(value, (bool, np.bool_, int, float, np.integer, np.floating)):
        return "number"
    return None


def _nested(obj: Sequence[Any], what: str) -> Tuple[np.ndarray, OnnxTensorType]:
    """A rectangular nested list/tuple as an array: str leaves → object array; numbers → numpy's dtype."""
    shape: List[int] = []
    level: List[Any] = [obj]
    while level and isinstance(level[0], (list, tuple)):
        lengths = {len(item) if isinstance(item, (list, tuple)) else -1 for item in level}
        if -1 in lengths:
            raise OrtException.invalid_argument(
                f"{what} is ragged: at depth {len(shape)} it mixes sequences and single values"
            )
        if len(lengths) > 1:
            raise OrtException.invalid_argument(
                f"{what} is ragged: the sequences at depth {len(shape)} have lengths {sorted(lengths)}"
            )
        length = lengths.pop()
        if length == 0:
            raise OrtException.invalid_argument(
                f"{what} has an empty sequence at depth {len(shape)}, which gives no element type: "
                "make an empty tensor from a numpy array with a dtype (np.zeros((0,), np.float32))"
            )
        shape.append(length)
        level = [child for item in level for child in item]
    kinds = set()
    for index, leaf in enumerate(level):
        kind = _leaf_kind(leaf)
        if kind is None and isinstance(leaf, (list, tuple)):
            raise OrtException.invalid_argument(
                f"{what} is ragged: at depth {len(shape)} it mixes sequences and single values"
            )
        if kind is None:
            where = tuple(int(i) for i in np.unravel_index(index, shape))
            raise OrtException.invalid_argument(
                f"{what} holds a {type(leaf).__name__} at index {where}: tensors hold numbers, bools or str"
            )
        kinds.add(kind)
    if len(kinds) > 1:
        raise OrtException.invalid_argument(f"{what} mixes str and numbers: a tensor has one element type")
    if "str" in kinds:
        return np.array(level, dtype=object).reshape(shape), STRING
    try:
        array = np.array(obj)
    except (OverflowError, ValueError) as exc:
        raise OrtException.invalid_argument(f"{what} cannot be a tensor: {exc}") from None
    if array.dtype == object:
        raise OrtException.invalid_argument(f"{what} holds integers beyond the int64 and uint64 range")
    return array_for(array, what)


def data_array(obj: Any, what: str = "tensor data") -> Tuple[np.ndarray, OnnxTensorType]:
    """(array, element type) ``createTensor(env, obj)`` makes a tensor of (see the module)."""
    if isinstance(obj, np.ndarray):
        return array_for(obj, what)
    if isinstance(obj, np.generic):
        return array_for(np.asarray(obj), what)
    if isinstance(obj, str):
        return np.array(obj, dtype=object), STRING
    if isinstance(obj, bool):
        return np.array(obj, dtype=np.bool_), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL
    if isinstance(obj, int):
        if not -(2**63) <= obj <= INT64_MAX:
            raise OrtException.invalid_argument(f"{what} {obj} does not fit in an int64 (give a numpy scalar of another type)")
        return np.array(obj, dtype=np.int64), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64
    if isinstance(obj, float):
        return np.array(obj, dtype=np.float64), _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
    if isinstance(obj, (list, tuple)):
        return _nested(obj, what)
    view = _buffer_view(obj)
    if view is not None:
        return array_for(view, what)
    raise OrtException.invalid_argument(
        f"cannot make a tensor from {type(obj).__name__}: give a number, bool or str, a nested list or tuple of "
        "them, a numpy array, or a bytes-like buffer"
    )


def check_shape(shape: Any, what: str = "shape") -> Tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints whose product fits in an int64 (else ``OrtException``)."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise OrtException.invalid_argument(f"the {what} must be a sequence of ints, not {type(shape).__name__}")
    dims = []
    for dim in shape:
        if isinstance(dim, (bool, np.bool_)):
            raise OrtException.invalid_argument(f"the {what} {list(shape)} holds a bool")
        try:
            value = operator.index(dim)
        except TypeError:
            raise OrtException.invalid_argument(f"the {what} {list(shape)} holds {dim!r}, not an int") from None
        if value < 0:
            raise OrtException.invalid_argument(f"the {what} {list(shape)} has a negative dimension")
        dims.append(value)
    count = 1
    for value in dims:
        count *= value
    if count > INT64_MAX or any(d > INT64_MAX for d in dims):
        raise OrtException.invalid_argument(f"the {what} {dims} has more elements than an int64 can count")
    return tuple(dims)


def element_type(type: Any) -> OnnxTensorType:
    """An element type given as an ``OnnxJavaType`` or ``OnnxTensorType`` member (refusing UNKNOWN/UNDEFINED)."""
    if isinstance(type, OnnxJavaType):
        if type == OnnxJavaType.UNKNOWN:
            raise OrtException.invalid_argument("cannot create a tensor of OnnxJavaType.UNKNOWN")
        return OnnxTensorType.mapFromJavaType(type)
    if isinstance(type, OnnxTensorType):
        if type == _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED or type in UNSUPPORTED_TYPES:
            raise OrtException.invalid_argument(f"cannot create a tensor of {type.name} (ONNX Runtime 1.19 has none)")
        return type
    raise OrtException.invalid_argument(
        f"the element type must be an OnnxJavaType or OnnxTensorType member, not {type!r}"
    )


def _reinterpretable(dtype: np.dtype, storage: np.dtype, raw: bool) -> bool:
    """Whether memory of ``dtype`` may be read as ``storage`` elements: raw bytes always; 16-bit
    integers (the bits of fp16/bf16 values) for a 16-bit storage."""
    return raw or dtype.kind in "iu" and (dtype.itemsize == 1 or dtype.itemsize == storage.itemsize)


def buffer_array(buffer: Any, shape: Any, type: Any = None) -> Tuple[np.ndarray, OnnxTensorType, Tuple[int, ...], bool]:
    """(array the tensor is made over, element type, shape, copied) for ``createTensor(env, buffer,
    shape[, type])`` (see the module). ``copied``: the array does not share the buffer's memory."""
    dims = check_shape(shape)
    count = 1
    for dim in dims:
        count *= dim
    onnx_type = None if type is None else element_type(type)
    raw = False
    if isinstance(buffer, np.ndarray):
        source = buffer
    elif isinstance(buffer, (list, tuple, str, bool, int, float, np.generic)):  # Python data, not a buffer
        source, inferred = data_array(buffer, "the buffer")
        if onnx_type is not None and onnx_type != inferred:
            dtype = NUMPY_DTYPES.get(onnx_type)
            if dtype is None or inferred == STRING:
                raise OrtException.invalid_argument(f"data of {inferred.name} cannot make a {onnx_type.name} tensor")
            source = _cast_data(source, inferred, dtype, onnx_type)
    else:
        view = _buffer_view(buffer)
        if view is None:
            raise OrtException.invalid_argument(
                f"the buffer must be a numpy array or a bytes-like object, not {_name(buffer)}"
            )
        source, raw = view, view.dtype == np.int8 and memoryview(buffer).format in _RAW_FORMATS
        if onnx_type is None and raw:
            onnx_type = _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8  # Java's ByteBuffer default
    if onnx_type == STRING and not is_string_array(source):
        raise OrtException.invalid_argument(
            f"a STRING tensor is made of str data (a list or a str array), not of a buffer of {source.dtype}"
        )
    if onnx_type is None or onnx_type == STRING:
        array, onnx_type = array_for(source, "the buffer")
        if array.size != count:
            raise _count_mismatch(dims, count, f"{array.size} elements")
        return array.reshape(dims), onnx_type, dims, not np.may_share_memory(array, source)
    storage = storage_dtype(onnx_type)
    assert storage is not None  # element_type refused the rest
    native = source.dtype.newbyteorder("=") if source.dtype.byteorder not in ("=", "|") else source.dtype
    values = NUMPY_DTYPES.get(onnx_type)  # None for the types numpy lacks (and np.dtype("float64") == None is True)
    if native == storage or (values is not None and native == values):
        array = as_tensor_array(source, "the buffer")
        needed = count if onnx_type not in PACKED_TYPES else byte_size(onnx_type, count)
        if array.size != needed:
            raise _count_mismatch(dims, count, f"{array.size} elements of {array.dtype}")
    elif _reinterpretable(native, storage, raw) and native.byteorder in ("=", "|"):
        contiguous = np.ascontiguousarray(source).reshape(-1)
        if contiguous.nbytes != byte_size(onnx_type, count):
            raise _count_mismatch(dims, count, f"{contiguous.nbytes} bytes", onnx_type)
        array = as_tensor_array(contiguous.view(np.uint8).view(storage), "the buffer")
    else:
        raise OrtException.invalid_argument(
            f"the buffer holds {source.dtype} but the element type is {onnx_type.name}: give a {storage} array, "
            "or its raw bytes (array.view(np.uint8))"
        )
    if onnx_type not in PACKED_TYPES:
        array = array.reshape(dims)
    return array, onnx_type, dims, not np.may_share_memory(array, source)


def _cast_data(source: np.ndarray, inferred: OnnxTensorType, dtype: np.dtype, onnx_type: OnnxTensorType) -> np.ndarray:
    """Python data (``source``, numpy's reading of it) as ``dtype``: an integer must fit in the integer
    type, a finite number must stay finite in the float type (numpy's casts wrap or overflow silently);
    a cast across kinds (float to int) is refused."""
    if source.dtype.kind in "iu" and dtype.kind in "iu":
        limits = np.iinfo(dtype)
        outside = (source < limits.min) | (source > limits.max)
        if outside.any():
            value = source.reshape(-1)[int(np.argmax(outside.reshape(-1)))]
            raise OrtException.invalid_argument(
                f"the data holds {int(value)}, which does not fit in {onnx_type.name} ({limits.min} to {limits.max})"
            )
        return source.astype(dtype)
    try:
        with np.errstate(over="ignore"):
            result = source.astype(dtype, casting="same_kind")
    except TypeError as exc:
        raise OrtException.invalid_argument(f"data of {inferred.name} cannot make a {onnx_type.name} tensor: {exc}") from None
    if dtype.kind == "f" and source.dtype.kind in "iuf":
        overflowed = np.isinf(result) & np.isfinite(source)
        if overflowed.any():
            value = source.reshape(-1)[int(np.argmax(overflowed.reshape(-1)))]
            raise OrtException.invalid_argument(f"the data holds {value.item()!r}, which does not fit in {onnx_type.name}")
    return result


def _name(obj: Any) -> str:
    return type(obj).__name__


def _count_mismatch(dims: Tuple[int, ...], count: int, has: str, onnx_type: Optional[OnnxTensorType] = None) -> OrtException:
    needs = f"{count} elements" if onnx_type is None else f"{count} elements ({byte_size(onnx_type, count)} bytes of {onnx_type.name})"
    return OrtException.invalid_argument(f"shape {list(dims)} needs {needs} but the buffer has {has}")


# --- out: raw storage to values ----------------------------------------------------------------------


def _float8_table(exponent_bits: int, mantissa_bits: int, bias: int, fnuz: bool, has_inf: bool) -> np.ndarray:
    """float32 bits of all 256 float8 values (exact), NaNs as ONNX Runtime's own Cast gives them."""
    table = np.zeros(256, np.uint32)
    mantissa_scale = 2.0 ** mantissa_bits
    for byte in range(256):
        sign = byte >> 7
        exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = byte & ((1 << mantissa_bits) - 1)
        top = exponent == (1 << exponent_bits) - 1
        if fnuz and byte == 0x80:
            bits = 0xFFC00000  # the one NaN of the FNUZ types, negative in the runtime's conversion
        elif not fnuz and top and (mantissa if has_inf else mantissa == (1 << mantissa_bits) - 1):
            bits = 0x7FC00000 | (sign << 31)  # NaN, with its sign
        elif not fnuz and has_inf and top:
            bits = 0x7F800000 | (sign << 31)
        else:
            if exponent:
                value = 2.0 ** (exponent - bias) * (1 + mantissa / mantissa_scale)
            else:
                value = 2.0 ** (1 - bias) * (mantissa / mantissa_scale)
            bits = int(np.array([-value if sign else value], np.float32).view(np.uint32)[0])
        table[byte] = bits
    return table.view(np.float32)


_FLOAT8_TABLES = {
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: _float8_table(4, 3, 7, fnuz=False, has_inf=False),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ: _float8_table(4, 3, 8, fnuz=True, has_inf=False),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2: _float8_table(5, 2, 15, fnuz=False, has_inf=True),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ: _float8_table(5, 2, 16, fnuz=True, has_inf=False),
}


def values_from_bits(onnx_type: OnnxTensorType, storage: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` values (flat) of a tensor of a type numpy lacks, from its raw storage (flat)."""
    if onnx_type == _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
        return np.asarray(bf16_to_float(storage.view(np.uint16)), dtype=np.float32).reshape(-1)
    table = _FLOAT8_TABLES.get(onnx_type)
    if table is not None:
        return table[storage.view(np.uint8)]
    if onnx_type in PACKED_TYPES:
        packed = storage.view(np.uint8)
        nibbles = np.empty(packed.size * 2, np.uint8)
        nibbles[0::2] = packed & 0x0F  # the first element in the low nibble
        nibbles[1::2] = packed >> 4
        nibbles = nibbles[:count]
        if onnx_type == _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4:
            return ((nibbles.astype(np.int8) << 4) >> 4).astype(np.int8)  # sign-extend 4 bits
        return nibbles
    raise OrtException.invalid_argument(f"element type {onnx_type.name} has no value ort_cffi can read")


__all__ = ["BITS_TYPES", "as_tensor_array", "array_for", "buffer_array", "check_shape", "data_array", "values_from_bits"]
