"""An output named twice: the builder lists it once, and a training or eval model from elsewhere that lists one
twice gives the value at both places, on either backend (the engine used to hand back None for the repeat)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import run_child
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts import ALL_PARAMETERS, OptimType, generate_artifacts


def own_loss_model(path: Path) -> Path:
    """A classifier that computes its own loss: outputs (loss, logits)."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((5, 6)).astype(np.float32), "fc.weight")
    bias = numpy_helper.from_array(np.zeros(5, np.float32), "fc.bias")
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["logits"], transB=1),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"])]
    graph = helper.make_graph(nodes, "own_loss",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
                               helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch"])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 5])],
                              [weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("repeated")
    made = generate_artifacts(own_loss_model(folder / "model.onnx"), requires_grad=ALL_PARAMETERS,
                              optimizer=OptimType.AdamW, additional_output_names=["logits"],
                              artifact_directory=folder / "artifacts")
    return Path(made.training_model).parent


def test_the_builder_lists_an_output_named_again_once(artifacts: Path) -> None:
    for name in ("training_model.onnx", "eval_model.onnx"):
        outputs = [o.name for o in onnx.load(str(artifacts / name)).graph.output]
        assert outputs[:2] == ["loss", "logits"] and outputs.count("logits") == 1, (name, outputs)


CHILD = """
import json, sys
import numpy as np
from ort_cffi.api import CheckpointState, Module, Optimizer
import ort_cffi
folder = sys.argv[1] if len(sys.argv) > 1 else {folder!r}
state = CheckpointState.load_checkpoint(folder + "/checkpoint")
model = Module(folder + "/repeated_training.onnx", state, folder + "/repeated_eval.onnx")
optimizer = Optimizer(folder + "/optimizer_model.onnx", model)
rng = np.random.default_rng(1)
x, labels = rng.standard_normal((4, 6)).astype(np.float32), np.array([0, 1, 2, 3], np.int64)
before = state.parameters["fc.weight"].data.copy()
trained = model(x, labels)
optimizer.step()
model.eval()
evaluated = model(x, labels)
print(json.dumps({{"backend": ort_cffi.backend(), "outputs": model.output_names(),
                  "trained": [np.asarray(v).tolist() for v in trained],
                  "evaluated": [np.asarray(v).tolist() for v in evaluated],
                  "moved": not np.array_equal(before, state.parameters["fc.weight"].data)}}))
"""


@pytest.mark.parametrize("backend", [pytest.param("training-api", marks=pytest.mark.needs_training_build), "engine"])
def test_a_model_that_lists_an_output_twice_gives_it_twice(artifacts: Path, backend: str) -> None:
    for name, repeated in (("training_model.onnx", "repeated_training.onnx"), ("eval_model.onnx", "repeated_eval.onnx")):
        model = onnx.load(str(artifacts / name))
        model.graph.output.insert(2, model.graph.output[1])  # loss, logits, logits, ...
        onnx.save(model, str(artifacts / repeated))
    proc = run_child(CHILD.format(folder=str(artifacts)), env={"ORT_CFFI_BACKEND": backend})
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["backend"] == backend and found["moved"]
    for outputs in (found["trained"], found["evaluated"]):
        assert len(outputs) == 3 and np.shape(outputs[1]) == (4, 5)
        assert outputs[1] == outputs[2]
