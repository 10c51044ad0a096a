"""``CheckpointState`` with its ``parameters`` and ``properties`` mappings and ``Parameter`` objects, in the
face of ONNX Runtime's ``onnxruntime.training.api.checkpoint_state``, over ort_cffi's ``OrtCheckpointState``.

Where the two differ, and why (docs/guides/porting-python.md lists it all):

- The training C API reads a parameter only through a training session. A state a `Module` trains reads
  and writes its parameters through that Module's session, as ONNX Runtime's does through its C++ objects.
  Before any Module, parameter values are read from the checkpoint file the state was loaded from (the
  same values); writing them needs a Module.
- The C API lists neither parameters nor properties: their names (and which parameters are trainable) are
  read from the checkpoint file once (``checkpoint_file``), and the properties set here are recorded.
"""
from __future__ import annotations

import numbers
import os
import weakref
from typing import Any, Dict, Iterator, Optional, Protocol, Tuple, Union

import numpy as np

from ort_cffi import OrtCheckpointState, OrtException
from ort_cffi.api.checkpoint_file import CheckpointLayout, read_layout
from ort_cffi.api.ortvalue import OrtValue


class Trainer(Protocol):
    """What a state asks of the `Module` that trains it (the Module holds the state; the state holds only a
    weak reference to the Module, and knows it by this face, not by its class)."""

    def _has_session(self) -> bool: ...

    def _gradient(self, name: str) -> np.ndarray: ...

    def _release(self) -> None: ...

    def _reopen(self) -> None: ...

PropertyValue = Union[int, float, str]
_INT, _FLOAT, _STR = "int", "float", "str"


class Parameter:
    """One parameter of a checkpoint: its name, values, gradient and whether it is trained.

    Made by `CheckpointState.parameters`; not to be made directly. It reads the state each time (it holds
    no copy).

    ONNX Runtime: `onnxruntime.training.api.checkpoint_state.Parameter`.
    """

    def __init__(self, name: str, state: CheckpointState) -> None:
        self._name = name
        self._state = state

    @property
    def name(self) -> str:
        """The parameter's name.

        ONNX Runtime: `Parameter.name`.
        """
        return self._name

    @property
    def data(self) -> np.ndarray:
        """The parameter's values: a new numpy array the caller owns (a copy). Setting it copies new values in.

        Through the `Module` over the state; before any Module, read from the checkpoint file the state was
        loaded from (setting needs a Module).

        ONNX Runtime: `Parameter.data` (getter and setter).

        Raises:
            OrtException: The state is nominal ("Please load the parameter states first"), or its values
                cannot be read: no Module over it any more, or (before any Module) the file changed since.
            OrtInvalidArgumentException: (setter) The new values are not of the parameter's element type
                and shape.
        """
        return self._state._read_parameter(self._name)

    @data.setter
    def data(self, value: Any) -> None:
        self._state._write_parameter(self._name, value)

    @property
    def grad(self) -> Optional[np.ndarray]:
        """The gradient accumulated since the last reset, a new numpy array the caller owns (a copy); None for a
        frozen parameter, and while no `Module` trains the state. Zeros before the first training step.

        ONNX Runtime: `Parameter.grad`.

        Raises:
            OrtException: The training model's gradients cannot be read (its accumulator nodes are not ONNX
                Runtime's, or its initializers keep their data in other files).
        """
        return self._state._gradient(self._name)

    @property
    def requires_grad(self) -> bool:
        """True for a trainable parameter, False for a frozen one.

        ONNX Runtime: `Parameter.requires_grad`.
        """
        return self._state._layout_or_raise().parameters[self._name].requires_grad

    def __repr__(self) -> str:
        return f"Parameter(name={self.name}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters of a `CheckpointState`, a mapping of name to `Parameter`: `params[name]`,
    `params[name] = array`, `name in params`, `len(params)`; iterating gives `(name, Parameter)` pairs, by name.

    ONNX Runtime: `onnxruntime.training.api.checkpoint_state.Parameters`.
    """

    def __init__(self, state: CheckpointState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> Parameter:
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        if self._state._nominal:
            raise OrtException("Cannot get parameter from a nominal state. Please load the parameter states first")
        return Parameter(name, self._state)

    def __setitem__(self, name: str, value: Any) -> None:
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        if self._state._nominal:
            raise OrtException("Cannot copy parameter to a nominal state. Please load all the parameter states first")
        self._state._write_parameter(name, value)

    def __contains__(self, name: object) -> bool:
        return name in self._state._layout_or_raise().parameters

    def __iter__(self) -> Iterator[Tuple[str, Parameter]]:
        for name in sorted(self._state._layout_or_raise().parameters):
            yield name, self[name]

    def __len__(self) -> int:
        return len(self._state._layout_or_raise().parameters)

    def __repr__(self) -> str:
        return repr(sorted(self._state._layout_or_raise().parameters))


class Properties:
    """The properties of a `CheckpointState`, a mapping of name to int, float or str that a saved checkpoint
    keeps: `props[name]`, `props[name] = value`, `name in props`, `len(props)`; iterating gives
    `(name, value)` pairs, by name.

    ONNX Runtime: `onnxruntime.training.api.checkpoint_state.Properties`.
    """

    def __init__(self, state: CheckpointState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> PropertyValue:
        if name not in self:
            raise KeyError(f"Property {name} not found.")
        kind = self._state._property_kinds[name]
        facade = self._state._state
        if kind == _INT:
            return facade.getIntProperty(name)
        if kind == _FLOAT:
            return facade.getFloatProperty(name)
        return facade.getStringProperty(name)

    def __setitem__(self, name: str, value: PropertyValue) -> None:
        """Add or replace a property: an int (stored as int64; a bool as 0 or 1), a float (stored as float32)
        or a str.

        Raises:
            OrtInvalidArgumentException: The name is not a str, or the value is of another type or does not fit.
        """
        if isinstance(value, (bool, np.bool_)):
            value = int(value)  # ONNX Runtime's binding stores a bool as the int64 0 or 1
        if isinstance(value, numbers.Integral):
            kind = _INT
        elif isinstance(value, numbers.Real):
            kind = _FLOAT
        else:
            kind = _STR
        self._state._state.addProperty(name, value)
        self._state._property_kinds[name] = kind

    def __contains__(self, name: object) -> bool:
        return name in self._state._property_kinds

    def __iter__(self) -> Iterator[Tuple[str, PropertyValue]]:
        for name in sorted(self._state._property_kinds):
            yield name, self[name]

    def __len__(self) -> int:
        return len(self._state._property_kinds)

    def __repr__(self) -> str:
        return repr(sorted(self._state._property_kinds))


class CheckpointState:
    """A checkpoint in memory: the parameters, the optimizer state and the properties of a training.

    Made by `CheckpointState.load_checkpoint`; a `Module` trains it, `save_checkpoint` writes it. It holds an
    ort_cffi `OrtCheckpointState`, released when the state is garbage collected (or by `close()`).

    ONNX Runtime: `onnxruntime.training.api.CheckpointState`.

    Args:
        state: An ort_cffi `OrtCheckpointState` (ONNX Runtime's takes its C++ state). The new object owns it.
            Made this way, it cannot list its parameters, nor the properties its file held: ort_cffi reads those
            names from the file `load_checkpoint` opens.

    Raises:
        TypeError: `state` is not an `OrtCheckpointState` (ONNX Runtime raises TypeError too).
    """

    def __init__(self, state: OrtCheckpointState, _layout: Optional[CheckpointLayout] = None) -> None:
        if not isinstance(state, OrtCheckpointState):
            raise TypeError(f"Invalid argument for CheckpointState received {type(state)}")
        self._state = state
        self._layout = _layout
        self._nominal = _layout.nominal if _layout is not None else False
        self._property_kinds: Dict[str, str] = dict(_layout.property_kinds) if _layout is not None else {}
        self._module: Optional[weakref.ref[Trainer]] = None  # the Module training this state
        self._ever_bound = False
        self._parameters = Parameters(self)
        self._properties = Properties(self)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: Union[str, os.PathLike]) -> CheckpointState:
        """Load a checkpoint file: a complete one, or a nominal one (shapes only, filled by
        `Module.copy_buffer_to_parameters`).

        ONNX Runtime: `CheckpointState.load_checkpoint(checkpoint_uri)`.

        Args:
            checkpoint_uri: A `str` or `os.PathLike`.

        Returns:
            A new `CheckpointState` the caller owns.

        Raises:
            OrtFileNotFoundException: The file does not exist (it is also a `FileNotFoundError`).
            OrtException: The runtime cannot read it as a checkpoint (the message says what is wrong with it).
        """
        path = os.fspath(checkpoint_uri) if isinstance(checkpoint_uri, os.PathLike) else checkpoint_uri
        state = OrtCheckpointState.loadCheckpoint(path)
        return cls(state, read_layout(os.fsdecode(path)))

    @classmethod
    def save_checkpoint(cls, state: CheckpointState, checkpoint_uri: Union[str, os.PathLike],
                        include_optimizer_state: bool = False) -> None:
        """Write `state` to a checkpoint file, crash-safe (a temporary file renamed over the target).

        ONNX Runtime: `CheckpointState.save_checkpoint(state, checkpoint_uri, include_optimizer_state=False)`.

        Args:
            state: The `CheckpointState` to save.
            checkpoint_uri: A `str` or `os.PathLike` in a folder that exists.
            include_optimizer_state: Also save the optimizer's state (its moments and step).

        Raises:
            TypeError: `state` is not a `CheckpointState`.
            OrtFileNotFoundException: The folder does not exist.
            OrtException: The runtime fails to write the checkpoint.
        """
        if not isinstance(state, CheckpointState):
            raise TypeError(f"save_checkpoint takes a CheckpointState, not {type(state).__name__}")
        state._state.saveCheckpoint(checkpoint_uri, bool(include_optimizer_state))

    @property
    def parameters(self) -> Parameters:
        """The parameters, a mapping of name to `Parameter`.

        ONNX Runtime: `CheckpointState.parameters`.
        """
        return self._parameters

    @property
    def properties(self) -> Properties:
        """The properties, a mapping of name to int, float or str.

        ONNX Runtime: `CheckpointState.properties`.
        """
        return self._properties

    def as_checkpoint_state(self) -> OrtCheckpointState:
        """The ort_cffi `OrtCheckpointState` this state holds (not a copy: it closes with this state).

        ONNX Runtime: none (ort_cffi addition).
        """
        return self._state

    def close(self) -> None:
        """Release the checkpoint (idempotent); a `Module` training it keeps it alive until the Module goes.

        ONNX Runtime: none (ort_cffi addition; its states are released by garbage collection only).
        """
        self._state.close()

    # --- what Parameter, Parameters and Module use ----------------------------------------------

    def _layout_or_raise(self) -> CheckpointLayout:
        if self._layout is None:
            raise OrtException(
                "the parameters of this checkpoint state cannot be listed: its checkpoint file could not be read "
                "(ort_cffi lists them from the file the state was loaded from)"
            )
        return self._layout

    def _live_module(self) -> Optional[Trainer]:
        module = self._module() if self._module is not None else None
        return module if module is not None and module._has_session() else None

    def _bind(self, module: Trainer) -> None:
        self._module = weakref.ref(module)
        self._ever_bound = True

    def _read_parameter(self, name: str) -> np.ndarray:
        if self._nominal:
            raise OrtException("Cannot get parameter from a nominal state. Please load the parameter states first")
        if self._live_module() is not None:
            return self._state.getParameter(name)
        layout = self._layout_or_raise()
        values = None if self._ever_bound else layout.read_parameter(name)
        if values is None:
            why = ("the Module that trained it is gone" if self._ever_bound
                   else f"its checkpoint file {layout.path!r} changed since it was loaded, or keeps no data for it")
            raise OrtException(
                f"parameter {name!r} cannot be read: {why}. ort_cffi reads parameters through a Module "
                "over the state: create one"
            )
        return values

    def _write_parameter(self, name: str, value: Any) -> None:
        if self._live_module() is None:
            raise OrtException(
                f"parameter {name!r} cannot be written without a Module over this state: ort_cffi writes "
                "parameters through the Module's training session (ONNX Runtime's Python layer does too, "
                "through its data transfer): create the Module first"
            )
        array = value.numpy() if isinstance(value, OrtValue) else np.asarray(value)
        self._state.updateParameter(name, array)

    def _gradient(self, name: str) -> Optional[np.ndarray]:
        if not self._layout_or_raise().parameters[name].requires_grad:
            return None
        module = self._live_module()
        return None if module is None else module._gradient(name)
