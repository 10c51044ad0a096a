"""Parameters that torch's default exporter (dynamo=True) renamed, chosen by their torch names: the zoo's
dynamo exports (tests/zoo, scripts/export_zoo.py) read with ort_cffi.artifacts.module_names, selected with
requires_grad / frozen_params, ort-cffi-artifacts and ort-cffi-train, and listed with both names."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import onnx
import pytest
from _training_run import train_artifacts
from conftest import ROOT

from ort_cffi import OrtEnvironment
from ort_cffi.artifacts import ALL_PARAMETERS, MODEL_OUTPUTS, ArtifactsInputError, generate_artifacts, read_manifest
from ort_cffi.artifacts.exported_parameters import retie_broadcast_copies, untie_merged
from ort_cffi.artifacts.module_names import module_names, signature_targets
from ort_cffi.artifacts.options import GENERATORS, ONNX_RUNTIME
from ort_cffi.cli import artifacts as artifacts_cli
from ort_cffi.cli import train as train_cli

ZOO_DIR = ROOT / "tests" / "zoo"
ZOO: Dict[str, Any] = json.loads((ZOO_DIR / "zoo.json").read_text())["models"]
TRANSFORMER = ZOO_DIR / "transformer_dynamo.onnx"
LSTM = ZOO_DIR / "bilstm_tagger_dynamo.onnx"


def load(path: Path) -> onnx.ModelProto:
    return onnx.load(str(path))


def renamed_targets(model: onnx.ModelProto) -> "set[str]":
    """The exporter's parameters (its graph signature) that no initializer is named after."""
    own = {i.name for i in model.graph.initializer}
    return {t for t in signature_targets(model).values() if t not in own}


def test_every_renamed_parameter_of_the_transformer_gets_its_torch_name() -> None:
    model = load(TRANSFORMER)
    names = module_names(onnx, model)
    # one tensor per renamed parameter: the attention's input projection and both Linear weights of each layer
    assert sorted(names.values()) == sorted(renamed_targets(model))
    assert {t.rsplit(".", 1)[0] for t in names.values()} >= {"encoder.layers.0.linear1", "encoder.layers.1.linear2"}
    shapes = {names[i.name]: list(i.dims) for i in model.graph.initializer if i.name in names}
    assert shapes["encoder.layers.0.linear1.weight"] == [32, 64]  # torch's [64, 32], transposed for MatMul
    assert shapes["encoder.layers.1.self_attn.in_proj_weight"] == [32, 96]
    assert not set(names) & set(signature_targets(model).values())  # only what was renamed


def test_a_tensor_made_from_several_parameters_is_named_by_its_module_and_input() -> None:
    """The LSTM's eight parameters (both directions) become the ONNX LSTM's W, R and B."""
    model = load(LSTM)
    names = module_names(onnx, model)
    lstm = next(n for n in model.graph.node if n.op_type == "LSTM")
    assert {names[lstm.input[1]], names[lstm.input[2]], names[lstm.input[3]]} == {"lstm.W", "lstm.R", "lstm.B"}
    assert "fc.weight" in names.values()


def test_torchscript_exports_have_no_torch_names() -> None:
    assert module_names(onnx, load(ZOO_DIR / "bilstm_tagger.onnx")) == {}
    assert module_names(onnx, load(ZOO_DIR / "bert_tiny.onnx")) == {}


def test_layers_chosen_by_module_path_are_listed_with_both_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = artifacts_cli.main([str(TRANSFORMER), "--out", str(tmp_path), "--loss-input", "logits",
                               "--trainable", "encoder.layers.1.*", "classifier.*"])
    out = capsys.readouterr().out
    assert code == 0, out
    model = load(TRANSFORMER)
    names = module_names(onnx, model)
    wanted = {t for t in signature_targets(model).values() if t.startswith(("encoder.layers.1.", "classifier."))}
    manifest = read_manifest(tmp_path)
    chosen = {manifest["module_names"].get(n, n) for n in manifest["trainable"]}
    assert chosen == wanted  # every parameter of layer 1 and the classifier, nothing else
    linear1 = next(n for n, t in names.items() if t == "encoder.layers.1.linear1.weight")
    assert manifest["module_names"][linear1] == "encoder.layers.1.linear1.weight"
    in_proj = next(n for n, t in names.items() if t == "encoder.layers.1.self_attn.in_proj_weight")
    listed = rf"^ {{12}}{in_proj} \(encoder\.layers\.1\.self_attn\.in_proj_weight\) +float32 \[32, 96\] +3,072$"
    assert re.search(listed, out, re.M), out
    # The table of trained parameters (one line each, with type, shape and size) holds no parameter of layer 0;
    # the constants line, which names every tensor left frozen, does.
    table = [line for line in out.splitlines() if re.search(r"float32 \[[0-9, ]*\] +[0-9,]+$", line)]
    assert any("classifier.weight" in line for line in table), out
    assert not any("encoder.layers.0" in line for line in table), out
    assert "encoder.layers.0" in out  # named among what stays frozen


def test_a_run_trains_only_the_parameters_chosen_by_module_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    code = train_cli.main(["--model", str(TRANSFORMER), "--data", str(ZOO_DIR / "transformer_dynamo.npz"),
                           "--loss-input", "logits", "--trainable", "encoder.layers.1.linear1.weight", "classifier.*",
                           "--epochs", "1", "--lr", "0.003", "--out", str(out), "--no-plot", "--no-progress"])
    stdout = capsys.readouterr().out
    assert code == 0, stdout
    model = load(TRANSFORMER)
    initial = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    linear1 = next(n for n, t in module_names(onnx, model).items() if t == "encoder.layers.1.linear1.weight")
    chosen = [linear1, "classifier.weight", "classifier.bias"]
    assert read_manifest(out / "artifacts")["trainable"] == sorted(chosen, key=list(initial).index)
    with OrtEnvironment.getEnvironment().createTrainingSession(
            str(out / "best_checkpoint"), str(out / "artifacts" / "training_model.onnx")) as session:
        state = session.getCheckpointState()
        assert session.getParametersSize(True) == sum(initial[n].size for n in chosen)
        for name in chosen:  # each trained tensor moved
            assert not np.allclose(state.getParameter(name), initial[name]), name


def test_a_recurrent_layer_is_frozen_by_its_module_path(tmp_path: Path) -> None:
    made = generate_artifacts(LSTM, requires_grad=["fc.*"], frozen_params=["lstm.*"], loss_input_names=["logits"],
                              artifact_directory=tmp_path,
                              loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert sorted(p.module_name or p.name for p in made.trainable) == ["fc.bias", "fc.weight"]
    assert sorted(p.module_name for p in made.frozen) == ["lstm.B", "lstm.R", "lstm.W"]
    assert all(p.name != p.module_name for p in made.frozen)


def test_a_torch_name_that_no_tensor_carries_is_refused_listing_both_names(tmp_path: Path) -> None:
    with pytest.raises(ArtifactsInputError, match=r"requires_grad names 'lstm.weight_ih_l0', but the model has no "
                                                  r"initializer of that name .*\(lstm\.W\)"):
        generate_artifacts(LSTM, requires_grad=["lstm.weight_ih_l0"], loss_input_names=["logits"],
                           artifact_directory=tmp_path / "out",
                           loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    with pytest.raises(ArtifactsInputError, match=r"pattern 'lstm\.\*' matches no initializer"):
        generate_artifacts(ZOO_DIR / "bilstm_tagger.onnx", requires_grad=["lstm.*"], loss_input_names=["logits"],
                           artifact_directory=tmp_path / "ts",
                           loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)


@pytest.mark.parametrize("name", ["einsum_attention", "atan_cumsum", "transformer"])
def test_by_default_the_exporters_numbers_stay_constants(name: str, tmp_path: Path) -> None:
    """torch's default exporter writes numbers as initializers (attention's scale, the divisor x.shape[1])
    where the TorchScript exporter writes Constant nodes: by default they are not trained, so both exports
    of a model train the same parameters, those of the torch module."""
    dynamo = ZOO[f"{name}_dynamo"]
    made = generate_artifacts(ZOO_DIR / dynamo["file"], loss=dynamo["loss"], loss_input_names=[dynamo["loss_reads"]],
                              artifact_directory=tmp_path / "dynamo",
                              requires_grad=ALL_PARAMETERS, optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    model = load(ZOO_DIR / dynamo["file"])
    assert {p.module_name or p.name for p in made.trainable} == set(signature_targets(model).values())
    assert [(p.size, p.module_name) for p in made.constants] == [(1, None)]  # the one number, kept as it is
    if name in ZOO:  # the TorchScript export of the same module trains as many parameters
        script = ZOO[name]
        other = generate_artifacts(ZOO_DIR / script["file"], loss=script["loss"], loss_input_names=[script["loss_reads"]],
                                   artifact_directory=tmp_path / "script",
                                   requires_grad=ALL_PARAMETERS, optimizer="adamw",
                                   additional_output_names=MODEL_OUTPUTS)
        assert made.trainable_parameters == other.trainable_parameters == script["float_parameters"]
    named = generate_artifacts(ZOO_DIR / dynamo["file"], requires_grad=[made.constants[0].name],
                               loss=dynamo["loss"], loss_input_names=[dynamo["loss_reads"]],
                               artifact_directory=tmp_path / "named",
                               optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert [p.name for p in named.trainable] == [made.constants[0].name]  # a pattern may still choose it


def _scalar_model(path: Path, producer: str, scalars: Dict[str, float]) -> Path:
    """x [N, 8] -> Gemm -> tanh-approximated GELU whose numbers are rank-0 initializers (as tf2onnx writes
    them: 0.5, 0.044715, sqrt(2/pi), 1 and the Pow exponent 3) -> times ``scale`` -> Gemm -> logits."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    weights = {"w1": rng.normal(0, 0.5, (16, 8)), "b1": rng.normal(0, 0.1, 16), "w2": rng.normal(0, 0.3, (4, 16))}
    numbers = {"half": 0.5, "cubic": 0.044715, "root": float(np.sqrt(2 / np.pi)), "one": 1.0, "three": 3.0, **scalars}
    n = helper.make_node
    graph = helper.make_graph(
        [n("Gemm", ["x", "w1", "b1"], ["h"], transB=1), n("Pow", ["h", "three"], ["h3"]), n("Mul", ["h3", "cubic"], ["c"]),
         n("Add", ["h", "c"], ["inner"]), n("Mul", ["inner", "root"], ["t_in"]), n("Tanh", ["t_in"], ["t"]),
         n("Add", ["t", "one"], ["u"]), n("Mul", ["h", "half"], ["hh"]), n("Mul", ["hh", "u"], ["g"]),
         n("Mul", ["g", list(scalars)[0]], ["gs"]), n("Gemm", ["gs", "w2"], ["logits"], transB=1)],
        "scalars", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in {**weights, **numbers}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=producer)
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_other_exporters_numbers_stay_constants_and_train_without_nan(tmp_path: Path) -> None:
    """tf2onnx writes a model's numbers as rank-0 initializers. Trained, GELU's Pow exponent got the gradient
    x^3 ln x, NaN at the first negative x: a Keras transformer's loss went NaN after one step."""
    path = _scalar_model(tmp_path / "tf.onnx", "tf2onnx", {"ln_epsilon": 1.0})
    made = generate_artifacts(path, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert sorted(p.name for p in made.trainable) == ["b1", "w1", "w2"]
    assert sorted(p.name for p in made.constants) == ["cubic", "half", "ln_epsilon", "one", "root", "three"]
    rng = np.random.default_rng(4)
    x = (2 * rng.normal(size=(16, 8))).astype(np.float32)
    feeds = {"x": x, "labels": np.argmax(x[:, :4], axis=1).astype(np.int64)}
    losses = train_artifacts(made, feeds, 20, learning_rate=0.01).losses
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    named = generate_artifacts(path, requires_grad=["w*", "ln_epsilon"], artifact_directory=tmp_path / "named",
                               loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert sorted(p.name for p in named.trainable) == ["ln_epsilon", "w1", "w2"]  # a pattern may still choose one


def test_torchscripts_rank_0_parameters_still_train(tmp_path: Path) -> None:
    """The TorchScript exporter writes numbers as Constant nodes, and names what its constant folding makes
    onnx::...: a rank-0 initializer named otherwise is a parameter (nn.Parameter(torch.tensor(1.0)))."""
    path = _scalar_model(tmp_path / "ts.onnx", "pytorch", {"logit_scale": 1.5, "onnx::Mul_7": 1.0})
    made = generate_artifacts(path, artifact_directory=tmp_path / "out",
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy",
                              optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
    assert "logit_scale" in {p.name for p in made.trainable}
    assert "onnx::Mul_7" in {p.name for p in made.constants}


def two_layer_norms(merged: bool) -> onnx.ModelProto:
    """X [N, 4] -> fc1 -> LayerNorm n1 -> fc2 -> LayerNorm n2 -> head -> logits [N, 3], fresh LayerNorms (scale
    ones, bias zeros), with the metadata torch's default exporter writes. Where ``merged``, n2 reads n1's
    scale and bias, as that exporter writes a fresh model: it merges initializers of equal values."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    values = {"fc1.weight": rng.standard_normal((4, 8)), "n1.weight": np.ones(8), "n1.bias": np.zeros(8),
              "fc2.weight": rng.standard_normal((8, 8)), "n2.weight": np.ones(8), "n2.bias": np.zeros(8),
              "head.weight": rng.standard_normal((8, 3))}
    own = {"n2.weight": "n1.weight", "n2.bias": "n1.bias"} if merged else {}

    def layer_norm(x: str, module: str, out: str) -> onnx.NodeProto:
        node = helper.make_node("LayerNormalization", [x, own.get(f"{module}.weight", f"{module}.weight"),
                                                       own.get(f"{module}.bias", f"{module}.bias")], [out],
                                name=f"node_{out}", axis=-1, epsilon=1e-5)
        fx = (f"%{out} : [num_users=1] = call_function[target=torch.ops.aten.layer_norm.default](args = "
              f"(%{x}, [8], %p_{module}_weight, %p_{module}_bias, 1e-05, False), kwargs = {{}})")
        for key, value in (("pkg.torch.onnx.fx_node", fx), ("pkg.torch.onnx.name_scopes", f"['', '{module}', '{out}']")):
            node.metadata_props.add(key=key, value=value)
        return node

    nodes = [helper.make_node("MatMul", ["X", "fc1.weight"], ["h1"], name="node_fc1"), layer_norm("h1", "n1", "ln1"),
             helper.make_node("MatMul", ["ln1", "fc2.weight"], ["h2"], name="node_fc2"), layer_norm("h2", "n2", "ln2"),
             helper.make_node("MatMul", ["ln2", "head.weight"], ["logits"], name="node_head")]
    graph = helper.make_graph(nodes, "two_layer_norms", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in values.items() if k not in own])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch",
                              producer_version="2.13.0")
    model.ir_version = 8
    signature = "\n".join(f"p_{name.replace('.', '_')}: PARAMETER target='{name}'" for name in values)
    model.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature", value=signature)
    return model


def test_parameters_the_exporter_merged_are_apart_again() -> None:
    model = two_layer_norms(merged=True)
    records = untie_merged(onnx, model)
    ln2 = next(n for n in model.graph.node if n.name == "node_ln2")
    assert list(ln2.input[1:]) == ["n2.weight", "n2.bias"]
    assert list(next(n for n in model.graph.node if n.name == "node_ln1").input[1:]) == ["n1.weight", "n1.bias"]
    values = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(values["n2.weight"], np.ones(8, np.float32))
    assert records[0]["rule"] == "merged_parameters" and records[0]["nodes"] == ["n2.bias", "n2.weight"]
    assert untie_merged(onnx, two_layer_norms(merged=False)) == []  # nothing merged: nothing changes


def saved(model: onnx.ModelProto, folder: Path, external: bool) -> Any:
    """``model`` itself, or saved with its weights in ``<file>.data``, as torch's default exporter saves (it keeps
    only the smallest tensors, such as a Split's sizes, in the graph)."""
    if not external:
        return model
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=64)
    return folder / "model.onnx"


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
@pytest.mark.parametrize("generator", [
    pytest.param(g, marks=[pytest.mark.needs_onnxruntime_generator] if g == ONNX_RUNTIME else []) for g in GENERATORS])
def test_a_model_whose_layer_norms_the_exporter_merged_trains_as_the_module(tmp_path: Path, generator: str,
                                                                           external: bool) -> None:
    """A fresh model's LayerNorms of one width share one scale and one bias in the file torch's default exporter
    writes. They trained as one shared pair; each layer now trains its own, with the losses of the model as
    the module had it (the same graph with n2's own parameters). That exporter saves the weights in a file of
    their own, which ort_cffi's builder sets aside as it loads the model: the copies' data come with them
    (the first version wrote them without, and the checkpoint writer refused them)."""
    env = OrtEnvironment.getEnvironment()
    rng = np.random.default_rng(5)
    batch = {"X": rng.standard_normal((16, 4)).astype(np.float32), "labels": rng.integers(0, 3, 16).astype(np.int64)}
    losses, trained = {}, {}
    for merged in (True, False):
        made = generate_artifacts(saved(two_layer_norms(merged), tmp_path / f"model_{merged}", external),
                                  artifact_directory=tmp_path / str(merged),
                                  loss_input_names=["logits"], generator=generator, requires_grad=ALL_PARAMETERS,
                                  loss="cross-entropy", optimizer="adamw", additional_output_names=MODEL_OUTPUTS)
        with env.createTrainingSession(str(made.checkpoint), str(made.training_model), str(made.eval_model),
                                       str(made.optimizer_model)) as session:
            losses[merged] = []
            for _ in range(5):
                with session.trainStep(batch) as result:
                    losses[merged].append(float(result.get(0).getValue()))
                session.optimizerStep()
                session.lazyResetGrad()
            state = session.getCheckpointState()
            trained[merged] = {name: state.getParameter(name) for name in ("n1.weight", "n2.weight")}
        if merged:
            assert any(r["rule"] == "merged_parameters" for r in read_manifest(made.folder)["preparation"])
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)
    assert not np.allclose(trained[True]["n1.weight"], trained[True]["n2.weight"])  # apart, as the module's
    for name in ("n1.weight", "n2.weight"):
        np.testing.assert_allclose(trained[True][name], trained[False][name], rtol=1e-6)


def _with_metadata(node: onnx.NodeProto, fx_node: str, scopes: str) -> onnx.NodeProto:
    node.metadata_props.add(key="pkg.torch.onnx.fx_node", value=fx_node)
    node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=scopes)
    return node


def _exported(nodes: List[onnx.NodeProto], initializers: Dict[str, np.ndarray], inputs: List[Any], parameters: List[str],
              outputs: List[Any]) -> onnx.ModelProto:
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, "exported", inputs, outputs,
                              [numpy_helper.from_array(v.astype(v.dtype), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch",
                              producer_version="2.13.0")
    model.ir_version = 8
    signature = "\n".join(f"p_{name.replace('.', '_')}: PARAMETER target='{name}'" for name in parameters)
    model.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature", value=signature)
    return model


def cross_attention_bias(merged: bool) -> onnx.ModelProto:
    """X [N, 8] through two attention-like projections with packed biases [16], fresh (zeros): ``self.in_proj_bias``
    read by an Add with the exporter's metadata, ``cross.in_proj_bias`` split in two by a Split the exporter
    writes without metadata (as for nn.MultiheadAttention's cross-attention), its halves read by Adds of module
    ``cross``. Where ``merged``, that Split reads ``self.in_proj_bias``: the exporter merged the two zeros."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)
    values = {"self.w": 0.3 * rng.standard_normal((8, 16)).astype(np.float32),
              "self.in_proj_bias": np.zeros(16, np.float32), "cross.w": 0.3 * rng.standard_normal((16, 16)).astype(np.float32),
              "cross.in_proj_bias": np.zeros(16, np.float32), "head.w": 0.3 * rng.standard_normal((8, 3)).astype(np.float32),
              "halves": np.array([8, 8], np.int64)}
    bias = "self.in_proj_bias" if merged else "cross.in_proj_bias"
    linear = "%{} : [num_users=1] = call_function[target=torch.ops.aten.linear.default](args = (%{}, %{}, %{}), kwargs = {{}})"
    nodes = [
        helper.make_node("MatMul", ["X", "self.w"], ["s"]),
        _with_metadata(helper.make_node("Add", ["s", "self.in_proj_bias"], ["s_b"]),
                       linear.format("linear", "x", "p_self_w", "p_self_in_proj_bias"), "['', 'self', 'linear']"),
        helper.make_node("MatMul", ["s_b", "cross.w"], ["c"]),
        helper.make_node("Split", [bias, "halves"], ["b_q", "b_kv"], axis=0),
        helper.make_node("Split", ["c", "halves"], ["c_q", "c_kv"], axis=1),
        _with_metadata(helper.make_node("Add", ["c_q", "b_q"], ["q"]),
                       linear.format("linear_1", "c", "getitem", "getitem_2"), "['', 'cross', 'linear_1']"),
        _with_metadata(helper.make_node("Add", ["c_kv", "b_kv"], ["kv"]),
                       linear.format("linear_2", "c", "getitem_1", "getitem_3"), "['', 'cross', 'linear_2']"),
        helper.make_node("Mul", ["q", "kv"], ["h"]),
        helper.make_node("MatMul", ["h", "head.w"], ["logits"]),
    ]
    kept = {k: v for k, v in values.items() if merged is False or k != "cross.in_proj_bias"}
    return _exported(nodes, kept, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 8])],
                     [k for k in values if k != "halves"], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])


def test_a_split_without_metadata_is_placed_by_its_readers() -> None:
    model = cross_attention_bias(merged=True)
    records = untie_merged(onnx, model)
    split = next(n for n in model.graph.node if n.op_type == "Split" and n.output[0] == "b_q")
    assert split.input[0] == "cross.in_proj_bias" and records[0]["nodes"] == ["cross.in_proj_bias"]
    add = next(n for n in model.graph.node if n.output[0] == "s_b")
    assert add.input[1] == "self.in_proj_bias"  # its own stays


def both_forms(tmp_path: Path, model_of: Any, batch: Dict[str, np.ndarray], steps: int, learning_rate: float,
               external: bool = False) -> Dict[bool, Any]:
    """Artifacts of ``model_of(True)`` (the file as the exporter writes it) and ``model_of(False)`` (the module
    written as it is), each trained ``steps`` SGD steps on ``batch``: {form: (artifacts, run)}. Every trainable
    tensor of both moved (equal losses would also hold where neither trained)."""
    done = {}
    for form in (True, False):
        made = generate_artifacts(saved(model_of(form), tmp_path / f"model_{form}", external),
                                  artifact_directory=tmp_path / str(form), loss_input_names=["logits"],
                                  requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="sgd")
        run = train_artifacts(made, batch, steps, learning_rate=learning_rate)
        assert all(run.moved), (form, run.moved)
        done[form] = (made, run)
    return done


def _repaired(made: Any, rule: str, nodes: List[str]) -> bool:
    return any(r["rule"] == rule and r["nodes"] == nodes for r in read_manifest(made.folder)["preparation"])


def test_a_cross_attention_bias_the_exporter_merged_trains_as_the_module(tmp_path: Path) -> None:
    """Trained as written, the cross-attention's packed bias was the self-attention's: one parameter with the
    gradients of both summed (a decoder layer's losses parted from the TorchScript export's at the second
    step). Each now trains its own: the losses of the model with both biases apart."""
    rng = np.random.default_rng(2)
    batch = {"X": rng.standard_normal((12, 8)).astype(np.float32), "labels": rng.integers(0, 3, 12).astype(np.int64)}
    done = both_forms(tmp_path, cross_attention_bias, batch, 6, 0.05, external=True)  # both biases move
    for made, _ in done.values():
        assert {p.name for p in made.trainable} >= {"self.in_proj_bias", "cross.in_proj_bias"}
    losses = {merged: run.losses for merged, (_, run) in done.items()}
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)
    assert losses[True][-1] < losses[True][0]


def tied_head(folded: bool) -> onnx.ModelProto:
    """ids [N] -> an embedding (Gather) -> a head tied to it (MatMul by its transpose) -> logits [N, V]. With
    ``folded``, as torch's default exporter writes it: the head reads ``val_7``, the weight transposed and
    folded into an initializer of its own, while the embedding reads ``head.weight``; else the head reads a
    Transpose of that one parameter."""
    from onnx import TensorProto, helper

    weight = np.random.default_rng(4).standard_normal((10, 6)).astype(np.float32)
    embedding = "%embedding : [num_users=1] = call_function[target=torch.ops.aten.embedding.default](args = (%p_head_weight, %ids), kwargs = {})"
    linear = "%linear : [num_users=1] = call_function[target=torch.ops.aten.linear.default](args = (%embedding, %p_head_weight), kwargs = {})"
    nodes = [_with_metadata(helper.make_node("Gather", ["head.weight", "ids"], ["x"]), embedding, "['', 'emb', 'embedding']")]
    initializers = {"head.weight": weight}
    if folded:
        initializers["val_7"] = np.ascontiguousarray(weight.T)
    else:
        nodes.append(helper.make_node("Transpose", ["head.weight"], ["val_7"], perm=[1, 0]))
    nodes.append(_with_metadata(helper.make_node("MatMul", ["x", "val_7"], ["logits"]), linear, "['', 'head', 'linear']"))
    return _exported(nodes, initializers, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                     ["emb.weight", "head.weight"], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_a_head_tied_to_its_embedding_stays_tied(tmp_path: Path, external: bool) -> None:
    """torch's default exporter folds the tied head's transposed weight into an initializer of its own: trained
    as written, head and embedding parted after the first step, each with its own part of the gradient. The
    copy is computed from the parameter again: one parameter, the losses of the model written tied."""
    rng = np.random.default_rng(8)
    batch = {"ids": rng.integers(0, 10, 16).astype(np.int64), "labels": rng.integers(0, 10, 16).astype(np.int64)}
    done = both_forms(tmp_path, tied_head, batch, 6, 0.5, external)
    for made, _ in done.values():
        assert [p.name for p in made.trainable] == ["head.weight"]
    assert _repaired(done[True][0], "tied_parameters", ["val_7"])
    losses = {folded: run.losses for folded, (_, run) in done.items()}
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)
    assert losses[True][-1] < losses[True][0]


def linear_without_its_bias(dropped: bool) -> onnx.ModelProto:
    """X [N, 6] -> Gemm (an nn.Linear of 4 outputs whose bias is zeros) -> Relu -> a head -> logits [N, 3]. With
    ``dropped``, as torch's default exporter writes a fresh attention's out_proj: the Gemm without its bias,
    which no initializer holds; its torch operation read ``fc.bias`` all the same."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(6)
    values = {"fc.weight": rng.standard_normal((4, 6)).astype(np.float32), "fc.bias": np.zeros(4, np.float32),
              "head.weight": rng.standard_normal((3, 4)).astype(np.float32)}
    linear = "%{} : [num_users=1] = call_function[target=torch.ops.aten.linear.default](args = (%{}, %p_{}_weight{}), kwargs = {{}})"
    fc = helper.make_node("Gemm", ["X", "fc.weight"] + ([] if dropped else ["fc.bias"]), ["h"], transB=1)
    nodes = [_with_metadata(fc, linear.format("linear", "x", "fc", ", %p_fc_bias"), "['', 'fc', 'linear']"),
             helper.make_node("Relu", ["h"], ["r"]),
             _with_metadata(helper.make_node("Gemm", ["r", "head.weight"], ["logits"], transB=1),
                            linear.format("linear_1", "relu", "head", ""), "['', 'head', 'linear_1']")]
    kept = {k: v for k, v in values.items() if not (dropped and k == "fc.bias")}
    return _exported(nodes, kept, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 6])], list(values),
                     [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])


def test_a_bias_of_zeros_the_exporter_dropped_trains_again(tmp_path: Path) -> None:
    """The module's fc.bias was in no file, so training left it at zero where torch trains it. It comes back as
    zeros under its torch name, and the model trains as the one written with it."""
    rng = np.random.default_rng(9)
    batch = {"X": rng.standard_normal((10, 6)).astype(np.float32), "labels": rng.integers(0, 3, 10).astype(np.int64)}
    done = both_forms(tmp_path, linear_without_its_bias, batch, 5, 0.1)  # fc.bias moves
    for made, _ in done.values():
        assert sorted(p.name for p in made.trainable) == ["fc.bias", "fc.weight", "head.weight"]
        assert not made.left_out
    losses = {dropped: run.losses for dropped, (_, run) in done.items()}
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)


def test_a_parameter_dropped_with_its_operation_is_said_not_trained(tmp_path: Path) -> None:
    """torch 2.13's exporter (onnxscript 0.7's optimizer) drops a training-mode BatchNorm that follows a Conv,
    its scale and bias with it: the file computes without them. Generation says so, by the torch names."""
    model = linear_without_its_bias(dropped=False)
    fx = ("%batch_norm : [num_users=1] = call_function[target=torch.ops.aten._native_batch_norm_legit_functional"
          ".default](args = (%linear, %p_bn_weight, %p_bn_bias, %b_bn_running_mean, %b_bn_running_var, True, 0.1, "
          "1e-05), kwargs = {})")
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    _with_metadata(relu, fx, "['', 'bn', 'batch_norm']")
    signature = next(p for p in model.metadata_props if p.key == "pkg.torch.export.ExportedProgram.graph_signature")
    signature.value += "\np_bn_weight: PARAMETER target='bn.weight'\np_bn_bias: PARAMETER target='bn.bias'"
    made = generate_artifacts(model, artifact_directory=tmp_path, loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="sgd")
    assert sorted(made.left_out) == ["bn.bias", "bn.weight"]
    assert "dropped it" in made.left_out["bn.weight"] and "optimize=False" in made.left_out["bn.weight"]


def bias_folded_into_a_constant(folded: bool) -> onnx.ModelProto:
    """X [3, 4] and Y [3, 5] -> X @ w1 + (b broadcast to [3, 4]) + Y @ w2 + b -> logits [3, 4]: a cell's first
    step from a zero state, where ``0 @ W_hh.T + b_hh`` is the bias broadcast over the batch. With ``folded``,
    as torch's default exporter writes it with a static batch: that broadcast is a constant of its own."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(12)
    values = {"w1": 0.5 * rng.standard_normal((4, 4)).astype(np.float32),
              "w2": 0.5 * rng.standard_normal((5, 4)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32)}
    initializers = dict(values)
    if folded:
        initializers["linear"] = np.ascontiguousarray(np.broadcast_to(values["b"], (3, 4)))
    nodes = [helper.make_node("MatMul", ["X", "w1"], ["x1"]),
             helper.make_node("Add", ["x1", "linear" if folded else "b"], ["first"]),
             helper.make_node("MatMul", ["Y", "w2"], ["y2"]),
             helper.make_node("Add", ["y2", "b"], ["second"]),
             helper.make_node("Add", ["first", "second"], ["logits"])]
    return _exported(nodes, initializers, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3, 4]),
                                           helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3, 5])],
                     list(values), [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [3, 4])])


@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_a_parameter_folded_into_a_broadcast_constant_gets_its_gradient(tmp_path: Path, external: bool) -> None:
    """An LSTMCell run from a zero state: its first step's bias was a frozen constant, and that step's share of
    the bias's gradient was lost (12% of torch's gradient on a 5-step cell loop). The constant is an Expand of
    the parameter again: the losses of the model written with the parameter."""
    rng = np.random.default_rng(13)
    batch = {"X": rng.standard_normal((3, 4)).astype(np.float32), "Y": rng.standard_normal((3, 5)).astype(np.float32),
             "labels": rng.integers(0, 4, 3).astype(np.int64)}
    done = both_forms(tmp_path, bias_folded_into_a_constant, batch, 5, 0.1, external)
    for made, _ in done.values():
        assert sorted(p.name for p in made.trainable) == ["b", "w1", "w2"]
    assert _repaired(done[True][0], "tied_parameters", ["linear"])
    losses = {folded: run.losses for folded, (_, run) in done.items()}
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)


def test_a_constant_of_zeros_is_no_parameters_copy(tmp_path: Path) -> None:
    """A parameter of equal values (a fresh bias of zeros) cannot be told from a constant the exporter made: a
    constant is tied back only to a parameter holding at least two different values."""

    model = bias_folded_into_a_constant(folded=True)
    for tensor in model.graph.initializer:
        if tensor.name in ("b", "linear"):
            tensor.CopyFrom(onnx.numpy_helper.from_array(np.zeros(tensor.dims, np.float32), tensor.name))
    assert retie_broadcast_copies(onnx, model) == []


def test_parameters_no_operation_reads_are_said(tmp_path: Path) -> None:
    """A weight-normalised Linear's weight is computed from parametrizations.weight.original0 and original1
    only, and torch's default exporter folds it into a constant: the two are in no form in the file, and no
    operation reads them. Generation says so; a tied parameter's second name is not said."""
    model = linear_without_its_bias(dropped=False)
    signature = next(p for p in model.metadata_props if p.key == "pkg.torch.export.ExportedProgram.graph_signature")
    signature.value += ("\np_l1_parametrizations_weight_original0: PARAMETER target='l1.parametrizations.weight.original0'"
                        "\np_l1_parametrizations_weight_original1: PARAMETER target='l1.parametrizations.weight.original1'")
    made = generate_artifacts(model, artifact_directory=tmp_path / "folded", loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="sgd")
    said = [r for r in read_manifest(made.folder)["preparation"] if r["rule"] == "unread_parameters"]
    assert said and said[0]["nodes"] == ["l1.parametrizations.weight.original0", "l1.parametrizations.weight.original1"]
    assert "optimize=False" in said[0]["note"]
    tied = generate_artifacts(tied_head(folded=True), artifact_directory=tmp_path / "tied", loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="sgd")
    assert not [r for r in read_manifest(tied.folder)["preparation"] if r["rule"] == "unread_parameters"]


def group_norm_as_exported() -> onnx.ModelProto:
    """X [N, 4, 3] -> GroupNorm(2, 4) -> logits [N, 4] (the mean over the positions), as torch's default exporter
    writes it: a Reshape to the groups, an InstanceNormalization whose scale and bias are ones and zeros per
    group (``val_11``, ``val_14``), a Reshape back, and the module's weight and bias per channel in a Mul and an
    Add (``val_24``, ``val_26``); every node carries group_norm's metadata, which read the weight and bias."""
    from onnx import TensorProto, helper

    fx = ("%group_norm : [num_users=1] = call_function[target=torch.ops.aten.group_norm.default](args = (%x, 2, "
          "%p_gn_weight, %p_gn_bias, 1e-05, False), kwargs = {})")
    scopes = "['', 'gn', 'group_norm']"
    rng = np.random.default_rng(14)
    initializers = {"val_11": np.ones(2, np.float32), "val_14": np.zeros(2, np.float32),
                    "val_24": (1 + 0.1 * rng.standard_normal((4, 1))).astype(np.float32),
                    "val_26": (0.1 * rng.standard_normal((4, 1))).astype(np.float32),
                    "groups": np.array([0, 2, -1], np.int64), "back": np.array([0, 4, 3], np.int64),
                    "axes": np.array([2], np.int64)}
    nodes = [_with_metadata(helper.make_node("Reshape", ["X", "groups"], ["g"]), fx, scopes),
             _with_metadata(helper.make_node("InstanceNormalization", ["g", "val_11", "val_14"], ["n"], epsilon=1e-5),
                            fx, scopes),
             _with_metadata(helper.make_node("Reshape", ["n", "back"], ["b"]), fx, scopes),
             _with_metadata(helper.make_node("Mul", ["b", "val_24"], ["m"]), fx, scopes),
             _with_metadata(helper.make_node("Add", ["m", "val_26"], ["y"]), fx, scopes),
             helper.make_node("ReduceMean", ["y", "axes"], ["logits"], keepdims=0)]
    model = _exported(nodes, initializers, [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4, 3])],
                      ["gn.weight", "gn.bias"], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])])
    model.opset_import[0].version = 18
    return model


def test_group_norms_per_group_constants_are_no_parameters(tmp_path: Path) -> None:
    """The InstanceNormalization GroupNorm is written with reads ones and zeros per group beside the module's
    weight and bias: they were named gn.scale and gn.B and trained as two more parameters (a GroupNorm
    model's losses parted from torch's at the second step). They stay constants; the weight and bias train."""
    names = module_names(onnx, group_norm_as_exported())
    assert set(names) == {"val_24", "val_26"}
    made = generate_artifacts(group_norm_as_exported(), artifact_directory=tmp_path, loss_input_names=["logits"],
                              requires_grad=ALL_PARAMETERS, loss="cross-entropy", optimizer="sgd")
    assert sorted(p.name for p in made.trainable) == ["val_24", "val_26"]
    rng = np.random.default_rng(15)
    batch = {"X": rng.standard_normal((6, 4, 3)).astype(np.float32), "labels": rng.integers(0, 4, 6).astype(np.int64)}
    assert all(train_artifacts(made, batch, 3, learning_rate=0.1).moved)


def test_a_recurrent_operators_initial_state_is_no_parameter() -> None:
    """A GRU called without a state starts from zeros the exporter writes as an initializer, which the GRU
    node reads as initial_h beside the stacked W, R and B: it was named gru.initial_h and trained (a tagger's
    losses parted from torch's by 1e-4 in three steps). It stays a constant."""
    from onnx import TensorProto, helper

    fx = ("%gru : [num_users=1] = call_function[target=torch.ops.aten.gru.input](args = (%x, %zeros, [%p_gru_weight_ih_l0, "
          "%p_gru_weight_hh_l0, %p_gru_bias_ih_l0, %p_gru_bias_hh_l0], True, 1, 0.0, True, False, True), kwargs = {})")
    rng = np.random.default_rng(16)
    initializers = {"val_27": rng.standard_normal((1, 12, 3)).astype(np.float32),
                    "val_28": rng.standard_normal((1, 12, 4)).astype(np.float32),
                    "val_44": rng.standard_normal((1, 24)).astype(np.float32), "val_10": np.zeros((1, 2, 4), np.float32)}
    node = _with_metadata(helper.make_node("GRU", ["X", "val_27", "val_28", "val_44", "", "val_10"], ["Y", "Y_h"],
                                           hidden_size=4, linear_before_reset=1), fx, "['', 'gru', 'gru']")
    model = _exported([node], initializers, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 2, 3])],
                      ["gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0"],
                      [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, 2, 4])])
    assert module_names(onnx, model) == {"val_27": "gru.W", "val_28": "gru.R", "val_44": "gru.B"}
