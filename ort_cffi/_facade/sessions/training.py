"""Facade: ``OrtTrainingSession`` (Java's class, one call at a time), over ``OrtTrainingApi``. Its
checkpoint state, ``OrtCheckpointState``, is in ``checkpoint``, the step engine in ``steps``.

What the C API leaves to its caller, done here once:

- **Positional I/O.** ``TrainStep``/``EvalStep`` take every input and every output by position. The
  session learns the names at construction; each step matches inputs *by name*, fetches every output,
  and returns exactly the requested ones, labelled right (the Java binding did neither).
- **Guards before C.** Closed handles, missing models (eval, optimizer, scheduler), out-of-range
  indices and bad names are refused in Python: several of them crash the runtime (docs/internals/runtime.md §4).
- **Ownership.** A checkpoint the session loaded is the session's; one the caller passed stays the
  caller's and is pinned by the session, so closing it early cannot free it under the session. One
  lock per checkpoint serializes the session and the state (the runtime's session is not
  thread-safe); the GIL is released inside every native call.
- **Crash-safe saves.** ``saveCheckpoint`` writes a temporary file beside the target, flushes it to
  disk and renames it over the target.
"""
from __future__ import annotations

import numbers
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ort_cffi._backends import training_table
from ort_cffi._facade.external_data import confine_models, inline_external_data
from ort_cffi._facade.sessions.checkpoint import INT64_MAX, INT64_MIN, OrtCheckpointState, StateBinding
from ort_cffi._facade.sessions.options import RunOptions, SessionOptions
from ort_cffi._facade.sessions.results import NameSet, Result
from ort_cffi._facade.sessions.signature import model_inputs, unknown_values
from ort_cffi._facade.sessions.steps import ModelPlan
from ort_cffi._facade.tensors.conversions import as_tensor_array
from ort_cffi._facade.tensors.tensor import OnnxTensor, tensor_over_copy
from ort_cffi._native.errors import OrtClosedException, OrtErrorCode, OrtException, c_string
from ort_cffi._native.files import PathLike, PathOrBytes, atomic_write, fspath, native_path, read_model
from ort_cffi._native.handles import NativeHandle, pin_all, pinned_pointer, pointer, process, read_names, unpin_all
from ort_cffi._native.tables import check_status, ffi, get_runtime

_CheckpointState = OrtCheckpointState


class OrtTrainingSession(NativeHandle):
    """A training session over a checkpoint, a training model, and optionally eval and optimizer models.

    Made by `OrtEnvironment.createTrainingSession`, whose arguments the constructor takes too (see there
    for them and for what creation raises). The caller owns the session and closes it (or uses a `with`
    block): that releases the session, then the checkpoint state it loaded itself. Once closed, every
    method but `close()`, `isClosed()`, `closed` and the static `setSeed` raises `OrtClosedException`.

    ONNX Runtime's session is not thread-safe: the session's calls are serialized by a lock, and the
    GIL is released inside each native call, so two sessions train in parallel in two threads.

    Java: `ai.onnxruntime.OrtTrainingSession` (made by `OrtEnvironment.createTrainingSession`).
    """

    _kind = "OrtTrainingSession"
    _owns_state = False
    OrtCheckpointState = _CheckpointState  # Java nests it: OrtTrainingSession.OrtCheckpointState

    def __init__(
        self,
        checkpoint: Union[PathLike, _CheckpointState],
        trainModel: PathOrBytes,
        evalModel: Optional[PathOrBytes] = None,
        optimizerModel: Optional[PathOrBytes] = None,
        options: Optional[SessionOptions] = None,
        *,
        externalDataAnywhere: bool = False,
    ) -> None:
        rt = self._rt = get_runtime()
        train = read_model(trainModel, "training model")
        evaluation = read_model(evalModel, "eval model") if evalModel is not None else (None, None)
        optimizer = read_model(optimizerModel, "optimizer model") if optimizerModel is not None else (None, None)
        if options is not None and not isinstance(options, SessionOptions):
            raise OrtException.invalid_argument(f"options must be SessionOptions, not {type(options).__name__}")
        from_buffers = train[1] is not None or evaluation[1] is not None or optimizer[1] is not None
        if from_buffers and (train[1] is None or (evalModel is not None and evaluation[1] is None) or (optimizerModel is not None and optimizer[1] is None)):
            raise OrtException.invalid_argument("give all models as paths or all as bytes (the C API takes one or the other)")
        confine_models([(*train, "training model"), (*evaluation, "eval model"), (*optimizer, "optimizer model")],
                       externalDataAnywhere)

        if isinstance(checkpoint, _CheckpointState):
            state, self._owns_state = checkpoint, False
        else:
            state, self._owns_state = _CheckpointState.loadCheckpoint(fspath(checkpoint, "checkpoint path")), True
        self._state = state
        binding = self._binding = StateBinding(state)
        own_options = options is None
        session_options = options if options is not None else SessionOptions()
        try:
            with binding.lock:
                state_ptr = binding.unbound_pointer()
                env = process.env()
                out = ffi.new("OrtTrainingSession**")
                pin_all((session_options,))  # the caller may close them from another thread meanwhile
                try:
                    if from_buffers:
                        status = training_table().CreateTrainingSessionFromBuffer(
                            pointer(env), pinned_pointer(session_options), state_ptr,
                            train[1], len(train[1] or b""),
                            evaluation[1] or ffi.NULL, len(evaluation[1] or b""),
                            optimizer[1] or ffi.NULL, len(optimizer[1] or b""),
                            out,
                        )
                        where = "creating a training session from model bytes"
                    else:
                        status = training_table().CreateTrainingSession(
                            pointer(env), pinned_pointer(session_options), state_ptr,
                            native_path(train[0] or ""),
                            native_path(evaluation[0]) if evaluation[0] else ffi.NULL,
                            native_path(optimizer[0]) if optimizer[0] else ffi.NULL,
                            out,
                        )
                        where = f"creating a training session from {train[0]!r}"
                finally:
                    unpin_all((session_options,))
                check_status(status, where)
                self._own(out[0], training_table().ReleaseTrainingSession, pinned=(env, state))
                binding.bind(self)
        except BaseException:
            if self._owns_state:
                state.close()  # the state this constructor loaded must not leak (a Java defect)
            raise
        finally:
            if own_options:
                session_options.close()
        self._lock = binding.lock
        self._has_eval = evalModel is not None
        self._eval_from_path = evaluation[0] is not None
        self._eval_path = evaluation[0]  # the export reads the eval model again from here
        self._external_data_anywhere = externalDataAnywhere
        self._has_optimizer = optimizerModel is not None
        self._has_scheduler = False
        self._optimizer_step = training_table().OptimizerStep  # the per-step calls, looked up once
        self._lazy_reset_grad = training_table().LazyResetGrad
        try:
            self._train = self._plan("training", training_table().TrainStep, train)
            self._eval = self._plan("eval", training_table().EvalStep, evaluation) if self._has_eval else None
        except BaseException:
            self.close()
            raise

    # --- construction helpers ------------------------------------------------------------------

    def _plan(self, kind: str, step: Any, model: Tuple[Optional[str], Optional[bytes]]) -> ModelPlan:
        t = training_table()
        if kind == "training":
            inputs = read_names(self._ptr, t.TrainingSessionGetTrainingModelInputCount, t.TrainingSessionGetTrainingModelInputName)
            outputs = read_names(self._ptr, t.TrainingSessionGetTrainingModelOutputCount, t.TrainingSessionGetTrainingModelOutputName)
        else:
            inputs = read_names(self._ptr, t.TrainingSessionGetEvalModelInputCount, t.TrainingSessionGetEvalModelInputName)
            outputs = read_names(self._ptr, t.TrainingSessionGetEvalModelOutputCount, t.TrainingSessionGetEvalModelOutputName)
        # The training C API has no call for the models' input types: they are read from the ONNX
        # model (its graph inputs only; see signature.py), once.
        return ModelPlan(kind, inputs, outputs, step, model_inputs(model[0], model[1], inputs), self._lock)

    # --- names ---------------------------------------------------------------------------------

    def getTrainInputNames(self) -> NameSet:
        """The training model's input names, in its order.

        Java: `Set<String> getTrainInputNames()`.

        Returns:
            A new ordered, read-only set of names (Java's `Set<String>`) the caller owns: plain Python
                data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return NameSet(self._train.input_names)

    def getTrainOutputNames(self) -> NameSet:
        """The training model's output names, in its order (the loss first).

        Java: `Set<String> getTrainOutputNames()`.

        Returns:
            A new ordered, read-only set of names (Java's `Set<String>`) the caller owns: plain Python
                data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return NameSet(self._train.output_names)

    def getEvalInputNames(self) -> NameSet:
        """The eval model's input names, in its order; empty without an eval model.

        Java: `Set<String> getEvalInputNames()`.

        Returns:
            A new ordered, read-only set of names (Java's `Set<String>`) the caller owns: plain Python
                data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return NameSet(self._eval.input_names if self._eval else ())

    def getEvalOutputNames(self) -> NameSet:
        """The eval model's output names, in its order; empty without an eval model.

        Java: `Set<String> getEvalOutputNames()`.

        Returns:
            A new ordered, read-only set of names (Java's `Set<String>`) the caller owns: plain Python
                data, still valid after the session closes.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return NameSet(self._eval.output_names if self._eval else ())

    # --- steps ---------------------------------------------------------------------------------

    def trainStep(
        self,
        inputs: Mapping[str, Any],
        *args: Any,
        requestedOutputs: Optional[Iterable[str]] = None,
        pinnedOutputs: Optional[Mapping[str, OnnxTensor]] = None,
        runOptions: Optional[RunOptions] = None,
    ) -> Result:
        """One training step: forward and backward over `inputs`, adding to the gradients (`TrainStep`).

        The gradients accumulate until `lazyResetGrad()`; `optimizerStep()` applies them. Every output
        is fetched from the runtime (the C API takes them all, by position) and the requested ones are
        returned, labelled right.

        Java: `OrtSession.Result trainStep(Map<String, ? extends OnnxTensorLike> inputs)` and its
        overloads `trainStep(inputs, RunOptions runOptions)`, `trainStep(inputs, Set<String>
        requestedOutputs)`, `trainStep(inputs, Map<String, ? extends OnnxValue> pinnedOutputs)`,
        `trainStep(inputs, requestedOutputs, pinnedOutputs, runOptions)`.

        Args:
            inputs: Input name → `OnnxTensor`, numpy array or numpy scalar, one entry per input of the
                model, in any order: they are matched to the model's inputs by name (Java passes them
                in the map's order). An array is wrapped for the call without a copy when its layout
                allows, copied once otherwise.
            *args: Java's overloads, told apart by type, in any order (`None` is skipped): a set, list
                or tuple of output names (`requestedOutputs`), a dict of pinned outputs
                (`pinnedOutputs`), a `RunOptions` (`runOptions`).
            requestedOutputs: The outputs to return. A set comes back in the model's order, a list or
                tuple in its own (repeats dropped); any non-empty subset works (Java fails on a strict
                subset). None: every output, unless outputs are pinned.
            pinnedOutputs: Output name → `OnnxTensor` the runtime writes the output into: over
                writable memory, of the output's element type and shape. They stay the caller's.
            runOptions: Accepted; the runtime ignores run options in training steps (in Java too).

        Returns:
            A `Result` the caller owns and must close (or use in a `with` block): closing it closes the
                values the runtime allocated, and values taken from it become unusable; pinned outputs
                stay the caller's and stay open. It holds every output in the model's order, or the
                requested outputs in the order asked, then the pinned ones (Java lists the pinned
                first).

        Raises:
            OrtClosedException: The session is closed, or an input tensor, a pinned output or the run
                options are.
            OrtInvalidArgumentException: `inputs` is not a mapping; an input is missing, unknown or
                repeated, of another element type, rank or fixed size than the model declares, not a
                tensor or numpy array, or has a zero-sized dimension (the runtime would crash);
                inputs disagree on a symbolic dimension (the batch); an output name is unknown, both
                requested and pinned, or none is asked; a pinned output is not an `OnnxTensor` or is
                over read-only memory; an argument is of an unexpected type.
            OrtException: The runtime fails the step (e.g. a pinned output of the wrong shape).
        """
        return self._train.dispatch(self, inputs, args, requestedOutputs, pinnedOutputs, runOptions)

    def evalStep(
        self,
        inputs: Mapping[str, Any],
        *args: Any,
        requestedOutputs: Optional[Iterable[str]] = None,
        pinnedOutputs: Optional[Mapping[str, OnnxTensor]] = None,
        runOptions: Optional[RunOptions] = None,
    ) -> Result:
        """One evaluation step: the eval model over `inputs`, with the current parameters (`EvalStep`).

        The same forms and rules as `trainStep`.

        Java: `OrtSession.Result evalStep(Map<String, ? extends OnnxTensorLike> inputs)` and its four
        overloads, as `trainStep`'s.

        Args:
            inputs: Input name → `OnnxTensor`, numpy array or numpy scalar, one entry per input of the
                model, in any order: they are matched to the model's inputs by name (Java passes them
                in the map's order). An array is wrapped for the call without a copy when its layout
                allows, copied once otherwise.
            *args: Java's overloads, told apart by type, in any order (`None` is skipped): a set, list
                or tuple of output names (`requestedOutputs`), a dict of pinned outputs
                (`pinnedOutputs`), a `RunOptions` (`runOptions`).
            requestedOutputs: The outputs to return. A set comes back in the model's order, a list or
                tuple in its own (repeats dropped); any non-empty subset works (Java fails on a strict
                subset). None: every output, unless outputs are pinned.
            pinnedOutputs: Output name → `OnnxTensor` the runtime writes the output into: over
                writable memory, of the output's element type and shape. They stay the caller's.
            runOptions: Accepted; the runtime ignores run options in training steps (in Java too).

        Returns:
            A `Result` the caller owns and must close (or use in a `with` block): closing it closes the
                values the runtime allocated, and values taken from it become unusable; pinned outputs
                stay the caller's and stay open. It holds every output in the model's order, or the
                requested outputs in the order asked, then the pinned ones (Java lists the pinned
                first).

        Raises:
            OrtClosedException: The session is closed, or an input tensor, a pinned output or the run
                options are.
            OrtInvalidArgumentException: The session has no eval model (Java: "Unexpected number of
                inputs"); `inputs` is not a mapping; an input is missing, unknown or
                repeated, of another element type, rank or fixed size than the model declares, not a
                tensor or numpy array, or has a zero-sized dimension (the runtime would crash);
                inputs disagree on a symbolic dimension (the batch); an output name is unknown, both
                requested and pinned, or none is asked; a pinned output is not an `OnnxTensor` or is
                over read-only memory; an argument is of an unexpected type.
            OrtException: The runtime fails the step (e.g. a pinned output of the wrong shape).
        """
        if self._eval is None:
            self._handle()
            raise OrtException.invalid_argument("this training session has no eval model: evalStep is unavailable")
        return self._eval.dispatch(self, inputs, args, requestedOutputs, pinnedOutputs, runOptions)

    def lazyResetGrad(self) -> None:
        """Reset the gradients, lazily: the next `trainStep` overwrites them instead of adding (`LazyResetGrad`).

        Java: `void lazyResetGrad()`.

        Raises:
            OrtClosedException: The session is closed.
            OrtException: The runtime fails the reset.
        """
        lock = self._lock
        lock.acquire()
        try:
            if self._closed:
                raise OrtClosedException(self._kind)
            status = self._lazy_reset_grad(self._ptr)
        finally:
            lock.release()
        if status:
            check_status(status, "LazyResetGrad")

    # --- optimizer and scheduler ---------------------------------------------------------------

    def _require_optimizer(self) -> None:
        self._handle()  # a closed session says so first
        if not self._has_optimizer:
            raise OrtException.invalid_argument("this training session has no optimizer model")

    def optimizerStep(self, runOptions: Optional[RunOptions] = None) -> None:
        """Update the parameters from the accumulated gradients (`OptimizerStep`).

        Java: `void optimizerStep()`, `void optimizerStep(OrtSession.RunOptions runOptions)`.

        Args:
            runOptions: Accepted; the runtime ignores run options here (in Java too).

        Raises:
            OrtClosedException: The session or the run options are closed.
            OrtInvalidArgumentException: The session has no optimizer model (checked before any native call), or
                `runOptions` is not `RunOptions`.
            OrtException: The runtime fails the step.
        """
        if runOptions is None:  # the per-step form
            lock = self._lock
            lock.acquire()
            try:
                if self._closed or not self._has_optimizer:
                    self._require_optimizer()  # raises the right error
                status = self._optimizer_step(self._ptr, ffi.NULL)
            finally:
                lock.release()
            if status:
                check_status(status, "OptimizerStep")
            return
        if not isinstance(runOptions, RunOptions):
            raise OrtException.invalid_argument(f"runOptions must be RunOptions, not {type(runOptions).__name__}")
        with self._lock:
            self._require_optimizer()
            pin_all([runOptions])
            try:
                self._call(training_table().OptimizerStep, pinned_pointer(runOptions), context="OptimizerStep")
            finally:
                unpin_all([runOptions])

    def setLearningRate(self, learningRate: float) -> None:
        """Set the optimizer's learning rate (`SetLearningRate`).

        A registered scheduler sets it again at each `schedulerStep()`.

        Java: `void setLearningRate(float learningRate)`.

        Args:
            learningRate: Any real number but a `bool`; the runtime keeps it as a float32.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The session has no optimizer model, or `learningRate`
                is not a real number.
        """
        if isinstance(learningRate, bool) or not isinstance(learningRate, numbers.Real):
            raise OrtException.invalid_argument(f"the learning rate must be a float, not {type(learningRate).__name__}")
        with self._lock:
            self._require_optimizer()
            self._call(training_table().SetLearningRate, float(learningRate), context="SetLearningRate")

    def getLearningRate(self) -> float:
        """The optimizer's current learning rate (`GetLearningRate`).

        A Python `float` holding the runtime's float32: compare it with `np.float32(0.245)`, not `0.245`,
        as Java compares it with `0.245f`.

        Java: `float getLearningRate()`.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The session has no optimizer model.
        """
        out = ffi.new("float*")
        with self._lock:
            self._require_optimizer()
            self._call(training_table().GetLearningRate, out, context="GetLearningRate")
        return float(out[0])

    def registerLinearLRScheduler(self, warmupSteps: int, totalSteps: int, initialLearningRate: float) -> None:
        """Register a linear learning-rate schedule (`RegisterLinearLRScheduler`).

        Linear warm-up from 0 to `initialLearningRate` over `warmupSteps`, then linear decay to 0 at
        `totalSteps`, counted in optimizer steps. Registering sets the rate to `initialLearningRate`
        and leaves it there; each `schedulerStep()` then sets the rate the schedule gives for the
        optimizer steps taken so far.

        Java: `void registerLinearLRScheduler(long warmupSteps, long totalSteps, float initialLearningRate)`.

        Args:
            warmupSteps: A non-negative int, at most `totalSteps` (the runtime would accept more).
            totalSteps: A non-negative int.
            initialLearningRate: Any real number but a `bool`.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: A step count is not a non-negative int, `warmupSteps` exceeds
                `totalSteps`, `initialLearningRate` is not a real number, or the session has no
                optimizer model.
        """
        for what, value in (("warmupSteps", warmupSteps), ("totalSteps", totalSteps)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= INT64_MAX:
                raise OrtException.invalid_argument(f"{what} must be a non-negative int, got {value!r}")
        if int(warmupSteps) > int(totalSteps):
            raise OrtException.invalid_argument(f"warmupSteps ({warmupSteps}) is larger than totalSteps ({totalSteps})")
        self._register_linear_schedule(warmupSteps, totalSteps, initialLearningRate)

    def _register_linear_schedule(self, warmupSteps: int, totalSteps: int, initialLearningRate: float) -> None:
        """`registerLinearLRScheduler` with any order of the two counts, as the runtime takes them: a warmup
        past the total decays to 0 at once after the warmup. ort_cffi.api needs it, since ONNX Runtime's
        Python layer passes its counts the other way round."""
        for what, value in (("warmupSteps", warmupSteps), ("totalSteps", totalSteps)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= INT64_MAX:
                raise OrtException.invalid_argument(f"{what} must be a non-negative int, got {value!r}")
        if isinstance(initialLearningRate, bool) or not isinstance(initialLearningRate, numbers.Real):
            raise OrtException.invalid_argument("initialLearningRate must be a float")
        with self._lock:
            self._require_optimizer()
            self._call(training_table().RegisterLinearLRScheduler, int(warmupSteps), int(totalSteps),
                       float(initialLearningRate), context="RegisterLinearLRScheduler")
            self._has_scheduler = True

    def schedulerStep(self) -> None:
        """Set the learning rate the registered schedule gives for the optimizer steps taken (`SchedulerStep`).

        Java: `void schedulerStep()`.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The session has no optimizer model, or no scheduler is
                registered (`registerLinearLRScheduler`).
        """
        with self._lock:
            self._require_optimizer()
            if not self._has_scheduler:
                raise OrtException.invalid_argument("no learning rate scheduler is registered (registerLinearLRScheduler)")
            self._call(training_table().SchedulerStep, context="SchedulerStep")

    # --- checkpoint, properties, export --------------------------------------------------------

    def saveCheckpoint(self, outputPath: PathLike, saveOptimizerState: bool = False) -> None:
        """Save the session's checkpoint state to a file, crash-safe (`SaveCheckpoint`).

        The checkpoint is written to a temporary file beside the target, flushed to disk and renamed
        over the target: a crash at any moment leaves the old file or the new one, never a partial
        one. A replaced file keeps its permissions.

        Java: `void saveCheckpoint(Path outputPath, boolean saveOptimizer)`.

        Args:
            outputPath: A `str` or `os.PathLike` in a folder that exists.
            saveOptimizerState: Also save the optimizer state (default False); needs an optimizer model.

        Raises:
            OrtClosedException: The session is closed.
            OrtFileNotFoundException: The folder of `outputPath` does not exist.
            OrtInvalidArgumentException: `outputPath` is empty or not a path, or `saveOptimizerState`
                is true and the session has no optimizer model.
            OrtException: The runtime fails to write the checkpoint.
        """
        self._handle()
        if saveOptimizerState and not self._has_optimizer:
            raise OrtException.invalid_argument("cannot save optimizer state: this session has no optimizer model")
        self._binding.save(outputPath, saveOptimizerState)

    def getCheckpointState(self) -> _CheckpointState:
        """The checkpoint state this session trains.

        Java: none (ort_cffi addition).

        Returns:
            The session's `OrtCheckpointState`, not a copy. One the session loaded from a path is the
                session's own and closes with it; one the caller passed in stays the caller's to close.
                Either way the session keeps it alive while it is open.

        Raises:
            OrtClosedException: The session is closed.
        """
        self._handle()
        return self._state

    def addProperty(self, propertyName: str, propertyValue: Union[int, float, str]) -> None:
        """Add a property to the session's checkpoint state (`AddProperty`); an existing name is overwritten.

        It works also after the caller closed a state it passed in, while the session is open.

        Java: `void addProperty(String name, int value)`, `void addProperty(String name, float value)`,
        `void addProperty(String name, String value)`.

        Args:
            propertyName: A `str` without NUL.
            propertyValue: An `int` (or numpy integer), stored as a true int64 (Java stores 32 bits in
                the int64 slot); a `float` (or numpy float), stored as float32; or a `str` without NUL.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The name is not a `str`; the value is of another type (a `bool`
                included) or does not fit (an int outside int64, a finite float beyond float32's range);
                either contains NUL.
        """
        self._handle()
        self._binding.add_property(propertyName, propertyValue)

    def getIntProperty(self, *args: Any) -> int:
        """An int property's value, the whole int64, from the session's checkpoint state (`GetProperty`).

        Java: `int getIntProperty(String name)`; also the checkpoint's form with an allocator first.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not an int (the message names its type). The
                value the runtime allocated is freed in every case.
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        self._handle()
        return int(self._binding.get_property(args, 0))

    def getFloatProperty(self, *args: Any) -> float:
        """A float property's value, a Python `float` holding the float32, from the session's checkpoint state (`GetProperty`).

        Java: `float getFloatProperty(String name)`; also the checkpoint's form with an allocator first.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not a float (the message names its type). The
                value the runtime allocated is freed in every case.
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        self._handle()
        return float(self._binding.get_property(args, 1))

    def getStringProperty(self, *args: Any) -> str:
        """A str property's value, from the session's checkpoint state (`GetProperty`).

        Java: `String getStringProperty(String name)`; also the checkpoint's form with an allocator first.

        Args:
            *args: `(name)` or `(allocator, name)`: the allocator (`env.defaultAllocator`, or None) may
                be left out; the name is a `str` without NUL.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: The arguments are not `([allocator,] name)`, the name is not a
                `str` without NUL, or the property is not a str (the message names its type). The
                value the runtime allocated is freed in every case.
            OrtException: The checkpoint has no property of that name (the runtime's error).
        """
        self._handle()
        return str(self._binding.get_property(args, 2))

    def exportModelForInference(self, outputPath: PathLike, outputNames: Sequence[str]) -> None:
        """Write an inference model: the eval graph with the current parameters (`ExportModelForInferencing`).

        The model keeps the eval graph's outputs named in `outputNames`, which the eval model must have
        (the default eval model outputs only the loss: see `additional_output_names` of
        `ort_cffi.artifacts.generate_artifacts`); the runtime also takes any other value its graph
        computes. It is written crash-safe, as checkpoints are, and replaces an existing file, as in
        Java. It holds all its data: tensors the eval model keeps in external data are read into it (the
        runtime would copy their locations, which name files beside the eval model). `OrtEnvironment.createSession`
        runs it.

        Java: `void exportModelForInference(Path outputPath, String[] outputNames)`.

        Args:
            outputPath: A `str` or `os.PathLike` in a folder that exists.
            outputNames: A list or tuple of output names, or one `str`.

        Raises:
            OrtClosedException: The session is closed.
            OrtFileNotFoundException: The folder of `outputPath` does not exist.
            OrtInvalidArgumentException: No output name is given (Java: `IllegalArgumentException`),
                `outputNames` is neither a `str` nor a list or tuple, a name is not a `str` without NUL,
                `outputPath` is empty or not a path, the session has no eval model, or a name is no value
                of the eval graph (the message lists the eval model's outputs; Java passes the runtime's
                "Expected graph output for inference graph ... could not be found"). Checked before
                anything is written.
            OrtException: The eval model was loaded from bytes (code `ORT_NOT_IMPLEMENTED`: ONNX Runtime
                1.19 cannot export then), or the runtime fails the export.
        """
        path = fspath(outputPath, "export path")
        if isinstance(outputNames, str):
            outputNames = [outputNames]
        elif not isinstance(outputNames, Iterable):
            raise OrtException.invalid_argument(
                f"outputNames is a list or tuple of output names, or one str; not {type(outputNames).__name__}"
            )
        names = list(outputNames)
        if not names:
            raise OrtException.invalid_argument("exportModelForInference needs at least one output name")
        encoded = [ffi.new("char[]", c_string(n, "the output name")) for n in names]
        with self._lock:
            self._handle()  # a closed session says so first
            if not self._has_eval:
                raise OrtException.invalid_argument("exportModelForInference needs an eval model; this session has none")
            if not self._eval_from_path:
                raise OrtException(
                    "ONNX Runtime 1.19 cannot export a model for inference when the eval model was loaded from bytes; "
                    "create the session from model paths to export",
                    OrtErrorCode.ORT_NOT_IMPLEMENTED,
                )
            self._check_export_names(names)
            eval_path = self._eval_path
            assert eval_path is not None

            def export(tmp: str) -> None:
                self._call(training_table().ExportModelForInferencing, native_path(tmp), len(encoded),
                           ffi.new("char*[]", encoded), context=f"exporting {names} to {path!r}")
                # The runtime copies the eval model's external tensors as they are, their locations
                # relative to the eval model's folder: the export holds their data instead.
                inline_external_data(tmp, os.path.dirname(os.path.abspath(eval_path)), f"the inference model {path!r}",
                                     anywhere=self._external_data_anywhere)

            atomic_write(path, export, "inference model")

    def _check_export_names(self, names: List[str]) -> None:
        """Refuse export names the eval graph lacks before the native call: the runtime's answer names
        neither the valid outputs nor the real fault ("Expected graph output for inference graph output
        could not be found. Please regenerate the eval graph."). The runtime accepts any value of the
        graph, not only its outputs (docs/internals/runtime.md §4), so this refuses only names that are no
        value at all; a model this reader cannot follow is left to the runtime."""
        unknown = unknown_values(self._eval_path, names) if self._eval_path is not None else []
        if unknown:
            outputs = ", ".join(repr(name) for name in self._eval.output_names) if self._eval is not None else "none"
            raise OrtException.invalid_argument(
                f"cannot export {', '.join(repr(name) for name in unknown)} for inference: the eval model has no "
                f"value of {'that name' if len(unknown) == 1 else 'these names'}; its outputs are {outputs} (a value "
                "its graph computes may be exported too)"
            )

    # --- parameters (beyond the Java binding) ---------------------------------------------------

    def getParametersSize(self, trainableOnly: bool = True) -> int:
        """The number of float32 elements in the (trainable) parameters (`GetParametersSize`).

        Java: none (ort_cffi addition).

        Args:
            trainableOnly: Only the trainable parameters (default True), or all of them.

        Raises:
            OrtClosedException: The session is closed.
        """
        out = ffi.new("size_t*")
        with self._lock:
            self._call(training_table().GetParametersSize, out, bool(trainableOnly), context="GetParametersSize")
        return int(out[0])

    def copyParametersToBuffer(self, trainableOnly: bool = True) -> np.ndarray:
        """All (trainable) parameters as one flat float32 array, in the training model's input order (`CopyParametersToBuffer`).

        Java: none (ort_cffi addition).

        Args:
            trainableOnly: Only the trainable parameters (default True), or all of them.

        Returns:
            A new 1-D float32 numpy array of `getParametersSize(trainableOnly)` elements that the caller
                owns: a copy, which later training does not change.

        Raises:
            OrtClosedException: The session is closed.
            OrtException: The runtime fails the copy.
        """
        with self._lock:
            size = ffi.new("size_t*")
            self._call(training_table().GetParametersSize, size, bool(trainableOnly), context="GetParametersSize")
            buffer = np.empty(size[0], dtype=np.float32)
            with tensor_over_copy(buffer) as tensor:
                self._call(training_table().CopyParametersToBuffer, pointer(tensor), bool(trainableOnly),
                           context="CopyParametersToBuffer")
        return buffer

    def copyBufferToParameters(self, buffer: Any, trainableOnly: bool = True) -> None:
        """Overwrite the (trainable) parameters from one flat float32 array (`CopyBufferToParameters`).

        The inverse of `copyParametersToBuffer`. With `trainableOnly=False` it also fills a nominal
        (shapes-only) checkpoint, after which steps and exports work.

        Java: none (ort_cffi addition).

        Args:
            buffer: A 1-D float32 numpy array of exactly `getParametersSize(trainableOnly)` elements;
                its values are copied in.
            trainableOnly: Only the trainable parameters (default True), or all of them.

        Raises:
            OrtClosedException: The session is closed.
            OrtInvalidArgumentException: `buffer` is not a numpy array, not float32, not 1-D, or has
                another number of elements.
            OrtException: The runtime fails the copy, or the session would fill a nominal checkpoint
                without an optimizer model (ONNX Runtime 1.19.2 crashes there: refused).
        """
        if not isinstance(buffer, np.ndarray):
            raise OrtException.invalid_argument(f"the parameter buffer must be a numpy array, not {type(buffer).__name__}")
        if buffer.dtype != np.float32:
            raise OrtException.invalid_argument(f"the parameter buffer must be float32, not {buffer.dtype}")
        expected = self.getParametersSize(trainableOnly)
        if buffer.ndim != 1 or buffer.size != expected:
            raise OrtException.invalid_argument(
                f"the parameter buffer must be 1-D with {expected} elements, got shape {list(buffer.shape)}"
            )
        if not trainableOnly and not self._has_optimizer and self._holds_nominal_state():
            # Filling a nominal state makes the session build its optimizer's state, which dereferences the
            # optimizer it does not have (SIGSEGV, measured; docs/guides/guarantees.md).
            raise OrtException(
                "cannot fill a nominal checkpoint through a training session without an optimizer model: ONNX "
                "Runtime 1.19.2 crashes doing so. Create the session with the optimizer model, fill the parameters "
                "there (copyBufferToParameters(buffer, False)), and save the checkpoint if another session needs it"
            )
        array = as_tensor_array(buffer, "parameter buffer")
        with tensor_over_copy(array) as tensor:
            with self._lock:
                self._call(training_table().CopyBufferToParameters, pointer(tensor), bool(trainableOnly),
                           context="CopyBufferToParameters")

    def _holds_nominal_state(self) -> bool:
        """Whether the checkpoint state holds shapes only, not yet filled: the runtime refuses to copy its
        parameters out then, and says so."""
        try:
            self.copyParametersToBuffer(True)
        except OrtException as error:
            if "nominal" in str(error):
                return True
            raise
        return False

    # --- seed and close --------------------------------------------------------------------------

    @staticmethod
    def setSeed(seed: int) -> None:
        """Seed the runtime's random generators (dropout and the like), for the whole process (`SetSeed`).

        A static method: it needs no session.

        Java: `static void setSeed(long seed)`.

        Args:
            seed: An int in int64's range.

        Raises:
            OrtInvalidArgumentException: `seed` is not an int in int64's range (a `bool` included).
        """
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not INT64_MIN <= int(seed) <= INT64_MAX:
            raise OrtException.invalid_argument(f"the seed must be an int64, got {seed!r}")
        check_status(training_table().SetSeed(int(seed)), "SetSeed")

    def close(self) -> None:
        """Release the session, after a step in progress in another thread, then the checkpoint state it loaded.

        A state the caller passed in stays the caller's: open until the caller closes it (if the caller
        closed it already, its memory is released now).
        Idempotent: a second `close()` does nothing (Java throws `IllegalStateException`).

        Java: `void close()` (`AutoCloseable`: a `with` block closes it as try-with-resources does).
        """
        NativeHandle.close(self)
        if self._owns_state:
            self._state.close()
