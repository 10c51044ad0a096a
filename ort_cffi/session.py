"""Facade: ``OrtSession`` (inference on the same runtime) with its nested ``Result``, ``RunOptions`` and
``SessionOptions``, as in Java's ``ai.onnxruntime.OrtSession``."""
from __future__ import annotations

import operator
from typing import AbstractSet, Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from ._errors import OrtClosedException, OrtException
from ._handles import NativeHandle, close_values, pin_all, process, read_names, unpin_all
from .capi import check_status, ffi, get_runtime
from .options import RunOptions, SessionOptions
from .options import RunOptions as _RunOptions, SessionOptions as _SessionOptions
from ._files import PathOrBytes, native_path, read_model
from ._optional import Optional_
from ._inputs import ANY_INPUT, checked_input
from ._signature import InputSpec, check_symbolic, model_inputs
from .tensor import OnnxTensor, OnnxValue, TensorInfo, TypeInfo, adopt_outputs, check_outputs



class NameSet(AbstractSet[str]):
    """An ordered, read-only set of names (Java's ``Set<String>``), iterated in the model's order.

    Equal to any set with the same names, whatever their order; also indexable like the tuple of
    names it keeps."""

    __slots__ = ("_names", "_members")

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names: Tuple[str, ...] = tuple(names)
        self._members = frozenset(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index: Any) -> Any:
        return self._names[index]

    def __hash__(self) -> int:
        return hash(self._members)

    def contains(self, name: object) -> bool:
        return name in self._members

    def isEmpty(self) -> bool:
        return not self._names

    def size(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"NameSet({list(self._names)!r})"


class NodeInfo:
    """A model input or output: its name and its ``TensorInfo`` (Java's ``NodeInfo``). The
    ``TensorInfo``'s own attributes (``getShape()``, ``onnxType``, ...) are reachable directly too."""

    __slots__ = ("_name", "_info")

    def __init__(self, name: str, info: TensorInfo) -> None:
        self._name = name
        self._info = info

    def getName(self) -> str:
        """The input's or output's name."""
        return self._name

    def getInfo(self) -> TensorInfo:
        """Its element type and shape (a ``TensorInfo``)."""
        return self._info

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):  # not set yet (copy, pickle): no recursion through _info
            raise AttributeError(attribute)
        return getattr(self._info, attribute)

    def __repr__(self) -> str:
        return f"NodeInfo({self._name!r}, {self._info!r})"


class Entry(NamedTuple):
    """One output of a ``Result``: Java's ``Map.Entry`` (``getKey()``/``getValue()``), also a (name, value) pair."""

    key: str
    value: OnnxValue

    def getKey(self) -> str:
        return self.key

    def getValue(self) -> OnnxValue:
        return self.value


class Result:
    """The outputs of a step or a run, by name and by position (Java's ``OrtSession.Result``).

    Closing it closes the values it owns (those the runtime allocated); pinned outputs belong to the
    caller and stay open."""

    __slots__ = ("_names", "_values", "_owned", "_index", "_closed")

    def __init__(
        self,
        names: Sequence[str],
        values: Sequence[OnnxValue],
        owned: Optional[int] = None,
        index: Optional[Dict[str, int]] = None,
    ) -> None:
        """``owned``: how many of the values, from the first, closing the Result closes (None: all; the
        rest are the caller's pinned outputs); ``index``: name → position, when the caller has it already."""
        self._names = names
        self._values = values
        self._owned = owned
        self._index = index
        self._closed = False

    def _position(self, name: str) -> Optional[int]:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self._names)}
        return self._index.get(name)

    def _check_open(self) -> None:
        if self._closed:
            raise OrtClosedException("Result")

    def get(self, key: Union[int, str]) -> Any:
        """``get(int)`` → the value at that position; ``get(str)`` → an Optional of the named value."""
        if type(key) is int and not self._closed and 0 <= key < len(self._values):
            return self._values[key]  # the common case, first
        self._check_open()
        if isinstance(key, str):
            position = self._position(key)
            return Optional_(None if position is None else self._values[position])
        if isinstance(key, bool):
            raise OrtException.invalid_argument("Result.get takes an int or a str, not bool")
        try:
            index = operator.index(key)  # numpy integers too
        except TypeError:
            raise OrtException.invalid_argument(f"Result.get takes an int or a str, not {type(key).__name__}") from None
        count = len(self._values)
        if not -count <= index < count:
            raise IndexError(f"output index {index} out of range: this Result has {count} outputs")
        return self._values[index]

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
        """How many outputs this Result holds (also ``len(result)``)."""
        return len(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def keys(self) -> List[str]:
        """The output names, in order."""
        return list(self._names)

    def values(self) -> List[OnnxValue]:
        """The values, in order (raises ``OrtClosedException`` once closed)."""
        self._check_open()
        return list(self._values)

    def items(self) -> List[Tuple[str, OnnxValue]]:
        """(name, value) pairs, in order (raises ``OrtClosedException`` once closed)."""
        self._check_open()
        return list(zip(self._names, self._values))

    def __iter__(self) -> Iterator[Entry]:
        """The entries, in order: ``Entry(name, value)``, with Java's ``getKey()``/``getValue()``."""
        self._check_open()
        return iter([Entry(n, v) for n, v in zip(self._names, self._values)])

    def close(self) -> None:
        """Close the values this Result owns. Idempotent."""
        if self._closed:
            return
        self._closed = True
        owned = self._owned
        if owned is None:
            close_values(self._values)
        elif owned:
            close_values(self._values[:owned])

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def __enter__(self) -> "Result":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Result {list(self._names)}{' closed' if self._closed else ''}>"


_Result = Result


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
                    status = rt.api.CreateSession(native_env._handle(), native_path(path), options._ptr, out)
                else:
                    status = rt.api.CreateSessionFromArray(native_env._handle(), data, len(data or b""), options._ptr, out)
            finally:
                unpin_all((options,))
            check_status(status, f"creating a session from {path!r}" if path else "creating a session from bytes")
            self._own(out[0], rt.api.ReleaseSession, pinned=(native_env,))
        finally:
            if own_options:
                options.close()
        try:
            self._input_names = NameSet(read_names(self._ptr, rt.api.SessionGetInputCount, rt.api.SessionGetInputName))
            self._output_names = NameSet(read_names(self._ptr, rt.api.SessionGetOutputCount, rt.api.SessionGetOutputName))
        except BaseException:
            self.close()
            raise
        self._input_pos = {n: i for i, n in enumerate(self._input_names)}
        self._output_pos = {n: i for i, n in enumerate(self._output_names)}
        try:
            self._input_specs = self._read_input_specs(path, data)
        except BaseException:
            self.close()
            raise
        self._symbolic = any(spec.symbolic() for spec in self._input_specs)

    def _read_input_specs(self, path: Optional[str], data: Optional[bytes]) -> List[InputSpec]:
        """Each input's signature, checked before every run: ``SessionGetInputTypeInfo``, except that
        it gives rank 0 both for a scalar and for an input declared without a shape (any rank): the
        model's own graph input tells them apart (``_signature.model_inputs``), and where it cannot
        be read, rank 0 is taken as any rank. A non-tensor input is left to the runtime."""
        declared = model_inputs(path, data, self._input_names)
        specs = []
        for i, name in enumerate(self._input_names):
            out = ffi.new("OrtTypeInfo**")
            check_status(self._rt.api.SessionGetInputTypeInfo(self._ptr, i, out), f"type of input {name!r}")
            with TypeInfo(out[0]) as type_info:
                try:
                    info = type_info.toTensorInfo(repr(name))
                except OrtException:
                    specs.append(ANY_INPUT)
                    continue
            dims: Optional[Tuple[Tuple[int, str], ...]] = tuple(
                (d if d >= 0 else -1, n) for d, n in zip(info.shape, info.getDimensionNames())
            )
            if not dims:
                dims = declared[name].dims if name in declared else None
            specs.append(InputSpec.of(info.onnxType, dims))
        return specs

    def getInputNames(self) -> "NameSet":
        """The model's input names, in its order (an ordered, read-only set)."""
        self._handle()
        return self._input_names

    def getOutputNames(self) -> "NameSet":
        """The model's output names, in its order (an ordered, read-only set)."""
        self._handle()
        return self._output_names

    def getNumInputs(self) -> int:
        """How many inputs the model has."""
        return len(self.getInputNames())

    def getNumOutputs(self) -> int:
        """How many outputs the model has."""
        return len(self.getOutputNames())

    def _infos(self, getter: Any, names: Iterable[str]) -> Dict[str, NodeInfo]:
        infos = {}
        ptr = self._use()  # pinned: a close() from another thread waits until the reads are done
        try:
            for i, name in enumerate(names):
                out = ffi.new("OrtTypeInfo**")
                check_status(getter(ptr, i, out), f"type of {name!r}")
                with TypeInfo(out[0]) as type_info:
                    infos[name] = NodeInfo(name, type_info.toTensorInfo(repr(name)))
        finally:
            self._unuse()
        return infos

    def getInputInfo(self) -> Dict[str, NodeInfo]:
        """Name → ``NodeInfo`` of each input (``SessionGetInputTypeInfo``), in the model's order."""
        return self._infos(self._rt.api.SessionGetInputTypeInfo, self.getInputNames())

    def getOutputInfo(self) -> Dict[str, NodeInfo]:
        """Name → ``NodeInfo`` of each output (``SessionGetOutputTypeInfo``), in the model's order."""
        return self._infos(self._rt.api.SessionGetOutputTypeInfo, self.getOutputNames())

    def run(self, inputs: Mapping[str, Any], *args: Any, requestedOutputs: Any = None, runOptions: Optional[_RunOptions] = None) -> "_Result":
        """``Run``: inputs by name (``OnnxTensor`` or numpy array); all outputs, or the requested ones."""
        for arg in args:
            if isinstance(arg, _RunOptions):
                runOptions = arg
            elif isinstance(arg, (set, frozenset, list, tuple)):
                requestedOutputs = arg
            elif arg is not None:
                raise OrtException.invalid_argument(f"unexpected argument to run: {type(arg).__name__}")
        if runOptions is not None and not isinstance(runOptions, _RunOptions):
            raise OrtException.invalid_argument(f"runOptions must be RunOptions, not {type(runOptions).__name__}")
        if not isinstance(inputs, Mapping):
            raise OrtException.invalid_argument("inputs must be a mapping from input name to tensor")
        unknown = [n for n in inputs if n not in self._input_pos]
        if unknown:
            raise OrtException.invalid_argument(f"unknown input names {unknown}; the model's inputs are {list(self._input_names)}")
        if not inputs:
            raise OrtException.invalid_argument(f"no inputs given; the model's inputs are {list(self._input_names)}")
        if isinstance(requestedOutputs, str):
            raise OrtException.invalid_argument("requestedOutputs is a collection of output names")
        if requestedOutputs is None:
            wanted = list(self._output_names)
        elif isinstance(requestedOutputs, (set, frozenset)):  # no order of its own: the model's
            wanted = [n for n in self._output_names if n in requestedOutputs]
        else:
            wanted = list(dict.fromkeys(requestedOutputs))
        unknown = [n for n in (requestedOutputs or ()) if n not in self._output_pos]
        if unknown or not wanted:
            raise OrtException.invalid_argument(
                f"unknown or no requested outputs {unknown}; the model's outputs are {list(self._output_names)}"
            )
        tensors: List[OnnxTensor] = []
        made: List[OnnxTensor] = []
        try:
            specs = self._input_specs
            for name, value in inputs.items():
                tensors.append(checked_input("the model's", name, value, specs[self._input_pos[name]], made))
            if self._symbolic:  # e.g. one batch size for all inputs: a mismatch fails in a kernel, with a log line
                check_symbolic("the model's", [(n, specs[self._input_pos[n]], t._dims or ()) for n, t in zip(inputs, tensors)])
            # ONNX Runtime's Run may be called from several threads at once: no lock, only pins,
            # so that a close() meanwhile waits for the last run.
            in_use: List[NativeHandle] = [self, *tensors] + ([runOptions] if runOptions is not None else [])
            pin_all(in_use)
            try:
                in_names = [ffi.new("char[]", n.encode()) for n in inputs]
                out_names = [ffi.new("char[]", n.encode()) for n in wanted]
                out_values = ffi.new("OrtValue*[]", len(wanted))
                status = self._rt.api.Run(
                    self._ptr,
                    runOptions._ptr if runOptions is not None else ffi.NULL,
                    ffi.new("char*[]", in_names),
                    ffi.new("OrtValue*[]", [t._ptr for t in tensors]),
                    len(tensors),
                    ffi.new("char*[]", out_names),
                    len(wanted),
                    out_values,
                )
                values = adopt_outputs(out_values, len(wanted))
            finally:
                unpin_all(in_use)
            check_outputs(status, values, "Run")
        finally:
            for tensor in made:
                tensor.close()
        return _Result(wanted, values)  # type: ignore[arg-type]  # all produced: none is None
