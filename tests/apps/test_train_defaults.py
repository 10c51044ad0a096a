"""Trainer defaults that fit the model (ort_cffi/trainer/model_kind.py): with no --lr, a model with attention
or layer normalization (a transformer) trains at 1e-3; other models at 0.01. At 0.01 a small BERT's
validation loss stalls (docs/guides/training.md has the measured losses); at the default chosen for the
transformers it falls."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import DIGITS, ROOT
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts
from ort_cffi.cli import train as train_cli
from ort_cffi.trainer.lr_finder import suggest
from ort_cffi.trainer.model_kind import ATTENTION_LR, DEFAULT_LR, artifacts_kind, classify, read_nodes

ZOO = ROOT / "tests" / "zoo"
RNG = np.random.default_rng(0)


def weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.1).astype(np.float32), name)


def save(path: Path, nodes: list, inputs: list, output: onnx.ValueInfoProto, inits: list) -> Path:
    model = helper.make_model(helper.make_graph(nodes, path.stem, inputs, [output], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def mlp(path: Path) -> Path:
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1)]
    inits = [weight("fc1.weight", 16, 8), weight("fc1.bias", 16), weight("fc2.weight", 3, 16), weight("fc2.bias", 3)]
    return save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]), inits)


def attention_classifier(path: Path, parts: List[str]) -> Path:
    """Tokens [N, T] -> an embedding -> (with "attention") one head of self-attention -> (with "norm") layer
    normalization -> the mean over T -> a linear classifier. ``parts`` chooses what the graph holds."""
    width, vocabulary = 8, 20
    inits = [weight("embedding", vocabulary, width), weight("head.weight", 3, width), weight("head.bias", 3)]
    nodes = []
    if "embedding" in parts:
        nodes.append(helper.make_node("Gather", ["embedding", "tokens"], ["h"]))
        inputs = [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N", 6])]
    else:  # the same graph over features given directly
        inits.pop(0)
        nodes.append(helper.make_node("Identity", ["features"], ["h"]))
        inputs = [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 6, width])]
    x = "h"
    if "attention" in parts:
        inits += [weight(f"{n}.weight", width, width) for n in ("q", "k", "v")]
        inits.append(numpy_helper.from_array(np.array(width ** 0.5, np.float32), "scale"))
        nodes += [helper.make_node("MatMul", [x, f"{n}.weight"], [n]) for n in ("q", "k", "v")]
        nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["q", "kt"], ["scores"]),
                  helper.make_node("Div", ["scores", "scale"], ["scaled"]),
                  helper.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
                  helper.make_node("MatMul", ["weights", "v"], ["mixed"]),
                  helper.make_node("Add", [x, "mixed"], ["attended"])]
        x = "attended"
    if "norm" in parts:
        inits += [numpy_helper.from_array(np.ones(width, np.float32), "norm.weight"),
                  numpy_helper.from_array(np.zeros(width, np.float32), "norm.bias")]
        nodes.append(helper.make_node("LayerNormalization", [x, "norm.weight", "norm.bias"], ["normed"], axis=-1))
        x = "normed"
    nodes += [helper.make_node("ReduceMean", [x], ["pooled"], axes=[1], keepdims=0),
              helper.make_node("Gemm", ["pooled", "head.weight", "head.bias"], ["logits"], transB=1)]
    return save(path, nodes, inputs, helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3]), inits)


def kind_of(model: Path, folder: Path):  # type: ignore[no-untyped-def]
    made = generate_artifacts(model, artifact_directory=folder, check=False,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    return artifacts_kind(made.files["eval_model"], made.files["checkpoint"])


def test_an_mlp_keeps_the_default_rate(tmp_path: Path) -> None:
    kind = kind_of(mlp(tmp_path / "mlp.onnx"), tmp_path / "mlp")
    assert kind.lr == DEFAULT_LR == 0.01 and kind.evidence == ()


def test_the_embedded_digits_mlp_keeps_the_default_rate() -> None:
    assert artifacts_kind(DIGITS / "eval_model.onnx", DIGITS / "checkpoint").lr == 0.01


@pytest.mark.parametrize("parts,found", [
    (["embedding", "attention", "norm"], ("layer normalization", "attention", "embedding")),
    (["attention"], ("attention",)),
    (["norm"], ("layer normalization",)),
    (["norm", "embedding"], ("layer normalization", "embedding")),
])
def test_what_makes_a_model_take_the_lower_rate(tmp_path: Path, parts: List[str], found: tuple) -> None:
    kind = kind_of(attention_classifier(tmp_path / "m.onnx", parts), tmp_path / "m")
    assert kind.lr == ATTENTION_LR == 1e-3
    assert tuple(e.split(":")[0] for e in kind.evidence) == found, kind.evidence


def test_an_embedding_alone_keeps_the_default_rate(tmp_path: Path) -> None:
    """An embedding feeding an LSTM (the zoo's lstm_text) trains faster at 0.01, and well."""
    kind = kind_of(attention_classifier(tmp_path / "m.onnx", ["embedding"]), tmp_path / "m")
    assert kind.lr == DEFAULT_LR and kind.evidence == ()


def test_matmuls_with_weights_and_a_softmax_are_no_attention(tmp_path: Path) -> None:
    """A softmax over an MLP's output: every MatMul/Gemm there multiplies by a parameter."""
    path = mlp(tmp_path / "mlp.onnx")
    model = onnx.load(str(path))
    model.graph.node.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
    model.graph.output[0].name = "probabilities"
    onnx.save(model, str(path))
    assert kind_of(path, tmp_path / "mlp").lr == DEFAULT_LR


@pytest.mark.parametrize("name,lr", [("transformer_dynamo", ATTENTION_LR), ("bert_tiny", ATTENTION_LR),
                                     ("gpt2_tiny", ATTENTION_LR), ("lstm_text", DEFAULT_LR),
                                     ("cnn_dynamo", DEFAULT_LR), ("sklearn_mlp", DEFAULT_LR)])
def test_the_zoos_models(tmp_path: Path, name: str, lr: float) -> None:
    entry = json.loads((ZOO / "zoo.json").read_text())["models"][name]
    made = generate_artifacts(ZOO / entry["file"], loss=entry["loss"], loss_input_names=[entry["loss_reads"]],
                              artifact_directory=tmp_path / name, check=False,
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert artifacts_kind(made.files["eval_model"], made.files["checkpoint"]).lr == lr


def test_a_file_that_is_no_model_gives_the_plain_default(tmp_path: Path) -> None:
    junk = tmp_path / "eval_model.onnx"
    junk.write_bytes(b"\xff\xff\xff")
    assert artifacts_kind(junk, DIGITS / "checkpoint").lr == DEFAULT_LR
    nodes, constants = read_nodes(DIGITS / "eval_model.onnx")
    assert classify(nodes, set(), constants).lr == DEFAULT_LR


def test_a_small_transformer_learns_with_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The zoo's transformer classifier (embedding, attention, layer normalization), no --lr: the run says
    which rate it chose and why, records it, and the validation loss falls."""
    out = tmp_path / "run"
    code = train_cli.main(["--model", str(ZOO / "transformer_dynamo.onnx"), "--data", str(ZOO / "transformer_dynamo.npz"),
                           "--epochs", "8", "--out", str(out), "--no-progress", "--no-plot"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "lr 0.001 (" in printed and "learning rate 0.001, the default for models with attention" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["lr"] == ATTENTION_LR
    losses = [e["val_loss"] for e in metrics["epochs"]]
    assert losses[-1] < metrics["before"]["val_loss"] - 0.1, (metrics["before"], losses)
    assert min(losses[-3:]) < min(losses[:3]), losses


def test_a_given_rate_wins(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    code = train_cli.main(["--model", str(ZOO / "transformer_dynamo.onnx"), "--data", str(ZOO / "transformer_dynamo.npz"),
                           "--epochs", "1", "--lr", "0.02", "--out", str(out), "--no-progress", "--no-plot"])
    assert code == 0 and "learning rate 0.001" not in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["config"]["lr"] == 0.02


# --- --lr auto: the range test (ort_cffi/trainer/lr_finder.py) ------------------------------------------------

def test_the_range_test_suggests_a_tenth_of_the_rate_at_the_lowest_smoothed_loss() -> None:
    rates = [1e-7 * 10 ** (i / 10) for i in range(60)]
    smoothed = [3.0 - 0.05 * i if i <= 40 else 1.0 + 0.3 * (i - 40) for i in range(60)]
    lr, lowest_at = suggest([(r, s, s) for r, s in zip(rates, smoothed)])
    assert lowest_at == rates[40] and lr == float(f"{rates[40] / 10:.2g}")


def test_a_loss_that_never_falls_suggests_nothing() -> None:
    rates = [1e-7 * 10 ** (i / 10) for i in range(30)]
    assert suggest([(r, 1.0 + i, 1.0 + i) for i, r in enumerate(rates)]) == (None, None)
    assert suggest([]) == (None, None)


def test_lr_auto_picks_a_rate_the_run_trains_at(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The embedded digits MLP: the test's steps stay in its own session, so the run starts from the
    checkpoint as it was (the same validation before training as without --lr auto)."""
    out = tmp_path / "run"
    code = train_cli.main(["--lr", "auto", "--epochs", "2", "--out", str(out), "--no-progress", "--no-plot"])
    printed = capsys.readouterr().out
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    lr = metrics["config"]["lr"]
    assert isinstance(lr, float) and 1e-4 < lr < 1, lr
    assert f"learning rate {lr:g}, found by --lr auto: over " in printed
    assert f"lr {lr:g} (" in printed and [s["lr"] for s in metrics["steps"]][44] == pytest.approx(lr)
    plain = tmp_path / "plain"
    assert train_cli.main(["--epochs", "1", "--out", str(plain), "--no-progress", "--no-plot"]) == 0
    assert metrics["before"] == json.loads((plain / "metrics.json").read_text())["before"]
    losses = [e["val_loss"] for e in metrics["epochs"]]
    assert losses[-1] < metrics["before"]["val_loss"] / 2, (metrics["before"], losses)

    capsys.readouterr()  # a resumed run keeps its rate unless told otherwise
    assert train_cli.main(["--out", str(out), "--resume", "--lr", "auto", "--epochs", "3", "--no-progress",
                           "--no-plot"]) == 2
    assert "--lr auto" in capsys.readouterr().err


def test_lr_takes_a_number_or_auto_only(capsys: pytest.CaptureFixture) -> None:
    for bad in ("automatic", "-1", "0"):
        with pytest.raises(SystemExit) as exit_info:
            train_cli.main(["--lr", bad])
        assert exit_info.value.code == 2
        assert "argument --lr" in capsys.readouterr().err
