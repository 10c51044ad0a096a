"""Facade: ``TensorInfo``, Java's description of a tensor (element type, shape, dimension names), over
the element-type catalogue in ``element_types``."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ort_cffi._facade.tensors.conversions import buffer_array, data_array
from ort_cffi._facade.tensors.element_types import (
    JAVA_BY_ONNX,
    NUMPY_DTYPES,
    ONNX_TYPES,
    STRING,
    VALUE_DTYPES,
    OnnxJavaType,
    OnnxTensorType,
)
from ort_cffi._native.errors import OrtException


class TensorInfo:
    """The element type and shape of a tensor, or of a model's input or output.

    `onnxType` is an `OnnxTensorType` member for every element type, `type` the `OnnxJavaType` Java
    gives it, `shape` a tuple of ints in which -1 marks a dimension a model's signature leaves open,
    and `dimensionNames` the symbolic names of a signature's dimensions ('' where a dimension has
    none). Plain Python data, no native memory: equal to another of the same type and shape.

    Java: `ai.onnxruntime.TensorInfo` (whose constructors are package-private).

    Args:
        onnx_type: The element type, an `OnnxTensorType` or its number (an unknown number gives
            UNDEFINED).
        shape: The dimensions, a sequence of ints.
        dim_names: The symbolic name of each dimension, or empty.
    """

    OnnxTensorType = OnnxTensorType
    MAX_DIMENSIONS = 8  # Java's constant, kept for ports; ort_cffi itself has no such limit

    __slots__ = ("onnxType", "shape", "dimensionNames")

    def __init__(self, onnx_type: int, shape: Sequence[int], dim_names: Sequence[str] = ()) -> None:
        self.onnxType = ONNX_TYPES.get(onnx_type, OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED)
        self.shape: Tuple[int, ...] = shape if type(shape) is tuple else tuple(int(d) for d in shape)
        self.dimensionNames: Tuple[str, ...] = tuple(dim_names) if dim_names else ()

    @property
    def type(self) -> OnnxJavaType:
        """Java's carrier type of the elements, `OnnxJavaType.mapFromOnnxTensorType(onnxType)`.

        Java: the field `OnnxJavaType type`.
        """
        return JAVA_BY_ONNX.get(self.onnxType, OnnxJavaType.UNKNOWN)

    @property
    def dtype(self) -> Optional[np.dtype]:
        """The numpy dtype of the elements; None for a type numpy lacks (strings, bfloat16, float8, int4).

        Java: none (ort_cffi addition).
        """
        return NUMPY_DTYPES.get(self.onnxType)

    def getShape(self) -> Tuple[int, ...]:
        """The shape; also the `shape` attribute. -1 marks a dimension a model's signature leaves open.

        Java: `long[] getShape()`.

        Returns:
            The shape, an immutable tuple of ints that this `TensorInfo` owns and the caller may keep.
        """
        return self.shape

    def getDimensionNames(self) -> Tuple[str, ...]:
        """The symbolic name of each dimension of a model's signature, '' for one without.

        Java: `String[] getDimensionNames()`.

        Returns:
            An immutable tuple of `str`, one per dimension, that this `TensorInfo` owns (or a new one of
                '' when it has no names) and the caller may keep.
        """
        return self.dimensionNames if self.dimensionNames else ("",) * len(self.shape)

    def isScalar(self) -> bool:
        """True for a tensor of rank 0.

        Java: `boolean isScalar()`.
        """
        return len(self.shape) == 0

    def getNumElements(self) -> int:
        """The number of elements, the product of the shape.

        Java: `long getNumElements()` (which multiplies the -1s in).

        Raises:
            OrtInvalidArgumentException: The shape has open (-1) dimensions.
        """
        count = 1
        for dim in self.shape:
            if dim < 0:
                raise OrtException.invalid_argument(f"shape {list(self.shape)} has unknown dimensions")
            count *= dim
        return count

    def makeCarrier(self) -> np.ndarray:
        """An array to receive a tensor's values: zero-filled, of the shape and of `getValue()`'s dtype.

        Java: `Object makeCarrier()`.

        Returns:
            A new numpy array the caller owns (filled with '' for strings).

        Raises:
            OrtInvalidArgumentException: The element type is UNDEFINED or complex, or the shape has
                open (-1) dimensions.
        """
        dtype = VALUE_DTYPES.get(self.onnxType)
        if dtype is None:
            raise OrtException.invalid_argument(f"cannot make a carrier for element type {self.onnxType.name}")
        self.getNumElements()  # raises for unknown dimensions
        if self.onnxType == STRING:
            return np.full(self.shape, "", dtype=object)
        return np.zeros(self.shape, dtype=dtype)

    @staticmethod
    def constructFromJavaArray(obj: Any) -> TensorInfo:
        """The `TensorInfo` that `OnnxTensor.createTensor(env, obj)` would give `obj`.

        Java: `static TensorInfo constructFromJavaArray(Object obj)`.

        Args:
            obj: A scalar, a `str`, a nested sequence or a numpy array.

        Returns:
            A new `TensorInfo` the caller owns (plain Python data).

        Raises:
            OrtInvalidArgumentException: `createTensor` would refuse `obj` (ragged, mixed, unsupported
                objects or dtypes).
        """

        array, onnx_type = data_array(obj)
        return TensorInfo(onnx_type, array.shape)

    @staticmethod
    def constructFromBuffer(buffer: Any, shape: Sequence[int], type: Any) -> TensorInfo:
        """The `TensorInfo` that `OnnxTensor.createTensor(env, buffer, shape, type)` would give.

        Java: `static TensorInfo constructFromBuffer(Buffer buffer, long[] shape, OnnxJavaType type)`.

        Args:
            buffer: A numpy array or a bytes-like object.
            shape: A sequence of non-negative ints.
            type: An `OnnxJavaType` or `OnnxTensorType`.

        Returns:
            A new `TensorInfo` the caller owns (plain Python data).

        Raises:
            OrtInvalidArgumentException: The buffer does not hold exactly the elements the shape needs,
                the shape is not a sequence of non-negative ints, or `type` is no element type.
        """

        _, onnx_type, dims, _ = buffer_array(buffer, shape, type)
        return TensorInfo(onnx_type, dims)

    def toString(self) -> str:
        """Java's text: `TensorInfo(javaType=FLOAT,onnxType=ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,shape=[2, 3])`.

        `repr()` is shorter.

        Java: `String toString()`.
        """
        text = f"TensorInfo(javaType={self.type.name},onnxType={self.onnxType.name},shape={list(self.shape)}"
        if any(self.dimensionNames):
            text += ",dimNames=[" + ",".join(n or '""' for n in self.dimensionNames) + "]"
        return text + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and (self.onnxType, self.shape) == (other.onnxType, other.shape)

    def __hash__(self) -> int:
        return hash((self.onnxType, self.shape))

    def __repr__(self) -> str:
        return f"TensorInfo(onnxType={self.onnxType.name}, shape={list(self.shape)})"
