"""A model never reads outside its folder (issue 33): every external-data location must resolve, symlinks
resolved, to a regular file inside the model's folder, with offset + length within the file; anything else
is refused, naming the tensor, the location and the rule, before anything is read, and nothing is written.

Three parts:

- the reader (``ort_cffi._facade.external_data``) against ``onnx`` on the zoo models saved with external
  data, and on models that put tensors where ``onnx``'s own helper does not look (sparse initializers,
  sparse attributes, functions, training_info, a singular field split in two);
- each way out of the folder, refused by the facade (``createSession``, ``createTrainingSession``), by
  ``generate_artifacts`` and by the commands (``ort-cffi-artifacts``, ``ort-cffi-train --model`` and
  ``--artifacts``): every case runs in a child process with a timeout (a FIFO read would hang), and
  afterwards no file anywhere under the test's folder holds the outside file's marker;
- legitimate external data inside the folder still trains, end to end.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx import external_data_helper as onnx_external

from conftest import ARTIFACTS, ROOT
from ort_cffi import OrtInvalidArgumentException
from ort_cffi._facade.external_data import broken_rule, check_external_data, external_tensors, inline_external_data
from ort_cffi._facade.protobuf_wire import Malformed, length_delimited

ZOO = ROOT / "tests" / "zoo"
MARKER = b"OUTSIDE-SECRET-7f3a9c"  # written into every file outside the model's folder
FEATURES, CLASSES = 4, 3
WEIGHT_BYTES = FEATURES * CLASSES * 4  # fc.weight, float32 [3, 4]
CHILD_TIMEOUT = 120


# --- the reader against onnx ------------------------------------------------------------------------------


def _onnx_external(model: onnx.ModelProto) -> List[Tuple[str, Tuple[Tuple[bytes, bytes], ...]]]:
    return sorted((t.name, tuple((e.key.encode(), e.value.encode()) for e in t.external_data))
                  for t in onnx_external._get_all_tensors(model) if onnx_external.uses_external_data(t))


def _ours(path: Path) -> List[Tuple[str, Tuple[Tuple[bytes, bytes], ...]]]:
    return sorted((t.name, t.entries) for t in external_tensors(path.read_bytes()))


@pytest.mark.parametrize("name", sorted(p.name for p in ZOO.glob("*.onnx")))
def test_the_reader_finds_what_onnx_finds_on_the_zoo(name: str, tmp_path: Path) -> None:
    model = onnx.load(str(ZOO / name))
    assert external_tensors((ZOO / name).read_bytes()) == []  # the zoo keeps its data inline
    theirs = [numpy_helper.to_array(t) for t in onnx_external._get_all_tensors(model)]
    saved = tmp_path / name
    onnx.save(model, str(saved), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0,
              convert_attribute=True)
    expected = _onnx_external(onnx.load(str(saved), load_external_data=False))
    assert _ours(saved) == expected
    for tensor in external_tensors(saved.read_bytes()):  # onnx's own layout passes the check
        assert broken_rule(tensor, str(tmp_path)) is None, tensor
    # Read back in (what an export does with what the runtime copied): the same tensors as onnx's.
    inline_external_data(str(saved), str(tmp_path), "the copy")
    assert external_tensors(saved.read_bytes()) == []
    inlined = onnx.load(str(saved), load_external_data=False)
    ours = [numpy_helper.to_array(t) for t in onnx_external._get_all_tensors(inlined)]
    assert len(ours) == len(theirs) and all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(ours, theirs))


def _external(name: str, location: str) -> TensorProto:
    tensor = numpy_helper.from_array(np.ones(2, np.float32), name)
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "8")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _sparse(name: str, location: str) -> onnx.SparseTensorProto:
    values = _external(name, location)
    indices = numpy_helper.from_array(np.array([0, 1], np.int64), f"{name}.indices")
    return helper.make_sparse_tensor(values, indices, [4])


def test_the_reader_finds_tensors_where_onnx_does_not_look(tmp_path: Path) -> None:
    """ONNX Runtime reads external data also for sparse tensors, function bodies and every subgraph."""
    then_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=_external("in_then_constant", "then.bin"))],
        "then", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
        initializer=[_external("in_then_initializer", "then_init.bin")])
    else_graph = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], sparse_value=_sparse("in_else_sparse_value", "else.bin"))],
        "else", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["out"], then_branch=then_graph, else_branch=else_graph, name="branch"),
         helper.make_node("Loop", ["", "cond"], ["l"], name="loop", body=helper.make_graph(
             [], "body", [], [], initializer=[_external("in_loop_body", "body.bin")]))],
        "main", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[_external("top", "top.bin")],
        sparse_initializer=[_sparse("top_sparse", "sparse.bin")])
    function = helper.make_function(
        "custom", "f", ["x"], ["y"],
        [helper.make_node("Constant", [], ["k"], value=_external("in_function", "function.bin")),
         helper.make_node("Add", ["x", "k"], ["y"])],
        [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, functions=[function], opset_imports=[helper.make_opsetid("", 17)])
    training = model.training_info.add()
    training.initialization.CopyFrom(helper.make_graph([], "init", [], [], initializer=[_external("in_training_info", "ti.bin")]))
    found = {t.name: (dict(t.entries)[b"location"], t.where) for t in external_tensors(model.SerializeToString())}
    assert {name: location for name, (location, _) in found.items()} == {
        "top": b"top.bin", "top_sparse": b"sparse.bin", "in_then_constant": b"then.bin",
        "in_then_initializer": b"then_init.bin", "in_else_sparse_value": b"else.bin", "in_loop_body": b"body.bin",
        "in_function": b"function.bin", "in_training_info": b"ti.bin",
    }
    assert found["in_then_constant"][1] == ("attribute 'value' of node '' (Constant) of the subgraph in attribute "
                                            "'then_branch' of node 'branch' (If) of the model's graph")
    assert found["top_sparse"][1] == "the values of a sparse initializer of the model's graph"


def test_a_split_singular_field_is_merged_as_protobuf_merges_it() -> None:
    """Two occurrences of ModelProto.graph are one graph to protobuf; a TensorProto split in two (location
    in one half, data_location in the other) is one external tensor."""
    whole = _external("w", "outside.bin")
    first, second = TensorProto(), TensorProto()
    first.CopyFrom(whole)
    first.ClearField("data_location")
    second.data_location = TensorProto.EXTERNAL
    attribute = helper.make_attribute("value", first)
    # a second ``t`` (field 5) in the attribute holding the other half, and a second graph (field 7)
    split_attribute = attribute.SerializeToString() + length_delimited(5, second.SerializeToString())
    split_node = helper.make_node("Constant", [], ["c"]).SerializeToString() + length_delimited(5, split_attribute)
    extra_graph = helper.make_graph([], "", [], [], initializer=[_external("second_graph", "second.bin")])
    model = helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()
    data = (model + length_delimited(7, length_delimited(1, split_node))  # graph.node
            + length_delimited(7, extra_graph.SerializeToString()))
    parsed = onnx.ModelProto()
    parsed.ParseFromString(data)
    assert _onnx_external(parsed) == sorted((t.name, t.entries) for t in external_tensors(data))
    assert {t.name for t in external_tensors(data)} == {"w", "second_graph"}


def test_an_ort_format_model_is_passed_on(tmp_path: Path) -> None:
    """A flatbuffer, not a protobuf (ONNX Runtime's own format, which it loads too; tests/data/golden_mlp.ort
    is golden_mlp.onnx saved by onnxruntime-training 1.19.2 with session.save_model_format ORT): not refused
    as unreadable."""
    model = ROOT / "tests" / "data" / "golden_mlp.ort"
    assert model.read_bytes()[4:8] == b"ORTM"
    code = """
        import sys
        from ort_cffi import OrtEnvironment
        env = OrtEnvironment.getEnvironment()
        with env.createSession(sys.argv[1]) as session, env.createSession(open(sys.argv[1], "rb").read()) as again:
            assert list(session.getInputNames()) == list(again.getInputNames()) == ["input"], session.getInputNames()
        print("ok")
    """
    proc = child(code, str(model), cwd=tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_an_onnx_model_with_the_ort_format_identifier_is_still_checked(tmp_path: Path) -> None:
    """The runtime reads a .onnx file as protobuf whatever its bytes 4-7 hold: "ORTM" there lets nothing by."""
    model = onnx.load(str(gemm_model(tmp_path / "model", "../outside/secret.bin")), load_external_data=False)
    model.producer_name = "ORTM, a protobuf string where a flatbuffer keeps its identifier"
    path = tmp_path / "model" / "model.onnx"
    path.write_bytes(model.SerializeToString())
    assert path.read_bytes()[4:8] == b"ORTM"
    for given in (str(path), path.read_bytes()):
        with pytest.raises(OrtInvalidArgumentException, match="tensor 'fc.weight'"):
            check_external_data(given, "the model")


def test_the_reader_refuses_what_protobuf_refuses_and_skips_groups() -> None:
    for bad in (b"\x3a\x05abc", b"\x07", b"\x00\x01", b"\x3c"):  # truncated, wire type 7, field 0, lone end-group
        with pytest.raises(Malformed):
            external_tensors(bad)
        with pytest.raises(Exception):
            onnx.ModelProto().ParseFromString(bad)
    group = bytes([0x9B, 0x06, 0x08, 0x01, 0x9C, 0x06])  # field 99 as a group {1: 1}: an unknown field, skipped
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[_external("w", "w.bin")]))
    data = group + model.SerializeToString()
    onnx.ModelProto().ParseFromString(data)
    assert [t.name for t in external_tensors(data)] == ["w"]


def test_the_rules_beyond_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What no folder makes right: entries given twice, no location, NUL, ONNX Runtime's memory-address tag,
    offsets that are no numbers, and a model given as bytes (no folder at all, unless trusted)."""
    from ort_cffi._facade.external_data import ExternalTensor

    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    cases = {
        ((b"location", b"w.bin"), (b"location", b"w.bin")): "gives 'location' twice",
        ((b"offset", b"0"),): "has no location",
        ((b"location", b"w\0.bin"),): "NUL",
        ((b"location", b"*/_ORT_MEM_ADDR_/*"), (b"offset", b"4096")): "an address in its own memory",
        ((b"location", b"w.bin"), (b"offset", b"-1")): "offset '-1' is not a whole number of bytes",
        ((b"location", b"w.bin"), (b"length", b"8 ")): "length '8 ' is not a whole number of bytes",
        ((b"location", b"w.bin"), (b"offset", b"4"), (b"length", b"8")): "offset 4 + length 8 = 12 bytes lies past the end",
        ((b"location", b"missing.bin"),): "cannot be opened (No such file or directory)",
    }
    for entries, fragment in cases.items():
        rule = broken_rule(ExternalTensor("w", "here", entries), str(tmp_path))
        assert rule is not None and fragment in rule, (entries, rule)
    fine = ExternalTensor("w", "here", ((b"location", b"w.bin"), (b"offset", b"0"), (b"length", b"8")))
    assert broken_rule(fine, str(tmp_path)) is None
    assert "given as bytes" in (broken_rule(fine, None) or "")
    monkeypatch.chdir(tmp_path)
    assert broken_rule(fine, None, anywhere=True) is None  # trusted bytes: the current folder, as the runtime does


def test_reading_data_into_a_copy_follows_the_same_rules(tmp_path: Path) -> None:
    """What an export reads in is confined as what a session loads: the copy is left as it was."""
    model, _ = hostile("dotdot", tmp_path)
    before = model.read_bytes()
    with pytest.raises(OrtInvalidArgumentException, match="'..' leads out of the model's folder"):
        inline_external_data(str(model), str(model.parent), "the copy")
    assert model.read_bytes() == before


# --- a model with external data, and the ways out of its folder ------------------------------------------------


def gemm_model(folder: Path, location: str, offset: Optional[int] = None, length: Optional[int] = None) -> Path:
    """``folder/model.onnx``: Gemm(input, fc.weight, fc.bias) → logits, fc.weight stored at ``location``."""
    weight = numpy_helper.from_array(np.linspace(-1, 1, CLASSES * FEATURES, dtype=np.float32).reshape(CLASSES, FEATURES),
                                     "fc.weight")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    entries = [("location", location)] + [(k, str(v)) for k, v in (("offset", offset), ("length", length)) if v is not None]
    for key, value in entries:
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    bias = numpy_helper.from_array(np.zeros(CLASSES, np.float32), "fc.bias")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["input", "fc.weight", "fc.bias"], ["logits"], transB=1)], "gemm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])], initializer=[weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def weight_bytes() -> bytes:
    return np.linspace(-1, 1, CLASSES * FEATURES, dtype=np.float32).tobytes()


def outside_file(root: Path, name: str = "secret.bin") -> Path:
    """A file outside the model's folder, the size of fc.weight, holding the marker."""
    outside = root / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / name
    path.write_bytes((MARKER * 4)[:WEIGHT_BYTES])
    return path


def dataset(root: Path) -> Path:
    rng = np.random.default_rng(0)
    arrays = {f"{split}_input": rng.standard_normal((n, FEATURES)).astype(np.float32) for split, n in (("train", 32), ("val", 16))}
    arrays.update({f"{split}_labels": rng.integers(0, CLASSES, n).astype(np.int64) for split, n in (("train", 32), ("val", 16))})
    path = root / "data.npz"
    np.savez(path, **arrays)
    return path


def hostile(case: str, root: Path) -> Tuple[Path, str]:
    """The model of ``case`` under ``root/model`` and a fragment the refusal must hold (the rule broken)."""
    folder = root / "model"
    folder.mkdir(parents=True)
    if case == "symlink-to-a-file-outside":
        os.symlink(outside_file(root), folder / "weights.bin")
        return gemm_model(folder, "weights.bin"), "outside the model's folder"
    if case == "file-in-a-symlinked-folder":
        outside_file(root)
        os.symlink(root / "outside", folder / "data")
        return gemm_model(folder, "data/secret.bin"), "outside the model's folder"
    if case == "dotdot":
        outside_file(root)
        return gemm_model(folder, "../outside/secret.bin"), "'..' leads out of the model's folder"
    if case == "absolute-path":
        return gemm_model(folder, str(outside_file(root))), "an absolute location leaves the model's folder"
    if case == "fifo":
        os.mkfifo(folder / "weights.bin")
        return gemm_model(folder, "weights.bin"), "is a FIFO, not a regular file"
    if case == "device-file":
        os.symlink("/dev/zero", folder / "weights.bin")
        return gemm_model(folder, "weights.bin"), "resolves (symlinks followed) to '/dev/zero', outside the model's folder"
    if case == "length-past-the-end":
        (folder / "weights.bin").write_bytes(weight_bytes())
        return gemm_model(folder, "weights.bin", 0, WEIGHT_BYTES + 4), "lies past the end"
    if case == "offset-past-the-end":
        (folder / "weights.bin").write_bytes(weight_bytes())
        return gemm_model(folder, "weights.bin", WEIGHT_BYTES, WEIGHT_BYTES), "lies past the end"
    if case == "location-is-a-folder":
        (folder / "weights").mkdir()
        return gemm_model(folder, "weights"), "is a folder, not a regular file"
    raise AssertionError(case)


CASES = ["symlink-to-a-file-outside", "file-in-a-symlinked-folder", "dotdot", "absolute-path", "fifo", "device-file",
         "length-past-the-end", "offset-past-the-end", "location-is-a-folder"]


def child(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a hang is a timeout, a crash a negative exit status), with ``args``."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, cwd=str(cwd), env=dict(os.environ, PYTHONPATH=str(ROOT)))


def files_holding_the_marker(root: Path) -> List[Path]:
    """Every regular file under ``root``, outside ``root/outside``, that holds the marker (links not followed)."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_relative_to(root / "outside") or not path.is_file() or path.is_symlink():
                continue
            if MARKER in path.read_bytes():
                found.append(path)
    return found


FACADE = """
    import sys
    from ort_cffi import OrtEnvironment, OrtInvalidArgumentException
    model, fragment, artifacts, location = sys.argv[1:5]
    env = OrtEnvironment.getEnvironment()
    for attempt in ("createSession", "createSession bytes", "createTrainingSession"):
        try:
            if attempt == "createSession":
                env.createSession(model).close()
            elif attempt == "createSession bytes":
                env.createSession(open(model, "rb").read()).close()
            else:
                env.createTrainingSession(artifacts + "/checkpoint", artifacts + "/training_model.onnx", model).close()
        except OrtInvalidArgumentException as exc:
            message = str(exc)
            expected = "has no folder" if attempt.endswith("bytes") else fragment
            assert "'fc.weight'" in message and f"location {location!r}" in message, (attempt, message)
            assert expected in message and "nothing was read" in message, (attempt, message)
            print("refused:", attempt, "|", message)
        else:
            raise AssertionError(attempt + " accepted the model")
"""


@pytest.mark.parametrize("case", CASES)
def test_the_facade_refuses(case: str, tmp_path: Path) -> None:
    model, fragment = hostile(case, tmp_path)
    location = dict(external_tensors(model.read_bytes())[0].entries)[b"location"].decode()
    proc = child(FACADE, str(model), fragment, str(ARTIFACTS / "tiny"), location, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("refused:") == 3, proc.stdout
    assert files_holding_the_marker(tmp_path) == []


@pytest.mark.parametrize("case", CASES)
def test_the_commands_refuse(case: str, tmp_path: Path) -> None:
    model, fragment = hostile(case, tmp_path)
    data = dataset(tmp_path)
    commands = {
        "ort-cffi-artifacts": ("ort_cffi.cli.artifacts", [str(model), "--out", str(tmp_path / "artifacts-out")]),
        "ort-cffi-train": ("ort_cffi.cli.train", ["--model", str(model), "--data", str(data), "--out",
                                                  str(tmp_path / "train-out"), "--epochs", "1"]),
    }
    for name, (module, args) in commands.items():
        proc = child(f"import sys; from {module} import main; sys.exit(main(sys.argv[1:]))", *args, cwd=tmp_path)
        assert proc.returncode > 0, (name, proc.returncode, proc.stderr)  # an error, not a crash
        error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert error and "'fc.weight'" in error[0] and fragment in error[0], (name, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "artifacts-out").exists() and not (tmp_path / "train-out").exists()  # nothing written
    assert files_holding_the_marker(tmp_path) == []


def hostile_artifacts(case: str, root: Path) -> Tuple[Path, str]:
    """A copy of the tiny artifacts whose eval model carries an extra initializer, fc.weight, whose data
    escapes as in ``hostile``; the folder and the rule's fragment."""
    model, fragment = hostile(case, root)
    folder = model.parent
    for name in ("checkpoint", "training_model.onnx", "optimizer_model.onnx"):
        shutil.copy(ARTIFACTS / "tiny" / name, folder / name)
    evaluation = onnx.load(str(ARTIFACTS / "tiny" / "eval_model.onnx"))
    escaping = onnx.load(str(model), load_external_data=False).graph.initializer[0]
    evaluation.graph.initializer.append(escaping)
    onnx.save(evaluation, str(folder / "eval_model.onnx"))
    return folder, fragment


@pytest.mark.parametrize("case", ["symlink-to-a-file-outside", "file-in-a-symlinked-folder", "dotdot", "fifo"])
def test_an_artifacts_folder_with_escaping_external_data_is_refused(case: str, tmp_path: Path) -> None:
    """--artifacts: the eval model carries an extra initializer whose data escapes."""
    folder, fragment = hostile_artifacts(case, tmp_path)
    data = tmp_path / "digits.npz"
    rng = np.random.default_rng(0)
    np.savez(data, train_input=rng.standard_normal((8, 784)).astype(np.float32), train_labels=np.zeros(8, np.int64),
             val_input=rng.standard_normal((8, 784)).astype(np.float32), val_labels=np.zeros(8, np.int64))
    proc = child("import sys; from ort_cffi.cli.train import main; sys.exit(main(sys.argv[1:]))", "--artifacts",
                 str(folder), "--data", str(data), "--out", str(tmp_path / "out"), "--epochs", "1", cwd=tmp_path)
    assert proc.returncode > 0, proc.stdout + proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert error and "eval model" in error[0] and "'fc.weight'" in error[0] and fragment in error[0], proc.stderr
    assert not (tmp_path / "out").exists()
    assert files_holding_the_marker(tmp_path) == []


def test_the_federated_apps_refuse(tmp_path: Path) -> None:
    """The server's global model and a client's shared session open their artifacts through the facade."""
    code = """
        import sys
        from ort_cffi import OrtInvalidArgumentException
        from ort_cffi.flower.client import shared_session
        from ort_cffi.flower.model import GlobalModel
        folder, fragment = sys.argv[1:3]
        for name, open_it in (("server", lambda: GlobalModel(folder)), ("client", lambda: shared_session(folder))):
            try:
                open_it()
            except OrtInvalidArgumentException as exc:
                assert "eval model" in str(exc) and fragment in str(exc), str(exc)
                print("refused:", name)
            else:
                raise AssertionError(name + " opened the artifacts")
    """
    folder, fragment = hostile_artifacts("file-in-a-symlinked-folder", tmp_path)
    proc = child(code, str(folder), fragment, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("refused:") == 2, proc.stdout + proc.stderr
    assert files_holding_the_marker(tmp_path) == []


def test_a_sparse_initializer_is_confined_too(tmp_path: Path) -> None:
    """ONNX Runtime reads a sparse initializer's external data (onnx's own helper does not look there)."""
    code = """
        import sys
        import numpy as np
        from ort_cffi import OrtEnvironment, OrtInvalidArgumentException
        env = OrtEnvironment.getEnvironment()
        try:
            env.createSession(sys.argv[1])
        except OrtInvalidArgumentException as exc:
            assert "tensor 's' (the values of a sparse initializer of the model's graph)" in str(exc), str(exc)
        else:
            raise AssertionError("accepted")
        with env.createSession(sys.argv[1], externalDataAnywhere=True) as session:  # trusted: the runtime reads it
            with session.run({"x": np.zeros(4, np.float32)}) as result:
                print(result[0].getValue().tolist())
    """
    folder = tmp_path / "model"
    folder.mkdir()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.array([7.5, 9.25], np.float32).tobytes())
    os.symlink(outside, folder / "w.bin")
    values = _external("s", "w.bin")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "s"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        sparse_initializer=[helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 3], np.int64), "i"), [4])])
    (folder / "model.onnx").write_bytes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    proc = child(code, str(folder / "model.onnx"), cwd=tmp_path)
    assert proc.returncode == 0 and "[7.5, 0.0, 0.0, 9.25]" in proc.stdout, proc.stdout + proc.stderr


def test_generate_artifacts_refuses_before_reading_and_names_its_escape(tmp_path: Path) -> None:
    code = """
        import sys
        from ort_cffi.artifacts import ArtifactsInputError, generate_artifacts
        try:
            generate_artifacts(sys.argv[1], artifact_directory=sys.argv[2])
        except ArtifactsInputError as exc:
            print(exc)
        else:
            raise AssertionError("accepted")
    """
    model, _ = hostile("symlink-to-a-file-outside", tmp_path)
    proc = child(code, str(model), str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "copy the data into its folder, or pass external_data_anywhere=True" in proc.stdout
    assert f"model '{model}': tensor 'fc.weight' (an initializer of the model's graph)" in proc.stdout
    assert not (tmp_path / "out").exists()


def test_the_escape_lets_a_trusted_outside_file_through_but_never_a_device_or_a_fifo(tmp_path: Path) -> None:
    code = """
        import sys
        import numpy as np
        from ort_cffi import OrtEnvironment, OrtInvalidArgumentException
        trusted, device, fifo = sys.argv[1:4]
        env = OrtEnvironment.getEnvironment()
        with env.createSession(trusted, externalDataAnywhere=True) as session:
            with session.run({"input": np.eye(4, dtype=np.float32)}) as result:
                weight = result[0].getValue().T
        assert np.array_equal(weight, np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)), weight
        for path, fragment in ((device, "is a character device"), (fifo, "is a FIFO")):
            try:
                env.createSession(path, externalDataAnywhere=True)
            except OrtInvalidArgumentException as exc:
                assert fragment in str(exc), str(exc)
                assert "externalDataAnywhere" not in str(exc)  # the escape would not help: not offered
            else:
                raise AssertionError(path)
        try:
            env.createSession(trusted, externalDataAnywhere=1)
        except OrtInvalidArgumentException as exc:
            assert "externalDataAnywhere must be a bool" in str(exc)
        print("ok")
    """
    trusted_root, device_root, fifo_root = tmp_path / "trusted", tmp_path / "device", tmp_path / "fifo"
    (trusted_root / "blobs").mkdir(parents=True)
    (trusted_root / "blobs" / "weights").write_bytes(weight_bytes())  # a cache whose snapshot links to its blobs
    os.makedirs(trusted_root / "snapshot")
    os.symlink(trusted_root / "blobs" / "weights", trusted_root / "snapshot" / "weights.bin")
    trusted = gemm_model(trusted_root / "snapshot", "weights.bin")
    device, _ = hostile("device-file", device_root)
    fifo, _ = hostile("fifo", fifo_root)
    proc = child(code, str(trusted), str(device), str(fifo), cwd=tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


# --- legitimate external data still works --------------------------------------------------------------------


def test_external_data_inside_the_folder_trains_end_to_end(tmp_path: Path) -> None:
    """The weight in weights.bin, reached through a symlink that stays inside the folder: the trainer
    generates, trains a step, exports; its outputs hold the data and no symlink."""
    folder = tmp_path / "model"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "weights").write_bytes(weight_bytes())
    os.symlink("blobs/weights", folder / "weights.bin")
    model = gemm_model(folder, "weights.bin")
    out = tmp_path / "out"
    proc = child("import sys; from ort_cffi.cli.train import main; sys.exit(main(sys.argv[1:]))", "--model", str(model),
                 "--data", str(dataset(tmp_path)), "--out", str(out), "--epochs", "1", "--batch-size", "8", "--no-plot",
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    links = [p for p in out.rglob("*") if p.is_symlink()]
    assert links == []
    code = """
        import sys
        import numpy as np
        from ort_cffi import OrtCheckpointState, OrtEnvironment
        out = sys.argv[1]
        env = OrtEnvironment.getEnvironment()
        with env.createTrainingSession(out + "/artifacts/checkpoint", out + "/artifacts/training_model.onnx",
                                       out + "/artifacts/eval_model.onnx") as initial, \\
             env.createTrainingSession(out + "/last_checkpoint", out + "/artifacts/training_model.onnx") as trained:
            before = initial.getCheckpointState().getParameter("fc.weight")
            after = trained.getCheckpointState().getParameter("fc.weight")
        assert np.array_equal(before, np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)), before
        assert not np.array_equal(before, after)  # a step was trained
        with env.createSession(out + "/inference_model.onnx") as session:
            assert list(session.getInputNames()) == ["input"]
        print("ok")
    """
    proc = child(code, str(out), cwd=tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_a_training_session_over_artifacts_with_external_data_inside_their_folder(tmp_path: Path) -> None:
    """The dropout artifacts' training and eval models saved with their initializers (the dropout ratio and
    mode, the gradient graph's constants) in a file of the folder: a step trains, and the inference model
    exported into another folder holds the eval model's external tensors (the runtime would copy their
    locations)."""
    folder = tmp_path / "artifacts"
    shutil.copytree(ARTIFACTS / "dropout", folder)
    for name in ("training_model.onnx", "eval_model.onnx"):
        model = onnx.load(str(folder / name))
        onnx.save(model, str(folder / name), save_as_external_data=True, location=f"{name}.data", size_threshold=0)
        assert external_tensors((folder / name).read_bytes())
    code = """
        import sys
        import numpy as np
        from ort_cffi import OrtEnvironment
        folder = sys.argv[1]
        env = OrtEnvironment.getEnvironment()
        rng = np.random.default_rng(0)
        batch = {"input": rng.standard_normal((8, 20)).astype(np.float32), "labels": rng.integers(0, 3, 8).astype(np.int64)}
        with env.createTrainingSession(folder + "/checkpoint", folder + "/training_model.onnx",
                                       folder + "/eval_model.onnx", folder + "/optimizer_model.onnx") as session:
            before = session.copyParametersToBuffer()
            with session.trainStep(batch) as result:
                assert np.isfinite(result[0].getValue())
            session.optimizerStep()
            assert not np.array_equal(before, session.copyParametersToBuffer())  # the step trained
            with session.evalStep(batch) as result:
                expected = result[0].getValue()
            session.exportModelForInference(sys.argv[2], ["onnx::loss::26"])
        from ort_cffi._facade.external_data import external_tensors
        assert external_tensors(open(sys.argv[2], "rb").read()) == []  # the export holds its data
        with env.createSession(sys.argv[2]) as exported, exported.run(batch) as result:
            assert np.isclose(result[0].getValue(), expected)
        print("ok")
    """
    (tmp_path / "elsewhere").mkdir()
    proc = child(code, str(folder), str(tmp_path / "elsewhere" / "inference.onnx"), cwd=tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
