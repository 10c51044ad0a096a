"""BatchNorm's running statistics against numpy: the training model updates the running variance in
torch's convention (the unbiased batch variance), and ``reestimate_batchnorm`` sets the statistics to the
average of the per-batch statistics over the batches it is given, as torch's ``update_bn`` does."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment, OrtTrainingSession
from ort_cffi.artifacts import generate_artifacts, read_manifest
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
                              loss_input_names=["logits"])
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
