"""A training session on the engine: the training, eval and optimizer models of the artifacts run as inference
sessions of the loaded runtime, over state the engine owns.

- **Parameters** are fed as ``OrtValue``s that borrow the state's flat buffers; nothing is copied per step.
- **Gradients** are outputs of the (lowered) training model, written by the runtime straight into the session's
  gradient buffers (pre-allocated outputs of ``Run``). After ``LazyResetGrad`` (and on the first step) a step
  overwrites them; otherwise it writes into a scratch buffer that one vectorised add folds in, which is what
  ``InPlaceAccumulatorV2`` does on the training build.
- **The optimizer model** is read, not run: its operator and attributes say which update ``optimizer`` computes
  over the flat buffers.
- **The models are prepared** (classified and lowered) by ``prepared``: from its cache, or in a child process
  where this one has not imported onnx, so that a training process holds only the sessions and its state.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ort_cffi._backends import session_threads
from ort_cffi._backends.engine import optimizer, values
from ort_cffi._backends.engine.optimizer import OptimizerSpec
from ort_cffi._backends.engine.prepared import prepare
from ort_cffi._backends.engine.state import EngineState
from ort_cffi._native.tables import check_status, ffi, get_runtime

ModelSource = Tuple[Optional[str], Optional[bytes]]


@dataclass
class GraphNames:
    """How the engine runs one model: the user's inputs (in graph order: what a step takes, by position) and
    outputs, the parameters it reads, and for the training model each trainable parameter's gradient output and
    the accumulators' accumulated-buffer outputs, which the engine answers from its own buffer."""

    user_inputs: List[str]
    user_outputs: List[str]
    parameter_inputs: List[str]
    gradients: Dict[str, str] = field(default_factory=dict)
    accumulated: Dict[str, str] = field(default_factory=dict)


def _named(kind: str, source: ModelSource) -> str:
    """The model a session is made of, for messages: "eval model '/path/eval_model.onnx'"."""
    return f"{kind} model {source[0]!r}" if source[0] else f"{kind} model (from bytes)"


MEMORY_PATTERN_ENV = "ORT_CFFI_ENGINE_MEMORY_PATTERN"
# A lowered training graph whose intermediate values take at most this many bytes per sample keeps the memory
# pattern: 16 samples' worth is a MiB at most, and on such graphs a step is mostly per-kernel overhead, which the
# pattern's one planned block cuts (2-3 µs of sklearn_mlp's 22 µs Run on 1.31.1; docs/guides/performance.md)
SMALL_INTERMEDIATES = 64 << 10


def keeps_memory_pattern(intermediates: Optional[int]) -> bool:
    """Whether the engine's sessions of a training graph keep ONNX Runtime's memory pattern (the caller's
    setting): ``$ORT_CFFI_ENGINE_MEMORY_PATTERN`` 1 keeps it, 0 turns it off; otherwise it is kept where the
    lowered training graph's intermediates (``Prepared.training_intermediates``, bytes per sample) are small.
    Elsewhere it is off: the pattern pre-plans one block for every intermediate value of a step, and on the
    lowered training graphs, whose standard forms keep more intermediates, it raised a step's peak memory by
    6-12 MiB on the zoo's CNNs and BERT for no measured gain in time (docs/internals/runtime.md, the engine)."""
    setting = os.environ.get(MEMORY_PATTERN_ENV, "").strip()
    if setting in ("0", "1"):
        return setting == "1"
    return intermediates is not None and intermediates <= SMALL_INTERMEDIATES


def _engine_options(options: Any, memory_pattern: bool) -> Any:
    """The caller's session options, copied, without ONNX Runtime's memory pattern unless ``memory_pattern``
    (``keeps_memory_pattern``). None: the caller's options as they are."""
    if memory_pattern or options == ffi.NULL:
        return None
    api = get_runtime().api
    out = ffi.new("OrtSessionOptions**")
    check_status(api.CloneSessionOptions(options, out), "copying the session options")
    try:
        check_status(api.DisableMemPattern(out[0]), "turning the memory pattern off")
    except BaseException:
        api.ReleaseSessionOptions(out[0])
        raise
    return out[0]


class NativeSession:
    """One ``OrtSession`` of the loaded runtime, made from a model in memory."""

    def __init__(self, env: Any, options: Any, model: Union[bytes, memoryview], what: str,
                 memory_pattern: bool = False) -> None:
        self.what = what
        data = model if isinstance(model, bytes) else ffi.from_buffer(model)
        out = ffi.new("OrtSession**")
        api = get_runtime().api
        copied = _engine_options(options, memory_pattern)
        try:
            check_status(api.CreateSessionFromArray(env, data, len(data), options if copied is None else copied, out),
                         f"creating a session of the {what}")
        finally:
            if copied is not None:
                api.ReleaseSessionOptions(copied)
        self.ptr = out[0]

    def release(self) -> None:
        if self.ptr != ffi.NULL:
            get_runtime().api.ReleaseSession(self.ptr)
            self.ptr = ffi.NULL


class Plan:
    """The names and value slots of one model's ``Run``: user inputs, then parameters; the outputs the runtime
    computes, then gradients. The parameter slots are filled once; the user slots per call. ``caller_outputs``
    maps each output the caller sees to its slot, or to None where the engine answers it itself (an
    accumulator's accumulated buffer)."""

    def __init__(self, session: NativeSession, inputs: Sequence[str], outputs: Sequence[str],
                 user_inputs: int, caller_outputs: Sequence[Optional[int]]) -> None:
        self.session = session
        self.input_names, self._keep_in = values.c_strings(inputs)
        self.output_names, self._keep_out = values.c_strings(outputs)
        self.inputs = ffi.new("OrtValue*[]", max(1, len(inputs)))
        self.outputs = ffi.new("OrtValue*[]", max(1, len(outputs)))
        self.n_in, self.n_out = len(inputs), len(outputs)
        self.user_inputs = user_inputs
        self.caller_outputs = list(caller_outputs)
        # (the caller's index, the slot) of each output the runtime computes: what a step copies, made once.
        # A model may list an output twice: the runtime computes it once, and the repeat gets a copy of its own
        # (each output is an OrtValue its caller releases).
        first: Dict[int, int] = {}
        self._slots: List[Tuple[int, int]] = []
        self._repeats: List[Tuple[int, int]] = []  # (the caller's index, the index that holds the value)
        for i, slot in enumerate(self.caller_outputs):
            if slot is None:
                continue
            if slot in first:
                self._repeats.append((i, first[slot]))
            else:
                first[slot] = i
                self._slots.append((i, slot))
        # Where the runtime computes the caller's first outputs in the caller's order (no repeat, none answered by
        # the engine), a step moves their pointers with one memmove each way instead of a loop over the slots
        self._in_order = [slot for _, slot in self._slots] == list(range(len(self.caller_outputs))) and \
            not self._repeats
        self._pointer_bytes = ffi.sizeof("OrtValue*")
        self._run = get_runtime().api.Run  # the runtime stays loaded while a session of it lives

    def run(self, run_options: Any, inputs: Any, n_in: int, outputs: Any, n_out: int, kind: str) -> None:
        if n_in != self.user_inputs:
            raise ValueError(f"the {kind} model takes {self.user_inputs} inputs, not {n_in}")
        if n_out != len(self.caller_outputs):
            raise ValueError(f"the {kind} model has {len(self.caller_outputs)} outputs, not {n_out}")
        mine, size = self.outputs, self._pointer_bytes
        if n_in:
            ffi.memmove(self.inputs, inputs, n_in * size)
        if self._in_order:
            # what the runtime allocates is the caller's (the slots are overwritten before every run)
            ffi.memmove(mine, outputs, n_out * size)
            status = self._run(self.session.ptr, run_options, self.input_names, self.inputs, self.n_in,
                               self.output_names, self.n_out, mine)
            ffi.memmove(outputs, mine, n_out * size)
        else:
            for i, slot in self._slots:
                mine[slot] = outputs[i]
            status = self._run(self.session.ptr, run_options, self.input_names, self.inputs, self.n_in,
                               self.output_names, self.n_out, mine)
            for i, slot in self._slots:  # what the runtime allocated is the caller's now
                outputs[i] = mine[slot]
        if status != ffi.NULL:
            check_status(status, f"running the {kind} model")
        for i, source in self._repeats:
            outputs[i] = values.copy_out(values.view(outputs[source]), outputs[i])


class EngineSession:
    """What ``OrtTrainingSession`` holds on the engine."""

    def __init__(self, env: Any, options: Any, state: EngineState, train: ModelSource,
                 evaluation: Optional[ModelSource], optimizer_model: Optional[ModelSource],
                 seed: Optional[int] = None) -> None:
        self.state = state
        self.seed = seed
        self._borrowed: List[Any] = []
        self._sessions: List[NativeSession] = []
        try:
            self._build(env, options, state, train, evaluation, optimizer_model)
        except BaseException:
            self.release()
            raise
        state.live_sessions += 1
        self._counted = True

    _counted = False

    def _build(self, env: Any, options: Any, state: EngineState, train: ModelSource,
               evaluation: Optional[ModelSource], optimizer_model: Optional[ModelSource]) -> None:
        made = prepare(train, evaluation, optimizer_model, list(state.parameters),
                       [p.name for p in state.trainable()], self.seed, session_threads.intra_op_threads(options))
        self.train = GraphNames(made.user_inputs, made.user_outputs, made.parameter_inputs, made.gradients,
                                made.accumulated)
        self.memory_pattern = keeps_memory_pattern(made.training_intermediates)  # for the eval model's too
        if state.nominal:
            state.adopt_shapes(made.shapes_for_nominal_state())
        self.spec: Optional[OptimizerSpec] = made.optimizer
        if self.spec is not None:
            state.ensure_moments()
            state.learning_rate = state.initial_lr
        self.eval: Optional[GraphNames] = None
        self.eval_source: Optional[ModelSource] = evaluation  # read again to export, as 1.19.2 does
        if evaluation is not None:
            self.eval = GraphNames(made.eval_user_inputs, made.eval_user_outputs, made.eval_parameter_inputs)

        # Every parameter either graph reads, lent once.
        self.parameter_values: Dict[str, Any] = {}
        used = list(self.train.parameter_inputs) + (self.eval.parameter_inputs if self.eval else [])
        for name in used:
            if name not in self.parameter_values:
                self.parameter_values[name] = self._borrow(state.parameters[name].data)
        # Gradient buffers: the accumulator (what the optimizer reads) and, made on first need, a scratch.
        self.gradients = state.layout.allocate()
        self.gradient_views = state.layout.views(self.gradients)
        self.scratch: Optional[Dict[np.dtype, np.ndarray]] = None
        self.gradient_params = [p for p in self.train.parameter_inputs if p in self.train.gradients]
        self.accumulator_values = [self._borrow(self.gradient_views[p]) for p in self.gradient_params]
        self.scratch_values: List[Any] = []
        self.accumulate = False  # the first step overwrites, as after LazyResetGrad

        train_session = self._session(env, options, made.training, _named("training", train))
        computed = list(dict.fromkeys(name for name in self.train.user_outputs if name not in self.train.accumulated))
        self.train_plan = Plan(
            train_session, self.train.user_inputs + self.train.parameter_inputs,
            computed + [self.train.gradients[p] for p in self.gradient_params],
            len(self.train.user_inputs),
            [computed.index(name) if name in computed else None for name in self.train.user_outputs])
        self.first_gradient_slot = len(computed)
        self.accumulated_outputs = [(i, self.train.accumulated[name]) for i, name in enumerate(self.train.user_outputs)
                                    if name in self.train.accumulated]
        for i, name in enumerate(self.train.parameter_inputs):
            self.train_plan.inputs[len(self.train.user_inputs) + i] = self.parameter_values[name]
        self.eval_plan: Optional[Plan] = None
        if self.eval is not None:
            assert made.evaluation is not None and evaluation is not None
            eval_session = self._session(env, options, made.evaluation, _named("eval", evaluation))
            eval_outputs = list(dict.fromkeys(self.eval.user_outputs))  # each computed once (see Plan)
            self.eval_plan = Plan(eval_session, self.eval.user_inputs + self.eval.parameter_inputs,
                                  eval_outputs, len(self.eval.user_inputs),
                                  [eval_outputs.index(name) for name in self.eval.user_outputs])
            for i, name in enumerate(self.eval.parameter_inputs):
                self.eval_plan.inputs[len(self.eval.user_inputs) + i] = self.parameter_values[name]
        self.schedule: Optional[Tuple[int, int, float]] = None
        self._updates: List[optimizer.Update] = []  # made on the first optimizer step

    def _borrow(self, array: np.ndarray) -> Any:
        value = values.borrow(array)
        self._borrowed.append(value)
        return value

    def _session(self, env: Any, options: Any, model: Union[bytes, memoryview], what: str) -> NativeSession:
        session = NativeSession(env, options, model, what, self.memory_pattern)
        self._sessions.append(session)
        return session

    # --- steps -------------------------------------------------------------------------------------------
    def train_step(self, run_options: Any, inputs: Any, n_in: int, outputs: Any, n_out: int) -> None:
        if self.state.nominal:
            self.state.require_values("run a training step")
        plan = self.train_plan
        reset = not self.accumulate
        if reset != self._writes_accumulator:  # the gradient slots hold the other targets: point them here
            if reset:
                targets = self.accumulator_values
            else:
                if self.scratch is None:
                    self.scratch = self.state.layout.allocate()
                    views = self.state.layout.views(self.scratch)
                    self.scratch_values = [self._borrow(views[p]) for p in self.gradient_params]
                targets = self.scratch_values
            first = self.first_gradient_slot
            plan.outputs[first:first + len(targets)] = targets
            self._writes_accumulator = reset
        plan.run(run_options, inputs, n_in, outputs, n_out, "training")
        if not reset:
            assert self.scratch is not None
            for dtype, buffer in self.gradients.items():
                np.add(buffer, self.scratch[dtype], out=buffer)
        self.accumulate = True
        for i, parameter in self.accumulated_outputs:
            outputs[i] = values.copy_out(self.gradient_views[parameter], outputs[i])

    _writes_accumulator: Optional[bool] = None  # which targets the gradient slots hold: set on the first step

    def eval_step(self, run_options: Any, inputs: Any, n_in: int, outputs: Any, n_out: int) -> None:
        if self.eval_plan is None:
            raise ValueError("Evaluation session not initialized.")
        self.state.require_values("run an eval step")
        self.eval_plan.run(run_options, inputs, n_in, outputs, n_out, "eval")

    def lazy_reset_grad(self) -> None:
        self.accumulate = False

    def optimizer_step(self) -> None:
        spec = self.spec
        if spec is None:
            raise ValueError("No optimizer session initialized.")
        state = self.state
        if state.nominal:
            state.require_values("run an optimizer step")
        if spec.max_norm is not None:
            optimizer.clip_by_total_norm(self.gradients, spec.max_norm)
        if self._update_generation != state.generation:
            self._set_up_updates(spec)
        rate, step = state.learning_rate, state.step + 1
        for update in self._updates:
            update(rate, step)
        state.step = step

    _update_generation = -1

    def _set_up_updates(self, spec: OptimizerSpec) -> None:
        """The per-type updates over the state's buffers as they are now (made again if they are made anew)."""
        state = self.state
        state.ensure_moments()
        updates = []
        for dtype, params in state.flat.items():
            if dtype != np.float32:
                raise TypeError(f"the optimizer updates float32 parameters only; this state has {dtype} ones")
            updates.append(optimizer.Update(spec, params, self.gradients[dtype],
                                            state.moment_pairs[dtype] if spec.kind == "AdamW" else None))
        self._updates = updates
        self._update_generation = state.generation

    # --- learning rate --------------------------------------------------------------------------------------
    def set_learning_rate(self, rate: float) -> None:
        self._require_optimizer()
        self.state.learning_rate = float(np.float32(rate))

    def get_learning_rate(self) -> float:
        self._require_optimizer()
        return self.state.learning_rate

    def register_linear_scheduler(self, warmup: int, total: int, initial: float) -> None:
        self._require_optimizer()
        if warmup < 0:
            raise ValueError("warmup_step_count must be non-negative")
        if total < 0:
            raise ValueError("total_step_count must be non-negative")
        self.schedule = (int(warmup), int(total), float(np.float32(initial)))
        self.state.initial_lr = self.state.learning_rate = float(np.float32(initial))

    def scheduler_step(self) -> None:
        if self.schedule is None:
            raise ValueError("No learning rate scheduler registered.")
        warmup, total, initial = self.schedule
        self.state.learning_rate = optimizer.linear_rate(initial, warmup, total, self.state.step)

    def _require_optimizer(self) -> None:
        if self.spec is None:
            raise ValueError("No optimizer session initialized.")

    # --- parameters ------------------------------------------------------------------------------------------
    def parameter_names(self, trainable_only: bool) -> List[str]:
        """CopyParametersToBuffer's order: the training model's parameter inputs."""
        return [n for n in self.train.parameter_inputs
                if not trainable_only or self.state.parameters[n].requires_grad]

    def parameters_size(self, trainable_only: bool) -> int:
        return sum(int(p.data.size) for p in self.state.parameters.values()
                   if not trainable_only or p.requires_grad)

    def copy_parameters_to(self, buffer: np.ndarray, trainable_only: bool) -> None:
        self.state.require_values("copy the parameters out")
        self._check_buffer(buffer, trainable_only)
        offset = 0
        for name in self.parameter_names(trainable_only):
            data = self.state.parameters[name].data
            buffer[offset:offset + data.size] = data.reshape(-1)
            offset += data.size

    def copy_buffer_to_parameters(self, buffer: np.ndarray, trainable_only: bool) -> None:
        if self.state.nominal and trainable_only:
            raise ValueError("the checkpoint state is nominal: fill all of its parameters at once, with "
                             "trainable_only = false")
        self._check_buffer(buffer, trainable_only)
        offset = 0
        for name in self.parameter_names(trainable_only):
            data = self.state.parameters[name].data
            data.reshape(-1)[...] = buffer[offset:offset + data.size]
            offset += data.size
        self.state.nominal = False  # every value is set now

    def _check_buffer(self, buffer: np.ndarray, trainable_only: bool) -> None:
        expected = self.parameters_size(trainable_only)
        if buffer.size != expected:
            raise ValueError(f"Parameters buffer size incorrect. Expected:{expected}, Actual:{buffer.size}")
        for name in self.parameter_names(trainable_only):
            if self.state.parameters[name].data.dtype != buffer.dtype:
                raise TypeError("Data types must match.")
        if buffer.dtype != np.float32:
            raise TypeError(f"Unsupported type: {buffer.dtype}")

    # --- export ----------------------------------------------------------------------------------------------
    def export(self, path: str, outputs: Sequence[str]) -> None:
        if self.eval is None or self.eval_source is None:
            raise ValueError("Eval model was not provided. Cannot export a model for inferencing.")
        self.state.require_values("export a model for inference")
        from ort_cffi._backends.engine import models

        # The eval model as the artifacts hold it (not lowered: an inference model keeps standard operators),
        # read again from its file as the training build does (or from the bytes the session was given).
        model = models.inference_model(models.load_model(*self.eval_source, kind="eval model"), outputs,
                                       {p.name: p.data for p in self.state.parameters.values()})
        models.save_model(model, path)

    # --- lifetime ------------------------------------------------------------------------------------------
    def release(self) -> None:
        # The eval session first: with profiling on, both sessions may get one file name (the options'
        # prefix and the same second), and the file written last (at release) is the one that stays
        for session in reversed(self._sessions):
            session.release()
        self._sessions = []
        for value in self._borrowed:
            values.release(value)
        self._borrowed = []
        if self._counted:
            self.state.live_sessions -= 1
            self._counted = False
