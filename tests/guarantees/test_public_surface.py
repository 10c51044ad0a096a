"""The public surface, name by name: what users import (``from ort_cffi import ...``, ``ort_cffi.capi``,
``ort_cffi.artifacts``, ``ort_cffi.runtime``, ``ort_cffi.flower``, ``ort_cffi.trainer``) and the four
commands. A name that disappears, or a face that grows a name nobody listed here, fails: moving code
between the private modules behind these faces must not change what users see."""
from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

FACADE = [
    "Fp16Conversions", "NodeInfo", "OnnxJavaType", "OnnxModelMetadata", "OnnxTensor", "OnnxTensorLike", "OnnxTensorType", "OnnxValue", "OnnxValueType",
    "OrtAllocator", "OrtCheckpointState", "OrtClosedException", "OrtEnvironment", "OrtErrorCode", "OrtException",
    "OrtFileNotFoundException", "OrtInvalidArgumentException", "OrtLoggingLevel", "OrtSession", "OrtTrainingSession",
    "Result", "RunOptions", "RuntimeLoadError", "RuntimeNotFoundError", "SessionOptions", "TensorInfo",
    "TrainingApiUnavailableError", "UnsupportedRuntimeError", "backend", "use_backend",
]
FACES = {
    "ort_cffi": FACADE,
    "ort_cffi.capi": ["API_VERSION", "Runtime", "check_status", "ffi", "get_runtime", "load_runtime", "training_table"],
    "ort_cffi.artifacts": [
        "ALL_PARAMETERS", "ArtifactsError", "ArtifactsInputError", "ENV_PYTHON", "GENERATOR_PACKAGES", "GeneratedArtifacts",
        "Generator", "GeneratorUnavailableError", "LossType", "MANIFEST", "MODEL_OUTPUTS", "ModelLike", "OptimType",
        "Parameter", "Selection", "TensorSpec",
        "artifacts_match", "check_generator", "describe", "files_intact", "find_generator", "generate_artifacts",
        "generator_python", "model_sha256",
        "read_manifest", "request_options",
    ],
    "ort_cffi.runtime": [
        "FLAVOURS", "NATIVE_PREFIX", "RuntimeInstallError", "check_loads", "choose_wheel", "describe_choice",
        "download_wheel", "glibc_version", "has_generator", "has_training_build", "install", "install_wheel",
        "loader_choice", "machine", "prepare_generator", "prepared_changes", "published_wheels", "row_of_wheel",
        "store_dir", "stored_generator", "stored_runtimes",
    ],
    "ort_cffi.api": [
        "CheckpointState", "InferenceSession", "LinearLRScheduler", "Module", "NodeArg", "Optimizer", "OrtValue",
        "Parameter", "Parameters", "Properties", "SessionOptions", "get_available_providers",
    ],
    "ort_cffi.onnxblock": [
        "Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "custom_op_library", "empty_base",
        "load_checkpoint_to_model", "loss", "optim", "save_checkpoint",
    ],
    "ort_cffi.training": ["api", "artifacts", "onnxblock"],
    "ort_cffi.trainer": ["DEFAULT_ARTIFACTS", "GENERATION_FLAGS", "OutputError", "Reestimated", "SetupError",
                         "TrainSettings", "TrainingJob", "reestimate_batchnorm", "settings_from"],
}
FLOWER = [
    "ClientSettings", "FederatedError", "FederatedServer", "GlobalModel", "INSTALL_HINT", "LOG_MARK", "LocalLearner",
    "LocalSimulation", "PARTITIONINGS", "ParameterLayout", "Rejection", "STRATEGIES", "STRATEGY_HELP", "ServerSettings",
    "StrategyError", "StrategySettings", "build_strategy", "clientapp", "close_shared_sessions", "format_round",
    "label_proportions", "learner_for", "load_learner", "local_data", "make_client_app", "make_server_app", "partition",
    "partition_dataset", "plot_history", "preflight", "screen_replies", "serverapp", "shared_session", "simulate",
]
# Each through ort_cffi_commands, which catches Ctrl-C while the command imports (tests/apps/test_interrupts.py).
COMMANDS = {
    "ort-cffi-train": "ort_cffi_commands:train",
    "ort-cffi-artifacts": "ort_cffi_commands:artifacts",
    "ort-cffi-runtime": "ort_cffi_commands:runtime",
    "ort-cffi-federated": "ort_cffi_commands:federated",
    "ort-cffi-predict": "ort_cffi_commands:predict",
}


def check_face(name: str, expected: "list[str]") -> None:
    module = importlib.import_module(name)
    exported = sorted(module.__all__)
    assert exported == sorted(expected), f"{name}.__all__ changed: added {sorted(set(exported) - set(expected))}, " \
                                         f"removed {sorted(set(expected) - set(exported))}"
    missing = [n for n in expected if not hasattr(module, n)]
    assert not missing, f"{name} lists but lacks {missing}"


@pytest.mark.parametrize("face", sorted(FACES))
def test_each_face_keeps_its_names(face: str) -> None:
    check_face(face, FACES[face])


def test_flower_keeps_its_names() -> None:
    check_face("ort_cffi.flower", FLOWER)


def test_the_check_fails_when_a_name_disappears() -> None:
    with pytest.raises(AssertionError, match=r"removed \['OrtGone'\]"):
        check_face("ort_cffi", FACADE + ["OrtGone"])


def test_the_four_commands_point_at_the_command_lines() -> None:
    scripts = {ep.name: ep for ep in entry_points(group="console_scripts") if ep.name.startswith("ort-cffi-")}
    assert {name: ep.value for name, ep in scripts.items()} == COMMANDS
    # Loaded in a child: importing ort_cffi_commands installs its start-up SIGINT handler in the importer.
    functions = [ep.attr for ep in scripts.values()]
    done = subprocess.run([sys.executable, "-c", "import sys, ort_cffi_commands as c; "
                           "sys.exit(0 if all(callable(getattr(c, f)) for f in sys.argv[1:]) else 1)", *functions],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_python_dash_m_runs_the_commands() -> None:
    """``python -m ort_cffi.artifacts`` and ``python -m ort_cffi.runtime`` go through a ``__main__`` module."""
    for face in ("ort_cffi.artifacts", "ort_cffi.runtime"):
        assert importlib.util.find_spec(f"{face}.__main__") is not None
