"""``ort_cffi.onnxblock``, ``ort_cffi.training.artifacts`` and ``ort_cffi.api.InferenceSession`` on their own:
the blocks write ONNX Runtime's graphs node for node, the generator takes what ONNX Runtime's takes and refuses
the rest with a clear error, and the inference session runs what training exported. The examples that use them
together are tests/apps/test_onnxruntime_ports.py."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from conftest import ROOT, run_child
from onnx import TensorProto, helper, numpy_helper

from ort_cffi import OrtException
from ort_cffi import artifacts as ort_cffi_artifacts
from ort_cffi import onnxblock
from ort_cffi.api import CheckpointState, InferenceSession, Module, NodeArg, Optimizer, OrtValue, SessionOptions
from ort_cffi.training import artifacts


def regression_model(outputs: int = 3) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "regression",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", outputs])],
        [numpy_helper.from_array(rng.standard_normal((outputs, 4)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(outputs).astype(np.float32), "b"),
         numpy_helper.from_array(np.array([2], dtype=np.int64), "count")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# --- the blocks' graphs are ONNX Runtime's ---------------------------------------------------------------

LOSS_CASES = {
    "mse": "onnxblock.loss.MSELoss()",
    "mse sum": "onnxblock.loss.MSELoss(reduction='sum')",
    "l1": "onnxblock.loss.L1Loss()",
    "bce": "onnxblock.loss.BCEWithLogitsLoss()",
    "bce weighted": "onnxblock.loss.BCEWithLogitsLoss(weight=np.array([0.5, 1.0, 2.0], np.float32), "
                    "pos_weight=np.array([2.0, 1.0, 1.0], np.float32))",
    "cross-entropy": "onnxblock.loss.CrossEntropyLoss()",
    "cross-entropy ignored": "onnxblock.loss.CrossEntropyLoss(reduction='sum', ignore_index=1)",
    "clip and constant": "Composite()",
}
GRAPHS = """
import json
import numpy as np

class Composite(onnxblock.Block):
    def __init__(self):
        super().__init__()
        self.clip = onnxblock.blocks.Clip(-1.0, 1.0)
        self.scale = onnxblock.blocks.Constant(0.5)
        self.mul = onnxblock.blocks.Mul()
        self.reduce = onnxblock.blocks.ReduceSum(keepdims=False)

    def build(self, name):
        return self.reduce(self.mul(self.clip(name), self.scale()))

model = onnx.load(MODEL)
graphs = {}
for key, make in CASES.items():
    restart()
    with onnxblock.base(model) as accessor:
        eval(make)("y")
        graphs[key] = accessor.model.graph.SerializeToString().hex()
print("RESULT " + json.dumps(graphs))
"""
RESTART = {
    "onnxruntime": """
import importlib.util
_spec = importlib.util.spec_from_file_location("_ort_child", {child!r})
_child = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_child)
onnx, _, _ = _child.import_generator()
import onnxruntime.training.onnxblock as onnxblock
from onnxruntime.training.onnxblock import _graph_utils
def restart():
    _graph_utils._GRAPH_TOKEN = 0
""".format(child=str(ROOT / "ort_cffi" / "artifacts" / "_child.py")),
    "ort_cffi": """
import onnx
import ort_cffi.training.onnxblock as onnxblock
from ort_cffi.onnxblock import _graph_utils
def restart():
    _graph_utils.restart_names()
""",
}


def graphs(runtime: str, model: Path) -> dict:
    code = RESTART[runtime] + f"\nMODEL = {str(model)!r}\nCASES = {LOSS_CASES!r}\n" + GRAPHS
    line = [line for line in run_child(code).stdout.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.needs_onnxruntime_python
def test_the_blocks_write_onnx_runtimes_graphs_node_for_node(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(regression_model(), str(path))
    ours, theirs = graphs("ort_cffi", path), graphs("onnxruntime", path)
    assert set(ours) == set(LOSS_CASES)
    for key in LOSS_CASES:
        mine, reference = onnx.GraphProto(), onnx.GraphProto()
        mine.ParseFromString(bytes.fromhex(ours[key]))
        reference.ParseFromString(bytes.fromhex(theirs[key]))
        assert mine == reference, f"{key}:\n{helper.printable_graph(mine)}\n---\n{helper.printable_graph(reference)}"


# --- blocks, training blocks and checkpoints on their own -----------------------------------------------

@pytest.mark.parametrize("kind", ["ForwardBlock", "TrainingBlock"])
@pytest.mark.parametrize("loss", ["MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss"])
def test_every_loss_composes_in_both_kinds_of_block_with_both_optimizers(kind: str, loss: str) -> None:
    """ONNX Runtime's onnxblock tests' compositions: a loss on a model's output, in a forward and a training
    block, and for the training block the optimizers with and without gradient clipping."""
    class WithLoss(getattr(onnxblock, kind)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.loss = getattr(onnxblock.loss, loss)()

        def build(self, output_name: str) -> str:
            return self.loss(output_name)  # type: ignore[no-any-return]

    model, block = regression_model(), WithLoss()
    if kind == "TrainingBlock":
        for initializer in model.graph.initializer[:2]:
            block.requires_grad(initializer.name)
    with onnxblock.base(model):
        loss_name = block("y")
    built = block.to_model_proto()
    first = built[0] if kind == "TrainingBlock" else built
    assert first.graph.output[0].name == loss_name
    if kind == "TrainingBlock":
        for clip in (None, onnxblock.optim.ClipGradNorm(2.5)):
            for optimizer in (onnxblock.optim.AdamW(clip_grad=clip), onnxblock.optim.SGD(clip_grad=clip)):
                with onnxblock.empty_base() as accessor:
                    optimizer(block.parameters())
                    assert [i.name for i in accessor.model.graph.input][:2] == ["learning_rate", "step"]


def test_a_block_outside_a_base_says_where_it_belongs() -> None:
    with pytest.raises(RuntimeError, match="onnxblock.base"):
        onnxblock.blocks.Add()("a", "b")
    with onnxblock.base(regression_model()):
        with pytest.raises(RuntimeError, match="already exists"):
            with onnxblock.empty_base():
                pass
    with pytest.raises(NotImplementedError, match="custom-op"):
        with onnxblock.custom_op_library("libcustom.so"):
            pass


class Regression(onnxblock.TrainingBlock):
    def __init__(self) -> None:
        super().__init__()
        self.loss = onnxblock.loss.L1Loss()

    def build(self, output_name: str) -> object:
        return self.loss(output_name), output_name


def test_a_training_block_trains_and_its_checkpoint_round_trips(tmp_path: Path) -> None:
    block = Regression()
    with pytest.raises(RuntimeError, match="build the training model first"):
        block.parameters()
    with pytest.raises(RuntimeError, match="build the training and eval models first"):
        block.to_model_proto()
    block.requires_grad("w")
    block.requires_grad("b")
    block.requires_grad("b", False)  # frozen after all
    block.requires_grad("not.an.initializer", False)  # marks nothing, as in ONNX Runtime
    model = regression_model()
    with onnxblock.base(model):
        block("y")
    training, evaluation = block.to_model_proto()
    trainable, frozen = block.parameters()
    assert [p.name for p in trainable] == ["w"] and [p.name for p in frozen] == ["b"]
    assert training.ir_version <= 10 and [o.name for o in evaluation.graph.output][1:] == ["y"]
    with onnxblock.empty_base():
        optimizer_block = onnxblock.optim.SGD(clip_grad=onnxblock.optim.ClipGradNorm(1.0))
        optimizer_block(block.parameters())
    for name, made in (("training.onnx", training), ("eval.onnx", evaluation),
                       ("optimizer.onnx", optimizer_block.to_model_proto())):
        onnx.save(made, str(tmp_path / name))
    onnxblock.save_checkpoint(block.parameters(), tmp_path / "checkpoint")
    state = CheckpointState.load_checkpoint(str(tmp_path / "checkpoint"))
    module = Module(str(tmp_path / "training.onnx"), state, str(tmp_path / "eval.onnx"))
    optimizer = Optimizer(str(tmp_path / "optimizer.onnx"), module)
    rng = np.random.default_rng(0)
    x, target = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    first, _ = module(x, target)
    for _ in range(20):
        loss, _ = module(x, target)
        optimizer.step()
        module.lazy_reset_grad()
    assert loss < first
    trained = tmp_path / "trained_checkpoint"
    CheckpointState.save_checkpoint(state, str(trained))
    restored = regression_model()
    onnxblock.load_checkpoint_to_model(trained, restored)
    weights = {i.name: numpy_helper.to_array(i) for i in restored.graph.initializer}
    assert np.array_equal(weights["w"], state.parameters["w"].data)
    assert np.array_equal(weights["b"], numpy_helper.to_array(model.graph.initializer[1]))  # frozen: as it was
    assert np.array_equal(weights["count"], [2])
    onnxblock.save_checkpoint(block.parameters(), tmp_path / "nominal", nominal_checkpoint=True)
    with pytest.raises(ValueError, match="nominal"):
        onnxblock.load_checkpoint_to_model(tmp_path / "nominal", restored)
    with pytest.raises(FileNotFoundError):
        onnxblock.load_checkpoint_to_model(tmp_path / "missing", restored)


@pytest.mark.needs_training_build  # runs the training graph in an inference session: its kernels are the training build's
def test_a_training_block_differentiates_a_graph_input_and_builds_with_nothing_marked(tmp_path: Path) -> None:
    """As ONNX Runtime's own onnxblock tests do: requires_grad on a graph input gives it a gradient buffer and
    output; with nothing marked the block builds, with no parameters. The training model runs in an
    InferenceSession, its loss numpy's."""
    class MSE(onnxblock.TrainingBlock):
        def __init__(self) -> None:
            super().__init__()
            self.loss = onnxblock.loss.MSELoss()

        def build(self, output_name: str) -> str:
            return self.loss(output_name)  # type: ignore[no-any-return]

    model = regression_model()
    nothing = MSE()
    with onnxblock.base(model):
        nothing("y")
    assert nothing.parameters() == ([], [])
    block = MSE()
    for name in ("x", "w", "b"):
        block.requires_grad(name)
    with onnxblock.base(model):
        block("y")
    training, _ = block.to_model_proto()
    assert [p.name for p in block.parameters()[0]] == ["w", "b"]
    assert "x_grad.accumulation.buffer" in [i.name for i in training.graph.input]
    outputs = [training.graph.output[0].name] + [f"{n}_grad.accumulation.out" for n in ("x", "w", "b")]
    assert [o.name for o in training.graph.output] == outputs
    onnx.save(training, str(tmp_path / "training.onnx"))
    rng = np.random.default_rng(3)
    x, target = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    w, b = (numpy_helper.to_array(i) for i in model.graph.initializer[:2])
    feed = {"x": x, "target": target, "w": w, "b": b, "lazy_reset_grad": np.full(1, True),
            "x_grad.accumulation.buffer": np.zeros_like(x), "w_grad.accumulation.buffer": np.zeros_like(w),
            "b_grad.accumulation.buffer": np.zeros_like(b)}
    with InferenceSession(str(tmp_path / "training.onnx")) as session:
        loss, *flags = session.run(outputs, feed)
    np.testing.assert_allclose(loss, ((x @ w.T + b - target) ** 2).mean(), rtol=1e-5)
    assert all(flag.all() for flag in flags)


def test_onnxruntime_trainings_names_are_ort_cffis_own_classes() -> None:
    import ort_cffi.training.onnxblock as ported
    from ort_cffi.training.api import Module as PortedModule
    from ort_cffi.training.onnxblock.blocks import Block as PortedBlock
    from ort_cffi.training.onnxblock.loss import MSELoss

    assert PortedModule is Module and PortedBlock is onnxblock.Block is ported.Block
    assert MSELoss is onnxblock.loss.MSELoss and ported.optim.AdamW is onnxblock.optim.AdamW


# --- ONNX Runtime's generator: what it takes, what it refuses -------------------------------------------

def _train(folder: Path, inputs: List[np.ndarray], steps: int = 10) -> List[float]:
    state = CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    options = SessionOptions()  # ONNX Runtime's form, as a port passes it
    options.intra_op_num_threads = 1
    module = Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"),
                    session_options=options)
    optimizer = Optimizer(str(folder / "optimizer_model.onnx"), module)
    losses = []
    for _ in range(steps):
        losses.append(float(np.asarray(module(*inputs)).reshape(-1)[0]))
        optimizer.step()
        module.lazy_reset_grad()
    return losses


@pytest.mark.parametrize("loss", ["BCEWithLogitsLoss", "L1Loss", "MSELoss"])
def test_a_loss_block_trains_as_the_loss_of_the_generator(tmp_path: Path, loss: str) -> None:
    made = artifacts.generate_artifacts(regression_model(), requires_grad=["w", "b"],
                                        loss=getattr(onnxblock.loss, loss)(), optimizer=onnxblock.optim.AdamW(),
                                        artifact_directory=tmp_path)
    assert made.eval_outputs[1:] == ()  # the loss alone, as ONNX Runtime's default
    rng = np.random.default_rng(1)
    target = rng.uniform(0, 1, (8, 3)).astype(np.float32)
    losses = _train(tmp_path, [rng.standard_normal((8, 4)).astype(np.float32), target], steps=30)
    assert losses[-1] < losses[0]


def test_the_generator_takes_onnx_runtimes_enums_and_notes_what_it_does_not_freeze(tmp_path: Path) -> None:
    assert artifacts.LossType(2) is artifacts.LossType.CrossEntropyLoss and artifacts.OptimType(2).name == "SGD"
    made = artifacts.generate_artifacts(regression_model(), requires_grad=["w"], frozen_params=["b", "count", "ids"],
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD,
                                        artifact_directory=tmp_path)
    assert [p.name for p in made.frozen] == ["b"]
    assert any("ids" in note and "no initializer" in note for note in made.notes)
    assert any("count (int64)" in note and "constants" in note for note in made.notes)
    assert made.eval_outputs[1:] == ()
    again = artifacts.generate_artifacts(regression_model(), requires_grad=["w"], loss=artifacts.LossType.MSELoss,
                                         optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path,
                                         additional_output_names=["y"])  # replaced, as ONNX Runtime replaces them
    assert again.eval_outputs[1:] == ("y",)


def test_every_initializer_in_requires_grad_trains_what_can_be_trained(tmp_path: Path) -> None:
    """Published code lists every initializer in requires_grad: the exporter's int64 shape, a bool flag and a
    dropout ratio (no gradient reaches it) are left out, named, and the weights train."""
    rng = np.random.default_rng(4)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
         helper.make_node("Dropout", ["h", "ratio", "mode"], ["dropped"]),
         helper.make_node("Reshape", ["dropped", "shape"], ["y"])], "with_constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w"),
         numpy_helper.from_array(np.zeros(3, np.float32), "b"), numpy_helper.from_array(np.array(0.1, np.float32), "ratio"),
         numpy_helper.from_array(np.array(False), "mode"), numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)
    made = artifacts.generate_artifacts(model, requires_grad=[i.name for i in model.graph.initializer],
                                        loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.AdamW,
                                        artifact_directory=tmp_path)
    assert [p.name for p in made.trainable] == ["w", "b"] and list(made.left_out) == ["ratio"]
    assert any("mode (bool), shape (int64)" in note for note in made.notes)
    losses = _train(tmp_path, [rng.standard_normal((8, 4)).astype(np.float32),
                               rng.standard_normal((8, 3)).astype(np.float32)], steps=20)
    assert losses[-1] < losses[0]


def test_requires_grad_none_trains_nothing_as_in_onnx_runtime(tmp_path: Path) -> None:
    """ONNX Runtime's own onnxblock tests generate eval-only artifacts this way (a Dropout model, no
    parameters): the eval model's Dropout leaves training mode, and keeps the loss alone unless told."""
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["input-0", "ratio", "training_mode"], ["output-0"])], "dropout",
        [helper.make_tensor_value_info("input-0", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("output-0", TensorProto.FLOAT, [1, 3, 4, 4])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
         numpy_helper.from_array(np.array(True), "training_mode")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=7)
    made = artifacts.generate_artifacts(model, loss=artifacts.LossType.CrossEntropyLoss, artifact_directory=tmp_path)
    assert made.trainable == () and any("nothing is trained" in note for note in made.notes)
    evaluation = onnx.load(str(made.eval_model))
    assert len(evaluation.graph.output) == 1
    assert [n.input[2] for n in evaluation.graph.node if n.op_type == "Dropout"] == [""]
    made = artifacts.generate_artifacts(model, loss=artifacts.LossType.CrossEntropyLoss, artifact_directory=tmp_path,
                                        additional_output_names=["output-0"])
    assert len(onnx.load(str(made.eval_model)).graph.output) == 2
    with pytest.raises(ort_cffi_artifacts.ArtifactsInputError, match="requires_grad=None trains nothing"):
        artifacts.generate_artifacts(regression_model(), loss=artifacts.LossType.MSELoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "other")


def test_onnx_runtime_1_15s_artifacts_dir_is_taken_and_other_unknown_keywords_refused(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Microsoft's iOS example passes artifacts_dir=, which ONNX Runtime 1.15's **extra_options passed over."""
    monkeypatch.chdir(tmp_path)
    made = artifacts.generate_artifacts(regression_model(), requires_grad=["w", "b"], loss=onnxblock.loss.MSELoss(),
                                        optimizer=artifacts.OptimType.AdamW, artifacts_dir="artifacts")
    assert made.folder.resolve() == (tmp_path / "artifacts").resolve() and made.optimizer_model is not None
    assert any("artifacts_dir" in note for note in made.notes)
    with pytest.raises(TypeError, match="artifact_dir"):
        artifacts.generate_artifacts(regression_model(), ["w"], artifact_dir="elsewhere")
    with pytest.raises(TypeError, match="pass one"):
        artifacts.generate_artifacts(regression_model(), ["w"], artifact_directory="a", artifacts_dir="b")


def test_ort_cffis_own_enums_take_onnx_runtimes_numbers_too() -> None:
    assert ort_cffi_artifacts.LossType(2) is ort_cffi_artifacts.LossType.CrossEntropyLoss
    assert ort_cffi_artifacts.LossType(4) is ort_cffi_artifacts.LossType.L1Loss
    assert ort_cffi_artifacts.OptimType(2) is ort_cffi_artifacts.OptimType.SGD
    assert ort_cffi_artifacts.LossType("mse") is ort_cffi_artifacts.LossType.MSELoss
    with pytest.raises(ValueError):
        ort_cffi_artifacts.LossType(5)
    assert ort_cffi_artifacts.request_options(loss=1, optimizer=1)["loss"] == "mse"


def test_the_generator_refuses_what_ort_cffi_cannot_do_by_name(tmp_path: Path) -> None:
    model = regression_model()
    with pytest.raises(NotImplementedError, match="ort_format"):
        artifacts.generate_artifacts(model, ["w"], artifact_directory=tmp_path, ort_format=True)
    with pytest.raises(NotImplementedError, match="custom_op_library"):
        artifacts.generate_artifacts(model, ["w"], artifact_directory=tmp_path, custom_op_library="lib.so")
    with pytest.raises(RuntimeError, match="frozen and require gradient"):
        artifacts.generate_artifacts(model, ["w"], ["w"], artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="Unknown loss"):  # ort_cffi's names ("mse") are taken, others not
        artifacts.generate_artifacts(model, ["w"], loss="hinge", artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="additional output names"):
        artifacts.generate_artifacts(model, ["w"], loss=artifacts.LossType.MSELoss, artifact_directory=tmp_path,
                                     additional_output_names="y")  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="AdamW and SGD"):
        artifacts.generate_artifacts(model, ["w"], loss=artifacts.LossType.MSELoss, artifact_directory=tmp_path,
                                     optimizer=onnxblock.optim.ClipGradNorm(1.0))
    with pytest.raises(RuntimeError, match="string or an ONNX ModelProto"):
        artifacts.generate_artifacts(42, ["w"], artifact_directory=tmp_path)  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_ort_cffis_own_generator_takes_a_loss_block_too(tmp_path: Path) -> None:
    made = ort_cffi_artifacts.generate_artifacts(regression_model(), ["w", "b"], loss=onnxblock.loss.L1Loss(),
                                                 optimizer="adamw", artifact_directory=tmp_path,
                                                 additional_output_names=ort_cffi_artifacts.MODEL_OUTPUTS)
    assert made.eval_outputs[1:] == ("y",)  # MODEL_OUTPUTS: the model's outputs kept next to the loss
    rng = np.random.default_rng(6)
    state = CheckpointState.load_checkpoint(str(made.checkpoint))
    module = Module(str(made.training_model), state, str(made.eval_model))
    optimizer = Optimizer(str(made.optimizer_model), module)
    x, target = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    losses = []
    for _ in range(20):
        loss, _ = module(x, target)
        optimizer.step()
        module.lazy_reset_grad()
        losses.append(float(loss))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("settings", [{"weight_decay": 0.1}, {"betas": (0.8, 0.99), "clip_grad": 0.5}])
def test_an_optimizer_block_with_settings_of_its_own_writes_the_optimizer_model(tmp_path: Path, settings: dict) -> None:
    if "clip_grad" in settings:
        settings = dict(settings, clip_grad=onnxblock.optim.ClipGradNorm(settings["clip_grad"]))
    made = artifacts.generate_artifacts(regression_model(), ["w", "b"], loss=artifacts.LossType.MSELoss,
                                        optimizer=onnxblock.optim.AdamW(**settings), artifact_directory=tmp_path)
    assert made.optimizer_model is not None and any("AdamW" in note for note in made.notes)
    written = onnx.load(str(made.optimizer_model))
    adamw = [n for n in written.graph.node if n.op_type == "AdamWOptimizer"][0]
    attributes = {a.name: helper.get_attribute_value(a) for a in adamw.attribute}
    assert attributes["weight_decay"] == pytest.approx(settings.get("weight_decay", 0.0))
    assert attributes["alpha"] == pytest.approx(settings.get("betas", (0.9,))[0])
    assert ("InplaceClipGradNorm" in [n.op_type for n in written.graph.node]) == ("clip_grad" in settings)
    assert ort_cffi_artifacts.files_intact(tmp_path, ort_cffi_artifacts.read_manifest(tmp_path) or {})
    rng = np.random.default_rng(2)
    losses = _train(tmp_path, [rng.standard_normal((8, 4)).astype(np.float32),
                               rng.standard_normal((8, 3)).astype(np.float32)], steps=20)
    assert losses[-1] < losses[0]


def test_a_pass_through_loss_keeps_a_model_whose_first_output_is_the_loss(tmp_path: Path) -> None:
    """A pattern of published code: a PassThrough subclass as the loss, calling build itself."""
    model = regression_model()
    model.graph.node.append(helper.make_node("ReduceMean", ["y"], ["loss"], keepdims=0))
    model.graph.output.insert(0, helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))

    class NoLoss(onnxblock.blocks.PassThrough):
        def __call__(self, *inputs):  # type: ignore[no-untyped-def]
            return self.build(*inputs)

    made = artifacts.generate_artifacts(model, requires_grad=["w", "b"], frozen_params=[], loss=NoLoss(),
                                        optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path / "block")
    assert made.eval_outputs == ("loss", "y")
    made = artifacts.generate_artifacts(model, requires_grad=["w"], loss=None, optimizer=artifacts.OptimType(1),
                                        artifact_directory=tmp_path, prefix="first_")
    assert made.eval_outputs == ("loss", "y") and made.training_model.name == "first_training_model.onnx"


# --- InferenceSession --------------------------------------------------------------------------------------

@pytest.mark.needs_training_build  # opens an optimizer model, whose operator only the training build registers
def test_the_inference_session_runs_as_onnx_runtimes(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(regression_model(), str(path))
    options = SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(NotImplementedError, match="custom-op"):
        options.register_custom_ops_library("libcustom_op_library.so")
    from ort_cffi import api

    assert "CPUExecutionProvider" in api.get_available_providers()
    session = InferenceSession(str(path), sess_options=options, providers=api.get_available_providers())
    assert [(a.name, a.type, a.shape) for a in session.get_inputs()] == [("x", "tensor(float)", ["batch", 4])]
    assert isinstance(session.get_outputs()[0], NodeArg) and session.get_outputs()[0].name == "y"
    assert session.get_providers() == ["CPUExecutionProvider"] and session.get_session_options() is options
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    model = regression_model()
    w, b = (numpy_helper.to_array(i) for i in model.graph.initializer[:2])
    (y,) = session.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-6)
    (value,) = session.run_with_ort_values(["y"], {"x": OrtValue.ortvalue_from_numpy(x)})
    assert isinstance(value, OrtValue) and np.array_equal(value.numpy(), y)
    with pytest.raises(OrtException, match="unknown input"):
        session.run(None, {"z": x})
    with pytest.raises(OrtException):
        session.run(["not_an_output"], {"x": x})
    with pytest.raises(TypeError):
        session.run_with_ort_values(None, {"x": x})  # type: ignore[dict-item]
    session.close()
    with pytest.raises(ValueError, match="TensorrtExecutionProvider"):
        InferenceSession(str(path), providers=["TensorrtExecutionProvider"])
    with pytest.raises(TypeError, match="sess_options"):
        InferenceSession(str(path), sess_options="fast")
    with InferenceSession(path.read_bytes()) as from_bytes:
        np.testing.assert_array_equal(from_bytes.run(["y"], {"x": x})[0], y)
    with onnxblock.empty_base() as accessor:  # an optimizer model: sequences in, which the facade does not take
        onnxblock.optim.SGD()(([numpy_helper.from_array(np.ones(3, np.float32), "w")], []))
        onnx.save(accessor.model, str(tmp_path / "sgd.onnx"))
    with pytest.raises(OrtException, match="'params' is not a tensor"):
        InferenceSession(str(tmp_path / "sgd.onnx"))
