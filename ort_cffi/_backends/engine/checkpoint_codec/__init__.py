"""ONNX Runtime's training checkpoint format, read and written without the runtime, so that a checkpoint
saved on one backend (the training build's ``SaveCheckpoint``, or ort_cffi's engine) resumes on the other.

- ``read_checkpoint(path or bytes)`` gives a ``Checkpoint``: the trainable and frozen parameters, the
  optimizer groups (learning rate, step, each parameter's moments), the properties, whether it is nominal;
- ``write_checkpoint(checkpoint, path)`` writes the file ONNX Runtime 1.19.2's ``SaveCheckpoint`` writes for
  the same state, byte for byte;
- ``index_checkpoint(bytes, label)``: where everything lies, names, dims and element types, without the data
  (for readers of names, such as ``ort_cffi.api``'s);
- ``CheckpointFormatError``: what is not a checkpoint 1.19 reads (empty, truncated, another identifier or
  version, damaged), with the path; ``CheckpointInputError``: a state the file cannot hold.

The modules: ``flatbuffer`` (FlatBuffers' C++ layout, and a bounds-checked reader), ``layout`` (the schema
and the writer shared with ort_cffi's artifact builder, handed up by ``ort_cffi._facade.checkpoint_format``),
``elements`` (element types and numpy dtypes), ``state`` (the dataclasses), ``reader``, ``writer``.
"""
from ort_cffi._backends.engine.checkpoint_codec.layout import CheckpointInputError
from ort_cffi._backends.engine.checkpoint_codec.reader import (
    CheckpointIndex,
    StoredTensor,
    index_checkpoint,
    read_checkpoint,
)
from ort_cffi._backends.engine.checkpoint_codec.state import (
    Checkpoint,
    CheckpointFormatError,
    OptimizerGroup,
)
from ort_cffi._backends.engine.checkpoint_codec.writer import checkpoint_bytes, write_checkpoint

__all__ = ["Checkpoint", "CheckpointFormatError", "CheckpointIndex", "CheckpointInputError", "OptimizerGroup",
           "StoredTensor", "checkpoint_bytes", "index_checkpoint", "read_checkpoint", "write_checkpoint"]
