"""Facade: ``OrtEnvironment`` (Java's ``ai.onnxruntime.OrtEnvironment``): the process's one environment,
the factory of training and inference sessions."""
from __future__ import annotations

import threading
from typing import Any, Optional, Union

from ort_cffi._facade.sessions.checkpoint import OrtAllocator, OrtCheckpointState
from ort_cffi._facade.sessions.options import OrtLoggingLevel, SessionOptions, enum_member
from ort_cffi._facade.sessions.session import OrtSession
from ort_cffi._facade.sessions.training import OrtTrainingSession
from ort_cffi._backends import training_table
from ort_cffi._native.errors import c_string
from ort_cffi._native.files import PathLike, PathOrBytes
from ort_cffi._native.handles import process
from ort_cffi._native.tables import get_runtime


class OrtEnvironment:
    """The process's one environment, the factory of training and inference sessions.

    Get it with `getEnvironment()`. The constructor, if called first, makes the same one environment
    (and raises `RuntimeError` once it exists).
    Its native `OrtEnv` is created by the first call and released at interpreter exit, after every
    session and value that depends on it; nobody owns it and its `close()` does nothing.

    Java: `ai.onnxruntime.OrtEnvironment`.

    Attributes:
        defaultAllocator: The runtime's default CPU allocator (an `OrtAllocator`), to pass to the
            checkpoint's property getters (Java: the package-private field `defaultAllocator`).
    """

    _instance: Optional[OrtEnvironment] = None
    _instance_lock = threading.RLock()  # re-entered: getEnvironment() holds it while it constructs

    def __init__(self, loggingLevel: Any = None, name: Optional[str] = None) -> None:
        with OrtEnvironment._instance_lock:
            if OrtEnvironment._instance is not None:
                raise RuntimeError("OrtEnvironment is a singleton: use OrtEnvironment.getEnvironment()")
            if loggingLevel is not None:
                loggingLevel = enum_member(OrtLoggingLevel, loggingLevel, "the environment's logging level")
            if name is not None:
                c_string(name, "the environment name")  # a str that UTF-8 encodes, without NUL (it would cut the C string short)
            process.env(loggingLevel, name)  # fails here, clearly, if the runtime cannot be loaded
            self.defaultAllocator = OrtAllocator(process.allocator())
            OrtEnvironment._instance = self  # constructed directly or not, it is the one getEnvironment() returns

    @classmethod
    def getEnvironment(cls, loggingLevel: Any = None, name: Optional[str] = None) -> OrtEnvironment:
        """The process's environment: the first call creates it (`CreateEnv`), later calls return it.

        As in Java, the first call decides the logging level and the name; a later call with others
        returns the same environment without a word (Java logs a warning). The first call also loads
        the runtime.

        Java: `static OrtEnvironment getEnvironment()`, `getEnvironment(String name)`,
        `getEnvironment(OrtLoggingLevel logLevel)`, `getEnvironment(OrtLoggingLevel loggingLevel, String name)`.

        Args:
            loggingLevel: An `OrtLoggingLevel` or its value (default WARNING); a `str` alone here is
                the name, as Java's `getEnvironment(String name)`.
            name: The runtime's logging id (default "ort_cffi"; Java's is "ort-java").

        Returns:
            The one `OrtEnvironment`, shared by the whole process: nobody owns it, and it lives until
                interpreter exit.

        Raises:
            OrtInvalidArgumentException: On the first call, `loggingLevel` is no `OrtLoggingLevel`, or
                `name` is not a `str`, holds a NUL character or is not valid Unicode (a lone surrogate).
            RuntimeLoadError: The runtime cannot be loaded: `RuntimeNotFoundError` (none found; the
                message lists where it looked), `TrainingApiUnavailableError`, `UnsupportedRuntimeError`.
        """
        if isinstance(loggingLevel, str) and name is None:  # Java's getEnvironment(String name)
            loggingLevel, name = None, loggingLevel
        if cls._instance is None:
            with cls._instance_lock:
                if cls._instance is None:
                    cls(loggingLevel, name)  # registers itself
        assert cls._instance is not None
        return cls._instance

    def isTrainingEnabled(self) -> bool:
        """True: every runtime ort_cffi loads trains, on its training API where it has one (a training build),
        else on ort_cffi's own engine over the inference API (`ort_cffi.backend()` says which).

        Raises `TrainingApiUnavailableError` only where the training-api backend was asked for
        (`$ORT_CFFI_BACKEND`) and the runtime has no training API.

        Java: `boolean isTrainingEnabled()`.
        """
        return training_table() is not None

    def getVersion(self) -> str:
        """The loaded runtime's version, `"1.19.2"` (`GetVersionString`).

        Java: `String getVersion()`.
        """
        return str(get_runtime().version)

    def createTrainingSession(
        self,
        checkpoint: Union[PathLike, OrtCheckpointState],
        trainPath: PathOrBytes,
        evalPath: Optional[PathOrBytes] = None,
        optimizerPath: Optional[PathOrBytes] = None,
        options: Optional[SessionOptions] = None,
        *,
        externalDataAnywhere: bool = False,
    ) -> OrtTrainingSession:
        """Create a training session (`CreateTrainingSession`, or `CreateTrainingSessionFromBuffer` for bytes).

        Loads the checkpoint (when given a path), creates the session, and reads the models' input and
        output names and input signatures once.

        Java: `OrtTrainingSession createTrainingSession(String checkpointPath, String trainPath,
        String evalPath, String optimizerPath)` and the same with `OrtSession.SessionOptions options`.

        Args:
            checkpoint: A path (`str` or `os.PathLike`), which the session loads and owns; or an
                `OrtCheckpointState`, which stays the caller's (the session keeps it alive) and must not
                be bound to another open session.
            trainPath: The training model: a path, or the model's bytes.
            evalPath: The eval model, or None (then `evalStep` and `exportModelForInference` are
                unavailable).
            optimizerPath: The optimizer model, or None (then the optimizer and scheduler methods are
                unavailable).
            options: `SessionOptions`, or None for the defaults; they may be closed once the session
                exists.
            externalDataAnywhere: Keyword only, default False: a model's external data must be a regular
                file inside the model's folder (symlinks resolved), and a model given as bytes may have
                none. True lets a trusted model's external data lie anywhere (a regular file still, read
                within its size). See the guarantees guide.

        Returns:
            A new `OrtTrainingSession` the caller owns and must close (or use in a `with` block).

        Raises:
            OrtFileNotFoundException: A model or the checkpoint file does not exist (the message names it).
            OrtInvalidArgumentException: An argument of the wrong type, an empty path or empty bytes, a
                folder, models given partly as paths and partly as bytes, options that are not
                `SessionOptions`, or a checkpoint state already bound to an open session; a model whose
                external data is not a regular file inside its folder, or lies past the file's end (the
                message names the tensor, its location and the rule; checked before anything is read).
            OrtClosedException: The checkpoint state or the options are closed.
            OrtException: The runtime refuses a model or the checkpoint (e.g. `ORT_INVALID_PROTOBUF` for
                a file that is no ONNX model; a checkpoint file that does not verify is named damaged or
                truncated, or not a checkpoint, as `OrtCheckpointState.loadCheckpoint` says). The
                checkpoint this call loaded is released then (Java leaks it).
        """
        return OrtTrainingSession(checkpoint, trainPath, evalPath, optimizerPath, options,
                                  externalDataAnywhere=externalDataAnywhere)

    def createSession(self, model: PathOrBytes, options: Optional[SessionOptions] = None, *,
                      externalDataAnywhere: bool = False) -> OrtSession:
        """Create an inference session on the same runtime (`CreateSession`, `CreateSessionFromArray`).

        E.g. for the model `OrtTrainingSession.exportModelForInference` wrote: no second ONNX Runtime
        in the process.

        Java: `OrtSession createSession(String modelPath)`, `createSession(byte[] modelArray)`, and both
        with `OrtSession.SessionOptions options`.

        Args:
            model: A path (`str` or `os.PathLike`), or the model's bytes (`bytes`, `bytearray`,
                `memoryview`).
            options: `SessionOptions`, or None for the defaults; they may be closed once the session
                exists.
            externalDataAnywhere: Keyword only, default False, as in `createTrainingSession`.

        Returns:
            A new `OrtSession` the caller owns and must close (or use in a `with` block).

        Raises:
            OrtFileNotFoundException: The model file does not exist (the message names it).
            OrtInvalidArgumentException: `model` is not a path or bytes, is empty, or is a folder;
                `options` is not `SessionOptions`; the model's external data is not a regular file inside
                its folder, or lies past the file's end (as in `createTrainingSession`).
            OrtClosedException: The options are closed.
            OrtException: The runtime refuses the model (e.g. `ORT_INVALID_PROTOBUF` for bytes that are
                no ONNX model).
        """
        return OrtSession(self, model, options, externalDataAnywhere=externalDataAnywhere)

    def setTelemetry(self, sendTelemetry: bool) -> None:
        """Accepted and ignored (the Linux training builds of the runtime send no telemetry).

        Java: `void setTelemetry(boolean sendTelemetry)`.
        """

    def close(self) -> None:
        """Does nothing, as in Java since 1.11: the environment lives as long as the process.

        Java: `void close()`.
        """

    def __enter__(self) -> OrtEnvironment:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass

    def __repr__(self) -> str:
        return f"<OrtEnvironment ONNX Runtime {self.getVersion()}>"


__all__ = ["OrtEnvironment", "OrtLoggingLevel"]
