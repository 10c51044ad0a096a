"""The engine's checkpoint codec (ort_cffi._backends.engine.checkpoint_codec) against ONNX Runtime 1.19.2's own
checkpoints: what the training build saves reads back with the same parameters, moments, step, learning rate
and properties; writing what was read gives the runtime's file byte for byte; the runtime loads what the
codec writes from a changed state and sees the change; nominal, external-data and the Java tests' checkpoints;
every element type the schema holds; bad files refused with CheckpointFormatError, never a crash."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import ARTIFACTS
from ort_cffi import OrtCheckpointState, OrtEnvironment
from ort_cffi._backends.engine.checkpoint_codec import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointInputError,
    OptimizerGroup,
    checkpoint_bytes,
    flatbuffer,
    layout,
    read_checkpoint,
    write_checkpoint,
)
from ort_cffi._backends.engine.checkpoint_codec.layout import TensorRecord, plan_checkpoint
from ort_cffi._backends.engine.checkpoint_codec.reader import index_checkpoint
from ort_cffi.artifacts.builder.checkpoint import ELEMENT_TYPES
from ort_cffi.artifacts.builder.checkpoint import checkpoint_bytes as builder_checkpoint_bytes
from ort_cffi.artifacts.builder.checkpoint import write_checkpoint as builder_write_checkpoint

SETS = ["tiny", "big", "dropout", "twoout"]
PROPERTIES = {"epoch": 7, "best_accuracy": 0.9375, "note": "späť", "big": -2**63, "empty": "", "zero_rate": 0.0}


def features_of(name: str) -> int:
    return 784 if name in ("tiny", "big") else 20


def classes_of(name: str) -> int:
    return 10 if name in ("tiny", "big") else 3


def training_session(folder: Path, checkpoint: object):
    return OrtEnvironment.getEnvironment().createTrainingSession(
        checkpoint, folder / "training_model.onnx", folder / "eval_model.onnx", folder / "optimizer_model.onnx")


def train_steps(session, name: str, steps: int) -> None:
    rng = np.random.default_rng(11)
    for _ in range(steps):
        batch = {"input": rng.standard_normal((8, features_of(name))).astype(np.float32),
                 "labels": rng.integers(0, classes_of(name), 8).astype(np.int64)}
        session.trainStep(batch).close()
        session.optimizerStep()
        session.lazyResetGrad()


def runtime_saved(tmp_path: Path, name: str, steps: int, with_optimizer: bool) -> Tuple[Path, Dict[str, np.ndarray],
                                                                                         float, np.ndarray]:
    """Train ``steps`` AdamW steps on an artifact set through the training build, add a property of each kind,
    save; the file, the parameters the session holds, the initial learning rate and the flat buffer."""
    folder = ARTIFACTS / name
    before = read_checkpoint(folder / "checkpoint").trainable
    with training_session(folder, folder / "checkpoint") as session:
        initial_rate = session.getLearningRate()
        train_steps(session, name, steps)
        session.setLearningRate(initial_rate / 3)  # the file keeps the initial rate, not the current one
        state = session.getCheckpointState()
        for key, value in PROPERTIES.items():
            state.addProperty(key, value)
        parameters = {key: state.getParameter(key) for key in before}
        flat = session.copyParametersToBuffer(True)
        path = tmp_path / f"{name}-{steps}-{with_optimizer}"
        state.saveCheckpoint(path, with_optimizer)
    assert any(not np.array_equal(parameters[key], before[key]) for key in before), "training moved no parameter"
    return path, parameters, initial_rate, flat


# --- what the training build saves -----------------------------------------------------------------------------

@pytest.mark.parametrize("with_optimizer", [True, False], ids=["with optimizer", "without optimizer"])
@pytest.mark.parametrize("name", SETS)
def test_the_runtimes_save_reads_back_and_is_rewritten_byte_for_byte(tmp_path: Path, name: str,
                                                                     with_optimizer: bool) -> None:
    steps = 3
    path, parameters, initial_rate, flat = runtime_saved(tmp_path, name, steps, with_optimizer)
    read = read_checkpoint(path)
    assert list(read.trainable) == sorted(parameters) and read.frozen == {} and not read.nominal
    for key, value in parameters.items():
        assert read.trainable[key].dtype == value.dtype and np.array_equal(read.trainable[key], value)
    # copyParametersToBuffer concatenates the trainable parameters in the training model's input order
    model = onnx.load(str(ARTIFACTS / name / "training_model.onnx"))
    order = [value.name for value in model.graph.input if value.name in parameters]
    assert sorted(order) == sorted(parameters)
    assert np.array_equal(flat, np.concatenate([read.trainable[key].ravel() for key in order]))
    assert read.properties == PROPERTIES and isinstance(read.properties["epoch"], int)
    if with_optimizer:
        group = read.optimizer_groups["group0"]
        assert list(read.optimizer_groups) == ["group0"]
        assert group.step == steps and group.learning_rate == float(np.float32(initial_rate))
        assert sorted(group.moments) == sorted(parameters)
        for key, moments in group.moments.items():
            assert sorted(moments) == ["momentum0", "momentum1"]
            assert moments["momentum0"].shape == parameters[key].shape == moments["momentum1"].shape
            assert (moments["momentum1"] >= 0).all() and np.abs(moments["momentum0"]).sum() > 0
    else:
        assert read.optimizer_groups == {}
    write_checkpoint(read, tmp_path / "ours")
    assert (tmp_path / "ours").read_bytes() == path.read_bytes()
    assert checkpoint_bytes(read) == path.read_bytes()


def test_the_moments_are_adamws_after_one_step(tmp_path: Path) -> None:
    """After one AdamW step from zero moments, m = 0.1 g and v = 0.001 g * g: v = 0.1 m * m for every element
    (what the file holds is the optimizer's state, each moment where it belongs)."""
    path, _, _, _ = runtime_saved(tmp_path, "twoout", 1, True)
    group = read_checkpoint(path).optimizer_groups["group0"]
    assert group.step == 1
    for moments in group.moments.values():
        m, v = moments["momentum0"].astype(np.float64), moments["momentum1"].astype(np.float64)
        np.testing.assert_allclose(v, 0.1 * m * m, rtol=1e-4, atol=1e-12)


def test_the_runtime_resumes_from_a_changed_state(tmp_path: Path) -> None:
    """A state read, changed (a parameter, a moment, the step, the rate, properties) and written: the training
    build loads it, holds the change, trains on from it, and saves back the same bytes."""
    path, _, _, _ = runtime_saved(tmp_path, "twoout", 2, True)
    read = read_checkpoint(path)
    changed = Checkpoint(
        trainable={key: value + np.float32(0.25) for key, value in read.trainable.items()},
        frozen={},
        optimizer_groups={"group0": OptimizerGroup(
            0.0625, 41, {key: {"momentum0": moments["momentum0"] * np.float32(2),
                               "momentum1": moments["momentum1"]}
                         for key, moments in read.optimizer_groups["group0"].moments.items()})},
        properties={"epoch": 8, "phase": "fine-tune", "loss": 1.5})
    write_checkpoint(changed, tmp_path / "changed")
    folder = ARTIFACTS / "twoout"
    with training_session(folder, tmp_path / "changed") as session:
        state = session.getCheckpointState()
        for key, value in changed.trainable.items():
            assert np.array_equal(state.getParameter(key), value)
        assert state.getIntProperty("epoch") == 8 and state.getStringProperty("phase") == "fine-tune"
        assert state.getFloatProperty("loss") == 1.5
        state.saveCheckpoint(tmp_path / "saved back", True)
        train_steps(session, "twoout", 1)
        state.saveCheckpoint(tmp_path / "trained on", True)
    assert (tmp_path / "saved back").read_bytes() == (tmp_path / "changed").read_bytes()
    trained = read_checkpoint(tmp_path / "trained on")
    assert trained.optimizer_groups["group0"].step == 42 and trained.optimizer_groups["group0"].learning_rate == 0.0625
    assert all(not np.array_equal(trained.trainable[key], value) for key, value in changed.trainable.items())


def test_every_element_type_the_runtime_loads_both_groups(tmp_path: Path) -> None:
    """Trainable and frozen parameters of every element type ONNX Runtime 1.19 loads: read with their values,
    written as the runtime saves them."""
    rng = np.random.default_rng(2)
    tensors = []
    for element_type, (_, dtype, _) in sorted(ELEMENT_TYPES.items()):
        values = (rng.standard_normal((2, 3)) * 50).astype(dtype)
        tensors.append(numpy_helper.from_array(values, f"p{element_type:02d}.{dtype.name}"))
    tensors.append(numpy_helper.from_array(np.float32(3.5), "scalar"))
    tensors.append(numpy_helper.from_array(np.zeros((0, 4), np.float32), "empty"))
    tensors.sort(key=lambda tensor: tensor.name)
    trainable, frozen = tensors[::2], tensors[1::2]
    with OrtCheckpointState.loadCheckpointFromBuffer(builder_checkpoint_bytes(trainable, frozen)) as state:
        state.addProperty("kind", "all types")
        state.saveCheckpoint(tmp_path / "runtime")
    read = read_checkpoint(tmp_path / "runtime")
    for group, expected in ((read.trainable, trainable), (read.frozen, frozen)):
        assert list(group) == [tensor.name for tensor in expected]
        for tensor in expected:
            value = numpy_helper.to_array(tensor)
            assert group[tensor.name].dtype == value.dtype and np.array_equal(group[tensor.name], value)
    assert read.properties == {"kind": "all types"}
    assert checkpoint_bytes(read) == (tmp_path / "runtime").read_bytes()


def test_a_state_without_parameters_has_no_module_state(tmp_path: Path) -> None:
    """Properties only, or nothing at all: the runtime loads the codec's file and saves back the same bytes."""
    for name, state in (("properties", Checkpoint({}, {}, {}, {"epoch": 1, "note": "x"})),
                        ("nothing", Checkpoint({}, {}, {}, {}))):
        write_checkpoint(state, tmp_path / name)
        with OrtCheckpointState.loadCheckpoint(tmp_path / name) as loaded:
            loaded.saveCheckpoint(tmp_path / f"{name}.saved")
        assert (tmp_path / f"{name}.saved").read_bytes() == (tmp_path / name).read_bytes()
        read = read_checkpoint(tmp_path / name)
        assert read.trainable == {} and read.frozen == {} and read.properties == state.properties


def test_the_generators_checkpoints_read_in_file_order(tmp_path: Path) -> None:
    """The generator's files (tests/artifacts, made by ONNX Runtime's own generator) keep their order; written
    back they are what the runtime saves after loading them."""
    for name in SETS:
        read = read_checkpoint(ARTIFACTS / name / "checkpoint")
        assert list(read.trainable) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
        with OrtCheckpointState.loadCheckpoint(ARTIFACTS / name / "checkpoint") as state:
            state.saveCheckpoint(tmp_path / name)
        assert checkpoint_bytes(read) == (tmp_path / name).read_bytes()
        assert read_checkpoint((ARTIFACTS / name / "checkpoint").read_bytes()).trainable.keys() == read.trainable.keys()


# --- reading holds one copy ---------------------------------------------------------------------------------------

def test_reading_holds_one_copy_of_the_data() -> None:
    """Arrays are read-only views of the bytes read: reading a 1.6 MB checkpoint allocates about its size."""
    path = ARTIFACTS / "big" / "checkpoint"
    tracemalloc.start()
    try:
        read = read_checkpoint(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = path.stat().st_size
    assert peak < size * 1.1 + 200_000, (peak, size)
    for value in read.trainable.values():
        assert not value.flags.writeable and not value.flags.owndata
    with pytest.raises(ValueError, match="read-only"):
        read.trainable["fc1.weight"][0, 0] = 1.0


# --- nominal checkpoints ------------------------------------------------------------------------------------------

def test_a_nominal_checkpoint_reads_without_data_and_writes_as_the_runtime_saves_it(tmp_path: Path) -> None:
    """The generator's nominal checkpoint (names and types only): nominal, zeros broadcast to the file's shapes
    (nothing allocated); written, it is the runtime's own save of that state (scalars)."""
    nominal = ARTIFACTS / "tiny" / "nominal_checkpoint"
    read = read_checkpoint(nominal)
    assert read.nominal and list(read.trainable) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    for value in read.trainable.values():
        assert value.dtype == np.float32 and not value.flags.writeable and all(s == 0 for s in value.strides)
    with OrtCheckpointState.loadCheckpoint(nominal) as state:
        state.saveCheckpoint(tmp_path / "runtime")
    write_checkpoint(read, tmp_path / "ours")
    # The runtime writes a nominal parameter's one element from memory it never set (measured: zeros in one
    # run, other bytes in the next); the codec writes zeros there. Everything else is the same.
    runtime = bytearray((tmp_path / "runtime").read_bytes())
    for tensor in index_checkpoint(bytes(runtime), "runtime").trainable:
        assert tensor.data_at is not None and tensor.data_at[1] == 4
        runtime[tensor.data_at[0]:tensor.data_at[0] + 4] = bytes(4)
    assert (tmp_path / "ours").read_bytes() == bytes(runtime)
    again = read_checkpoint(tmp_path / "ours")
    assert again.nominal and again.trainable.keys() == read.trainable.keys()


def test_a_builder_made_nominal_checkpoint_fills_through_the_runtime(tmp_path: Path) -> None:
    """ort_cffi's builder writes nominal checkpoints too (ort_cffi.artifacts' nominal option): read as nominal;
    a nominal state with shapes, written by the codec, loads and is filled by copyBufferToParameters."""
    full = read_checkpoint(ARTIFACTS / "twoout" / "checkpoint")
    tensors = [numpy_helper.from_array(np.array(value), key) for key, value in full.trainable.items()]
    builder_write_checkpoint(tmp_path / "nominal", tensors, nominal=True)
    read = read_checkpoint(tmp_path / "nominal")
    assert read.nominal and all(value.shape == () for value in read.trainable.values())
    shaped = Checkpoint({key: np.broadcast_to(np.float32(0), value.shape) for key, value in full.trainable.items()},
                        {}, {}, {}, nominal=True)
    write_checkpoint(shaped, tmp_path / "shaped")
    assert read_checkpoint(tmp_path / "shaped").nominal
    flat = np.concatenate([value.ravel() for value in full.trainable.values()])
    with training_session(ARTIFACTS / "twoout", tmp_path / "shaped") as session:
        session.copyBufferToParameters(flat, False)
        assert np.array_equal(np.sort(session.copyParametersToBuffer(False)), np.sort(flat))


# --- external data --------------------------------------------------------------------------------------------

def test_external_data_reads_from_beside_the_checkpoint_and_writes_as_the_runtime(tmp_path: Path) -> None:
    """A checkpoint whose parameters lie in ``<checkpoint>.data`` (ONNX Runtime's layout past 1.8 GiB; the
    builder's writer made to go external here): read from the file beside it; a state loaded that way the
    runtime saves with every parameter external and the moments inline, and so does the codec."""
    full = read_checkpoint(ARTIFACTS / "tiny" / "checkpoint")
    tensors = [numpy_helper.from_array(np.array(value), key) for key, value in full.trainable.items()]
    tensors.append(numpy_helper.from_array(np.arange(5, dtype=np.int64), "counter"))
    builder_write_checkpoint(tmp_path / "ckpt", tensors[:4], tensors[4:], external_data_threshold=0)
    read = read_checkpoint(tmp_path / "ckpt")
    assert read.external_data and list(read.frozen) == ["counter"]
    for key, value in full.trainable.items():
        assert np.array_equal(read.trainable[key], value)
    assert np.array_equal(read.frozen["counter"], np.arange(5))
    with training_session(ARTIFACTS / "tiny", tmp_path / "ckpt") as session:
        train_steps(session, "tiny", 1)
        state = session.getCheckpointState()
        expected = {key: state.getParameter(key) for key in full.trainable}
    trained = Checkpoint({key: expected[key] for key in sorted(expected)}, {"counter": np.arange(5)}, {}, {},
                         external_data=True)
    write_checkpoint(trained, tmp_path / "ours")
    assert (tmp_path / "ours.data").stat().st_size >= sum(v.nbytes for v in expected.values())
    with OrtCheckpointState.loadCheckpoint(tmp_path / "ours") as state:
        with training_session(ARTIFACTS / "tiny", state):
            for key, value in expected.items():
                assert np.array_equal(state.getParameter(key), value)
    # from bytes there is no file beside it
    with pytest.raises(CheckpointFormatError, match="keeps its data in an external file"):
        read_checkpoint((tmp_path / "ours").read_bytes())
    (tmp_path / "ours.data").unlink()
    with pytest.raises(CheckpointFormatError, match="ours.data, which is missing"):
        read_checkpoint(tmp_path / "ours")


def test_a_save_with_external_data_keeps_it_beside_the_saved_checkpoint(tmp_path: Path) -> None:
    """The facade's crash-safe save writes a temporary file that the runtime gives its own ``<temporary>.data``;
    the data must end up as ``<checkpoint>.data``, where a load looks for it, and nothing be left behind. A later
    save of an inline state over it removes the data file it no longer reads."""
    full = read_checkpoint(ARTIFACTS / "tiny" / "checkpoint")
    tensors = [numpy_helper.from_array(np.array(value), key) for key, value in full.trainable.items()]
    builder_write_checkpoint(tmp_path / "ckpt", tensors, [], external_data_threshold=0)
    with training_session(ARTIFACTS / "tiny", tmp_path / "ckpt") as session:
        train_steps(session, "tiny", 1)
        state = session.getCheckpointState()
        expected = {key: state.getParameter(key) for key in full.trainable}
        session.saveCheckpoint(tmp_path / "saved", True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ckpt.data", "saved", "saved.data"]
    with training_session(ARTIFACTS / "tiny", tmp_path / "saved") as session:
        state = session.getCheckpointState()
        for key, value in expected.items():
            assert np.array_equal(state.getParameter(key), value)
    with OrtCheckpointState.loadCheckpoint(ARTIFACTS / "tiny" / "checkpoint") as inline:
        inline.saveCheckpoint(tmp_path / "saved")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ckpt.data", "saved"]
    assert not read_checkpoint(tmp_path / "saved").external_data


def test_past_the_flatbuffer_limit_the_parameters_go_beside_the_checkpoint(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime saves a 1.9 GB state inline (measured); only past FlatBuffers' 2 GiB limit (lowered here) does
    the codec move the parameters to ``<checkpoint>.data``, which the runtime then reads."""
    full = read_checkpoint(ARTIFACTS / "twoout" / "checkpoint")
    monkeypatch.setattr(flatbuffer, "MAX_BUFFER_SIZE", 1500)
    write_checkpoint(Checkpoint(dict(full.trainable), {}, {}, {"epoch": 1}), tmp_path / "checkpoint")
    assert (tmp_path / "checkpoint").stat().st_size < 1500 and (tmp_path / "checkpoint.data").is_file()
    assert read_checkpoint(tmp_path / "checkpoint").external_data
    with training_session(ARTIFACTS / "twoout", tmp_path / "checkpoint") as session:
        for key, value in full.trainable.items():
            assert np.array_equal(session.getCheckpointState().getParameter(key), value)


# --- ONNX Runtime's Java test data ------------------------------------------------------------------------------

def test_the_java_tests_checkpoint(java_data: Path, tmp_path: Path) -> None:
    path = java_data / "checkpoint.ckpt"
    read = read_checkpoint(path)
    assert sorted(read.trainable) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    assert read.trainable["fc1.weight"].shape == (500, 784)
    write_checkpoint(read, tmp_path / "ours")
    assert (tmp_path / "ours").read_bytes() == path.read_bytes()
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(path, java_data / "training_model.onnx") as session:
        state = session.getCheckpointState()
        for key, value in read.trainable.items():
            assert np.array_equal(state.getParameter(key), value)


# --- every element type the schema holds (ONNX Runtime's generator as the oracle) -----------------------------

GENERATOR_CHILD = textwrap.dedent("""
    import json, sys
    from onnxruntime.capi import _pybind_state as C
    trainable, frozen, path = json.loads(sys.argv[1])
    C.save_checkpoint([bytes.fromhex(t) for t in trainable], [bytes.fromhex(t) for t in frozen], path, False)
""")


def exotic_tensors() -> List[TensorProto]:
    """Tensors of the types the generator writes and the runtime's loader refuses: strings, float16, int4
    (two per byte), bfloat16 and float8 (given as their bits)."""
    strings = helper.make_tensor("s.strings", TensorProto.STRING, [2, 2], [b"ab", "späť".encode(), b"", b"\xff\xfe"])
    bfloat = helper.make_tensor("s.bfloat16", TensorProto.BFLOAT16, [3],
                                np.array([0x3F80, 0x4000, 0xC040], np.uint16).tobytes(), raw=True)
    float8 = helper.make_tensor("s.float8e4m3fn", TensorProto.FLOAT8E4M3FN, [2], bytes([0x38, 0xC0]), raw=True)
    return [strings, numpy_helper.from_array(np.array([1.5, -2.25], np.float16), "s.float16"),
            helper.make_tensor("s.int4", TensorProto.INT4, [3], bytes([0x78, 0x0F]), raw=True), bfloat, float8]


@pytest.mark.needs_onnxruntime_python
def test_strings_and_the_types_the_loader_refuses_round_trip(tmp_path: Path) -> None:
    """ONNX Runtime's generator writes these (its loader refuses them): read with their values (bfloat16 and
    float8 as their bits, named in element_types); the shared layout writes the generator's file byte for
    byte; the codec writes them back and reads the same."""
    tensors = exotic_tensors()
    args = json.dumps([[t.SerializeToString().hex() for t in tensors[:3]], [t.SerializeToString().hex()
                                                                          for t in tensors[3:]],
                       str(tmp_path / "generator")])
    child = subprocess.run([sys.executable, "-c", GENERATOR_CHILD, args], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    read = read_checkpoint(tmp_path / "generator")
    undecodable = b"\xff\xfe".decode("utf-8", "surrogateescape")
    assert read.trainable["s.strings"].tolist() == [["ab", "späť"], ["", undecodable]]
    assert np.array_equal(read.trainable["s.float16"], np.array([1.5, -2.25], np.float16))
    assert read.trainable["s.int4"].tolist() == [-8, 7, -1]
    assert read.frozen["s.bfloat16"].tolist() == [0x3F80, 0x4000, 0xC040]
    assert read.frozen["s.float8e4m3fn"].tolist() == [0x38, 0xC0]
    assert read.element_types == {"s.bfloat16": TensorProto.BFLOAT16, "s.float8e4m3fn": TensorProto.FLOAT8E4M3FN,
                                  "s.int4": TensorProto.INT4}
    # the shared layout in the generator's form: the same bytes as ONNX Runtime's generator
    records = [[_record(tensor) for tensor in part] for part in (tensors[:3], tensors[3:])]
    assert plan_checkpoint(records[0], records[1]).to_bytes() == (tmp_path / "generator").read_bytes()
    write_checkpoint(read, tmp_path / "ours")
    again = read_checkpoint(tmp_path / "ours")
    for group, original in ((again.trainable, read.trainable), (again.frozen, read.frozen)):
        for key, value in original.items():
            assert group[key].dtype == value.dtype and np.array_equal(group[key], value)
    assert again.element_types == read.element_types


def _record(tensor: TensorProto) -> TensorRecord:
    if tensor.data_type == TensorProto.STRING:
        return TensorRecord(tensor.name, tensor.data_type, tuple(tensor.dims), 0, lambda: iter(()),
                            strings=list(tensor.string_data))
    data = tensor.raw_data
    return TensorRecord(tensor.name, tensor.data_type, tuple(tensor.dims), len(data), lambda: iter((data,)))


def test_four_bit_and_complex_types_round_trip(tmp_path: Path) -> None:
    """The 4-bit types (two per byte in the file) and complex numbers (which ONNX Runtime's generator refuses)."""
    signed = np.array([[-8, 7, -1], [0, 3, -5]], np.int8)
    unsigned = np.array([15, 0, 9], np.uint8)
    complex_values = np.array([1 + 2j, 3 - 4j], np.complex128)
    state = Checkpoint({"i4": signed, "z": complex_values}, {"u4": unsigned}, {}, {},
                       element_types={"i4": 22, "u4": 21})
    write_checkpoint(state, tmp_path / "four")
    read = read_checkpoint(tmp_path / "four")
    assert np.array_equal(read.trainable["i4"], signed) and np.array_equal(read.frozen["u4"], unsigned)
    assert read.trainable["z"].dtype == np.complex128 and np.array_equal(read.trainable["z"], complex_values)
    assert read.element_types == {"i4": 22, "u4": 21}
    # two per byte, low nibble first: [-8, 7] -> 0x78, [-1, 0] -> 0x0F, [3, -5] -> 0xB3
    assert bytes([0x78, 0x0F, 0xB3]) in (tmp_path / "four").read_bytes()


def test_names_that_are_not_utf8_write_back_as_read(tmp_path: Path) -> None:
    """A name or string value whose bytes are not UTF-8 reads as surrogate escapes and writes the same bytes."""
    odd = b"w\xff".decode("utf-8", "surrogateescape")
    state = Checkpoint({odd: np.ones(2, np.float32)}, {}, {}, {odd: odd})
    write_checkpoint(state, tmp_path / "odd")
    assert b"w\xff\x00" in (tmp_path / "odd").read_bytes()
    read = read_checkpoint(tmp_path / "odd")
    assert list(read.trainable) == [odd] and read.properties == {odd: odd}
    assert checkpoint_bytes(read) == (tmp_path / "odd").read_bytes()


# --- states the file cannot hold ----------------------------------------------------------------------------------

def test_what_the_file_cannot_hold_is_refused_by_name(tmp_path: Path) -> None:
    w = np.ones((2, 2), np.float32)
    cases = [
        (Checkpoint({"w": w}, {"w": w}, {}, {}), "the parameter 'w' is given twice \\(trainable and frozen\\)"),
        (Checkpoint({"w": [1.0]}, {}, {}, {}), "'w' must be a numpy array, not list"),  # type: ignore[dict-item]
        (Checkpoint({"w": np.ones(2, "datetime64[s]")}, {}, {}, {}), "'w' has dtype datetime64\\[s\\], which no"),
        (Checkpoint({"w": w}, {}, {}, {"flag": True}), "the property 'flag' must be an int, float or str, got bool"),
        (Checkpoint({"w": w}, {}, {"group0": OptimizerGroup(0.1, 2**63, {})}, {}), "step of the optimizer group"),
        (Checkpoint({"w": w}, {}, {}, {}, element_types={"w": 16}),
         "'w' is given as BFLOAT16, which is held as uint16"),
        (Checkpoint({"": w}, {}, {}, {}), "a name must be a non-empty str"),
    ]
    for state, message in cases:
        with pytest.raises(CheckpointInputError, match=message):
            write_checkpoint(state, tmp_path / "checkpoint")
    with pytest.raises(TypeError, match="takes a Checkpoint, not dict"):
        write_checkpoint({"w": w}, tmp_path / "checkpoint")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # nothing written, no partial file


# --- bad files ------------------------------------------------------------------------------------------------

def test_empty_short_and_foreign_files_are_refused_naming_the_path(tmp_path: Path) -> None:
    cases = {
        b"": "is empty: it is not a checkpoint",
        b"\x08\x00\x00": "holds 3 bytes: too short",
        b"\x0c\x00\x00\x00ORTM" + bytes(4): "is an ORT-format model: its file identifier \\(bytes 4-7\\) is b'ORTM'",
        b"PK\x03\x04" + bytes(60): "is not an ONNX Runtime training checkpoint: its file identifier",
    }
    for index, (data, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{index}"
        path.write_bytes(data)
        with pytest.raises(CheckpointFormatError, match=f"{path}.*{message}|{message}") as caught:
            read_checkpoint(path)
        assert str(path) in str(caught.value)
        with pytest.raises(CheckpointFormatError, match="the checkpoint buffer"):
            read_checkpoint(data)
    with pytest.raises(FileNotFoundError):
        read_checkpoint(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="takes a path or bytes, not int"):
        read_checkpoint(3)  # type: ignore[arg-type]


def test_another_version_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(layout, "CHECKPOINT_VERSION", 1)
    write_checkpoint(Checkpoint({"w": np.ones(2, np.float32)}, {}, {}, {}), tmp_path / "v1")
    with pytest.raises(CheckpointFormatError, match="v1: checkpoint version 1 is not supported: ONNX Runtime 1.19 "
                                                    "reads version 2 only"):
        read_checkpoint(tmp_path / "v1")


def test_every_truncation_is_refused_or_reads_the_same(tmp_path: Path) -> None:
    """Cut anywhere, a checkpoint with optimizer state and properties gives CheckpointFormatError, or (cut only
    in the padding at its end) the same contents: never other data, never another exception."""
    path, _, _, _ = runtime_saved(tmp_path, "twoout", 1, True)
    data = path.read_bytes()
    whole = read_checkpoint(data)
    for length in range(len(data)):
        try:
            read = read_checkpoint(data[:length])
        except CheckpointFormatError:
            continue
        assert length > len(data) - 4 and checkpoint_bytes(read) == checkpoint_bytes(whole)


def test_random_bytes_and_damaged_checkpoints_never_escape_as_other_errors(tmp_path: Path) -> None:
    """Random files (some with the right identifier) and a checkpoint with random bytes changed: each reads or
    gives CheckpointFormatError."""
    rng = np.random.default_rng(7)
    blobs = []
    for size in rng.integers(1, 400, 150):
        blob = bytearray(rng.integers(0, 256, int(size), dtype=np.uint8).tobytes())
        if size >= 8 and rng.random() < 0.7:
            blob[4:8] = b"ODTC"
        blobs.append(bytes(blob))
    path, _, _, _ = runtime_saved(tmp_path, "twoout", 1, True)
    data = path.read_bytes()
    for _ in range(400):
        damaged = bytearray(data)
        for position in rng.integers(0, len(data), int(rng.integers(1, 4))):
            damaged[int(position)] = int(rng.integers(0, 256))
        blobs.append(bytes(damaged))
    outcomes = {"read": 0, "refused": 0}
    for blob in blobs:
        try:
            read_checkpoint(blob)
            outcomes["read"] += 1
        except CheckpointFormatError:
            outcomes["refused"] += 1
    assert outcomes["refused"] >= 150 and sum(outcomes.values()) == len(blobs)


def test_a_checkpoint_written_over_keeps_what_was_read(tmp_path: Path) -> None:
    """Arrays hold the bytes read, not a mapping of the file: a writer that truncates the file in place and
    writes another (as ONNX Runtime's own save does) leaves them as they were, and nothing crashes."""
    path = tmp_path / "checkpoint"
    path.write_bytes((ARTIFACTS / "twoout" / "checkpoint").read_bytes())
    read = read_checkpoint(path)
    before = {key: value.copy() for key, value in read.trainable.items()}
    with open(path, "wb") as stream:
        stream.write(b"\0" * 16)
    for key, value in before.items():
        assert np.array_equal(read.trainable[key], value)
