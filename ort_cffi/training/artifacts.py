"""ONNX Runtime's ``onnxruntime.training.artifacts`` on ort_cffi: ``from onnxruntime.training import artifacts``
ports as ``from ort_cffi.training import artifacts``.

``generate_artifacts``, ``LossType`` and ``OptimType`` are ``ort_cffi.artifacts``' own, which are ONNX
Runtime's, default for default and argument for argument (docs/guides/porting-python.md says what differs).
"""
from ort_cffi.artifacts import GeneratedArtifacts, LossType, OptimType, generate_artifacts

__all__ = ["GeneratedArtifacts", "LossType", "OptimType", "generate_artifacts"]
