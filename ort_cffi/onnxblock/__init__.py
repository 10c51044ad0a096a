"""ONNX Runtime's ``onnxruntime.training.onnxblock`` on ort_cffi: blocks that build a loss (or a whole model)
on top of an ONNX model, training blocks whose gradients ort_cffi's own builder writes, optimizer blocks, and
checkpoints. Code written for ONNX Runtime's onnxblock ports by changing ``onnxruntime.training.onnxblock``
to ``ort_cffi.onnxblock`` (docs/guides/porting-python.md); a custom loss, a ``class MyLoss(onnxblock.Block)``,
is also the ``loss`` of ``generate_artifacts``.

An application beside ``ort_cffi.artifacts``, whose builder and checkpoint writer it uses. Its modules:
``blocks`` (``Block`` and the operators), ``loss``, ``optim``, ``onnxblock`` (``ForwardBlock``,
``TrainingBlock``), ``model_accessor`` (``base``, ``empty_base``), ``checkpoint_utils``, ``stacking`` (a loss
block on a model, for ``generate_artifacts``).
"""
from ort_cffi.onnxblock import blocks, loss, optim
from ort_cffi.onnxblock.blocks import Block
from ort_cffi.onnxblock.checkpoint_utils import load_checkpoint_to_model, save_checkpoint
from ort_cffi.onnxblock.model_accessor import base, custom_op_library, empty_base
from ort_cffi.onnxblock.onnxblock import ForwardBlock, TrainingBlock

__all__ = [
    "Block",
    "ForwardBlock",
    "TrainingBlock",
    "base",
    "blocks",
    "custom_op_library",
    "empty_base",
    "load_checkpoint_to_model",
    "loss",
    "optim",
    "save_checkpoint",
]
