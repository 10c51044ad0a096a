"""ort_cffi.artifacts and ort-cffi-artifacts: ONNX Runtime's generator without torch, checked byte for byte
against its documented use (golden hashes), and every bad input a user may bring."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import DIGITS, ROOT, run_child
from ort_cffi import OrtEnvironment
from ort_cffi.cli import artifacts as artifacts_cli
from ort_cffi.artifacts import _child as child
from ort_cffi.artifacts.options import GENERATORS
from ort_cffi.artifacts import (
    ALL_PARAMETERS,
    ENV_PYTHON,
    MODEL_OUTPUTS,
    ArtifactsInputError,
    GeneratorUnavailableError,
    LossType,
    OptimType,
    artifacts_match,
    find_generator,
    generate_artifacts,
    read_manifest,
    request_options,
)

sys.path.insert(0, str(ROOT / "scripts"))
import golden_artifacts  # noqa: E402  (scripts/ is no package)

# ONNX Runtime's own generate_artifacts, imported as it documents (`from onnxruntime.training import
# artifacts`, torch 2.13.0 CPU installed), one fresh process per configuration, wrote these files from
# tests/data/golden_mlp.onnx: `python scripts/golden_artifacts.py reference` in a separate environment
# (Python 3.11.7, onnxruntime-training-cpu 1.19.2, onnx 1.16.2). ort_cffi printed the same there, here,
# and with onnx 1.23.2 (which stamps the optimizer model with IR version 14; brought down to 10, it is
# these bytes again).
GOLDEN_MODEL_SHA256 = "9426adf7be408c39a575d9fd15cdc0e89155c9774c589196033e13d69f8a4163"
GOLDEN = {
    "defaults+nominal": {
        "checkpoint": "98b4bced04ad9456134f9b5a8128671cdc4dfec8dcd951c933a9ef58d51400e5",
        "eval_model.onnx": "a379aab3d0a28365cba1a649d9cab34a57a8bb6040207257c8ac5ed2e99cc4cf",
        "nominal_checkpoint": "13a62d91748581230f30d728aae1749262c41d0074bacfaee1da8d4a0dfbfc38",
        "optimizer_model.onnx": "b02978d11ef99ac1d83f66cb29bb85fea8bce623c149f71fa78665085235e918",
        "training_model.onnx": "1f131e89f91960aeb867f3d970c71f41d0e9e45acf04d57a116e1af23a4096db",
    },
    "head-mse-sgd": {
        "checkpoint": "855496a8768303b52d2dfdb0a68dc9c2edd6eff6743d5c01e2ebfc28da5a40c3",
        "eval_model.onnx": "8aedb23eeb8e3aa188a6e411e02877f5e10def8a24652c63eb70323e0fa494fc",
        "optimizer_model.onnx": "b5fb26cd01f41c598a4808064a9c4e802db38880febfb368d4d1678370dcb59d",
        "training_model.onnx": "97e42cd8477aa91c6f6eb97be6421035b8633ecac702c20c29034e51402b2f15",
    },
}

# The digits inference model as the digits_model fixture exports it, and its default artifacts, made on
# CPython 3.11.7 (onnxruntime-training-cpu 1.19.2's own layer, onnx 1.16.2). CPython 3.13.0 made the same bytes
# with the cp312 wheel's layer from the runtime store (onnx 1.18.0), recording that the optimizer model's IR
# version 11 was brought down to 10.
DIGITS_MODEL_SHA256 = "336f97a5760045164eb6bdbea79def2589f71185dd8a56fd0cd40d126836148e"
DIGITS_ARTIFACTS = {
    "checkpoint": "1484573d149ef97febc270e36357154b98604e68dfef27ff320ceb74a7d42211",
    "eval_model.onnx": "c69d6fa123c5b7dc251e0c6a3055e43868d423e5e82a7d6ea7fa96a0b68bcb7c",
    "optimizer_model.onnx": "b02978d11ef99ac1d83f66cb29bb85fea8bce623c149f71fa78665085235e918",
    "training_model.onnx": "6bd907e1c505f87d69e3e51d23990b7881f8e29ab60e6c5cf1894e6569a8dba0",
}
# ort_cffi's own training model of the digits model, in the forms the table chooses for its sizes
# (ort_cffi/data/standard_forms.json; its losses are ONNX Runtime's within 1e-5: tests/builder/test_standard_forms.py).
DIGITS_OWN_TRAINING_MODEL = "a6ae011965fa3f251bb73b90a7a1d686489c519cadf872ef82927389bd2cf43a"
# What a newer onnx changes, and ort_cffi brings back and records (onnx 1.18 stamps IR version 11).
ALLOWED_NOTE = re.compile(r"optimizer_model\.onnx: IR version 1[1-9] brought down to 10")


# --- small models -------------------------------------------------------------------------------------------

def _init(rng: np.random.Generator, name: str, *shape: int) -> TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def mlp(path: Path, *, ir: int = 8, opset: int = 17, outputs: str = "logits", dropout: bool = False,
        int_initializer: bool = False) -> Path:
    """x [N, 6] -> Gemm -> Relu [-> Dropout] -> Gemm -> logits [N, 3], and by ``outputs``:
    "logits+probabilities" (two outputs), "label" (an int64 ArgMax only), "score" (a rank-1 sum)."""
    rng = np.random.default_rng(0)
    inits = [_init(rng, "fc1.weight", 4, 6), _init(rng, "fc1.bias", 4), _init(rng, "fc2.weight", 3, 4), _init(rng, "fc2.bias", 3)]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h_pre"], transB=1),
             helper.make_node("Relu", ["h_pre"], ["h"])]
    hidden = "h"
    if dropout:
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "drop.ratio"))
        nodes.append(helper.make_node("Dropout", ["h", "drop.ratio"], ["h_drop", "drop.mask"]))  # its gradient needs the mask
        hidden = "h_drop"
    nodes.append(helper.make_node("Gemm", [hidden, "fc2.weight", "fc2.bias"], ["gemm"], transB=1))
    if int_initializer:  # a Reshape's shape: an int64 initializer that is no parameter
        inits.append(numpy_helper.from_array(np.array([-1, 3], np.int64), "reshape.shape"))
        nodes.append(helper.make_node("Reshape", ["gemm", "reshape.shape"], ["logits"]))
    else:
        nodes.append(helper.make_node("Identity", ["gemm"], ["logits"]))
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])
    graph_outputs = [logits]
    if outputs == "logits+probabilities":
        nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
        graph_outputs.append(helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]))
    elif outputs == "label":
        nodes.append(helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0))
        graph_outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])]
    elif outputs == "score":
        nodes.append(helper.make_node("ReduceSum", ["logits"], ["score"], keepdims=0))
        graph_outputs = [helper.make_tensor_value_info("score", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    path.write_bytes(model.SerializeToString())
    return path


def loss_model(path: Path) -> Path:
    """A model whose first output already is the loss: mean((Gemm(x) - target)^2), then the prediction."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["prediction"], transB=1),
             helper.make_node("Sub", ["prediction", "target"], ["error"]),
             helper.make_node("Mul", ["error", "error"], ["squared"]),
             helper.make_node("ReduceMean", ["squared"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "regression",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("target", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("prediction", TensorProto.FLOAT, ["N", 2])],
        [_init(rng, "w", 2, 5), _init(rng, "b", 2)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture(scope="module")
def digits_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits inference model, as ort-cffi-train exports it (here from the untrained checkpoint)."""
    path = tmp_path_factory.mktemp("digits") / "inference_model.onnx"
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(DIGITS / "checkpoint", DIGITS / "training_model.onnx", DIGITS / "eval_model.onnx") as s:
        s.exportModelForInference(path, ["logits"])
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hashes(folder: Path) -> dict:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.name != "artifacts.json"}


# --- byte for byte ONNX Runtime's own -----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(GOLDEN))
@pytest.mark.needs_onnxruntime_generator
def test_golden_hashes_of_onnx_runtimes_own_generator(tmp_path: Path, name: str) -> None:
    assert sha256(golden_artifacts.MODEL) == GOLDEN_MODEL_SHA256
    ours = golden_artifacts.ort_cffi_options(name)
    made = generate_artifacts(golden_artifacts.MODEL, artifact_directory=tmp_path, generator="onnxruntime", **ours)
    assert hashes(tmp_path) == GOLDEN[name]
    assert all(ALLOWED_NOTE.fullmatch(note) for note in made.notes), made.notes


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_ort_cffis_builder_writes_onnx_runtimes_files_but_the_training_graph(tmp_path: Path, name: str) -> None:
    """ort_cffi's own generator, on every interpreter: the checkpoint, nominal checkpoint, eval and optimizer
    models are byte for byte ONNX Runtime's golden files; the training model is its own (its losses equal ONNX
    Runtime's: tests/builder/test_generate.py)."""
    ours = golden_artifacts.ort_cffi_options(name)
    made = generate_artifacts(golden_artifacts.MODEL, artifact_directory=tmp_path, **ours)
    written = hashes(tmp_path)
    assert {k: v for k, v in written.items() if k != "training_model.onnx"} == {
        k: v for k, v in GOLDEN[name].items() if k != "training_model.onnx"}
    assert made.versions["generator"] == "ort_cffi"


@pytest.mark.needs_training_build  # its model is the training build's export (the engine exports other bytes)
def test_the_digits_artifacts_are_3_11s_on_every_interpreter(tmp_path: Path, digits_model: Path) -> None:
    """ort_cffi's builder, in every interpreter: the digits model's checkpoint, eval and optimizer models are
    the bytes ONNX Runtime's generator makes on 3.11 with the training wheel, and its training model is the
    same file everywhere."""
    assert sha256(digits_model) == DIGITS_MODEL_SHA256
    made = generate_artifacts(digits_model, artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert hashes(tmp_path) == dict(DIGITS_ARTIFACTS, **{"training_model.onnx": DIGITS_OWN_TRAINING_MODEL})
    assert not made.notes
    assert made.versions["executable"] == sys.executable and made.versions["generator"] == "ort_cffi"


def test_path_bytes_and_model_proto_give_the_same_files(tmp_path: Path, digits_model: Path) -> None:
    generate_artifacts(digits_model, artifact_directory=tmp_path / "path",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(digits_model.read_bytes(), artifact_directory=tmp_path / "bytes",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    generate_artifacts(onnx.load(str(digits_model)), artifact_directory=tmp_path / "proto",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert hashes(tmp_path / "path") == hashes(tmp_path / "bytes") == hashes(tmp_path / "proto")
    assert read_manifest(tmp_path / "path")["model"]["path"] == str(digits_model.resolve())
    assert read_manifest(tmp_path / "bytes")["model"]["path"] is None


def test_this_process_imports_neither_onnxruntime_nor_torch(tmp_path: Path, digits_model: Path) -> None:
    proc = run_child(f"""
        import sys
        from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
        made = generate_artifacts({str(digits_model)!r}, ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                                  artifact_directory={str(tmp_path)!r}, additional_output_names=MODEL_OUTPUTS)
        print(sorted(made.files), 'onnxruntime' in sys.modules, 'torch' in sys.modules, 'onnx' in sys.modules)
    """)
    # ort_cffi's builder works on the onnx protobuf here; ONNX Runtime's Python layer and torch stay out
    assert proc.stdout.split("\n")[0] == "['checkpoint', 'eval_model', 'optimizer_model', 'training_model'] False False True"


def test_the_check_needs_the_runtime_here(tmp_path: Path, digits_model: Path) -> None:
    """An interpreter that cannot load the runtime can still generate, unchecked (check=False)."""
    proc = run_child(f"""
        from ort_cffi.artifacts import ALL_PARAMETERS, ArtifactsError, generate_artifacts
        try:
            generate_artifacts({str(digits_model)!r}, ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                               artifact_directory={str(tmp_path / 'a')!r})
        except ArtifactsError as exc:
            print(exc)
        made = generate_artifacts({str(digits_model)!r}, ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw",
                                  artifact_directory={str(tmp_path / 'b')!r}, check=False)
        print(sorted(p.name for p in made.files.values()))
    """, env={"ORT_CFFI_LIBRARY": str(tmp_path / "nowhere" / "libonnxruntime.so")})
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("cannot check the generated artifacts: ONNX Runtime does not load in this interpreter (")
    assert lines[0].endswith("); nothing was written. Generate them with check=False (--no-check) to skip the check, "
                             "and check them where they will train")
    assert not (tmp_path / "a").exists()  # not even the folder it made
    assert lines[1] == "['checkpoint', 'eval_model.onnx', 'optimizer_model.onnx', 'training_model.onnx']"


# --- what it makes ------------------------------------------------------------------------------------------

def test_digits_defaults(tmp_path: Path, digits_model: Path) -> None:
    """Every floating-point initializer trains; cross-entropy adds int64 labels; the eval model keeps logits."""
    out = tmp_path / "new" / "folder"  # created
    made = generate_artifacts(digits_model, artifact_directory=out,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert [p.name for p in made.trainable] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert made.trainable_parameters == made.total_parameters == 64 * 64 + 64 + 10 * 64 + 10
    assert made.loss is LossType.CrossEntropyLoss and made.optimizer is OptimType.AdamW and made.loss_input == "logits"
    assert [str(s) for s in made.training_inputs] == ["input float32 [batch, 64]", "labels int64 [batch]"]
    assert made.added_inputs == ("labels",)
    assert made.eval_outputs[1:] == ("logits",)
    assert sorted(p.name for p in out.iterdir()) == ["artifacts.json", "checkpoint", "eval_model.onnx",
                                                     "optimizer_model.onnx", "training_model.onnx"]
    # The artifacts train, and the eval model exports an inference model with no extra option.
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(made.checkpoint, made.training_model, made.eval_model, made.optimizer_model) as s:
        assert list(s.getTrainInputNames()) == ["input", "labels"]
        with np.load(DIGITS / "digits.npz") as data:
            batch = {"input": data["train_input"][:16], "labels": data["train_labels"][:16]}
        losses = []
        for _ in range(5):
            with s.trainStep(batch) as result:
                losses.append(float(result.get(0).getValue()))
            s.optimizerStep()
            s.lazyResetGrad()
        assert losses[-1] < losses[0]
        s.exportModelForInference(tmp_path / "exported.onnx", list(s.getEvalOutputNames())[1:])


def test_only_the_last_layer(tmp_path: Path, digits_model: Path, capsys: pytest.CaptureFixture) -> None:
    code = artifacts_cli.main([str(digits_model), "--out", str(tmp_path), "--trainable", "fc2.*"])
    out = capsys.readouterr().out
    assert code == 0
    assert "trainable:  2 tensors, 650 parameters (13.5% of the model's 4,810 parameters)" in out
    assert "            fc2.weight  float32 [10, 64]  640\n            fc2.bias    float32 [10]       10\n" in out
    assert "constant:   2 tensors, 4,160 parameters: fc1.weight, fc1.bias (stay constants of the graphs)" in out
    assert "training model inputs: input float32 [batch, 64], labels int64 [batch] (added by the loss: labels)" in out
    assert "eval model outputs:    the loss, logits" in out  # the loss by its role: its name is the generator's
    assert "converted:" not in out  # internals (IR version, opset brought down) only with --verbose
    assert "; they load in a training session" in out
    assert read_manifest(tmp_path)["trainable"] == ["fc2.weight", "fc2.bias"]
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(tmp_path / "checkpoint", tmp_path / "training_model.onnx") as s:
        assert s.getParametersSize(True) == 650 and s.getParametersSize(False) == 650


@pytest.mark.parametrize("loss, added", [("mse", "target float32 [N, 3]"), ("bce-with-logits", "target float32 [N, 3]"),
                                         ("l1", "target float32 [N, 3]"), (LossType.CrossEntropyLoss, "labels int64 [N]")])
def test_each_loss(tmp_path: Path, loss: object, added: str) -> None:
    made = generate_artifacts(mlp(tmp_path / "m.onnx"), loss=loss, optimizer="sgd", artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, additional_output_names=MODEL_OUTPUTS)
    assert str(made.training_inputs[-1]) == added and made.optimizer is OptimType.SGD


def test_no_loss_when_the_first_output_is_the_loss(tmp_path: Path) -> None:
    made = generate_artifacts(loss_model(tmp_path / "m.onnx"), loss=None, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.loss is None and made.loss_input == "loss" and made.added_inputs == ()
    assert made.eval_outputs == ("loss", "prediction")
    assert [s.name for s in made.training_inputs] == ["x", "target"]


def test_several_outputs_with_the_loss_input_named(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx", outputs="logits+probabilities")
    made = generate_artifacts(model, loss_input_names=["logits", "y"], artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.added_inputs == ("y",) and made.eval_outputs[1:] == ("logits", "probabilities")
    made = generate_artifacts(model, loss_input_names="logits", additional_output_names=[], artifact_directory=tmp_path / "o2",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="adamw")
    assert made.added_inputs == ("labels",) and len(made.eval_outputs) == 1


def test_frozen_parameters_stay_in_the_checkpoint(tmp_path: Path) -> None:
    made = generate_artifacts(mlp(tmp_path / "m.onnx"), frozen_params="fc1.*", artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert [p.name for p in made.trainable] == ["fc2.weight", "fc2.bias"]
    assert [p.name for p in made.frozen] == ["fc1.weight", "fc1.bias"] and made.constants == ()
    env = OrtEnvironment.getEnvironment()
    with env.createTrainingSession(made.checkpoint, made.training_model) as s:
        assert s.getParametersSize(True) == 15 and s.getParametersSize(False) == 15 + 28


def test_patterns_leave_out_what_no_gradient_reaches(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx", dropout=True, int_initializer=True)
    made = generate_artifacts(model, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert [p.name for p in made.trainable] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert made.left_out == {"drop.ratio": "it only feeds input 1 of a Dropout node, through which no gradient flows"}
    made = generate_artifacts(model, requires_grad=["*"], artifact_directory=tmp_path / "out", overwrite=True,
                              loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)  # other options
    assert len(made.trainable) == 4 and "drop.ratio" in made.left_out


def threshold_model(path: Path) -> Path:
    """logits = h * (h > thr): the threshold feeds only a comparison, which has no gradient."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Greater", ["h", "thr"], ["mask"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT), helper.make_node("Mul", ["h", "m"], ["logits"])]
    graph = helper.make_graph(nodes, "threshold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                              [_init(rng, "w", 3, 4), _init(rng, "b", 3), numpy_helper.from_array(np.array(0.1, np.float32), "thr")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


def test_what_the_gradient_builder_finds_unreachable(tmp_path: Path) -> None:
    """A tensor the static check cannot judge: the gradient builder names it, ALL_PARAMETERS leaves it out
    and generates again (from a fresh name counter: the same files as without it), and so does a plain name,
    as code written for ONNX Runtime names the parameters it trains."""
    model = threshold_model(tmp_path / "m.onnx")
    made = generate_artifacts(model, artifact_directory=tmp_path / "default",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert [p.name for p in made.trainable] == ["w", "b"]
    assert made.left_out == {"thr": "no gradient reaches it from the loss"}
    generate_artifacts(model, requires_grad=["w", "b"], artifact_directory=tmp_path / "named",
                       loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert hashes(tmp_path / "default") == hashes(tmp_path / "named")
    named = generate_artifacts(model, requires_grad=["w", "thr"], artifact_directory=tmp_path / "thr",
                               loss="cross-entropy", optimizer="adamw")
    assert [p.name for p in named.trainable] == ["w"] and named.left_out == {"thr": "no gradient reaches it from the loss"}


def test_a_newer_ir_version_is_brought_down(tmp_path: Path) -> None:
    made = generate_artifacts(mlp(tmp_path / "m.onnx", ir=13), artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.model_ir_version == 13 and made.ir_version == 10
    assert made.notes[0] == "IR version 13 brought down to 10"
    assert all(ALLOWED_NOTE.fullmatch(note) for note in made.notes[1:])  # onnx 1.18 (3.13) stamps its own too
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        assert onnx.load(str(tmp_path / "out" / name)).ir_version <= 10


def test_bring_down_the_generators_own_ir_version() -> None:
    """onnx 1.18 and later stamp the optimizer model with their own IR version (14 for onnx 1.23), which
    ONNX Runtime 1.19 refuses; the child brings it down. (The installed onnx 1.16 writes 10.)"""
    model = helper.make_model(helper.make_graph([], "optimizer", [], []), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 14
    assert child.bring_down(onnx, model, "the optimizer model") == ["IR version 14 brought down to 10"]
    assert model.ir_version == 10
    assert child.bring_down(onnx, model, "the optimizer model") == []


def test_files_of_an_earlier_generation_are_replaced(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    generate_artifacts(model, nominal_checkpoint=True, artifact_directory=tmp_path / "out",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert (tmp_path / "out" / "nominal_checkpoint").is_file()
    generate_artifacts(model, optimizer=None, artifact_directory=tmp_path / "out", overwrite=True,
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy", additional_output_names=MODEL_OUTPUTS)  # other options: asked
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "artifacts.json", "checkpoint", "eval_model.onnx", "training_model.onnx"]


def test_artifacts_of_another_model_or_options_are_not_replaced_unasked(tmp_path: Path, capsys) -> None:
    """With overwrite=False (ort-cffi-artifacts without --overwrite) only the same model with the same options
    may be generated again into a folder; another model, other options, or artifact files that no
    artifacts.json describes are refused before anything is written. generate_artifacts' default replaces
    them, as ONNX Runtime's does."""
    model, other = mlp(tmp_path / "m.onnx"), mlp(tmp_path / "other.onnx", opset=16)
    out = tmp_path / "out"
    head = dict(requires_grad="fc2.*", loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS,
                artifact_directory=out, overwrite=False)
    generate_artifacts(model, **head)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    generate_artifacts(model, **head)  # the same again: allowed, same bytes
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(ArtifactsInputError, match=rf"artifacts folder '{out}' holds the artifacts of another model "
                                                  rf"\({tmp_path / 'm.onnx'}\): they are not replaced unless asked. "
                                                  r"Pass overwrite=True \(--overwrite\)"):
        generate_artifacts(other, **head)
    with pytest.raises(ArtifactsInputError, match=r"holds the artifacts of the same model with other options "
                                                  r"\(requires_grad \['fc2.\*'\] -> None\)"):
        generate_artifacts(model, **dict(head, requires_grad=ALL_PARAMETERS))
    assert artifacts_cli.main([str(other), "--out", str(out)]) == 2
    assert "they are not replaced unless asked. Pass overwrite=True (--overwrite)" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
    (out / "artifacts.json").unlink()
    with pytest.raises(ArtifactsInputError, match=r"holds checkpoint, training_model.onnx, eval_model.onnx, "
                                                  r"optimizer_model.onnx, which no artifacts.json describes"):
        generate_artifacts(model, **head)
    assert artifacts_cli.main([str(other), "--out", str(out), "--overwrite"]) == 0
    assert read_manifest(out)["model"]["path"] == str((tmp_path / "other.onnx").resolve())
    generate_artifacts(model, **dict(head, overwrite=True))  # ONNX Runtime's default: replaced
    assert read_manifest(out)["model"]["path"] == str((tmp_path / "m.onnx").resolve())
    generate_artifacts(other, ALL_PARAMETERS, loss="cross-entropy", artifact_directory=out)
    assert read_manifest(out)["model"]["path"] == str((tmp_path / "other.onnx").resolve())


def test_artifacts_match(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    out = tmp_path / "out"
    generate_artifacts(model, requires_grad="fc2.*", artifact_directory=out,
                       loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    options = request_options(requires_grad="fc2.*")
    assert artifacts_match(out, model, options)
    assert not artifacts_match(out, model, request_options(requires_grad="fc*"))
    assert not artifacts_match(out, mlp(tmp_path / "other.onnx", opset=16), options)
    (out / "eval_model.onnx").write_bytes((out / "eval_model.onnx").read_bytes() + b"\0")
    assert not artifacts_match(out, model, options)


# --- bad input ----------------------------------------------------------------------------------------------

# ort_cffi's former defaults, asked for (generate_artifacts' own are ONNX Runtime's): the refusals' options override them
FORMER_DEFAULTS: Dict[str, object] = {"requires_grad": ALL_PARAMETERS, "loss": "cross-entropy", "optimizer": "adamw",
                                      "additional_output_names": MODEL_OUTPUTS}


def _refusal(tmp_path: Path, model: object, **options: object) -> str:
    with pytest.raises(ArtifactsInputError) as info:
        generate_artifacts(model, artifact_directory=tmp_path / "out", **{**FORMER_DEFAULTS, **options})
    assert not (tmp_path / "out").exists()  # nothing written, not even the folder it would have made
    return str(info.value)


def test_a_pattern_that_matches_nothing(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    assert _refusal(tmp_path, model, requires_grad=["fc2.*", "head.*"]) == (
        "requires_grad pattern 'head.*' matches no initializer of the model (its floating-point initializers: "
        "fc1.weight, fc1.bias, fc2.weight, fc2.bias)")
    # frozen_params as ONNX Runtime takes it: a name that freezes nothing is passed over, and noted
    made = generate_artifacts(model, ALL_PARAMETERS, frozen_params=["fc3.weight", "fc9.*"], loss="cross-entropy",
                              artifact_directory=tmp_path / "frozen")
    assert made.frozen == () and len(made.trainable) == 4
    assert "frozen_params: fc3.weight: no initializer of the model (a value it computes); nothing to freeze" in made.notes
    assert ("frozen_params: fc9.*: a pattern that matches no initializer of the model; nothing to freeze"
            in made.notes)


def test_a_parameter_that_is_not_floating_point(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx", int_initializer=True)
    # named, as code that lists every initializer names it: passed over, and noted
    made = generate_artifacts(model, ["fc2.*", "reshape.shape"], loss="cross-entropy", artifact_directory=tmp_path / "a")
    assert [p.name for p in made.trainable] == ["fc2.weight", "fc2.bias"]
    assert "requires_grad: reshape.shape (int64): not floating-point; kept as constants of the graphs" in made.notes
    made = generate_artifacts(model, ["fc2.*"], ["reshape.shape"], loss="cross-entropy", artifact_directory=tmp_path / "b")
    assert made.frozen == ()
    assert "frozen_params: reshape.shape (int64): not floating-point; kept as constants of the graphs" in made.notes
    assert "pattern 'reshape.*' matches only tensors that are not floating-point: reshape.shape (int64)" in _refusal(
        tmp_path, model, requires_grad="reshape.*")


def test_a_named_parameter_no_gradient_reaches_is_left_out(tmp_path: Path) -> None:
    made = generate_artifacts(mlp(tmp_path / "m.onnx", dropout=True), ["fc2.*", "drop.ratio"], loss="cross-entropy",
                              artifact_directory=tmp_path / "out")
    assert [p.name for p in made.trainable] == ["fc2.weight", "fc2.bias"]
    assert made.left_out == {"drop.ratio": "it only feeds input 1 of a Dropout node, through which no gradient flows"}


def test_trainable_and_frozen_at_once_or_nothing_left(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    assert "trainable and frozen at once: fc2.weight" in _refusal(tmp_path, model, requires_grad="fc2.*", frozen_params="*.weight")
    assert "nothing to train" in _refusal(tmp_path, model, frozen_params="*")


@pytest.mark.parametrize("outputs, options, message", [
    ("label", {}, "the cross-entropy loss needs a floating-point tensor to read, but the model's output 'label' is int64 [N]"),
    ("score", {}, "cross-entropy needs one score per class, an output of shape [N, classes], but the model's output 'score' is float32 []"),
    ("logits+probabilities", {}, "the model has 2 outputs (logits, probabilities): name the one the cross-entropy loss reads "
                                 "with loss_input_names=[NAME] (--loss-input NAME)"),
    ("logits", {"loss_input_names": ["scores"]}, "loss_input_names names 'scores', which is not an output of the model (its outputs: logits)"),
    ("logits", {"loss_input_names": ["logits", "h"]}, "the loss adds an input named 'h', but the model already has a value of that name"),
    ("logits", {"loss": None}, "with no loss, the model's first output is the loss, but 'logits' has shape [N, 3], not a scalar"),
    ("label", {"loss": None}, "with no loss, the model's first output is the loss, but 'label' is int64 [N], not a floating-point scalar"),
    ("logits", {"additional_output_names": ["nowhere"]}, "additional_output_names names 'nowhere', which is no value of the model"),
], ids=["int-output", "no-class-dimension", "several-outputs", "unknown-loss-input", "target-name-taken", "not-scalar",
        "int-loss", "unknown-extra-output"])
def test_a_model_without_a_usable_output_for_the_loss(tmp_path: Path, outputs: str, options: dict, message: str) -> None:
    assert message in _refusal(tmp_path, mlp(tmp_path / "m.onnx", outputs=outputs), **options)


def test_a_model_with_no_outputs(tmp_path: Path) -> None:
    model = helper.make_model(helper.make_graph([], "empty", [], []), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _refusal(tmp_path, model.SerializeToString()) == "the model has no outputs: the cross-entropy loss has nothing to read"


def test_a_folder_that_cannot_be_written(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    (tmp_path / "file").write_text("")
    cases = [
        (tmp_path / "file", f"artifacts folder '{tmp_path / 'file'}' exists and is not a folder"),
        (tmp_path / "file" / "sub", f"cannot create the artifacts folder '{tmp_path / 'file' / 'sub'}': Not a directory"),
        (Path("/sys/kernel"), "cannot write into the artifacts folder '/sys/kernel': Permission denied"),  # also for root
        (Path("/sys/ort_cffi_artifacts"), "cannot create the artifacts folder '/sys/ort_cffi_artifacts': Operation not permitted"),
    ]
    for folder, message in cases:
        with pytest.raises(ArtifactsInputError) as info:
            generate_artifacts(model, artifact_directory=folder,
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        assert str(info.value) == message


def test_bad_models_and_options(tmp_path: Path) -> None:
    not_onnx = tmp_path / "model.onnx"
    not_onnx.write_text("not a model")
    for model, message in [
        (tmp_path / "none.onnx", f"model '{tmp_path / 'none.onnx'}' does not exist"),
        (tmp_path, f"model '{tmp_path}' is a folder, not an ONNX file"),
        (b"", "the model bytes are empty"),
        (not_onnx, f"model '{not_onnx}' is not an ONNX model that onnx {onnx.__version__} can read"),
    ]:
        with pytest.raises(ArtifactsInputError) as info:
            generate_artifacts(model, artifact_directory=tmp_path / "out",
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        assert str(info.value).startswith(message), str(info.value)
    model = mlp(tmp_path / "m.onnx")
    with pytest.raises(RuntimeError, match="Unknown loss provided 'hinge'.*ort_cffi's names: 'mse', 'cross-entropy'"):
        generate_artifacts(model, loss="hinge",
                           requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(RuntimeError, match="Unknown optimizer provided 'adam'"):
        generate_artifacts(model, optimizer="adam",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(RuntimeError, match="either a string or an ONNX ModelProto for the model .*, not int"):
        generate_artifacts(3,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="requires_grad must hold non-empty strings, not 3"):
        generate_artifacts(model, requires_grad=["fc1.weight", 3],
                           loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)  # type: ignore[list-item]


@pytest.mark.parametrize("generator", GENERATORS)
def test_a_missing_external_data_file_is_named_as_such(tmp_path: Path, generator: str) -> None:
    """A model saved with its weights in model.onnx.data, copied without that file: the message opened with
    "is not an ONNX model", which misleads; it names the missing file now."""
    source = onnx.load(str(mlp(tmp_path / "m.onnx")))
    copied = tmp_path / "copied"
    copied.mkdir()
    onnx.save(source, str(copied / "big.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="big.onnx.data", size_threshold=0)
    (copied / "big.onnx.data").unlink()
    with pytest.raises(ArtifactsInputError) as info:
        generate_artifacts(copied / "big.onnx", artifact_directory=tmp_path / "out", generator=generator,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    message = str(info.value)  # said by the external-data check that runs before any generator
    assert "is not an ONNX model" not in message and f"external data file '{copied / 'big.onnx.data'}' is missing" in message
    assert not (tmp_path / "out").exists()


def test_an_opset_onnx_cannot_bring_down(tmp_path: Path) -> None:
    """An opset newer than the installed onnx knows cannot be converted by it: 28 (onnx 1.23's default) with
    onnx 1.16 or 1.18; with onnx 1.23 itself (CPython 3.14 and later), which converts 28, one past its newest."""
    opset = max(28, onnx.defs.onnx_opset_version() + 1)
    message = _refusal(tmp_path, mlp(tmp_path / "m.onnx", ir=14, opset=opset))
    assert message.startswith(f"model '{tmp_path / 'm.onnx'}' uses opset {opset} of the ONNX operators, and ONNX Runtime 1.19 "
                              "knows opsets up to 21; onnx's version converter could not bring it down"), message
    assert message.endswith("export the model with opset 21 or lower")


def test_an_element_type_ir_version_10_lacks(tmp_path: Path) -> None:
    model = onnx.load(str(mlp(tmp_path / "m.onnx", ir=11)))
    model.graph.initializer.append(TensorProto(name="fp4", data_type=23, dims=[2], raw_data=b"\0"))  # FLOAT4E2M1
    message = _refusal(tmp_path, model)
    assert message.startswith("the model (an onnx.ModelProto) has IR version 11 and uses the element type "), message
    assert message.endswith("which IR version 10 (the newest ONNX Runtime 1.19 accepts) does not have")


# --- interpreters without ONNX Runtime's Python layer (3.13 and later) ---------------------------------------

@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An interpreter without onnx or onnxruntime, as Python 3.13 is for ONNX Runtime 1.19's training layer."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return str(folder / "bin" / "python")


@pytest.mark.needs_onnxruntime_generator
def test_this_interpreter_lacks_the_generator(tmp_path: Path, bare_python: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime's generator, asked for, in an interpreter that lacks what it needs."""
    monkeypatch.delenv(ENV_PYTHON, raising=False)
    monkeypatch.setattr(sys, "executable", bare_python)
    with pytest.raises(GeneratorUnavailableError) as info:
        generate_artifacts(mlp(tmp_path / "m.onnx"), artifact_directory=tmp_path / "out", generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    message = str(info.value)
    assert message.startswith(f"cannot generate training artifacts with this interpreter (Python "
                              f"{'.'.join(map(str, sys.version_info[:3]))}, {bare_python})")
    assert ": the onnx package is not installed" in message
    if find_generator().layer is None:  # the training wheel's own layer (3.8-3.12)
        assert "The gradient builder exists only in ONNX Runtime's Python training layer" in message
        assert f"--python PATH (python=PATH) or {ENV_PYTHON}=PATH" in message
        assert "pip install onnxruntime-training-cpu==1.19.2 onnx" in message
    else:  # the runtime store's (3.13 and later): what that layer needs besides
        assert "and ONNX Runtime's Python layer from the runtime store (" in message
        assert f"`{bare_python} -m pip install onnx flatbuffers protobuf sympy packaging coloredlogs`" in message


@pytest.mark.needs_onnxruntime_generator
def test_without_a_stored_layer_a_newer_interpreter_is_told_to_install_the_runtime(tmp_path: Path) -> None:
    """Where the training wheel does not install and the runtime store holds no Python layer, the message says
    what to run; with ort-cffi-artifacts --check-generator too (exit 1)."""
    proc = run_child("""
        import sys
        from ort_cffi.artifacts import GeneratorUnavailableError, find_generator
        from ort_cffi.artifacts.runner import has_own_training_layer
        try:
            print(find_generator().layer, has_own_training_layer())
        except GeneratorUnavailableError as exc:
            print(exc)
    """, env={"ORT_CFFI_RUNTIME_DIR": str(tmp_path / "empty-store"), ENV_PYTHON: ""})
    line = proc.stdout.strip()
    if sys.version_info[:2] <= (3, 12):
        assert line == "None True"  # the training wheel's own layer: pip installs it there
    else:
        assert line.startswith(f"cannot generate training artifacts with this interpreter (Python "
                               f"{'.'.join(map(str, sys.version_info[:3]))}, ")
        assert "the runtime store holds none. Run `ort-cffi-runtime install`: it keeps that layer" in line
    checked = subprocess.run([sys.executable, "-m", "ort_cffi.artifacts", "--check-generator", "--generator", "onnxruntime"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), ENV_PYTHON: "python2.1"})
    assert checked.returncode == 1 and "'python2.1', does not exist or cannot be run" in checked.stderr
    checked = subprocess.run([sys.executable, "-m", "ort_cffi.artifacts", "--check-generator", "--generator", "onnxruntime"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT), ENV_PYTHON: ""})
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("generator: ONNX Runtime 1.19.2 and onnx ")
    assert f"run by this interpreter (Python {'.'.join(map(str, sys.version_info[:3]))}, " in checked.stdout
    # ort_cffi's own builder, the default, needs no ONNX Runtime layer at all
    checked = subprocess.run([sys.executable, "-m", "ort_cffi.artifacts", "--check-generator"], capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT), ENV_PYTHON: "python2.1",
                                             "ORT_CFFI_RUNTIME_DIR": str(tmp_path / "empty-store")})
    assert checked.returncode == 0 and checked.stdout.startswith("generator: ort_cffi ") and "own gradient builder" in checked.stdout


@pytest.mark.needs_onnxruntime_generator
def test_a_named_interpreter_runs_the_generator(tmp_path: Path, bare_python: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    model = mlp(tmp_path / "m.onnx")
    monkeypatch.setenv(ENV_PYTHON, bare_python)
    code = artifacts_cli.main([str(model), "--out", str(tmp_path / "out"), "--generator", "onnxruntime"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: cannot generate training artifacts with the interpreter named by "
                                        f"{ENV_PYTHON} (Python ")
    assert f"`{bare_python} -m pip install onnxruntime-training-cpu==1.19.2 onnx`" in err
    # --python wins over the variable: this test's interpreter has the generator.
    code = artifacts_cli.main([str(model), "--out", str(tmp_path / "out"), "--python", sys.executable])
    out = capsys.readouterr().out
    assert code == 0 and f"Python {'.'.join(map(str, sys.version_info[:3]))} ({sys.executable})" in out
    with pytest.raises(GeneratorUnavailableError, match="the interpreter named by python= \\(--python\\), 'python2.1', "
                                                        "does not exist or cannot be run"):
        generate_artifacts(model, artifact_directory=tmp_path / "out", python="python2.1",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(GeneratorUnavailableError) as info:
        generate_artifacts(model, artifact_directory=tmp_path / "out", python="/bin/false",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert str(info.value) == ("the interpreter named by python= (--python), /bin/false, cannot run the generator (exit code 1, "
                               "no output: is it a Python interpreter?)")


def test_verbose_shows_the_internals(tmp_path: Path, digits_model: Path, capsys: pytest.CaptureFixture) -> None:
    """Every --model run printed "converted: optimizer_model.onnx: IR version 14 brought down to 10" and the
    loss's generated name: internals, now behind --verbose."""
    assert artifacts_cli.main([str(digits_model), "--out", str(tmp_path), "--verbose"]) == 0
    out = capsys.readouterr().out
    notes = read_manifest(tmp_path)["notes"]
    assert all(f"converted:  {note}\n" in out for note in notes)
    assert re.search(r"^eval model outputs:    \S+ \(the loss\), logits$", out, re.M), out


def test_cli_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = mlp(tmp_path / "m.onnx")
    assert artifacts_cli.main([str(model), "--out", str(tmp_path / "out"), "--trainable", "nope*"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --trainable pattern 'nope*' matches no initializer") and "Traceback" not in err
    with pytest.raises(SystemExit):
        artifacts_cli.main([str(model)])  # --out is required
    assert "the following arguments are required: --out" in capsys.readouterr().err


def test_python_m_and_the_console_script(tmp_path: Path) -> None:
    model = mlp(tmp_path / "m.onnx")
    proc = subprocess.run([sys.executable, "-m", "ort_cffi.artifacts", str(model), "--out", str(tmp_path / "out"),
                           "--loss", "mse", "--optimizer", "sgd", "--nominal-checkpoint"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr
    assert "loss:       mse on logits" in proc.stdout and "optimizer:  SGD" in proc.stdout
    assert json.loads((tmp_path / "out" / "artifacts.json").read_text())["options"]["nominal_checkpoint"] is True
