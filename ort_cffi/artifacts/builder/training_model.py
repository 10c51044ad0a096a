"""The training and eval models of a forward model, as ONNX Runtime 1.19.2's training session takes them:

- the loss block on top (``loss_blocks``), the loss the first output, then the additional outputs;
- every parameter (trainable or frozen) a graph input named as in the checkpoint, no longer an initializer;
- the eval model: that graph with training modes switched off (Dropout, BatchNormalization), nothing more;
- the training model: the gradient graph (``engine``), seeded by ``<loss>_grad`` = 1, and for each trainable
  parameter an input ``<parameter>_grad.accumulation.buffer`` and a ``com.microsoft`` InPlaceAccumulatorV2
  adding ``<parameter>_grad`` into it (reset by the ``lazy_reset_grad`` input). Without the accumulator the
  session would run and report losses, and the parameters would never move;
- where ``standard_forms`` is asked, the training operators that run faster written in standard operators
  (``standard_forms``: the table of which, chosen by measurement on the training build);
- rows of a parameter kept as they are (``frozen_rows``: an embedding's padding row, which torch's
  ``nn.Embedding(padding_idx=k)`` leaves untrained and its export does not record): their gradient is set to
  zero before it is accumulated (a ScatterND of zeros), so that no optimizer step moves them (AdamW's moments
  of a row that never had a gradient stay zero; no weight decay by default).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ort_cffi.artifacts.builder.context import BuilderError, GradientContext
from ort_cffi.artifacts.builder.engine import Engine, node_inputs
from ort_cffi.artifacts.builder.folding import fold_constants
from ort_cffi.artifacts.builder.fusions import drop_inert_dropouts, fuse_activations
from ort_cffi.artifacts.builder.loss_blocks import Namer, add_loss
from ort_cffi.artifacts.builder.lowering import lower_slow_kernels
from ort_cffi.artifacts.builder.registry import MICROSOFT
from ort_cffi.artifacts.builder.spec_forms import rewrite_changed_operators
from ort_cffi.artifacts.builder.standard_forms import apply_standard_forms

LAZY_RESET_GRAD = "lazy_reset_grad"
GRADIENT_PROBE_PREFIX = "gradient_probe:"  # outputs that show a gradient (expose_gradients), not named *_grad


@dataclass
class TrainingModels:
    training: onnx.ModelProto
    eval: onnx.ModelProto
    trainable: List[onnx.TensorProto]
    frozen: List[onnx.TensorProto]
    outputs: List[str]  # the loss, then the additional outputs
    names_drawn: int  # how many onnx::<token>::<n> names the loss block drew (the optimizer model names on)
    standard_forms: Dict[str, int] = field(default_factory=dict)  # operator -> nodes written in standard form


def _disable_training_mode(model: onnx.ModelProto) -> None:
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.input) > 2:
            node.input[2] = ""
        elif node.op_type == "BatchNormalization":
            for attribute in node.attribute:
                if attribute.name == "training_mode":
                    attribute.i = 0


def _value_info(model: onnx.ModelProto, names: Sequence[str]) -> List[onnx.ValueInfoProto]:
    """The graph outputs for ``names``: declared outputs, else what shape inference tells of them."""
    known = {v.name: v for v in model.graph.output}
    missing = [n for n in names if n not in known]
    if missing:
        from onnx import shape_inference

        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:
            inferred = model
        for value in list(inferred.graph.value_info) + list(inferred.graph.input):
            known.setdefault(value.name, value)
    found = []
    for name in names:
        if name not in known:
            raise BuilderError(f"{name!r} cannot be an output: it is no value of the model that shape inference knows")
        found.append(copy.deepcopy(known[name]))
    return found


def _with_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the value_info shape inference adds (the model itself where inference fails)."""
    from onnx import shape_inference

    try:
        return shape_inference.infer_shapes(model)
    except Exception:
        return model


def _backward_shapes(context: GradientContext, graph: onnx.GraphProto) -> List[onnx.ValueInfoProto]:
    """The type and shape of each value the backward pass computes, where the builder knows them (a gradient
    has its value's): ONNX Runtime's allocation planner reuses a buffer only for a value of known size, and
    its gradient kernels (ConvGrad, BatchNormalizationGrad, ...) infer no shapes of their own. Undeclared, the
    memory pattern of a step came out 8% larger on mobilenet_v2 than with ONNX Runtime's generator, which
    declares them too."""
    declared = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    declared.update(i.name for i in graph.initializer)
    found = []
    for node in context.nodes:
        for name in node.output:
            elem_type, dims = context.types.get(name, (0, None))
            if name and name not in declared and elem_type and dims is not None:
                found.append(helper.make_tensor_value_info(name, elem_type, list(dims)))
                declared.add(name)
    return found


def _drop_needless_declarations(graph: onnx.GraphProto) -> None:
    """The value_info of values no node computes any more (the fusions and the folding took them out) and of
    Constant nodes' outputs (the session makes those initializers, typed by their values). ONNX Runtime
    holds every declaration while it builds the session: mobilenet_v2's 330 such entries cost 0.4 MiB of
    its peak RSS, a step's peak 1.002x that of ONNX Runtime's artifacts with them, 1.000x without."""
    computed = {name for node in graph.node if node.op_type != "Constant" for name in node.output}
    kept = [v for v in graph.value_info if v.name in computed]
    if len(kept) < len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(kept)


def _fold_unsqueezed_constants(graph: onnx.GraphProto) -> None:
    """An Unsqueeze of a constant initializer (keepdims=0 reductions' gradients unsqueeze dY, which for the loss
    is its seed) written as the unsqueezed initializer. ONNX Runtime 1.31's UnsqueezeElimination folds such a node
    itself, and warns at every session that it cannot where it cannot replace the node's output (measured on
    the zoo's ReduceMean losses); 1.19.2 folds it silently. Folded here, neither has anything to do."""
    inputs = {value.name for value in graph.input}
    outputs = {value.name for value in graph.output}
    constants = {i.name: i for i in graph.initializer if i.name not in inputs}
    kept: List[onnx.NodeProto] = []
    folded: List[onnx.TensorProto] = []
    for node in graph.node:
        data = constants.get(node.input[0]) if node.op_type == "Unsqueeze" and node.domain in ("", "ai.onnx") \
            and node.input else None
        axes: Optional[List[int]] = None
        if data is not None and data.data_location != TensorProto.EXTERNAL and node.output[0] not in outputs:
            if len(node.input) > 1 and node.input[1] in constants:
                axes = [int(a) for a in numpy_helper.to_array(constants[node.input[1]]).reshape(-1)]
            elif len(node.input) == 1:
                axes = [int(a) for a in next((a.ints for a in node.attribute if a.name == "axes"), [])]
        if data is None or not axes:
            kept.append(node)
            continue
        value = numpy_helper.to_array(data)
        rank = value.ndim + len(axes)
        value = np.expand_dims(value, tuple(sorted(a % rank for a in axes)))
        folded.append(numpy_helper.from_array(value, node.output[0]))
        constants[node.output[0]] = folded[-1]
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
        graph.initializer.extend(folded)


def _subgraphs(node: onnx.NodeProto) -> List[onnx.GraphProto]:
    return [graph for attribute in node.attribute
            for graph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)]


def _drop_unread_constants(graph: onnx.GraphProto) -> None:
    """The initializers and Constant nodes of ``graph`` and of its subgraphs that nothing reads, out. ONNX
    Runtime removes each one as it creates a session, warning at every session ("Removing initializer ...
    It is not used by any node"). Such constants came from the eval model's training modes switched off (a
    Dropout's training flag), from gradient rules that made a constant for a path they did not take (Resize,
    GroupNormalization: made where read since), and from a model's own leftovers."""
    for node in graph.node:
        for subgraph in _subgraphs(node):
            _drop_unread_constants(subgraph)
    read = {value.name for value in list(graph.output) + list(graph.input)}  # an input's default stays with it
    for node in graph.node:
        read.update(node_inputs(node))  # with what its subgraphs read from this graph
    kept_nodes = [n for n in graph.node if n.op_type != "Constant" or n.domain not in ("", "ai.onnx")
                  or any(name in read for name in n.output)]
    if len(kept_nodes) < len(graph.node):
        del graph.node[:]
        graph.node.extend(kept_nodes)
    kept = [i for i in graph.initializer if i.name in read]
    if len(kept) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _without_rows(context: GradientContext, parameter: str, trainable: Sequence[onnx.TensorProto],
                  gradients: Dict[str, str], rows: Sequence[int]) -> str:
    """``parameter``'s gradient with ``rows`` (along its first axis) set to zero: ScatterND of zeros."""
    found = next((p for p in trainable if p.name == parameter), None)
    if found is None:
        raise BuilderError(f"frozen_rows names {parameter!r}, which is no trained parameter")
    dims = [int(d) for d in found.dims]
    chosen = sorted({int(row) for row in rows})
    if not dims or not chosen or chosen[0] < 0 or chosen[-1] >= dims[0]:
        raise BuilderError(f"frozen_rows of {parameter!r} (shape {dims}) must be indices along its first axis, "
                           f"0 to {dims[0] - 1 if dims else 'none'}: {list(rows)}")
    indices = context.const(np.array(chosen, dtype=np.int64).reshape(-1, 1), hint="frozen_rows")
    zeros = context.const(np.zeros([len(chosen)] + dims[1:]), found.data_type, hint="zeros")
    context.source = None
    masked = context.node("ScatterND", [gradients[parameter], indices, zeros],
                          [context.fresh(f"{parameter}_grad/frozen_rows")])[0]
    context.same_type(masked, gradients[parameter])
    return masked


def _dims(tensor_type: onnx.TypeProto.Tensor) -> List[Union[int, str, None]]:
    """The dimensions of a declared tensor: sizes, the names of symbolic ones (a differentiated graph input's
    batch), None where neither is known."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim]


def _opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, version))


def build_models(model: onnx.ModelProto, requires_grad: Sequence[str], frozen_params: Sequence[str],
                 loss: Optional[str], loss_input_names: Optional[Sequence[str]] = None,
                 additional_output_names: Optional[Sequence[str]] = None,
                 expose_gradients: bool = False,
                 frozen_rows: Optional[Mapping[str, Sequence[int]]] = None,
                 standard_forms: bool = False) -> TrainingModels:
    """Build the training and eval models of ``model`` (left unchanged). ``loss``: one of
    ``loss_blocks.LOSSES`` or None (the model's first output is the loss). ``expose_gradients``: the
    training model also outputs each parameter's gradient, as ``gradient_probe:<parameter>`` (for tests).
    ``frozen_rows``: {trainable parameter: indices along its first axis} whose gradient is zero.
    ``standard_forms``: write the training operators that the table of ``standard_forms`` chose in their
    standard form (False: ONNX Runtime's kernels everywhere, as its generator writes them)."""
    base = copy.deepcopy(model)
    rewrite_changed_operators(base)  # one answer on every release, in the training and the eval model alike
    inputs_to_loss = list(loss_input_names) if loss_input_names else [o.name for o in base.graph.output]
    namer = Namer()
    outputs = add_loss(base, loss, inputs_to_loss, namer)
    # A name already given (with no loss the model's outputs are kept: naming one again) is listed once: a
    # model with two outputs of one name is ambiguous to every runtime that reads outputs by name.
    outputs += [name for name in dict.fromkeys(additional_output_names or []) if name not in outputs]
    base = _with_shapes(base)  # as onnxblock does: the models carry what shape inference tells
    graph = base.graph
    output_values = _value_info(base, outputs)
    del graph.output[:]
    graph.output.extend(output_values)

    wanted, kept = set(requires_grad), set(frozen_params)
    trainable = [i for i in graph.initializer if i.name in wanted]
    frozen = [i for i in graph.initializer if i.name in kept]
    # A graph input may be differentiated too (onnxblock's requires_grad("input")): it gets a gradient and its
    # accumulation buffer, and stays an input, no parameter.
    data_inputs = {v.name for v in graph.input} - {i.name for i in graph.initializer}
    missing = sorted((wanted | kept) - {i.name for i in trainable + frozen} - (wanted & data_inputs))
    if missing:
        raise BuilderError(f"no initializer of the model is named {', '.join(repr(m) for m in missing)}")
    parameters = wanted | kept
    remaining = [i for i in graph.initializer if i.name not in parameters]
    for initializer in list(graph.initializer):
        if initializer.name in parameters:
            graph.input.append(helper.make_tensor_value_info(initializer.name, initializer.data_type,
                                                             list(initializer.dims)))
    del graph.initializer[:]
    graph.initializer.extend(remaining)

    eval_model = copy.deepcopy(base)
    _disable_training_mode(eval_model)
    _drop_unread_constants(eval_model.graph)

    training = base
    loss_name = outputs[0]
    # folded and measured before the fusions: onnx's shape inference knows no com.microsoft op
    types, probes = fold_constants(training, sorted(parameters))
    if standard_forms:  # ONNX Runtime's generator keeps them: its artifacts are what the kernel forms match
        drop_inert_dropouts(training)
    fuse_activations(training, types)
    context = GradientContext(training, types, probes)
    seed = f"{loss_name}_grad"
    loss_type = context.types.get(loss_name, (TensorProto.FLOAT, None))[0] or TensorProto.FLOAT
    order = [i.name for i in graph.input if i.name in wanted]
    gradients = Engine(context).build(loss_name, order, seed)
    trained = {parameter: gradients[parameter] for parameter in order}  # what each accumulator adds up
    for parameter, rows in (frozen_rows or {}).items():
        trained[parameter] = _without_rows(context, parameter, trainable, gradients, rows)
    graph.node.extend(context.nodes)
    lower_slow_kernels(graph, context.types)  # after the backward: the gradient rules see the one operator
    graph.initializer.append(helper.make_tensor(seed, loss_type, [], [1.0]))
    graph.initializer.extend(context.initializers)
    graph.value_info.extend(context.value_infos)
    graph.value_info.extend(_backward_shapes(context, graph))
    _drop_needless_declarations(graph)
    _opset(training, MICROSOFT, 1)

    by_name: Dict[str, onnx.ValueInfoProto] = {v.name: v for v in graph.input}
    new_outputs = list(graph.output)
    if expose_gradients:
        for parameter in order:
            probe = GRADIENT_PROBE_PREFIX + parameter
            graph.node.append(helper.make_node("Identity", [trained[parameter]], [probe]))
            source = by_name[parameter].type.tensor_type
            new_outputs.append(helper.make_tensor_value_info(probe, source.elem_type, _dims(source)))
    for index, parameter in enumerate(order):
        gradient = gradients[parameter]
        buffer = f"{gradient}.accumulation.buffer"
        flag = f"{gradient}.accumulation.out"
        graph.node.append(helper.make_node("InPlaceAccumulatorV2", [buffer, trained[parameter], LAZY_RESET_GRAD], [flag],
                                           name=f"GradientAccumulator{len(outputs) + index}", domain=MICROSOFT))
        source = by_name[parameter].type.tensor_type
        graph.input.append(helper.make_tensor_value_info(buffer, source.elem_type, _dims(source)))
        new_outputs.append(helper.make_tensor_value_info(flag, TensorProto.BOOL, [1]))
    graph.input.append(helper.make_tensor_value_info(LAZY_RESET_GRAD, TensorProto.BOOL, [1]))
    del graph.output[:]
    graph.output.extend(new_outputs)
    _fold_unsqueezed_constants(graph)
    _drop_unread_constants(graph)
    written: Dict[str, int] = {}
    if standard_forms:  # last: the gradient rules, fusions and declarations above see ONNX Runtime's operators
        training, written, _ = apply_standard_forms(training)
        _drop_needless_declarations(training.graph)
    return TrainingModels(training, eval_model, trainable, frozen, outputs, namer.drawn, written)
