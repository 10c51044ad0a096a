"""A loss block stacked on a model, as ``generate_artifacts`` takes a custom loss (``loss=MyLoss()``, a
``Block``): the model with the block's nodes added and its outputs made the loss, then the outputs asked to be
kept. ``generate_artifacts`` then builds on it as on a model whose first output is the loss (``loss=None``)."""
from __future__ import annotations

from typing import Optional, Sequence

import onnx

from ort_cffi.onnxblock import _graph_utils, blocks, model_accessor


def stack_loss(model: onnx.ModelProto, loss: blocks.Block, loss_input_names: Optional[Sequence[str]] = None,
               additional_output_names: Optional[Sequence[str]] = None,
               model_path: Optional[str] = None) -> onnx.ModelProto:
    """``model`` (left unchanged) with ``loss`` called on its outputs (or on ``loss_input_names``) and the
    graph's outputs made the block's outputs, then ``additional_output_names``: ONNX Runtime's generator
    hands its training block exactly that. Names count from 1, as in a fresh process (docs/guides/artifacts.md:
    the generator is deterministic)."""
    if not isinstance(loss, blocks.Block):
        raise TypeError(f"loss must be an onnxblock.Block, not {type(loss).__name__}")
    _graph_utils.restart_names()
    with model_accessor.base(model, model_path) as accessor:
        inputs = list(loss_input_names) if loss_input_names else [o.name for o in model.graph.output]
        outputs = blocks.names(loss(*inputs)) + list(additional_output_names or [])
        stacked = onnx.shape_inference.infer_shapes(accessor.model)
    _graph_utils.register_graph_outputs(stacked, outputs)
    return stacked
