"""Pools whose gradient kernel sizes the gradient from the graph's shapes (rewrites.py's ``static_shape``):
1.19.2's MaxPoolGrad and AveragePoolGrad read the static shape of the pool's input, an unknown size as 0
(docs/internals/runtime.md §8). torch's GroupNorm export (Reshape [0, G, -1], InstanceNormalization,
Reshape to Shape(x)) hides the sizes from plain shape inference: the first train step failed ("Can broadcast
0 by 0 or 1") after MaxPoolGrad wrote into a gradient of size 0. Shape inference with data propagation
tells them, and the prepared model declares them; where nothing can, an AveragePool becomes a depthwise Conv
(rewrite_rules.py) and a MaxPool is refused."""
from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ArtifactsInputError
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts as _generate_artifacts

# Graph preparation exists for ONNX Runtime's generator (ort_cffi's own builder has rules for these operators,
# tests/builder): these tests run that generator, where its Python layer is installed.
pytestmark = pytest.mark.needs_onnxruntime_generator


def generate_artifacts(*args, **kwargs):  # type: ignore[no-untyped-def]
    return _generate_artifacts(*args, generator="onnxruntime", **kwargs)

from ort_cffi.artifacts.rewrites import PreparationError, prepare

env = OrtEnvironment.getEnvironment()
PARAMS = ("W", "S")


def groupnorm_then_pool(with_loss: bool) -> onnx.ModelProto:
    """X [N, 2, 4, 4] * W -> torch's GroupNorm export (1 group; scale S per channel) -> MaxPool 2x2 -> P.
    with_loss: W and S initializers and L = sum(P * R) the output; else W and S graph inputs and P the output
    (the finite-difference model)."""
    rng = np.random.default_rng(7)
    values = {"W": rng.uniform(0.5, 1.5, (2, 4, 4)).astype(np.float32),
              "S": rng.uniform(0.5, 1.5, (2, 1, 1)).astype(np.float32)}
    constant = lambda name, array: helper.make_node(  # noqa: E731
        "Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(array), name))
    nodes = [helper.make_node("Mul", ["X", "W"], ["Z"], name="scale"),
             constant("groups", np.array([0, 1, -1], np.int64)),
             helper.make_node("Reshape", ["Z", "groups"], ["G"], name="group"),
             constant("ones", np.ones(1, np.float32)), constant("zeros", np.zeros(1, np.float32)),
             helper.make_node("InstanceNormalization", ["G", "ones", "zeros"], ["I"], name="norm"),
             helper.make_node("Shape", ["Z"], ["z_shape"], name="shape"),
             helper.make_node("Reshape", ["I", "z_shape"], ["Y"], name="ungroup"),
             helper.make_node("Mul", ["Y", "S"], ["M"], name="affine"),
             helper.make_node("MaxPool", ["M"], ["P"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2, 4, 4])]
    initializers = []
    if with_loss:
        initializers = [numpy_helper.from_array(v, k) for k, v in values.items()]
        inputs.append(helper.make_tensor_value_info("R", TensorProto.FLOAT, ["N", 2, 2, 2]))
        nodes += [helper.make_node("Mul", ["P", "R"], ["PR"], name="times_R"),
                  helper.make_node("ReduceSum", ["PR"], ["L"], name="loss_sum", keepdims=0)]
        outputs = [helper.make_tensor_value_info("L", TensorProto.FLOAT, [])]
    else:
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in values.items()]
        outputs = [helper.make_tensor_value_info("P", TensorProto.FLOAT, ["N", 2, 2, 2])]
    model = helper.make_model(helper.make_graph(nodes, "gn", inputs, outputs, initializers),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def run(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> np.ndarray:
    with env.createSession(model.SerializeToString()) as session, session.run(feeds) as result:
        return np.array(result.get(0).getValue())


def test_torchs_groupnorm_before_a_pool_gets_the_pools_input_shape_declared_and_its_gradient_is_right(tmp_path: Path):
    model = groupnorm_then_pool(with_loss=True)
    prepared, records = prepare(model)
    # Checked before any training step: without the declared shape, MaxPoolGrad writes into a gradient of size 0.
    assert [(r["rule"], r["op"], r["nodes"]) for r in records] == [
        ("rewrite", "InstanceNormalization", ["norm"]), ("static_shape", "MaxPool", ["pool"])]
    declared = {v.name: [d.dim_value or None for d in v.type.tensor_type.shape.dim] for v in prepared.graph.value_info}
    assert declared["M"] == [None, 2, 4, 4]
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 2, 4, 4)).astype(np.float32)
    r = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(run(prepared, {"X": x, "R": r}), run(model, {"X": x, "R": r}), rtol=1e-5, atol=1e-5)

    made = generate_artifacts(prepared, requires_grad=list(PARAMS), loss=None, optimizer="sgd", artifact_directory=tmp_path,
                              additional_output_names=MODEL_OUTPUTS)
    start = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    with env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model),
                                   str(made.optimizer_model)) as session:
        session.setLearningRate(1.0)  # one SGD step gives the gradient back as (before) - (after)
        with session.trainStep({"X": x, "R": r}):
            pass
        session.optimizerStep()
        state = session.getCheckpointState()
        got = {name: start[name] - state.getParameter(name) for name in PARAMS}

    # Central differences (h = 1e-3, float32) of the ORIGINAL model's forward values.
    with env.createSession(groupnorm_then_pool(with_loss=False).SerializeToString()) as forward:
        def loss(values: Dict[str, np.ndarray]) -> float:
            feeds = dict({"X": x}, **{k: v.astype(np.float32) for k, v in values.items()})
            with forward.run(feeds) as result:
                return float(np.sum(np.asarray(result.get(0).getValue(), np.float64) * r))
        h = 1e-3
        for name in PARAMS:
            expected = np.zeros(start[name].shape)
            for k in range(expected.size):
                plus, minus = dict(start), dict(start)
                plus[name], minus[name] = start[name].copy(), start[name].copy()
                plus[name].flat[k] += h
                minus[name].flat[k] -= h
                expected.flat[k] = (loss(plus) - loss(minus)) / (2 * h)
            # float32 differences: rounding of P (2**-24 |P| |R| / h) and truncation, about 1e-4 absolute
            np.testing.assert_allclose(got[name], expected, rtol=1e-2, atol=2e-3, err_msg=name)


def pool_model(op: str, batch, spatial) -> onnx.ModelProto:
    """X [batch, 3, *spatial] -> Conv K -> ``op`` 2x2 -> ReduceMean over space -> Y."""
    k = numpy_helper.from_array(np.random.default_rng(9).standard_normal((4, 3, 3, 3)).astype(np.float32), "K")
    nodes = [helper.make_node("Conv", ["X", "K"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("ReduceMean", ["p"], ["Y"], name="mean", axes=[2, 3], keepdims=0)]
    graph = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 3, *spatial])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, 4])], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_pools_whose_kernel_would_read_an_unknown_size_are_refused_not_crashed(tmp_path: Path):
    """Measured without the refusal, in a child: MaxPool over unknown spatial sizes segfaults in the first
    train step (AveragePool with an unknown batch size died of SIGFPE: it is rewritten now, below). An
    AveragePool that cannot be rewritten either (no channel count) is refused the same way."""
    unknown_channels = pool_model("AveragePool", "N", (8, 8))  # the pool reads Reshape(c, a shape fed at run time)
    unknown_channels.graph.node.insert(1, helper.make_node("Reshape", ["c", "S"], ["c_any"], name="reshape"))
    unknown_channels.graph.node[2].input[0] = "c_any"
    unknown_channels.graph.input.append(helper.make_tensor_value_info("S", TensorProto.INT64, [4]))
    for op, model, what in (("MaxPool", pool_model("MaxPool", "N", ("H", "W")), r"sizes the gradient.*\[\?, 4, \?, \?\].*would crash"),
                            ("AveragePool", unknown_channels, r"depthwise Conv needs the channel count")):
        with pytest.raises(PreparationError, match=rf"{op} node 'pool'.*{what}"):
            prepare(model)
        with pytest.raises(ArtifactsInputError, match=f"{op} node 'pool'"):
            generate_artifacts(model, loss="mse", artifact_directory=tmp_path / op,
                               requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        assert prepare(model, {"K"}, outputs=[]) == (model, [])  # off the path: nothing to say
    for op, batch in (("MaxPool", "N"), ("AveragePool", 5)):  # the sizes its kernel reads are fixed: as it is
        model = pool_model(op, batch, (8, 8))
        assert prepare(model) == (model, [])


def averaging_cnn() -> onnx.ModelProto:
    """X [N, 2, 8, 8] -> Conv K (pads 1) -> Relu -> AveragePool 3x3, stride 2, pads 1 (not counted) ->
    Flatten -> Gemm W, B -> Y [N, 3]: an ordinary CNN exported with a dynamic batch axis."""
    rng = np.random.default_rng(11)
    initializers = [numpy_helper.from_array((rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32), "K"),
                    numpy_helper.from_array((rng.standard_normal((64, 3)) * 0.2).astype(np.float32), "W"),
                    numpy_helper.from_array(np.zeros(3, np.float32), "B")]
    nodes = [helper.make_node("Conv", ["X", "K"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("AveragePool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "W", "B"], ["Y"], name="fc")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_cnn_with_average_pool_and_a_symbolic_batch_trains_at_batch_sizes_3_and_5(tmp_path: Path):
    """Refused before (its AveragePoolGrad would die of SIGFPE): the pool becomes a depthwise Conv, the
    artifacts generate, and one session trains on batches of 3 and of 5, each loss falling."""
    model = averaging_cnn()
    prepared, records = prepare(model)
    assert records == [{"rule": "rewrite", "op": "AveragePool", "count": 1, "nodes": ["pool"]}]
    made = generate_artifacts(model, loss="mse", optimizer="adamw", artifact_directory=tmp_path / "a",
                              requires_grad=ALL_PARAMETERS, additional_output_names=MODEL_OUTPUTS)
    assert {p.name for p in made.trainable} == {"K", "W", "B"}
    rng = np.random.default_rng(12)
    batches = {n: {"X": rng.standard_normal((n, 2, 8, 8)).astype(np.float32),
                   "target": rng.standard_normal((n, 3)).astype(np.float32)} for n in (3, 5)}
    losses: Dict[int, list] = {3: [], 5: []}
    with env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model),
                                   str(made.optimizer_model)) as session:
        session.setLearningRate(0.02)
        for _ in range(15):
            for n, batch in batches.items():
                with session.trainStep(batch) as result:
                    losses[n].append(float(result.get(0).getValue()))
                session.optimizerStep()
                session.lazyResetGrad()
    for n, values in losses.items():
        assert all(np.isfinite(values)), (n, values)
        assert values[-1] < 0.8 * values[0], (n, values)
