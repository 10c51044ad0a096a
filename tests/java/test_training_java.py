"""ONNX Runtime's ``TrainingTest.java`` (microsoft/onnxruntime, java/src/test/java/ai/onnxruntime/),
ported line by line: all 13 tests, only the syntax changed (try-with-resources → ``with``,
``set.contains(x)`` → ``x in s``, casts → ``float()``, ``OrtUtil.reshape`` → ``ndarray.reshape``).
The data is ONNX Runtime's own, read from $ORT_CFFI_JAVA_TESTDATA."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

from ort_cffi import OnnxTensor, OnnxTensorType, OnnxValue, OrtCheckpointState, OrtEnvironment, OrtException, OrtSession, OrtTrainingSession, TensorInfo

from conftest import load_java_input, load_java_output

env = OrtEnvironment.getEnvironment()


@pytest.fixture(autouse=True)
def _data(java_data):
    global DATA
    DATA = java_data


def getResourcePath(name: str) -> str:
    return str(DATA / name.lstrip("/"))


# JUnit's assertEquals(expected, actual, delta). The losses of loss_1.out/loss_2.out are compared, as in
# TrainingTest.java, within 1e-3: they were written on another machine, and ONNX Runtime's float32 kernels
# depend on the CPU (measured on an AVX-512 EPYC: 1 ulp off each). Bit-identity with ONNX Runtime on the
# same machine is tests/guarantees/test_oracle.py's and tests/guarantees/test_cross_interpreter.py's job.
def assertEquals(expected, actual, delta=None):
    if delta is None:
        assert expected == actual
    else:
        assert abs(expected - actual) <= delta


def test_LoadCheckpoint():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    with OrtCheckpointState.loadCheckpoint(ckptPath) as ckpt:
        # Must be non-null, exists so the try block isn't empty as this call will
        # throw if it fails, and throwing errors the test
        assert ckpt is not None


def test_CreateTrainingSession():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    trainPath = getResourcePath("/training_model.onnx")
    with env.createTrainingSession(ckptPath, trainPath, None, None) as trainingSession:
        assert trainingSession is not None
        inputNames = trainingSession.getTrainInputNames()
        assert not inputNames.isEmpty()
        assert "input-0" in inputNames
        outputNames = trainingSession.getTrainOutputNames()
        assert not outputNames.isEmpty()
        assert "onnx::loss::21273" in outputNames


def test_CreateTrainingSessionWithEval():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    trainPath = getResourcePath("/training_model.onnx")
    evalPath = getResourcePath("/eval_model.onnx")
    with env.createTrainingSession(ckptPath, trainPath, evalPath, None) as trainingSession:
        assert trainingSession is not None
        inputNames = trainingSession.getEvalInputNames()
        assert not inputNames.isEmpty()
        assert "input-0" in inputNames
        outputNames = trainingSession.getEvalOutputNames()
        assert not outputNames.isEmpty()
        assert "onnx::loss::21273" in outputNames


def test_TrainingSessionTrainStep():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")
    expectedOutput = load_java_output(DATA / "loss_1.out")
    input = load_java_input(DATA)
    with env.createTrainingSession(checkpointPath, trainingPath, None, None) as trainingSession:
        labels = np.array([1, 1], dtype=np.int32)

        # Run train step with pinned inputs and pinned outputs
        pinnedInputs = {}
        outputMap = {}
        try:
            # Create inputs
            inputShape = [2, 784]
            pinnedInputs["input-0"] = OnnxTensor.createTensor(env, input.reshape(inputShape))

            # long[] labelsShape = {2};
            pinnedInputs["labels"] = OnnxTensor.createTensor(env, labels)

            # Prepare output buffer
            output = np.empty(len(expectedOutput), dtype=np.float32)
            outputTensor = OnnxTensor.createTensor(env, output, [])
            outputMap["onnx::loss::21273"] = outputTensor
            with trainingSession.trainStep(pinnedInputs, outputMap) as r:
                assertEquals(expectedOutput[0], float(outputTensor.getValue()), 1e-3)
        finally:
            OnnxValue.close(outputMap)
            OnnxValue.close(pinnedInputs)


def runTrainStep(trainingSession: OrtTrainingSession) -> None:
    expectedOutput = load_java_output(DATA / "loss_1.out")
    input = load_java_input(DATA)
    labels = np.array([1, 1], dtype=np.int32)

    # Run inference with pinned inputs and pinned outputs

    # Create inputs
    pinnedInputs = {}
    try:
        inputShape = [2, 784]
        pinnedInputs["input-0"] = OnnxTensor.createTensor(env, input.reshape(inputShape))

        # long[] labelsShape = {2};
        pinnedInputs["labels"] = OnnxTensor.createTensor(env, labels)

        with trainingSession.trainStep(pinnedInputs) as firstOutput:
            assert firstOutput.size() > 0
        trainingSession.lazyResetGrad()
        with trainingSession.trainStep(pinnedInputs) as secondOutputs:
            outputBuffer = secondOutputs.get(0)

            assertEquals(secondOutputs.get("onnx::loss::21273").get(), outputBuffer)
            assert isinstance(outputBuffer, OnnxTensor)

            outLabelTensor = outputBuffer
            assertEquals(OnnxTensorType.ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, outLabelTensor.getInfo().onnxType)
            assert outLabelTensor is not None
            assertEquals(expectedOutput[0], float(outLabelTensor.getValue()), 1e-3)
    finally:
        OnnxValue.close(pinnedInputs)


def test_TrainingSessionTrainStepOrtOutput():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")
    with env.createTrainingSession(checkpointPath, trainingPath, None, None) as trainingSession:
        runTrainStep(trainingSession)


def test_SaveCheckpoint():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")

    tmpPath = tempfile.mkdtemp(prefix="ort-java-training-test")
    tmpCheckpointPath = os.path.join(tmpPath, "checkpoint.ckpt")
    try:
        with env.createTrainingSession(checkpointPath, trainingPath, None, None) as trainingSession:
            # Save checkpoint
            trainingSession.saveCheckpoint(tmpCheckpointPath, False)

        with env.createTrainingSession(tmpCheckpointPath, trainingPath, None, None) as trainingSession:
            # Load saved checkpoint into new session and run train step
            runTrainStep(trainingSession)
    finally:
        shutil.rmtree(tmpPath)


def test_TrainingSessionOptimizerStep():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")
    optimizerPath = getResourcePath("/adamw.onnx")
    expectedOutput_1 = load_java_output(DATA / "loss_1.out")
    expectedOutput_2 = load_java_output(DATA / "loss_2.out")
    input = load_java_input(DATA)
    with env.createTrainingSession(checkpointPath, trainingPath, None, optimizerPath) as trainingSession:
        labels = np.array([1, 1], dtype=np.int32)

        # Run train step with pinned inputs and pinned outputs
        pinnedInputs = {}
        try:
            # Create inputs
            inputShape = [2, 784]
            pinnedInputs["input-0"] = OnnxTensor.createTensor(env, input.reshape(inputShape))

            # long[] labelsShape = {2};
            pinnedInputs["labels"] = OnnxTensor.createTensor(env, labels)

            with trainingSession.trainStep(pinnedInputs) as outputs:
                assertEquals(expectedOutput_1[0], float(outputs.get(0).getValue()), 1e-3)

            trainingSession.lazyResetGrad()

            with trainingSession.trainStep(pinnedInputs) as outputs:
                assertEquals(expectedOutput_1[0], float(outputs.get(0).getValue()), 1e-3)

            trainingSession.optimizerStep()

            with trainingSession.trainStep(pinnedInputs) as outputs:
                assertEquals(expectedOutput_2[0], float(outputs.get(0).getValue()), 1e-3)
        finally:
            OnnxValue.close(pinnedInputs)


def test_TrainingSessionSetLearningRate():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")
    optimizerPath = getResourcePath("/adamw.onnx")

    with env.createTrainingSession(checkpointPath, trainingPath, None, optimizerPath) as trainingSession:
        learningRate = np.float32(0.245)
        trainingSession.setLearningRate(learningRate)
        actualLearningRate = trainingSession.getLearningRate()
        assertEquals(learningRate, actualLearningRate)


def test_TrainingSessionLinearLRScheduler():
    checkpointPath = getResourcePath("/checkpoint.ckpt")
    trainingPath = getResourcePath("/training_model.onnx")
    optimizerPath = getResourcePath("/adamw.onnx")

    with env.createTrainingSession(checkpointPath, trainingPath, None, optimizerPath) as trainingSession:
        learningRate = np.float32(0.1)
        trainingSession.registerLinearLRScheduler(2, 4, learningRate)
        runTrainStep(trainingSession)
        trainingSession.optimizerStep()
        trainingSession.schedulerStep()
        assertEquals(np.float32(0.05), trainingSession.getLearningRate())
        trainingSession.optimizerStep()
        trainingSession.schedulerStep()
        assertEquals(np.float32(0.1), trainingSession.getLearningRate())
        trainingSession.optimizerStep()
        trainingSession.schedulerStep()
        assertEquals(np.float32(0.05), trainingSession.getLearningRate())
        trainingSession.optimizerStep()
        trainingSession.schedulerStep()
        assertEquals(np.float32(0.0), trainingSession.getLearningRate())


def test_TrainingSessionExportModelForInferencing():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    trainPath = getResourcePath("/training_model.onnx")
    evalPath = getResourcePath("/eval_model.onnx")
    with env.createTrainingSession(ckptPath, trainPath, evalPath, None) as trainingSession:
        graphOutputs = ["output-0"]

        fd, inferencePath = tempfile.mkstemp(prefix="inference_model", suffix=".onnx")
        os.close(fd)

        trainingSession.exportModelForInference(inferencePath, graphOutputs)
        assert os.path.exists(inferencePath)
        os.remove(inferencePath)


def test_CheckpointStateAddIntProperty():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    with OrtCheckpointState.loadCheckpoint(ckptPath) as ckpt:
        propertyName = "days in a week"
        ckpt.addProperty(propertyName, 7)

        value = ckpt.getIntProperty(env.defaultAllocator, propertyName)
        assertEquals(7, value)

        try:
            strVal = ckpt.getStringProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass

        try:
            floatVal = ckpt.getFloatProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass


def test_CheckpointStateAddFloatProperty():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    with OrtCheckpointState.loadCheckpoint(ckptPath) as ckpt:
        propertyName = "pi"
        ckpt.addProperty(propertyName, np.float32(3.14))

        value = ckpt.getFloatProperty(env.defaultAllocator, propertyName)
        assertEquals(np.float32(3.14), value)

        try:
            strVal = ckpt.getStringProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass

        try:
            intVal = ckpt.getIntProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass


def test_CheckpointStateAddStringProperty():
    ckptPath = getResourcePath("/checkpoint.ckpt")
    with OrtCheckpointState.loadCheckpoint(ckptPath) as ckpt:
        propertyName = "best ai framework"
        ckpt.addProperty(propertyName, "onnxruntime")

        value = ckpt.getStringProperty(env.defaultAllocator, propertyName)
        assertEquals("onnxruntime", value)

        try:
            floatVal = ckpt.getFloatProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass

        try:
            intVal = ckpt.getIntProperty(env.defaultAllocator, propertyName)
            pytest.fail("Should have thrown")
        except OrtException as e:
            pass  # pass


def test_port_uses_the_java_names():
    """The nested Java names a port reaches for exist where Java has them."""
    assert OrtTrainingSession.OrtCheckpointState is OrtCheckpointState
    assert OrtSession.Result is not None and OrtSession.RunOptions is not None and OrtSession.SessionOptions is not None
    assert TensorInfo.OnnxTensorType is OnnxTensorType
