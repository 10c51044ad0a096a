"""What the engine makes of the training artifacts' models: which inputs are the user's, which are parameters,
where each parameter's gradient is computed, and the same graphs with the training operators lowered.

The training model ONNX Runtime's training API runs holds, per trainable parameter, an input
``<param>_grad.accumulation.buffer`` and a ``com.microsoft`` ``InPlaceAccumulatorV2(buffer, gradient,
lazy_reset_grad)`` node that adds the step's gradient to the buffer in place (docs/internals/runtime.md). An
inference build has no such kernel and nothing runs in place: the engine removes those nodes and makes each
gradient a graph output, which a step writes straight into memory the engine owns (``session``). The names are
classified as ONNX Runtime 1.19.2's ``Module`` classifies them, so the inputs and outputs a user sees, and their
order, are the same on both backends.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np
import onnx
from onnx import helper

from ort_cffi._backends.engine.optimizer import OptimizerSpec

LAZY_RESET_GRAD = "lazy_reset_grad"
GRADIENT_SUFFIXES = ("_grad.accumulation.buffer", "_grad.accumulation.out", "_grad")
ACCUMULATOR = "InPlaceAccumulatorV2"
MICROSOFT = "com.microsoft"


def parameter_of_gradient(name: str) -> Optional[str]:
    """The parameter a gradient name belongs to, as the training API reads names; None for other names."""
    for suffix in GRADIENT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def load_model(path: Optional[str], data: Optional[bytes], kind: str = "model") -> onnx.ModelProto:
    """A model from a path (its external data read from beside it) or from bytes; ``kind`` names it in errors."""
    where = f"the {kind}'s bytes" if data is not None else f"the {kind} {path!r}"
    if data is not None and len(data) == 0 or data is None and path is not None and os.path.getsize(path) == 0:
        raise ValueError(f"{where} is empty: no ONNX model (a file cut short, or never written?)")
    try:
        if data is not None:
            model = onnx.load_from_string(bytes(data))
        else:
            assert path is not None
            model = onnx.load(path, load_external_data=True)
    except FileNotFoundError:
        raise
    except Exception as error:  # onnx's DecodeError and its external-data errors
        raise ValueError(f"{where} is not an ONNX model ONNX Runtime can load: {error}") from None
    if not model.HasField("graph") or not model.opset_import:
        raise ValueError(f"{where} is not an ONNX model: it has no graph or no opset import (a damaged file?)")
    return model


@dataclass
class TrainingGraph:
    """The training model as the engine runs it."""

    model: onnx.ModelProto  # lowered: no accumulator, gradients as outputs
    user_inputs: List[str]  # in graph order: what TrainStep takes, by position
    user_outputs: List[str]  # what TrainStep returns
    parameter_inputs: List[str]  # parameters in graph order: CopyParametersToBuffer's order
    gradients: Dict[str, str] = field(default_factory=dict)  # trainable parameter -> its gradient output
    # user outputs that are an accumulator's optional second output (the accumulated buffer, which
    # ort_cffi.api reads gradients from) -> their parameter: the engine answers them from its own buffer
    accumulated: Dict[str, str] = field(default_factory=dict)


def training_graph(model: onnx.ModelProto, parameters: Set[str], trainable: Set[str]) -> TrainingGraph:
    """Classify the training model's inputs and outputs and turn its accumulators into gradient outputs."""
    graph = model.graph
    user_inputs, parameter_inputs, buffers = [], [], {}
    for value in graph.input:
        name = value.name
        if name in parameters:
            parameter_inputs.append(name)
        elif name == LAZY_RESET_GRAD:
            continue
        elif parameter_of_gradient(name) is not None:
            buffers[name] = parameter_of_gradient(name)
        else:
            user_inputs.append(name)
    user_outputs = [v.name for v in graph.output if parameter_of_gradient(v.name) is None]

    gradients: Dict[str, str] = {}
    accumulated: Dict[str, str] = {}
    kept = []
    for node in graph.node:
        if node.op_type == ACCUMULATOR and node.domain == MICROSOFT:
            buffer = node.input[0]
            parameter = buffers.get(buffer)
            if parameter is None:
                raise ValueError(f"the accumulator node {node.name!r} adds to {buffer!r}, which is no gradient buffer "
                                 "input of the training model")
            gradients[parameter] = node.input[1]
            if len(node.output) > 1 and node.output[1]:
                accumulated[node.output[1]] = parameter
        else:
            kept.append(node)
    missing = sorted(p for p in trainable if p in parameter_inputs and p not in gradients)
    if missing:
        raise ValueError(f"Gradient buffer input not provided for param: {missing[0]} (the training model has no "
                         f"accumulator for {len(missing)} trainable parameter(s): {', '.join(missing[:5])})")

    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    g = lowered.graph
    del g.node[:]
    g.node.extend(kept)
    still_read = {name for node in kept for name in node.input} | _subgraph_reads(kept)
    inputs = [v for v in graph.input
              if not ((v.name in buffers or v.name == LAZY_RESET_GRAD) and v.name not in still_read)]
    del g.input[:]
    g.input.extend(inputs)
    del g.output[:]
    g.output.extend(v for v in graph.output if parameter_of_gradient(v.name) is None and v.name not in accumulated)
    declared = {v.name: v for v in graph.input}
    for parameter in parameter_inputs:
        if parameter in gradients:
            typed = declared[parameter].type
            out = helper.make_value_info(gradients[parameter], typed)
            g.output.append(out)
    return TrainingGraph(lowered, user_inputs, user_outputs, parameter_inputs, gradients, accumulated)


# Operators that draw random numbers, and the type of their ``seed`` attribute.
RANDOM_OPS = {"Dropout": int, "BitmaskDropout": int, "BiasDropout": int, "RandomNormal": float,
              "RandomUniform": float, "RandomNormalLike": float, "RandomUniformLike": float, "Multinomial": float}


def seed_random_ops(model: onnx.ModelProto, seed: int) -> None:
    """Give every random operator that has no seed of its own one derived from ``seed``, in place.

    The training API's ``SetSeed`` reseeds the runtime's process-wide generator, which the inference API cannot
    reach; a seed attribute makes each operator's generator start from a known state in every new session, so
    that sessions made after ``SetSeed`` draw the same numbers (docs/internals/runtime.md, the engine).
    """
    counter = [0]

    def visit(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            kind = RANDOM_OPS.get(node.op_type)
            if kind is not None and not any(a.name == "seed" for a in node.attribute):
                value = (seed * 1000003 + counter[0]) % (2**31 - 1)
                counter[0] += 1
                node.attribute.append(helper.make_attribute("seed", kind(value)))
            for attribute in node.attribute:
                for sub in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                    visit(sub)

    visit(model.graph)


def declared_shapes(model: onnx.ModelProto, names: Sequence[str]) -> Dict[str, Tuple[int, ...]]:
    """The static shapes the model's graph inputs ``names`` declare (a nominal checkpoint's parameters take
    them); a symbolic or missing size is refused by name."""
    found: Dict[str, Tuple[int, ...]] = {}
    declared = {v.name: v for v in model.graph.input}
    for name in names:
        dims = declared[name].type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims):
            raise ValueError(f"the training model declares no fixed shape for the parameter {name!r}, which a "
                             "nominal checkpoint needs to know its size")
        found[name] = tuple(int(d.dim_value) for d in dims)
    return found


def fixed_shapes(model: onnx.ModelProto, names: Sequence[str]) -> Dict[str, Optional[List[int]]]:
    """Each of ``names``' declared shape where every size is fixed, else None (``declared_shapes`` refuses it)."""
    declared = {v.name: v for v in model.graph.input}
    found: Dict[str, Optional[List[int]]] = {}
    for name in names:
        dims = declared[name].type.tensor_type.shape.dim
        found[name] = [int(d.dim_value) for d in dims] if all(d.HasField("dim_value") for d in dims) else None
    return found


def external_files(path: str) -> List[str]:
    """The external data files the model at ``path`` names, as paths (the ones ``load_model`` read)."""
    from onnx.external_data_helper import ExternalDataInfo

    model = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    found: List[str] = []

    def tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from graph.initializer
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                for sub in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                    yield from tensors(sub)

    for tensor in tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            name = os.path.join(folder, ExternalDataInfo(tensor).location)
            if name not in found:
                found.append(name)
    return found


def _subgraph_reads(nodes: Sequence[onnx.NodeProto]) -> Set[str]:
    """Names read inside the nodes' subgraphs (an outer value a Loop or If body uses)."""
    found: Set[str] = set()
    for node in nodes:
        for attribute in node.attribute:
            for sub in list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else []):
                found |= {name for inner in sub.node for name in inner.input}
                found |= _subgraph_reads(sub.node)
    return found


@dataclass
class EvalGraph:
    model: onnx.ModelProto
    user_inputs: List[str]
    user_outputs: List[str]
    parameter_inputs: List[str]


def eval_graph(model: onnx.ModelProto, parameters: Set[str]) -> EvalGraph:
    names = [v.name for v in model.graph.input]
    return EvalGraph(model, [n for n in names if n not in parameters], [v.name for v in model.graph.output],
                     [n for n in names if n in parameters])


OPTIMIZERS = {"AdamWOptimizer": "AdamW", "SGDOptimizerV2": "SGD"}


def optimizer_spec(model: onnx.ModelProto) -> OptimizerSpec:
    """Read what the optimizer model computes; refuse one the engine cannot compute, by name."""
    found: Optional[OptimizerSpec] = None
    max_norm: Optional[float] = None
    for node in model.graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in OPTIMIZERS and node.domain == MICROSOFT:
            if found is not None:
                raise ValueError("the optimizer model has more than one optimizer operator")
            found = OptimizerSpec(OPTIMIZERS[node.op_type])
            for key in ("alpha", "beta", "epsilon", "weight_decay"):
                if key in attributes:
                    setattr(found, key, float(attributes[key]))
            for key in ("adam_mode", "correct_bias"):
                if key in attributes:
                    setattr(found, key, int(attributes[key]))
        elif node.op_type == "InplaceClipGradNorm" and node.domain == MICROSOFT:
            max_norm = float(attributes.get("max_norm", 1.0))
            if attributes.get("norm_type", b"fro") not in (b"fro", "fro"):
                raise ValueError(f"the optimizer model clips gradients by the norm {attributes['norm_type']!r}: "
                                 "ort_cffi's engine computes only the Frobenius norm")
        else:
            raise ValueError(f"the optimizer model holds the operator {node.domain or 'ai.onnx'}.{node.op_type}, "
                             "which ort_cffi's engine does not compute (it computes AdamWOptimizer, SGDOptimizerV2 "
                             "and InplaceClipGradNorm)")
    if found is None:
        raise ValueError("the optimizer model has no optimizer operator (AdamWOptimizer or SGDOptimizerV2)")
    if found.kind == "AdamW" and found.adam_mode not in (0, 1):
        raise ValueError(f"AdamWOptimizer's adam_mode {found.adam_mode} is none of ONNX Runtime's (0 or 1)")
    found.max_norm = max_norm
    return found


def inference_model(eval_model: onnx.ModelProto, outputs: Sequence[str],
                    parameter_values: Dict[str, "np.ndarray"]) -> onnx.ModelProto:
    """The eval model with only ``outputs`` as outputs, the nodes they need, and the parameters as
    initializers (what ``ExportModelForInferencing`` writes)."""
    from onnx import numpy_helper

    if not outputs:
        raise ValueError("Expected a non empty vector of graph output names. Got an empty vector.")
    model = onnx.ModelProto()
    model.CopyFrom(eval_model)
    graph = model.graph
    types = {v.name: v for v in list(graph.value_info) + list(graph.output) + list(graph.input)}
    produced = {name for node in graph.node for name in node.output} | {v.name for v in graph.input}
    for name in outputs:
        if name not in produced:
            raise ValueError(f"Expected graph output for inference graph {name} could not be found. "
                             "Please regenerate the eval graph.")
    inferred = None
    new_outputs = []
    for name in outputs:
        if name in types:
            new_outputs.append(types[name])
        else:
            if inferred is None:
                inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(eval_model).graph.value_info}
            new_outputs.append(inferred.get(name) or helper.make_empty_tensor_value_info(name))
    del graph.output[:]
    graph.output.extend(new_outputs)
    # Keep the nodes the outputs need (reverse reachability, subgraph reads included).
    needed = set(outputs)
    kept = []
    for node in reversed(list(graph.node)):
        if any(o in needed for o in node.output if o):
            kept.append(node)
            needed |= set(node.input) | _subgraph_reads([node])
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    user_inputs = []
    for value in graph.input:
        if value.name in parameter_values:
            graph.initializer.append(numpy_helper.from_array(parameter_values[value.name], value.name))
        elif value.name in needed:
            user_inputs.append(value)
    del graph.input[:]
    graph.input.extend(user_inputs)
    return model


def save_model(model: onnx.ModelProto, path: Union[str, "os.PathLike[str]"]) -> None:
    """Write a model; past protobuf's 2 GiB limit, its tensors go to one external data file beside it."""
    if model.ByteSize() < 2**31 - 2**20:
        with open(path, "wb") as f:
            f.write(model.SerializeToString())
        return
    onnx.save_model(model, os.fspath(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(os.fspath(path)) + ".data")
