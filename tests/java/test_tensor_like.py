"""``OnnxTensorLike``, Java's type of the steps' input values: importable from ``ort_cffi`` and true, by
``isinstance``, for exactly the kinds of value the steps accept."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import DIGITS
from ort_cffi import OnnxTensor, OnnxTensorLike, OnnxValue, OrtEnvironment


def test_onnx_tensor_like_is_what_the_steps_take() -> None:
    with OnnxTensor.createTensor(None, np.zeros((2, 64), np.float32)) as tensor:
        assert isinstance(tensor, OnnxTensorLike)
    for value in (np.zeros(3, np.float32), np.float32(1.5), np.int64(3), np.array(["a"])):
        assert isinstance(value, OnnxTensorLike), type(value)
    for value in (1.5, 3, [1.0, 2.0], "text", None, b"raw"):
        assert not isinstance(value, OnnxTensorLike), type(value)  # the steps refuse these
    assert issubclass(OnnxTensor, OnnxTensorLike) and not issubclass(OnnxValue, OnnxTensorLike)
    with pytest.raises(TypeError, match="not a class to instantiate"):
        OnnxTensorLike()


def test_a_step_takes_every_kind_of_onnx_tensor_like() -> None:
    """Each registered kind passes a real evalStep: the type does not promise more than the steps keep."""
    env = OrtEnvironment.getEnvironment()
    images = np.zeros((2, 64), np.float32)
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as session, \
            OnnxTensor.createTensor(env, images) as tensor:
        for value in (tensor, images):
            inputs = {"input": value, "labels": np.zeros(2, np.int64)}
            assert all(isinstance(v, OnnxTensorLike) for v in inputs.values())
            with session.evalStep(inputs) as result:
                assert result.size() == 2
