"""``InferenceSession``: ONNX Runtime's Python inference session (``onnxruntime.InferenceSession``) over
ort_cffi's ``OrtSession``, for code that runs an exported model the way ONNX Runtime's examples do
(``get_inputs()``, ``run(output_names, feed)``), with its ``SessionOptions`` and ``NodeArg``."""
from __future__ import annotations

import enum
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ort_cffi import OnnxModelMetadata, OrtEnvironment, OrtLoggingLevel
from ort_cffi import SessionOptions as _JavaSessionOptions
from ort_cffi.api.ortvalue import OrtValue
from ort_cffi.capi import check_status, ffi, get_runtime

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


def get_available_providers() -> List[str]:
    """The execution providers the loaded runtime was built with (``GetAvailableProviders``), as ONNX
    Runtime's ``onnxruntime.get_available_providers()``: ``["CPUExecutionProvider"]`` for the CPU build."""
    runtime = get_runtime()
    names = ffi.new("char***")
    count = ffi.new("int*")
    check_status(runtime.api.GetAvailableProviders(names, count))
    try:
        return [ffi.string(names[0][i]).decode() for i in range(count[0])]
    finally:
        check_status(runtime.api.ReleaseAvailableProviders(names[0], count[0]))


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's ``onnxruntime.GraphOptimizationLevel``."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """ONNX Runtime's ``onnxruntime.ExecutionMode``."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """ONNX Runtime's ``onnxruntime.SessionOptions``: settings as attributes, read when a session is made
    (``InferenceSession(..., sess_options=...)``). The attributes ort_cffi's sessions honour are those
    below; ``to_session_options()`` gives the Java-style ``ort_cffi.SessionOptions`` they make."""

    # ONNX Runtime's defaults; setting one on an instance changes that instance only
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    graph_optimization_level: int = GraphOptimizationLevel.ORT_ENABLE_ALL
    execution_mode: int = ExecutionMode.ORT_SEQUENTIAL
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    enable_mem_pattern: bool = True
    enable_cpu_mem_arena: bool = True
    optimized_model_filepath: str = ""
    use_deterministic_compute: bool = False

    def __init__(self) -> None:
        self._config: Dict[str, str] = {}
        self._free_dimensions: Dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a session configuration entry (``"session.intra_op.allow_spinning"``, ...)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The entry ``key`` set here; KeyError for one not set."""
        if key not in self._config:
            raise KeyError(f"SessionOptions has no config entry {key!r}")
        return self._config[key]

    def register_custom_ops_library(self, library_path: str) -> None:
        """Refused: ort_cffi's sessions load no custom-op libraries (build the model from standard and
        com.microsoft operators)."""
        raise NotImplementedError(f"register_custom_ops_library({library_path!r}): ort_cffi's sessions load no "
                                  "custom-op libraries; build the model from standard operators")

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dimension ``dim_name`` to ``dim_value`` in the sessions made with these options."""
        self._free_dimensions[str(dim_name)] = int(dim_value)

    def to_session_options(self) -> _JavaSessionOptions:
        """A new ``ort_cffi.SessionOptions`` with these settings (the caller closes it)."""
        options = _JavaSessionOptions()
        try:
            if self.intra_op_num_threads:
                options.setIntraOpNumThreads(int(self.intra_op_num_threads))
            if self.inter_op_num_threads:
                options.setInterOpNumThreads(int(self.inter_op_num_threads))
            options.setOptimizationLevel(_JavaSessionOptions.OptLevel(int(self.graph_optimization_level)))
            options.setExecutionMode(_JavaSessionOptions.ExecutionMode(int(self.execution_mode)))
            options.setSessionLogLevel(OrtLoggingLevel.mapFromInt(int(self.log_severity_level)))
            options.setSessionLogVerbosityLevel(int(self.log_verbosity_level))
            if self.logid:
                options.setLoggerId(str(self.logid))
            options.setMemoryPatternOptimization(bool(self.enable_mem_pattern))
            options.setCPUArenaAllocator(bool(self.enable_cpu_mem_arena))
            if self.optimized_model_filepath:
                options.setOptimizedModelFilePath(self.optimized_model_filepath)
            if self.use_deterministic_compute:
                options.setDeterministicCompute(True)
            for key, value in self._config.items():
                options.addConfigEntry(key, value)
            for name, size in self._free_dimensions.items():
                options.setSymbolicDimensionValue(name, size)
        except BaseException:
            options.close()
            raise
        return options


class NodeArg:
    """A model input or output as ONNX Runtime describes it: ``name``, ``type`` (``"tensor(float)"``) and
    ``shape`` (ints, the symbolic names of open dimensions, None where a dimension has neither)."""

    def __init__(self, name: str, type: str, shape: List[Union[int, str, None]]) -> None:
        self._name = name
        self._type = type
        self._shape = shape

    @property
    def name(self) -> str:
        """The input's or output's name."""
        return self._name

    @property
    def type(self) -> str:
        """Its type in ONNX's spelling, ``"tensor(float)"`` and so on."""
        return self._type

    @property
    def shape(self) -> List[Union[int, str, None]]:
        """Its dimensions: ints, symbolic names, None where a dimension has neither."""
        return list(self._shape)

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


def _node_args(infos: Mapping[str, Any]) -> List[NodeArg]:
    found = []
    for name, node in infos.items():
        info = node.getInfo()
        names = info.dimensionNames or ("",) * len(info.shape)
        shape: List[Union[int, str, None]] = [
            int(d) if d >= 0 else (dim_name or None) for d, dim_name in zip(info.shape, names)]
        found.append(NodeArg(name, str(info.onnxType.onnx_name), shape))
    return found


class ModelMetadata:
    """``onnxruntime.ModelMetadata``: what ``InferenceSession.get_modelmeta()`` gives, as attributes."""

    def __init__(self, metadata: OnnxModelMetadata) -> None:
        self.producer_name = metadata.getProducerName()
        self.graph_name = metadata.getGraphName()
        self.graph_description = metadata.getGraphDescription()
        self.domain = metadata.getDomain()
        self.description = metadata.getDescription()
        self.version = metadata.getVersion()
        self.custom_metadata_map = metadata.getCustomMetadata()

    def __repr__(self) -> str:
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"domain={self.domain!r}, version={self.version}, custom_metadata_map={self.custom_metadata_map!r})")


class InferenceSession:
    """ONNX Runtime's ``onnxruntime.InferenceSession`` on ort_cffi: a model (a path or its bytes) run on the
    same runtime as training, through ``ort_cffi.OrtSession``.

    ``sess_options``: this module's ``SessionOptions`` or an ``ort_cffi.SessionOptions``. ``providers``: the
    CPU provider, and ``"CUDAExecutionProvider"`` where the CUDA build of the runtime is installed (the CPU
    build refuses it, saying so); others the runtime lists as available are accepted and run nothing; the rest
    are refused by name.
    """

    def __init__(self, path_or_bytes: Union[str, bytes, "os.PathLike[str]"], sess_options: Any = None,
                 providers: Optional[Sequence[Any]] = None, provider_options: Optional[Sequence[Any]] = None,
                 **kwargs: Any) -> None:
        self._model_path = path_or_bytes if isinstance(path_or_bytes, str) else None
        self._model = path_or_bytes  # set_providers makes the session again from it
        self._sess_options = sess_options
        names = [p[0] if isinstance(p, tuple) else p for p in (providers or [CPU_PROVIDER])]
        # What the runtime lists as available is accepted, as ONNX Runtime accepts it: code passes
        # get_available_providers() straight back, and 1.31.1's CPU build lists AzureExecutionProvider, which
        # runs nothing of a local model. Models run on the CPU (and CUDA) providers.
        unknown = [p for p in names if p not in (CPU_PROVIDER, CUDA_PROVIDER) and p not in get_available_providers()]
        if unknown:
            raise ValueError(f"execution providers {unknown}: ort_cffi runs {CPU_PROVIDER!r} (and "
                             f"{CUDA_PROVIDER!r} with the CUDA build of the runtime), and accepts what the runtime "
                             f"lists as available ({', '.join(get_available_providers())})")
        running = [p for p in names if p in (CPU_PROVIDER, CUDA_PROVIDER)]
        self._providers = running if CPU_PROVIDER in running else running + [CPU_PROVIDER]
        made = sess_options is None or isinstance(sess_options, SessionOptions)
        if sess_options is None:
            options = _JavaSessionOptions()
        elif isinstance(sess_options, SessionOptions):
            options = sess_options.to_session_options()
        elif isinstance(sess_options, _JavaSessionOptions):
            options = sess_options
        else:
            raise TypeError("sess_options must be an ort_cffi.api.SessionOptions or an ort_cffi.SessionOptions, "
                            f"not {type(sess_options).__name__}")
        try:
            if CUDA_PROVIDER in names:
                options.addCUDA(0)
            model = path_or_bytes if isinstance(path_or_bytes, (bytes, bytearray, memoryview)) else os.fspath(path_or_bytes)
            self._session = OrtEnvironment.getEnvironment().createSession(model, options)
        finally:
            if made:
                options.close()
        self._inputs = _node_args(self._session.getInputInfo())
        self._outputs = _node_args(self._session.getOutputInfo())

    def get_inputs(self) -> List[NodeArg]:
        """The model's inputs, in order."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        """The model's outputs, in order."""
        return list(self._outputs)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata: producer, graph name and description, domain, description, version and
        ``custom_metadata_map`` (its ``metadata_props``)."""
        return ModelMetadata(self._session.getMetadata())

    def get_overridable_initializers(self) -> List[NodeArg]:
        """None here: ort_cffi's sessions take the model's inputs only."""
        return []

    def get_providers(self) -> List[str]:
        """The execution providers the session runs on, the CPU's last."""
        return list(self._providers)

    def get_provider_options(self) -> Dict[str, Dict[str, str]]:
        """Each provider the session runs on, with its options (none are set through ort_cffi: empty)."""
        return {provider: {} for provider in self._providers}

    def set_providers(self, providers: Optional[Sequence[Any]] = None, provider_options: Optional[Sequence[Any]] = None) -> None:
        """Make the session again on ``providers`` (None: the CPU), from the same model and options, as ONNX
        Runtime does; the old native session is released first."""
        self._session.close()
        self.__init__(self._model, self._sess_options, providers, provider_options)  # type: ignore[misc]

    def get_session_options(self) -> Any:
        """The ``sess_options`` the session was made with (None when none was given)."""
        return self._sess_options

    def run(self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any],
            run_options: Any = None) -> List[np.ndarray]:
        """Run the model: the outputs named (None or empty: all, in the model's order) as numpy arrays the
        caller owns. ``input_feed`` maps input names to numpy arrays (or values numpy turns into arrays)."""
        if not isinstance(input_feed, Mapping):
            raise TypeError(f"input_feed must be a dict of input names to arrays, not {type(input_feed).__name__}")
        feed = {name: value if isinstance(value, np.ndarray) else np.asarray(value) for name, value in input_feed.items()}
        wanted = list(output_names) if output_names else [o.name for o in self._outputs]
        with self._session.run(feed, wanted) as result:
            return [np.array(result[i].getValue(), copy=True) for i in range(len(wanted))]

    def run_with_ort_values(self, output_names: Optional[Sequence[str]], input_dict_ort_values: Mapping[str, OrtValue],
                            run_options: Any = None) -> List[OrtValue]:
        """``run`` with ``OrtValue`` inputs and outputs."""
        feed = {}
        for name, value in input_dict_ort_values.items():
            if not isinstance(value, OrtValue):
                raise TypeError(f"input {name!r} must be an OrtValue, not {type(value).__name__}")
            feed[name] = value.as_onnx_tensor()
        wanted = list(output_names) if output_names else [o.name for o in self._outputs]
        with self._session.run(feed, wanted) as result:
            return [OrtValue.ortvalue_from_numpy(np.array(result[i].getValue(), copy=True)) for i in range(len(wanted))]

    def end_profiling(self) -> str:
        """``""``: profiling is set on the Java-style ``ort_cffi.SessionOptions`` (``enableProfiling``)."""
        return ""

    def close(self) -> None:
        """Release the session now (garbage collection does it otherwise)."""
        self._session.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "ModelMetadata", "NodeArg", "SessionOptions",
           "get_available_providers"]
