"""ONNX Runtime's own ``OnnxTensorTest.java`` (java/src/test/java/ai/onnxruntime/OnnxTensorTest.java,
the 1.17-1.19 version), ported line by line: every ``@Test`` is a test function of the same name
(in snake case), every Java line a Python line, with syntax changes only.

How Java's types are written here (the rule the port follows, see docs/java-map.md):

- a Java primitive array (``float[]``, ``long[]``, ``String[][]``) is a Python list of values of
  that type (``np.float32`` for float, ``np.int32`` for int, ...); like Java's arrays, it is copied
  into the tensor, which then has no buffer reference;
- a ``java.nio`` buffer is a numpy array (a direct buffer: contiguous memory the tensor reads in
  place; a heap buffer: memory that must be copied, here a strided view) or a bytes-like object;
- ``buf.get(output)`` copies a buffer out (``output[:] = buf``), ``buf.put(i, v)`` writes one
  element, ``rewind()`` has nothing to do;
- ``try (A a = ...; B b = ...) {`` is one ``with`` statement; JUnit's ``Assertions`` and Java's
  ``SplittableRandom`` come from ``_java.py``; ``IllegalStateException`` is ``OrtClosedException``.

The resource models (``java-bf16-to-fp32.onnx`` and the three others) are single ``Cast`` nodes,
built here with ``onnx``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from _java import (
    DOUBLE_MAX_VALUE,
    DOUBLE_MIN_VALUE,
    FLOAT_MAX_VALUE,
    FLOAT_MIN_VALUE,
    INTEGER_MAX_VALUE,
    INTEGER_MIN_VALUE,
    LONG_MAX_VALUE,
    LONG_MIN_VALUE,
    Assertions,
    SplittableRandom,
    assertArrayEquals,
    assertFalse,
    assertThrows,
    cast_model,
    int_bits_to_float,
    to_short,
)
from ort_cffi import Fp16Conversions, OnnxJavaType, OnnxTensor, OrtClosedException, OrtEnvironment, OrtSession

RESOURCES = {
    "java-bf16-to-fp32.onnx": (TensorProto.BFLOAT16, TensorProto.FLOAT),
    "java-fp16-to-fp32.onnx": (TensorProto.FLOAT16, TensorProto.FLOAT),
    "java-fp32-to-fp16.onnx": (TensorProto.FLOAT, TensorProto.FLOAT16),
    "java-fp32-to-bf16.onnx": (TensorProto.FLOAT, TensorProto.BFLOAT16),
}


@pytest.fixture(scope="module")
def resources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("java-resources")
    for name, (source, target) in RESOURCES.items():
        cast_model(folder / name, source, target)
    return folder


class TestHelpers:
    folder: Path = Path()

    @staticmethod
    def getResourcePath(name: str) -> Path:
        return TestHelpers.folder / name.lstrip("/")


@pytest.fixture(autouse=True)
def _resource_folder(resources: Path) -> None:
    TestHelpers.folder = resources


def test_scalar_creation() -> None:
    env = OrtEnvironment.getEnvironment()
    stringValues = ["true", "false"]
    for s in stringValues:
        with OnnxTensor.createTensor(env, s) as t:
            Assertions.assertEquals(s, t.getValue())

    boolValues = [True, False]
    for b in boolValues:
        with OnnxTensor.createTensor(env, b) as t:
            Assertions.assertEquals(b, t.getValue())

    intValues = \
        [np.int32(v) for v in (-1, 0, 1, 12345678, -12345678, INTEGER_MAX_VALUE, INTEGER_MIN_VALUE)]
    for i in intValues:
        with OnnxTensor.createTensor(env, i) as t:
            Assertions.assertEquals(i, t.getValue())

    longValues = \
        [np.int64(v) for v in (-1, 0, 1, 12345678, -12345678, LONG_MAX_VALUE, LONG_MIN_VALUE)]
    for l in longValues:  # noqa: E741 - Java's name
        with OnnxTensor.createTensor(env, l) as t:
            Assertions.assertEquals(l, t.getValue())

    floatValues = \
        [np.float32(v) for v in (
            -1.0,
            0.0,
            -0.0,
            1.0,
            1234.5678,
            -1234.5678,
            math.pi,
            math.e,
            FLOAT_MAX_VALUE,
            FLOAT_MIN_VALUE,
        )]
    for f in floatValues:
        with OnnxTensor.createTensor(env, f) as t:
            Assertions.assertEquals(f, t.getValue())

    doubleValues = \
        [np.float64(v) for v in (
            -1.0,
            0.0,
            -0.0,
            1.0,
            1234.5678,
            -1234.5678,
            math.pi,
            math.e,
            DOUBLE_MAX_VALUE,
            DOUBLE_MIN_VALUE,
        )]
    for d in doubleValues:
        with OnnxTensor.createTensor(env, d) as t:
            Assertions.assertEquals(d, t.getValue())


def test_buffer_creation() -> None:
    env = OrtEnvironment.getEnvironment()

    # Test creating a value from an array
    # Arrays result in tensors allocated by ORT, so they do not have a backing java.nio.Buffer
    arrValues = [np.float32(v) for v in (0, 1, 2, 3, 4)]
    with OnnxTensor.createTensor(env, arrValues) as t:
        # array creation isn't backed by buffers
        assertFalse(t.ownsBuffer())
        assertFalse(t.getBufferRef().isPresent())
        buf = t.getFloatBuffer()
        output = np.empty(len(arrValues), np.float32)
        output[:] = buf
        Assertions.assertArrayEquals(arrValues, output)

        # Can't modify the tensor through this buffer.
        buf[0] = 25
        Assertions.assertArrayEquals(arrValues, output)
        Assertions.assertArrayEquals(arrValues, t.getFloatBuffer())  # beyond Java: the tensor itself is unchanged

    # Test creating a value from a non-direct byte buffer
    # Non-direct byte buffers are allocated on the Java heap and must be copied into off-heap
    # direct byte buffers
    # which can be directly passed to ORT
    nonDirectBuffer = np.zeros(10, np.float32)[::2]  # memory ORT cannot read in place: copied
    nonDirectBuffer[:] = arrValues
    with OnnxTensor.createTensor(env, nonDirectBuffer, [1, 5]) as t:
        # non-direct buffers trigger a copy
        Assertions.assertTrue(t.ownsBuffer())
        # tensors backed by buffers can get the buffer ref back out
        Assertions.assertTrue(t.getBufferRef().isPresent())
        buf = t.getFloatBuffer()
        output = np.empty(len(arrValues), np.float32)
        output[:] = buf
        Assertions.assertArrayEquals(arrValues, output)

        # Can't modify the tensor through getFloatBuffer.
        buf[0] = 25
        Assertions.assertArrayEquals(arrValues, output)

        # Can modify the tensor through getBufferRef.
        ref = t.getBufferRef().get()
        ref.flat[0] = 25
        buf = t.getFloatBuffer()
        output[:] = buf
        Assertions.assertEquals(25, output[0])

    # Test creating a value from a direct byte buffer
    # Direct byte buffers can be passed into ORT without additional copies or processing
    directBuffer = \
        np.zeros(5 * 4, np.uint8).view(np.float32)
    directBuffer[:] = arrValues
    with OnnxTensor.createTensor(env, directBuffer, [1, 5]) as t:
        # direct buffers don't trigger a copy
        assertFalse(t.ownsBuffer())
        # tensors backed by buffers can get the buffer ref back out
        Assertions.assertTrue(t.getBufferRef().isPresent())
        buf = t.getFloatBuffer()
        output = np.empty(len(arrValues), np.float32)
        output[:] = buf
        Assertions.assertArrayEquals(arrValues, output)

        # Can't modify the tensor through getFloatBuffer.
        buf[0] = 25
        Assertions.assertArrayEquals(arrValues, output)

        # Can modify the tensor through getBufferRef.
        ref = t.getBufferRef().get()
        ref.flat[0] = 25
        buf = t.getFloatBuffer()
        output[:] = buf
        Assertions.assertEquals(25, output[0])

        # Can modify the tensor through our original ref to the direct byte buffer
        directBuffer[1] = 15
        buf = t.getFloatBuffer()
        output[:] = buf
        Assertions.assertEquals(15, output[1])


def test_string_creation() -> None:
    env = OrtEnvironment.getEnvironment()
    arrValues = ["this", "is", "a", "single", "dimensional", "string"]
    with OnnxTensor.createTensor(env, arrValues) as t:
        Assertions.assertArrayEquals([6], t.getInfo().shape)
        output = t.getValue()
        Assertions.assertArrayEquals(arrValues, output)

    stringValues = \
        [["this", "is", "a"], ["multi", "dimensional", "string"]]
    with OnnxTensor.createTensor(env, stringValues) as t:
        Assertions.assertArrayEquals([2, 3], t.getInfo().shape)
        output = t.getValue()
        Assertions.assertArrayEquals(stringValues, output)

    deepStringValues = \
        [
            [["this", "is", "a"], ["multi", "dimensional", "string"]],
            [["with", "lots", "more"], ["dimensions", "than", "before"]],
        ]
    with OnnxTensor.createTensor(env, deepStringValues) as t:
        Assertions.assertArrayEquals([2, 2, 3], t.getInfo().shape)
        output = t.getValue()
        Assertions.assertArrayEquals(deepStringValues, output)


def test_uint8_creation() -> None:
    env = OrtEnvironment.getEnvironment()
    buf = bytes([0, 1])
    data = memoryview(buf)
    shape = [2]
    with OnnxTensor.createTensor(env, data, shape, OnnxJavaType.UINT8) as t:
        Assertions.assertArrayEquals(buf, t.getValue())


def test_empty_tensor() -> None:
    env = OrtEnvironment.getEnvironment()
    buf = np.zeros(0, np.float32)
    shape = [4, 0]
    with OnnxTensor.createTensor(env, buf, shape) as t:
        Assertions.assertArrayEquals(shape, t.getInfo().getShape())
        output = t.getValue()
        Assertions.assertEquals(4, len(output))
        Assertions.assertEquals(0, len(output[0]))
        fb = t.getFloatBuffer()
        Assertions.assertEquals(0, fb.size)
    shape = [0, 4]
    with OnnxTensor.createTensor(env, buf, shape) as t:
        Assertions.assertArrayEquals(shape, t.getInfo().getShape())
        output = t.getValue()
        Assertions.assertEquals(0, len(output))


def test_bf16_to_fp32() -> None:
    env = OrtEnvironment.getEnvironment()
    modelPath = str(TestHelpers.getResourcePath("/java-bf16-to-fp32.onnx"))
    rng = SplittableRandom(1)

    input = np.zeros((10, 5), np.float32)  # noqa: A001 - Java's name
    buf = np.zeros(2 * 10 * 5, np.uint8)
    shortBuf = buf.view(np.int16)

    # Generate data
    for i in range(len(input)):
        for j in range(len(input[0])):
            bits = to_short(rng.nextInt())
            input[i][j] = Fp16Conversions.bf16ToFloat(bits)
            shortBuf[i * len(input[0]) + j] = bits

    with OrtSession.SessionOptions() as opts, \
            env.createSession(modelPath, opts) as session, \
            OnnxTensor.createTensor(env, buf, [10, 5], OnnxJavaType.BFLOAT16) as tensor, \
            session.run({"input": tensor}) as result:
        output = result.get(0)
        outputArr = output.getValue()
        for i in range(len(input)):
            Assertions.assertArrayEquals(input[i], outputArr[i])


def test_fp16_to_fp32() -> None:
    env = OrtEnvironment.getEnvironment()
    modelPath = str(TestHelpers.getResourcePath("/java-fp16-to-fp32.onnx"))
    rng = SplittableRandom(1)

    input = np.zeros((10, 5), np.float32)  # noqa: A001 - Java's name
    buf = np.zeros(2 * 10 * 5, np.uint8)
    shortBuf = buf.view(np.int16)

    # Generate data
    for i in range(len(input)):
        for j in range(len(input[0])):
            bits = to_short(rng.nextInt())
            input[i][j] = Fp16Conversions.fp16ToFloat(bits)
            shortBuf[i * len(input[0]) + j] = bits

    with OrtSession.SessionOptions() as opts, \
            env.createSession(modelPath, opts) as session, \
            OnnxTensor.createTensor(env, buf, [10, 5], OnnxJavaType.FLOAT16) as tensor, \
            session.run({"input": tensor}) as result:
        output = result.get(0)
        outputArr = output.getValue()
        for i in range(len(input)):
            Assertions.assertArrayEquals(input[i], outputArr[i])


def test_fp32_to_fp16() -> None:
    env = OrtEnvironment.getEnvironment()
    modelPath = str(TestHelpers.getResourcePath("/java-fp32-to-fp16.onnx"))
    rng = SplittableRandom(1)

    input = np.zeros((10, 5), np.float32)  # noqa: A001 - Java's name
    floatBuf = \
        np.zeros(4 * 10 * 5, np.uint8).view(np.float32)
    shortBuf = np.zeros(10 * 5, np.int16)

    # Generate data
    for i in range(len(input)):
        for j in range(len(input[0])):
            bits = rng.nextInt()
            input[i][j] = int_bits_to_float(bits)
            floatBuf[i * len(input[0]) + j] = input[i][j]
            shortBuf[i * len(input[0]) + j] = Fp16Conversions.floatToFp16(input[i][j])

    with OrtSession.SessionOptions() as opts, \
            env.createSession(modelPath, opts) as session, \
            OnnxTensor.createTensor(env, floatBuf, [10, 5]) as tensor, \
            session.run({"input": tensor}) as result:
        output = result.get(0)

        # Check outbound Java side cast to fp32 works
        castOutput = output.getFloatBuffer()
        expectedFloatArr = np.empty(10 * 5, np.float32)
        expectedFloatArr[:] = Fp16Conversions.convertFp16BufferToFloatBuffer(shortBuf)
        actualFloatArr = np.empty(10 * 5, np.float32)
        actualFloatArr[:] = castOutput
        Assertions.assertArrayEquals(expectedFloatArr, actualFloatArr)

        # Check bits are correct
        outputBuf = output.getShortBuffer()
        expectedShortArr = np.empty(10 * 5, np.int16)
        expectedShortArr[:] = shortBuf
        actualShortArr = np.empty(10 * 5, np.int16)
        actualShortArr[:] = outputBuf
        Assertions.assertArrayEquals(expectedShortArr, actualShortArr)


def test_fp32_to_bf16() -> None:
    env = OrtEnvironment.getEnvironment()
    modelPath = str(TestHelpers.getResourcePath("/java-fp32-to-bf16.onnx"))
    rng = SplittableRandom(1)

    input = np.zeros((10, 5), np.float32)  # noqa: A001 - Java's name
    floatBuf = \
        np.zeros(4 * 10 * 5, np.uint8).view(np.float32)
    shortBuf = np.zeros(10 * 5, np.int16)

    # Generate data
    for i in range(len(input)):
        for j in range(len(input[0])):
            bits = rng.nextInt()
            input[i][j] = int_bits_to_float(bits)
            floatBuf[i * len(input[0]) + j] = input[i][j]
            shortBuf[i * len(input[0]) + j] = Fp16Conversions.floatToBf16(input[i][j])

    with OrtSession.SessionOptions() as opts, \
            env.createSession(modelPath, opts) as session, \
            OnnxTensor.createTensor(env, floatBuf, [10, 5]) as tensor, \
            session.run({"input": tensor}) as result:
        output = result.get(0)

        # Check outbound Java side cast to fp32 works
        castOutput = output.getFloatBuffer()
        expectedFloatArr = np.empty(10 * 5, np.float32)
        expectedFloatArr[:] = Fp16Conversions.convertBf16BufferToFloatBuffer(shortBuf)
        actualFloatArr = np.empty(10 * 5, np.float32)
        actualFloatArr[:] = castOutput
        Assertions.assertArrayEquals(expectedFloatArr, actualFloatArr)

        # Check bits are correct
        outputBuf = output.getShortBuffer()
        expectedShortArr = np.empty(10 * 5, np.int16)
        expectedShortArr[:] = shortBuf
        actualShortArr = np.empty(10 * 5, np.int16)
        actualShortArr[:] = outputBuf
        Assertions.assertArrayEquals(expectedShortArr, actualShortArr)


def test_fp16_round_trip() -> None:
    for i in range(0xFFFF):
        # Round trip every value
        curVal = to_short(0xFFFF & i)
        upcast = Fp16Conversions.mlasFp16ToFloat(curVal)
        output = Fp16Conversions.mlasFloatToFp16(upcast)
        if not math.isnan(upcast):
            # We coerce NaNs to the same value.
            Assertions.assertEquals(
                curVal,
                output,
                "Expected " + str(curVal) + " received " + str(output) + ", intermediate float was " + str(upcast))


def test_bf16_round_trip() -> None:
    for i in range(0xFFFF):
        # Round trip every value
        curVal = to_short(0xFFFF & i)
        upcast = Fp16Conversions.bf16ToFloat(curVal)
        output = Fp16Conversions.floatToBf16(upcast)
        if not math.isnan(upcast):
            # We coerce NaNs to the same value.
            Assertions.assertEquals(
                curVal,
                output,
                "Expected " + str(curVal) + " received " + str(output) + ", intermediate float was " + str(upcast))


def test_close() -> None:
    env = OrtEnvironment.getEnvironment()
    input = [np.int64(v) for v in (1, 2, 3, 4, 5)]  # noqa: A001 - Java's name
    value = OnnxTensor.createTensor(env, input)
    assertFalse(value.isClosed())
    output = value.getValue()
    assertArrayEquals(input, output)
    value.close()
    # check use after close throws
    assertThrows(OrtClosedException, value.getValue)
    # check double close doesn't crash (emits warning)
    value.close()
