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
    """The error codes of ONNX Runtime's C API (`OrtErrorCode`), plus Java's `ORT_JAVA_UNKNOWN` (-1).

    An `IntEnum` whose values are the C API's numbers; `OrtException.getCode()` gives one.

    Java: `OrtException.OrtErrorCode`.
    """

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
        """The C API's number of this code (-1 for `ORT_JAVA_UNKNOWN`); also `int(code)`.

        Java: none (ort_cffi addition; Java's `value` field is private).
        """
        return int(self)

    @classmethod
    def mapNativeCode(cls, code: int) -> OrtErrorCode:
        """The code with the C API's number `code`; `ORT_JAVA_UNKNOWN` for a number that is no code.

        Never raises for an int.

        Java: `OrtErrorCode.mapFromInt(int value)` (`mapFromInt` is this method's Java name).
        """
        try:
            return cls(code)
        except ValueError:
            return cls.ORT_JAVA_UNKNOWN

    @classmethod
    def mapFromInt(cls, value: int) -> OrtErrorCode:
        """The code numbered `value`; `ORT_JAVA_UNKNOWN` for any other number (as `mapNativeCode`).

        Java: `static OrtErrorCode mapFromInt(int value)`.
        """
        return cls.mapNativeCode(value)


_WRAPPED_CODE = re.compile(r"\[ONNXRuntimeError\] : (\d+) : ")


class OrtException(Exception):
    """An error from ONNX Runtime or from ort_cffi's own checks; `getCode()` gives its `OrtErrorCode`.

    Every error ort_cffi raises is an `OrtException`. Where the runtime reports `ORT_RUNTIME_EXCEPTION`
    or `ORT_FAIL` with the real code inside its text, the code is the real one, and so is the class:
    `OrtInvalidArgumentException` (also a `ValueError`) for `ORT_INVALID_ARGUMENT`,
    `OrtFileNotFoundException` (also a `FileNotFoundError`) for `ORT_NO_SUCHFILE`. It holds no native
    memory and pickles (it crosses processes under multiprocessing and Ray).

    `OrtException(message[, code])`; Java's order, `OrtException(code, message)` with an
    `OrtErrorCode` or its number, is accepted too.

    Java: `OrtException(String message)`, `OrtException(OrtException.OrtErrorCode code, String message)`,
    `OrtException(int code, String message)`.

    Args:
        message: The message, kept as given (Java's reads "Error code - CODE - message: ...").
            In Java's order this is the code.
        code: An `OrtErrorCode` or its number; `ORT_JAVA_UNKNOWN` when left out. In Java's order this
            is the message, and a number that is no code gives `ORT_JAVA_UNKNOWN`.

    Raises:
        ValueError: In the message-first order, `code` is a number that is no `OrtErrorCode`.
    """

    def __init__(self, message: Any, code: Any = OrtErrorCode.ORT_JAVA_UNKNOWN) -> None:
        if isinstance(code, str) and not isinstance(message, str):  # Java's OrtException(code, message)
            message, code = code, OrtErrorCode.mapNativeCode(int(message))
        super().__init__(message)
        self.code = OrtErrorCode(code)
        self.message = message

    def getCode(self) -> OrtErrorCode:
        """The error's `OrtErrorCode`; also the `code` attribute.

        Where ONNX Runtime reports a failure as `ORT_RUNTIME_EXCEPTION` (or `ORT_FAIL`) with the real
        code inside its message, this is the real code (Java reports the outer one).

        Java: `OrtException.OrtErrorCode getCode()`.
        """
        return self.code

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take other constructor arguments: rebuild from the message and code as they
        # are (exceptions cross processes under multiprocessing and Ray).
        return (_rebuild, (type(self), self.message, int(self.code)))

    def getMessage(self) -> str:
        """The message; also the `message` attribute and `str(exception)`.

        Messages name what was wrong: the input, the path, the expected and the actual shape.

        Java: `String getMessage()`.
        """
        return self.message

    @classmethod
    def from_native(cls, native_code: int, message: str, context: Optional[str] = None) -> OrtException:
        """The exception for a failed `OrtStatus`, with the real code recovered from a wrapped message.

        `capi.check_status` raises what this returns. The class follows the code:
        `OrtInvalidArgumentException` for `ORT_INVALID_ARGUMENT`, `OrtFileNotFoundException` for
        `ORT_NO_SUCHFILE`, else `cls`.

        Java: none (ort_cffi addition).

        Args:
            native_code: The status's code (`GetErrorCode`).
            message: The status's message (`GetErrorMessage`).
            context: What was being done, put before the message (e.g. `"loading checkpoint 'x'"`).

        Returns:
            A new exception the caller owns and raises; it holds no native memory (the status is
                the caller's to release).
        """
        code = OrtErrorCode.mapNativeCode(native_code)
        if code in (OrtErrorCode.ORT_RUNTIME_EXCEPTION, OrtErrorCode.ORT_FAIL):
            wrapped = _WRAPPED_CODE.search(message)
            if wrapped:
                code = OrtErrorCode.mapNativeCode(int(wrapped.group(1)))
        text = f"{context}: {message}" if context else message
        exc_type = _SUBCLASS_BY_CODE.get(code, cls)
        return exc_type(text, code)

    @classmethod
    def invalid_argument(cls, message: str) -> OrtException:
        """The exception for a bad argument found by ort_cffi's own checks, before any native call.

        Java: none (ort_cffi addition; Java throws `IllegalArgumentException` where ort_cffi raises this).

        Args:
            message: What was wrong, naming the argument.

        Returns:
            A new `OrtInvalidArgumentException` (code `ORT_INVALID_ARGUMENT`) the caller owns and raises.
        """
        return OrtInvalidArgumentException(message, OrtErrorCode.ORT_INVALID_ARGUMENT)


def c_string(value: Any, what: str) -> bytes:
    """``value`` as the bytes of a C string: a ``str`` without NUL (which would cut it short) that
    UTF-8 can encode; else ``OrtInvalidArgumentException`` naming ``what`` ("the run tag")."""
    if not isinstance(value, str):
        raise OrtException.invalid_argument(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise OrtException.invalid_argument(f"{what} must not hold a NUL character: {value!r}")
    return utf8(value, what)


def utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8, or ``OrtInvalidArgumentException`` naming ``what`` when it cannot be encoded
    (a lone surrogate such as ``"\\udcff"``, which ``os.fsdecode`` makes of undecodable bytes)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise OrtException.invalid_argument(
            f"{what} {text!r} is not valid Unicode: {exc.reason} at index {exc.start}, which UTF-8 cannot encode"
        ) from None


def _rebuild(cls: type[OrtException], message: str, code: int) -> OrtException:
    exc = cls.__new__(cls)  # no __init__: the subclasses take other arguments
    Exception.__init__(exc, message)
    exc.message = message
    exc.code = OrtErrorCode(code)
    return exc


class OrtFileNotFoundException(OrtException, FileNotFoundError):
    """A model or checkpoint file that does not exist, or a folder to write into that does not.

    Also a `FileNotFoundError`; its code is `ORT_NO_SUCHFILE`. ort_cffi raises it before the native call,
    naming the path (the runtime itself says only "Invalid fd was supplied: -1").

    Java: an `OrtException` with `ORT_NO_SUCHFILE`.
    """


class OrtInvalidArgumentException(OrtException, ValueError):
    """A bad argument: ort_cffi's checks before a native call, or the runtime's `ORT_INVALID_ARGUMENT`.

    Also a `ValueError`; its code is `ORT_INVALID_ARGUMENT`. The message names what was wrong.

    Java: `IllegalArgumentException` (thrown by Java's checks), or an `OrtException` with
    `ORT_INVALID_ARGUMENT`.
    """


_SUBCLASS_BY_CODE = {
    OrtErrorCode.ORT_NO_SUCHFILE: OrtFileNotFoundException,
    OrtErrorCode.ORT_INVALID_ARGUMENT: OrtInvalidArgumentException,
}


class OrtClosedException(OrtException):
    """An object used after its `close()`: the message says "<kind> is closed".

    Every method of a closed object raises it before any native call (a missing check would be a
    use-after-free); only `close()`, `isClosed()`, `closed`, `OnnxTensor.toString()` and a `Result`'s
    `size()` and `keys()` still answer. Its code is `ORT_INVALID_ARGUMENT`.

    Java: `IllegalStateException` (which Java does not throw from every method: see the Java map).

    Args:
        what: The kind of object, e.g. `"OrtTrainingSession"`.
    """

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is closed", OrtErrorCode.ORT_INVALID_ARGUMENT)


class RuntimeLoadError(OrtException):
    """No usable training runtime could be loaded: the base of the three loader errors.

    Raised the first time the runtime is needed (`OrtEnvironment.getEnvironment()`, `capi.get_runtime()`)
    for a library that cannot be opened or is no ONNX Runtime, and by `capi.load_runtime()` asked to
    switch to another library once one is loaded. Its code is `ORT_FAIL`.

    Java: none (ort_cffi addition).

    Args:
        message: What failed, naming the file.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, OrtErrorCode.ORT_FAIL)


class RuntimeNotFoundError(RuntimeLoadError, ImportError):
    """No ONNX Runtime was found; the message lists every place that was tried.

    Also an `ImportError`.

    Java: `UnsatisfiedLinkError` (the native library cannot be loaded).
    """


class TrainingApiUnavailableError(RuntimeLoadError):
    """The runtime was found but was built without the training API (`GetTrainingApi` gave NULL).

    Java: `IllegalStateException` ("Training is not enabled in this build of ONNX Runtime").
    """


class UnsupportedRuntimeError(RuntimeLoadError):
    """The runtime's version has C API tables ort_cffi does not declare (anything but 1.19): refused.

    ort_cffi declares the tables of ONNX Runtime 1.19 slot by slot, and refuses to guess the offsets of
    another version.

    Java: none (ort_cffi addition).
    """


class StaleCacheError(UnsupportedRuntimeError):
    """What the image cache recorded about a runtime file does not check out (an address outside
    the image, another version): the loader examines the file once more before giving up."""
