"""Tensors: the element-type catalogue, conversions between Python data and arrays, ``TensorInfo``,
``OnnxValue``/``OnnxTensor`` and what runs and steps do with their outputs. Imports only the native layer."""
