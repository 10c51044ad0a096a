"""The element-type catalogue: ``OnnxTensorType``, ``OnnxJavaType`` and ``OnnxValueType`` (Java's
ai.onnxruntime enums of those names, nested in TensorInfo and OnnxJavaType there), and the tables between
them and numpy. It imports nothing of ort_cffi but the errors, so that conversions, tensors and signatures
all build on it.

Element types come in three layers, as in Java:

- ``OnnxTensorType`` is the runtime's own element type (``ONNXTensorElementDataType``, with the C
  API's numbers: FLOAT is 1, BFLOAT16 16, the float8 types 17-20, UINT4/INT4 21-22);
- ``OnnxJavaType`` is Java's carrier type (FLOAT, DOUBLE, INT8, ..., FLOAT16, BFLOAT16, STRING):
  ``mapFromOnnxTensorType`` folds the unsigned types into the signed carrier of the same width, as
  Java does, and maps the types Java has no carrier for (float8, int4, complex) to UNKNOWN;
- numpy dtypes: ``NUMPY_DTYPES`` maps every element type numpy stores natively to its dtype;
  ``VALUE_DTYPES`` says what ``getValue()`` returns for the others (bfloat16 and float8 as
  float32, int4 as int8, uint4 as uint8, strings as Python ``str`` objects).
"""
from __future__ import annotations

import enum
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ort_cffi._native.errors import OrtException


class OnnxTensorType(enum.IntEnum):
    """ONNX tensor element types (`ONNXTensorElementDataType`), with the C API's numbers.

    An `IntEnum`; also reachable as `TensorInfo.OnnxTensorType`. Unlike Java's enum, whose `value` is
    the JNI's own numbering, the values here are the runtime's. Beyond Java: the 4-bit types UINT4 and
    INT4 (two elements per byte).

    Java: `TensorInfo.OnnxTensorType`.
    """

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
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4 = 21
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4 = 22

    @classmethod
    def mapFromInt(cls, value: int) -> OnnxTensorType:
        """The member with the runtime's number `value`; UNDEFINED for an unknown number.

        Java: `static OnnxTensorType mapFromInt(int value)` (by Java's numbering there).
        """
        return ONNX_TYPES.get(value, cls.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)

    @classmethod
    def mapFromJavaType(cls, type: OnnxJavaType) -> OnnxTensorType:
        """The element type a Java carrier type makes: FLOAT → FLOAT, UINT8 → UINT8, BFLOAT16 → BFLOAT16, ...

        UNKNOWN gives UNDEFINED.

        Java: `static OnnxTensorType mapFromJavaType(OnnxJavaType type)`.

        Args:
            type: An `OnnxJavaType` or its number.

        Raises:
            ValueError: `type` is no `OnnxJavaType`.
        """
        return _ONNX_BY_JAVA.get(OnnxJavaType(type), cls.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)

    @property
    def onnx_name(self) -> str:
        """ONNX's own spelling of the type, as in the runtime's messages: `tensor(float)`.

        Java: none (ort_cffi addition).
        """
        return f"tensor({_ONNX_SPELLING[self]})"


ONNX_TYPES = {int(t): t for t in OnnxTensorType}  # a dict lookup: the enum's own call is slow
_T = OnnxTensorType
_ONNX_SPELLING = {t: t.name[len("ONNX_TENSOR_ELEMENT_DATA_TYPE_"):].lower() for t in OnnxTensorType}

# Element types numpy stores natively: a tensor over such an array is read and written in place.
NUMPY_DTYPES: Dict[OnnxTensorType, np.dtype] = {
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: np.dtype(np.float32),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: np.dtype(np.uint8),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: np.dtype(np.int8),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: np.dtype(np.uint16),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: np.dtype(np.int16),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: np.dtype(np.int32),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: np.dtype(np.int64),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: np.dtype(np.bool_),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: np.dtype(np.float16),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: np.dtype(np.float64),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: np.dtype(np.uint32),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: np.dtype(np.uint64),
}
DTYPE_TO_ONNX: Dict[np.dtype, OnnxTensorType] = {dtype: onnx_type for onnx_type, dtype in NUMPY_DTYPES.items()}
ONNX_TO_DTYPE = NUMPY_DTYPES  # the name the rest of the package used first
# Element types numpy lacks, stored as raw bits: (storage dtype, what getValue() returns).
BITS_TYPES: Dict[OnnxTensorType, Tuple[np.dtype, np.dtype]] = {
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: (np.dtype(np.uint16), np.dtype(np.float32)),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: (np.dtype(np.uint8), np.dtype(np.float32)),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ: (np.dtype(np.uint8), np.dtype(np.float32)),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2: (np.dtype(np.uint8), np.dtype(np.float32)),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ: (np.dtype(np.uint8), np.dtype(np.float32)),
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4: (np.dtype(np.uint8), np.dtype(np.uint8)),  # two per byte
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4: (np.dtype(np.uint8), np.dtype(np.int8)),  # two per byte
}
PACKED_TYPES = frozenset({_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4, _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4})
STRING = _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING
# What getValue() returns for each element type the runtime can hold.
VALUE_DTYPES: Dict[OnnxTensorType, np.dtype] = {
    **NUMPY_DTYPES,
    **{onnx_type: value for onnx_type, (_, value) in BITS_TYPES.items()},
    STRING: np.dtype(object),
}
# The types ONNX Runtime 1.19 can make tensors of, but these two (it says "tensor type 14 is not supported").
UNSUPPORTED_TYPES = frozenset({_T.ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64, _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128})


def storage_dtype(onnx_type: OnnxTensorType) -> Optional[np.dtype]:
    """The dtype a tensor of ``onnx_type`` is stored as in numpy memory (None for strings and unsupported types)."""
    dtype = NUMPY_DTYPES.get(onnx_type)
    if dtype is None and onnx_type in BITS_TYPES:
        dtype = BITS_TYPES[onnx_type][0]
    return dtype


def byte_size(onnx_type: OnnxTensorType, count: int) -> int:
    """Bytes of memory ``count`` elements of a numeric ``onnx_type`` take (int4 packs two per byte)."""
    if onnx_type in PACKED_TYPES:
        return (count + 1) // 2
    dtype = storage_dtype(onnx_type)
    if dtype is None:
        raise OrtException.invalid_argument(f"{onnx_type.name} has no fixed element size")
    return count * dtype.itemsize


class OnnxJavaType(enum.IntEnum):
    """Java's carrier types of tensor elements, with Java's numbers as values.

    An `IntEnum`. `size` is the bytes of one element; `clazz` the Python type of one element (a numpy
    scalar type; `str` for STRING; BFLOAT16's raw bits are `np.int16`, as Java's `short`).

    Java: `ai.onnxruntime.OnnxJavaType`.
    """

    UNKNOWN = 0
    FLOAT = 1
    DOUBLE = 2
    INT8 = 3
    INT16 = 4
    INT32 = 5
    INT64 = 6
    BOOL = 7
    STRING = 8
    UINT8 = 9
    FLOAT16 = 10
    BFLOAT16 = 11

    @property
    def size(self) -> int:
        """The bytes of one element (4 for STRING, 0 for UNKNOWN, as in Java).

        Java: the field `int size`.
        """
        return _JAVA_SIZES[self]

    @property
    def clazz(self) -> Any:
        """The Python type of one element: a numpy scalar type, `str` for STRING, `object` for UNKNOWN.

        Java: the field `Class<?> clazz`.
        """
        return _JAVA_CLASSES[self]

    @classmethod
    def mapFromInt(cls, value: int) -> OnnxJavaType:
        """The member with Java's number `value`; UNKNOWN for any other number.

        Java: `static OnnxJavaType mapFromInt(int value)`.
        """
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def mapFromOnnxTensorType(cls, onnxValue: OnnxTensorType) -> OnnxJavaType:
        """Java's carrier for an element type.

        Unsigned types fold into the signed type of the same width (UINT16 → INT16, UINT32 → INT32,
        UINT64 → INT64), UINT8 stays UINT8, FLOAT16 and BFLOAT16 are their own; UNDEFINED, the complex,
        float8 and int4 types, and numbers that are no element type, give UNKNOWN.

        Java: `static OnnxJavaType mapFromOnnxTensorType(OnnxTensorType onnxValue)`.
        """
        return JAVA_BY_ONNX.get(int(onnxValue), cls.UNKNOWN)

    @classmethod
    def mapFromClass(cls, clazz: Any) -> OnnxJavaType:
        """The carrier of a Python or numpy element type; UNKNOWN for anything else.

        `float` → DOUBLE, `int` → INT64, `bool` → BOOL, `str` → STRING, `np.float32` → FLOAT,
        `np.uint16` → INT16, ...

        Java: `static OnnxJavaType mapFromClass(Class<?> clazz)`.
        """
        if clazz is str:
            return cls.STRING
        if clazz is bool:
            return cls.BOOL
        if clazz is int:
            return cls.INT64
        if clazz is float:
            return cls.DOUBLE
        try:
            dtype = np.dtype(clazz)
        except TypeError:
            return cls.UNKNOWN
        onnx_type = DTYPE_TO_ONNX.get(dtype)
        return cls.UNKNOWN if onnx_type is None else cls.mapFromOnnxTensorType(onnx_type)


_J = OnnxJavaType
_JAVA_SIZES = {_J.UNKNOWN: 0, _J.FLOAT: 4, _J.DOUBLE: 8, _J.INT8: 1, _J.INT16: 2, _J.INT32: 4, _J.INT64: 8,
               _J.BOOL: 1, _J.STRING: 4, _J.UINT8: 1, _J.FLOAT16: 2, _J.BFLOAT16: 2}
_JAVA_CLASSES: Dict[OnnxJavaType, Any] = {
    _J.UNKNOWN: object, _J.FLOAT: np.float32, _J.DOUBLE: np.float64, _J.INT8: np.int8, _J.INT16: np.int16,
    _J.INT32: np.int32, _J.INT64: np.int64, _J.BOOL: np.bool_, _J.STRING: str, _J.UINT8: np.uint8,
    _J.FLOAT16: np.float16, _J.BFLOAT16: np.int16,
}
JAVA_BY_ONNX: Dict[int, OnnxJavaType] = {
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: _J.UINT8,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: _J.INT8,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: _J.INT16,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: _J.INT16,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: _J.INT32,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: _J.INT32,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: _J.INT64,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: _J.INT64,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: _J.FLOAT16,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: _J.BFLOAT16,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: _J.FLOAT,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: _J.DOUBLE,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: _J.STRING,
    _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: _J.BOOL,
}
_ONNX_BY_JAVA: Dict[OnnxJavaType, OnnxTensorType] = {
    _J.FLOAT: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    _J.DOUBLE: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
    _J.INT8: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    _J.UINT8: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    _J.INT16: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    _J.INT32: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    _J.INT64: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    _J.BOOL: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
    _J.STRING: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING,
    _J.FLOAT16: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    _J.BFLOAT16: _T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
}


class OnnxValueType(enum.IntEnum):
    """What kind of value an `OnnxValue` holds (`ONNXType`, with the C API's numbers).

    An `IntEnum`; every value ort_cffi makes is `ONNX_TYPE_TENSOR`.

    Java: `OnnxValue.OnnxValueType`.
    """

    ONNX_TYPE_UNKNOWN = 0
    ONNX_TYPE_TENSOR = 1
    ONNX_TYPE_SEQUENCE = 2
    ONNX_TYPE_MAP = 3
    ONNX_TYPE_OPAQUE = 4
    ONNX_TYPE_SPARSETENSOR = 5
    ONNX_TYPE_OPTIONAL = 6
