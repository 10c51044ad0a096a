"""Facade: ``OrtCheckpointState`` (Java's ``OrtTrainingSession.OrtCheckpointState``): a checkpoint's
parameters, optimizer state and properties in memory, over ``OrtTrainingApi``.

A state passed to a training session stays its caller's; the session pins it and shares its lock, so
the state's calls and the session's steps never run at once. The session holds its state through a
``StateBinding``, whose calls still work after the caller closed the state, while the session keeps it
alive. The state knows only that a live owner holds it (a weak reference to a handle), never the
session's type: the child (the session) holds its parent (the state), not the reverse.
"""
from __future__ import annotations

import math
import numbers
import threading
import weakref
from typing import Any, Optional, Tuple, Union

import numpy as np

from ort_cffi._backends import training_table
from ort_cffi._facade.tensors.conversions import as_tensor_array
from ort_cffi._facade.tensors.element_types import DTYPE_TO_ONNX
from ort_cffi._facade.tensors.tensor import adopted_tensor, tensor_over_copy
from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._facade.tensors.value_info import TensorTypeAndShapeInfo
from ort_cffi._native.errors import OrtException, c_string
from ort_cffi._native.files import PathLike, atomic_write, existing_file, fspath, native_path
from ort_cffi._native.handles import NativeHandle, pointer, process
from ort_cffi._native.tables import check_status, ffi, get_runtime

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)
# ONNX Runtime keeps a large checkpoint's tensors in "<checkpoint>.data", found by the checkpoint's own name
EXTERNAL_DATA_SUFFIX = ".data"
_PROPERTY_TYPES = {0: "an int", 1: "a float", 2: "a str"}  # OrtPropertyType -> what a message calls it


# Bytes 4-7 of every checkpoint ONNX Runtime writes: its flatbuffer's file identifier (docs/internals/runtime.md §4).
_CHECKPOINT_IDENTIFIER = b"ODTC"


def _head(path: str) -> bytes:
    """The first 8 bytes of a file, enough for the flatbuffer's identifier; b"" when unreadable."""
    try:
        with open(path, "rb") as file:
            return file.read(8)
    except OSError:
        return b""


def _unreadable(exc: OrtException, head: bytes, from_bytes: bool) -> OrtException:
    """The runtime's "Checkpoint verification failed" says neither what is wrong nor what to do: a file
    (or bytes) starting as a checkpoint but not verifying is damaged or cut short (a copy, download or save
    that did not finish); anything else is not a checkpoint. Other failures pass unchanged; the code is kept."""
    message = str(exc)
    if "Checkpoint verification failed" not in message:
        return exc
    what, verb = ("the bytes", "are") if from_bytes else ("the file", "is")
    if not head:
        reason = f"{what} {verb} empty: damaged or truncated (an interrupted copy, download or save?)"
    elif head[4:8] == _CHECKPOINT_IDENTIFIER:
        reason = (f"{what} {verb} damaged or truncated (the first bytes are a checkpoint's, the rest does not verify; "
                  "an interrupted copy, download or save?): use an intact copy")
    else:
        reason = f"{what} {verb} not an ONNX Runtime checkpoint (no {_CHECKPOINT_IDENTIFIER.decode()!r} identifier at byte 4)"
    return type(exc)(f"{message.rstrip('.')}: {reason}", exc.getCode())


class OrtAllocator:
    """The runtime's default CPU allocator, as a token that the checkpoint's property getters accept.

    `OrtEnvironment.getEnvironment().defaultAllocator` is its one instance. The allocator belongs to the
    runtime and is never released; ort_cffi always uses it, so passing it to a getter or leaving it out
    gives the same result.

    Java: `OrtAllocator` (package-private in Java; `env.defaultAllocator` is the instance tests see).

    Args:
        ptr: The runtime's `OrtAllocator*` (`GetAllocatorWithDefaultOptions`); ort_cffi makes the instance.
    """

    def __init__(self, ptr: Any) -> None:
        self._ptr = ptr

    def __repr__(self) -> str:
        return "<OrtAllocator default CPU>"



class OrtCheckpointState(NativeHandle):
    """A checkpoint's parameters, optimizer state and properties, in memory (`OrtCheckpointState`).

    Made by `loadCheckpoint` or `loadCheckpointFromBuffer`; the caller owns it and closes it (or uses
    a `with` block). Passed to `OrtEnvironment.createTrainingSession`, it stays the caller's, and the
    session keeps it alive: closing it while that session is open closes it for the caller only, and
    its memory is released when the session closes. One state serves one open session at a time. Also
    reachable as `OrtTrainingSession.OrtCheckpointState`.

    Java: `OrtTrainingSession.OrtCheckpointState` (package-private in Java).

    Raises:
        OrtInvalidArgumentException: The constructor is called directly: use `loadCheckpoint`.
    """

    _kind = "OrtCheckpointState"

    def __init__(self, _ptr: Any = None, _source: str = "") -> None:
        if _ptr is None:
            raise OrtException.invalid_argument(
                "use OrtCheckpointState.loadCheckpoint(path) or loadCheckpointFromBuffer(bytes)"
            )
        self._rt = get_runtime()
        self._own(_ptr, training_table().ReleaseCheckpointState)
        self._source = _source
        self._lock = threading.Lock()  # shared with the session bound to this state
        self._owner: Optional[weakref.ref[NativeHandle]] = None  # the training session bound to this state

    def _has_live_owner(self) -> bool:
        owner = self._owner() if self._owner is not None else None
        return owner is not None and not owner.closed

    @staticmethod
    def loadCheckpoint(checkpointPath: PathLike) -> OrtCheckpointState:
        """Load a checkpoint from a file (`LoadCheckpoint`).

        Java: `static OrtCheckpointState loadCheckpoint(Path checkpointPath)`,
        `static OrtCheckpointState loadCheckpoint(String checkpoint)`.

        Args:
            checkpointPath: A `str` or `os.PathLike`.

        Returns:
            A new `OrtCheckpointState` the caller owns and must close (or use in a `with` block).

        Raises:
            OrtFileNotFoundException: The file does not exist (the message names it; the runtime's
                own says only "Invalid fd was supplied: -1").
            OrtInvalidArgumentException: `checkpointPath` is not a path, is empty, or is a folder.
            OrtException: The runtime cannot read the file as a checkpoint ("Checkpoint verification
                failed", followed by what ort_cffi makes of it: "the file is damaged or truncated", "the
                file is empty", or "the file is not an ONNX Runtime checkpoint"; the runtime's code is
                kept). Also a version-1 checkpoint, which ONNX Runtime 1.19 refuses.
            RuntimeLoadError: The runtime could not be loaded (the first call that needs it).
        """
        path = existing_file(checkpointPath, "checkpoint")
        rt = get_runtime()
        process.env()  # loading logs through the runtime's default logger, which the environment creates
        out = ffi.new("OrtCheckpointState**")
        try:
            check_status(training_table().LoadCheckpoint(native_path(path), out), f"loading checkpoint {path!r}")
        except OrtException as exc:
            raise _unreadable(exc, _head(path), from_bytes=False) from None
        return OrtCheckpointState(out[0], path)

    @staticmethod
    def loadCheckpointFromBuffer(buffer: Union[bytes, bytearray, memoryview]) -> OrtCheckpointState:
        """Load a checkpoint from its bytes in memory (`LoadCheckpointFromBuffer`).

        Java: none (ort_cffi addition).

        Args:
            buffer: The checkpoint file's content: `bytes`, `bytearray` or `memoryview` (copied).

        Returns:
            A new `OrtCheckpointState` the caller owns and must close (or use in a `with` block); it
                does not refer to `buffer`.

        Raises:
            OrtInvalidArgumentException: `buffer` is not bytes-like, or is empty.
            OrtException: The runtime cannot read the bytes as a checkpoint ("Checkpoint verification
                failed", followed by "the bytes are damaged or truncated" or "the bytes are not an ONNX
                Runtime checkpoint"; the runtime's code is kept).
            RuntimeLoadError: The runtime could not be loaded (the first call that needs it).
        """
        if not isinstance(buffer, (bytes, bytearray, memoryview)):
            raise OrtException.invalid_argument(f"the checkpoint buffer must be bytes, not {type(buffer).__name__}")
        data = bytes(buffer)
        if not data:
            raise OrtException.invalid_argument("the checkpoint buffer is empty")
        rt = get_runtime()
        process.env()  # loading logs through the runtime's default logger, which the environment creates
        out = ffi.new("OrtCheckpointState**")
        try:
            check_status(training_table().LoadCheckpointFromBuffer(data, len(data), out), "loading a checkpoint from bytes")
        except OrtException as exc:
            raise _unreadable(exc, data[:8], from_bytes=True) from None
        return OrtCheckpointState(out[0], "<bytes>")

    def _native(self, via_session: bool) -> Any:
        """The pointer for a call. The session bound to this state still reaches it after its caller
        closed it (the session pins it until the session closes); anyone else is told it is closed."""
        return self._ptr if via_session and self._ptr else self._handle()

    def saveCheckpoint(self, outputPath: PathLike, saveOptimizer: bool = False) -> None:
        """Save the checkpoint to a file, crash-safe (`SaveCheckpoint`).

        The checkpoint is written to a temporary file beside the target, flushed to disk and renamed
        over the target: a crash at any moment leaves the old file or the new one, never a partial
        one. A replaced file keeps its permissions.

        Java: `void saveCheckpoint(Path outputPath, boolean saveOptimizer)`.

        Args:
            outputPath: A `str` or `os.PathLike` in a folder that exists.
            saveOptimizer: Also save the optimizer state (default False).

        Raises:
            OrtClosedException: The state is closed.
            OrtFileNotFoundException: The folder of `outputPath` does not exist.
            OrtInvalidArgumentException: `outputPath` is empty or not a path.
            OrtException: The runtime fails to write the checkpoint.
        """
        self._save(outputPath, saveOptimizer, via_session=False)

    def _save(self, outputPath: PathLike, saveOptimizer: bool, via_session: bool) -> None:
        path = fspath(outputPath, "checkpoint path")
        include_optimizer = bool(saveOptimizer)
        with self._lock:
            ptr = self._native(via_session)
            atomic_write(
                path,
                lambda tmp: check_status(
                    training_table().SaveCheckpoint(ptr, native_path(tmp), include_optimizer),
                    f"saving checkpoint {path!r}",
                ),
                "checkpoint",
                companions=(EXTERNAL_DATA_SUFFIX,),  # read from beside the checkpoint, by its name
            )

    # --- properties ------------------------------------------------------------------------------

    def addProperty(self, propertyName: str, propertyValue: Union[int, float, str]) -> None:
        """Add a property to the checkpoint (`AddProperty`); an existing name is overwritten, also with another type.

        Java: `void addProperty(String name, int value)`, `void addProperty(String name, float value)`,
        `void addProperty(String name, String value)`.

        Args:
            propertyName: A `str` without NUL.
            propertyValue: An `int` (or numpy integer), stored as a true int64 (Java stores 32 bits in
                the int64 slot); a `float` (or numpy float), stored as float32; or a `str` without NUL.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: The name is not a `str`; the value is of another type (a `bool`
                included) or does not fit (an int outside int64, a finite float beyond float32's range);
                either contains NUL.
        """
        self._add_property(propertyName, propertyValue, via_session=False)

    def _add_property(self, propertyName: str, propertyValue: Union[int, float, str], via_session: bool) -> None:
        name = c_string(propertyName, "the property name")
        value = propertyValue
        if isinstance(value, (bool, np.bool_)):
            raise OrtException.invalid_argument(f"property {propertyName!r}: bool is not a property type (use int)")
        if isinstance(value, numbers.Integral):
            as_int = int(value)
            if not INT64_MIN <= as_int <= INT64_MAX:
                raise OrtException.invalid_argument(f"property {propertyName!r}: {as_int} does not fit in an int64")
            kind, native = 0, ffi.new("int64_t*", as_int)
        elif isinstance(value, numbers.Real):
            as_float = float(value)
            if math.isfinite(as_float) and abs(as_float) > FLOAT32_MAX:
                raise OrtException.invalid_argument(f"property {propertyName!r}: {as_float} overflows a float32")
            kind, native = 1, ffi.new("float*", as_float)
        elif isinstance(value, str):
            kind, native = 2, ffi.new("char[]", c_string(value, "the property value"))
        else:
            raise OrtException.invalid_argument(
                f"property {propertyName!r}: values are int, float or str, not {type(value).__name__}"
            )
        with self._lock:
            check_status(
                training_table().AddProperty(self._native(via_session), name, kind, native),
                f"adding property {propertyName!r}",
            )

    def _get_property(self, args: Tuple[Any, ...], wanted: int, via_session: bool) -> Union[int, float, str]:
        if len(args) == 2 and (args[0] is None or isinstance(args[0], OrtAllocator)):
            args = args[1:]
        if len(args) != 1:
            raise OrtException.invalid_argument("property getters take ([allocator,] name)")
        property_name = args[0]
        name = c_string(property_name, "the property name")
        allocator = process.allocator()
        kind = ffi.new("enum OrtPropertyType*")
        value = ffi.new("void**")
        with self._lock:
            check_status(
                training_table().GetProperty(self._native(via_session), name, allocator, kind, value),
                f"reading property {property_name!r}",
            )
        try:  # the value was allocated with our allocator: free it whatever happens
            if kind[0] != wanted:
                raise OrtException.invalid_argument(
                    f"property {property_name!r} is {_PROPERTY_TYPES.get(kind[0], f'of type {kind[0]}')}, not {_PROPERTY_TYPES[wanted]}"
                )
            if wanted == 0:
                return int(ffi.cast("int64_t*", value[0])[0])
            if wanted == 1:
                return float(ffi.cast("float*", value[0])[0])
            return ffi.string(ffi.cast("char*", value[0])).decode()
        finally:
            check_status(self._rt.api.AllocatorFree(allocator, value[0]), "AllocatorFree")

    def getIntProperty(self, *args: Any) -> int:
        """An int property's value, the whole int64 (`GetProperty`).

        Java: `int getIntProperty(OrtAllocator allocator, String name)`.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not an int (the message names its type). The
                value the runtime allocated is freed in every case (Java leaks it on a wrong-type read).
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        return int(self._get_property(args, 0, via_session=False))

    def getFloatProperty(self, *args: Any) -> float:
        """A float property's value: a Python `float` holding the float32 (`GetProperty`).

        Java: `float getFloatProperty(OrtAllocator allocator, String name)`.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not a float (the message names its type). The
                value the runtime allocated is freed in every case (Java leaks it on a wrong-type read).
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        return float(self._get_property(args, 1, via_session=False))

    def getStringProperty(self, *args: Any) -> str:
        """A str property's value (`GetProperty`).

        Java: `String getStringProperty(OrtAllocator allocator, String name)`.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not a str (the message names its type). The
                value the runtime allocated is freed in every case (Java leaks it on a wrong-type read).
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        return str(self._get_property(args, 2, via_session=False))

    # --- parameters (beyond the Java binding) ---------------------------------------------------

    def _require_bound(self) -> None:
        self._handle()  # a closed state says so first
        if not self._has_live_owner():
            raise OrtException.invalid_argument(
                "parameters of a checkpoint state can only be read or written while a training session is bound to it"
            )

    def getParameterTypeAndShape(self, parameterName: str) -> TensorInfo:
        """The element type and shape of one parameter (`GetParameterTypeAndShape`).

        Needs an open training session bound to the state (the runtime's rule).

        Java: none (ort_cffi addition).

        Returns:
            A new `TensorInfo` the caller owns (plain Python data, no native memory).

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: No open training session is bound to the state, the name is
                not a `str` without NUL, or the checkpoint has no parameter of that name.
        """
        name = c_string(parameterName, "the parameter name")
        out = ffi.new("OrtTensorTypeAndShapeInfo**")
        with self._lock:
            self._require_bound()
            self._call(training_table().GetParameterTypeAndShape, name, out, context=f"parameter {parameterName!r}")
        with TensorTypeAndShapeInfo(out[0]) as info:
            return info.toTensorInfo()

    def getParameter(self, parameterName: str) -> np.ndarray:
        """A copy of one parameter (`GetParameter`).

        Needs an open training session bound to the state.

        Java: none (ort_cffi addition).

        Returns:
            A new numpy array the caller owns, in the parameter's dtype and shape; later training does
                not change it.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: No open training session is bound to the state, the name is
                not a `str` without NUL, or the checkpoint has no parameter of that name.
        """
        name = c_string(parameterName, "the parameter name")
        out = ffi.new("OrtValue**")
        with self._lock:
            self._require_bound()
            self._call(training_table().GetParameter, name, process.allocator(), out,
                       context=f"parameter {parameterName!r}")
        with adopted_tensor(out[0]) as value:
            return value.getValue()

    def updateParameter(self, parameterName: str, parameter: Any) -> None:
        """Overwrite one parameter with new values (`UpdateParameter`).

        Needs an open training session bound to the state.

        Java: none (ort_cffi addition).

        Args:
            parameterName: The parameter's name.
            parameter: A numpy array of the parameter's dtype and shape; its values are copied in.

        Raises:
            OrtClosedException: The state is closed.
            OrtInvalidArgumentException: No open training session is bound to the state, the name is
                not a `str` without NUL, the checkpoint has no parameter of that name, or `parameter`
                is not an array of the parameter's dtype and shape.
        """
        name = c_string(parameterName, "the parameter name")
        info = self.getParameterTypeAndShape(parameterName)
        array = as_tensor_array(parameter, f"parameter {parameterName!r}")
        if DTYPE_TO_ONNX[array.dtype] != info.onnxType or tuple(array.shape) != info.shape:
            raise OrtException.invalid_argument(
                f"parameter {parameterName!r} is {info.dtype} of shape {list(info.shape)}; "
                f"got {array.dtype} of shape {list(array.shape)}"
            )
        with tensor_over_copy(array) as tensor:
            with self._lock:
                self._require_bound()
                self._call(training_table().UpdateParameter, name, pointer(tensor),
                           context=f"updating parameter {parameterName!r}")


class StateBinding:
    """A training session's hold on the checkpoint state it trains: the lock both share, the state's pointer
    while the session pins it, and the calls the session makes on the state's behalf (save, properties),
    which keep working after the caller closed the state. ``bind`` marks the state as held by a live owner,
    so that a second session is refused and parameter calls know a session is bound."""

    def __init__(self, state: OrtCheckpointState) -> None:
        self.state = state
        self.lock = state._lock

    def unbound_pointer(self) -> Any:
        """The state's pointer for a new session (call with ``lock`` held); refuses a closed state and one
        that an open session already holds."""
        ptr = self.state._handle()
        if self.state._has_live_owner():
            raise OrtException.invalid_argument(
                "this checkpoint state is already bound to an open training session; load it again for a second session"
            )
        return ptr

    def bind(self, owner: NativeHandle) -> None:
        """Mark the state as held by ``owner`` (a weak reference: the owner pins the state, not the reverse)."""
        self.state._owner = weakref.ref(owner)

    def save(self, outputPath: PathLike, saveOptimizer: bool) -> None:
        self.state._save(outputPath, saveOptimizer, via_session=True)

    def add_property(self, propertyName: str, propertyValue: Union[int, float, str]) -> None:
        self.state._add_property(propertyName, propertyValue, via_session=True)

    def get_property(self, args: Tuple[Any, ...], wanted: int) -> Union[int, float, str]:
        return self.state._get_property(args, wanted, via_session=True)
