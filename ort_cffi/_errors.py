"""Exceptions and error codes (the bottom layer: imports nothing from ort_cffi).

``OrtErrorCode`` mirrors Java's ``ai.onnxruntime.OrtException.OrtErrorCode``; ``OrtException``
carries one. ONNX Runtime reports most training failures as ORT_RUNTIME_EXCEPTION (or ORT_FAIL)
with the real code inside the text (``[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...``): the
real code is recovered from it.
"""
from __future__ import annotations

import enum
import re
from typing import Any, Optional


class OrtErrorCode(enum.IntEnum):
    """The error codes of ONNX Runtime's C API, plus Java's ORT_JAVA_UNKNOWN."""

    ORT_JAVA_UNKNOWN = -1
    ORT_OK = 0
    ORT_FAIL = 1
    ORT_INVALID_ARGUMENT = 2
    ORT_NO_SUCHFILE = 3
    ORT_NO_MODEL = 4
    ORT_ENGINE_ERROR = 5
    ORT_RUNTIME_EXCEPTION = 6
    ORT_INVALID_PROTOBUF = 7
    ORT_MODEL_LOADED = 8
    ORT_NOT_IMPLEMENTED = 9
    ORT_INVALID_GRAPH = 10
    ORT_EP_FAIL = 11

    def getValue(self) -> int:
        """The C API's number of this code (-1 for ORT_JAVA_UNKNOWN)."""
        return int(self)

    @classmethod
    def mapNativeCode(cls, code: int) -> "OrtErrorCode":
        """The code with the C API's number ``code``; ORT_JAVA_UNKNOWN for a number that is no code."""
        try:
            return cls(code)
        except ValueError:
            return cls.ORT_JAVA_UNKNOWN

    @classmethod
    def mapFromInt(cls, value: int) -> "OrtErrorCode":
        """Java's name for ``mapNativeCode``: the code numbered ``value``, ORT_JAVA_UNKNOWN for any other number."""
        return cls.mapNativeCode(value)


_WRAPPED_CODE = re.compile(r"\[ONNXRuntimeError\] : (\d+) : ")


class OrtException(Exception):
    """An error from ONNX Runtime or from ort_cffi's checks; ``getCode()`` gives its OrtErrorCode.

    ``OrtException(message[, code])``; Java's order, ``OrtException(code, message)`` with an
    ``OrtErrorCode`` or its number, is accepted too."""

    def __init__(self, message: Any, code: Any = OrtErrorCode.ORT_JAVA_UNKNOWN) -> None:
        if isinstance(code, str) and not isinstance(message, str):  # Java's OrtException(code, message)
            message, code = code, OrtErrorCode.mapNativeCode(int(message))
        super().__init__(message)
        self.code = OrtErrorCode(code)
        self.message = message

    def getCode(self) -> OrtErrorCode:
        """The ``OrtErrorCode`` (Java: ``getCode()``). Where ONNX Runtime reports a failure as
        ORT_RUNTIME_EXCEPTION with the real code inside its message, this is the real code."""
        return self.code

    def __reduce__(self) -> "tuple[Any, ...]":
        # Subclasses take other constructor arguments: rebuild from the message and code as they
        # are (exceptions cross processes under multiprocessing and Ray).
        return (_rebuild, (type(self), self.message, int(self.code)))

    def getMessage(self) -> str:
        """The message (Java: ``getMessage()``), also ``str(exception)``."""
        return self.message

    @classmethod
    def from_native(cls, native_code: int, message: str, context: Optional[str] = None) -> "OrtException":
        """An exception for a failed ``OrtStatus``; recovers the code hidden in a wrapped message."""
        code = OrtErrorCode.mapNativeCode(native_code)
        if code in (OrtErrorCode.ORT_RUNTIME_EXCEPTION, OrtErrorCode.ORT_FAIL):
            wrapped = _WRAPPED_CODE.search(message)
            if wrapped:
                code = OrtErrorCode.mapNativeCode(int(wrapped.group(1)))
        text = f"{context}: {message}" if context else message
        exc_type = _SUBCLASS_BY_CODE.get(code, cls)
        return exc_type(text, code)

    @classmethod
    def invalid_argument(cls, message: str) -> "OrtException":
        """A bad argument found by ort_cffi's own checks, before any native call."""
        return OrtInvalidArgumentException(message, OrtErrorCode.ORT_INVALID_ARGUMENT)


def _rebuild(cls: "type[OrtException]", message: str, code: int) -> OrtException:
    exc = cls.__new__(cls)  # no __init__: the subclasses take other arguments
    Exception.__init__(exc, message)
    exc.message = message
    exc.code = OrtErrorCode(code)
    return exc


class OrtFileNotFoundException(OrtException, FileNotFoundError):
    """A model or checkpoint file that does not exist (also a ``FileNotFoundError``)."""


class OrtInvalidArgumentException(OrtException, ValueError):
    """A bad argument (also a ``ValueError``, as Java's IllegalArgumentException would be)."""


_SUBCLASS_BY_CODE = {
    OrtErrorCode.ORT_NO_SUCHFILE: OrtFileNotFoundException,
    OrtErrorCode.ORT_INVALID_ARGUMENT: OrtInvalidArgumentException,
}


class OrtClosedException(OrtException):
    """An object used after ``close()``."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is closed", OrtErrorCode.ORT_INVALID_ARGUMENT)


class RuntimeLoadError(OrtException):
    """No usable training runtime could be loaded (base of the three loader errors)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, OrtErrorCode.ORT_FAIL)


class RuntimeNotFoundError(RuntimeLoadError, ImportError):
    """No ONNX Runtime was found; the message lists every place that was tried."""


class TrainingApiUnavailableError(RuntimeLoadError):
    """The runtime was found but was built without the training API."""


class UnsupportedRuntimeError(RuntimeLoadError):
    """The runtime's version has a table layout ort_cffi does not declare; it is refused."""


class StaleCacheError(UnsupportedRuntimeError):
    """What the image cache recorded about a runtime file does not check out (an address outside
    the image, another version): the loader examines the file once more before giving up."""
