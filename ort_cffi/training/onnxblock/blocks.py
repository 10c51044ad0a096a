"""``onnxruntime.training.onnxblock.blocks``'s names, as ``ort_cffi.onnxblock.blocks`` has them."""
from ort_cffi.onnxblock.blocks import (
    Abs,
    Add,
    Block,
    Cast,
    Clip,
    Constant,
    Div,
    InputLike,
    LabelEncoder,
    Linear,
    Log,
    Mul,
    Neg,
    PassThrough,
    Pow,
    ReduceAllL2,
    ReduceMean,
    ReduceSum,
    SequenceConstruct,
    Sigmoid,
    Sub,
)

__all__ = ["Abs", "Add", "Block", "Cast", "Clip", "Constant", "Div", "InputLike", "LabelEncoder", "Linear", "Log", "Mul",
           "Neg", "PassThrough", "Pow", "ReduceAllL2", "ReduceMean", "ReduceSum", "SequenceConstruct", "Sigmoid", "Sub"]
