"""Facade: ``SessionOptions`` and ``RunOptions`` (Java's ``OrtSession.SessionOptions`` / ``RunOptions``)."""
from __future__ import annotations

import enum
from typing import Any

from ._errors import OrtException
from ._files import fspath, native_path
from ._handles import NativeHandle
from .capi import check_status, ffi, get_runtime


class OrtLoggingLevel(enum.IntEnum):
    """The runtime's log severity levels (Java's ``OrtLoggingLevel``), with the C API's values."""

    ORT_LOGGING_LEVEL_VERBOSE = 0
    ORT_LOGGING_LEVEL_INFO = 1
    ORT_LOGGING_LEVEL_WARNING = 2
    ORT_LOGGING_LEVEL_ERROR = 3
    ORT_LOGGING_LEVEL_FATAL = 4

    def getValue(self) -> int:
        """The C API's value of this level (Java's ``getValue()``)."""
        return int(self)

    @classmethod
    def mapFromInt(cls, logLevel: int) -> "OrtLoggingLevel":
        """The level with the C API's value ``logLevel`` (Java's ``mapFromInt``). Raises
        ``OrtException`` (also a ``ValueError``) for a value that is no level, where Java logs a
        warning and answers VERBOSE."""
        try:
            return cls(logLevel)
        except ValueError:
            raise OrtException.invalid_argument(
                f"{logLevel!r} is not a logging level (0 VERBOSE ... 4 FATAL)"
            ) from None


class OptLevel(enum.IntEnum):
    """Graph optimization level (Java's ``SessionOptions.OptLevel``)."""

    NO_OPT = 0
    BASIC_OPT = 1
    EXTENDED_OPT = 2
    ALL_OPT = 99

    def getID(self) -> int:
        """The C API's ``GraphOptimizationLevel`` value (Java's ``getID()``)."""
        return int(self)


class ExecutionMode(enum.IntEnum):
    """Sequential or parallel execution of independent operators (Java's ``SessionOptions.ExecutionMode``)."""

    SEQUENTIAL = 0
    PARALLEL = 1

    def getID(self) -> int:
        """The C API's ``ExecutionMode`` value (Java's ``getID()``)."""
        return int(self)


_OptLevel = OptLevel
_ExecutionMode = ExecutionMode


def _check_int(value: Any, what: str, low: int, high: int = 2**31 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OrtException.invalid_argument(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise OrtException.invalid_argument(f"{what} must be in [{low}, {high}], got {value}")
    return value


class SessionOptions(NativeHandle):
    """Options for creating a session (``OrtSessionOptions``)."""

    _kind = "SessionOptions"
    OptLevel = OptLevel  # Java nests these in SessionOptions
    ExecutionMode = ExecutionMode

    def __init__(self) -> None:
        rt = get_runtime()
        out = ffi.new("OrtSessionOptions**")
        check_status(rt.api.CreateSessionOptions(out), "CreateSessionOptions")
        self._own(out[0], rt.api.ReleaseSessionOptions)
        self._rt = rt
        self._entries: "dict[str, str]" = {}

    def setIntraOpNumThreads(self, numThreads: int) -> None:
        """``SetIntraOpNumThreads``: threads inside one operator (0 = the runtime's default)."""
        n = _check_int(numThreads, "intra-op thread count", 0)
        self._call(self._rt.api.SetIntraOpNumThreads, n, context="SetIntraOpNumThreads")

    def setInterOpNumThreads(self, numThreads: int) -> None:
        """``SetInterOpNumThreads``: threads running operators in parallel (0 = default)."""
        n = _check_int(numThreads, "inter-op thread count", 0)
        self._call(self._rt.api.SetInterOpNumThreads, n, context="SetInterOpNumThreads")

    def setOptimizationLevel(self, level: "_OptLevel") -> None:
        """``SetSessionGraphOptimizationLevel``."""
        level = OptLevel(level)
        self._call(self._rt.api.SetSessionGraphOptimizationLevel, int(level), context="SetSessionGraphOptimizationLevel")

    def setExecutionMode(self, mode: "_ExecutionMode") -> None:
        """``SetSessionExecutionMode``."""
        mode = ExecutionMode(mode)
        self._call(self._rt.api.SetSessionExecutionMode, int(mode), context="SetSessionExecutionMode")

    def addConfigEntry(self, configKey: str, configValue: str) -> None:
        """``AddSessionConfigEntry`` (e.g. ``session.intra_op.allow_spinning`` = ``0``)."""
        if not isinstance(configKey, str) or not isinstance(configValue, str):
            raise OrtException.invalid_argument("config entries are str keys and str values")
        self._call(
            self._rt.api.AddSessionConfigEntry, configKey.encode(), configValue.encode(),
            context=f"AddSessionConfigEntry({configKey!r})",
        )
        self._entries[configKey] = configValue

    def getConfigEntries(self) -> "dict[str, str]":
        """Entries added through this object (the C API has no enumeration)."""
        self._handle()
        return dict(self._entries)

    def setSessionLogLevel(self, level: OrtLoggingLevel) -> None:
        """``SetSessionLogSeverityLevel``."""
        level = OrtLoggingLevel(level)
        self._call(self._rt.api.SetSessionLogSeverityLevel, int(level), context="SetSessionLogSeverityLevel")

    setLogLevel = setSessionLogLevel

    def setSessionLogVerbosityLevel(self, level: int) -> None:
        """``SetSessionLogVerbosityLevel``."""
        n = _check_int(level, "log verbosity level", 0)
        self._call(self._rt.api.SetSessionLogVerbosityLevel, n, context="SetSessionLogVerbosityLevel")

    def setLoggerId(self, loggerId: str) -> None:
        """``SetSessionLogId``."""
        self._call(self._rt.api.SetSessionLogId, loggerId.encode(), context="SetSessionLogId")

    def setMemoryPatternOptimization(self, enabled: bool) -> None:
        """``EnableMemPattern`` / ``DisableMemPattern``."""
        api = self._rt.api
        call = api.EnableMemPattern if enabled else api.DisableMemPattern
        self._call(call, context="EnableMemPattern" if enabled else "DisableMemPattern")

    def setCPUArenaAllocator(self, enabled: bool) -> None:
        """``EnableCpuMemArena`` / ``DisableCpuMemArena``."""
        api = self._rt.api
        call = api.EnableCpuMemArena if enabled else api.DisableCpuMemArena
        self._call(call, context="EnableCpuMemArena" if enabled else "DisableCpuMemArena")

    def setOptimizedModelFilePath(self, outputPath: Any) -> None:
        """``SetOptimizedModelFilePath``: a session created with these options writes its optimized
        graph to ``outputPath`` (a str or path; the runtime writes it, not crash-safe)."""
        path = fspath(outputPath, "optimized model path")
        self._call(self._rt.api.SetOptimizedModelFilePath, native_path(path), context=f"SetOptimizedModelFilePath({path!r})")

    def enableProfiling(self, filePath: Any) -> None:
        """``EnableProfiling``: sessions created with these options profile every run and write a
        Chrome-trace JSON file named ``<filePath>_<date>.json`` when they close."""
        prefix = fspath(filePath, "profile file prefix")
        self._call(self._rt.api.EnableProfiling, native_path(prefix), context=f"EnableProfiling({prefix!r})")

    def disableProfiling(self) -> None:
        """``DisableProfiling``: undo ``enableProfiling``."""
        self._call(self._rt.api.DisableProfiling, context="DisableProfiling")

    def setSymbolicDimensionValue(self, dimensionName: str, dimensionValue: int) -> None:
        """``AddFreeDimensionOverrideByName``: fix the symbolic dimension ``dimensionName`` (a
        ``dim_param`` of the model, e.g. the batch) to ``dimensionValue``; inputs of another size are then refused."""
        if not isinstance(dimensionName, str) or not dimensionName or "\0" in dimensionName:
            raise OrtException.invalid_argument(f"the dimension name must be a non-empty str, not {dimensionName!r}")
        value = _check_int(dimensionValue, f"the value of dimension {dimensionName!r}", 0, 2**63 - 1)
        self._call(
            self._rt.api.AddFreeDimensionOverrideByName, dimensionName.encode(), value,
            context=f"AddFreeDimensionOverrideByName({dimensionName!r})",
        )

    def setDeterministicCompute(self, value: bool) -> None:
        """``SetDeterministicCompute``: ask for deterministic kernels where the execution provider has
        them (GPU kernels; the CPU provider is deterministic already)."""
        if not isinstance(value, bool):
            raise OrtException.invalid_argument(f"setDeterministicCompute takes a bool, not {type(value).__name__}")
        self._call(self._rt.api.SetDeterministicCompute, value, context="SetDeterministicCompute")

    def addCUDA(self, deviceNum: int = 0) -> None:
        """Run on the CUDA GPU ``deviceNum`` (``SessionOptionsAppendExecutionProvider_CUDA``).

        Needs the CUDA build of the runtime (``onnxruntime-training``); on a CPU-only build this
        raises ``OrtException`` saying so."""
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
    """Options for one run (``OrtRunOptions``). The training API accepts and ignores them (runtime-notes
    §4); inference runs honour them."""

    _kind = "RunOptions"

    def __init__(self) -> None:
        rt = get_runtime()
        out = ffi.new("OrtRunOptions**")
        check_status(rt.api.CreateRunOptions(out), "CreateRunOptions")
        self._own(out[0], rt.api.ReleaseRunOptions)
        self._rt = rt

    def setLogLevel(self, level: OrtLoggingLevel) -> None:
        """``RunOptionsSetRunLogSeverityLevel``."""
        level = OrtLoggingLevel(level)
        self._call(self._rt.api.RunOptionsSetRunLogSeverityLevel, int(level), context="RunOptionsSetRunLogSeverityLevel")

    def getLogLevel(self) -> OrtLoggingLevel:
        """The run's log severity level (``RunOptionsGetRunLogSeverityLevel``)."""
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogSeverityLevel, out, context="RunOptionsGetRunLogSeverityLevel")
        return OrtLoggingLevel(out[0])

    def setLogVerbosityLevel(self, level: int) -> None:
        """Set the run's log verbosity level, a non-negative int (``RunOptionsSetRunLogVerbosityLevel``)."""
        n = _check_int(level, "log verbosity level", 0)
        self._call(self._rt.api.RunOptionsSetRunLogVerbosityLevel, n, context="RunOptionsSetRunLogVerbosityLevel")

    def getLogVerbosityLevel(self) -> int:
        """The run's log verbosity level (``RunOptionsGetRunLogVerbosityLevel``)."""
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogVerbosityLevel, out, context="RunOptionsGetRunLogVerbosityLevel")
        return int(out[0])

    def setRunTag(self, runTag: str) -> None:
        """``RunOptionsSetRunTag``."""
        self._call(self._rt.api.RunOptionsSetRunTag, runTag.encode(), context="RunOptionsSetRunTag")

    def getRunTag(self) -> str:
        """The run's tag, a copy (``RunOptionsGetRunTag``)."""
        out = ffi.new("const char**")
        ptr = self._use()  # the tag belongs to the options: copied before they can be released
        try:
            check_status(self._rt.api.RunOptionsGetRunTag(ptr, out), "RunOptionsGetRunTag")
            return ffi.string(out[0]).decode() if out[0] else ""
        finally:
            self._unuse()

    def setTerminate(self, terminate: bool) -> None:
        """``RunOptionsSetTerminate`` / ``RunOptionsUnsetTerminate``."""
        api = self._rt.api
        call = api.RunOptionsSetTerminate if terminate else api.RunOptionsUnsetTerminate
        self._call(call, context="RunOptionsSetTerminate")

    def addRunConfigEntry(self, configKey: str, configValue: str) -> None:
        """``AddRunConfigEntry``."""
        self._call(self._rt.api.AddRunConfigEntry, configKey.encode(), configValue.encode(), context="AddRunConfigEntry")
