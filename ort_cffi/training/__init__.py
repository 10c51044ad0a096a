"""ONNX Runtime's ``onnxruntime.training`` package on ort_cffi, for code written for it: change
``onnxruntime.training`` to ``ort_cffi.training`` in the imports.

- ``ort_cffi.training.artifacts``: ``ort_cffi.artifacts.generate_artifacts``, ONNX Runtime's signature and defaults;
- ``ort_cffi.training.onnxblock``: the names of ``ort_cffi.onnxblock`` (also its ``blocks``, ``loss`` and
  ``optim``), where ONNX Runtime's code imports them from;
- ``ort_cffi.training.api``: the names of ``ort_cffi.api`` (CheckpointState, Module, Optimizer, ...).

The classes are ``ort_cffi.onnxblock``'s and ``ort_cffi.api``'s own, re-exported: an application over them and
``ort_cffi.artifacts`` (docs/guides/porting-python.md).
"""
from ort_cffi.training import api, artifacts, onnxblock

__all__ = ["api", "artifacts", "onnxblock"]
