"""The engine's models are prepared (classified and lowered) without onnx in the training process: from a cache
keyed by their contents and the preparing code's version, or in a child process; refusals still name the
operator before anything runs, and a changed file is never answered from a stale entry."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import DIGITS, ROOT
from onnx import helper, numpy_helper
from test_engine_training import current_library

from ort_cffi._backends.engine import prepared
from ort_cffi._backends.engine.checkpoint_codec import read_checkpoint

TRAIN_WITHOUT_ONNX = """
import json, sys
import numpy as np
import ort_cffi._backends.engine.prepared as prepared
if sys.argv[1] == "cached only":  # a cache hit makes no child and lowers nothing here
    def refuse(*args, **kwargs):
        raise AssertionError("prepared again")
    prepared.prepare_here = prepared._prepare_in_child = refuse
from ort_cffi import OrtEnvironment
art = {art!r}
data = np.load(art + "/digits.npz")
with OrtEnvironment.getEnvironment().createTrainingSession(
        art + "/checkpoint", art + "/training_model.onnx", art + "/eval_model.onnx",
        art + "/optimizer_model.onnx") as s:
    assert "onnx" not in sys.modules, "onnx imported by the training process"
    start = s.copyParametersToBuffer(False)
    for step in range(2):
        s.trainStep({{"input": data["train_input"][:16], "labels": data["train_labels"][:16]}}).close()
        s.optimizerStep()
        s.lazyResetGrad()
    print(json.dumps({{"changed": float(np.abs(s.copyParametersToBuffer(False) - start).max()),
                      "onnx": "onnx" in sys.modules}}))
"""


def _train(tmp_path: Path, mode: str) -> dict:
    env = {**os.environ, "ORT_CFFI_LIBRARY": str(current_library()), "ORT_CFFI_BACKEND": "",
           "ORT_CFFI_CACHE_DIR": str(tmp_path / "cache"), "ORT_CFFI_ENGINE_PREPARE": "auto"}
    proc = subprocess.run([sys.executable, "-c", TRAIN_WITHOUT_ONNX.format(art=str(DIGITS)), mode], env=env,
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_training_process_trains_without_importing_onnx_and_then_from_the_cache(tmp_path: Path) -> None:
    first = _train(tmp_path, "child on a miss")
    assert first["changed"] > 0 and not first["onnx"]
    entries = list((tmp_path / "cache" / "engine").iterdir())
    assert len(entries) == 1
    again = _train(tmp_path, "cached only")
    assert again == first  # the same steps from the same start: the same parameters


def _parameters() -> tuple:
    checkpoint = read_checkpoint(str(DIGITS / "checkpoint"))
    return list(checkpoint.trainable) + list(checkpoint.frozen), list(checkpoint.trainable)


def _sources(folder: Path) -> tuple:
    return ((str(folder / "training_model.onnx"), None), (str(folder / "eval_model.onnx"), None),
            (str(folder / "optimizer_model.onnx"), None))


def test_an_operator_with_no_lowering_is_refused_by_name_through_the_child(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_CFFI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ORT_CFFI_ENGINE_PREPARE", "child")
    model = onnx.load(str(DIGITS / "training_model.onnx"))
    loss = model.graph.output[0].name
    model.graph.node.append(helper.make_node("NoSuchTrainingOpGrad", [loss], ["refused_out"], domain="com.microsoft"))
    model.graph.output.append(helper.make_empty_tensor_value_info("refused_out"))
    names, trainable = _parameters()
    train = (None, model.SerializeToString())
    with pytest.raises(ValueError, match="NoSuchTrainingOpGrad"):
        prepared.prepare(train, None, None, names, trainable, None)
    assert not (tmp_path / "cache" / "engine").exists() or not list((tmp_path / "cache" / "engine").iterdir())


def _counting(monkeypatch: pytest.MonkeyPatch) -> list:
    calls: list = []
    here = prepared.prepare_here

    def counted(*args, **kwargs):
        calls.append(args[0])
        return here(*args, **kwargs)

    monkeypatch.setattr(prepared, "prepare_here", counted)
    monkeypatch.setenv("ORT_CFFI_ENGINE_PREPARE", "here")
    return calls


def test_a_changed_model_or_external_data_file_is_prepared_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_CFFI_CACHE_DIR", str(tmp_path / "cache"))
    calls = _counting(monkeypatch)
    folder = tmp_path / "art"
    shutil.copytree(DIGITS, folder)
    # a constant the training graph reads, kept in an external data file beside the model
    model = onnx.load(str(folder / "training_model.onnx"))
    loss = model.graph.output[0].name
    model.graph.initializer.append(numpy_helper.from_array(np.ones(64, np.float32), "kept_aside"))
    model.graph.node.append(helper.make_node("ReduceSum", ["kept_aside"], ["kept_sum"], keepdims=0))
    model.graph.output.append(helper.make_tensor_value_info("kept_sum", onnx.TensorProto.FLOAT, []))
    onnx.save_model(model, str(folder / "training_model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    names, trainable = _parameters()
    sources = _sources(folder)

    first = prepared.prepare(*sources, names, trainable, None)
    assert len(calls) == 1 and str(folder / "weights.bin") in first.external
    again = prepared.prepare(*sources, names, trainable, None)
    assert len(calls) == 1 and again.training == first.training  # from the cache

    data = bytearray((folder / "weights.bin").read_bytes())
    data[0] ^= 0x01
    (folder / "weights.bin").write_bytes(bytes(data))
    changed = prepared.prepare(*sources, names, trainable, None)
    assert len(calls) == 2 and changed.training != first.training

    model = onnx.load(str(folder / "eval_model.onnx"))
    model.doc_string = "changed"
    onnx.save(model, str(folder / "eval_model.onnx"))
    prepared.prepare(*sources, names, trainable, None)
    assert len(calls) == 3
    prepared.prepare(*sources, names, trainable, 7)  # another seed: other random operators' seeds
    assert len(calls) == 4


def test_the_cache_key_holds_the_preparing_codes_version(tmp_path: Path) -> None:
    version = prepared.code_version()
    assert version is not None
    request = {"parameters": [], "trainable": [], "seed": None}
    sources = list(_sources(DIGITS))
    assert prepared._key(version, request, sources) != prepared._key(version + "changed", request, sources)
    read = {path.name for path in prepared.source_files()}
    lowering = {path.name for path in (ROOT / "ort_cffi" / "_backends" / "engine" / "lowering").glob("*.py")}
    assert lowering <= read and {"models.py", "prepared.py"} <= read


def test_no_cache_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_CFFI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ORT_CFFI_ENGINE_CACHE", "0")
    calls = _counting(monkeypatch)
    names, trainable = _parameters()
    for _ in range(2):
        prepared.prepare(*_sources(DIGITS), names, trainable, None)
    assert len(calls) == 2 and not (tmp_path / "cache").exists()


def test_the_cache_keeps_the_most_recently_used_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORT_CFFI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(prepared, "KEEP_ENTRIES", 2)
    calls = _counting(monkeypatch)
    names, trainable = _parameters()
    for seed in range(4):  # four entries, one per seed
        prepared.prepare(*_sources(DIGITS), names, trainable, seed)
    assert len(list((tmp_path / "cache" / "engine").iterdir())) == 2
    prepared.prepare(*_sources(DIGITS), names, trainable, 3)  # the last one written is kept
    assert len(calls) == 4
