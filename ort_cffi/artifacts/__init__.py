"""Training artifacts for any ONNX model, without torch: ``generate_artifacts`` is ONNX Runtime's
``onnxruntime.training.artifacts.generate_artifacts``, default for default and argument for argument (its
``LossType`` and ``OptimType`` too), with ort_cffi's options as keywords. ort_cffi's former defaults are asked
for explicitly: ``requires_grad=ALL_PARAMETERS``, ``loss="cross-entropy"``, ``optimizer="adamw"``,
``additional_output_names=MODEL_OUTPUTS`` (docs/guides/artifacts.md).

From an inference model it writes the four files a training session needs: ``checkpoint`` (the
parameters), ``training_model.onnx`` (forward, loss and gradient graphs), ``eval_model.onnx`` (forward and
loss) and ``optimizer_model.onnx``, plus ``artifacts.json``, which records what they were made from.

An application on the facade. Its modules: ``definitions`` (what it takes and returns), ``options`` (the
request's normal form), ``runner`` (the child process and its interpreter), ``_child`` (the child itself,
which imports nothing of ort_cffi), ``generate`` (the public function, ONNX Runtime's arguments), ``writer``
(the files from the options' normal form) and ``manifest``; ``python -m ort_cffi.artifacts`` is
the ``ort-cffi-artifacts`` command.
"""
from ort_cffi.artifacts.definitions import (
    ALL_PARAMETERS,
    MODEL_OUTPUTS,
    ArtifactsError,
    ArtifactsInputError,
    GeneratedArtifacts,
    GeneratorUnavailableError,
    LossType,
    ModelLike,
    OptimType,
    Parameter,
    Selection,
    TensorSpec,
    describe,
)
from ort_cffi.artifacts.generate import generate_artifacts
from ort_cffi.artifacts.manifest import MANIFEST, artifacts_match, files_intact, read_manifest
from ort_cffi.artifacts.options import model_sha256, request_options
from ort_cffi.artifacts.runner import (
    ENV_PYTHON,
    GENERATOR_PACKAGES,
    Generator,
    check_generator,
    find_generator,
    generator_python,
)

__all__ = [
    "ALL_PARAMETERS",
    "ENV_PYTHON",
    "GENERATOR_PACKAGES",
    "MANIFEST",
    "MODEL_OUTPUTS",
    "ArtifactsError",
    "ArtifactsInputError",
    "GeneratedArtifacts",
    "Generator",
    "GeneratorUnavailableError",
    "LossType",
    "ModelLike",
    "OptimType",
    "Parameter",
    "Selection",
    "TensorSpec",
    "artifacts_match",
    "check_generator",
    "describe",
    "files_intact",
    "find_generator",
    "generate_artifacts",
    "generator_python",
    "model_sha256",
    "read_manifest",
    "request_options",
]
