"""The training operators of real artifacts: every model of the zoo (tests/zoo), with ort_cffi's builder and
with ONNX Runtime 1.19.2's generator. The operators they hold are the recorded list below, each has a rule,
and the lowered training model computes the loss and every gradient as 1.19.2's training kernels do, on
1.19.2 and on 1.31.1."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import numpy as np
import onnx
import pytest
from conftest import ROOT
from lowering_check import assert_close, current_runtime, run_training_build  # noqa: F401  (a fixture)
from onnx import helper

from ort_cffi._backends.engine.lowering import KEPT_FOR_THE_ENGINE, lower_training_ops, unlowerable_ops
from ort_cffi._backends.engine.lowering.registry import CONTRIB_TARGETS, MICROSOFT, RULES
from ort_cffi.api import CheckpointState
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsInputError, generate_artifacts

# the reference is the training build's own kernels, through its Python layer
pytestmark = pytest.mark.needs_onnxruntime_python

ZOO_DIR = ROOT / "tests" / "zoo"
ZOO = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]

# What the zoo's artifacts hold besides standard operators (measured with both generators on every model;
# InPlaceAccumulatorV2 and AdamWOptimizer are the engine's own). A new operator here needs a rule first.
ZOO_TRAINING_OPS = frozenset({
    "AdamWOptimizer", "BatchNormInternal", "BatchNormalizationGrad", "BroadcastGradientArgs", "ConcatTraining",
    "ConvGrad", "DivGrad", "FastGelu", "FastGeluGrad", "FusedMatMul", "GRUGrad", "GRUTraining", "GatherGrad",
    "Gelu", "GeluGrad", "InPlaceAccumulatorV2", "LSTMGrad", "LSTMTraining", "LayerNormalizationGrad",
    "MaxPoolGrad", "ReluGrad", "Scale", "SliceGrad", "SoftmaxCrossEntropyLossGrad", "SoftmaxGrad_13", "TanhGrad",
})
# What ort_cffi's builder emits besides (ort_cffi/artifacts/builder: its `ms(...)` calls) and ONNX Runtime's
# gradient builder emits for operators the zoo lacks (orttraining/core/graph/gradient_builder.cc).
OTHER_TRAINING_OPS = frozenset({
    "DropoutGrad", "GatherElementsGrad", "GatherNDGrad", "LeakyReluGrad", "QuickGeluGrad", "SigmoidGrad", "Trilu",
    "AveragePoolGrad", "SoftmaxCrossEntropyLossInternal", "SoftmaxCrossEntropyLossInternalGrad",
    "LogSoftmaxGrad_13", "SplitTraining", "SimplifiedLayerNormalizationGrad", "BiasGeluGrad_dX",
    "BiasFastGeluGrad_dX", "ReduceSumTraining", "InvertibleLayerNormalizationGrad", "SoftmaxGrad", "LogSoftmaxGrad",
    "SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyGrad",
    "ReduceAllL2", "FakeQuantGrad",
})


def test_every_training_operator_known_has_a_rule_or_runs_as_it_is():
    for op in sorted(ZOO_TRAINING_OPS | OTHER_TRAINING_OPS):
        assert op in RULES or op in KEPT_FOR_THE_ENGINE or op in CONTRIB_TARGETS, op


def training_ops(graph: onnx.GraphProto) -> Iterator[str]:
    for node in graph.node:
        if node.domain == MICROSOFT or (node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type)):
            yield node.op_type
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from training_ops(sub)


def gradients_as_outputs(model: onnx.ModelProto) -> Tuple[onnx.ModelProto, List[str]]:
    """The training model without its accumulators: each gradient they would add into a buffer is a graph
    output instead (the engine accumulates itself). Returns the model and the names of its inputs left."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    accumulators = [n for n in stripped.graph.node if n.op_type == "InPlaceAccumulatorV2"]
    buffers = {n.input[0] for n in accumulators} | {n.input[2] for n in accumulators if len(n.input) > 2}
    outs = {n.output[0] for n in accumulators}
    kept_nodes = [n for n in stripped.graph.node if n.op_type != "InPlaceAccumulatorV2"]
    types = {i.name: i.type for i in stripped.graph.input}
    kept_outputs = [o for o in stripped.graph.output if o.name not in outs]
    gradient_outputs = [helper.make_value_info(n.input[1], types[n.input[0]]) for n in accumulators]
    kept_inputs = [i for i in stripped.graph.input if i.name not in buffers]
    del stripped.graph.node[:], stripped.graph.output[:], stripped.graph.input[:]
    stripped.graph.node.extend(kept_nodes)
    stripped.graph.output.extend(kept_outputs + gradient_outputs)
    stripped.graph.input.extend(kept_inputs)
    return stripped, [i.name for i in kept_inputs]


def checkpoint_parameters(path: Path) -> Dict[str, np.ndarray]:
    """Every parameter's value in the checkpoint (the state is released on return)."""
    state = CheckpointState.load_checkpoint(str(path))
    return {name: np.array(state.parameters[name].data) for name, _ in state.parameters}


CASES = [(name, generator) for name in sorted(ZOO) for generator in ("builder", "onnxruntime")]


@pytest.mark.parametrize("name,generator", [pytest.param(n, g, marks=[pytest.mark.needs_onnxruntime_generator]
                                                         if g == "onnxruntime" else []) for n, g in CASES])
def test_zoo_artifacts_lower_and_compute_the_same_gradients(name: str, generator: str, tmp_path: Path,
                                                           current_runtime) -> None:
    entry = ZOO[name]
    try:
        made = generate_artifacts(ZOO_DIR / entry["file"], loss=entry["loss"],
                                  loss_input_names=[entry["loss_reads"]], artifact_directory=tmp_path,
                                  generator=None if generator == "builder" else generator,
                                  requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    except ArtifactsInputError:
        return  # a model this generator refuses (tests/apps/test_zoo.py says which, and why)
    found: Set[str] = set()
    models = {part: onnx.load(str(getattr(made, part))) for part in ("training_model", "eval_model", "optimizer_model")}
    for model in models.values():
        found.update(training_ops(model.graph))
        assert unlowerable_ops(model) == []
    assert found <= ZOO_TRAINING_OPS, f"operators the recorded list lacks: {sorted(found - ZOO_TRAINING_OPS)}"

    training, inputs = gradients_as_outputs(models["training_model"])
    parameters = checkpoint_parameters(made.checkpoint)
    data = np.load(ZOO_DIR / entry["dataset"]["file"])
    feeds = {n: parameters[n] if n in parameters else data[f"train_{n}"][:4] for n in inputs}
    expected = run_training_build(training, feeds)
    lowered = lower_training_ops(training)
    assert {n.op_type for n in lowered.graph.node if n.domain == MICROSOFT} <= CONTRIB_TARGETS
    # a gradient that is zero but for rounding (a conv bias before a BatchNorm) is all noise: it is compared to
    # within 1e-6 of the model's largest value
    floor = 1e-6 * max(float(np.max(np.abs(e))) for e in expected if e.size)
    assert_close(run_training_build(lowered, feeds), expected, 1e-5, f"{name} ({generator}), lowered, on 1.19.2",
                 floor=floor)
    assert_close(current_runtime.run(lowered, feeds), expected, 1e-5, f"{name} ({generator}), lowered, on 1.31.1",
                 floor=floor)
    for part in ("eval_model", "optimizer_model"):
        lower_training_ops(models[part])  # what the engine keeps stays, the rest lowers


@pytest.mark.parametrize("name", sorted(n for n in ZOO if n in ("resnet_training", "mobilenet_v2", "segnet")))
def test_zoo_convolutions_lowered_for_two_threads(name: str, tmp_path: Path, current_runtime) -> None:
    """Lowered for sessions of two intra-op threads (dX of layers without a stride as a Conv:
    convolution.input_gradient_by_conv), the convolutional models' gradients are the training build's."""
    entry = ZOO[name]
    made = generate_artifacts(ZOO_DIR / entry["file"], loss=entry["loss"], loss_input_names=[entry["loss_reads"]],
                              artifact_directory=tmp_path, requires_grad=ALL_PARAMETERS, optimizer="adamw",
                              additional_output_names=MODEL_OUTPUTS)
    training, inputs = gradients_as_outputs(onnx.load(str(made.training_model)))
    parameters = checkpoint_parameters(made.checkpoint)
    data = np.load(ZOO_DIR / entry["dataset"]["file"])
    feeds = {n: parameters[n] if n in parameters else data[f"train_{n}"][:4] for n in inputs}
    expected = run_training_build(training, feeds)
    lowered = lower_training_ops(training, intra_op_threads=2)
    floor = 1e-6 * max(float(np.max(np.abs(e))) for e in expected if e.size)
    assert_close(run_training_build(lowered, feeds), expected, 1e-5, f"{name}, lowered for 2 threads, on 1.19.2",
                 floor=floor)
    assert_close(current_runtime.run(lowered, feeds), expected, 1e-5, f"{name}, lowered for 2 threads, on 1.31.1",
                 floor=floor)
