"""BatchNorm's running statistics against numpy: the training model updates the running variance in
torch's convention (the unbiased batch variance), and ``reestimate_batchnorm`` sets the statistics to the
average of the per-batch statistics over the batches it is given, as torch's ``update_bn`` does;
``ort-cffi-train`` re-estimates them before each validation, says so, and resumes such a run bit for bit."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment, OrtTrainingSession
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts, read_manifest
from ort_cffi.artifacts.options import GENERATORS, ONNX_RUNTIME, ORT_CFFI
from ort_cffi.trainer import SetupError, TrainingJob, TrainSettings
from ort_cffi.trainer import loop as train_loop
from ort_cffi.trainer.batchnorm import reestimate_batchnorm

EPS = 1e-5
MOMENTA = (0.9, 0.7)  # ONNX's momentum of the two BatchNormalizations (torch's 0.1 and 0.3)
env = OrtEnvironment.getEnvironment()


def two_batchnorms() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """X [N, 3, 4, 4] -> BatchNorm bn1 -> 1x1 Conv to 4 channels -> BatchNorm bn2 -> GlobalAveragePool ->
    Flatten -> MatMul -> logits [N, 2]; in the inference form of an eval-mode export (PRESERVE)."""
    rng = np.random.default_rng(7)
    values = {"s1": rng.uniform(0.5, 1.5, 3), "b1": rng.uniform(-0.5, 0.5, 3), "m1": rng.uniform(-0.2, 0.2, 3),
              "v1": rng.uniform(0.5, 2.0, 3), "K": rng.standard_normal((4, 3, 1, 1)) * 0.5,
              "s2": rng.uniform(0.5, 1.5, 4), "b2": rng.uniform(-0.5, 0.5, 4), "m2": rng.uniform(-0.2, 0.2, 4),
              "v2": rng.uniform(0.5, 2.0, 4), "W": rng.standard_normal((4, 2)) * 0.5}
    values = {name: value.astype(np.float32) for name, value in values.items()}
    nodes = [helper.make_node("BatchNormalization", ["X", "s1", "b1", "m1", "v1"], ["y1"], name="bn1",
                              epsilon=EPS, momentum=MOMENTA[0]),
             helper.make_node("Conv", ["y1", "K"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s2", "b2", "m2", "v2"], ["y2"], name="bn2",
                              epsilon=EPS, momentum=MOMENTA[1]),
             helper.make_node("GlobalAveragePool", ["y2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "W"], ["logits"], name="fc")]
    graph = helper.make_graph(nodes, "two_batchnorms",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3, 4, 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])],
                              [numpy_helper.from_array(value, name) for name, value in values.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model, values


def batch_statistics(x: np.ndarray, values: Dict[str, np.ndarray]) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Each BatchNorm's batch mean and torch's unbiased batch variance for the batch ``x``, in float64, the
    layers in train mode (each normalises with its batch's biased statistics, as torch's forward does)."""
    found = []
    h = x.astype(np.float64)
    for scale, bias, kernel in (("s1", "b1", "K"), ("s2", "b2", None)):
        mean, var = h.mean(axis=(0, 2, 3)), h.var(axis=(0, 2, 3))
        n = h.size / h.shape[1]
        found.append((mean, var * n / (n - 1)))
        shape = (1, -1, 1, 1)
        h = (h - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + EPS) * values[scale].reshape(shape) \
            + values[bias].reshape(shape)
        if kernel is not None:
            h = np.einsum("oc,nchw->nohw", values[kernel][:, :, 0, 0].astype(np.float64), h)
    return found


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory):
    model, values = two_batchnorms()
    made = generate_artifacts(model, artifact_directory=tmp_path_factory.mktemp("bn") / "artifacts",
                              loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    return made, values


def session_of(made) -> OrtTrainingSession:
    return env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model),
                                     str(made.optimizer_model))


def batches_of(n: int, batch: int, seed: int) -> List[Dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, 3, 4, 4)) * [[[[1.0]], [[2.0]], [[0.5]]]] + 0.3).astype(np.float32)
    labels = rng.integers(0, 2, n).astype(np.int64)
    return [{"X": x[i:i + batch], "labels": labels[i:i + batch]} for i in range(0, n, batch)]


def test_the_running_variance_follows_torchs_unbiased_convention(artifacts) -> None:
    made, values = artifacts
    statistics = read_manifest(made.folder)["batchnorm_statistics"]
    assert [s["node"] for s in statistics] == ["bn1", "bn2"] and {s["variance"] for s in statistics} == {"unbiased"}
    batch = batches_of(6, 6, seed=1)[0]
    wanted = [s[key] for s in statistics for key in ("mean_output", "var_output")]
    with session_of(made) as session:
        assert session.getTrainInputNames()[0] == "X"
        with session.trainStep(batch, wanted) as result:
            updated = [np.asarray(result.get(i).getValue()) for i in range(len(wanted))]
    for layer, ((mean, var), momentum, (old_mean, old_var)) in enumerate(
            zip(batch_statistics(batch["X"], values), MOMENTA, (("m1", "v1"), ("m2", "v2")))):
        # torch: running = (1 - m) * running + m * batch, its m being 1 - ONNX's momentum
        expected_mean = momentum * values[old_mean] + (1 - momentum) * mean
        expected_var = momentum * values[old_var] + (1 - momentum) * var
        np.testing.assert_allclose(updated[2 * layer], expected_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(updated[2 * layer + 1], expected_var, rtol=1e-5, atol=1e-6)
        biased = momentum * values[old_var] + (1 - momentum) * var * (6 * 16 - 1) / (6 * 16)
        assert not np.allclose(updated[2 * layer + 1], biased, rtol=1e-5, atol=1e-6)  # not the biased variance


def test_reestimation_averages_the_batch_statistics_and_keeps_the_weights(artifacts) -> None:
    made, values = artifacts
    batches = batches_of(40, 16, seed=2)  # 16, 16 and a last batch of 8, each counting once
    with session_of(made) as session:
        state = session.getCheckpointState()
        weights = session.copyParametersToBuffer(True)
        done = reestimate_batchnorm(session, made.folder, batches)
        assert (done.layers, done.batches, done.skipped) == (2, 3, ()) and done.seconds > 0
        found = {name: state.getParameter(name) for name in ("m1", "v1", "m2", "v2")}
        np.testing.assert_array_equal(session.copyParametersToBuffer(True), weights)
        # the pass's gradients are gone: a step now equals a step of a fresh session on the same batch
        with session.trainStep(batches[0]) as result:
            loss = float(result.get(0).getValue())
        session.optimizerStep()
        stepped = session.copyParametersToBuffer(True)
    with session_of(made) as fresh:
        with fresh.trainStep(batches[0]) as result:
            assert float(result.get(0).getValue()) == loss
        fresh.optimizerStep()
        np.testing.assert_array_equal(fresh.copyParametersToBuffer(True), stepped)
    per_batch = [batch_statistics(batch["X"], values) for batch in batches]
    for layer, (mean, var) in enumerate((("m1", "v1"), ("m2", "v2"))):
        np.testing.assert_allclose(found[mean], np.mean([b[layer][0] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(found[var], np.mean([b[layer][1] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
        assert not np.allclose(found[mean], values[mean], atol=1e-3)  # they moved from the checkpoint's


def test_reestimation_refuses_what_it_cannot_do_and_leaves_the_statistics(artifacts, tmp_path: Path) -> None:
    made, values = artifacts
    with session_of(made) as session:
        state = session.getCheckpointState()
        with pytest.raises(ValueError, match="no batch to re-estimate"):
            reestimate_batchnorm(session, made.folder, [])
        with pytest.raises(Exception, match="X"):  # the runtime refuses a batch of the wrong shape
            reestimate_batchnorm(session, made.folder, [batches_of(4, 4, 3)[0], {"X": np.zeros((4, 5), np.float32),
                                                                               "labels": np.zeros(4, np.int64)}])
        for name in ("m1", "v1", "m2", "v2"):
            np.testing.assert_array_equal(state.getParameter(name), values[name])  # put back as they were
        with pytest.raises(ValueError, match="does not output nope/running_mean"):
            reestimate_batchnorm(session, [{"mean": "m1", "var": "v1", "mean_output": "nope/running_mean",
                                            "var_output": read_manifest(made.folder)["batchnorm_statistics"][0]["var_output"],
                                            "momentum": 0.9}], [])
        with pytest.raises(ValueError, match="holds no readable artifacts.json"):
            reestimate_batchnorm(session, tmp_path, [])
        still = reestimate_batchnorm(session, [dict(read_manifest(made.folder)["batchnorm_statistics"][0], momentum=1.0)], batches_of(4, 4, 3))
        assert (still.layers, still.skipped) == (0, ("bn1",))


# --- ort-cffi-train ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    train, val = batches_of(40, 40, seed=5)[0], batches_of(16, 16, seed=6)[0]
    path = tmp_path_factory.mktemp("bn-data") / "two_batchnorms.npz"
    np.savez(path, train_X=train["X"], train_labels=train["labels"], val_X=val["X"], val_labels=val["labels"])
    return path


def train(made, data: Path, out: Path, **settings) -> dict:
    assert TrainingJob(TrainSettings(out=out, artifacts=made.folder, data=data, batch_size=16, no_plot=True,
                                     **settings)).run() == 0
    return json.loads((out / "metrics.json").read_text())


def statistics_of(made, checkpoint: Path) -> Dict[str, np.ndarray]:
    """Every parameter of ``checkpoint``, trained and frozen, by name."""
    with env.createTrainingSession(str(checkpoint), str(made.training_model)) as session:
        state = session.getCheckpointState()
        return {name: state.getParameter(name) for name in ("s1", "b1", "m1", "v1", "K", "s2", "b2", "m2", "v2", "W")}


def test_the_trainer_reestimates_before_it_validates_and_says_so(artifacts, dataset: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    made, initial = artifacts
    metrics = train(made, dataset, tmp_path / "run", epochs=2)
    printed = capsys.readouterr().out
    assert "batchnorm: 2 layers; running statistics re-estimated over the training set before each validation" in printed
    assert printed.count("bn re-estimated (") == 2
    assert metrics["config"]["bn_reestimate"] is True
    assert [(e["bn_reestimate"]["layers"], e["bn_reestimate"]["batches"]) for e in metrics["epochs"]] == [(2, 3)] * 2
    assert all(e["bn_reestimate"]["seconds"] > 0 for e in metrics["epochs"])
    # last_checkpoint holds the statistics of its weights over the training batches, in the trainer's order
    found = statistics_of(made, tmp_path / "run" / "last_checkpoint")
    assert not np.allclose(found["K"], initial["K"])  # trained
    x = np.load(dataset)["train_X"]
    per_batch = [batch_statistics(x[i:i + 16], found) for i in range(0, 40, 16)]
    for layer, (mean, var) in enumerate((("m1", "v1"), ("m2", "v2"))):
        np.testing.assert_allclose(found[mean], np.mean([b[layer][0] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(found[var], np.mean([b[layer][1] for b in per_batch], axis=0), rtol=1e-5, atol=1e-6)
    best = [e for e in metrics["epochs"] if e["best"]][-1]
    assert metrics["inference"]["val_accuracy"] == best["val_accuracy"]  # the export has the statistics validated


def test_without_reestimation_the_statistics_follow_training_only(artifacts, dataset: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    made, initial = artifacts
    metrics = train(made, dataset, tmp_path / "run", epochs=1, bn_reestimate=False)
    assert "as training moves them (--no-bn-reestimate)" in capsys.readouterr().out
    assert metrics["config"]["bn_reestimate"] is False and metrics["epochs"][0]["bn_reestimate"] is None
    found = statistics_of(made, tmp_path / "run" / "last_checkpoint")
    assert not np.allclose(found["m1"], initial["m1"])  # moved by the steps' updates, with momentum
    # a resumed run keeps it, and refuses the other way unless told to override
    with pytest.raises(SetupError, match="--bn-reestimate contradicts the run being resumed, which has --no-bn-reestimate"):
        TrainingJob(TrainSettings(out=tmp_path / "run", resume=True, bn_reestimate=True, no_plot=True)).run()
    assert TrainingJob(TrainSettings(out=tmp_path / "run", resume=True, epochs=2, bn_reestimate=True, override=True,
                                     no_plot=True)).run() == 0
    assert "overriding: --no-bn-reestimate -> --bn-reestimate" in capsys.readouterr().out
    resumed = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert resumed["config"]["bn_reestimate"] is True and resumed["epochs"][1]["bn_reestimate"]["batches"] == 3


def test_a_resumed_run_with_reestimation_is_the_uninterrupted_one(artifacts, dataset: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    made, _ = artifacts
    straight = train(made, dataset, tmp_path / "straight", epochs=3)
    evaluate, calls = train_loop.evaluate, []

    def interrupted(*args: object, **kwargs: object) -> object:  # Ctrl-C in epoch 2's validation
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(train_loop, "evaluate", interrupted)
    out = tmp_path / "resumed"
    assert TrainingJob(TrainSettings(out=out, artifacts=made.folder, data=dataset, batch_size=16, epochs=3,
                                     no_plot=True)).run() == 130
    monkeypatch.undo()
    assert TrainingJob(TrainSettings(out=out, resume=True, no_plot=True)).run() == 0
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["steps"] == straight["steps"]
    assert [e["val_loss"] for e in resumed["epochs"]] == [e["val_loss"] for e in straight["epochs"]]
    ours, theirs = statistics_of(made, out / "last_checkpoint"), statistics_of(made, tmp_path / "straight" / "last_checkpoint")
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)



def test_the_command_line_names_the_switch(capsys: pytest.CaptureFixture) -> None:
    from ort_cffi.cli import train as cli

    assert cli.parse_args(["--no-bn-reestimate"]).bn_reestimate is False
    assert cli.parse_args(["--bn-reestimate"]).bn_reestimate is True
    assert cli.parse_args([]).bn_reestimate is None  # the default, or the resumed run's
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    assert "--no-bn-reestimate" in capsys.readouterr().out


@pytest.mark.parametrize("generator", [  # ONNX Runtime's generator where it runs (not on 3.14 and later)
    pytest.param(g, marks=[pytest.mark.needs_onnxruntime_generator] if g == ONNX_RUNTIME else []) for g in GENERATORS])
def test_a_frozen_layer_keeps_its_statistics(dataset: Path, tmp_path: Path, generator: str) -> None:
    """Fine-tuning a head (--trainable) moved the frozen backbone's running statistics. A BatchNorm whose
    scale and bias are both frozen now keeps them and normalises with them, as torch's eval() of a frozen
    backbone does; the layers trained follow training as before."""
    model, initial = two_batchnorms()
    made = generate_artifacts(model, requires_grad=["K", "s2", "b2", "W"], artifact_directory=tmp_path / "artifacts",
                              loss_input_names=["logits"], generator=generator,
                              loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    manifest = read_manifest(made.folder)
    assert [entry["node"] for entry in manifest["batchnorm_statistics"]] == ["bn2"]
    kept = [r for r in manifest["preparation"] if r["rule"] == "batchnorm_statistics" and r["nodes"] == ["bn1"]]
    assert len(kept) == 1 and "torch's eval()" in kept[0]["note"]
    train(made, dataset, tmp_path / "run", epochs=2)
    with env.createTrainingSession(str(tmp_path / "run" / "last_checkpoint"), str(made.training_model)) as session:
        state = session.getCheckpointState()
        found = {name: state.getParameter(name) for name in ("K", "s2", "b2", "m2", "v2", "W")}
    assert not np.allclose(found["K"], initial["K"]) and not np.allclose(found["m2"], initial["m2"])
    # the frozen layer, statistics included, is as it was: constants of the graphs, not trainer state
    training = onnx.load(str(made.training_model))
    constants = {t.name: numpy_helper.to_array(t) for t in training.graph.initializer}
    for name in ("s1", "b1", "m1", "v1"):
        np.testing.assert_array_equal(constants[name], initial[name])
    # and with ort_cffi's builder, training normalises bn1 with those statistics: the inference form, not
    # BatchNormInternal (ONNX Runtime's generator turns every BatchNormalization into one: the batch's)
    first = [n for n in training.graph.node if n.input and n.input[0] == "X"]
    if generator == ORT_CFFI:
        assert [n.op_type for n in first] == ["BatchNormalization"]
        assert all(a.i == 0 for a in first[0].attribute if a.name == "training_mode")
    else:
        assert [n.op_type for n in first] == ["BatchNormInternal"]


def merged_statistics_model(merged: bool) -> onnx.ModelProto:
    """two_batchnorms with bn1 fresh, as torch makes a layer (scale ones, bias zeros, running mean zeros and
    variance ones), and, where ``merged``, its statistics read from its bias and scale, as torch's ONNX exporter
    writes such a layer: it merges initializers of equal values."""
    model, values = two_batchnorms()
    fresh = {"s1": np.ones(3, np.float32), "b1": np.zeros(3, np.float32), "m1": np.zeros(3, np.float32),
             "v1": np.ones(3, np.float32)}
    kept = [t for t in model.graph.initializer if t.name not in fresh]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + [numpy_helper.from_array(value, name) for name, value in fresh.items()
                                           if not merged or name in ("s1", "b1")])
    if merged:
        bn1 = next(n for n in model.graph.node if n.name == "bn1")
        bn1.input[3], bn1.input[4] = "b1", "s1"
    return model


@pytest.mark.parametrize("generator", [
    pytest.param(g, marks=[pytest.mark.needs_onnxruntime_generator] if g == ONNX_RUNTIME else []) for g in GENERATORS])
def test_statistics_merged_with_the_scale_and_bias_get_their_own(tmp_path: Path, generator: str) -> None:
    """A layer whose running mean and variance are its bias and scale in the file (torch's exporter merges equal
    initializers, and a fresh layer's are equal) trains as the same layer with statistics of its own: the batch's
    statistics in training, the running ones updated apart from the scale and bias. It trained with its scale
    and bias as statistics, and on the training build ONNX Runtime's generator's artifacts wrote the running
    variance into the scale."""
    losses = {}
    for merged in (True, False):
        made = generate_artifacts(merged_statistics_model(merged), artifact_directory=tmp_path / str(merged),
                                  loss_input_names=["logits"], generator=generator, requires_grad=ALL_PARAMETERS,
                                  loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        manifest = read_manifest(made.folder)
        bn1 = next(entry for entry in manifest["batchnorm_statistics"] if entry["node"] == "bn1")
        with session_of(made) as session:
            losses[merged] = []
            for batch in batches_of(48, 16, seed=3):
                with session.trainStep(batch) as result:
                    losses[merged].append(float(result.get(0).getValue()))
                session.optimizerStep()
                session.lazyResetGrad()
            state = session.getCheckpointState()
            scale, bias = state.getParameter("s1"), state.getParameter("b1")
            mean, var = state.getParameter(bn1["mean"]), state.getParameter(bn1["var"])
        # three AdamW steps at the default rate move a parameter by about 3e-3; the statistics stay as they were
        # (the trainer writes them back, not the steps)
        assert 0 < np.abs(scale - 1).max() < 0.01 and 0 < np.abs(bias).max() < 0.01
        np.testing.assert_array_equal(mean, np.zeros(3, np.float32))
        np.testing.assert_array_equal(var, np.ones(3, np.float32))
        if merged:
            assert (bn1["mean"], bn1["var"]) == ("bn1.running_mean", "bn1.running_var")
            copied = [r for r in manifest["preparation"] if r["rule"] == "batchnorm_statistics" and "copies" in r["note"]]
            assert len(copied) == 1 and copied[0]["nodes"] == ["bn1"]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)


def test_a_merged_statistic_that_a_subgraph_reads_stays() -> None:
    """The copies leave the merged initializer in place where anything still reads it, a subgraph included."""
    from ort_cffi.artifacts.batchnorm import follow_batch_statistics

    model, _ = two_batchnorms()
    bn1 = next(n for n in model.graph.node if n.name == "bn1")
    branch = helper.make_graph([helper.make_node("Identity", ["m1"], ["m1_seen"])], "branch", [],
                               [helper.make_tensor_value_info("m1_seen", TensorProto.FLOAT, [3])])
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "always"))
    model.graph.node.append(helper.make_node("If", ["always"], ["m1_shown"], then_branch=branch, else_branch=branch))
    model.graph.output.append(helper.make_tensor_value_info("m1_shown", TensorProto.FLOAT, [3]))
    assert bn1.input[3] == "m1"
    result, statistics, _ = follow_batch_statistics(model)
    assert statistics[0]["mean"] == "bn1.running_mean"  # read by the If's branches too: a copy of its own
    assert "m1" in {t.name for t in result.graph.initializer}
