"""``Parameter.grad`` on real training models: every zoo model (tests/zoo), control flow, and the shapes that
once made the gradients unreadable (an output with a dim of 128 or more, hundreds of outputs, batch-norm
statistics), checked against central finite differences of the training loss, an oracle that shares no code
with the gradient builder or with the way ``ort_cffi.api`` reads the gradients.

Where the gradients cannot be read, ``Parameter.grad`` raises, saying why: never None for a trained parameter.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np
import onnx
import pytest
from conftest import DIGITS
from onnx import TensorProto, helper, numpy_helper
from test_shape_training import BATCH, CLASSES, branching, looping, scanning
from test_zoo import TRAINABLE, ZOO, ZOO_DIR, generate

from ort_cffi.api import CheckpointState, Module
from ort_cffi.api.gradient_outputs import GRADIENT_OUTPUT_SUFFIX, GradientsUnreadable, with_gradient_outputs
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, generate_artifacts

EPSILON = 1e-3  # float32 losses: the central difference's rounding error is about 1e-7 * loss / EPSILON


def loss_of(module: Module, feeds: Sequence[np.ndarray]) -> float:
    outputs = module(*feeds)
    return float(outputs[0] if isinstance(outputs, tuple) else outputs)


def slope_along(module: Module, state: CheckpointState, feeds: Sequence[np.ndarray], base: Dict[str, np.ndarray],
                direction: Dict[str, np.ndarray], epsilon: float) -> float:
    """The central difference of the training loss along ``direction`` ({parameter: step}), from ``base``."""
    losses = []
    for sign in (1.0, -1.0):
        for name, step in direction.items():
            state.parameters[name].data = (base[name] + sign * epsilon * step).astype(base[name].dtype)
        losses.append(loss_of(module, feeds))
    for name in direction:
        state.parameters[name].data = base[name]
    return (losses[0] - losses[1]) / (2 * epsilon)


def assert_slope(module: Module, state: CheckpointState, feeds: Sequence[np.ndarray], base: Dict[str, np.ndarray],
                 direction: Dict[str, np.ndarray], expected: float, tolerance: float) -> None:
    """The loss's slope along ``direction`` is ``expected`` within ``tolerance`` (relative, plus the central
    difference's rounding) at a step of 1e-3 or of 1e-4. Where ReLU6 or Hardswish follows batch norm (the
    MobileNets), the kinks a step crosses move the difference by a few percent, less as the step shrinks:
    measured along the first convolution's gradient, 9 % at 1e-3 and 4 % at 1e-4 on mobilenet_v2, 2 % and
    1.4 % on mobilenet_v3_small (and 0.2 % at 2e-5), the gradient itself being right; elsewhere under 0.3 %."""
    errors = []
    for step in (EPSILON, EPSILON / 10):
        slope = slope_along(module, state, feeds, base, direction, step)
        errors.append(abs(slope - expected))
        if errors[-1] <= tolerance * abs(expected) + 5e-7 * abs(loss_of(module, feeds)) / step:
            return
    raise AssertionError(f"the loss's slope is {expected:.6g} by Parameter.grad, off by {errors} by central differences")


def check_gradients(module: Module, state: CheckpointState, feeds: Sequence[np.ndarray], each: int = 3) -> None:
    """One training step, then every trainable parameter's ``grad`` read and checked: of its parameter's shape,
    finite; the loss's slope along the whole gradient is the gradient's norm (which holds only when the
    gradient read is the true one, by Cauchy-Schwarz), and so is the slope along each of the ``each``
    parameters with the largest gradients alone (a gradient read under another parameter's name fails it)."""
    loss_of(module, feeds)
    trainable = [name for name, parameter in state.parameters if parameter.requires_grad]
    frozen = [name for name, parameter in state.parameters if not parameter.requires_grad]
    assert trainable
    assert all(state.parameters[name].grad is None for name in frozen)
    base = {name: state.parameters[name].data for name in trainable}
    gradients = {name: state.parameters[name].grad for name in trainable}
    for name, gradient in gradients.items():
        assert isinstance(gradient, np.ndarray) and gradient.shape == base[name].shape, name
        assert gradient.dtype == base[name].dtype and np.isfinite(gradient).all(), name
    wide = {name: gradient.astype(np.float64) for name, gradient in gradients.items()}
    norm = float(np.sqrt(sum(float((g * g).sum()) for g in wide.values())))
    assert norm > 0
    assert_slope(module, state, feeds, base, {name: g / norm for name, g in wide.items()}, norm, 1e-2)
    by_size = sorted((name for name in wide if wide[name].any()), key=lambda name: -float(np.linalg.norm(wide[name])))
    for name in by_size[:each]:
        own = float(np.linalg.norm(wide[name]))
        assert_slope(module, state, feeds, base, {name: wide[name] / own}, own, 5e-2)


@pytest.mark.parametrize("name", TRAINABLE)
def test_parameter_grad_is_the_true_gradient_on_every_zoo_model(name: str, tmp_path: Path) -> None:
    made = generate(name, tmp_path)
    data = np.load(ZOO_DIR / ZOO[name]["dataset"]["file"])
    state = CheckpointState.load_checkpoint(made.checkpoint)
    module = Module(made.training_model, state)
    check_gradients(module, state, [data[f"train_{input_name}"][:8] for input_name in module.input_names()])


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("name", ["gpt2_tiny", "mobilenet_v2"])
def test_parameter_grad_is_the_true_gradient_on_onnx_runtimes_own_artifacts(name: str, tmp_path: Path) -> None:
    """The same accumulators in the artifacts of ONNX Runtime's generator (a vocabulary of 128, and 52
    BatchNormalizations' statistics among hundreds of outputs)."""
    made = generate(name, tmp_path, generator="onnxruntime")
    data = np.load(ZOO_DIR / ZOO[name]["dataset"]["file"])
    state = CheckpointState.load_checkpoint(made.checkpoint)
    module = Module(made.training_model, state)
    check_gradients(module, state, [data[f"train_{input_name}"][:8] for input_name in module.input_names()])


def training_outputs(name: str, tmp_path: Path) -> List[onnx.ValueInfoProto]:
    return list(onnx.load(str(generate(name, tmp_path).training_model), load_external_data=False).graph.output)


def test_the_zoo_holds_the_training_models_that_once_hid_their_gradients(tmp_path: Path) -> None:
    """What made ``Parameter.grad`` fail on real models (their outputs' type and shape decoded as if they were
    names): the zoo keeps such models, so that the test above covers them."""
    gpt2 = training_outputs("gpt2_tiny", tmp_path / "gpt2")
    assert any(d.dim_value >= 128 for o in gpt2 for d in o.type.tensor_type.shape.dim)  # its logits' vocabulary
    mobilenet = training_outputs("mobilenet_v2", tmp_path / "mobilenet")
    assert len(mobilenet) > 200  # the loss, logits, an accumulator flag per parameter, the running statistics
    statistics = [o for o in mobilenet if o.name.endswith("running_var")]
    assert statistics and any(d.dim_value >= 128 for o in statistics for d in o.type.tensor_type.shape.dim)


@pytest.mark.parametrize("build", [branching, looping, scanning], ids=lambda f: f.__name__)
def test_parameter_grad_is_the_true_gradient_through_control_flow(build: Callable, tmp_path: Path) -> None:
    model, feeds = build()
    made = generate_artifacts(model, artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    state = CheckpointState.load_checkpoint(made.checkpoint)
    module = Module(made.training_model, state)
    labels = np.random.default_rng(5).integers(0, CLASSES, BATCH).astype(np.int64)
    given = {**feeds, "labels": labels, "flag": np.array(True)}
    check_gradients(module, state, [given[input_name] for input_name in module.input_names()], each=2)


# --- the edit itself, on training models written here ------------------------------------------------------


def accumulating_model(output_dims: Sequence[int], outputs: int = 1, parameter: str = "w",
                       extra: Sequence[onnx.TensorProto] = ()) -> bytes:
    """A training model as ONNX Runtime's generator writes one: an InPlaceAccumulatorV2 per parameter, and
    ``outputs`` graph outputs of the given dims."""
    buffer = f"{parameter}_grad.accumulation.buffer"
    nodes = [helper.make_node("Identity", [parameter], [f"{parameter}_grad"]),
             helper.make_node("InPlaceAccumulatorV2", [buffer, f"{parameter}_grad", "lazy_reset_grad"],
                              [f"{parameter}_grad.accumulation.out"], domain="com.microsoft")]
    nodes += [helper.make_node("Identity", ["x"], [f"out{i}"]) for i in range(outputs)]
    graph = helper.make_graph(
        nodes, "training",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(output_dims)),
         helper.make_tensor_value_info(parameter, TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info(buffer, TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("lazy_reset_grad", TensorProto.BOOL, [1])],
        [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, list(output_dims)) for i in range(outputs)]
        + [helper.make_tensor_value_info(f"{parameter}_grad.accumulation.out", TensorProto.BOOL, [1])],
        list(extra))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)]).SerializeToString()


@pytest.mark.parametrize("dims", [[127], [128], [255, 3], [2**20, 200], [1, 2**40]], ids=str)
def test_outputs_of_any_shape_leave_the_gradients_readable(dims: List[int]) -> None:
    edited, names, _ = with_gradient_outputs(accumulating_model(dims, outputs=300), {})
    assert names == {"w": "w" + GRADIENT_OUTPUT_SUFFIX}
    model = onnx.load_from_string(edited)
    onnx.checker.check_model(model)
    assert [o.name for o in model.graph.output][-2:] == ["w_grad.accumulation.out", "w" + GRADIENT_OUTPUT_SUFFIX]
    assert list(model.graph.node[1].output) == ["w_grad.accumulation.out", "w" + GRADIENT_OUTPUT_SUFFIX]


def test_names_beyond_ascii_are_read_as_names() -> None:
    edited, names, _ = with_gradient_outputs(accumulating_model([200], parameter="poids_é_重み"), {})
    assert names == {"poids_é_重み": "poids_é_重み" + GRADIENT_OUTPUT_SUFFIX}
    assert onnx.load_from_string(edited).graph.output[-1].name == "poids_é_重み" + GRADIENT_OUTPUT_SUFFIX


def test_a_name_that_is_not_utf8_elsewhere_leaves_the_gradients_readable() -> None:
    """proto2 strings are bytes on the wire: a value name that is no UTF-8 (spliced in here, of the same length)
    is compared as stored, and stops nothing."""
    model = accumulating_model([130], outputs=2)
    assert model.count(b"out1") == 2  # the node's output and the graph's
    edited, names, _ = with_gradient_outputs(model.replace(b"out1", b"\xff\xfeo1"), {})
    assert names == {"w": "w" + GRADIENT_OUTPUT_SUFFIX} and edited.count(b"\xff\xfeo1") == 2


def test_a_training_model_with_external_data_gives_its_gradients(tmp_path: Path) -> None:
    """Initializers whose data is in another file (the builder writes a training model past 2 GB so) are read
    relative to the model's folder: the copy with the gradient outputs is written beside it, then removed."""
    shutil.copytree(DIGITS, tmp_path / "inline")
    shutil.copytree(DIGITS, tmp_path / "external")
    model = onnx.load(str(tmp_path / "external" / "training_model.onnx"))
    for initializer in model.graph.initializer:  # the float ones as raw bytes, which onnx moves to the data file
        if initializer.data_type == TensorProto.FLOAT:  # (the runtime reads the integer ones' values as it loads)
            initializer.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(initializer), initializer.name))
    onnx.save(model, str(tmp_path / "external" / "training_model.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="training_model.onnx.data", size_threshold=0)
    saved = onnx.load(str(tmp_path / "external" / "training_model.onnx"), load_external_data=False)
    assert any(i.data_location == TensorProto.EXTERNAL for i in saved.graph.initializer)
    with np.load(DIGITS / "digits.npz") as digits:
        x, labels = digits["train_input"][:16], digits["train_labels"][:16]
    gradients = []
    for folder in (tmp_path / "inline", tmp_path / "external"):
        state = CheckpointState.load_checkpoint(folder / "checkpoint")
        module = Module(folder / "training_model.onnx", state)
        module(x, labels)
        gradients.append({name: parameter.grad for name, parameter in state.parameters})
        del module, state
    assert gradients[0].keys() == gradients[1].keys() and all(
        np.array_equal(gradients[0][name], gradients[1][name]) for name in gradients[0])
    assert sorted(p.name for p in (tmp_path / "external").iterdir()) == sorted(
        p.name for p in DIGITS.iterdir()) + ["training_model.onnx.data"]  # the copy is gone


def test_a_model_whose_gradients_cannot_be_offered_says_why() -> None:
    with pytest.raises(GradientsUnreadable, match="graph fields"):
        with_gradient_outputs(b"", {})
    with pytest.raises(GradientsUnreadable, match="not a protobuf message"):
        with_gradient_outputs(b"\x3a\xff", {})
    taken = helper.make_tensor("w" + GRADIENT_OUTPUT_SUFFIX, TensorProto.FLOAT, [1], [0.0])
    with pytest.raises(GradientsUnreadable, match="is taken"):  # an initializer's name, not only an output's
        with_gradient_outputs(accumulating_model([130], extra=[taken]), {})
    external = helper.make_tensor("far", TensorProto.FLOAT, [1], [0.0])
    external.data_location = TensorProto.EXTERNAL  # not refused: the copy must lie beside the model
    assert with_gradient_outputs(accumulating_model([130], extra=[external]), {}).beside_original
    plain = onnx.load_from_string(accumulating_model([130]))
    del plain.graph.node[1]
    with pytest.raises(GradientsUnreadable, match="no InPlaceAccumulatorV2 node"):
        with_gradient_outputs(plain.SerializeToString(), {})
