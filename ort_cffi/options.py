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
        check_status(self._rt.api.SetIntraOpNumThreads(self._handle(), n), "SetIntraOpNumThreads")

    def setInterOpNumThreads(self, numThreads: int) -> None:
        """``SetInterOpNumThreads``: threads running operators in parallel (0 = default)."""
        n = _check_int(numThreads, "inter-op thread count", 0)
        check_status(self._rt.api.SetInterOpNumThreads(self._handle(), n), "SetInterOpNumThreads")

    def setOptimizationLevel(self, level: "_OptLevel") -> None:
        """``SetSessionGraphOptimizationLevel``."""
        level = OptLevel(level)
        check_status(
            self._rt.api.SetSessionGraphOptimizationLevel(self._handle(), int(level)), "SetSessionGraphOptimizationLevel"
        )

    def setExecutionMode(self, mode: "_ExecutionMode") -> None:
        """``SetSessionExecutionMode``."""
        mode = ExecutionMode(mode)
        check_status(self._rt.api.SetSessionExecutionMode(self._handle(), int(mode)), "SetSessionExecutionMode")

    def addConfigEntry(self, configKey: str, configValue: str) -> None:
        """``AddSessionConfigEntry`` (e.g. ``session.intra_op.allow_spinning`` = ``0``)."""
        if not isinstance(configKey, str) or not isinstance(configValue, str):
            raise OrtException.invalid_argument("config entries are str keys and str values")
        check_status(
            self._rt.api.AddSessionConfigEntry(self._handle(), configKey.encode(), configValue.encode()),
            f"AddSessionConfigEntry({configKey!r})",
        )
        self._entries[configKey] = configValue

    def getConfigEntries(self) -> "dict[str, str]":
        """Entries added through this object (the C API has no enumeration)."""
        self._handle()
        return dict(self._entries)

    def setSessionLogLevel(self, level: OrtLoggingLevel) -> None:
        """``SetSessionLogSeverityLevel``."""
        level = OrtLoggingLevel(level)
        check_status(self._rt.api.SetSessionLogSeverityLevel(self._handle(), int(level)), "SetSessionLogSeverityLevel")

    setLogLevel = setSessionLogLevel

    def setSessionLogVerbosityLevel(self, level: int) -> None:
        """``SetSessionLogVerbosityLevel``."""
        n = _check_int(level, "log verbosity level", 0)
        check_status(self._rt.api.SetSessionLogVerbosityLevel(self._handle(), n), "SetSessionLogVerbosityLevel")

    def setLoggerId(self, loggerId: str) -> None:
        """``SetSessionLogId``."""
        check_status(self._rt.api.SetSessionLogId(self._handle(), loggerId.encode()), "SetSessionLogId")

    def setMemoryPatternOptimization(self, enabled: bool) -> None:
        """``EnableMemPattern`` / ``DisableMemPattern``."""
        api = self._rt.api
        call = api.EnableMemPattern if enabled else api.DisableMemPattern
        check_status(call(self._handle()), "EnableMemPattern" if enabled else "DisableMemPattern")

    def setCPUArenaAllocator(self, enabled: bool) -> None:
        """``EnableCpuMemArena`` / ``DisableCpuMemArena``."""
        api = self._rt.api
        call = api.EnableCpuMemArena if enabled else api.DisableCpuMemArena
        check_status(call(self._handle()), "EnableCpuMemArena" if enabled else "DisableCpuMemArena")

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
        check_status(
            self._rt.api.SessionOptionsAppendExecutionProvider_CUDA(self._handle(), options),
            f"adding the CUDA execution provider (device {device}); it needs the CUDA build "
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
        check_status(
            self._rt.api.RunOptionsSetRunLogSeverityLevel(self._handle(), int(level)), "RunOptionsSetRunLogSeverityLevel"
        )

    def getLogLevel(self) -> OrtLoggingLevel:
        out = ffi.new("int*")
        check_status(self._rt.api.RunOptionsGetRunLogSeverityLevel(self._handle(), out), "RunOptionsGetRunLogSeverityLevel")
        return OrtLoggingLevel(out[0])

    def setLogVerbosityLevel(self, level: int) -> None:
        n = _check_int(level, "log verbosity level", 0)
        check_status(self._rt.api.RunOptionsSetRunLogVerbosityLevel(self._handle(), n), "RunOptionsSetRunLogVerbosityLevel")

    def getLogVerbosityLevel(self) -> int:
        out = ffi.new("int*")
        check_status(
            self._rt.api.RunOptionsGetRunLogVerbosityLevel(self._handle(), out), "RunOptionsGetRunLogVerbosityLevel"
        )
        return int(out[0])

    def setRunTag(self, runTag: str) -> None:
        """``RunOptionsSetRunTag``."""
        check_status(self._rt.api.RunOptionsSetRunTag(self._handle(), runTag.encode()), "RunOptionsSetRunTag")

    def getRunTag(self) -> str:
        out = ffi.new("const char**")
        check_status(self._rt.api.RunOptionsGetRunTag(self._handle(), out), "RunOptionsGetRunTag")
        return ffi.string(out[0]).decode() if out[0] else ""

    def setTerminate(self, terminate: bool) -> None:
        """``RunOptionsSetTerminate`` / ``RunOptionsUnsetTerminate``."""
        api = self._rt.api
        call = api.RunOptionsSetTerminate if terminate else api.RunOptionsUnsetTerminate
        check_status(call(self._handle()), "RunOptionsSetTerminate")

    def addRunConfigEntry(self, configKey: str, configValue: str) -> None:
        """``AddRunConfigEntry``."""
        check_status(
            self._rt.api.AddRunConfigEntry(self._handle(), configKey.encode(), configValue.encode()), "AddRunConfigEntry"
        )
