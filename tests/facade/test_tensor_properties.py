"""Property-based tests (hypothesis) of tensor creation and round trips.

Over every supported dtype (float32/64/16, int8..64, uint8..64, bool), shapes of rank 0 to 4 with
zero-sized dimensions, and strided, reversed, transposed, Fortran-ordered, unaligned and byte-swapped
views: ``createTensor`` then ``getValue`` gives back the same values, dtype and shape; so does a trip
through the runtime (an Identity model run by ``OrtSession``, whose output the runtime allocates);
``createTensor(env, data, shape)`` reshapes; parameter buffers round trip bit for bit; a strided view
as a step input gives the contiguous copy's result. A wrong pointer or length here is a crash, so the
hypothesis searches run in a child process (``_childcases``).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from _childcases import artifact_session, case, cases, check
from conftest import tiny_batch
from ort_cffi import OnnxTensor, OnnxTensorType, OrtEnvironment, OrtException

T = OnnxTensorType
DTYPES = {
    np.dtype(np.float32): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    np.dtype(np.float64): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
    np.dtype(np.float16): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    np.dtype(np.int8): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    np.dtype(np.int16): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    np.dtype(np.int32): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    np.dtype(np.int64): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    np.dtype(np.uint8): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    np.dtype(np.uint16): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
    np.dtype(np.uint32): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
    np.dtype(np.uint64): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
    np.dtype(np.bool_): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
}
ONNX_ELEM = {  # onnx.TensorProto element types (the same numbers as ONNXTensorElementDataType)
    dtype: int(onnx_type) for dtype, onnx_type in DTYPES.items()
}
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)

dtypes = st.sampled_from(list(DTYPES))
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


@st.composite
def arrays(draw, shape=shapes):
    dtype = draw(dtypes)
    return draw(hnp.arrays(dtype, draw(shape) if not isinstance(shape, tuple) else shape))


@st.composite
def views(draw):
    """A view of an array in some other memory layout than C-contiguous, or byte order."""
    base = draw(arrays(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6)))
    index = []
    for size in base.shape:
        step = draw(st.sampled_from([1, 2, 3, -1, -2]))
        start = draw(st.integers(0, max(size - 1, 0)))
        index.append(slice(start if step > 0 else None, None, step))
    view = base[tuple(index)]
    if draw(st.booleans()):
        view = view.transpose(draw(st.permutations(range(view.ndim))))
    layout = draw(st.sampled_from(["as is", "fortran", "byteswapped", "unaligned", "broadcast"]))
    if layout == "fortran":
        view = np.asfortranarray(view)
    elif layout == "byteswapped" and view.dtype.itemsize > 1:
        view = view.astype(view.dtype.newbyteorder(">" if view.dtype.byteorder in "=<" else "<"))
    elif layout == "unaligned" and view.dtype.itemsize > 1:
        raw = np.zeros(view.nbytes + 1, np.uint8)
        unaligned = np.frombuffer(raw.data, view.dtype, count=view.size, offset=1).reshape(view.shape)
        unaligned[...] = view
        view = unaligned
    elif layout == "broadcast" and view.ndim and view.shape[-1] > 0:
        view = np.broadcast_to(view[..., :1], view.shape[:-1] + (3,))  # stride 0, read-only
    return view


def same(got: np.ndarray, expected: np.ndarray) -> None:
    """Same dtype (native byte order), shape and bits."""
    native = expected.dtype.newbyteorder("=")
    assert got.dtype == native, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.tobytes() == np.ascontiguousarray(expected, dtype=native).tobytes()


# --- createTensor / getValue -------------------------------------------------------------------------


@settings(max_examples=300, **SETTINGS)
@given(array=arrays())
def _roundtrip_contiguous(array: np.ndarray) -> None:
    env = OrtEnvironment.getEnvironment()
    original = array.copy()
    with OnnxTensor.createTensor(env, array) as tensor:
        info = tensor.getInfo()
        assert info.onnxType == DTYPES[array.dtype]
        assert tuple(info.shape) == array.shape
        got = tensor.getValue()
        same(got, original)
        if got.size:  # what getValue hands out is the caller's copy
            got[...] = ~got if got.dtype == np.bool_ else np.ones_like(got)
            same(tensor.getValue(), original)
    with pytest.raises(OrtException):
        tensor.getValue()


@settings(max_examples=300, **SETTINGS)
@given(view=views())
def _roundtrip_views(view: np.ndarray) -> None:
    env = OrtEnvironment.getEnvironment()
    expected = np.array(view, copy=True)
    with OnnxTensor.createTensor(env, view) as tensor:
        assert tuple(tensor.getInfo().shape) == view.shape
        assert tensor.getInfo().onnxType == DTYPES[view.dtype.newbyteorder("=")]
        same(tensor.getValue(), expected)


@settings(max_examples=200, **SETTINGS)
@given(dtype=dtypes, shape=shapes, data=st.data())
def _create_with_a_shape(dtype, shape, data) -> None:
    env = OrtEnvironment.getEnvironment()
    size = int(np.prod(shape, dtype=np.int64))
    flat = data.draw(hnp.arrays(dtype, (size,)))
    with OnnxTensor.createTensor(env, flat, list(shape)) as tensor:
        assert tuple(tensor.getInfo().shape) == tuple(shape)
        same(tensor.getValue(), flat.reshape(shape))
    wrong = tuple(shape) + (2,) if size else (size + 1,)
    with pytest.raises(ValueError):
        OnnxTensor.createTensor(env, flat, wrong)


# --- a trip through the runtime: Identity, output allocated by ORT ---------------------------------

_IDENTITY: dict = {}


def identity_session(dtype: np.dtype):
    if dtype not in _IDENTITY:
        import onnx
        from onnx import helper

        x = helper.make_tensor_value_info("x", ONNX_ELEM[dtype], None)  # any rank, any shape
        y = helper.make_tensor_value_info("y", ONNX_ELEM[dtype], None)
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        _IDENTITY[dtype] = OrtEnvironment.getEnvironment().createSession(model.SerializeToString())
    return _IDENTITY[dtype]


@settings(max_examples=250, **SETTINGS)
@given(value=st.one_of(arrays(), views()))
def _roundtrip_through_the_runtime(value: np.ndarray) -> None:
    env = OrtEnvironment.getEnvironment()
    dtype = value.dtype.newbyteorder("=")
    expected = np.array(value, copy=True)
    session = identity_session(dtype)
    for given_as in ("array", "tensor"):
        tensor = OnnxTensor.createTensor(env, value) if given_as == "tensor" else None
        try:
            if value.size == 0:  # ONNX Runtime crashes on empty inputs in common operators: refused
                with pytest.raises(OrtException, match="zero-sized dimension"):
                    session.run({"x": tensor if tensor is not None else value})
                continue
            with session.run({"x": tensor if tensor is not None else value}) as result:
                output = result["y"]
                info = output.getInfo()
                assert info.onnxType == DTYPES[dtype] and tuple(info.shape) == value.shape
                same(output.getValue(), expected)
        finally:
            if tensor is not None:
                tensor.close()


# --- parameters and steps ----------------------------------------------------------------------------


@settings(max_examples=15, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), trainable=st.booleans())
def _parameter_buffer_roundtrip(seed: int, trainable: bool) -> None:
    with artifact_session("tiny", eval=False, optim=False) as session:
        size = session.getParametersSize(trainable)
        bits = np.random.default_rng(seed).integers(0, 2**32, size, dtype=np.uint32)
        buffer = bits.view(np.float32)  # every float32 bit pattern: NaNs, infinities, denormals
        session.copyBufferToParameters(buffer, trainable)
        assert session.copyParametersToBuffer(trainable).view(np.uint32).tobytes() == bits.tobytes()


_STEP: dict = {}


@settings(max_examples=40, **SETTINGS)
@given(
    batch=st.integers(1, 6),
    row_step=st.sampled_from([1, 2, -1, -3]),
    col_step=st.sampled_from([1, 2, -1]),
    fortran=st.booleans(),
    seed=st.integers(0, 1000),
)
def _strided_step_inputs(batch, row_step, col_step, fortran, seed) -> None:
    if "session" not in _STEP:
        _STEP["session"] = artifact_session("tiny", optim=False)
    session = _STEP["session"]
    data = tiny_batch(batch=batch, seed=seed)
    rows, cols = batch * abs(row_step), 784 * abs(col_step)
    base = np.zeros((rows, cols), np.float32)
    row_index = slice(None, None, row_step)
    col_index = slice(None, None, col_step)
    base[row_index, col_index][: batch, :784] = data["input"]
    view = base[row_index, col_index][:batch, :784]
    if fortran:
        view = np.asfortranarray(view)
    assert np.array_equal(view, data["input"])
    for step in (session.trainStep, session.evalStep):
        with step(data) as expected, step({"input": view, "labels": data["labels"]}) as got:
            np.testing.assert_allclose(got[0].getValue(), expected[0].getValue(), rtol=1e-6)


# --- the cases (each a whole hypothesis search, in the child) --------------------------------------


@case
def create_tensor_round_trips_every_dtype_and_shape() -> None:
    _roundtrip_contiguous()


@case
def create_tensor_round_trips_strided_and_odd_layouts() -> None:
    _roundtrip_views()


@case
def create_tensor_with_an_explicit_shape() -> None:
    _create_with_a_shape()


@case
def values_round_trip_through_the_runtime() -> None:
    try:
        _roundtrip_through_the_runtime()
    finally:
        for session in _IDENTITY.values():
            session.close()
        _IDENTITY.clear()


@case
def parameter_buffers_round_trip_bit_for_bit() -> None:
    _parameter_buffer_roundtrip()


@case
def strided_step_inputs_match_contiguous_ones() -> None:
    try:
        _strided_step_inputs()
    finally:
        if "session" in _STEP:
            _STEP.pop("session").close()


@pytest.mark.parametrize("name", cases(__name__))
def test_tensor_properties(name: str, request) -> None:
    check(__name__, name, timeout=400, request=request)
