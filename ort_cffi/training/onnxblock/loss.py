"""``onnxruntime.training.onnxblock.loss``'s names, as ``ort_cffi.onnxblock.loss`` has them."""
from ort_cffi.onnxblock.loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss"]
