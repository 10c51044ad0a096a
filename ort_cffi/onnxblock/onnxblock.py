"""``ForwardBlock`` (a block whose outputs become the model's outputs: the optimizer blocks) and
``TrainingBlock`` (a block whose first output is the loss, on which the training and eval models are built),
as in ONNX Runtime's onnxblock, with ort_cffi's own gradient builder (``ort_cffi.artifacts.builder``) in
place of ONNX Runtime's C++ one.

The training model is ONNX Runtime's form: every parameter a graph input, the gradient graph seeded at the
loss, and for each trainable parameter an InPlaceAccumulatorV2 into its ``<name>_grad.accumulation.buffer``
(reset by ``lazy_reset_grad``). What the builder does not know is refused with the operator named
(``ort_cffi.artifacts.builder.context.BuilderError``); ``ort_cffi.artifacts.generate_artifacts`` also
prepares a model first (docs/guides/artifacts.md), which a ``TrainingBlock`` called directly does not.
"""
from __future__ import annotations

import logging
from abc import abstractmethod
from typing import Any, List, Optional, Set, Tuple

import onnx

from ort_cffi.artifacts.builder.training_model import build_models
from ort_cffi.onnxblock import _graph_utils, blocks, model_accessor

_log = logging.getLogger(__name__)


class ForwardBlock(blocks.Block):
    """A block whose ``build`` returns the names that become the model's outputs; ``to_model_proto()`` gives
    the model then (the optimizer blocks are ForwardBlocks, built on ``onnxblock.empty_base()``)."""

    def __init__(self) -> None:
        super().__init__()
        self._model: Optional[onnx.ModelProto] = None

    @abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Add the block's nodes; return the names of the model's outputs."""

    def to_model_proto(self) -> onnx.ModelProto:
        """The model the call built; RuntimeError before the block was called."""
        if self._model is None:
            raise RuntimeError("Please build the forward models first before trying to retrieve it.")
        return self._model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accessor = model_accessor.current()
        self.base = accessor.model
        _log.debug("Building forward block %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        self._model = self.infer_shapes_on_base()
        _graph_utils.register_graph_outputs(self._model, output)
        accessor.model.CopyFrom(self._model)
        return output


class TrainingBlock(blocks.Block):
    """A block whose ``build`` returns the loss's name (then any other outputs to keep): calling it builds
    the training model (the gradients of the parameters marked ``requires_grad`` from the loss) and the eval
    model. ``parameters()`` and ``to_model_proto()`` give them afterwards."""

    def __init__(self) -> None:
        super().__init__()
        self._requires_grad: Set[str] = set()
        self._frozen_params: Set[str] = set()
        self._parameters: Optional[Tuple[List[onnx.TensorProto], List[onnx.TensorProto]]] = None
        self._training_model: Optional[onnx.ModelProto] = None
        self._eval_model: Optional[onnx.ModelProto] = None

    @abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Add the loss (and whatever it needs) on top of the model; return the loss's name first."""

    def requires_grad(self, argument_name: str, value: bool = True) -> None:
        """Mark the initializer ``argument_name`` trainable (``value`` True) or frozen (False: kept in the
        checkpoint, not trained). None is trainable until marked."""
        if value is True:
            self._requires_grad.add(argument_name)
            self._frozen_params.discard(argument_name)
        else:
            self._requires_grad.discard(argument_name)
            self._frozen_params.add(argument_name)

    def parameters(self) -> Tuple[List[onnx.TensorProto], List[onnx.TensorProto]]:
        """(trainable, frozen) initializers of the model, as the call found them; RuntimeError before."""
        if self._parameters is None:
            raise RuntimeError("Please build the training model first before trying to retrieve the parameters.")
        return self._parameters

    def to_model_proto(self) -> Tuple[onnx.ModelProto, onnx.ModelProto]:
        """(training model, eval model); RuntimeError before the block was called."""
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError("Please build the training and eval models first before trying to retrieve them.")
        return self._training_model, self._eval_model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accessor = model_accessor.current()
        self.base = accessor.model
        _log.debug("Building training block %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        model = self.infer_shapes_on_base()
        _graph_utils.register_graph_outputs(model, output)
        # Names that are no initializer (a buffer the exporter computes, a typo) mark nothing, as in ONNX Runtime;
        # a graph input marked requires_grad gets its gradient (and accumulation buffer) without being a parameter.
        initializers = [i.name for i in model.graph.initializer]
        trainable = [name for name in initializers if name in self._requires_grad]
        frozen = [name for name in initializers if name in self._frozen_params]
        inputs = [v.name for v in model.graph.input if v.name in self._requires_grad and v.name not in initializers]
        by_name = {i.name: i for i in model.graph.initializer}
        self._parameters = ([by_name[n] for n in trainable], [by_name[n] for n in frozen])
        _log.debug("Building gradient graph for training block %s", type(self).__name__)
        built = build_models(model, inputs + trainable, frozen, None)
        for made in (built.training, built.eval):
            made.ir_version = min(made.ir_version, model_accessor.MAX_IR_VERSION)
        self._training_model, self._eval_model = built.training, built.eval
        accessor.model.CopyFrom(built.training)
        return output
