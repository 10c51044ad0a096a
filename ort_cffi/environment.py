"""Facade: ``OrtEnvironment`` (Java's ``ai.onnxruntime.OrtEnvironment``): the process's one environment,
the factory of training and inference sessions."""
from __future__ import annotations

import threading
from typing import Any, Optional, Union

from ._errors import OrtException
from ._handles import process
from .capi import get_runtime
from .options import OrtLoggingLevel, SessionOptions
from ._files import PathLike, PathOrBytes
from .session import OrtSession
from .training import OrtAllocator, OrtCheckpointState, OrtTrainingSession


class OrtEnvironment:
    """The process singleton (``getEnvironment()``). Its native ``OrtEnv`` is created on first use and
    released at interpreter exit, after every session and value that depends on it."""

    _instance: Optional["OrtEnvironment"] = None
    _instance_lock = threading.Lock()

    def __init__(self, loggingLevel: Any = None, name: Optional[str] = None) -> None:
        if OrtEnvironment._instance is not None:
            raise RuntimeError("OrtEnvironment is a singleton: use OrtEnvironment.getEnvironment()")
        if loggingLevel is not None:
            loggingLevel = OrtLoggingLevel(loggingLevel)
        if name is not None and not isinstance(name, str):
            raise OrtException.invalid_argument(f"the environment name must be a str, not {type(name).__name__}")
        process.env(loggingLevel, name)  # fails here, clearly, if the runtime cannot be loaded
        self.defaultAllocator = OrtAllocator(process.allocator())

    @classmethod
    def getEnvironment(cls, loggingLevel: Any = None, name: Optional[str] = None) -> "OrtEnvironment":
        """The environment. As in Java, the first call creates it, with ``loggingLevel`` (an
        ``OrtLoggingLevel``; default WARNING) and ``name``; later calls return it as it is.

        Java's four forms: ``getEnvironment()``, ``getEnvironment(name)``, ``getEnvironment(level)``,
        ``getEnvironment(level, name)`` (a str alone is the name)."""
        if isinstance(loggingLevel, str) and name is None:  # Java's getEnvironment(String name)
            loggingLevel, name = None, loggingLevel
        if cls._instance is None:
            with cls._instance_lock:
                if cls._instance is None:
                    cls._instance = cls(loggingLevel, name)
        return cls._instance

    def isTrainingEnabled(self) -> bool:
        """True: ort_cffi only loads runtimes that have the training API."""
        return get_runtime().training_api is not None

    def getVersion(self) -> str:
        """The loaded runtime's version, ``"1.19.2"`` (Java: ``getVersion()``, ``OrtApiBase::GetVersionString``)."""
        return str(get_runtime().version)

    def createTrainingSession(
        self,
        checkpoint: Union[PathLike, OrtCheckpointState],
        trainPath: PathOrBytes,
        evalPath: Optional[PathOrBytes] = None,
        optimizerPath: Optional[PathOrBytes] = None,
        options: Optional[SessionOptions] = None,
    ) -> OrtTrainingSession:
        """A training session: checkpoint (path or ``OrtCheckpointState``), training model, and optional
        eval and optimizer models (paths, or all as bytes), with optional ``SessionOptions``."""
        return OrtTrainingSession(checkpoint, trainPath, evalPath, optimizerPath, options)

    def createSession(self, model: PathOrBytes, options: Optional[SessionOptions] = None) -> OrtSession:
        """An inference session on the same runtime (a path or the model's bytes)."""
        return OrtSession(self, model, options)

    def setTelemetry(self, sendTelemetry: bool) -> None:
        """Accepted for Java compatibility; this runtime build sends no telemetry."""

    def close(self) -> None:
        """A no-op, as in Java: the environment lives as long as the process."""

    def __enter__(self) -> "OrtEnvironment":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<OrtEnvironment ONNX Runtime {self.getVersion()}>"


__all__ = ["OrtEnvironment", "OrtLoggingLevel"]
