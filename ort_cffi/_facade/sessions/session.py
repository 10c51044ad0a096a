"""Facade: ``OrtSession`` (inference on the same runtime) with its nested ``Result``, ``RunOptions`` and
``SessionOptions``, as in Java's ``ai.onnxruntime.OrtSession``."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ort_cffi._facade.external_data import confine_models
from ort_cffi._facade.sessions.inputs import ANY_INPUT, checked_input
from ort_cffi._facade.sessions.metadata import OnnxModelMetadata, read_metadata
from ort_cffi._facade.sessions.options import RunOptions, SessionOptions
from ort_cffi._facade.sessions.options import RunOptions as _RunOptions
from ort_cffi._facade.sessions.options import SessionOptions as _SessionOptions
from ort_cffi._facade.sessions.requests import check_collection, check_names, ordered_names, split_overloads
from ort_cffi._facade.sessions.results import NameSet, Result
from ort_cffi._facade.sessions.results import Result as _Result
from ort_cffi._facade.sessions.signature import InputSpec, check_symbolic, model_inputs
from ort_cffi._facade.tensors.outputs import adopt_outputs, check_outputs, detach_aliased
from ort_cffi._facade.tensors.tensor import OnnxTensor
from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._facade.tensors.value_info import TypeInfo
from ort_cffi._native.errors import OrtException
from ort_cffi._native.files import PathOrBytes, native_path, read_model
from ort_cffi._native.handles import NativeHandle, pin_all, pinned_pointer, pointer, process, read_names, unpin_all
from ort_cffi._native.tables import check_status, ffi, get_runtime


class NodeInfo:
    """A model input or output: its name and its `TensorInfo`, as `OrtSession.getInputInfo()` gives them.

    The `TensorInfo`'s own attributes (`getShape()`, `onnxType`, ...) are reachable on the `NodeInfo`
    too. Plain Python data, no native memory.

    Java: `NodeInfo(String name, ValueInfo info)`.
    """

    __slots__ = ("_name", "_info")

    def __init__(self, name: str, info: TensorInfo) -> None:
        self._name = name
        self._info = info

    def getName(self) -> str:
        """The input's or output's name.

        Java: `String getName()`.
        """
        return self._name

    def getInfo(self) -> TensorInfo:
        """Its element type and shape.

        Java: `ValueInfo getInfo()` (always a `TensorInfo` here).

        Returns:
            The `TensorInfo` this `NodeInfo` owns, not a copy: plain Python data the caller may keep.
        """
        return self._info

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):  # not set yet (copy, pickle): no recursion through _info
            raise AttributeError(attribute)
        return getattr(self._info, attribute)

    def __repr__(self) -> str:
        return f"NodeInfo({self._name!r}, {self._info!r})"


class OrtSession(NativeHandle):
    """An inference session on the same runtime as the training sessions.

    Runs a model that `OrtTrainingSession.exportModelForInference` wrote, without a second ONNX Runtime
    in the process. Made by `OrtEnvironment.createSession` (see there for what creation raises); the
    caller owns it and closes it (or uses a `with` block). `run` may be called from several threads at
    once; a `close()` meanwhile releases the native session after the runs in progress. Once closed, every method but `close()`,
    `isClosed()` and `closed` raises `OrtClosedException`.

    Java: `ai.onnxruntime.OrtSession` (made by `OrtEnvironment.createSession`).
    """

    _kind = "OrtSession"
    Result = Result
    RunOptions = RunOptions
    SessionOptions = SessionOptions

    def __init__(self, env: Any, model: PathOrBytes, options: Optional[_SessionOptions] = None, *,
                 externalDataAnywhere: bool = False) -> None:
        rt = get_runtime()
        self._rt = rt
        path, data = read_model(model, "model")
        confine_models([(path, data, "model")], externalDataAnywhere)
        if options is not None and not isinstance(options, _SessionOptions):
            raise OrtException.invalid_argument(f"options must be SessionOptions, not {type(options).__name__}")
        native_env = process.env()
        own_options = options is None
        options = options if options is not None else _SessionOptions()
        try:
            out = ffi.new("OrtSession**")
            pin_all((options,))  # the caller may close them from another thread meanwhile
            try:
                if path is not None:
                    status = rt.api.CreateSession(pointer(native_env), native_path(path), pinned_pointer(options), out)
                else:
                    status = rt.api.CreateSessionFromArray(pointer(native_env), data, len(data or b""), pinned_pointer(options), out)
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
            self._metadata = read_metadata(rt, self._ptr)  # read once: a handful of calls, plain data after
        except BaseException:
            self.close()
            raise
        self._input_pos = {n: i for i, n in enumerate(self._input_names)}
        self._output_pos = {n: i for i, n in enumerate(self._output_names)}
        # Outputs that are inputs (a graph input listed as an output): the runtime returns them over
        # the input's memory, so each run copies them (see detach_aliased). Usually none: no cost.
        self._aliased = frozenset(n for n in self._output_names if n in self._input_pos)
        try:
            self._input_specs = self._read_input_specs(path, data)
        except BaseException:
            self.close()
            raise
        self._symbolic = any(spec.symbolic() for spec in self._input_specs)

    def _read_input_specs(self, path: Optional[str], data: Optional[bytes]) -> List[InputSpec]:
        """Each input's signature, checked before every run: ``SessionGetInputTypeInfo``, except that
        it gives rank 0 both for a scalar and for an input declared without a shape (any rank): the
        model's own graph input tells them apart (``signature.model_inputs``), and where it cannot
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

    def getInputNames(self) -> NameSet:
        """The model's input names, in its order.

        Java: `Set<String> getInputNames()`.

        Returns:
            An ordered, read-only set of names (Java's `Set<String>`) that the session owns and hands
                out at every call: plain Python data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return self._input_names

    def getOutputNames(self) -> NameSet:
        """The model's output names, in its order.

        Java: `Set<String> getOutputNames()`.

        Returns:
            An ordered, read-only set of names (Java's `Set<String>`) that the session owns and hands
                out at every call: plain Python data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return self._output_names

    def getMetadata(self) -> OnnxModelMetadata:
        """The model's metadata: producer, graph name and description, domain, description, version and
        custom metadata (`SessionGetModelMetadata`, read when the session was made).

        Java: `OnnxModelMetadata getMetadata()`.

        Returns:
            An `OnnxModelMetadata` the session owns and hands out at every call: plain Python data, still
                valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return self._metadata

    def getNumInputs(self) -> int:
        """How many inputs the model has.

        Java: `long getNumInputs()`.

        Raises:
            OrtClosedException: The session is closed.
        """
        return len(self.getInputNames())

    def getNumOutputs(self) -> int:
        """How many outputs the model has.

        Java: `long getNumOutputs()`.

        Raises:
            OrtClosedException: The session is closed.
        """
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
        """The element type and shape of each input, by name, in the model's order (`SessionGetInputTypeInfo`).

        Java: `Map<String, NodeInfo> getInputInfo()`.

        Returns:
            A new dict, name → `NodeInfo`, that the caller owns: plain Python data, no native memory.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: An input is not a tensor (the message names it).
        """
        return self._infos(self._rt.api.SessionGetInputTypeInfo, self.getInputNames())

    def getOutputInfo(self) -> Dict[str, NodeInfo]:
        """The element type and shape of each output, by name, in the model's order (`SessionGetOutputTypeInfo`).

        Java: `Map<String, NodeInfo> getOutputInfo()`.

        Returns:
            A new dict, name → `NodeInfo`, that the caller owns: plain Python data, no native memory.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: An output is not a tensor (the message names it).
        """
        return self._infos(self._rt.api.SessionGetOutputTypeInfo, self.getOutputNames())

    def run(self, inputs: Mapping[str, Any], *args: Any, requestedOutputs: Any = None, runOptions: Optional[_RunOptions] = None) -> _Result:
        """Run the model on `inputs` (`Run`): every output, or the requested ones.

        Inputs are checked against the model's signature before the call (element type, rank, fixed
        dimensions, one size per symbolic dimension, no zero-sized dimension), naming the input.

        Java: `OrtSession.Result run(Map<String, ? extends OnnxTensorLike> inputs)`,
        `run(inputs, OrtSession.RunOptions runOptions)`, `run(inputs, Set<String> requestedOutputs)`,
        `run(inputs, requestedOutputs, runOptions)`; the forms with pinned outputs are not available.

        Args:
            inputs: Input name → `OnnxTensor`, numpy array or numpy scalar. An array is wrapped for the
                call without a copy when its layout allows, copied once otherwise.
            *args: Java's overloads, told apart by type, in any order (`None` is skipped): a set, list
                or tuple of output names (`requestedOutputs`), a `RunOptions` (`runOptions`).
            requestedOutputs: The outputs to return: a set comes back in the model's order, a list or
                tuple in its own (repeats dropped). None: every output.
            runOptions: Options for this run (log level, run tag, `setTerminate`), honoured here.

        Returns:
            A new `Result` the caller owns and must close (or use in a `with` block); closing it closes
                every value in it.

        Raises:
            OrtClosedException: The session, an input tensor or the run options are closed.
            OrtInvalidArgumentException: `inputs` is not a mapping or is empty; an input name is
                unknown; an input is not a tensor or numpy array, does not fit the model's signature or
                has a zero-sized dimension; an output name is unknown, or none is requested; an
                argument is of an unexpected type (a dict of pinned outputs included).
            OrtException: The runtime fails the run (e.g. an input left out, or the run options set to
                terminate).
        """
        requestedOutputs, _, runOptions = split_overloads(args, requestedOutputs, None, runOptions, "run", pinning=False)
        if not isinstance(inputs, Mapping):
            raise OrtException.invalid_argument("inputs must be a mapping from input name to tensor")
        unknown = [n for n in inputs if n not in self._input_pos]
        if unknown:
            raise OrtException.invalid_argument(f"unknown input names {unknown}; the model's inputs are {list(self._input_names)}")
        if not inputs:
            raise OrtException.invalid_argument(f"no inputs given; the model's inputs are {list(self._input_names)}")
        requested: List[Any] = []
        if requestedOutputs is None:
            wanted = list(self._output_names)
        else:
            check_collection(requestedOutputs)
            requested = list(requestedOutputs)
            check_names(requested)
            wanted = ordered_names(requested, isinstance(requestedOutputs, (set, frozenset)), self._output_names)
        unknown = [n for n in requested if n not in self._output_pos]
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
                check_symbolic("the model's", [(n, specs[self._input_pos[n]], t.passed_dims or ()) for n, t in zip(inputs, tensors)])
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
                    pinned_pointer(runOptions) if runOptions is not None else ffi.NULL,
                    ffi.new("char*[]", in_names),
                    ffi.new("OrtValue*[]", [pinned_pointer(t) for t in tensors]),
                    len(tensors),
                    ffi.new("char*[]", out_names),
                    len(wanted),
                    out_values,
                )
                values = adopt_outputs(out_values, len(wanted))
            finally:
                unpin_all(in_use)
            check_outputs(status, values, "Run")
            if self._aliased:
                detach_aliased(values, [i for i, n in enumerate(wanted) if n in self._aliased])
        finally:
            for tensor in made:
                tensor.close()
        return _Result(wanted, values)  # type: ignore[arg-type]  # all produced: none is None
