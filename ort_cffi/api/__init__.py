"""ONNX Runtime's Python training API (``onnxruntime.training.api`` of ONNX Runtime 1.19), call for call, on
ort_cffi: porting code written for it means changing ``from onnxruntime.training.api import ...`` to
``from ort_cffi.api import ...`` (and ``from onnxruntime.training import artifacts`` to
``from ort_cffi import artifacts``; ``ort_cffi.training`` mirrors ``onnxruntime.training`` with ONNX Runtime's
defaults). ``InferenceSession`` is ONNX Runtime's ``onnxruntime.InferenceSession`` for the exported model.
docs/guides/porting-python.md maps every name and says what differs.

An application on the facade: ``CheckpointState`` holds an ``OrtCheckpointState``, ``Module`` and
``Optimizer`` share an ``OrtTrainingSession``, ``OrtValue`` is an ``OnnxTensor`` under ONNX Runtime's face.
Its modules: ``checkpoint_file`` (names read from a checkpoint file), ``checkpoint_state``,
``gradient_outputs`` (the training model with its gradients as outputs), ``module``, ``optimizer``,
``ortvalue``, ``inference_session``.
"""
from ort_cffi.api.checkpoint_state import CheckpointState, Parameter, Parameters, Properties
from ort_cffi.api.inference_session import InferenceSession, NodeArg, SessionOptions, get_available_providers
from ort_cffi.api.module import Module
from ort_cffi.api.optimizer import LinearLRScheduler, Optimizer
from ort_cffi.api.ortvalue import OrtValue

__all__ = [
    "CheckpointState",
    "InferenceSession",
    "LinearLRScheduler",
    "Module",
    "NodeArg",
    "Optimizer",
    "OrtValue",
    "Parameter",
    "Parameters",
    "Properties",
    "SessionOptions",
    "get_available_providers",
]
