"""``Optimizer`` and ``LinearLRScheduler`` in the face of ONNX Runtime's ``onnxruntime.training.api``, over the
training session of a `Module` (which an Optimizer creates again with the optimizer model: see ``module``)."""
from __future__ import annotations

import os
from typing import Union

from ort_cffi import OrtException, OrtTrainingSession
from ort_cffi.api.module import Module


class Optimizer:
    """Updates a `Module`'s parameters from its gradients, with the optimizer model of the artifacts (AdamW or SGD).

    ONNX Runtime: `onnxruntime.training.api.Optimizer`.

    Args:
        optimizer_uri: The optimizer model's path (`optimizer_model.onnx`).
        module: The `Module` to train. ort_cffi creates the Module's training session again, with the optimizer
            model: do it before the first training step, or after `lazy_reset_grad()` (gradients accumulated
            since would be lost: that is refused). A newer Optimizer over the same Module replaces this one.

    Raises:
        TypeError: `module` is not a `Module`.
        OrtFileNotFoundException: The file does not exist.
        OrtException: Training steps ran since the last `lazy_reset_grad()`, or the runtime refuses the
            optimizer model (the Module then keeps working as before).
    """

    def __init__(self, optimizer_uri: Union[str, os.PathLike], module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"module must be a Module, not {type(module).__name__}")
        self._module = module
        module._attach_optimizer(os.fspath(optimizer_uri))
        self._generation = module._generation

    def _session(self) -> OrtTrainingSession:
        session = self._module._live_session()
        if self._module._generation != self._generation:
            raise OrtException(
                "this Optimizer was replaced: a newer Optimizer was created over its Module (use that one)"
            )
        return session

    def step(self) -> None:
        """Apply the accumulated gradients to the parameters (one optimizer step).

        ONNX Runtime: `Optimizer.step()`.

        Raises:
            OrtException: The runtime fails the step (a nominal state not filled yet: "Please load the model
                parameters first.").
        """
        self._session().optimizerStep()

    def set_learning_rate(self, learning_rate: float) -> None:
        """Set the learning rate (stored as float32).

        ONNX Runtime: `Optimizer.set_learning_rate(learning_rate)`.
        """
        self._session().setLearningRate(float(learning_rate))

    def get_learning_rate(self) -> float:
        """The current learning rate (a float holding the float32).

        ONNX Runtime: `Optimizer.get_learning_rate()`.
        """
        return self._session().getLearningRate()


class LinearLRScheduler:
    """Changes an `Optimizer`'s learning rate linearly: up from 0 to `initial_lr` over `warmup_step_count`
    optimizer steps, then down to 0 at `total_step_count`.

    Each `step()` sets the rate to `initial_lr * factor(n)`, n the optimizer steps taken so far; factor is
    `n / warmup` during the warmup, then `max(0, (total - n) / (total - warmup))`. Created, it applies
    factor(n) at once (0 before any step with a warmup), as ONNX Runtime's does.

    ONNX Runtime: `onnxruntime.training.api.LinearLRScheduler`. Its Python layer passes the two step counts to
    its native scheduler the wrong way round (warmup as total and total as warmup); ort_cffi uses them as
    named, as the C API and the Java binding do.

    Args:
        optimizer: The `Optimizer` whose learning rate to change.
        warmup_step_count: Optimizer steps of the warmup (an int >= 0).
        total_step_count: Optimizer steps of the whole training (an int >= 0).
        initial_lr: The learning rate at the end of the warmup.

    Raises:
        TypeError: `optimizer` is not an `Optimizer`.
        OrtInvalidArgumentException: A count is not an int >= 0, or `initial_lr` is not a number.
    """

    def __init__(self, optimizer: Optimizer, warmup_step_count: int, total_step_count: int, initial_lr: float) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be an Optimizer, not {type(optimizer).__name__}")
        self._optimizer = optimizer
        session = optimizer._session()
        session.registerLinearLRScheduler(warmup_step_count, total_step_count, initial_lr)
        session.schedulerStep()  # ONNX Runtime's native scheduler applies the factor when it is created

    def step(self) -> None:
        """Set the learning rate for the optimizer steps taken so far; call it after each `Optimizer.step()`.

        ONNX Runtime: `LinearLRScheduler.step()`.
        """
        self._optimizer._session().schedulerStep()
