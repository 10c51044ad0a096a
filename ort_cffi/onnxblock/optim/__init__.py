"""The optimizer blocks of ONNX Runtime's ``onnxblock.optim``."""
from ort_cffi.onnxblock.optim.optim import SGD, AdamW, ClipGradNorm

__all__ = ["AdamW", "ClipGradNorm", "SGD"]
