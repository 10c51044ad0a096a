"""The building blocks: ``Block``, the base of every block, and the operators ONNX Runtime's onnxblock offers
as blocks, node for node as it adds them (the same operators, attributes and ``onnx::<token>::<n>`` names).

A block changes the registered model (``model_accessor.base``) when called, and returns the names of the
values it computed; ``build`` says what it adds. After each call the model is checked by onnx's checker.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ort_cffi.onnxblock import _graph_utils, model_accessor

_log = logging.getLogger(__name__)


class Block(ABC):
    """The base of every block: subclasses implement ``build``, which adds nodes to ``self.base`` (the
    registered model) and returns the names of the values it computed; calling the block runs ``build`` on
    the registered model and checks the result with onnx's checker.

    ``temp_file_name`` is accepted for ONNX Runtime's signature (it saves models with external data there
    to check them); ort_cffi checks the model in memory.
    """

    def __init__(self, temp_file_name: str = "temp.onnx") -> None:
        if os.path.isabs(temp_file_name):
            raise RuntimeError("Please pass in a relative path for the temp_file_name.")
        self.base: Optional[onnx.ModelProto] = None
        self.temp_onnx_file_path = os.path.join(os.getcwd(), temp_file_name)
        self.temp_external_data_file_name = temp_file_name + ".data"

    @abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Add this block's nodes to ``self.base`` and return the names of the values it computed."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.base = model_accessor.current().model
        _log.debug("Building block: %s", type(self).__name__)
        output = self.build(*args, **kwargs)
        onnx.checker.check_model(self.base, True)
        return output

    def infer_shapes_on_base(self) -> onnx.ModelProto:
        """The registered model with the value_info onnx's shape inference adds (a new ModelProto)."""
        return onnx.shape_inference.infer_shapes(model_accessor.current().model)


class _BinaryOp(Block):
    def __init__(self, op_name: str) -> None:
        super().__init__()
        self._op_name = op_name

    def build(self, input_name1: str, input_name2: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        output = _graph_utils.generate_graph_name(f"{self._op_name.lower()}_output")
        node = helper.make_node(self._op_name, [input_name1, input_name2], [output],
                                name=_graph_utils.generate_graph_name(self._op_name))
        _model(self).graph.node.append(node)
        return output


class Add(_BinaryOp):
    """``Add(a, b)``."""

    def __init__(self) -> None:
        super().__init__("Add")


class Sub(_BinaryOp):
    """``Sub(a, b)``."""

    def __init__(self) -> None:
        super().__init__("Sub")


class Mul(_BinaryOp):
    """``Mul(a, b)``."""

    def __init__(self) -> None:
        super().__init__("Mul")


class Div(_BinaryOp):
    """``Div(a, b)``."""

    def __init__(self) -> None:
        super().__init__("Div")


class Pow(Block):
    """``Pow(x, exponent)``, the exponent a float initializer of shape [1]."""

    def __init__(self, exponent: float) -> None:
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = _model(self)
        exponent = _graph_utils.generate_graph_name("pow_exponent")
        model.graph.initializer.append(helper.make_tensor(exponent, onnx.TensorProto.FLOAT, [1], [self._exponent]))
        output = _graph_utils.generate_graph_name("pow_output")
        model.graph.node.append(helper.make_node("Pow", [pow_input_name, exponent], [output],
                                                 name=_graph_utils.generate_graph_name("Pow")))
        return output


class _UnaryOp(Block):
    def __init__(self, op_name: str, **attributes: Any) -> None:
        super().__init__()
        self._op_name = op_name
        self._attributes = attributes

    def build(self, input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        output = _graph_utils.generate_graph_name(f"{self._op_name.lower()}_output")
        node = helper.make_node(self._op_name, [input_name], [output], _graph_utils.generate_graph_name(self._op_name),
                                **self._attributes)
        _model(self).graph.node.append(node)
        return output


class ReduceMean(_UnaryOp):
    """``ReduceMean(x)`` over every axis."""

    def __init__(self, keepdims: bool = True) -> None:
        super().__init__("ReduceMean", keepdims=keepdims)


class ReduceSum(_UnaryOp):
    """``ReduceSum(x)`` over every axis."""

    def __init__(self, keepdims: bool = True) -> None:
        super().__init__("ReduceSum", keepdims=keepdims)


class Sigmoid(_UnaryOp):
    """``Sigmoid(x)``."""

    def __init__(self) -> None:
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    """``Log(x)``."""

    def __init__(self) -> None:
        super().__init__("Log")


class Neg(_UnaryOp):
    """``Neg(x)``."""

    def __init__(self) -> None:
        super().__init__("Neg")


class Abs(_UnaryOp):
    """``Abs(x)``."""

    def __init__(self) -> None:
        super().__init__("Abs")


class Constant(Block):
    """A float initializer of shape [1] holding ``value_float``; returns its name."""

    def __init__(self, value_float: float) -> None:
        super().__init__()
        self._value = value_float

    def build(self) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        name = _graph_utils.generate_graph_name("initializer")
        _model(self).graph.initializer.append(helper.make_tensor(name, onnx.TensorProto.FLOAT, [1], [self._value]))
        return name


class SequenceConstruct(Block):
    """``SequenceConstruct(x1, x2, ...)``."""

    def build(self, *sequence_input_names: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        output = _graph_utils.generate_graph_name("sequenceconstruct_output")
        _model(self).graph.node.append(helper.make_node("SequenceConstruct", list(sequence_input_names), [output],
                                                        _graph_utils.generate_graph_name("SequenceConstruct")))
        return output


class ReduceAllL2(Block):
    """``com.microsoft::ReduceAllL2(x1, x2, ...)``: the L2 norm of all the tensors together, of shape [1]."""

    def build(self, *reduce_node_input_names: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = _model(self)
        output = _graph_utils.generate_graph_name("reducealll2_output")
        model.graph.node.append(helper.make_node("ReduceAllL2", list(reduce_node_input_names), [output],
                                                 _graph_utils.generate_graph_name("ReduceAllL2"), domain="com.microsoft"))
        # onnx's shape inference knows no com.microsoft operator: declared here
        model.graph.value_info.append(helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, [1]))
        return output


class Clip(Block):
    """``Clip(x, min, max)``, the bounds float initializers where given."""

    def __init__(self, clip_min: Optional[float] = None, clip_max: Optional[float] = None) -> None:
        super().__init__()
        self._min = clip_min
        self._max = clip_max

    def build(self, clip_input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = _model(self)
        bounds = []
        for token, value in (("clip_min", self._min), ("clip_max", self._max)):
            name = ""
            if value is not None:
                name = _graph_utils.generate_graph_name(token)
                model.graph.initializer.append(helper.make_tensor(name, onnx.TensorProto.FLOAT, [1], [value]))
            bounds.append(name)
        output = _graph_utils.generate_graph_name("clip_output")
        model.graph.node.append(helper.make_node("Clip", [clip_input_name, *bounds], [output],
                                                 _graph_utils.generate_graph_name("Clip")))
        return output


class PassThrough(Block):
    """Adds nothing: returns its inputs (the loss of a model whose output is the loss already)."""

    def __init__(self, **_: Any) -> None:  # accepts the keepdims the reductions take, as a reduction="none" stand-in
        super().__init__()

    def build(self, *input_names: str) -> Any:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        return input_names


class InputLike(Block):
    """A graph input typed like the graph input or output ``like``; returns its name (``input_name`` or a
    fresh one)."""

    def __init__(self, like: str) -> None:
        super().__init__()
        self._like = like

    def build(self, input_name: Optional[str] = None) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = _model(self)
        cloned = None
        with contextlib.suppress(LookupError):
            cloned = copy.deepcopy(_graph_utils.get_input_from_input_name(model, self._like))
        if cloned is None:
            with contextlib.suppress(LookupError):
                cloned = copy.deepcopy(_graph_utils.get_output_from_output_name(model, self._like))
        if cloned is None:
            raise LookupError(f"Could not find input or output with name {self._like}")
        cloned.name = input_name or _graph_utils.generate_graph_name("input")
        model.graph.input.append(cloned)
        return cloned.name


class LabelEncoder(Block):
    """``ai.onnx.ml::LabelEncoder`` with the given defaults, keys and values."""

    def __init__(self, default_float: float = 0.0, default_int64: int = -1, default_string: str = "_Unused",
                 keys_floats: Optional[List[float]] = None, keys_int64s: Optional[List[int]] = None,
                 keys_strings: Optional[List[str]] = None, values_floats: Optional[List[float]] = None,
                 values_int64s: Optional[List[int]] = None, values_strings: Optional[List[str]] = None) -> None:
        super().__init__()
        self._attributes: Dict[str, Any] = {"default_float": default_float, "default_int64": default_int64,
                                            "default_string": default_string}
        given = {"keys_floats": keys_floats, "keys_int64s": keys_int64s, "keys_strings": keys_strings,
                 "values_floats": values_floats, "values_int64s": values_int64s, "values_strings": values_strings}
        self._attributes.update({name: value for name, value in given.items() if value is not None})

    def build(self, label_encoder_input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        output = _graph_utils.generate_graph_name("label_encoder.output")
        _model(self).graph.node.append(helper.make_node(
            "LabelEncoder", [label_encoder_input_name], [output], _graph_utils.generate_graph_name("LabelEncoder"),
            domain="ai.onnx.ml", **self._attributes))
        return output


class Cast(Block):
    """``Cast(x, to)``."""

    def __init__(self, to: int) -> None:
        super().__init__()
        self._to = to

    def build(self, cast_input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        output = _graph_utils.generate_graph_name("cast.output")
        _model(self).graph.node.append(helper.make_node("Cast", [cast_input_name], [output],
                                                        _graph_utils.generate_graph_name("Cast"), to=self._to))
        return output


class Linear(Block):
    """A fully connected layer, ``Gemm(x, W, b)`` with W [in_features, out_features] and b drawn from a
    standard normal distribution (numpy's global generator, as ONNX Runtime's block draws them)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, alpha: float = 1.0,
                 beta: float = 1.0) -> None:
        super().__init__()
        self._in_features = in_features
        self._out_features = out_features
        self._bias = bias
        self._alpha = alpha
        self._beta = beta

    def build(self, linear_input_name: str) -> str:
        """Add this block's nodes to the registered model; returns the names of what it computed."""
        model = _model(self)
        weight = _graph_utils.generate_graph_name("linear.weight")
        model.graph.initializer.append(numpy_helper.from_array(
            np.random.randn(self._in_features, self._out_features).astype(np.float32), weight))
        inputs = [linear_input_name, weight]
        if self._bias:
            bias = _graph_utils.generate_graph_name("linear.bias")
            model.graph.initializer.append(numpy_helper.from_array(
                np.random.randn(self._out_features).astype(np.float32), bias))
            inputs.append(bias)
        output = _graph_utils.generate_graph_name("linear.output")
        model.graph.node.append(helper.make_node("Gemm", inputs, [output], _graph_utils.generate_graph_name("linear"),
                                                 alpha=self._alpha, beta=self._beta))
        return output


def _model(block: Block) -> onnx.ModelProto:
    """The model ``block`` builds on: set by calling it (``build`` called directly has none)."""
    if block.base is None:
        raise RuntimeError(f"{type(block).__name__}.build() was called directly: call the block itself, inside "
                           "`with onnxblock.base(model):`")
    return block.base


def names(values: Sequence[Any]) -> List[str]:
    """A block's outputs as a list of names (one name, or a tuple of them as PassThrough returns)."""
    return [values] if isinstance(values, str) else list(values)
