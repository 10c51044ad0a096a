"""``OrtValue``: ONNX Runtime's Python tensor value (``onnxruntime.OrtValue``), as ort_cffi's ``OnnxTensor``
under that face, with the conversions between the two."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ort_cffi import OnnxTensor, OrtEnvironment, OrtException


def check_device(device_type: str, device_id: int = 0) -> str:
    """The device a value or a module lives on, checked: ``"cpu"`` or ``"cuda"`` (ONNX Runtime's Python layer
    raises the same "Unsupported device type" for the others)."""
    if not isinstance(device_type, str):
        raise TypeError(f"the device type is a str such as 'cpu' or 'cuda', not {type(device_type).__name__}")
    if device_type not in ("cpu", "cuda"):
        raise OrtException.invalid_argument(
            f"Unsupported device type: {device_type} (ort_cffi.api runs on 'cpu' and 'cuda')"
        )
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise OrtException.invalid_argument(f"the device id is an int >= 0, not {device_id!r}")
    return device_type


class OrtValue:
    """A tensor value, in the face of ONNX Runtime's ``onnxruntime.OrtValue``: what a `Module` step takes and
    returns when its inputs are `OrtValue` objects, and what `Module.get_contiguous_parameters` returns.

    It holds an ort_cffi `OnnxTensor` in CPU memory: `OrtValue(tensor)` wraps one (the tensor stays its
    caller's: the value does not close it), `as_onnx_tensor()` gives it back. The factories make values that
    own their tensor; it is released with the value (garbage collection) or by `close()`.

    ONNX Runtime: `onnxruntime.OrtValue` (its constructor takes the runtime's C++ value, which ort_cffi
    replaces by an `OnnxTensor`; sparse tensors and tensor sequences are not supported).

    Args:
        ortvalue: The `OnnxTensor` to wrap.

    Raises:
        ValueError: `ortvalue` is not an `OnnxTensor` (ONNX Runtime raises ValueError too).
    """

    def __init__(self, ortvalue: OnnxTensor, numpy_obj: Optional[np.ndarray] = None) -> None:
        if not isinstance(ortvalue, OnnxTensor):
            raise ValueError(f"an OrtValue wraps an ort_cffi OnnxTensor, not {type(ortvalue).__name__}")
        self._tensor = ortvalue
        self._numpy_obj = numpy_obj  # the array a value made by ortvalue_from_numpy reads in place
        self._owns = False

    @classmethod
    def _owning(cls, tensor: OnnxTensor, numpy_obj: Optional[np.ndarray] = None) -> OrtValue:
        value = cls(tensor, numpy_obj)
        value._owns = True
        return value

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """A value over a numpy array, read in place (no copy) when its layout allows, copied once otherwise.

        As in ONNX Runtime, a value over the array sees later changes of the array, and keeps the array alive.

        ONNX Runtime: `OrtValue.ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0)`.

        Args:
            numpy_obj: A numpy array of any element type ort_cffi supports (strings included).
            device_type: `"cpu"`. ort_cffi's values live in CPU memory: `"cuda"` is refused (a `Module` on
                `device="cuda"` takes CPU values and the runtime copies them).
            device_id: 0.

        Returns:
            A new `OrtValue` the caller owns.

        Raises:
            OrtInvalidArgumentException: `device_type` is not `"cpu"`, or the array's element type is not supported.
            TypeError: `numpy_obj` is not a numpy array.
        """
        if check_device(device_type, device_id) != "cpu":
            raise OrtException.invalid_argument(
                "ort_cffi's OrtValue lives in CPU memory: use device_type='cpu' (a Module on 'cuda' takes CPU values)"
            )
        if not isinstance(numpy_obj, np.ndarray):
            raise TypeError(f"ortvalue_from_numpy takes a numpy array, not {type(numpy_obj).__name__}")
        tensor = OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), numpy_obj)
        return OrtValue._owning(tensor, numpy_obj)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Optional[Sequence[int]] = None, element_type: Any = None,
                                     device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """A new value of that shape and numpy element type, zero-filled (ONNX Runtime leaves it uninitialised).

        ONNX Runtime: `OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0)`.

        Returns:
            A new `OrtValue` the caller owns.

        Raises:
            ValueError: `shape` or `element_type` is missing (ONNX Runtime's error).
            OrtInvalidArgumentException: `device_type` is not `"cpu"`.
        """
        if shape is None or element_type is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        if check_device(device_type, device_id) != "cpu":
            raise OrtException.invalid_argument("ort_cffi's OrtValue lives in CPU memory: use device_type='cpu'")
        return OrtValue.ortvalue_from_numpy(np.zeros([int(d) for d in shape], dtype=element_type))

    def as_onnx_tensor(self) -> OnnxTensor:
        """The ort_cffi `OnnxTensor` this value holds (not a copy: it closes with a value that owns it).

        ONNX Runtime: none (ort_cffi addition; the inverse of `OrtValue(tensor)`).
        """
        return self._tensor

    def numpy(self) -> np.ndarray:
        """The values, as a new numpy array the caller owns (a copy, as ONNX Runtime's for CPU values).

        ONNX Runtime: `OrtValue.numpy()`.

        Raises:
            OrtClosedException: The value, or the tensor it wraps, is closed.
        """
        return np.asarray(self._tensor.getValue())

    def shape(self) -> List[int]:
        """The shape, a list of ints.

        ONNX Runtime: `OrtValue.shape()`.
        """
        return [int(d) for d in self._tensor.getInfo().getShape()]

    def data_type(self) -> str:
        """The value's type in ONNX's spelling, e.g. `"tensor(float)"`.

        ONNX Runtime: `OrtValue.data_type()`.
        """
        return str(self._tensor.getInfo().onnxType.onnx_name)

    def element_type(self) -> int:
        """The element type's number in ONNX's `TensorProto.DataType` (1 for float, 7 for int64).

        ONNX Runtime: `OrtValue.element_type()`.
        """
        return int(self._tensor.getInfo().onnxType)

    def device_name(self) -> str:
        """Where the data lies: always `"cpu"` in ort_cffi.

        ONNX Runtime: `OrtValue.device_name()` (`"cuda"` for its CUDA values).
        """
        self._tensor.getInfo()  # a closed value says so
        return "cpu"

    def has_value(self) -> bool:
        """True: ort_cffi's values are tensors, never an empty optional.

        ONNX Runtime: `OrtValue.has_value()`.
        """
        self._tensor.getInfo()
        return True

    def is_tensor(self) -> bool:
        """True: every ort_cffi value is a tensor.

        ONNX Runtime: `OrtValue.is_tensor()`.
        """
        self._tensor.getInfo()
        return True

    def is_sparse_tensor(self) -> bool:
        """False: ort_cffi has no sparse tensors.

        ONNX Runtime: `OrtValue.is_sparse_tensor()`.
        """
        return False

    def is_tensor_sequence(self) -> bool:
        """False: ort_cffi's values are tensors.

        ONNX Runtime: `OrtValue.is_tensor_sequence()`.
        """
        return False

    def data_ptr(self) -> int:
        """The address of the first element.

        ONNX Runtime: `OrtValue.data_ptr()`.

        Raises:
            OrtInvalidArgumentException: The value wraps a tensor made from Python data, whose memory ort_cffi
                does not expose.
        """
        buffer = self._tensor.getBufferRef()
        if not buffer.isPresent():
            raise OrtException.invalid_argument("this value's tensor was made from Python data: its address is not exposed")
        return int(buffer.get().ctypes.data)

    def update_inplace(self, np_arr: np.ndarray) -> None:
        """Copy `np_arr` into the value's memory (same element type and number of elements).

        ONNX Runtime: `OrtValue.update_inplace(np_arr)`.

        Raises:
            OrtInvalidArgumentException: The value's memory is not writable from Python, or `np_arr` does not fit.
        """
        buffer = self._tensor.getBufferRef()
        if not buffer.isPresent() or not self._tensor.writable:
            raise OrtException.invalid_argument("this value's memory cannot be written in place")
        target = buffer.get()
        source = np.asarray(np_arr)
        if source.dtype != target.dtype or source.size != target.size:
            raise OrtException.invalid_argument(
                f"update_inplace needs {target.size} elements of {target.dtype}, got {source.size} of {source.dtype}"
            )
        np.copyto(target, source.reshape(target.shape))

    def close(self) -> None:
        """Release the tensor, if this value made it (idempotent); a wrapped caller's tensor stays open.

        ONNX Runtime: none (ort_cffi addition; its values are released by garbage collection only).
        """
        if self._owns:
            self._tensor.close()

    def __repr__(self) -> str:
        if self._tensor.isClosed():
            return "OrtValue(closed)"
        return f"OrtValue({self.data_type()}, shape={self.shape()})"
