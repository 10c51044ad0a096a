"""Sessions: options, input signatures, results, ``OrtSession``, ``OrtCheckpointState``, the step engine,
``OrtTrainingSession`` and ``OrtEnvironment``. Imports the native layer and ``tensors``."""
