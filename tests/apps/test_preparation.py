"""Graph preparation inside ``generate_artifacts``: what ONNX Runtime's generator cannot take is prepared
(rewrites.py), recorded in artifacts.json, GeneratedArtifacts and describe(); what it takes stays byte for
byte its own; what cannot be prepared is refused by name, as an input error."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts import (
    ALL_PARAMETERS,
    MODEL_OUTPUTS,
    ArtifactsError,
    ArtifactsInputError,
    describe,
    generate_artifacts,
)
from ort_cffi.artifacts.rewrites import prepare


def mlp(op: str) -> onnx.ModelProto:
    """input [N, 4] -> MatMul W1 -> ``op`` -> MatMul W2 -> logits [N, 3]."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["input", "W1"], ["h"], name="fc1"),
             helper.make_node(op, ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "W2"], ["logits"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "W1"),
                               numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.needs_onnxruntime_generator
def test_an_operator_without_gradient_is_rewritten_and_recorded(tmp_path: Path) -> None:
    """For ONNX Runtime's generator, which has no HardSwish gradient."""
    made = generate_artifacts(mlp("HardSwish"), artifact_directory=tmp_path, generator="onnxruntime",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    record = {"rule": "rewrite", "op": "HardSwish", "count": 1, "nodes": ["act"]}
    assert made.preparation == (record,)
    assert json.loads((tmp_path / "artifacts.json").read_text())["preparation"] == [record]
    assert "prepared:   rewritten (no usable gradient in ONNX Runtime): HardSwish x1 (act)" in describe(made, "m.onnx")


def test_a_model_that_needs_nothing_records_nothing(tmp_path: Path) -> None:
    made = generate_artifacts(mlp("Relu"), artifact_directory=tmp_path / "a",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    plain = generate_artifacts(mlp("Relu"), artifact_directory=tmp_path / "b", prepare=False,
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.preparation == () and json.loads((tmp_path / "a" / "artifacts.json").read_text())["preparation"] == []
    assert not any(line.startswith("prepared:") for line in describe(made, "m.onnx"))
    for key, path in made.files.items():
        assert path.read_bytes() == plain.files[key].read_bytes(), key


def test_ort_cffis_builder_differentiates_what_onnx_runtime_could_not_unprepared(tmp_path: Path) -> None:
    made = generate_artifacts(mlp("HardSwish"), artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.preparation == () and made.versions["generator"] == "ort_cffi"
    model = mlp("Relu")
    model.graph.node[1].CopyFrom(helper.make_node("CumSum", ["h", "axis"], ["a"], name="act"))
    model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "axis"))
    assert generate_artifacts(model, artifact_directory=tmp_path / "cumsum",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS).preparation == ()


def test_an_operator_the_builder_cannot_differentiate_is_refused_naming_it(tmp_path: Path) -> None:
    model = mlp("Relu")
    model.graph.node[1].CopyFrom(helper.make_node("Custom", ["h"], ["a"], name="act", domain="example.custom"))
    model.opset_import.append(helper.make_opsetid("example.custom", 1))
    model.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 5]))
    with pytest.raises(ArtifactsInputError, match="Custom node 'act' .*has no rule for that operator"):
        generate_artifacts(model, artifact_directory=tmp_path / "out", check=False,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert not (tmp_path / "out").exists()


@pytest.mark.needs_onnxruntime_generator
def test_without_preparation_the_runtimes_assertion_is_explained(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsError) as caught:
        generate_artifacts(mlp("HardSwish"), artifact_directory=tmp_path, prepare=False, generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    message = str(caught.value)
    assert "has no gradient in ONNX Runtime" in message and "HardSwish for node act" in message
    assert "onnxruntime::training::GradientDef" not in message  # no C++ signature
    assert "gradient_builder_registry.cc" in message  # where it failed, briefly


@pytest.mark.needs_onnxruntime_generator
def test_an_operator_without_gradient_or_rewrite_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsInputError, match="CumSum node 'act' lies on the gradient path") as caught:
        model = mlp("Relu")
        model.graph.node[1].CopyFrom(helper.make_node("CumSum", ["h", "axis"], ["a"], name="act"))
        model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "axis"))
        generate_artifacts(model, artifact_directory=tmp_path / "out", generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert "freeze the parameters before it" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_option_is_part_of_the_recorded_options(tmp_path: Path) -> None:
    generate_artifacts(mlp("Relu"), artifact_directory=tmp_path, prepare=False,
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert json.loads((tmp_path / "artifacts.json").read_text())["options"]["prepare"] is False


# --- what the cross-entropy loss reads -----------------------------------------------------------------------

def token_model(classes_from: str) -> onnx.ModelProto:
    """input [N, T, 4] -> MatMul W -> logits [N, T, 3] (``classes_from`` "MatMul"), or input [N, 4, H, W] ->
    1x1 Conv K -> logits [N, 3, H, W] ("Conv")."""
    rng = np.random.default_rng(1)
    if classes_from == "MatMul":
        nodes = [helper.make_node("MatMul", ["input", "W"], ["logits"], name="head")]
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", "T", 4])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "T", 3])
        weights = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    else:
        nodes = [helper.make_node("Conv", ["input", "K"], ["logits"], name="head")]
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4, 5, 6])
        y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3, 5, 6])
        weights = numpy_helper.from_array(rng.standard_normal((3, 4, 1, 1)).astype(np.float32), "K")
    model = helper.make_model(helper.make_graph(nodes, "m", [x], [y], [weights]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def labels_shape(made) -> list:
    graph = onnx.load(str(made.training_model)).graph
    dims = next(v for v in graph.input if v.name == "labels").type.tensor_type.shape.dim
    return [d.dim_value or d.dim_param for d in dims]


def test_per_token_scores_are_transposed_and_labels_keep_the_users_shape(tmp_path: Path) -> None:
    made = generate_artifacts(token_model("MatMul"), artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert labels_shape(made) == ["N", "T"]  # ONNX Runtime's own generator makes them [N, T]... of axis 1 classes
    assert made.loss_reading == {"labels": "labels", "scores": "logits", "class_axis": 2, "labels_shape": ["N", "T"],
                                 "tensor": "logits/classes_first"}
    assert [r["rule"] for r in made.preparation] == ["class_axis"]
    plain = generate_artifacts(token_model("MatMul"), artifact_directory=tmp_path / "plain", prepare=False,
                               requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert plain.loss_reading is None  # as ONNX Runtime makes it, its loss takes T for the classes


def test_per_pixel_scores_keep_their_axis_and_labels_lose_it(tmp_path: Path) -> None:
    made = generate_artifacts(token_model("Conv"), artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert labels_shape(made) == ["N", 5, 6]
    assert made.loss_reading["class_axis"] == 1 and made.loss_reading["tensor"] == "logits"
    # Unprepared, the labels take the scores' shape less its last axis, as ONNX Runtime's generator makes them:
    # [N, 3, 5] against scores [N, 3, 5, 6], which no batch fits. The training build loads such artifacts and
    # refuses the first step (its kernel's shape check); on the engine 1.31.1's shape inference refuses the lowered
    # gradient when the session is made. So they are written unchecked: only their labels are looked at.
    assert labels_shape(generate_artifacts(token_model("Conv"), artifact_directory=tmp_path / "p", prepare=False,
                                           requires_grad=ALL_PARAMETERS, loss="cross-entropy", check=False,
                                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)) == ["N", 3, 5]


def test_softmax_probabilities_are_read_as_logits(tmp_path: Path) -> None:
    model = mlp("Relu")
    model.graph.node[2].output[0] = "z"
    model.graph.node.append(helper.make_node("Softmax", ["z"], ["logits"], name="probs", axis=1))
    made = generate_artifacts(model, artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.loss_input == "z" and made.loss_reading["scores"] == "logits"
    assert made.preparation[0]["rule"] == "logits" and "cross-entropy reads its input 'z'" in made.preparation[0]["note"]
    assert any("loss input: Softmax x1 (probs)" in line for line in describe(made, "m.onnx"))


def test_a_classifier_of_ai_onnx_ml_operators_is_refused_naming_it(tmp_path: Path) -> None:
    node = helper.make_node("LinearClassifier", ["input"], ["label", "scores"], domain="ai.onnx.ml", name="linear",
                            classlabels_ints=[0, 1, 2], coefficients=[0.1] * 12, intercepts=[0.0] * 3)
    graph = helper.make_graph([node], "lr", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    with pytest.raises(ArtifactsInputError, match="LinearClassifier node 'linear' computes: operators of the ai.onnx.ml"):
        generate_artifacts(model, artifact_directory=tmp_path, loss_input_names=["scores"],
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)


# --- training-mode exports ------------------------------------------------------------------------------------

def training_mode_model() -> onnx.ModelProto:
    """As torch's TrainingMode.TRAINING writes them: BatchNormalization with training_mode=1 and three
    outputs, Dropout with a true training_mode input."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["X", "K"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn", "rm", "rv"],
                              name="bn", training_mode=1, momentum=0.9),
             helper.make_node("GlobalAveragePool", ["bn"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Dropout", ["f", "ratio", "on"], ["logits", "mask"], name="drop")]
    initializers = [numpy_helper.from_array((rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32), "K"),
                    numpy_helper.from_array(np.linspace(0.9, 1.1, 3).astype(np.float32), "scale"),
                    numpy_helper.from_array(np.linspace(-0.1, 0.1, 3).astype(np.float32), "bias"),
                    numpy_helper.from_array(np.linspace(-0.01, 0.01, 3).astype(np.float32), "mean"),
                    numpy_helper.from_array(np.linspace(0.99, 1.01, 3).astype(np.float32), "var"),
                    numpy_helper.from_array(np.array(0.1, np.float32), "ratio"),
                    numpy_helper.from_array(np.array(True), "on")]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2, 5, 5])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


def test_a_training_mode_export_gets_an_eval_model_that_loads(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsError, match="should be 1 when Training_mode = False"):
        generate_artifacts(training_mode_model(), artifact_directory=tmp_path / "raw", prepare=False,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    made = generate_artifacts(training_mode_model(), artifact_directory=tmp_path / "a",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)  # checked: it loads
    assert [(r["rule"], r["op"], r["nodes"]) for r in made.preparation if r["rule"] == "inference_form"] == [
        ("inference_form", "BatchNormalization", ["bn"])]
    eval_nodes = {n.name: n for n in onnx.load(str(made.eval_model)).graph.node}
    assert list(eval_nodes["bn"].output) == ["bn"]
    assert "training_mode" not in {a.name for a in eval_nodes["bn"].attribute}
    assert eval_nodes["drop"].input[2] == ""  # the generator's own doing
    training_nodes = {n.name: n for n in onnx.load(str(made.training_model)).graph.node}
    assert "drop" in training_nodes and len(training_nodes["drop"].input) == 3  # training keeps its forms


def test_a_constant_read_twice_on_the_path_needs_nothing() -> None:
    """As an LSTM reads one ConstantOfShape as initial_h and initial_c: no gradient flows into it, so the
    builder defines no gradient name for it (the zoo's lstm_text generates unchanged)."""
    from ort_cffi.artifacts.rewrites import prepare

    model = mlp("Relu")
    model.graph.node.insert(0, helper.make_node("Constant", [], ["zeros"], name="zeros",
                                                value=numpy_helper.from_array(np.zeros((1, 5), np.float32))))
    model.graph.node[2].CopyFrom(helper.make_node("Sum", ["h", "zeros", "zeros"], ["a"], name="act"))
    prepared, records = prepare(model)
    assert [(r["rule"], r["op"]) for r in records] == [("rewrite", "Sum")]  # Sum itself, not its reads
    model.graph.node[2].CopyFrom(helper.make_node("Concat", ["h", "zeros", "zeros"], ["a3"], name="act", axis=0))
    model.graph.node.insert(3, helper.make_node("ReduceMean", ["a3"], ["a"], name="mean", axes=[0], keepdims=0))
    assert prepare(model) == (model, [])


def recurrent(op: str, direction: str) -> onnx.ModelProto:
    """tokens as floats [T, N, 3] -> ``op`` (hidden 4, ``direction``) -> Y_h -> Flatten -> MatMul -> logits [N, 2]."""
    rng = np.random.default_rng(1)
    gates = {"GRU": 3, "LSTM": 4}[op]
    directions = 2 if direction == "bidirectional" else 1
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)
               for name, shape in (("W", (directions, gates * 4, 3)), ("R", (directions, gates * 4, 4)),
                                   ("head", (directions * 4, 2)))]
    nodes = [helper.make_node(op, ["x", "W", "R"], ["", "h_n"], name="rnn", hidden_size=4, direction=direction),
             helper.make_node("Transpose", ["h_n"], ["h_t"], perm=[1, 0, 2]),
             helper.make_node("Flatten", ["h_t"], ["h"], axis=1),
             helper.make_node("MatMul", ["h", "head"], ["logits"], name="head")]
    graph = helper.make_graph(nodes, "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, "N", 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.needs_onnxruntime_generator
@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_a_recurrent_layer_the_gradient_cannot_run_backwards_is_refused_before_generation(tmp_path: Path, op: str) -> None:
    """ONNX Runtime 1.19.2's GRU and LSTM gradients run the forward direction only: a bidirectional one made
    artifacts that the runtime then refused at load with its kernel's assertion. ONNX Runtime's generator
    refuses it before generation, naming the node (ort_cffi's builder, the default, trains it: each direction
    as a forward one); a forward one is left to ONNX Runtime, unchanged."""
    with pytest.raises(ArtifactsInputError, match=rf"{op} node 'rnn' lies on the gradient path .* {op} gradient runs "
                                                    r"the forward direction only, and this .* is bidirectional"):
        generate_artifacts(recurrent(op, "bidirectional"), artifact_directory=tmp_path / "bi", generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert not (tmp_path / "bi").exists()
    generate_artifacts(recurrent(op, "bidirectional"), artifact_directory=tmp_path / "native",
                       requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                       optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    forward = recurrent(op, "forward")
    assert prepare(forward)[0] is forward  # no rule applies: what ONNX Runtime does with it is its own


def language_model_head(t: int = 6, vocabulary: int = 11) -> onnx.ModelProto:
    """input [N, T, 4] -> Add(bias, MatMul(x, W)) -> logits [N, T, vocabulary] with T fixed: the head of a
    causal language model as torch writes it (the bias first), where the shape alone cannot tell the axes."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["input", "W"], ["projected"]),
             helper.make_node("Add", ["head.bias", "projected"], ["logits"], name="head")]
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", t, 4])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", t, vocabulary])
    weights = [numpy_helper.from_array(rng.standard_normal((4, vocabulary)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal(vocabulary).astype(np.float32), "head.bias")]
    model = helper.make_model(helper.make_graph(nodes, "m", [x], [y], weights),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_class_axis_is_found_through_either_input_of_an_elementwise_node(tmp_path: Path) -> None:
    made = generate_artifacts(language_model_head(), artifact_directory=tmp_path,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert labels_shape(made) == ["N", 6]
    assert made.loss_reading["class_axis"] == 2


def test_class_axis_says_it_and_is_recorded(tmp_path: Path) -> None:
    made = generate_artifacts(language_model_head(t=6, vocabulary=6), artifact_directory=tmp_path / "a",
                              class_axis=-1,
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert made.loss_reading["class_axis"] == 2 and labels_shape(made) == ["N", 6]
    assert json.loads((tmp_path / "a" / "artifacts.json").read_text())["options"]["class_axis"] == -1
    with pytest.raises(ArtifactsInputError, match="class_axis 0 does not fit 'logits'"):
        generate_artifacts(language_model_head(), artifact_directory=tmp_path / "b", class_axis=0,
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match="for the cross-entropy loss; the loss here is mse"):
        generate_artifacts(language_model_head(), artifact_directory=tmp_path / "c", class_axis=2, loss="mse",
                           requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)


@pytest.mark.needs_onnxruntime_generator
def test_an_lstm_with_peepholes_is_refused_as_its_gradient_ignores_them(tmp_path: Path) -> None:
    """1.19.2's LSTMGrad has no input for the peephole weights: artifacts would train without them (measured
    against finite differences in tests/builder/test_recurrent.py). Both generators refuse it, naming it."""
    model = recurrent("LSTM", "forward")
    model.graph.node[0].input.extend(["", "", "", "", "P"])
    model.graph.initializer.append(numpy_helper.from_array(np.full((1, 12), 0.1, np.float32), "P"))
    with pytest.raises(ArtifactsInputError, match="LSTM node 'rnn' lies on the gradient path .* peephole weights"):
        generate_artifacts(model, artifact_directory=tmp_path / "theirs", generator="onnxruntime",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsError, match="'rnn' has peephole weights"):
        generate_artifacts(model, artifact_directory=tmp_path / "ours",
                           requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                           optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
