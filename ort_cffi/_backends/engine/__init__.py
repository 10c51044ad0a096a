"""ort_cffi's training engine over ONNX Runtime's inference C API: the ``OrtTrainingApi`` contract kept by
inference sessions, with the training models' ``com.microsoft`` training operators lowered to standard ones
(``lowering``), and checkpoints read and written in ONNX Runtime's format (``checkpoint_codec``).
"""
