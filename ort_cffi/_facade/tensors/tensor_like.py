"""``OnnxTensorLike``: Java's name for what a step or a run takes as an input.

In Java, ``OnnxTensorLike`` is the abstract class of ``OnnxTensor`` and ``OnnxSparseTensor``, and the
input maps of ``trainStep``, ``evalStep`` and ``run`` are ``Map<String, ? extends OnnxTensorLike>``.
ort_cffi's steps and runs take an ``OnnxTensor``, a numpy array or a numpy scalar (``inputs.py`` wraps the
last two for the call), so ``OnnxTensorLike`` is an abstract base class with these three registered: a
port's ``isinstance(value, OnnxTensorLike)`` answers what the steps accept, without ort_cffi's tensors
inheriting from numpy or numpy's from ort_cffi. It is kept apart from ``tensor.py`` because it names
numpy types too, and so that code checking an input need not import the tensor machinery.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from ort_cffi._facade.tensors.tensor import OnnxTensor


class OnnxTensorLike(abc.ABC):
    """What a step or a run takes as an input value: an `OnnxTensor`, a numpy array or a numpy scalar.

    Java: `abstract class OnnxTensorLike` (the type of the input maps of `trainStep`, `evalStep` and
    `run`: `Map<String, ? extends OnnxTensorLike>`). In ort_cffi an abstract base class for
    `isinstance` and `issubclass` only: `OnnxTensor`, `numpy.ndarray` and `numpy.generic` are
    registered with it, so `isinstance(value, OnnxTensorLike)` is True exactly for the kinds of
    value a step accepts (whether one fits a given input is checked by the step). It cannot be
    instantiated. Type checkers do not follow registrations: annotate inputs with
    `Mapping[str, Any]`, as ort_cffi's own signatures do, or with
    `Union[OnnxTensor, numpy.ndarray, numpy.generic]`.

    Raises:
        TypeError: On an attempt to instantiate it.
    """

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> OnnxTensorLike:
        raise TypeError("OnnxTensorLike is a type to test values against (isinstance), not a class to instantiate: "
                        "make an OnnxTensor with OnnxTensor.createTensor, or pass a numpy array")


OnnxTensorLike.register(OnnxTensor)
OnnxTensorLike.register(np.ndarray)
OnnxTensorLike.register(np.generic)  # type: ignore[type-abstract]  # numpy scalars: abstract for mypy, real at run time
