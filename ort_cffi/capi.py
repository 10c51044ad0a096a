"""The raw layer: ONNX Runtime's C API tables, for direct calls from Python.

    from ort_cffi.capi import ffi, get_runtime, training_table
    rt = get_runtime()
    status = training_table().SetSeed(42)     # an OrtStatus*, NULL on success

``ffi`` holds the declarations of ``OrtApiBase``, ``OrtApi`` (API version 19, every slot in order)
and ``OrtTrainingApi`` (all 33 slots), with the C headers' typedef names. ``get_runtime()`` loads
the runtime once per process (``ort_cffi/_native/loader.py`` says where it comes from) and checks,
before the tables are used, that its version has the layout declared here.

``rt.training_api`` is the training build's own ``OrtTrainingApi`` table, or None on an inference build;
``training_table()`` is the table of the process's backend: that one, or ort_cffi's engine's, which keeps the same
33 functions with the same C signatures over the inference API (``ort_cffi.backend()`` says which).

Every non-NULL ``OrtStatus*`` a raw call returns is the caller's to release
(``rt.api.ReleaseStatus``); ``check_status`` reads, releases and raises it in one go.

This module is the public face of ``ort_cffi._native.tables``, where the work is done.
"""
from ort_cffi._backends import training_table
from ort_cffi._native.tables import API_VERSION, Runtime, check_status, ffi, get_runtime, load_runtime

__all__ = ["ffi", "get_runtime", "load_runtime", "Runtime", "check_status", "API_VERSION", "training_table"]
