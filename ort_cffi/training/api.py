"""``onnxruntime.training.api``'s names, as ``ort_cffi.api`` has them (the same classes)."""
from ort_cffi.api import (
    CheckpointState,
    InferenceSession,
    LinearLRScheduler,
    Module,
    NodeArg,
    Optimizer,
    OrtValue,
    Parameter,
    Parameters,
    Properties,
    SessionOptions,
)

__all__ = ["CheckpointState", "InferenceSession", "LinearLRScheduler", "Module", "NodeArg", "Optimizer", "OrtValue",
           "Parameter", "Parameters", "Properties", "SessionOptions"]
