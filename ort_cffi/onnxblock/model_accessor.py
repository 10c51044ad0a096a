"""The model the blocks build on: ``base(model)`` and ``empty_base()`` register it for the blocks called
inside the ``with``, as ONNX Runtime's onnxblock does (one at a time, in a module-level slot)."""
from __future__ import annotations

import copy
import os
from contextlib import contextmanager
from typing import Iterator, Optional, Union

import onnx
from onnx import helper

# What ONNX Runtime 1.19 loads: IR version 10 (onnx 1.16's), opsets up to 21.
MAX_IR_VERSION = 10


class ModelAccessor:
    """Holds the model the blocks change (``model``) and the path it was loaded from, if any (``path``)."""

    def __init__(self, model: onnx.ModelProto, model_path: Optional[str] = None) -> None:
        self._model = model
        self._path = model_path

    @property
    def model(self) -> onnx.ModelProto:
        """The model as the blocks have changed it so far."""
        return self._model

    @property
    def path(self) -> str:
        """The path the base model was given with; RuntimeError when it was given as a ModelProto alone."""
        if self._path is None:
            raise RuntimeError("The path to the onnx model was not set: pass it to onnxblock.base(model, model_path).")
        return self._path

    @property
    def has_path(self) -> bool:
        return self._path is not None


_GLOBAL_ACCESSOR: Optional[ModelAccessor] = None
_GLOBAL_CUSTOM_OP_LIBRARY: Optional[str] = None


def current() -> ModelAccessor:
    """The registered model's accessor; a block called outside ``base``/``empty_base`` is told what to do."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError("no base model: call blocks inside `with onnxblock.base(model):` or "
                           "`with onnxblock.empty_base():`")
    return _GLOBAL_ACCESSOR


@contextmanager
def base(model: onnx.ModelProto, model_path: Optional[Union[str, "os.PathLike[str]"]] = None) -> Iterator[ModelAccessor]:
    """Register a copy of ``model`` for the blocks called inside the ``with``; the accessor it yields holds
    the changed model (``.model``). ``model_path``: where the model was loaded from (its external data)."""
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("Base onnx model already exists. Cannot create multiple ModelAccessors.")
    if model is None:
        raise RuntimeError("Base onnx model cannot be None. Please use onnxblock.empty_base if you would like to "
                           "build a model from scratch.")
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"onnxblock.base takes an onnx.ModelProto, not {type(model).__name__} (onnx.load a path first)")
    _GLOBAL_ACCESSOR = ModelAccessor(copy.deepcopy(model), None if model_path is None else os.fspath(model_path))
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = None


@contextmanager
def empty_base(opset_version: Optional[int] = None) -> Iterator[ModelAccessor]:
    """Register an empty model (the default domain at ``opset_version``, default onnx's newest, and
    com.microsoft 1) for the blocks called inside the ``with``; optimizer blocks build on it."""
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("Base onnx model already exists. Cannot create multiple ModelAccessors.")
    model = onnx.ModelProto()
    model.ir_version = min(onnx.IR_VERSION, MAX_IR_VERSION)
    model.producer_name = "orttraining"
    model.graph.name = "graph"
    model.opset_import.extend((helper.make_opsetid("com.microsoft", 1),
                               helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())))
    _GLOBAL_ACCESSOR = ModelAccessor(model, None)
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = None


@contextmanager
def custom_op_library(custom_op_library_path: Union[str, "os.PathLike[str]"]) -> Iterator[str]:
    """ONNX Runtime registers a custom-op library for its gradient builder here. ort_cffi's builder knows the
    standard and com.microsoft operators only, and its sessions load no custom-op libraries: refused."""
    raise NotImplementedError(
        f"onnxblock.custom_op_library({os.fspath(custom_op_library_path)!r}): ort_cffi's gradient builder and "
        "sessions load no custom-op libraries; build the model from standard operators")
    yield ""  # pragma: no cover  (a generator, for contextmanager)
