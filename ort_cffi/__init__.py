"""ort_cffi: ONNX Runtime training from Python."""
