"""ONNX Runtime says nothing about ort_cffi's artifacts: opened in a training session (training, eval and
optimizer models), they draw no warning that the model they were made from does not draw itself.

ONNX Runtime logs to stderr at warning level as it creates a session: an initializer nothing reads ("Removing
initializer 'ints_38'. It is not used by any node ..."), a value a subgraph reads that its optimizers cannot
rename ("Implicit input name ... cannot be safely updated to ... in one of the subgraphs"). The sessions are
created in a child process (the runtime writes to the file descriptor, not through Python's ``sys.stderr``),
each between markers, and the original model in an inference session first: what the exporter's own graph
draws (torch's EmbeddingBag Loop, below) is the model's, not the builder's.

The models: every model of the zoo (tests/zoo), and the forms that once left the builder's artifacts with
warnings: an upsampling segmenter (Resize's gradient left constants unread), GroupNormalization-18 (a
per-channel shape its per-group form never reads), a Dropout with a constant training flag (the eval model
switches it off and left the flag), and control flow (If, Loop, Scan, an EmbeddingBag Loop).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Set, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from test_shape_training import branching, looping, scanning
from test_zoo import TRAINABLE, ZOO, ZOO_DIR, generate

from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

INT64_MAX = 2 ** 63 - 1
OPEN_SESSIONS = r"""
import sys
from ort_cffi import OrtEnvironment, OrtLoggingLevel
env = OrtEnvironment.getEnvironment(OrtLoggingLevel.ORT_LOGGING_LEVEL_WARNING)
for kind, path in zip(sys.argv[1::2], sys.argv[2::2]):
    print(f"@@ {kind} {path}", file=sys.stderr, flush=True)
    if kind == "model":
        env.createSession(path).close()
    else:
        env.createTrainingSession(path + "/checkpoint", path + "/training_model.onnx", path + "/eval_model.onnx",
                                  path + "/optimizer_model.onnx").close()
    print("@@ done", file=sys.stderr, flush=True)
"""
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^.*?\[[WE]:onnxruntime:[^\]]*\]\s*")  # time, level, source file and function


def runtime_warnings(opened: List[Tuple[str, Path]]) -> Dict[str, Set[str]]:
    """The warnings ONNX Runtime writes while each ("model", file) or ("artifacts", folder) is opened, in one
    child process, by path."""
    arguments = [str(item) for kind, path in opened for item in (kind, path)]
    proc = subprocess.run([sys.executable, "-c", OPEN_SESSIONS, *arguments], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: Dict[str, Set[str]] = {}
    current = None
    for line in proc.stderr.splitlines():
        if line.startswith("@@ "):
            current = None if line == "@@ done" else line.split(" ", 2)[2]
            found.setdefault(current or "", set())
        elif line.strip():
            assert current is not None, f"ONNX Runtime wrote outside a session's creation: {line}"
            found[current].add(_PREFIX.sub("", _COLOURS.sub("", line)).strip())
    return found


def model_of(nodes: List[onnx.NodeProto], inputs: List[onnx.ValueInfoProto], classes: int,
             initializers: Dict[str, np.ndarray], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "model", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
                              [numpy_helper.from_array(value, name) for name, value in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def image(channels: int = 3, side: int = 8) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, side, side])


def weights(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).normal(0, 0.3, shape).astype(np.float32)


def upsampling_segmenter() -> onnx.ModelProto:
    """Conv, a bilinear Resize by 2 (by scales) and one to a size (by sizes), as LR-ASPP heads upsample."""
    nodes = [helper.make_node("Conv", ["x", "k1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c1", "", "scales"], ["up"], mode="linear"),
             helper.make_node("Conv", ["up", "k2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c2", "", "", "sizes"], ["down"], mode="nearest"),
             helper.make_node("GlobalAveragePool", ["down"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["logits"])]
    return model_of(nodes, [image()], 3, {"k1": weights(4, 3, 3, 3), "k2": weights(3, 4, 3, 3),
                                          "scales": np.array([1, 1, 2, 2], np.float32),
                                          "sizes": np.array([0, 3, 12, 12], np.int64)})


def group_normalization() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"]),
             helper.make_node("GroupNormalization", ["c", "gamma", "beta"], ["g"], num_groups=2),
             helper.make_node("Relu", ["g"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["pooled"]),
             helper.make_node("Flatten", ["pooled"], ["logits"])]
    return model_of(nodes, [image()], 4, {"k": weights(4, 3, 3, 3), "gamma": weights(2) + 1, "beta": weights(2)},
                    opset=18)


def dropout_in_training_mode() -> onnx.ModelProto:
    nodes = [helper.make_node("Constant", [], ["training"], value=numpy_helper.from_array(np.array(True), "t")),
             helper.make_node("Gemm", ["x", "w"], ["h"]),
             helper.make_node("Dropout", ["h", "ratio", "training"], ["dropped"]),
             helper.make_node("Gemm", ["dropped", "w2"], ["logits"])]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])], 3,
                    {"w": weights(5, 6), "w2": weights(6, 3), "ratio": np.array(0.25, np.float32)})


def embedding_bag() -> onnx.ModelProto:
    """``nn.EmbeddingBag(mode="mean")`` as torch's exporter writes it (a Loop over the bags, reading the bags'
    starts and ends: Slices of Concat(offsets, [len(indices)]), the first a no-op), then a Linear."""
    body = helper.make_graph(
        [helper.make_node("Gather", ["/e/Slice_output_0", "i"], ["bag_start"], axis=0),
         helper.make_node("Gather", ["/e/Slice_1_output_0", "i"], ["bag_end"], axis=0),
         helper.make_node("Unsqueeze", ["bag_start", "zero"], ["start1"]),
         helper.make_node("Unsqueeze", ["bag_end", "zero"], ["end1"]),
         helper.make_node("Slice", ["indices", "start1", "end1", "zero"], ["row"]),
         helper.make_node("Gather", ["weight", "row"], ["rows"], axis=0),
         helper.make_node("ReduceMean", ["rows"], ["bag"], axes=[0], keepdims=0),
         helper.make_node("Identity", ["condition"], ["condition_out"])], "bags",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("condition", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("condition_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("bag", TensorProto.FLOAT, [8])])
    nodes = [helper.make_node("Shape", ["indices"], ["/e/Shape_output_0"]),
             helper.make_node("Gather", ["/e/Shape_output_0", "zero_scalar"], ["/e/Gather_output_0"], axis=0),
             helper.make_node("Unsqueeze", ["/e/Gather_output_0", "zero"], ["/e/Unsqueeze_output_0"]),
             helper.make_node("Concat", ["offsets", "/e/Unsqueeze_output_0"], ["/e/Concat_output_0"], axis=0),
             helper.make_node("Slice", ["/e/Concat_output_0", "zero", "end", "zero", "one"], ["/e/Slice_output_0"]),
             helper.make_node("Slice", ["/e/Concat_output_0", "one", "end", "zero", "one"], ["/e/Slice_1_output_0"]),
             helper.make_node("Shape", ["/e/Slice_1_output_0"], ["/e/Shape_1_output_0"]),
             helper.make_node("Gather", ["/e/Shape_1_output_0", "zero_scalar"], ["/e/Gather_1_output_0"], axis=0),
             helper.make_node("Loop", ["/e/Gather_1_output_0", "true"], ["/e/Loop_output_0"], body=body),
             helper.make_node("Gemm", ["/e/Loop_output_0", "fc.weight", "fc.bias"], ["logits"], transB=1)]
    return model_of(nodes, [helper.make_tensor_value_info("indices", TensorProto.INT64, ["L"]),
                            helper.make_tensor_value_info("offsets", TensorProto.INT64, ["N"])], 3,
                    {"weight": weights(20, 8), "fc.weight": weights(3, 8), "fc.bias": weights(3),
                     "zero": np.array([0], np.int64), "one": np.array([1], np.int64),
                     "zero_scalar": np.array(0, np.int64), "end": np.array([INT64_MAX], np.int64),
                     "true": np.array(True)})


def with_unread_initializer() -> onnx.ModelProto:
    """The check's own control: a model with an initializer nothing reads, which ONNX Runtime warns about."""
    model = dropout_in_training_mode()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "left_over"))
    return model


BUILT: Dict[str, Callable[[], onnx.ModelProto]] = {
    "upsampling_segmenter": upsampling_segmenter, "group_normalization": group_normalization,
    "dropout_in_training_mode": dropout_in_training_mode, "embedding_bag": embedding_bag,
    "branching": lambda: branching()[0], "looping": lambda: looping()[0], "scanning": lambda: scanning()[0]}


def test_the_builders_artifacts_draw_no_warning_of_their_own(tmp_path: Path) -> None:
    opened: List[Tuple[str, Path]] = []
    for name in TRAINABLE:
        generate(name, tmp_path / name)
        opened += [("model", ZOO_DIR / ZOO[name]["file"]), ("artifacts", tmp_path / name)]
    for name, build in BUILT.items():
        onnx.save(build(), tmp_path / f"{name}.onnx")
        generate_artifacts(tmp_path / f"{name}.onnx", artifact_directory=tmp_path / name, loss_input_names=["logits"],
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        opened += [("model", tmp_path / f"{name}.onnx"), ("artifacts", tmp_path / name)]
    onnx.save(with_unread_initializer(), tmp_path / "control.onnx")
    opened.append(("model", tmp_path / "control.onnx"))
    found = runtime_warnings(opened)
    assert any("Removing initializer 'left_over'" in line for line in found[str(tmp_path / "control.onnx")]), found
    # torch's EmbeddingBag draws one itself: its Loop reads both ends of the bags, Slices of one value
    assert any("cannot be safely updated" in line for line in found[str(tmp_path / "embedding_bag.onnx")])
    added = {str(folder): sorted(found[str(folder)] - found[str(model)])
             for (_, model), (_, folder) in zip(opened[0:-1:2], opened[1::2])}
    assert not any(added.values()), {folder: lines for folder, lines in added.items() if lines}
