"""Small models built of the shape, indexing and control-flow rules (If, Loop, Scan), at a symbolic batch size, trained
through a real training session on ort_cffi's own artifacts: the loss falls and every parameter moves."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

rng = np.random.default_rng(3)
BATCH, CLASSES = 12, 3


def _model(nodes: List[onnx.NodeProto], inputs: List[onnx.ValueInfoProto], weights: Dict[str, np.ndarray],
           constants: Dict[str, np.ndarray]) -> onnx.ModelProto:
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    initializers += [numpy_helper.from_array(v, k) for k, v in constants.items()]
    graph = helper.make_graph(nodes, "shapes", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def reshape_transpose_concat_slice() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]),
             helper.make_node("Reshape", ["h", "shape3"], ["h3"]),            # [N, 3, 4]
             helper.make_node("Transpose", ["h3"], ["t"], perm=[0, 2, 1]),  # [N, 4, 3]
             helper.make_node("Slice", ["t", "starts", "ends", "axes"], ["s"]),  # [N, 2, 3]
             helper.make_node("Unsqueeze", ["bias", "zero"], ["b"]),       # [1, 2, 3]
             helper.make_node("Expand", ["b", "shape_s"], ["bb"]),
             helper.make_node("Shape", ["s"], ["shape_s"]),
             helper.make_node("Concat", ["s", "bb"], ["c"], axis=1),        # [N, 4, 3]
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "w2"], ["logits"])]
    nodes.insert(5, nodes.pop(6))  # Shape before Expand
    weights = {"w1": rng.normal(0, 0.4, (6, 12)), "bias": rng.normal(0, 0.4, (2, 3)), "w2": rng.normal(0, 0.4, (12, 3))}
    constants = {"shape3": np.array([0, 3, 4], np.int64), "starts": np.array([1], np.int64),
                 "ends": np.array([3], np.int64), "axes": np.array([1], np.int64), "zero": np.array([0], np.int64)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])], weights, constants)
    return model, {"x": rng.normal(size=(BATCH, 6)).astype(np.float32)}


def embedding_pad_split(mode: str = "reflect") -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """An embedding, padded, split in two; the first part is left unused where the padding reflects."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),                # [N, 4, 5]
             helper.make_node("Pad", ["e", "pads"], ["p"], mode=mode),        # [N, 4, 7]
             helper.make_node("Split", ["p", "split"], ["a", "b"], axis=2),     # [N, 4, 3], [N, 4, 4]
             helper.make_node("ReduceSum", ["b", "axes"], ["pooled"], keepdims=0),  # [N, 4]
             helper.make_node("Gemm", ["pooled", "w"], ["logits"])]
    if mode == "constant":  # both parts used
        nodes[3:3] = [helper.make_node("Concat", ["b", "a"], ["ba"], axis=2)]
        nodes[4].input[0] = "ba"
    weights = {"table": rng.normal(0, 0.5, (9, 5)), "w": rng.normal(0, 0.5, (4, 3))}
    constants = {"pads": np.array([0, 0, 1, 0, 0, 1], np.int64), "split": np.array([3, 4], np.int64),
                 "axes": np.array([2], np.int64)}
    model = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])], weights, constants)
    return model, {"ids": rng.integers(0, 9, (BATCH, 4)).astype(np.int64)}


def branching() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    then_branch = helper.make_graph([helper.make_node("MatMul", ["x", "w_then"], ["from_then"])], "then", [],
                                    [helper.make_tensor_value_info("from_then", TensorProto.FLOAT, None)])
    else_branch = helper.make_graph([helper.make_node("Mul", ["x", "scale"], ["scaled"]),
                                     helper.make_node("MatMul", ["scaled", "w_else"], ["from_else"])], "else", [],
                                    [helper.make_tensor_value_info("from_else", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("If", ["flag"], ["logits"], then_branch=then_branch, else_branch=else_branch)]
    weights = {"w_then": rng.normal(0, 0.5, (5, 3)), "w_else": rng.normal(0, 0.5, (5, 3)),
               "scale": rng.normal(1, 0.1, 5)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5]),
                           helper.make_tensor_value_info("flag", TensorProto.BOOL, [])], weights, {})
    return model, {"x": rng.normal(size=(BATCH, 5)).astype(np.float32)}


def looping() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """A small RNN as a Loop over 3 steps: h = tanh(h W + x_t U), from h = 0 (of the batch's size)."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "step"], ["x_t"], axis=1),
         helper.make_node("MatMul", ["h", "w_h"], ["hw"]),
         helper.make_node("MatMul", ["x_t", "w_x"], ["xw"]),
         helper.make_node("Add", ["hw", "xw"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_next"]),
         helper.make_node("Identity", ["go_in"], ["go_out"])], "rnn",
        [helper.make_tensor_value_info("step", TensorProto.INT64, []),
         helper.make_tensor_value_info("go_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_next", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Gather", ["x", "zero"], ["x0"], axis=1),             # [N, 4]
             helper.make_node("MatMul", ["x0", "zeros"], ["h0"]),                   # zeros of [N, 6]
             helper.make_node("Loop", ["steps", "go", "h0"], ["h_last"], body=body),
             helper.make_node("Gemm", ["h_last", "w_out"], ["logits"])]
    weights = {"w_h": rng.normal(0, 0.3, (6, 6)), "w_x": rng.normal(0, 0.5, (4, 6)), "w_out": rng.normal(0, 0.5, (6, 3))}
    constants = {"zero": np.array(0, np.int64), "zeros": np.zeros((4, 6), np.float32), "steps": np.array(3, np.int64),
                 "go": np.array(True)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])], weights, constants)
    return model, {"x": rng.normal(size=(BATCH, 3, 4)).astype(np.float32)}


def scanning() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """The same RNN as a Scan over the sequence axis (1) of x [N, 3, 4]."""
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w_h"], ["hw"]),
         helper.make_node("MatMul", ["x_t", "w_x"], ["xw"]),
         helper.make_node("Add", ["hw", "xw"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["h_next"])], "rnn",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Gather", ["x", "zero"], ["x0"], axis=1),
             helper.make_node("MatMul", ["x0", "zeros"], ["h0"]),
             helper.make_node("Scan", ["h0", "x"], ["h_last"], body=body, num_scan_inputs=1, scan_input_axes=[1]),
             helper.make_node("Gemm", ["h_last", "w_out"], ["logits"])]
    weights = {"w_h": rng.normal(0, 0.3, (6, 6)), "w_x": rng.normal(0, 0.5, (4, 6)), "w_out": rng.normal(0, 0.5, (6, 3))}
    constants = {"zero": np.array(0, np.int64), "zeros": np.zeros((4, 6), np.float32)}
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])], weights, constants)
    return model, {"x": rng.normal(size=(BATCH, 3, 4)).astype(np.float32)}


def _train(folder: Path, batches: List[Dict[str, np.ndarray]], steps: int) -> Tuple[List[float], np.ndarray, np.ndarray]:
    env = OrtEnvironment.getEnvironment()
    losses = []
    with env.createTrainingSession(str(folder / "checkpoint"), str(folder / "training_model.onnx"),
                                   str(folder / "eval_model.onnx"), str(folder / "optimizer_model.onnx")) as session:
        session.setLearningRate(0.05)
        start = session.copyParametersToBuffer()
        for step in range(steps):
            with session.trainStep(batches[step % len(batches)]) as result:
                losses.append(float(result.get(0).getValue()))
            session.optimizerStep()
            session.lazyResetGrad()
        return losses, start, session.copyParametersToBuffer()


@pytest.mark.parametrize("build", [reshape_transpose_concat_slice, embedding_pad_split, branching, looping,
                                   scanning],
                         ids=lambda f: f.__name__)
def test_a_small_model_trains_at_two_batch_sizes(tmp_path: Path, build) -> None:  # type: ignore[no-untyped-def]
    model, feeds = build()
    made = generate_artifacts(model, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int64)
    batches = [{**feeds, "labels": labels}]
    if build is branching:  # both branches, in turn
        batches = [{**feeds, "labels": labels, "flag": np.array(flag)} for flag in (True, False)]
    half = [{k: (v[: BATCH // 2] if v.ndim else v) for k, v in b.items()} for b in batches]
    losses, start, after = _train(tmp_path / "out", batches + half, steps=40)
    assert np.mean(losses[-4:]) < np.mean(losses[:4]), losses
    sizes = [int(np.prod(p.shape)) for p in made.trainable]
    moved = [not np.array_equal(a, b) for a, b in zip(np.split(start, np.cumsum(sizes)[:-1]),
                                                       np.split(after, np.cumsum(sizes)[:-1]))]
    assert moved and all(moved), dict(zip([p.name for p in made.trainable], moved))


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("build", [reshape_transpose_concat_slice, lambda: embedding_pad_split("constant")],
                         ids=["reshape_transpose_concat_slice", "embedding_pad_split"])
def test_losses_match_onnx_runtimes_own_artifacts(tmp_path: Path, build) -> None:  # type: ignore[no-untyped-def]
    """Where ONNX Runtime's builder has a gradient for every operator, it and ort_cffi's train alike: the
    shape gradients only move elements (SliceGrad, GatherGrad, Split against its SplitTraining), so the
    losses agree to the last bit. (Its builder takes constant padding only, and its Split gradient needs
    every part used: with a part unused its gradient has the wrong shape.)"""
    model, feeds = build()
    ours = generate_artifacts(model, artifact_directory=tmp_path / "ours",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    theirs = generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                                requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                                optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert ours.versions["generator"] == "ort_cffi" and theirs.versions["generator"] == "onnxruntime"
    batches = [{**feeds, "labels": rng.integers(0, CLASSES, BATCH).astype(np.int64)}]
    mine, _, _ = _train(tmp_path / "ours", batches, steps=10)
    reference, _, _ = _train(tmp_path / "theirs", batches, steps=10)
    assert mine == reference
