"""Facade: ``OrtSession`` (inference on the same runtime) with its nested ``Result``, ``RunOptions`` and
``SessionOptions``, as in Java's ``ai.onnxruntime.OrtSession``."""
from __future__ import annotations

import os
import threading
from typing import Any, Dict, Generic, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from ._errors import OrtException
from ._handles import NativeHandle, allocator_string, pin_all, process, unpin_all
from .capi import check_status, ffi, get_runtime
from .options import RunOptions, SessionOptions
from .options import RunOptions as _RunOptions, SessionOptions as _SessionOptions
from .tensor import OnnxTensor, OnnxValue, TensorInfo, TypeInfo, as_tensor_array

T = TypeVar("T")
PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


class Optional_(Generic[T]):
    """Java's ``Optional``: what ``Result.get(name)`` returns."""

    __slots__ = ("_value",)

    def __init__(self, value: Optional[T]) -> None:
        self._value = value

    def isPresent(self) -> bool:
        return self._value is not None

    def isEmpty(self) -> bool:
        return self._value is None

    def get(self) -> T:
        if self._value is None:
            raise KeyError("no value present")
        return self._value

    def orElse(self, other: Any) -> Any:
        return self._value if self._value is not None else other

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return f"Optional[{self._value!r}]" if self._value is not None else "Optional.empty"


class Result:
    """The outputs of a step or a run, by name and by position (Java's ``OrtSession.Result``).

    Closing it closes the values it owns (those the runtime allocated); pinned outputs belong to the
    caller and stay open."""

    __slots__ = ("_names", "_values", "_owned", "_index", "_closed")

    def __init__(self, names: Sequence[str], values: Sequence[OnnxValue], owned: Optional[Sequence[bool]] = None) -> None:
        """``owned[i]``: whether closing the Result closes ``values[i]`` (None: it owns them all)."""
        self._names = names
        self._values = values
        self._owned = owned
        self._index: Optional[Dict[str, int]] = None
        self._closed = False

    def _position(self, name: str) -> Optional[int]:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self._names)}
        return self._index.get(name)

    def _check_open(self) -> None:
        if self._closed:
            raise OrtException.invalid_argument("this Result is closed")

    def get(self, key: Union[int, str]) -> Any:
        """``get(int)`` → the value at that position; ``get(str)`` → an Optional of the named value."""
        self._check_open()
        if isinstance(key, str):
            position = self._position(key)
            return Optional_(None if position is None else self._values[position])
        if isinstance(key, bool) or not isinstance(key, int):
            raise OrtException.invalid_argument(f"Result.get takes an int or a str, not {type(key).__name__}")
        if not 0 <= key < len(self._values):
            raise IndexError(f"output index {key} out of range: this Result has {len(self._values)} outputs")
        return self._values[key]

    def __getitem__(self, key: Union[int, str]) -> OnnxValue:
        if isinstance(key, str):
            self._check_open()
            position = self._position(key)
            if position is None:
                raise KeyError(f"no output named {key!r}; outputs: {list(self._names)}")
            return self._values[position]
        value: OnnxValue = self.get(key)
        return value

    def size(self) -> int:
        return len(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def keys(self) -> List[str]:
        """The output names, in order."""
        return list(self._names)

    def values(self) -> List[OnnxValue]:
        self._check_open()
        return list(self._values)

    def items(self) -> List[Tuple[str, OnnxValue]]:
        self._check_open()
        return list(zip(self._names, self._values))

    def __iter__(self) -> Iterator[Tuple[str, OnnxValue]]:
        """Name/value entries, in order (Java iterates ``Map.Entry``s)."""
        self._check_open()
        return iter(zip(self._names, self._values))

    def close(self) -> None:
        """Close the values this Result owns. Idempotent."""
        if self._closed:
            return
        self._closed = True
        owned = self._owned
        for i, value in enumerate(self._values):
            if owned is None or owned[i]:
                value.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Result":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Result {list(self._names)}{' closed' if self._closed else ''}>"


_Result = Result


def read_model(model: PathOrBytes, what: str) -> Tuple[Optional[str], Optional[bytes]]:
    """(path, None) for a path, after checking the file exists; (None, bytes) for model bytes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if not data:
            raise OrtException.invalid_argument(f"the {what} bytes are empty")
        return None, data
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            from ._errors import OrtErrorCode, OrtFileNotFoundException

            raise OrtFileNotFoundException(f"{what} {path!r} does not exist", OrtErrorCode.ORT_NO_SUCHFILE)
        return path, None
    raise OrtException.invalid_argument(f"the {what} must be a path or bytes, not {type(model).__name__}")


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
    try:
        import numpy as np

        if not isinstance(value, (np.ndarray, np.generic)):
            raise TypeError
    except TypeError:
        raise OrtException.invalid_argument(
            f"input {name!r} must be an OnnxTensor or a numpy array, not {type(value).__name__}"
        ) from None
    return OnnxTensor._over_array(as_tensor_array(value, f"input {name!r}")), True


class OrtSession(NativeHandle):
    """An inference session on the same runtime (``CreateSession`` / ``CreateSessionFromArray``):
    run a model exported by ``exportModelForInference`` without a second runtime in the process."""

    _kind = "OrtSession"
    Result = Result
    RunOptions = RunOptions
    SessionOptions = SessionOptions

    def __init__(self, env: Any, model: PathOrBytes, options: Optional[_SessionOptions] = None) -> None:
        rt = get_runtime()
        self._rt = rt
        path, data = read_model(model, "model")
        native_env = process.env()
        own_options = options is None
        options = options if options is not None else _SessionOptions()
        try:
            out = ffi.new("OrtSession**")
            pin_all((options,))  # the caller may close them from another thread meanwhile
            try:
                if path is not None:
                    status = rt.api.CreateSession(native_env._handle(), path.encode(), options._ptr, out)
                else:
                    status = rt.api.CreateSessionFromArray(native_env._handle(), data, len(data or b""), options._ptr, out)
            finally:
                unpin_all((options,))
            check_status(status, f"creating a session from {path!r}" if path else "creating a session from bytes")
            self._own(out[0], rt.api.ReleaseSession, pinned=(native_env,))
        finally:
            if own_options:
                options.close()
        self._lock = threading.Lock()
        self._input_names = self._names(rt.api.SessionGetInputCount, rt.api.SessionGetInputName)
        self._output_names = self._names(rt.api.SessionGetOutputCount, rt.api.SessionGetOutputName)
        self._input_pos = {n: i for i, n in enumerate(self._input_names)}
        self._output_pos = {n: i for i, n in enumerate(self._output_names)}

    def _names(self, count_fn: Any, name_fn: Any) -> Tuple[str, ...]:
        count = ffi.new("size_t*")
        check_status(count_fn(self._ptr, count))
        allocator = process.allocator()
        names = []
        for i in range(count[0]):
            out = ffi.new("char**")
            check_status(name_fn(self._ptr, i, allocator, out))
            names.append(allocator_string(self._rt, allocator, out[0]))
        return tuple(names)

    def getInputNames(self) -> "Tuple[str, ...]":
        self._handle()
        return self._input_names

    def getOutputNames(self) -> "Tuple[str, ...]":
        self._handle()
        return self._output_names

    def getNumInputs(self) -> int:
        return len(self.getInputNames())

    def getNumOutputs(self) -> int:
        return len(self.getOutputNames())

    def _infos(self, getter: Any, names: Sequence[str]) -> Dict[str, TensorInfo]:
        infos = {}
        with self._lock:
            ptr = self._handle()
            for i, name in enumerate(names):
                out = ffi.new("OrtTypeInfo**")
                check_status(getter(ptr, i, out), f"type of {name!r}")
                with TypeInfo(out[0]) as type_info:
                    infos[name] = type_info.toTensorInfo(repr(name))
        return infos

    def getInputInfo(self) -> Dict[str, TensorInfo]:
        """Name → ``TensorInfo`` of each input (``SessionGetInputTypeInfo``)."""
        return self._infos(self._rt.api.SessionGetInputTypeInfo, self.getInputNames())

    def getOutputInfo(self) -> Dict[str, TensorInfo]:
        """Name → ``TensorInfo`` of each output (``SessionGetOutputTypeInfo``)."""
        return self._infos(self._rt.api.SessionGetOutputTypeInfo, self.getOutputNames())

    def run(self, inputs: Mapping[str, Any], *args: Any, requestedOutputs: Any = None, runOptions: Optional[_RunOptions] = None) -> "_Result":
        """``Run``: inputs by name (``OnnxTensor`` or numpy array); all outputs, or the requested ones."""
        for arg in args:
            if isinstance(arg, _RunOptions):
                runOptions = arg
            elif isinstance(arg, (set, frozenset, list, tuple)):
                requestedOutputs = arg
            else:
                raise OrtException.invalid_argument(f"unexpected argument to run: {type(arg).__name__}")
        if not isinstance(inputs, Mapping):
            raise OrtException.invalid_argument("inputs must be a mapping from input name to tensor")
        unknown = [n for n in inputs if n not in self._input_pos]
        if unknown:
            raise OrtException.invalid_argument(f"unknown input names {unknown}; the model's inputs are {list(self._input_names)}")
        if not inputs:
            raise OrtException.invalid_argument(f"no inputs given; the model's inputs are {list(self._input_names)}")
        wanted = list(dict.fromkeys(requestedOutputs)) if requestedOutputs is not None else list(self._output_names)
        unknown = [n for n in wanted if n not in self._output_pos]
        if unknown or not wanted:
            raise OrtException.invalid_argument(
                f"unknown or no requested outputs {unknown}; the model's outputs are {list(self._output_names)}"
            )
        tensors: List[OnnxTensor] = []
        made: List[OnnxTensor] = []
        try:
            for name, value in inputs.items():
                tensor, made_here = tensor_for_input(name, value)
                if made_here:
                    made.append(tensor)
                refuse_zero_sized(name, tensor)
                tensors.append(tensor)
            with self._lock:
                session = self._handle()
                pinned = tensors + ([runOptions] if runOptions is not None else [])
                pin_all(pinned)
                try:
                    in_names = [ffi.new("char[]", n.encode()) for n in inputs]
                    out_names = [ffi.new("char[]", n.encode()) for n in wanted]
                    in_values = ffi.new("OrtValue*[]", [t._ptr for t in tensors])
                    out_values = ffi.new("OrtValue*[]", len(wanted))
                    status = self._rt.api.Run(
                        session,
                        runOptions._ptr if runOptions is not None else ffi.NULL,
                        ffi.new("char*[]", in_names),
                        in_values,
                        len(tensors),
                        ffi.new("char*[]", out_names),
                        len(wanted),
                        out_values,
                    )
                finally:
                    unpin_all(pinned)
                values = [OnnxTensor._adopt(out_values[i]) if out_values[i] else None for i in range(len(wanted))]
                check_status(status, "Run")
        finally:
            for tensor in made:
                tensor.close()
        return _Result(wanted, values, [True] * len(values))  # type: ignore[arg-type]

    def close(self) -> None:
        """Release the session; waits for a run in progress in another thread."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            NativeHandle.close(self)
            return
        with lock:
            NativeHandle.close(self)
