"""ort_cffi's own writers of the checkpoint and the optimizer models (ort_cffi.artifacts.builder): byte for byte
ONNX Runtime's, loaded and trained through the real runtime, and every bad input refused by name."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import DIGITS, ROOT
from ort_cffi import OrtCheckpointState, OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
from ort_cffi.artifacts.builder import checkpoint as checkpoint_writer
from ort_cffi._backends.engine.checkpoint_codec import flatbuffer
from ort_cffi.artifacts.builder.checkpoint import (
    ELEMENT_TYPES,
    CheckpointInputError,
    checkpoint_bytes,
    write_checkpoint,
)
from ort_cffi.artifacts.builder.optimizer import (
    GENERATOR_NAME_COUNTERS,
    IR_VERSION,
    OptimizerModelError,
    optimizer_model,
    write_optimizer_model,
)

GOLDEN_MODEL = ROOT / "tests" / "data" / "golden_mlp.onnx"
# ONNX Runtime 1.19.2's own generator wrote these from golden_mlp.onnx (tests/apps/test_artifacts.py's GOLDEN,
# made by scripts/golden_artifacts.py): they hold on every interpreter, with no generator to run.
GOLDEN_CHECKPOINTS = {
    "all trainable": (["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], [], False,
                      "98b4bced04ad9456134f9b5a8128671cdc4dfec8dcd951c933a9ef58d51400e5"),
    "nominal": (["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], [], True,
                "13a62d91748581230f30d728aae1749262c41d0074bacfaee1da8d4a0dfbfc38"),
    "head trainable, fc1.weight frozen": (["fc2.weight", "fc2.bias"], ["fc1.weight"], False,
                                          "855496a8768303b52d2dfdb0a68dc9c2edd6eff6743d5c01e2ebfc28da5a40c3"),
}
GOLDEN_OPTIMIZERS = {  # kind, the loss the generator built first, sha256
    "AdamW after cross-entropy": ("AdamW", "cross-entropy", "b02978d11ef99ac1d83f66cb29bb85fea8bce623c149f71fa78665085235e918"),
    "SGD after MSE": ("SGD", "mse", "b5fb26cd01f41c598a4808064a9c4e802db38880febfb368d4d1678370dcb59d"),
}
DIGITS_PARAMETERS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
STEPS = 20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def initializers(model_path: Path, names: Sequence[str]) -> List[TensorProto]:
    by_name = {tensor.name: tensor for tensor in onnx.load(str(model_path)).graph.initializer}
    return [by_name[name] for name in names]


@pytest.fixture(scope="module")
def digits_parameters() -> Dict[str, np.ndarray]:
    """The digits checkpoint's parameters, read through a training session."""
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx") as session:
        state = session.getCheckpointState()
        return {name: state.getParameter(name) for name in DIGITS_PARAMETERS}


def digits_batches() -> List[Dict[str, np.ndarray]]:
    with np.load(DIGITS / "digits.npz") as data:
        return [{"input": data["train_input"][i:i + 16], "labels": data["train_labels"][i:i + 16]}
                for i in range(0, 16 * STEPS, 16)]


def train(checkpoint: object, training_model: Path, optimizer: Path, learning_rate: float = 0.01):
    """STEPS steps of train, optimizer step and reset; the losses, the parameters after one step and after all."""
    env = OrtEnvironment.getEnvironment()
    losses = []
    with env.createTrainingSession(checkpoint, training_model, None, optimizer) as session:
        session.setLearningRate(learning_rate)
        for index, batch in enumerate(digits_batches()):
            with session.trainStep(batch) as result:
                losses.append(result.get(0).getValue())
            session.optimizerStep()
            session.lazyResetGrad()
            if index == 0:
                first = session.copyParametersToBuffer(False)
        return np.array(losses, dtype=np.float32), first, session.copyParametersToBuffer(False)


# --- byte for byte ONNX Runtime's, with no generator to run ----------------------------------------------------

@pytest.mark.parametrize("case", sorted(GOLDEN_CHECKPOINTS))
def test_golden_checkpoints_byte_for_byte(tmp_path: Path, case: str) -> None:
    trainable, frozen, nominal, digest = GOLDEN_CHECKPOINTS[case]
    tensors = initializers(GOLDEN_MODEL, trainable), initializers(GOLDEN_MODEL, frozen)
    assert sha256(checkpoint_bytes(*tensors, nominal=nominal)) == digest
    size = write_checkpoint(tmp_path / "checkpoint", *tensors, nominal=nominal)
    assert sha256((tmp_path / "checkpoint").read_bytes()) == digest and size == (tmp_path / "checkpoint").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no partial file left


def test_the_digits_checkpoint_byte_for_byte(digits_parameters: Dict[str, np.ndarray]) -> None:
    """The shipped digits checkpoint (ONNX Runtime's generator's) from its own parameters, read back."""
    tensors = [numpy_helper.from_array(value, name) for name, value in digits_parameters.items()]
    assert checkpoint_bytes(tensors, []) == (DIGITS / "checkpoint").read_bytes()


@pytest.mark.parametrize("case", sorted(GOLDEN_OPTIMIZERS))
def test_golden_optimizer_models_byte_for_byte(tmp_path: Path, case: str) -> None:
    kind, loss, digest = GOLDEN_OPTIMIZERS[case]
    opset = onnx.load(str(GOLDEN_MODEL)).opset_import[0].version
    model = optimizer_model(kind, opset=opset, name_counter=GENERATOR_NAME_COUNTERS[loss])
    assert sha256(model.SerializeToString()) == digest and model.ir_version == IR_VERSION == 10
    write_optimizer_model(tmp_path / "optimizer_model.onnx", kind, opset=opset, name_counter=GENERATOR_NAME_COUNTERS[loss])
    assert sha256((tmp_path / "optimizer_model.onnx").read_bytes()) == digest
    if onnx.IR_VERSION >= IR_VERSION:  # onnx 1.14 and 1.15 check IR versions up to 9
        onnx.checker.check_model(model)


def test_the_digits_optimizer_model_byte_for_byte() -> None:
    opset = onnx.load(str(DIGITS / "training_model.onnx")).opset_import
    default = next(entry.version for entry in opset if entry.domain in ("", "ai.onnx"))
    assert optimizer_model("adamw", opset=default).SerializeToString() == (DIGITS / "optimizer_model.onnx").read_bytes()


# --- the runtime loads what the writer writes ------------------------------------------------------------------

def test_a_checkpoint_loads_from_a_path_and_from_a_buffer(tmp_path: Path, digits_parameters: Dict[str, np.ndarray]) -> None:
    rng = np.random.default_rng(5)
    written = {name: (value + rng.standard_normal(value.shape)).astype(np.float32) for name, value in digits_parameters.items()}
    tensors = [numpy_helper.from_array(value, name) for name, value in written.items()]
    write_checkpoint(tmp_path / "checkpoint", tensors)
    env = OrtEnvironment.getEnvironment()
    for state in (OrtCheckpointState.loadCheckpoint(tmp_path / "checkpoint"),
                  OrtCheckpointState.loadCheckpointFromBuffer(checkpoint_bytes(tensors))):
        with state, env.createTrainingSession(state, DIGITS / "training_model.onnx") as session:
            for name, value in written.items():
                read = state.getParameter(name)
                assert read.dtype == np.float32 and read.shape == value.shape and np.array_equal(read, value)
            assert session.getParametersSize(True) == sum(v.size for v in written.values())


def test_the_runtime_saves_back_both_groups_as_written(tmp_path: Path) -> None:
    """Trainable and frozen tensors: the runtime's own save of the state it loaded (sorted by name, laid out as
    SaveCheckpoint does, which properties={} asks for) is the writer's file."""
    trainable = [numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")]
    frozen = [numpy_helper.from_array(np.array([0.5, -0.5], np.float32), "scale")]
    write_checkpoint(tmp_path / "ours", trainable, frozen, properties={})
    with OrtCheckpointState.loadCheckpoint(tmp_path / "ours") as loaded:
        loaded.saveCheckpoint(tmp_path / "theirs")
    assert (tmp_path / "theirs").read_bytes() == (tmp_path / "ours").read_bytes()
    assert checkpoint_bytes(trainable, frozen) != (tmp_path / "ours").read_bytes()  # the generator's layout differs


def typed_and_raw(element_type: int) -> List[TensorProto]:
    """A tensor of the element type with its values in the typed field, and one with them in raw_data."""
    dtype = ELEMENT_TYPES[element_type][1]
    values = np.array([[1, 0, 3], [7, 2, 5]]).astype(dtype)
    typed = helper.make_tensor(f"{dtype.name}.typed", element_type, values.shape, values.flatten().tolist())
    assert not typed.HasField("raw_data")
    raw = numpy_helper.from_array(values, f"{dtype.name}.raw")
    assert raw.HasField("raw_data")
    return [typed, raw]


def test_every_element_type_the_runtime_takes_round_trips(tmp_path: Path) -> None:
    """The runtime loads each element type, from raw_data and from the typed field, and saves back the same bytes:
    it read every value as written (its save writes the data again from the tensors it loaded)."""
    tensors = sorted((t for element_type in ELEMENT_TYPES for t in typed_and_raw(element_type)), key=lambda t: t.name)
    ours = checkpoint_bytes(tensors[:3], tensors[3:], properties={})
    with OrtCheckpointState.loadCheckpointFromBuffer(ours) as state:
        state.saveCheckpoint(tmp_path / "saved")
    assert (tmp_path / "saved").read_bytes() == ours
    # The typed field and raw_data give the same bytes, also in ONNX Runtime's generator's layout.
    for element_type in ELEMENT_TYPES:
        typed, raw = typed_and_raw(element_type)
        raw.name = typed.name
        assert checkpoint_bytes([typed]) == checkpoint_bytes([raw])


def test_bool_and_narrow_ints_are_cast_as_onnx_runtime_casts_them() -> None:
    """int32_data holds BOOL, INT8, UINT16... values: a nonzero one is true, others are cut to the width."""
    wide = helper.make_tensor("b", TensorProto.BOOL, [3], [0, 2, -1])
    assert checkpoint_bytes([wide]) == checkpoint_bytes([numpy_helper.from_array(np.array([False, True, True]), "b")])
    byte = helper.make_tensor("u", TensorProto.INT32, [1], [0])
    byte.data_type, byte.int32_data[0] = TensorProto.UINT8, 300
    assert checkpoint_bytes([byte]) == checkpoint_bytes([numpy_helper.from_array(np.array([44], np.uint8), "u")])


def test_properties_round_trip_and_are_the_runtimes_own_save(tmp_path: Path) -> None:
    tensors = sorted(typed_and_raw(TensorProto.FLOAT) + typed_and_raw(TensorProto.INT64), key=lambda t: t.name)
    properties = {"epoch": 7, "best_accuracy": 0.9375, "note": "späť", "zero": 0, "no_rate": 0.0,
                  "big": -2**63, "empty": ""}
    write_checkpoint(tmp_path / "with", tensors[:2], tensors[2:], properties=properties)
    with OrtCheckpointState.loadCheckpoint(tmp_path / "with") as state:
        assert state.getIntProperty("epoch") == 7 and state.getIntProperty("zero") == 0
        assert state.getIntProperty("big") == -2**63
        assert state.getFloatProperty("best_accuracy") == 0.9375 and state.getFloatProperty("no_rate") == 0.0
        assert state.getStringProperty("note") == "späť" and state.getStringProperty("empty") == ""
    # The same file as the runtime writes when the properties are added to the state it loaded.
    with OrtCheckpointState.loadCheckpointFromBuffer(checkpoint_bytes(tensors[:2], tensors[2:])) as state:
        for name, value in properties.items():
            state.addProperty(name, value)
        state.saveCheckpoint(tmp_path / "runtime")
    assert (tmp_path / "runtime").read_bytes() == (tmp_path / "with").read_bytes()


def test_a_nominal_checkpoint_takes_its_parameters_from_a_buffer(digits_parameters: Dict[str, np.ndarray]) -> None:
    tensors = [numpy_helper.from_array(value, name) for name, value in digits_parameters.items()]
    nominal = checkpoint_bytes(tensors, nominal=True)
    assert len(nominal) < 1000 < sum(value.nbytes for value in digits_parameters.values())
    flat = np.concatenate([value.ravel() for value in digits_parameters.values()])
    env = OrtEnvironment.getEnvironment()
    # (With no optimizer model, the runtime crashes in CopyBufferToParameters on a nominal state, its own
    # generator's nominal checkpoints too: the session here has one.)
    with OrtCheckpointState.loadCheckpointFromBuffer(nominal) as state:
        with env.createTrainingSession(state, DIGITS / "training_model.onnx", None,
                                       DIGITS / "optimizer_model.onnx") as session:
            assert session.getParametersSize(False) == flat.size
            session.copyBufferToParameters(flat, False)
            assert np.array_equal(session.copyParametersToBuffer(False), flat)
            with session.trainStep(digits_batches()[0]) as result:
                assert np.isfinite(result.get(0).getValue())
            session.optimizerStep()
            assert not np.array_equal(session.copyParametersToBuffer(False), flat)


def test_external_data_is_read_from_its_file(tmp_path: Path) -> None:
    """A model saved with external data and loaded without it: the writer reads each tensor from the file."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), f"w{i}")
               for i, shape in enumerate([(64, 32), (32,), (3,)])]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], weights)
    onnx.save_model(helper.make_model(graph), str(tmp_path / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=64)
    deferred = list(onnx.load(str(tmp_path / "m.onnx"), load_external_data=False).graph.initializer)
    assert [t.data_location for t in deferred] == [TensorProto.EXTERNAL, TensorProto.EXTERNAL, TensorProto.DEFAULT]
    expected = checkpoint_bytes(weights[:2], weights[2:])
    assert checkpoint_bytes(deferred[:2], deferred[2:], external_data_dir=tmp_path) == expected
    write_checkpoint(tmp_path / "checkpoint", deferred[:2], deferred[2:], external_data_dir=tmp_path)
    assert (tmp_path / "checkpoint").read_bytes() == expected
    with pytest.raises(CheckpointInputError, match="'w0' keeps its data in an external file \\('weights.bin'\\): pass "
                                                   "external_data_dir="):
        checkpoint_bytes(deferred)
    with pytest.raises(CheckpointInputError, match="the external data of the parameter 'w0' is missing: .*nowhere"):
        checkpoint_bytes(deferred, external_data_dir=tmp_path / "nowhere")
    deferred[1].dims[0] = 33
    with pytest.raises(CheckpointInputError, match="the external data of the parameter 'w1' \\(.*weights.bin, offset "
                                                   "8192, length 128\\) does not hold the 132 bytes its dims \\[33\\]"):
        checkpoint_bytes(deferred, external_data_dir=tmp_path)


def test_past_the_threshold_the_data_goes_beside_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 digits_parameters: Dict[str, np.ndarray]) -> None:
    """Past 1.8 GiB of tensors ONNX Runtime writes their data to ``<checkpoint>.data`` (measured: the same bytes
    as its generator's at 1.9 GB, and inline at 1.88 GB); a lower threshold shows it here. Tensors under 64 bytes
    stay inline, the others start at offsets aligned to 4 or, for 64-bit types, 8 bytes."""
    tensors = [numpy_helper.from_array(value, name) for name, value in digits_parameters.items()]
    frozen = [numpy_helper.from_array(np.arange(17, dtype=np.float32), "after.4"),
              numpy_helper.from_array(np.arange(9, dtype=np.float64), "after.8")]
    write_checkpoint(tmp_path / "checkpoint", tensors, frozen, external_data_threshold=0)
    data = (tmp_path / "checkpoint.data").read_bytes()
    # fc2.bias (40 bytes) stays inline; 68 bytes of after.4 end at 19268, after.8 starts at 19272
    external = b"".join(digits_parameters[name].tobytes() for name in ["fc1.weight", "fc1.bias", "fc2.weight"])
    assert data == external + np.arange(17, dtype=np.float32).tobytes() + bytes(4) + np.arange(9.0).tobytes()
    assert (tmp_path / "checkpoint").stat().st_size < 1000
    env = OrtEnvironment.getEnvironment()
    with OrtCheckpointState.loadCheckpoint(tmp_path / "checkpoint") as state:
        with env.createTrainingSession(state, DIGITS / "training_model.onnx") as session:
            for name, value in digits_parameters.items():
                assert np.array_equal(state.getParameter(name), value)
            assert session.getParametersSize(True) == sum(v.size for v in digits_parameters.values())
    monkeypatch.setattr(checkpoint_writer, "EXTERNAL_DATA_THRESHOLD", 0)  # bytes have no file beside them
    with pytest.raises(CheckpointInputError, match="passes 1.8 GiB, so it goes to an external data file beside the "
                                                   "checkpoint: use write_checkpoint"):
        checkpoint_bytes(tensors)


def test_writing_holds_one_tensor_at_a_time(tmp_path: Path) -> None:
    """Peak memory while writing (scripts/checkpoint_memory.py, a fresh process): the checkpoint of 16M float32
    parameters in 16 tensors costs about one tensor more than the loaded model, not another copy of it."""
    for external in (False, True):
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "checkpoint_memory.py"), "--parameters",
                               str(16 * 1024 * 1024), "--tensors", "16", "--folder", str(tmp_path / str(external))]
                              + (["--external"] if external else []), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        measured = json.loads(proc.stdout)
        largest = measured["weights_bytes"] // 16
        assert measured["checkpoint_bytes"] > measured["weights_bytes"]
        assert measured["write_extra_bytes"] < 2 * largest, measured


# --- bad input -------------------------------------------------------------------------------------------------

def test_what_the_checkpoint_cannot_hold_is_refused_by_name(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    half = numpy_helper.from_array(np.ones(2, np.float16), "half")
    short = numpy_helper.from_array(np.ones(3, np.float32), "short")
    short.dims[0] = 4
    few = helper.make_tensor("few", TensorProto.INT64, [3], [1, 2, 3])
    few.dims[0] = 2
    unnamed = numpy_helper.from_array(np.ones(1, np.float32))
    cases = [
        (([w], [w]), {}, "the parameter 'w' is given twice \\(trainable and frozen\\)"),
        (([w, w], []), {}, "the parameter 'w' is given twice \\(trainable and trainable\\)"),
        (([half], []), {}, "'half' is of element type FLOAT16, which ONNX Runtime 1.19 cannot load from a checkpoint "
                           "\\(it loads FLOAT, UINT8"),
        (([short], []), {}, "'short' holds 12 bytes of raw data; its dims \\[4\\] and type FLOAT take 16"),
        (([few], []), {}, "'few' holds 3 values in int64_data; its dims \\[2\\] take 2"),
        (([unnamed], []), {}, "a trainable parameter has no name"),
        ((w, []), {}, "trainable: expected a sequence of onnx.TensorProto, got one TensorProto"),
        (([w], [np.ones(2)]), {}, "frozen\\[0\\]: expected an onnx.TensorProto, got ndarray"),
        (([w], []), {"properties": {"flag": True}}, "the property 'flag' must be an int, float or str, got bool"),
        (([w], []), {"properties": {"huge": 2**63}}, "the property 'huge' \\(9223372036854775808\\) does not fit in a 64-bit"),
        (([w], []), {"properties": {"far": 1e39}}, "the property 'far' \\(1e\\+39\\) does not fit in a 32-bit float"),
        (([w], []), {"properties": {"": 1}}, "a property name must be a non-empty str, got ''"),
    ]
    for args, options, message in cases:
        with pytest.raises(CheckpointInputError, match=message):
            write_checkpoint(tmp_path / "checkpoint", *args, **options)
    assert list(tmp_path.iterdir()) == []  # nothing written, no partial file


def test_a_flatbuffer_past_2_gib_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """FlatBuffers' limit (2 GiB), lowered here: with the data kept inline the checkpoint cannot be written."""
    monkeypatch.setattr(flatbuffer, "MAX_BUFFER_SIZE", 1000)
    tensor = numpy_helper.from_array(np.ones(300, np.float32), "w")
    with pytest.raises(CheckpointInputError, match="the flatbuffer would hold more than 1000 bytes, FlatBuffers' "
                                                   "limit: the tensors' data must go to an external file"):
        checkpoint_bytes([tensor])


def test_bad_optimizer_settings_are_refused() -> None:
    cases = [
        (("Adam",), {}, "unknown optimizer 'Adam': expected 'AdamW' or 'SGD'"),
        (("AdamW",), {"opset": 22}, "opset 22: ONNX Runtime 1.19 takes default-domain opsets 1 to 21"),
        (("AdamW",), {"name_counter": -1}, "name_counter must be a non-negative int, got -1"),
        (("SGD",), {"weight_decay": 0.1}, "SGD takes no betas, eps, weight_decay or bias_correction"),
        (("AdamW",), {"betas": (0.9, 1.0)}, "AdamW's betas must lie in \\[0, 1\\), got \\(0.9, 1.0\\)"),
        (("AdamW",), {"eps": 0.0}, "AdamW needs eps > 0 and weight_decay >= 0, got eps=0.0"),
        (("AdamW",), {"betas": ("a", 0.9)}, "AdamW's betas, eps and weight_decay must be numbers"),
    ]
    for args, options, message in cases:
        with pytest.raises(OptimizerModelError, match=message):
            optimizer_model(*args, **options)


def test_adamw_settings_reach_the_node() -> None:
    node = optimizer_model("AdamW", betas=(0.8, 0.99), eps=1e-8, weight_decay=0.01, bias_correction=False).graph.node[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attributes == pytest.approx({"adam_mode": 1, "alpha": 0.8, "beta": 0.99, "correct_bias": 0, "epsilon": 1e-8,
                                        "weight_decay": 0.01})


# --- the optimizer models train as ONNX Runtime's ----------------------------------------------------------------

def initial_parameters(checkpoint: Path, training_model: Path) -> np.ndarray:
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(checkpoint, training_model) as session:
        return session.copyParametersToBuffer(False)


def test_adamw_trains_bit_identically_to_onnx_runtimes(tmp_path: Path) -> None:
    """The digits artifacts (ONNX Runtime's generator's), with its AdamW model and with ours: 20 steps, the
    same losses and parameters bit for bit."""
    theirs = train(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "optimizer_model.onnx")
    write_optimizer_model(tmp_path / "adamw.onnx", "AdamW", opset=17, name_counter=40)  # other names, same model
    ours = train(DIGITS / "checkpoint", DIGITS / "training_model.onnx", tmp_path / "adamw.onnx")
    for mine, reference in zip(ours, theirs):
        assert mine.tobytes() == reference.tobytes()
    losses, first, _ = ours
    assert not np.array_equal(first, initial_parameters(DIGITS / "checkpoint", DIGITS / "training_model.onnx"))
    assert losses[-5:].mean() < losses[:5].mean()


def test_sgd_moves_the_parameters_and_lowers_the_loss(tmp_path: Path) -> None:
    write_optimizer_model(tmp_path / "sgd.onnx", "SGD")
    losses, first, last = train(DIGITS / "checkpoint", DIGITS / "training_model.onnx", tmp_path / "sgd.onnx", 0.05)
    assert not np.array_equal(first, initial_parameters(DIGITS / "checkpoint", DIGITS / "training_model.onnx"))
    assert not np.array_equal(last, first)
    assert losses[-5:].mean() < losses[:5].mean()


# --- against ONNX Runtime's generator, run through ort_cffi.artifacts.generate_artifacts --------------------------

def mlp(path: Path, *, extra_double: bool = False) -> Path:
    """x [N, 6] -> Gemm -> Relu -> Gemm -> logits [N, 3]; ``extra_double``: times a double scale (cast)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
             for name, shape in [("fc1.weight", (4, 6)), ("fc1.bias", (4,)), ("fc2.weight", (3, 4)), ("fc2.bias", (3,))]]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h_pre"], transB=1),
             helper.make_node("Relu", ["h_pre"], ["h"]),
             helper.make_node("Gemm", ["h", "fc2.weight", "fc2.bias"], ["gemm"], transB=1)]
    if extra_double:
        inits.append(numpy_helper.from_array(np.array([1.5, 0.5, 2.0]), "scale"))
        nodes += [helper.make_node("Cast", ["scale"], ["scale32"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["gemm", "scale32"], ["logits"])]
    else:
        nodes.append(helper.make_node("Identity", ["gemm"], ["logits"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


# ort_cffi's former defaults, asked for (generate_artifacts' own are ONNX Runtime's): the cases override them
FORMER_DEFAULTS: Dict[str, Any] = {"requires_grad": ALL_PARAMETERS, "loss": "cross-entropy", "optimizer": "adamw",
                                   "additional_output_names": MODEL_OUTPUTS}
GENERATOR_CASES = {
    "all trainable": ({}, {}),
    "fc1 frozen": ({"frozen_params": "fc1.*"}, {}),
    "head trainable, fc1.weight frozen, SGD": ({"requires_grad": "fc2.*", "frozen_params": ["fc1.weight"],
                                                "optimizer": "sgd", "loss": "mse"}, {}),
    "nominal": ({"nominal_checkpoint": True}, {}),
    "a frozen double": ({"requires_grad": ["fc1.weight", "fc2.bias"], "frozen_params": ["scale"]}, {"extra_double": True}),
}


@pytest.mark.needs_onnxruntime_python
@pytest.mark.parametrize("case", sorted(GENERATOR_CASES))
def test_the_checkpoint_and_optimizer_model_are_the_generators(tmp_path: Path, case: str) -> None:
    options, model_options = GENERATOR_CASES[case]
    model = mlp(tmp_path / "m.onnx", **model_options)
    made = generate_artifacts(model, artifact_directory=tmp_path / "out", **{**FORMER_DEFAULTS, **options})
    trainable = initializers(model, [p.name for p in made.trainable])
    frozen = initializers(model, [p.name for p in made.frozen])
    assert checkpoint_bytes(trainable, frozen) == made.checkpoint.read_bytes()
    if options.get("nominal_checkpoint"):
        assert checkpoint_bytes(trainable, frozen, nominal=True) == made.files["nominal_checkpoint"].read_bytes()
    loss = made.loss.option if made.loss is not None else None
    assert made.optimizer is not None and made.model_opset is not None
    ours = optimizer_model(made.optimizer.name, opset=made.model_opset, name_counter=GENERATOR_NAME_COUNTERS[loss])
    assert ours.SerializeToString() == made.optimizer_model.read_bytes()


@pytest.mark.needs_onnxruntime_python
@pytest.mark.parametrize("loss", ["cross-entropy", "mse", "bce-with-logits", "l1", None])
def test_the_name_counter_follows_the_generators_loss(tmp_path: Path, loss: object) -> None:
    if loss is None:  # a model whose first output is the loss
        model = mlp(tmp_path / "m.onnx")
        proto = onnx.load(str(model))
        proto.graph.node.append(helper.make_node("ReduceSum", ["logits"], ["total"], keepdims=0))
        proto.graph.output.insert(0, helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
        model.write_bytes(proto.SerializeToString())
    else:
        model = mlp(tmp_path / "m.onnx")
    for optimizer in ("adamw", "sgd"):
        made = generate_artifacts(model, loss=loss, optimizer=optimizer, artifact_directory=tmp_path / optimizer,
                                  requires_grad=ALL_PARAMETERS, additional_output_names=MODEL_OUTPUTS)
        assert made.optimizer is not None and made.model_opset is not None
        ours = optimizer_model(optimizer, opset=made.model_opset, name_counter=GENERATOR_NAME_COUNTERS[loss])  # type: ignore[index]
        assert ours.SerializeToString() == made.optimizer_model.read_bytes()


@pytest.fixture
def digits_inference_model(tmp_path: Path) -> Path:
    """The digits inference model, exported from the shipped artifacts."""
    path = tmp_path / "inference_model.onnx"
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as s:
        s.exportModelForInference(path, ["logits"])
    return path


@pytest.mark.needs_onnxruntime_python
def test_sgd_trains_bit_identically_to_onnx_runtimes(tmp_path: Path, digits_inference_model: Path) -> None:
    """The same training model and checkpoint (ONNX Runtime's generator's), its SGD model and ours: 20 steps, the
    same losses and parameters bit for bit."""
    made = generate_artifacts(digits_inference_model, optimizer="sgd", artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", additional_output_names=MODEL_OUTPUTS)
    assert made.optimizer_model is not None
    write_optimizer_model(tmp_path / "sgd.onnx", "SGD", name_counter=99)  # other names, same model
    theirs = train(made.checkpoint, made.training_model, made.optimizer_model, 0.05)
    ours = train(made.checkpoint, made.training_model, tmp_path / "sgd.onnx", 0.05)
    for mine, reference in zip(ours, theirs):
        assert mine.tobytes() == reference.tobytes()
    assert not np.array_equal(ours[1], initial_parameters(made.checkpoint, made.training_model))
