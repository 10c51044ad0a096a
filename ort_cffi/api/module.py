"""``Module``: training and evaluation steps in the face of ONNX Runtime's ``onnxruntime.training.api.Module``,
over ort_cffi's ``OrtTrainingSession``.

ONNX Runtime's Python layer builds a Module and an Optimizer as two C++ objects over one state. The C API
has one object, the training session, which takes the optimizer model when it is created. So a Module
creates its session without an optimizer, and an `Optimizer` made over the Module creates it again with the
optimizer model, over the same state: the parameters live in the state and carry over. Only gradients
accumulated since the last `lazy_reset_grad()` would not, so that is refused (docs/guides/porting-python.md).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ort_cffi import OnnxTensor, OrtEnvironment, OrtException, OrtTrainingSession, Result, SessionOptions
from ort_cffi._facade import denormals
from ort_cffi.api.checkpoint_state import CheckpointState
from ort_cffi.api.gradient_outputs import GradientsUnreadable, with_gradient_outputs
from ort_cffi.api.inference_session import SessionOptions as OnnxRuntimeSessionOptions
from ort_cffi.api.ortvalue import OrtValue, check_device

Outputs = Union[np.ndarray, Tuple[np.ndarray, ...], OrtValue, Tuple[OrtValue, ...]]


def _parse_device(device: str) -> Tuple[str, int]:
    """ONNX Runtime's device strings: ``"cpu"``, ``"cuda"``, ``"cuda:1"``."""
    if not isinstance(device, str):
        raise TypeError(f"device is a str such as 'cpu' or 'cuda:0', not {type(device).__name__}")
    kind, _, number = device.partition(":")
    try:
        device_id = int(number) if number else 0
    except ValueError:
        raise OrtException.invalid_argument(f"device {device!r}: the part after ':' is a device number") from None
    return check_device(kind, device_id), device_id


class Module:
    """A model to train and evaluate: calling it runs a training step (`train()` mode, the default) or an
    evaluation step (`eval()` mode).

    ONNX Runtime: `onnxruntime.training.api.Module`.

    Args:
        train_model_uri: The training model's path (`training_model.onnx` of the artifacts).
        state: The `CheckpointState` to train. A new Module over a state takes it over from an earlier one,
            whose calls then raise.
        eval_model_uri: The eval model's path, or None (no `eval()` steps, no export).
        device: `"cpu"`, or `"cuda"` / `"cuda:N"` for the CUDA execution provider (the CUDA build of the
            runtime). Inputs and outputs stay numpy arrays and CPU `OrtValue`s.
        session_options: An ort_cffi `SessionOptions`, ONNX Runtime's form of it (`ort_cffi.api.SessionOptions`),
            or None.
            It must stay open while the Module lives (an `Optimizer` creates the session again with it). For
            `"cuda"` the CUDA provider is added to it.

    Attributes:
        training: True in training mode, False in evaluation mode.

    Raises:
        TypeError: `state` is not a `CheckpointState`, or `session_options` not an ort_cffi `SessionOptions`.
        OrtFileNotFoundException: A model file does not exist.
        OrtException: The device is not supported, or the runtime refuses the models or the state (a nominal
            state is accepted: fill it with `copy_buffer_to_parameters(buffer, trainable_only=False)`).
    """

    training: bool

    def __init__(
        self,
        train_model_uri: Union[str, os.PathLike],
        state: CheckpointState,
        eval_model_uri: Optional[Union[str, os.PathLike]] = None,
        device: str = "cpu",
        session_options: Optional[Union[SessionOptions, OnnxRuntimeSessionOptions]] = None,
    ) -> None:
        self.training = True
        self._session: Optional[OrtTrainingSession] = None
        self._held: Optional[Result] = None  # the last training step's outputs, with the gradients
        self._saved_gradients: Dict[str, np.ndarray] = {}  # gradients kept when the session is created again
        if not isinstance(state, CheckpointState):
            raise TypeError(f"state must be a CheckpointState, not {type(state).__name__}")
        # ONNX Runtime's SessionOptions (ort_cffi.api.SessionOptions): the Java-style options it makes, owned here
        converted = isinstance(session_options, OnnxRuntimeSessionOptions)
        if isinstance(session_options, OnnxRuntimeSessionOptions):
            session_options = session_options.to_session_options()
        if session_options is not None and not isinstance(session_options, SessionOptions):
            raise TypeError(
                f"session_options must be an ort_cffi SessionOptions, not {type(session_options).__name__}"
            )
        self._device_type, device_id = _parse_device(device)
        self._state = state
        self._train_path = os.fspath(train_model_uri)
        self._eval_path = os.fspath(eval_model_uri) if eval_model_uri is not None else None
        made_here = session_options is None
        self._own_options = made_here or converted
        self._session_options = SessionOptions() if made_here else session_options
        if self._own_options:  # ort_cffi.api flushes denormals (docs/guides/performance.md); a Java one is the caller's
            denormals.apply(self._session_options, denormals.request())
        if self._device_type == "cuda" and self._session_options is not None:
            self._session_options.addCUDA(device_id)
        self._gradient_outputs: Dict[str, str] = {}
        self._gradients_unreadable = ""  # why ``_gradient_outputs`` is empty, for Parameter.grad to say
        self._gradients_pending = False  # a training step ran since the last lazy_reset_grad()
        self._optimizer_path: Optional[str] = None
        self._generation = 0  # bumped each time the session is created again (an Optimizer's check)
        previous = state._live_module()
        if previous is not None:
            previous._release()  # the runtime binds a state to one session at a time
        try:
            self._session = self._create_session(None)
        except BaseException:
            if previous is not None:
                previous._reopen()  # a Module that failed to start takes nothing over
            raise
        state._bind(self)

    # --- the session -------------------------------------------------------------------------------

    def _create_session(self, optimizer_path: Optional[str]) -> OrtTrainingSession:
        env = OrtEnvironment.getEnvironment()
        model = b""  # a missing file is named by the facade below
        if os.path.isfile(self._train_path):
            with open(self._train_path, "rb") as file:
                model = file.read()
        layout = self._state._layout
        elem_types = {p.name: p.onnx_type for p in layout.parameters.values()} if layout is not None else {}
        try:
            edited = with_gradient_outputs(model, elem_types)
        except GradientsUnreadable as exc:
            self._gradient_outputs, self._gradients_unreadable = {}, str(exc)
            return env.createTrainingSession(self._state._state, self._train_path, self._eval_path,
                                             optimizer_path, self._session_options)
        folder: Optional[str] = None
        if edited.beside_original:
            # Its initializers keep their data in other files, which the runtime reads relative to the model's
            # folder: the copy goes beside it, under a name of its own, removed once the runtime has read it.
            try:
                handle, path = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(self._train_path)),
                                                prefix=".ort_cffi-gradients-", suffix=".onnx")
                os.close(handle)
            except OSError as exc:
                self._gradient_outputs = {}
                self._gradients_unreadable = ("its initializers keep their data in other files, and its copy with "
                                              f"the gradients as outputs cannot be written beside it ({exc})")
                return env.createTrainingSession(self._state._state, self._train_path, self._eval_path,
                                                 optimizer_path, self._session_options)
        else:
            folder = tempfile.mkdtemp(prefix="ort_cffi-api-")
            path = os.path.join(folder, os.path.basename(self._train_path) or "training_model.onnx")
        try:
            with open(path, "wb") as file:
                file.write(edited.model)
            session = env.createTrainingSession(self._state._state, path, self._eval_path, optimizer_path,
                                                self._session_options)
        except OrtException as exc:
            # The edited copy is refused: the user's own file decides, and its error names that file.
            self._gradient_outputs = {}
            self._gradients_unreadable = f"ONNX Runtime refused it with its gradients as outputs ({exc})"
            return env.createTrainingSession(self._state._state, self._train_path, self._eval_path,
                                             optimizer_path, self._session_options)
        finally:  # the runtime read the model at creation
            if folder is None:
                with contextlib.suppress(OSError):
                    os.remove(path)
            else:
                shutil.rmtree(folder, ignore_errors=True)
        self._gradient_outputs, self._gradients_unreadable = edited.outputs, ""
        return session

    def _has_session(self) -> bool:
        return self._session is not None and not self._session.closed

    def _live_session(self) -> OrtTrainingSession:
        if self._session is None or self._session.closed:
            raise OrtException(
                "this Module no longer trains its CheckpointState: a newer Module over the same state took it over"
            )
        return self._session

    def _drop_held(self, keep_gradients: bool) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        try:
            if keep_gradients:
                self._saved_gradients = {p: np.asarray(held[o].getValue()) for p, o in self._gradient_outputs.items()}
        finally:
            held.close()

    def _release(self) -> None:
        """Close the session (the state stays the caller's): a newer Module takes the state over."""
        self._drop_held(keep_gradients=True)
        if self._session is not None:
            self._session.close()

    def _reopen(self) -> None:
        """Create the session again after `_release`, when the newer Module failed to start."""
        self._session = self._create_session(self._optimizer_path)

    def _attach_optimizer(self, optimizer_path: str) -> OrtTrainingSession:
        """Create the session again with the optimizer model (what an `Optimizer` over this Module needs)."""
        old = self._live_session()
        if self._gradients_pending:
            raise OrtException(
                "create the Optimizer before the first training step, or call lazy_reset_grad() first: ort_cffi "
                "gives the optimizer model to the training session when it creates it, so the Module's session is "
                "created again, and the gradients accumulated since the last reset would be lost"
            )
        self._drop_held(keep_gradients=True)
        gradient_outputs = self._gradient_outputs
        old.close()
        try:
            self._session = self._create_session(optimizer_path)
        except BaseException:
            self._session = self._create_session(self._optimizer_path)  # the Module keeps working as it was
            self._gradient_outputs = gradient_outputs
            raise
        self._optimizer_path = optimizer_path
        self._generation += 1
        return self._session

    def __del__(self) -> None:
        try:
            self._drop_held(keep_gradients=False)
            if self._own_options and self._session_options is not None:
                self._session_options.close()
        except Exception:  # noqa: BLE001 - nothing can be raised from a finalizer
            pass

    # --- steps ---------------------------------------------------------------------------------------

    def __call__(self, *user_inputs: Any) -> Outputs:
        """One training step (`train()` mode) or evaluation step (`eval()` mode) on the inputs, given in the
        order of `input_names()`.

        A training step adds to the gradients until `lazy_reset_grad()`; an `Optimizer`'s `step()` applies them.

        ONNX Runtime: `Module.__call__(*user_inputs)`.

        Args:
            *user_inputs: One value per input of the model: numpy arrays, or `OrtValue` objects.

        Returns:
            Numpy arrays when any input is a numpy array, else `OrtValue` objects, all new and the caller's:
                the one output (the loss: a 0-d array for a scalar), or a tuple when the model has several.

        Raises:
            OrtInvalidArgumentException: Not one value per input; an input of another element type, rank or
                size than the model declares (the message names the input); None as an input.
            OrtException: The runtime fails the step (a nominal state: "Please load the model parameters
                first."), or `eval()` mode without an eval model.
        """
        session = self._live_session()
        if not self.training and self._eval_path is None:
            raise OrtException.invalid_argument("this Module has no eval model: eval() steps need eval_model_uri")
        names = self.input_names()
        if len(user_inputs) != len(names):
            raise OrtException.invalid_argument(
                f"the {'training' if self.training else 'eval'} model takes {len(names)} inputs {names}, "
                f"got {len(user_inputs)}"
            )
        as_numpy = any(not isinstance(value, OrtValue) for value in user_inputs)
        feeds: Dict[str, Any] = {}
        for name, value in zip(names, user_inputs):
            if value is None:
                raise OrtException.invalid_argument(f"input {name!r} is None: every input of the model needs a value")
            feeds[name] = value.as_onnx_tensor() if isinstance(value, OrtValue) else (
                value if isinstance(value, (np.ndarray, np.generic)) else np.asarray(value))
        if self.training:
            result = session.trainStep(feeds)
            self._gradients_pending = True
            self._drop_held(keep_gradients=False)
            self._held = result
            self._saved_gradients = {}
            output_names = self.output_names()
        else:
            result = session.evalStep(feeds)
            output_names = list(session.getEvalOutputNames())
        try:
            arrays = [np.asarray(result[name].getValue()) for name in output_names]
        finally:
            if not self.training:
                result.close()
        outputs: List[Any] = arrays if as_numpy else [self._value_of(a) for a in arrays]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    @staticmethod
    def _value_of(array: np.ndarray) -> OrtValue:
        return OrtValue._owning(OnnxTensor.createTensor(OrtEnvironment.getEnvironment(), array), array)

    def train(self, mode: bool = True) -> Module:
        """Set training mode (`mode=True`) or evaluation mode.

        ONNX Runtime: `Module.train(mode=True)`.

        Returns:
            This Module.
        """
        self.training = mode
        return self

    def eval(self) -> Module:
        """Set evaluation mode.

        ONNX Runtime: `Module.eval()`.

        Returns:
            This Module.
        """
        return self.train(False)

    def lazy_reset_grad(self) -> None:
        """Reset the gradients, lazily: the next training step overwrites them instead of adding to them.

        ONNX Runtime: `Module.lazy_reset_grad()`.
        """
        self._live_session().lazyResetGrad()
        self._gradients_pending = False

    # --- parameters ----------------------------------------------------------------------------------

    def get_contiguous_parameters(self, trainable_only: bool = False) -> OrtValue:
        """The parameters, in the training model's input order, as one flat float32 value.

        ONNX Runtime: `Module.get_contiguous_parameters(trainable_only=False)` (on `"cuda"` its value is in
        GPU memory; ort_cffi's is a CPU copy).

        Args:
            trainable_only: Only the trainable parameters, or all (default).

        Returns:
            A new `OrtValue` the caller owns: a copy, which later training does not change.

        Raises:
            OrtException: A nominal state not filled yet ("Please load the model parameters first.").
        """
        buffer = self._live_session().copyParametersToBuffer(bool(trainable_only))
        return self._value_of(buffer)

    def get_parameters_size(self, trainable_only: bool = True) -> int:
        """The number of parameter elements (also on a nominal state).

        ONNX Runtime: `Module.get_parameters_size(trainable_only=True)`.
        """
        return self._live_session().getParametersSize(bool(trainable_only))

    def copy_buffer_to_parameters(self, buffer: Union[OrtValue, np.ndarray], trainable_only: bool = True) -> None:
        """Overwrite the parameters from one flat float32 buffer, in the layout `get_contiguous_parameters` gives.

        With `trainable_only=False` it also fills a nominal state, which then trains and exports; create the
        `Optimizer` first (ONNX Runtime 1.19's C API crashes filling it without an optimizer model: refused).

        ONNX Runtime: `Module.copy_buffer_to_parameters(buffer, trainable_only=True)`.

        Args:
            buffer: An `OrtValue` (or a numpy array) of `get_parameters_size(trainable_only)` float32 elements.
            trainable_only: Only the trainable parameters (default), or all.

        Raises:
            OrtInvalidArgumentException: The buffer is not float32, not 1-D, or of another size.
            OrtException: A nominal state and no `Optimizer` yet, or `trainable_only=True` on a nominal state.
        """
        array = buffer.numpy() if isinstance(buffer, OrtValue) else buffer
        session = self._live_session()
        if self._state._nominal and not trainable_only and self._optimizer_path is None:
            # ONNX Runtime 1.19's training session builds the optimizer's state once a nominal state is filled,
            # and crashes (SIGSEGV) when it has no optimizer model: docs/guides/porting-python.md
            raise OrtException(
                "fill a nominal checkpoint state after creating the Optimizer over this Module: ONNX Runtime 1.19 "
                "crashes filling it through a training session without an optimizer model"
            )
        session.copyBufferToParameters(array, bool(trainable_only))
        if not trainable_only:
            self._state._nominal = False

    def _gradient(self, name: str) -> np.ndarray:
        """A trainable parameter's accumulated gradient (`Parameter.grad`)."""
        session = self._live_session()
        if not self._gradient_outputs:
            raise OrtException(
                f"the gradient of {name!r} cannot be read: ort_cffi reads gradients as extra outputs of the "
                f"training model's accumulator nodes, and {self._gradients_unreadable}"
            )
        if name not in self._gradient_outputs:
            raise OrtException(
                f"the gradient of {name!r} cannot be read: no accumulator node of this training model gives it"
            )
        if self._held is not None:
            return np.asarray(self._held[self._gradient_outputs[name]].getValue())
        if name in self._saved_gradients:
            return self._saved_gradients[name].copy()
        info = session.getCheckpointState().getParameterTypeAndShape(name)
        return np.zeros(info.getShape(), dtype=info.dtype)  # the runtime's buffers start at zero

    # --- export and names ----------------------------------------------------------------------------

    def export_model_for_inferencing(self, inference_model_uri: Union[str, os.PathLike],
                                     graph_output_names: List[str]) -> None:
        """Write an inference model: the eval graph up to `graph_output_names`, with the current parameters.

        ONNX Runtime: `Module.export_model_for_inferencing(inference_model_uri, graph_output_names)`.

        Args:
            inference_model_uri: The file to write (its folder must exist); an existing file is replaced.
            graph_output_names: Names of values of the eval graph (the model's own outputs).

        Raises:
            OrtInvalidArgumentException: No eval model, no names, or a name the eval graph lacks (the message
                lists its outputs).
            OrtException: The runtime fails the export (a nominal state not filled yet).
        """
        self._live_session().exportModelForInference(os.fspath(inference_model_uri), list(graph_output_names))

    def input_names(self) -> List[str]:
        """The inputs a step takes, in order: the training model's in training mode, the eval model's in eval
        mode (empty without an eval model).

        ONNX Runtime: `Module.input_names()`.
        """
        session = self._live_session()
        return list(session.getTrainInputNames() if self.training else session.getEvalInputNames())

    def output_names(self) -> List[str]:
        """The outputs a step returns, in order (the loss first).

        ONNX Runtime: `Module.output_names()`.
        """
        session = self._live_session()
        if not self.training:
            return list(session.getEvalOutputNames())
        hidden = set(self._gradient_outputs.values())
        return [name for name in session.getTrainOutputNames() if name not in hidden]
