"""ONNX Runtime's training checkpoint format, for the applications that write or read checkpoint files
themselves: the layout writer that ort_cffi's artifact builder shares with the training engine (one writer,
byte for byte ONNX Runtime's), and the engine's reader. Handed up on purpose from the backend layer
(``ort_cffi._backends.engine.checkpoint_codec``), so that no application imports below the facade."""
from ort_cffi._backends.engine.checkpoint_codec import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointIndex,
    OptimizerGroup,
    StoredTensor,
    index_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from ort_cffi._backends.engine.checkpoint_codec.flatbuffer import BulkSource
from ort_cffi._backends.engine.checkpoint_codec.layout import (
    EXTERNAL_DATA_THRESHOLD,
    GENERATOR_EXTERNAL_MINIMUM,
    MIB,
    CheckpointInputError,
    CheckpointPlan,
    ExternalData,
    PropertyValue,
    TensorRecord,
    check_properties,
    plan_checkpoint,
    write_plan,
)

__all__ = ["EXTERNAL_DATA_THRESHOLD", "GENERATOR_EXTERNAL_MINIMUM", "MIB", "BulkSource", "Checkpoint",
           "CheckpointFormatError", "CheckpointIndex", "CheckpointInputError", "CheckpointPlan", "ExternalData",
           "OptimizerGroup", "PropertyValue", "StoredTensor", "TensorRecord", "check_properties", "index_checkpoint",
           "plan_checkpoint", "read_checkpoint", "write_checkpoint", "write_plan"]
