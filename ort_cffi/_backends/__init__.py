"""Backends: what runs a training session below the one facade.

- the training C API of a training build of ONNX Runtime (1.19.2, the last one): its ``OrtTrainingApi`` table;
- ``engine``: ort_cffi's own training engine over the inference C API (``OrtApi`` alone), for every build ONNX
  Runtime ships now. It offers the same ``OrtTrainingApi`` contract, so the facade above is written once.
"""
