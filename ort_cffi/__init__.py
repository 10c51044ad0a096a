"""ort_cffi: ONNX Runtime's on-device training C API from Python (cffi, ABI mode), with the Java
``ai.onnxruntime`` training classes one call at a time.

Layers (docs/layout.md): ``_native`` (the loader, the declarations, the tables, the handles; its public
face is ``capi``) → ``_backends`` (the training build's C API, or ort_cffi's engine over the inference API:
``backend()`` says which runs, ``use_backend()`` chooses) → ``_facade`` (tensors, then sessions) → this module, which re-exports the facade → the
applications (``artifacts``, ``runtime``, ``trainer``, ``flower``) → ``cli``, the commands.
"""
from ort_cffi._backends import backend, use_backend
from ort_cffi._facade.sessions.checkpoint import OrtAllocator, OrtCheckpointState
from ort_cffi._facade.sessions.environment import OrtEnvironment
from ort_cffi._facade.sessions.metadata import OnnxModelMetadata
from ort_cffi._facade.sessions.options import OrtLoggingLevel, RunOptions, SessionOptions
from ort_cffi._facade.sessions.session import NodeInfo, OrtSession, Result
from ort_cffi._facade.sessions.training import OrtTrainingSession
from ort_cffi._facade.tensors.element_types import OnnxJavaType, OnnxTensorType, OnnxValueType
from ort_cffi._facade.tensors.fp16 import Fp16Conversions
from ort_cffi._facade.tensors.tensor import OnnxTensor, OnnxValue
from ort_cffi._facade.tensors.tensor_info import TensorInfo
from ort_cffi._facade.tensors.tensor_like import OnnxTensorLike
from ort_cffi._native.errors import (
    OrtClosedException,
    OrtErrorCode,
    OrtException,
    OrtFileNotFoundException,
    OrtInvalidArgumentException,
    RuntimeLoadError,
    RuntimeNotFoundError,
    TrainingApiUnavailableError,
    UnsupportedRuntimeError,
)

__version__ = "0.1.0"
__all__ = [
    "Fp16Conversions",
    "NodeInfo",
    "OnnxJavaType",
    "OnnxModelMetadata",
    "OnnxTensor",
    "OnnxTensorLike",
    "OnnxTensorType",
    "OnnxValue",
    "OnnxValueType",
    "OrtAllocator",
    "OrtCheckpointState",
    "OrtClosedException",
    "OrtEnvironment",
    "OrtErrorCode",
    "OrtException",
    "OrtFileNotFoundException",
    "OrtInvalidArgumentException",
    "OrtLoggingLevel",
    "OrtSession",
    "OrtTrainingSession",
    "Result",
    "RunOptions",
    "RuntimeLoadError",
    "RuntimeNotFoundError",
    "SessionOptions",
    "TensorInfo",
    "TrainingApiUnavailableError",
    "UnsupportedRuntimeError",
    "backend",
    "use_backend",
]
