"""``onnxruntime.training.onnxblock``'s names, as ``ort_cffi.onnxblock`` has them (the same classes)."""
from ort_cffi.onnxblock import (
    Block,
    ForwardBlock,
    TrainingBlock,
    base,
    custom_op_library,
    empty_base,
    load_checkpoint_to_model,
    save_checkpoint,
)
from ort_cffi.training.onnxblock import blocks, loss, optim

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "custom_op_library", "empty_base",
           "load_checkpoint_to_model", "loss", "optim", "save_checkpoint"]
