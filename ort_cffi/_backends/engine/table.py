"""The engine's ``OrtTrainingApi``: the 33 functions of ONNX Runtime's training C API, with their C signatures,
kept by the engine over the inference API.

The facade (and a user of the raw layer) calls these exactly as it calls the training build's table: handles are
opaque pointers, out-parameters are written through, strings and values the C API allocates come from the
caller's ``OrtAllocator``, and every function returns an ``OrtStatus*``, NULL on success. A failure becomes a
status made by the runtime's ``CreateStatus`` with the code the training build gives for it, so one status
chokepoint (``check_status``) reads both backends' errors.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

import numpy as np

from ort_cffi._backends.engine import values
from ort_cffi._backends.engine.checkpoint_codec import CheckpointFormatError, read_checkpoint, write_checkpoint
from ort_cffi._backends.engine.session import EngineSession
from ort_cffi._backends.engine.state import EngineState
from ort_cffi._native.errors import OrtException
from ort_cffi._native.tables import Runtime, check_status, ffi

ORT_FAIL, ORT_INVALID_ARGUMENT, ORT_NO_SUCHFILE, ORT_NOT_IMPLEMENTED = 1, 2, 3, 9
INT_PROPERTY, FLOAT_PROPERTY, STRING_PROPERTY = 0, 1, 2

T = TypeVar("T")


def _text(value: Any) -> str:
    """A ``char*`` argument as the facade passes it (bytes, or a cdata pointer) read as text."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode()
    if isinstance(value, str):
        return value
    if value == ffi.NULL:
        raise ValueError("a NULL string")
    return ffi.string(ffi.cast("char*", value)).decode()


class _Handles:
    """Opaque pointers for the engine's objects: a distinct address per object, looked up on each call."""

    def __init__(self, c_type: str) -> None:
        self.c_type = c_type
        self._objects: Dict[int, Tuple[Any, Any]] = {}  # address -> (object, the memory that gives the address)
        self._lock = threading.Lock()
        # the pointer object last looked up and its object: a step's calls pass the same one, and the lookup by
        # address costs a cast and a conversion (kept as one tuple, read and replaced whole: no lock needed)
        self._last: Tuple[Any, Any] = (None, None)

    def add(self, obj: Any) -> Any:
        token = ffi.new("char[1]")
        address = int(ffi.cast("uintptr_t", token))
        with self._lock:
            self._objects[address] = (obj, token)
        return ffi.cast(self.c_type, token)

    def get(self, pointer: Any) -> Any:
        last_pointer, last_object = self._last
        if pointer is last_pointer:
            return last_object
        address = int(ffi.cast("uintptr_t", pointer))
        with self._lock:  # so that a handle removed meanwhile is never remembered as live
            entry = self._objects.get(address)
            if entry is not None:
                self._last = (pointer, entry[0])
        if entry is None:
            raise ValueError(f"{self.c_type} {pointer} is no live handle of ort_cffi's engine")
        return entry[0]

    def remove(self, pointer: Any) -> Optional[Any]:
        with self._lock:
            self._last = (None, None)
            entry = self._objects.pop(int(ffi.cast("uintptr_t", pointer)), None)
        return entry[0] if entry else None


class EngineTrainingApi:
    """An ``OrtTrainingApi`` table kept by the engine (see the module's docstring)."""

    backend = "engine"

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._api = runtime.api
        self._states = _Handles("OrtCheckpointState*")
        self._sessions = _Handles("OrtTrainingSession*")
        self._seed: Optional[int] = None

    # --- status -------------------------------------------------------------------------------------------
    def _status(self, error: BaseException) -> Any:
        if isinstance(error, OrtException):
            code, message = int(error.code), error.message
        elif isinstance(error, CheckpointFormatError):
            # The training build's words for a file that is no intact checkpoint, so that one reading of them
            # (the facade's) explains both backends' failures.
            code, message = ORT_FAIL, f"{str(error).rstrip('.')}. Checkpoint verification failed."
        elif isinstance(error, FileNotFoundError):
            code, message = ORT_NO_SUCHFILE, str(error)
        elif isinstance(error, NotImplementedError):
            code, message = ORT_NOT_IMPLEMENTED, str(error)
        elif isinstance(error, (ValueError, TypeError, KeyError, IndexError)):
            code, message = ORT_INVALID_ARGUMENT, str(error.args[0]) if error.args else str(error)
        else:
            code, message = ORT_FAIL, f"{type(error).__name__}: {error}"
        if code <= 0:
            code = ORT_FAIL
        return self._api.CreateStatus(code, message.encode(errors="replace"))

    def _do(self, work: Callable[[], None]) -> Any:
        try:
            work()
        except Exception as error:  # every failure becomes a status, as a C function returns it
            return self._status(error)
        return ffi.NULL

    def _copy_string(self, allocator: Any, text: str) -> Any:
        data = text.encode()
        memory = allocator.Alloc(allocator, len(data) + 1)
        if memory == ffi.NULL:
            raise MemoryError("the allocator gave no memory")
        ffi.memmove(memory, data + b"\0", len(data) + 1)
        return ffi.cast("char*", memory)

    # --- checkpoints ----------------------------------------------------------------------------------------
    def LoadCheckpoint(self, path: Any, out: Any) -> Any:
        def work() -> None:
            name = _text(path)
            if not os.path.exists(name):
                raise FileNotFoundError(f"the checkpoint {name} does not exist")
            out[0] = self._states.add(EngineState(read_checkpoint(name)))
        return self._do(work)

    def LoadCheckpointFromBuffer(self, buffer: Any, size: int, out: Any) -> Any:
        def work() -> None:
            data = bytes(ffi.buffer(ffi.cast("char*", buffer), size)) if not isinstance(buffer, bytes) else buffer[:size]
            out[0] = self._states.add(EngineState(read_checkpoint(data)))
        return self._do(work)

    def SaveCheckpoint(self, state: Any, path: Any, include_optimizer: bool) -> Any:
        # Written where asked, as the training build's SaveCheckpoint writes: the facade saves through its one
        # crash-safe path (_native.files.atomic_write: a temporary file beside the target, fsynced, one rename),
        # which hands this a temporary file; a second temporary file and rename here would only double the work.
        return self._do(lambda: write_checkpoint(self._states.get(state).checkpoint(bool(include_optimizer)),
                                                 _text(path), in_place=True))

    def ReleaseCheckpointState(self, state: Any) -> None:
        self._states.remove(state)

    def AddProperty(self, state: Any, name: Any, kind: int, value: Any) -> Any:
        def work() -> None:
            engine_state: EngineState = self._states.get(state)
            key = _text(name)
            if kind == INT_PROPERTY:
                engine_state.properties[key] = int(ffi.cast("int64_t*", value)[0])
            elif kind == FLOAT_PROPERTY:
                engine_state.properties[key] = float(ffi.cast("float*", value)[0])
            elif kind == STRING_PROPERTY:
                engine_state.properties[key] = _text(ffi.cast("char*", value))
            else:
                raise ValueError(f"Unknown property type {kind}")
        return self._do(work)

    def GetProperty(self, state: Any, name: Any, allocator: Any, kind_out: Any, value_out: Any) -> Any:
        def work() -> None:
            engine_state: EngineState = self._states.get(state)
            key = _text(name)
            if key not in engine_state.properties:
                raise ValueError(f"Property {key} not found")
            value = engine_state.properties[key]
            if isinstance(value, str):
                kind_out[0] = STRING_PROPERTY
                value_out[0] = self._copy_string(allocator, value)
                return
            size = 8 if isinstance(value, int) else 4
            memory = allocator.Alloc(allocator, size)
            if memory == ffi.NULL:
                raise MemoryError("the allocator gave no memory")
            if isinstance(value, int):
                kind_out[0] = INT_PROPERTY
                ffi.cast("int64_t*", memory)[0] = value
            else:
                kind_out[0] = FLOAT_PROPERTY
                ffi.cast("float*", memory)[0] = value
            value_out[0] = memory
        return self._do(work)

    def _live_parameter(self, state: Any, name: Any) -> Tuple[EngineState, np.ndarray]:
        engine_state: EngineState = self._states.get(state)
        key = _text(name)
        if key not in engine_state.parameters:
            raise ValueError(f"Parameter name {key} not found in the checkpoint state.")
        engine_state.require_values("read or update a parameter")
        if engine_state.live_sessions == 0:
            raise ValueError("Data transfer manager must be provided to copy data to the parameter. "
                             "Please create the TrainingSession before trying to update the parameter.")
        return engine_state, engine_state.parameters[key].data

    def GetParameterTypeAndShape(self, state: Any, name: Any, out: Any) -> Any:
        def work() -> None:
            engine_state: EngineState = self._states.get(state)
            key = _text(name)
            if key not in engine_state.parameters:
                raise ValueError(f"Parameter name {key} not found in the checkpoint state.")
            data = engine_state.parameters[key].data
            check_status(self._api.CreateTensorTypeAndShapeInfo(out), "CreateTensorTypeAndShapeInfo")
            check_status(self._api.SetTensorElementType(out[0], values.element_type(data)), "SetTensorElementType")
            dims = ffi.new("int64_t[]", [int(d) for d in data.shape] or [0])
            check_status(self._api.SetDimensions(out[0], dims, data.ndim), "SetDimensions")
        return self._do(work)

    def GetParameter(self, state: Any, name: Any, allocator: Any, out: Any) -> Any:
        def work() -> None:
            _, data = self._live_parameter(state, name)
            dims = ffi.new("int64_t[]", [int(d) for d in data.shape] or [0])
            check_status(self._api.CreateTensorAsOrtValue(allocator, dims, data.ndim, values.element_type(data), out),
                         "CreateTensorAsOrtValue")
            values.view(out[0])[...] = data
        return self._do(work)

    def UpdateParameter(self, state: Any, name: Any, value: Any) -> Any:
        def work() -> None:
            _, data = self._live_parameter(state, name)
            given = values.view(value)
            if given.shape != data.shape:
                raise ValueError(f"Parameter data shape mismatch. Expected: {list(data.shape)}, Got: {list(given.shape)}")
            if given.dtype != data.dtype:
                raise ValueError(f"Parameter data type mismatch. Expected: {data.dtype}, Got: {given.dtype}")
            data[...] = given
        return self._do(work)

    # --- sessions -------------------------------------------------------------------------------------------
    def _create(self, env: Any, options: Any, state: Any, train: Tuple[Optional[str], Optional[bytes]],
                evaluation: Optional[Tuple[Optional[str], Optional[bytes]]],
                optimizer: Optional[Tuple[Optional[str], Optional[bytes]]], out: Any) -> Any:
        def work() -> None:
            engine_state: EngineState = self._states.get(state)
            session = EngineSession(env, options, engine_state, train, evaluation, optimizer, self._seed)
            out[0] = self._sessions.add(session)
        return self._do(work)

    def CreateTrainingSession(self, env: Any, options: Any, state: Any, train: Any, evaluation: Any,
                              optimizer: Any, out: Any) -> Any:
        def path(value: Any) -> Optional[Tuple[Optional[str], Optional[bytes]]]:
            if value is None or (not isinstance(value, (bytes, str)) and value == ffi.NULL):
                return None
            return (_text(value), None)
        try:
            train_source = path(train)
            if train_source is None:
                raise ValueError("the training model's path is NULL")
            for source in (train_source, path(evaluation), path(optimizer)):
                if source is not None and not os.path.exists(source[0] or ""):
                    raise FileNotFoundError(f"Load model from {source[0]} failed. File doesn't exist")
            return self._create(env, options, state, train_source, path(evaluation), path(optimizer), out)
        except Exception as error:
            return self._status(error)

    def CreateTrainingSessionFromBuffer(self, env: Any, options: Any, state: Any, train: Any, train_size: int,
                                        evaluation: Any, eval_size: int, optimizer: Any, optimizer_size: int,
                                        out: Any) -> Any:
        def data(value: Any, size: int) -> Optional[Tuple[Optional[str], Optional[bytes]]]:
            if size == 0 or value is None or (not isinstance(value, bytes) and value == ffi.NULL):
                return None
            raw = value[:size] if isinstance(value, bytes) else bytes(ffi.buffer(ffi.cast("char*", value), size))
            return (None, raw)
        train_source = data(train, train_size)
        if train_source is None:
            return self._status(ValueError("the training model's bytes are empty"))
        return self._create(env, options, state, train_source, data(evaluation, eval_size),
                            data(optimizer, optimizer_size), out)

    def ReleaseTrainingSession(self, session: Any) -> None:
        engine_session = self._sessions.remove(session)
        if engine_session is not None:
            engine_session.release()

    def _session(self, session: Any) -> EngineSession:
        found: EngineSession = self._sessions.get(session)
        return found

    def _count(self, session: Any, out: Any, pick: Callable[[EngineSession], int]) -> Any:
        def work() -> None:
            out[0] = pick(self._session(session))
        return self._do(work)

    def _name(self, session: Any, index: int, allocator: Any, out: Any, pick: Callable[[EngineSession], list],
              what: str) -> Any:
        def work() -> None:
            names = pick(self._session(session))
            if not 0 <= index < len(names):
                raise ValueError(f"{what} name index out of range. Expected in range [0-{len(names)}). Actual: {index}")
            out[0] = self._copy_string(allocator, names[index])
        return self._do(work)

    def TrainingSessionGetTrainingModelOutputCount(self, session: Any, out: Any) -> Any:
        return self._count(session, out, lambda s: len(s.train.user_outputs))

    def TrainingSessionGetEvalModelOutputCount(self, session: Any, out: Any) -> Any:
        return self._count(session, out, lambda s: len(s.eval.user_outputs) if s.eval else 0)

    def TrainingSessionGetTrainingModelOutputName(self, session: Any, index: int, allocator: Any, out: Any) -> Any:
        return self._name(session, index, allocator, out, lambda s: s.train.user_outputs, "Train output")

    def TrainingSessionGetEvalModelOutputName(self, session: Any, index: int, allocator: Any, out: Any) -> Any:
        return self._name(session, index, allocator, out, lambda s: s.eval.user_outputs if s.eval else [],
                          "Eval output")

    def TrainingSessionGetTrainingModelInputCount(self, session: Any, out: Any) -> Any:
        return self._count(session, out, lambda s: len(s.train.user_inputs))

    def TrainingSessionGetEvalModelInputCount(self, session: Any, out: Any) -> Any:
        return self._count(session, out, lambda s: len(s.eval.user_inputs) if s.eval else 0)

    def TrainingSessionGetTrainingModelInputName(self, session: Any, index: int, allocator: Any, out: Any) -> Any:
        return self._name(session, index, allocator, out, lambda s: s.train.user_inputs, "Train input")

    def TrainingSessionGetEvalModelInputName(self, session: Any, index: int, allocator: Any, out: Any) -> Any:
        return self._name(session, index, allocator, out, lambda s: s.eval.user_inputs if s.eval else [],
                          "Eval input")

    # A step's three calls are written out rather than through ``_do`` (a closure and two calls more: about
    # 0.3 µs of a small model's 50 µs step)
    def LazyResetGrad(self, session: Any) -> Any:
        try:
            self._sessions.get(session).lazy_reset_grad()
        except Exception as error:
            return self._status(error)
        return ffi.NULL

    def TrainStep(self, session: Any, run_options: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> Any:
        try:
            self._sessions.get(session).train_step(run_options, inputs, n_in, outputs, n_out)
        except Exception as error:
            return self._status(error)
        return ffi.NULL

    def EvalStep(self, session: Any, run_options: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> Any:
        return self._do(lambda: self._session(session).eval_step(run_options, inputs, n_in, outputs, n_out))

    def SetLearningRate(self, session: Any, rate: float) -> Any:
        return self._do(lambda: self._session(session).set_learning_rate(rate))

    def GetLearningRate(self, session: Any, out: Any) -> Any:
        def work() -> None:
            out[0] = self._session(session).get_learning_rate()
        return self._do(work)

    def OptimizerStep(self, session: Any, run_options: Any) -> Any:
        try:
            self._sessions.get(session).optimizer_step()
        except Exception as error:
            return self._status(error)
        return ffi.NULL

    def RegisterLinearLRScheduler(self, session: Any, warmup: int, total: int, initial: float) -> Any:
        return self._do(lambda: self._session(session).register_linear_scheduler(warmup, total, initial))

    def SchedulerStep(self, session: Any) -> Any:
        return self._do(lambda: self._session(session).scheduler_step())

    def GetParametersSize(self, session: Any, out: Any, trainable_only: bool) -> Any:
        return self._count(session, out, lambda s: s.parameters_size(bool(trainable_only)))

    def CopyParametersToBuffer(self, session: Any, buffer: Any, trainable_only: bool) -> Any:
        return self._do(lambda: self._session(session).copy_parameters_to(values.view(buffer), bool(trainable_only)))

    def CopyBufferToParameters(self, session: Any, buffer: Any, trainable_only: bool) -> Any:
        return self._do(lambda: self._session(session).copy_buffer_to_parameters(values.view(buffer),
                                                                                 bool(trainable_only)))

    def ExportModelForInferencing(self, session: Any, path: Any, count: int, names: Any) -> Any:
        def work() -> None:
            wanted = [_text(names[i]) for i in range(count)]
            self._session(session).export(_text(path), wanted)
        return self._do(work)

    def SetSeed(self, seed: int) -> Any:
        def work() -> None:
            self._seed = int(seed)
        return self._do(work)
