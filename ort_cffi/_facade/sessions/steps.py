"""The step engine behind ``OrtTrainingSession.trainStep`` and ``evalStep``: what each model needs per step,
computed once (``ModelPlan``), the output selection of a request, validated once and reused
(``Selection``), and the step itself, the hot path.

What the C API leaves to its caller is done here: ``TrainStep``/``EvalStep`` take every input and every
output by position, so inputs are matched by name, every output is fetched, and the requested ones are
returned labelled right; inputs are checked against the model's signature before the native call (a
wrong one can crash the runtime); outputs that alias inputs are copied before the inputs go away.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ort_cffi._facade.sessions.inputs import ANY_INPUT, checked_input
from ort_cffi._facade.sessions.options import RunOptions
from ort_cffi._facade.sessions.requests import check_collection, check_names, ordered_names, split_overloads
from ort_cffi._facade.sessions.results import Result
from ort_cffi._facade.sessions.signature import InputSpec, check_symbolic
from ort_cffi._facade.tensors.outputs import adopt_outputs, check_outputs, detach_aliased
from ort_cffi._facade.tensors.tensor import OnnxTensor
from ort_cffi._native.errors import OrtException
from ort_cffi._native.handles import NativeHandle, pin_all, pinned_pointer, pointer, unpin_all
from ort_cffi._native.tables import ffi


class Selection:
    """Which outputs a step returns, in which order, and which slots are the caller's (pinned):
    validated once per distinct request of names and reused while the same names come again."""

    __slots__ = ("names", "positions", "wanted", "pinned_positions", "owned", "everything")

    def __init__(self, names: Tuple[str, ...], positions: Tuple[int, ...], pinned_positions: Tuple[int, ...], everything: bool) -> None:
        self.names = names  # the Result's names: requested outputs, then pinned ones
        self.positions = positions  # model positions of the requested outputs
        self.wanted = frozenset(positions)
        self.pinned_positions = pinned_positions  # model positions of the caller's tensors, in the pinned dict's order
        self.owned: Optional[int] = None if everything else len(positions)  # the Result's values: the requested ones, first
        self.everything = everything  # every output, in model order, all owned by the Result


class ModelPlan:
    """What one model (training or eval) needs per step, computed once at construction."""

    __slots__ = ("lock", "kind", "what", "input_names", "output_names", "input_pos", "output_pos", "in_values", "out_values",
                 "native_step", "everything", "cached", "specs", "pairs", "dims_by_position", "aliased")

    def __init__(
        self, kind: str, input_names: Tuple[str, ...], output_names: Tuple[str, ...], step: Any, specs: Dict[str, InputSpec],
        lock: Any,
    ) -> None:
        self.lock = lock  # the session's (its checkpoint state's): one step at a time
        self.kind = kind
        self.what = f"the {kind} model's"
        self.input_names = input_names
        self.output_names = output_names
        self.input_pos = {n: i for i, n in enumerate(input_names)}
        self.output_pos = {n: i for i, n in enumerate(output_names)}
        self.in_values = ffi.new("OrtValue*[]", max(len(input_names), 1))  # reused under the session lock
        self.out_values = ffi.new("OrtValue*[]", max(len(output_names), 1))
        self.native_step = step  # the TrainStep or EvalStep function pointer, looked up once
        self.everything = Selection(output_names, tuple(range(len(output_names))), (), everything=True)
        # Positions of outputs that are inputs (a graph input listed as an output): the runtime returns
        # them over the input's memory, so each step copies them (see detach_aliased). Usually none.
        self.aliased = tuple(i for i, n in enumerate(output_names) if n in self.input_pos)
        self.cached: Tuple[Any, Optional[Selection]] = (None, None)  # (request names, selection): one read, one write
        # Each input's signature, by position (checked before every step), and the pairs of
        # (position, axis) that share a symbolic dimension such as the batch size: (a, axis a, b, axis b).
        self.specs: List[InputSpec] = [specs.get(name, ANY_INPUT) for name in input_names]
        first: Dict[str, Tuple[int, int]] = {}
        pairs: List[Tuple[int, int, int, int]] = []
        for position, spec in enumerate(self.specs):
            for axis, dim_name in spec.symbolic():
                if dim_name in first:
                    pairs.append(first[dim_name] + (position, axis))
                else:
                    first[dim_name] = (position, axis)
        self.pairs = tuple(pairs)
        self.dims_by_position: List[Any] = [None] * len(input_names)  # the step's input shapes (under the lock)

    def dispatch(self, session: NativeHandle, inputs: Mapping[str, Any], args: Tuple[Any, ...], requested: Any, pinned: Any, run_options: Any) -> Result:
        """Java's five step forms folded into one: a plain ``step(inputs)`` goes straight through."""
        if not args and requested is None and pinned is None and run_options is None:
            return self.step(session, inputs, self.everything, (), None)
        requested, pinned, run_options = split_overloads(args, requested, pinned, run_options, "step")
        return self.step(session, inputs, *self.selection(requested, pinned), run_options)

    def selection(self, requested: Any, pinned: Any) -> Tuple[Selection, List[OnnxTensor]]:
        """The validated output selection for this request, and the caller's pinned tensors."""
        if requested is None:
            if pinned is None:
                return self.everything, []
        else:
            check_collection(requested)
        pinned_tensors: List[OnnxTensor] = []
        if pinned is not None:
            if type(pinned) is not dict and not isinstance(pinned, Mapping):
                raise OrtException.invalid_argument(
                    f"pinnedOutputs maps output names to OnnxTensors; got {type(pinned).__name__}"
                )
            pinned_tensors = list(pinned.values())
            for tensor in pinned_tensors:
                if type(tensor) is not OnnxTensor or not tensor.writable:
                    check_pinned(pinned)  # raises, naming the output
        # Keyed by names only: the tensors are the caller's, passed again with every call.
        request = (
            None if requested is None else tuple(requested),
            requested is not None and isinstance(requested, (set, frozenset)),  # unordered
            None if pinned is None else tuple(pinned),
        )
        cached_request, selection = self.cached
        if selection is None or cached_request != request:
            selection = self._new_selection(request)
            self.cached = (request, selection)
        return selection, pinned_tensors

    def _new_selection(self, request: Tuple[Any, bool, Any]) -> Selection:
        plan = self
        requested, unordered, pinned_names = request
        check_names(requested or ())
        pinned_names = pinned_names or ()
        check_names(pinned_names, "pinned output names")
        wanted: List[str] = [] if requested is None else ordered_names(requested, unordered, plan.output_names)
        unknown = [n for n in list(requested or ()) + list(pinned_names) if n not in plan.output_pos]
        if unknown:
            raise OrtException.invalid_argument(
                f"unknown output names {unknown}; the {plan.kind} model's outputs are {list(plan.output_names)}"
            )
        overlap = [n for n in wanted if n in pinned_names]
        if overlap:
            raise OrtException.invalid_argument(f"outputs {overlap} are both requested and pinned")
        if not wanted and not pinned_names:
            raise OrtException.invalid_argument("no outputs were requested or pinned")
        return Selection(
            tuple(wanted) + tuple(pinned_names),
            tuple(plan.output_pos[n] for n in wanted),
            tuple(plan.output_pos[n] for n in pinned_names),
            everything=False,
        )

    def _bad_inputs(self, inputs: Mapping[str, Any]) -> OrtException:
        plan = self
        given = list(inputs)  # what iterating the mapping yields: that is what a step would pass
        unknown = [n for n in given if n not in plan.input_pos]
        missing = [n for n in plan.input_names if n not in given]
        repeated = sorted({n for n in given if given.count(n) > 1})
        parts = []
        if unknown:
            parts.append(f"unknown input names {unknown}")
        if missing:
            parts.append(f"missing inputs {missing}")
        if repeated:
            parts.append(f"repeated input names {repeated}")
        return OrtException.invalid_argument(
            f"{' and '.join(parts) or 'inputs do not match'}; the {plan.kind} model's inputs are {list(plan.input_names)}"
        )

    def step(
        self,
        session: NativeHandle,
        inputs: Mapping[str, Any],
        selection: Selection,
        pinned_tensors: Sequence[OnnxTensor],
        run_options: Optional[RunOptions],
    ) -> Result:
        """One ``TrainStep``/``EvalStep``. This is the hot path, kept to few lines: everything derivable
        was computed at construction (``_ModelPlan``) or for the first request of its kind
        (``Selection``); locks are taken with acquire()/release(), half the cost of a ``with`` block."""
        plan = self
        if type(inputs) is not dict:
            inputs = self._inputs_as_dict(inputs)
        input_pos = plan.input_pos
        input_count = len(input_pos)
        if len(inputs) != input_count:  # a dict of this length over known names fills every slot once
            raise self._bad_inputs(inputs)
        in_values, out_values = plan.in_values, plan.out_values
        output_count = len(plan.output_names)
        in_use: List[Any] = []  # what the call reads, pinned for its duration
        made: List[OnnxTensor] = []  # tensors made here over the caller's arrays: closed after the step
        lock = self.lock
        lock.acquire()
        try:
            session_ptr = pointer(session)  # raises if the session was closed
            specs, dims_by_position = plan.specs, plan.dims_by_position
            for name, value in inputs.items():
                position = input_pos.get(name)
                if position is None or type(value) is not OnnxTensor or value.passed_spec is not specs[position]:
                    value = self._input_tensor(inputs, name, value, made)  # checked against the model, or raises
                    position = input_pos[name]
                in_values[position] = pinned_pointer(value)  # checked below: pin_all refuses a closed tensor
                dims_by_position[position] = value.passed_dims
                in_use.append(value)
            for a, axis_a, b, axis_b in plan.pairs:  # a shared symbolic dimension (the batch) has one size
                if dims_by_position[a][axis_a] != dims_by_position[b][axis_b]:
                    self._refuse_symbolic(dims_by_position)
            if pinned_tensors:
                in_use += pinned_tensors
            if run_options is not None:
                in_use.append(run_options)
            pin_all(in_use)
            try:
                for i in range(output_count):
                    out_values[i] = ffi.NULL
                if pinned_tensors:
                    for position, tensor in zip(selection.pinned_positions, pinned_tensors):
                        out_values[position] = pinned_pointer(tensor)
                status = plan.native_step(
                    session_ptr, ffi.NULL if run_options is None else pinned_pointer(run_options),
                    input_count, in_values, output_count, out_values,
                )
                if pinned_tensors:
                    for position in selection.pinned_positions:
                        out_values[position] = ffi.NULL  # the caller's tensor: never adopted
                produced = adopt_outputs(out_values, output_count)  # also on failure
            finally:
                unpin_all(in_use)
        finally:
            lock.release()
            for tensor in made:
                tensor.close()
        if status:
            check_outputs(status, produced, f"{plan.kind} step")
        if plan.aliased:  # the inputs' memory is still alive: the caller's arrays, and ours in `made`
            detach_aliased(produced, [p for p in plan.aliased if selection.everything or p in selection.wanted])
        if selection.everything:
            return Result(plan.output_names, produced, None, plan.output_pos)  # type: ignore[arg-type]  # none is None
        for position, value in enumerate(produced):
            if value is not None and position not in selection.wanted:
                value.close()
        values: List[Any] = [produced[p] for p in selection.positions]
        if pinned_tensors:
            values += pinned_tensors
        return Result(selection.names, values, selection.owned)

    def _inputs_as_dict(self, inputs: Any) -> Dict[str, Any]:
        """A Mapping other than a dict, as a dict: iterated once, refused if it names an input twice."""
        if not isinstance(inputs, Mapping):
            raise OrtException.invalid_argument("inputs must be a mapping from input name to OnnxTensor or numpy array")
        items = list(inputs.items())
        as_dict = dict(items)
        if len(as_dict) != len(items):
            raise self._bad_inputs(inputs)
        return as_dict

    def _input_tensor(self, inputs: Mapping[str, Any], name: str, value: Any, made: List[OnnxTensor]) -> OnnxTensor:
        plan = self
        """The tensor for an input not yet known to fit its signature: checked (element type, rank,
        fixed dimensions, no zero-sized dimension), or made over an array (appended to ``made``) and
        checked; raises naming the input otherwise."""
        position = plan.input_pos.get(name)
        if position is None:
            raise self._bad_inputs(inputs)
        return checked_input(plan.what, name, value, plan.specs[position], made)

    def _refuse_symbolic(self, dims_by_position: List[Any]) -> None:
        plan = self
        check_symbolic(plan.what, [(n, plan.specs[i], dims_by_position[i]) for i, n in enumerate(plan.input_names)])


def check_pinned(pinned: Mapping[str, Any]) -> None:
    """Refuse a pinned output the runtime cannot write into: not an ``OnnxTensor``, or over read-only memory."""
    for name, tensor in pinned.items():
        if not isinstance(tensor, OnnxTensor):
            raise OrtException.invalid_argument(f"pinned output {name!r} must be an OnnxTensor, not {type(tensor).__name__}")
        if not tensor.writable:
            raise OrtException.invalid_argument(f"pinned output {name!r} is over a read-only array")
