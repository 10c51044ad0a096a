"""Facade: ``SessionOptions`` and ``RunOptions`` (Java's ``OrtSession.SessionOptions`` / ``RunOptions``)."""
from __future__ import annotations

import enum
from typing import Any

from ._errors import OrtException
from ._handles import NativeHandle
from .capi import check_status, ffi, get_runtime


class OrtLoggingLevel(enum.IntEnum):
    ORT_LOGGING_LEVEL_VERBOSE = 0
    ORT_LOGGING_LEVEL_INFO = 1
    ORT_LOGGING_LEVEL_WARNING = 2
    ORT_LOGGING_LEVEL_ERROR = 3
    ORT_LOGGING_LEVEL_FATAL = 4


class OptLevel(enum.IntEnum):
    """Graph optimization level (Java's ``SessionOptions.OptLevel``)."""

    NO_OPT = 0
    BASIC_OPT = 1
    EXTENDED_OPT = 2
    ALL_OPT = 99


class ExecutionMode(enum.IntEnum):
    SEQUENTIAL = 0
    PARALLEL = 1


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
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogSeverityLevel, out, context="RunOptionsGetRunLogSeverityLevel")
        return OrtLoggingLevel(out[0])

    def setLogVerbosityLevel(self, level: int) -> None:
        n = _check_int(level, "log verbosity level", 0)
        self._call(self._rt.api.RunOptionsSetRunLogVerbosityLevel, n, context="RunOptionsSetRunLogVerbosityLevel")

    def getLogVerbosityLevel(self) -> int:
        out = ffi.new("int*")
        self._call(self._rt.api.RunOptionsGetRunLogVerbosityLevel, out, context="RunOptionsGetRunLogVerbosityLevel")
        return int(out[0])

    def setRunTag(self, runTag: str) -> None:
        """``RunOptionsSetRunTag``."""
        self._call(self._rt.api.RunOptionsSetRunTag, runTag.encode(), context="RunOptionsSetRunTag")

    def getRunTag(self) -> str:
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
