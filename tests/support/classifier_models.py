"""Small classifiers written with onnx.helper, as a user would export them, for the trainer's data-source tests:
a CNN over images (channels first, or last through a Transpose), an MLP over tabular features, and a text
classifier (Embedding, mean over the tokens, Gemm) with a fixed sequence length."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _weights(name: str, shape: "tuple[int, ...]", seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array((np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32), name)


def _zeros(name: str, size: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.zeros(size, np.float32), name)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def cnn(path: Path, classes: int, channels: int = 3, size: int = 8, channels_last: bool = False) -> Path:
    """Conv 3x3, ReLU, global average pool, Gemm: input 'image' [N, C, H, W] (or [N, H, W, C])."""
    shape: List = ["N", size, size, channels] if channels_last else ["N", channels, size, size]
    nodes, first = [], "image"
    if channels_last:
        nodes.append(helper.make_node("Transpose", ["image"], ["nchw"], perm=[0, 3, 1, 2]))
        first = "nchw"
    nodes += [helper.make_node("Conv", [first, "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("GlobalAveragePool", ["r"], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    weights = [_weights("conv.weight", (6, channels, 3, 3), 1), _zeros("conv.bias", 6),
               _weights("fc.weight", (classes, 6), 2), _zeros("fc.bias", classes)]
    return _save(helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
                                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
                                   weights), path)


def mlp(path: Path, features: int, classes: int, hidden: int = 16) -> Path:
    """Gemm, ReLU, Gemm: input 'features' [N, F]."""
    nodes = [helper.make_node("Gemm", ["features", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Gemm", ["a", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    weights = [_weights("fc1.weight", (hidden, features), 3), _zeros("fc1.bias", hidden),
               _weights("fc2.weight", (classes, hidden), 4), _zeros("fc2.bias", classes)]
    return _save(helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", features])],
                                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
                                   weights), path)


def text_classifier(path: Path, vocabulary: int, length: int, classes: int, dim: int = 8,
                    float_ids: bool = False) -> Path:
    """Embedding (a Gather of token ids), mean over the tokens, Gemm: input 'tokens' int64 [N, length], or float32
    cast to int64 first (``float_ids``, as Keras models converted by tf2onnx take token ids)."""
    nodes = [helper.make_node("Cast", ["tokens"], ["ids"], to=TensorProto.INT64)] if float_ids else []
    nodes += [helper.make_node("Gather", ["embedding.weight", "ids" if float_ids else "tokens"], ["e"]),
             helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Gemm", ["m", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    weights = [_weights("embedding.weight", (vocabulary, dim), 5), _weights("fc.weight", (classes, dim), 6),
               _zeros("fc.bias", classes)]
    ids_type = TensorProto.FLOAT if float_ids else TensorProto.INT64
    return _save(helper.make_graph(nodes, "text", [helper.make_tensor_value_info("tokens", ids_type, ["N", length])],
                                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
                                   weights), path)


def initializers(path: Path) -> "dict[str, np.ndarray]":
    """The model's initializers by name (to tell whether training changed them)."""
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
