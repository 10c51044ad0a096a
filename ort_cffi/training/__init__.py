"""ONNX Runtime's ``onnxruntime.training`` package on ort_cffi, for code written for it: change
``onnxruntime.training`` to ``ort_cffi.training`` in the imports.

- ``ort_cffi.training.artifacts``: ``generate_artifacts`` with ONNX Runtime's signature and defaults;
- ``ort_cffi.training.onnxblock``: ``ort_cffi.onnxblock`` (the same modules, also as
  ``ort_cffi.training.onnxblock.loss`` and so on);
- ``ort_cffi.training.api``: ``ort_cffi.api`` (CheckpointState, Module, Optimizer, ..., InferenceSession).

An application over ``ort_cffi.artifacts``, ``ort_cffi.onnxblock`` and ``ort_cffi.api``
(docs/guides/porting-python.md).
"""
import sys

from ort_cffi import api, onnxblock
from ort_cffi.training import artifacts

# `import ort_cffi.training.onnxblock.loss` and `from ort_cffi.training.api import Module` find the very
# modules of ort_cffi.onnxblock and ort_cffi.api, not second copies with classes of their own.
for _package in (api, onnxblock):
    _alias = "ort_cffi.training." + _package.__name__.rsplit(".", 1)[1]
    for _name, _module in list(sys.modules.items()):
        if _name == _package.__name__ or _name.startswith(_package.__name__ + "."):
            sys.modules.setdefault(_alias + _name[len(_package.__name__):], _module)

__all__ = ["api", "artifacts", "onnxblock"]
