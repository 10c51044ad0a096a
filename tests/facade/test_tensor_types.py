"""Every element type the runtime has, round trips (hypothesis), the typed getters, Java's
buffer semantics, strings, and Java's conversions checked against known answers.

Oracles, each independent of the code under test: numpy's own float16 conversions (IEEE, round to
nearest even), ``onnx``'s float8 and int4 decoders, the runtime's own ``Cast`` (a value read by
ort_cffi equals what the runtime computes from the same bits), and known answers computed with
OpenJDK (``java.util.SplittableRandom``, and ``ai.onnxruntime.platform.Fp16Conversions``' methods
run on OpenJDK 25, 2026-12-01). Cases that touch native memory run in a child process (``_childcases``).
"""
from __future__ import annotations

import numpy as np
import onnx.helper
import onnx.numpy_helper as onnx_numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from _childcases import case, cases, check
from _java import SplittableRandom
from ort_cffi import (
    Fp16Conversions,
    OnnxJavaType,
    OnnxTensor,
    OnnxTensorType,
    OrtEnvironment,
    OrtException,
    OrtInvalidArgumentException,
    TensorInfo,
)
from ort_cffi._facade.tensors.element_types import BITS_TYPES, NUMPY_DTYPES, byte_size

T = OnnxTensorType
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
FLOAT8 = {  # type: (onnx's decoder's name, fn, uz)
    T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN: ("float8e4m3_to_float32", True, False),
    T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FNUZ: ("float8e4m3_to_float32", True, True),
    T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2: ("float8e5m2_to_float32", False, False),
    T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E5M2FNUZ: ("float8e5m2_to_float32", True, True),
}
# onnx 1.19 removed those decoders and unpack_int4 (the onnx of CPython 3.14 and later is 1.23): there,
# onnx decodes a tensor proto of the raw bytes itself (numpy_helper.to_array, through ml_dtypes).
ONNX_HAS_DECODERS = hasattr(onnx_numpy, "float8e4m3_to_float32") and hasattr(onnx_numpy, "unpack_int4")
shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)


def env():
    return OrtEnvironment.getEnvironment()


def bits_equal(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.dtype, expected.shape)
    assert got.tobytes() == expected.tobytes(), (got, expected)


# --- known answers from OpenJDK (no native code: in this process) -------------------------------------


def test_splittable_random_matches_openjdk() -> None:
    rng = SplittableRandom(1)
    assert [rng.nextInt() for _ in range(8)] == [
        246745853, -1243790691, 634001762, 1796027475, 1225156423, 1261902264, -523164555, -834576102,
    ]
    rng = SplittableRandom(1)
    assert [rng.nextLong(), rng.nextLong()] == [-7995527694508729151, -4689498862643123097]
    rng = SplittableRandom(-7)
    assert [rng.nextInt() for _ in range(3)] == [-669310854, 1294095745, 1138854843]


# fp16 bits -> (mlasFp16ToFloat bits, bf16ToFloat bits), from OpenJDK
FP16_ANSWERS = {
    0x0001: (0x33800000, 0x00010000), 0x03FF: (0x387FC000, 0x03FF0000), 0x0400: (0x38800000, 0x04000000),
    0x3C00: (0x3F800000, 0x3C000000), 0x7BFF: (0x477FE000, 0x7BFF0000), 0x7C00: (0x7F800000, 0x7C000000),
    0x7C01: (0x7F802000, 0x7C010000), 0x7E00: (0x7FC00000, 0x7E000000), 0x8001: (0xB3800000, 0x80010000),
    0xFC00: (0xFF800000, 0xFC000000), 0xFDFF: (0xFFBFE000, 0xFDFF0000),
}
# float bits -> (floatToFp16 as Java <= 19, floatToBf16), from OpenJDK
FLOAT_ANSWERS = {
    0x7F803DF9: (32256, 32704), 0x7F807DFA: (32256, 32704), 0x00014005: (0, 1), 0x0013404D: (0, 19),
    0x445D1170: (25321, 17501), 0x0003BFFF: (0, 4), 0x9EDE9D50: (-32768, -24865), 0x7AFCA44F: (31744, 31485),
}


def test_fp16_conversions_match_openjdk() -> None:
    for half, (as_float, as_bf16_float) in FP16_ANSWERS.items():
        bits = np.int16(np.uint16(half).view(np.int16))
        assert int(np.float32(Fp16Conversions.fp16ToFloat(bits)).view(np.uint32)) == as_float, hex(half)
        assert int(np.float32(Fp16Conversions.bf16ToFloat(bits)).view(np.uint32)) == as_bf16_float, hex(half)
    for float_bits, (fp16, bf16) in FLOAT_ANSWERS.items():
        value = np.array([float_bits], np.uint32).view(np.float32)[0]
        assert Fp16Conversions.floatToFp16(value) == fp16, hex(float_bits)
        assert Fp16Conversions.floatToBf16(value) == bf16, hex(float_bits)
        assert Fp16Conversions.mlasFloatToFp16(value) == fp16


def test_fp16_to_float_is_exact_for_every_value() -> None:
    halves = np.arange(65536, dtype=np.uint16)
    ours = Fp16Conversions.convertFp16BufferToFloatBuffer(halves.view(np.int16))
    assert ours.dtype == np.float32 and ours.shape == (65536,)
    numbers = ~np.isnan(halves.view(np.float16))
    bits_equal(ours[numbers], halves.view(np.float16)[numbers].astype(np.float32))  # numpy: IEEE, exact
    nans = ours[~numbers].view(np.uint32)  # NaN payloads kept, as Java's MLAS port keeps them
    assert np.array_equal(nans >> 13 & 0x3FF, halves[~numbers] & 0x3FF)
    assert np.isnan(ours[~numbers]).all()
    bf16 = Fp16Conversions.convertBf16BufferToFloatBuffer(halves)
    assert np.array_equal(bf16.view(np.uint32), halves.astype(np.uint32) << 16)


@settings(max_examples=300, **SETTINGS)
@given(values=hnp.arrays(np.float32, st.integers(0, 64), elements=st.floats(width=32, allow_nan=False)))
def test_float_to_fp16_rounds_like_ieee(values: np.ndarray) -> None:
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.int16)  # numpy: round to nearest even, overflow to inf
    bits_equal(Fp16Conversions.convertFloatBufferToFp16Buffer(values), expected)


def test_float_to_fp16_and_bf16_nans_are_javas() -> None:
    nans = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert (Fp16Conversions.convertFloatBufferToFp16Buffer(nans) == 0x7E00).all()  # floatToIntBits: one NaN
    assert (Fp16Conversions.convertFloatBufferToBf16Buffer(nans) == 0x7FC0).all()


def test_onnx_java_type_mapping() -> None:
    J = OnnxJavaType
    assert [J.mapFromOnnxTensorType(t) for t in (
        T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
        T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
        T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64,
        T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING,
    )] == [J.UINT8, J.INT16, J.INT32, J.INT64, J.FLOAT16, J.BFLOAT16, J.UNKNOWN, J.UNKNOWN, J.UNKNOWN, J.STRING]
    for java_type in J:
        if java_type != J.UNKNOWN:
            assert J.mapFromOnnxTensorType(T.mapFromJavaType(java_type)) == java_type
        assert J.mapFromInt(java_type.value) == java_type
    assert J.mapFromInt(99) == J.UNKNOWN and T.mapFromInt(99) == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED
    assert [J.mapFromClass(c) for c in (float, int, bool, str, np.float32, np.uint16, np.float16, object)] == [
        J.DOUBLE, J.INT64, J.BOOL, J.STRING, J.FLOAT, J.INT16, J.FLOAT16, J.UNKNOWN]
    assert (J.FLOAT.size, J.BFLOAT16.size, J.STRING.size, J.UNKNOWN.size) == (4, 2, 4, 0)
    for onnx_type in T:  # every member has an ONNX spelling, and a TensorInfo of it says so
        info = TensorInfo(onnx_type, (2, 3))
        assert info.onnxType is onnx_type and info.type == J.mapFromOnnxTensorType(onnx_type)
        assert onnx_type.onnx_name.startswith("tensor(")
    info = TensorInfo(T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, (2, -1), ("", "batch"))
    assert info.getDimensionNames() == ("", "batch") and not info.isScalar()
    assert info.toString() == 'TensorInfo(javaType=FLOAT,onnxType=ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,shape=[2, -1],dimNames=["",batch])'
    with pytest.raises(OrtException):
        info.getNumElements()
    assert TensorInfo(T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, ()).isScalar()
    assert TensorInfo.constructFromJavaArray([[1, 2], [3, 4]]).getShape() == (2, 2)
    assert TensorInfo.constructFromBuffer(bytes(10), [5], J.BFLOAT16).onnxType == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16
    with pytest.raises(OrtException, match="needs 5 elements"):
        TensorInfo.constructFromBuffer(bytes(9), [5], J.BFLOAT16)
    with pytest.raises(OrtInvalidArgumentException, match="holds float64 but the element type is ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16"):
        TensorInfo.constructFromBuffer(np.array([1.0, 2.0]), [2], J.BFLOAT16)


# --- the types numpy lacks: bfloat16, float8, int4 (child process) -----------------------------------

_SESSIONS: dict = {}


def _session(kind: str, onnx_type: OnnxTensorType):
    """An inference session of one Identity (any shape) or Cast-to-float node over ``onnx_type``."""
    key = (kind, onnx_type)
    if key not in _SESSIONS:
        from onnx import helper

        target = int(onnx_type) if kind == "Identity" else 1
        x = helper.make_tensor_value_info("x", int(onnx_type), None)
        y = helper.make_tensor_value_info("y", target, None)
        node = helper.make_node(kind, ["x"], ["y"], **({} if kind == "Identity" else {"to": 1}))
        model = helper.make_model(helper.make_graph([node], "m", [x], [y]), opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
        _SESSIONS[key] = env().createSession(model.SerializeToString())
    return _SESSIONS[key]


def _close_sessions() -> None:
    for session in _SESSIONS.values():
        session.close()
    _SESSIONS.clear()


def _expected_values(onnx_type: OnnxTensorType, raw: bytes, count: int) -> np.ndarray:
    data = np.frombuffer(raw, np.uint8)
    if not count:  # onnx's decoders refuse empty input
        return np.empty(0, np.int8 if onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4 else BITS_TYPES[onnx_type][1])
    if onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
        return (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if not ONNX_HAS_DECODERS:
        decoded = onnx_numpy.to_array(onnx.helper.make_tensor("x", int(onnx_type), [count], raw, raw=True))
        return decoded.astype(BITS_TYPES[onnx_type][1])
    if onnx_type in FLOAT8:
        decoder, fn, uz = FLOAT8[onnx_type]
        decode = getattr(onnx_numpy, decoder)
        return decode(data.astype(np.int32), fn=fn, uz=uz).astype(np.float32)  # (its arithmetic needs a wide type)
    signed = onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4
    return onnx_numpy.unpack_int4(data, (count,), signed).astype(np.int8 if signed else np.uint8)


def _as_given(raw: bytes, how: str):
    return {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(raw), "uint8": np.frombuffer(raw, np.uint8).copy()}[how]


@settings(max_examples=250, **SETTINGS)
@given(onnx_type=st.sampled_from(sorted(BITS_TYPES)), shape=shapes, how=st.sampled_from(["bytes", "bytearray", "memoryview", "uint8"]), data=st.data())
def _bits_round_trip(onnx_type, shape, how, data) -> None:
    count = int(np.prod(shape, dtype=np.int64))
    raw = data.draw(st.binary(min_size=byte_size(onnx_type, count), max_size=byte_size(onnx_type, count)))
    tag = OnnxJavaType.BFLOAT16 if onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 and data.draw(st.booleans()) else onnx_type
    with OnnxTensor.createTensor(env(), _as_given(raw, how), list(shape), tag) as tensor:
        info = tensor.getInfo()
        assert info.onnxType == onnx_type and info.shape == tuple(shape)
        assert tensor.getByteBuffer().tobytes() == raw
        value = tensor.getValue()
        expected = _expected_values(onnx_type, raw, count).reshape(shape)
        if expected.dtype.kind == "f":  # NaNs: which NaN is the runtime's business (checked against its Cast below)
            nan = np.isnan(expected)
            assert np.array_equal(np.isnan(value), nan)
            bits_equal(np.where(nan, 0, value).astype(np.float32), np.where(nan, 0, expected).astype(np.float32))
        else:
            bits_equal(value, expected)
        if onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
            bits_equal(value, expected)  # the bits on top of a float, NaN payloads too (Java's bf16ToFloat)
            bits_equal(tensor.getFloatBuffer(), expected.reshape(-1))  # Java's getFloatBuffer converts bf16 up
            bits_equal(tensor.getShortBuffer(), np.frombuffer(raw, np.int16))
        else:
            assert tensor.getFloatBuffer() is None and tensor.getShortBuffer() is None
        if onnx_type in BITS_TYPES and onnx_type not in (T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4) and count:
            # The runtime has no Identity or Cast kernel for int4 in 1.19: the others go through it.
            with _session("Identity", onnx_type).run({"x": tensor}) as result:
                assert result[0].getInfo().onnxType == onnx_type
                assert result[0].getByteBuffer().tobytes() == raw  # the bits, unchanged
                bits_equal(result[0].getValue(), tensor.getValue())
            with _session("Cast", onnx_type).run({"x": tensor}) as result:  # the runtime's own conversion
                runtime = result[0].getValue()
                numbers = ~np.isnan(runtime)
                bits_equal(tensor.getValue()[numbers], runtime[numbers])
                assert np.isnan(tensor.getValue()[~numbers]).all()


@case
def bits_types_round_trip_and_match_the_runtimes_conversion() -> None:
    try:
        _bits_round_trip()
    finally:
        _close_sessions()


@case
def every_float8_and_bfloat16_value_matches_the_runtimes_cast() -> None:
    """All 256 values of each float8 type and all 65536 of bfloat16, bit for bit (NaNs included)."""
    try:
        for onnx_type in FLOAT8:
            raw = bytes(range(256))
            with OnnxTensor.createTensor(env(), raw, [256], onnx_type) as tensor, \
                    _session("Cast", onnx_type).run({"x": tensor}) as result:
                bits_equal(tensor.getValue(), result[0].getValue())
        raw = np.arange(65536, dtype=np.uint16).tobytes()
        with OnnxTensor.createTensor(env(), raw, [65536], OnnxJavaType.BFLOAT16) as tensor, \
                _session("Cast", T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16).run({"x": tensor}) as result:
            runtime = result[0].getValue()
            numbers = ~np.isnan(runtime)
            bits_equal(tensor.getValue()[numbers], runtime[numbers])
            assert np.isnan(tensor.getFloatBuffer()[~numbers]).all()
    finally:
        _close_sessions()


# --- numpy's types: the typed getters and Java's buffer semantics (child process) ---------------------

GETTERS = ("getFloatBuffer", "getDoubleBuffer", "getShortBuffer", "getIntBuffer", "getLongBuffer")
ACCEPTS = {  # getter: {element type: dtype of the copy}
    "getFloatBuffer": {T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: np.float32, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: np.float32},
    "getDoubleBuffer": {T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: np.float64},
    "getShortBuffer": {T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: np.int16, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: np.uint16,
                       T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: np.int16},
    "getIntBuffer": {T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: np.int32, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32: np.uint32},
    "getLongBuffer": {T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: np.int64, T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64: np.uint64},
}


@settings(max_examples=300, **SETTINGS)
@given(onnx_type=st.sampled_from(sorted(NUMPY_DTYPES)), shape=shapes, layout=st.sampled_from(["contiguous", "strided"]), data=st.data())
def _typed_getters(onnx_type, shape, layout, data) -> None:
    dtype = NUMPY_DTYPES[onnx_type]
    array = data.draw(hnp.arrays(dtype, shape))
    given_array = array if layout == "contiguous" else np.repeat(array.reshape(-1), 2)[::2].reshape(shape) if array.size else array
    for through in ("tensor", "runtime"):
        tensor = OnnxTensor.createTensor(env(), given_array)
        try:
            if through == "runtime":  # the same getters on a tensor the runtime allocated
                if not array.size:
                    continue
                result = _session("Identity", onnx_type).run({"x": tensor})
                tensor.close()
                tensor = result[0]
            assert tensor.getByteBuffer().tobytes() == array.tobytes()
            for getter in GETTERS:
                got = getattr(tensor, getter)()
                accepted = ACCEPTS[getter].get(onnx_type)
                if accepted is None:
                    assert got is None, getter  # Java returns null for another element type
                    continue
                assert got.dtype == accepted and got.shape == (array.size,), getter
                if onnx_type == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 and getter == "getFloatBuffer":
                    bits_equal(got, Fp16Conversions.convertFp16BufferToFloatBuffer(array.view(np.int16)))
                else:
                    assert got.tobytes() == array.tobytes(), getter
                got[...] = 0  # a copy: the tensor is unchanged
            bits_equal(tensor.getValue(), array)
            if through == "tensor":
                ref = tensor.getBufferRef()
                assert ref.isPresent()
                assert tensor.ownsBuffer() is (layout == "strided" and array.size > 1)
                assert np.shares_memory(ref.get(), given_array) is (not tensor.ownsBuffer() and array.size > 0)
            else:
                assert not tensor.getBufferRef().isPresent() and not tensor.ownsBuffer()
        finally:
            if through == "runtime" and array.size:
                result.close()
            tensor.close()


@case
def typed_getters_return_copies_of_their_types_and_none_otherwise() -> None:
    try:
        _typed_getters()
    finally:
        _close_sessions()


# --- Python data, and strings (child process) ---------------------------------------------------------

scalars = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def nested(draw, elements):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    flat = draw(st.lists(elements, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    array = np.empty(len(flat), dtype=object)
    array[:] = flat
    return array.reshape(shape).tolist()


@settings(max_examples=250, **SETTINGS)
@given(data=st.one_of(scalars, nested(st.integers(-(2**31), 2**31)), nested(st.floats()), nested(st.booleans())))
def _python_data(data) -> None:
    expected = np.array(data)
    with OnnxTensor.createTensor(env(), data) as tensor:
        assert tensor.getInfo().shape == expected.shape
        assert tensor.getInfo().onnxType == {np.dtype(np.bool_): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
                                             np.dtype(np.int64): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
                                             np.dtype(np.float64): T.ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE}[expected.dtype]
        bits_equal(tensor.getValue(), expected)
        assert not tensor.ownsBuffer() and not tensor.getBufferRef().isPresent()  # Java's arrays: no buffer


@settings(max_examples=150, **SETTINGS)
@given(data=nested(st.integers(0, 9)), depth=st.integers(0, 2), cut=st.integers(1, 3))
def _ragged(data, depth, cut) -> None:
    level = data
    for _ in range(depth):
        if not isinstance(level[0], list):
            break
        level = level[0]
    if len(level) < 2 and not isinstance(level[0], list):
        return
    level.append(level[-1][:-cut] if isinstance(level[-1], list) and len(level[-1]) > cut else [level[-1]] * (cut + 1))
    with pytest.raises(OrtException, match="ragged"):
        OnnxTensor.createTensor(env(), data)


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)  # any Unicode but lone surrogates


@settings(max_examples=200, **SETTINGS)
@given(strings=st.one_of(text, nested(text)), form=st.sampled_from(["list", "object", "unicode"]))
def _strings(strings, form) -> None:
    expected = np.empty(np.shape(strings), dtype=object)
    expected[...] = strings if isinstance(strings, str) else np.array(strings, dtype=object)
    data = strings if form == "list" or isinstance(strings, str) else expected if form == "object" else np.array(strings)
    if form == "unicode" and not isinstance(strings, str) and any(s.endswith("\0") for s in expected.reshape(-1)):
        expected = np.array(strings).astype(object)  # numpy's own str dtype drops trailing NULs: that is the data given
    with OnnxTensor.createTensor(env(), data) as tensor:
        assert tensor.getInfo().onnxType == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING
        assert tensor.getInfo().shape == expected.shape
        assert tensor.getValue().tolist() == expected.tolist()
        assert tensor.getStringTensor().tolist() == expected.tolist()
        raw = np.vectorize(lambda s: s.encode("utf-8"), otypes=[object])(expected) if expected.size else expected
        assert tensor.getStringTensor(raw=True).tolist() == raw.tolist()
        assert tensor.getByteBuffer() is None and tensor.getFloatBuffer() is None
        if expected.size:  # and through the runtime: an Identity over strings
            with _session("Identity", T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING).run({"x": tensor}) as result:
                assert result[0].getValue().tolist() == expected.tolist()


@case
def python_data_makes_the_documented_types() -> None:
    _python_data()


@case
def ragged_sequences_are_refused() -> None:
    _ragged()


@case
def strings_round_trip_as_utf8() -> None:
    try:
        _strings()
    finally:
        _close_sessions()


@case
def strings_with_nul_bytes_and_raw_bytes_keep_every_byte() -> None:
    data = ["a\0b", "\0", "", "é\0\0", "日本語"]
    with OnnxTensor.createTensor(env(), data) as tensor:
        assert tensor.getValue().tolist() == data
    raw = [b"\xff\xfe", b"ok", b"\0x"]
    with OnnxTensor.createTensor(env(), np.array(raw, dtype=object)) as tensor:
        assert tensor.getStringTensor(raw=True).tolist() == raw
        with pytest.raises(OrtException, match=r"index \(0,\).*UTF-8"):
            tensor.getValue()
    with pytest.raises(OrtException, match="not valid Unicode"):
        OnnxTensor.createTensor(env(), ["ok", "\ud800"])
    with OnnxTensor.createTensor(env(), np.zeros((0, 3), dtype=object)) as tensor:
        assert tensor.getValue().shape == (0, 3) and tensor.getInfo().onnxType == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING
    with OnnxTensor.createTensor(env(), ["a", "b", "c", "d"], [2, 2]) as tensor:  # Java's (String[], long[] shape)
        assert tensor.getValue().tolist() == [["a", "b"], ["c", "d"]]
    with OnnxTensor.createTensor(env(), 1.5) as number, pytest.raises(OrtException, match="not strings"):
        number.getStringTensor()


@case
def buffers_of_the_wrong_size_or_type_are_refused() -> None:
    for buffer, shape, type_, fragment in [
        (bytes(99), [10, 5], OnnxJavaType.BFLOAT16, "needs 50 elements"),
        (bytes(3), [2, 2], OnnxJavaType.UINT8, "needs 4 elements"),
        (np.zeros(5, np.float32), [2, 2], None, "needs 4 elements"),
        (np.zeros(4, np.float32), [2, 2], OnnxJavaType.INT32, "holds float32"),
        (np.zeros(4, np.float32), [-2, -2], None, "negative"),
        (bytes(4), [2], OnnxJavaType.STRING, "STRING"),
        (bytes(4), [2], OnnxJavaType.UNKNOWN, "UNKNOWN"),
        (bytes(4), [2], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64, "COMPLEX64"),
        (bytes(1), [3], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT4, "needs 3 elements"),
        (object(), [1], None, "bytes-like"),
        ([1.5, 2.5], [2], OnnxJavaType.INT32, "cannot make"),
        (bytes(4), [2], "FLOAT16", "OnnxJavaType or OnnxTensorType"),
        # float64 memory for a type numpy lacks: once read as its raw bits without a byte-count check
        (np.array([1.0, 2.0]), [2], OnnxJavaType.BFLOAT16, "holds float64"),
        (np.array([1.0, 2.0]), [2], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E4M3FN, "holds float64"),
        (np.array([1.0, 2.0]), [4], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT4, "holds float64"),
        # Python numbers that do not fit the element type: numpy's cast once wrapped or overflowed them
        ([300, 2**40], [2], OnnxJavaType.INT8, "holds 300, which does not fit in ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8"),
        ([2, -1], [2], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "holds -1"),
        ([2**63], [1], OnnxJavaType.INT64, "holds 9223372036854775808"),
        ([1.0, 1e300], [2], OnnxJavaType.FLOAT, "holds 1e\\+300"),
        ([100000, 1], [2], OnnxJavaType.FLOAT16, "holds 100000,"),
    ]:
        with pytest.raises(OrtException, match=fragment):
            OnnxTensor.createTensor(env(), buffer, shape, type_) if type_ is not None else OnnxTensor.createTensor(env(), buffer, shape)
    with pytest.raises(OrtException, match="needs a shape"):
        OnnxTensor.createTensor(env(), bytes(4), None, OnnxJavaType.INT8)
    import ctypes

    for unreadable in ((ctypes.c_wchar * 3)(), (ctypes.c_void_p * 3)(), (ctypes.POINTER(ctypes.c_int) * 3)()):
        for extra in ((), ([3],), ([3], OnnxJavaType.INT8)):  # numpy's ValueError leaked before
            with pytest.raises(OrtInvalidArgumentException, match=f"{type(unreadable).__name__} buffer of format '.+', which numpy cannot read"):
                OnnxTensor.createTensor(env(), unreadable, *extra)
    with OnnxTensor.createTensor(env(), bytes(2), [2]) as tensor:  # raw bytes without a type: Java's ByteBuffer, INT8
        assert tensor.getInfo().onnxType == T.ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 and not tensor.writable
    with OnnxTensor.createTensor(env(), bytearray(b"\x01\x00\x02\x00"), [2], OnnxJavaType.INT16) as tensor:
        assert tensor.getValue().tolist() == [1, 2] and tensor.writable
    for data, type_ in (([127, -128], OnnxJavaType.INT8), ([0, 255], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8),
                        ([2**64 - 1], T.ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64), ([float("inf"), 65504.0], OnnxJavaType.FLOAT16)):
        with OnnxTensor.createTensor(env(), data, [len(data)], type_) as tensor:  # the extremes fit
            assert tensor.getValue().tolist() == data


@pytest.mark.parametrize("name", cases(__name__))
def test_tensor_types(name: str, request) -> None:
    check(__name__, name, timeout=400, request=request)
