"""The sizes of every value under two made-up assignments of the model's symbolic input sizes.

onnx's shape inference names the result of a broadcast between two different symbolic sizes anew
(``unk__12``), even where both stand for the batch: the builder then cannot tell whether an operand was
broadcast, and sums its gradient back at run time (BroadcastGradientArgs, then a ReduceSum that copies
even when nothing is summed, on a value of no declared size). Inferred again with each symbolic input size
replaced by a distinct large prime, the sizes are concrete wherever the graph computes them from the
inputs' sizes. Where both assignments agree on which axes an operand was broadcast along, those are the
axes for every size: a size that came out as 1 under both is 1 (not computed from an input size), and one
that came out equal to the result's under two unrelated assignments is that size. Where inference cannot
say (data-dependent shapes, sizes a model only accepts in multiples), the builder keeps the run-time way.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import onnx

ProbeDims = Tuple[Optional[int], ...]
# Two assignments of distinct primes, far from the sizes models use as constants.
ASSIGNMENTS = ((1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069),
               (2003, 2011, 2017, 2027, 2029, 2039, 2053, 2063, 2069, 2081, 2083, 2087))


def _input_dims(model: onnx.ModelProto) -> Iterator[Tuple[str, onnx.TensorShapeProto.Dimension]]:
    """Each symbolic (or unknown) size of the graph's inputs, with its key: its name, or input:axis when
    unnamed."""
    for graph_input in model.graph.input:
        tensor = graph_input.type.tensor_type
        if graph_input.type.WhichOneof("value") != "tensor_type" or not tensor.HasField("shape"):
            continue
        for axis, dim in enumerate(tensor.shape.dim):
            if not dim.HasField("dim_value"):
                yield dim.dim_param or f"{graph_input.name}:{axis}", dim


def symbolic_sizes(model: onnx.ModelProto) -> List[str]:
    """The symbolic (or unknown) sizes of the graph's inputs, each once."""
    return list(dict.fromkeys(key for key, _ in _input_dims(model)))


def probe_sizes(model: onnx.ModelProto) -> List[Dict[str, ProbeDims]]:
    """For each assignment, name -> the value's sizes (None where inference cannot tell one). Empty when
    the inputs have no symbolic size, or more than there are primes, or inference fails."""
    from onnx import shape_inference

    symbols = symbolic_sizes(model)
    if not symbols or len(symbols) > len(ASSIGNMENTS[0]):
        return []
    probes: List[Dict[str, ProbeDims]] = []
    for primes in ASSIGNMENTS:
        sizes = dict(zip(symbols, primes))
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        del probe.graph.value_info[:]  # the symbolic declarations would only stand in the way
        for graph_output in probe.graph.output:
            graph_output.type.tensor_type.ClearField("shape")
        for key, dim in list(_input_dims(probe)):
            dim.dim_value = sizes[key]
        try:
            inferred = shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
        except Exception:
            return []
        found: Dict[str, ProbeDims] = {}
        for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            tensor = value.type.tensor_type
            if value.type.WhichOneof("value") == "tensor_type" and tensor.HasField("shape"):
                found[value.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                          for d in tensor.shape.dim)
        for initializer in inferred.graph.initializer:
            found[initializer.name] = tuple(initializer.dims)
        probes.append(found)
    return probes


def broadcast_axes(operand: Sequence[Optional[ProbeDims]],
                   result: Sequence[Optional[ProbeDims]]) -> Optional[List[int]]:
    """The axes of the result an operand was broadcast along, as every probe tells it (one pair of sizes per
    probe), or None where some probe cannot tell or two disagree."""
    decided: Optional[List[int]] = None
    for own, out in zip(operand, result):
        if own is None or out is None or len(out) < len(own) or None in own or None in out:
            return None
        lead = len(out) - len(own)
        if any(o != r and o != 1 for o, r in zip(own, out[lead:])):
            return None  # not a broadcast these sizes allow: inference went wrong somewhere
        axes = list(range(lead)) + [lead + i for i, (o, r) in enumerate(zip(own, out[lead:])) if o == 1 and r != 1]
        if decided is not None and axes != decided:
            return None
        decided = axes
    return decided if len(operand) == len(ASSIGNMENTS) else None
