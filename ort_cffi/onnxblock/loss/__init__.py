"""The loss blocks of ONNX Runtime's ``onnxblock.loss``."""
from ort_cffi.onnxblock.loss.loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss"]
