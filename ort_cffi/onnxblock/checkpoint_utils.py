"""Checkpoints of a training block's parameters (``save_checkpoint``) and their values put back into a model
(``load_checkpoint_to_model``), with ort_cffi's own checkpoint writer and reader (the files ONNX Runtime's
generator writes, byte for byte)."""
from __future__ import annotations

import os
from typing import Sequence, Tuple, Union

import onnx
from onnx import numpy_helper

from ort_cffi.api.checkpoint_file import read_layout
from ort_cffi.artifacts.builder.checkpoint import write_checkpoint

PathLike = Union[str, "os.PathLike[str]"]


def save_checkpoint(parameters: Tuple[Sequence[onnx.TensorProto], Sequence[onnx.TensorProto]],
                    path_to_checkpoint: PathLike, nominal_checkpoint: bool = False) -> None:
    """Write the checkpoint of ``parameters`` ((trainable, frozen), as ``TrainingBlock.parameters()`` gives
    them) to ``path_to_checkpoint``; ``nominal_checkpoint``: shapes and types only."""
    if parameters is None:
        raise RuntimeError("No checkpoint parameters provided.")
    trainable, frozen = parameters
    write_checkpoint(os.fspath(path_to_checkpoint), list(trainable), list(frozen), nominal=nominal_checkpoint)


def load_checkpoint_to_model(path_to_checkpoint: PathLike, model: onnx.ModelProto) -> None:
    """Replace the values of ``model``'s initializers by those the checkpoint holds under the same names
    (``model`` is changed in place; initializers the checkpoint lacks keep theirs)."""
    path = os.fspath(path_to_checkpoint)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    layout = read_layout(path)
    if layout is None:
        raise ValueError(f"{path!r} is not a checkpoint ort_cffi can read")
    if layout.nominal:
        raise ValueError(f"{path!r} is a nominal checkpoint: it holds no values to load")
    for index, initializer in enumerate(model.graph.initializer):
        if initializer.name not in layout.parameters:
            continue
        values = layout.read_parameter(initializer.name)
        if values is None:
            raise ValueError(f"the values of {initializer.name!r} cannot be read from {path!r}")
        model.graph.initializer[index].CopyFrom(numpy_helper.from_array(values, initializer.name))
