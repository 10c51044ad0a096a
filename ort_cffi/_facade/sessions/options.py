"""Facade: ``SessionOptions`` and ``RunOptions`` (Java's ``OrtSession.SessionOptions`` / ``RunOptions``)."""
from __future__ import annotations

import enum
from typing import Any, Optional, Type, TypeVar

from ort_cffi._backends import session_threads
from ort_cffi._native.errors import OrtException, c_string
from ort_cffi._native.files import fspath, native_path
from ort_cffi._native.handles import NativeHandle
from ort_cffi._native.tables import check_status, ffi, get_runtime


class OrtLoggingLevel(enum.IntEnum):
    """The runtime's log severity levels, with the C API's values (0 VERBOSE to 4 FATAL).

    An `IntEnum`: a plain int is accepted wherever a level is.

    Java: `ai.onnxruntime.OrtLoggingLevel`.
    """

    ORT_LOGGING_LEVEL_VERBOSE = 0
    ORT_LOGGING_LEVEL_INFO = 1
    ORT_LOGGING_LEVEL_WARNING = 2
    ORT_LOGGING_LEVEL_ERROR = 3
    ORT_LOGGING_LEVEL_FATAL = 4

    def getValue(self) -> int:
        """The C API's value of this level; also `int(level)`.

        Java: `int getValue()`.
        """
        return int(self)

    @classmethod
    def mapFromInt(cls, logLevel: int) -> OrtLoggingLevel:
        """The level with the C API's value `logLevel`.

        Java: `static OrtLoggingLevel mapFromInt(int logLevel)` (which, for a value that is no level,
        logs a warning and answers VERBOSE).

        Raises:
            OrtInvalidArgumentException: `logLevel` is no level (not 0 to 4).
        """
        try:
            return cls(logLevel)
        except ValueError:
            raise OrtException.invalid_argument(
                f"{logLevel!r} is not a logging level (0 VERBOSE ... 4 FATAL)"
            ) from None


class OptLevel(enum.IntEnum):
    """Graph optimization level, with the C API's `GraphOptimizationLevel` values (0, 1, 2, 99).

    Java: `OrtSession.SessionOptions.OptLevel`.
    """

    NO_OPT = 0
    BASIC_OPT = 1
    EXTENDED_OPT = 2
    ALL_OPT = 99

    def getID(self) -> int:
        """The C API's `GraphOptimizationLevel` value; also `int(level)`.

        Java: `int getID()`.
        """
        return int(self)


class ExecutionMode(enum.IntEnum):
    """Sequential or parallel execution of independent operators (the C API's `ExecutionMode`: 0, 1).

    Java: `OrtSession.SessionOptions.ExecutionMode`.
    """

    SEQUENTIAL = 0
    PARALLEL = 1

    def getID(self) -> int:
        """The C API's `ExecutionMode` value; also `int(mode)`.

        Java: `int getID()`.
        """
        return int(self)


_OptLevel = OptLevel
_ExecutionMode = ExecutionMode


def _check_int(value: Any, what: str, low: int, high: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OrtException.invalid_argument(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise OrtException.invalid_argument(f"{what} must be in [{low}, {high}], got {value}")
    return value


_Member = TypeVar("_Member", bound=enum.Enum)


def enum_member(kind: Type[_Member], value: Any, what: str) -> _Member:
    """The member of the enum ``kind`` that ``value`` is or names by its value."""
    if isinstance(value, bool):
        raise OrtException.invalid_argument(f"{what} must be an {kind.__name__}, not bool")
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(f"{m.name} ({m.value})" for m in kind)
        raise OrtException.invalid_argument(f"{what} must be an {kind.__name__} or its value, one of {choices}; got {value!r}") from None


class SessionOptions(NativeHandle):
    """Options for creating a training or inference session (`CreateSessionOptions`).

    The caller owns them and closes them (or uses a `with` block); they may be closed as soon as the
    session exists. Also reachable as `OrtSession.SessionOptions`. Only the CPU provider and, in the
    CUDA build, CUDA exist in the training runtimes: the other providers' methods are not reproduced.

    Java: `OrtSession.SessionOptions()`.

    Raises:
        RuntimeLoadError: The runtime could not be loaded (the first call that needs it).
    """

    _kind = "SessionOptions"
    OptLevel = OptLevel  # Java nests these in SessionOptions
    ExecutionMode = ExecutionMode

    def __init__(self) -> None:
        rt = get_runtime()
        out = ffi.new("OrtSessionOptions**")
        check_status(rt.api.CreateSessionOptions(out), "CreateSessionOptions")
        release = rt.api.ReleaseSessionOptions

        def release_and_forget(ptr: Any) -> None:
            session_threads.forget(ptr)
            release(ptr)

        self._own(out[0], release_and_forget)
        self._rt = rt
        self._entries: dict[str, str] = {}
        session_threads.note(out[0], 0)

    def setIntraOpNumThreads(self, numThreads: int) -> None:
        """Set the number of threads inside one operator (`SetIntraOpNumThreads`).

        Java: `void setIntraOpNumThreads(int numThreads)`.

        Args:
            numThreads: An int from 0 (the runtime's default) to 2**31 - 1.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `numThreads` is not an int in that range.
        """
        n = _check_int(numThreads, "intra-op thread count", 0)
        self._call(self._rt.api.SetIntraOpNumThreads, n, context="SetIntraOpNumThreads")
        session_threads.note(self._ptr, n)  # the engine picks some forms by it (ort_cffi/_backends/session_threads.py)

    def setInterOpNumThreads(self, numThreads: int) -> None:
        """Set the number of threads running independent operators in parallel (`SetInterOpNumThreads`).

        Java: `void setInterOpNumThreads(int numThreads)`.

        Args:
            numThreads: An int from 0 (the runtime's default) to 2**31 - 1; it matters only with
                `ExecutionMode.PARALLEL`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `numThreads` is not an int in that range.
        """
        n = _check_int(numThreads, "inter-op thread count", 0)
        self._call(self._rt.api.SetInterOpNumThreads, n, context="SetInterOpNumThreads")

    def setOptimizationLevel(self, level: _OptLevel) -> None:
        """Set how far the runtime optimizes the graph (`SetSessionGraphOptimizationLevel`).

        Java: `void setOptimizationLevel(OrtSession.SessionOptions.OptLevel level)`.

        Args:
            level: An `OptLevel` or its value (0, 1, 2, 99).

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `level` is no `OptLevel` (also a `ValueError`).
        """
        level = enum_member(OptLevel, level, "the optimization level")
        self._call(self._rt.api.SetSessionGraphOptimizationLevel, int(level), context="SetSessionGraphOptimizationLevel")

    def setExecutionMode(self, mode: _ExecutionMode) -> None:
        """Run independent operators one after the other or in parallel (`SetSessionExecutionMode`).

        Java: `void setExecutionMode(OrtSession.SessionOptions.ExecutionMode mode)`.

        Args:
            mode: An `ExecutionMode` or its value (0, 1).

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `mode` is no `ExecutionMode` (also a `ValueError`).
        """
        mode = enum_member(ExecutionMode, mode, "the execution mode")
        self._call(self._rt.api.SetSessionExecutionMode, int(mode), context="SetSessionExecutionMode")

    def addConfigEntry(self, configKey: str, configValue: str) -> None:
        """Add a session configuration entry (`AddSessionConfigEntry`).

        E.g. `addConfigEntry("session.intra_op.allow_spinning", "0")`. The runtime does not check that
        it knows the key; `getConfigEntries()` lists what was added.

        Java: `void addConfigEntry(String configKey, String configValue)`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: The key or the value is not a `str` without NUL, or the runtime refuses
                them: a key empty or longer than 128 characters, a value longer than 2048.
        """
        key, value = c_string(configKey, "a config key"), c_string(configValue, "a config value")
        self._call(self._rt.api.AddSessionConfigEntry, key, value, context=f"AddSessionConfigEntry({configKey!r})")
        self._entries[configKey] = configValue

    def getConfigEntries(self) -> dict[str, str]:
        """The configuration entries added through this object (the C API cannot list them).

        Java: `Map<String, String> getConfigEntries()` (a read-only view there).

        Returns:
            A new dict, key → value, that the caller owns: a copy, which later entries do not change.

        Raises:
            OrtClosedException: The options are closed.
        """
        self._handle()
        return dict(self._entries)

    def setSessionLogLevel(self, level: OrtLoggingLevel) -> None:
        """Set the session's log severity level (`SetSessionLogSeverityLevel`); also `setLogLevel`.

        Java: `void setSessionLogLevel(OrtLoggingLevel logLevel)`.

        Args:
            level: An `OrtLoggingLevel` or its value (0 to 4).

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `level` is no `OrtLoggingLevel` (also a `ValueError`).
        """
        level = enum_member(OrtLoggingLevel, level, "the log level")
        self._call(self._rt.api.SetSessionLogSeverityLevel, int(level), context="SetSessionLogSeverityLevel")

    setLogLevel = setSessionLogLevel

    def setSessionLogVerbosityLevel(self, level: int) -> None:
        """Set the session's log verbosity level (`SetSessionLogVerbosityLevel`), for VERBOSE logging.

        Java: `void setSessionLogVerbosityLevel(int logLevel)`.

        Args:
            level: An int from 0 to 2**31 - 1.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `level` is not an int in that range.
        """
        n = _check_int(level, "log verbosity level", 0)
        self._call(self._rt.api.SetSessionLogVerbosityLevel, n, context="SetSessionLogVerbosityLevel")

    def setLoggerId(self, loggerId: str) -> None:
        """Set the id the session's log lines carry (`SetSessionLogId`).

        Java: `void setLoggerId(String loggerId)`.

        Args:
            loggerId: A `str`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `loggerId` is not a `str` without NUL.
        """
        self._call(self._rt.api.SetSessionLogId, c_string(loggerId, "the logger id"), context="SetSessionLogId")

    def setMemoryPatternOptimization(self, enabled: bool) -> None:
        """Turn the runtime's memory pattern optimization on or off (`EnableMemPattern`/`DisableMemPattern`).

        Java: `void setMemoryPatternOptimization(boolean memoryPatternOptimization)`.

        Args:
            enabled: Read for its truth value.

        Raises:
            OrtClosedException: The options are closed.
        """
        api = self._rt.api
        call = api.EnableMemPattern if enabled else api.DisableMemPattern
        self._call(call, context="EnableMemPattern" if enabled else "DisableMemPattern")

    def setCPUArenaAllocator(self, enabled: bool) -> None:
        """Turn the CPU provider's memory arena on or off (`EnableCpuMemArena`/`DisableCpuMemArena`).

        Java: `void setCPUArenaAllocator(boolean useArena)`.

        Args:
            enabled: Read for its truth value.

        Raises:
            OrtClosedException: The options are closed.
        """
        api = self._rt.api
        call = api.EnableCpuMemArena if enabled else api.DisableCpuMemArena
        self._call(call, context="EnableCpuMemArena" if enabled else "DisableCpuMemArena")

    def setOptimizedModelFilePath(self, outputPath: Any) -> None:
        """Have a session created with these options write its optimized graph to `outputPath`.

        `SetOptimizedModelFilePath`; the runtime writes the file when the session is created (not
        crash-safe, unlike ort_cffi's own saves).

        Java: `void setOptimizedModelFilePath(String outputPath)`.

        Args:
            outputPath: A `str` or `os.PathLike`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `outputPath` is empty or not a path.
        """
        path = fspath(outputPath, "optimized model path")
        self._call(self._rt.api.SetOptimizedModelFilePath, native_path(path), context=f"SetOptimizedModelFilePath({path!r})")

    def enableProfiling(self, filePath: Any) -> None:
        """Have sessions created with these options profile every run (`EnableProfiling`).

        The runtime writes a Chrome-trace JSON file named `<filePath>_<date and time>.json` when the
        session closes.

        Java: `void enableProfiling(String filePath)`.

        Args:
            filePath: The file name's prefix, a `str` or `os.PathLike`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `filePath` is empty or not a path.
        """
        prefix = fspath(filePath, "profile file prefix")
        self._call(self._rt.api.EnableProfiling, native_path(prefix), context=f"EnableProfiling({prefix!r})")

    def disableProfiling(self) -> None:
        """Undo `enableProfiling` (`DisableProfiling`).

        Java: `void disableProfiling()`.

        Raises:
            OrtClosedException: The options are closed.
        """
        self._call(self._rt.api.DisableProfiling, context="DisableProfiling")

    def setSymbolicDimensionValue(self, dimensionName: str, dimensionValue: int) -> None:
        """Fix a symbolic dimension of the model to one size (`AddFreeDimensionOverrideByName`).

        Inputs of another size along that dimension are then refused by the runtime.

        Java: `void setSymbolicDimensionValue(String dimensionName, long dimensionValue)`.

        Args:
            dimensionName: A `dim_param` of the model, e.g. the batch's name.
            dimensionValue: An int from 0 to 2**63 - 1.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `dimensionName` is not a non-empty `str` without NUL, or
                `dimensionValue` is not an int in that range.
        """
        name = c_string(dimensionName, "the dimension name")
        if not name:
            raise OrtException.invalid_argument("the dimension name must not be empty")
        value = _check_int(dimensionValue, f"the value of dimension {dimensionName!r}", 0, 2**63 - 1)
        self._call(self._rt.api.AddFreeDimensionOverrideByName, name, value, context=f"AddFreeDimensionOverrideByName({dimensionName!r})")

    def setDeterministicCompute(self, value: bool) -> None:
        """Ask for deterministic kernels where the execution provider has them (`SetDeterministicCompute`).

        That is GPU kernels: the CPU provider is deterministic already.

        Java: `void setDeterministicCompute(boolean value)`.

        Args:
            value: A `bool`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `value` is not a `bool`.
        """
        if not isinstance(value, bool):
            raise OrtException.invalid_argument(f"setDeterministicCompute takes a bool, not {type(value).__name__}")
        self._call(self._rt.api.SetDeterministicCompute, value, context="SetDeterministicCompute")

    def addCUDA(self, deviceNum: int = 0) -> None:
        """Run on the CUDA GPU `deviceNum` (`SessionOptionsAppendExecutionProvider_CUDA`).

        Needs the CUDA build of the runtime (`onnxruntime-training`) and a CUDA GPU. The device number is
        the only CUDA option.

        Java: `void addCUDA()`, `void addCUDA(int deviceNum)`.

        Args:
            deviceNum: The GPU's number, an int from 0 (the default) to 2**31 - 1.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `deviceNum` is not an int in that range.
            OrtException: The runtime cannot add CUDA, e.g. on the CPU-only build: the message says so.
        """
        device = _check_int(deviceNum, "CUDA device id", 0)
        options = ffi.new("OrtCUDAProviderOptions*")
        options.device_id = device
        options.cudnn_conv_algo_search = 0  # EXHAUSTIVE, the runtime's default
        options.gpu_mem_limit = 2**64 - 1
        options.arena_extend_strategy = 0
        options.do_copy_in_default_stream = 1
        self._call(
            self._rt.api.SessionOptionsAppendExecutionProvider_CUDA, options,
            context=f"adding the CUDA execution provider (device {device}); it needs the CUDA build "
            "onnxruntime-training==1.19.2 and a CUDA GPU",
        )


class RunOptions(NativeHandle):
    """Options for one run (`CreateRunOptions`).

    The training steps accept them and the runtime ignores them there; `OrtSession.run` honours them.
    The caller owns them and closes them (or uses a `with` block); options in use by a call in another
    thread are released after it. Also reachable as `OrtSession.RunOptions`.

    Java: `OrtSession.RunOptions()`.

    Raises:
        RuntimeLoadError: The runtime could not be loaded (the first call that needs it).
    """

    _kind = "RunOptions"

    def __init__(self) -> None:
        rt = get_runtime()
        out = ffi.new("OrtRunOptions**")
        check_status(rt.api.CreateRunOptions(out), "CreateRunOptions")
        self._own(out[0], rt.api.ReleaseRunOptions)
        self._rt = rt

    def setLogLevel(self, level: OrtLoggingLevel) -> None:
        """Set the run's log severity level (`RunOptionsSetRunLogSeverityLevel`).

        Java: `void setLogLevel(OrtLoggingLevel level)`.

        Args:
            level: An `OrtLoggingLevel` or its value (0 to 4).

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `level` is no `OrtLoggingLevel` (also a `ValueError`).
        """
        level = enum_member(OrtLoggingLevel, level, "the log level")
        self._call(self._rt.api.RunOptionsSetRunLogSeverityLevel, int(level), context="RunOptionsSetRunLogSeverityLevel")

    def getLogLevel(self) -> Optional[OrtLoggingLevel]:
        """The run's log severity level (`RunOptionsGetRunLogSeverityLevel`), or None until one is set.

        Until `setLogLevel`, the runtime holds -1 there: the run logs at the session's level. Java
        answers VERBOSE for it (with a warning), which is not what the run does; ort_cffi answers None.

        Java: `OrtLoggingLevel getLogLevel()`.

        Returns:
            The `OrtLoggingLevel` set (an enum member: nobody owns it), or None if none was set.

        Raises:
            OrtClosedException: The options are closed.
        """
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogSeverityLevel, out, context="RunOptionsGetRunLogSeverityLevel")
        return None if out[0] == -1 else OrtLoggingLevel(out[0])

    def setLogVerbosityLevel(self, level: int) -> None:
        """Set the run's log verbosity level, for VERBOSE logging (`RunOptionsSetRunLogVerbosityLevel`).

        Java: `void setLogVerbosityLevel(int level)`.

        Args:
            level: An int from 0 to 2**31 - 1.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `level` is not an int in that range.
        """
        n = _check_int(level, "log verbosity level", 0)
        self._call(self._rt.api.RunOptionsSetRunLogVerbosityLevel, n, context="RunOptionsSetRunLogVerbosityLevel")

    def getLogVerbosityLevel(self) -> int:
        """The run's log verbosity level (`RunOptionsGetRunLogVerbosityLevel`); 0 until set.

        Java: `int getLogVerbosityLevel()`.

        Raises:
            OrtClosedException: The options are closed.
        """
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogVerbosityLevel, out, context="RunOptionsGetRunLogVerbosityLevel")
        return int(out[0])

    def setRunTag(self, runTag: str) -> None:
        """Set the tag the run's log lines carry (`RunOptionsSetRunTag`).

        Java: `void setRunTag(String runTag)`.

        Args:
            runTag: A `str`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: `runTag` is not a `str` without NUL.
        """
        self._call(self._rt.api.RunOptionsSetRunTag, c_string(runTag, "the run tag"), context="RunOptionsSetRunTag")

    def getRunTag(self) -> str:
        """The run's tag (`RunOptionsGetRunTag`); `""` until set.

        Java: `String getRunTag()`.

        Raises:
            OrtClosedException: The options are closed.
        """
        out = ffi.new("const char**")
        ptr = self._use()  # the tag belongs to the options: copied before they can be released
        try:
            check_status(self._rt.api.RunOptionsGetRunTag(ptr, out), "RunOptionsGetRunTag")
            return ffi.string(out[0]).decode() if out[0] else ""
        finally:
            self._unuse()

    def setTerminate(self, terminate: bool) -> None:
        """Ask runs using these options to stop as soon as they can, or allow them again.

        `RunOptionsSetTerminate` / `RunOptionsUnsetTerminate`. An inference run with these options set
        to terminate raises `OrtException` ("Exiting due to terminate flag"); training steps ignore run
        options.

        Java: `void setTerminate(boolean terminate)`.

        Args:
            terminate: Read for its truth value.

        Raises:
            OrtClosedException: The options are closed.
        """
        api = self._rt.api
        call = api.RunOptionsSetTerminate if terminate else api.RunOptionsUnsetTerminate
        self._call(call, context="RunOptionsSetTerminate")

    def addRunConfigEntry(self, configKey: str, configValue: str) -> None:
        """Add a run configuration entry (`AddRunConfigEntry`).

        Java: `void addRunConfigEntry(String key, String value)`.

        Args:
            configKey: A `str`.
            configValue: A `str`.

        Raises:
            OrtClosedException: The options are closed.
            OrtInvalidArgumentException: The key or the value is not a `str` without NUL, or the runtime
                refuses the entry: a key empty or longer than 128 characters, a value longer than 2048.
        """
        key, value = c_string(configKey, "a run config key"), c_string(configValue, "a run config value")
        self._call(self._rt.api.AddRunConfigEntry, key, value, context=f"AddRunConfigEntry({configKey!r})")
