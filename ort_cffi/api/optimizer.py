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
    """Changes an `Optimizer`'s learning rate linearly, giving ONNX Runtime's Python layer's rates step for step.

    ONNX Runtime: `onnxruntime.training.api.LinearLRScheduler`. That layer hands its two counts to the native
    scheduler in the other order: the native scheduler warms up over `total_step_count` steps and decays to 0
    at `warmup_step_count`. Code written for it is tuned to those rates, so ort_cffi gives the same: with n
    the optimizer steps taken so far, W = `total_step_count` and T = `warmup_step_count`, each `step()` sets
    the rate to `initial_lr * factor(n)`, factor being `n / max(1, W)` while n < W, then
    `max(0, (T - n) / max(1, T - W))`. Created, it applies factor(n) at once (0 before any step with a warmup).
    The Java-shaped facade (`OrtTrainingSession.registerLinearLRScheduler`) and the C API take the counts as
    named; docs/guides/porting-python.md says so.

    Args:
        optimizer: The `Optimizer` whose learning rate to change.
        warmup_step_count: The first count, as ONNX Runtime's layer takes it (an int >= 0).
        total_step_count: The second count, as ONNX Runtime's layer takes it (an int >= 0).
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
        # ONNX Runtime's layer passes (warmup, total) where its native scheduler takes (total, warmup)
        session._register_linear_schedule(total_step_count, warmup_step_count, initial_lr)
        session.schedulerStep()  # ONNX Runtime's native scheduler applies the factor when it is created

    def step(self) -> None:
        """Set the learning rate for the optimizer steps taken so far; call it after each `Optimizer.step()`.

        ONNX Runtime: `LinearLRScheduler.step()`.
        """
        self._optimizer._session().schedulerStep()
