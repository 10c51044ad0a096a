"""``onnxruntime.training.onnxblock.optim``'s names, as ``ort_cffi.onnxblock.optim`` has them."""
from ort_cffi.onnxblock.optim import SGD, AdamW, ClipGradNorm

__all__ = ["AdamW", "ClipGradNorm", "SGD"]
