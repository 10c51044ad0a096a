"""Graph work without the weights: a model's large initializers are set aside as they are loaded, so that the
copies graph preparation and the builder make of the model (and shape inference's serialisation) hold no
weight data. The checkpoint writer streams the parameters from where they are (memory, or the model's
external-data files, read in chunks); constants that stay initializers of the training and eval models get
their data back only while those files are written.

This keeps generation's peak memory near one copy of the weights (measured in scripts/bench_zoo.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import onnx
from onnx import TensorProto, external_data_helper

SET_ASIDE_BYTES = 1 << 16  # initializers from this size up are set aside: shapes, axes and scalars stay


def _size(tensor: TensorProto) -> int:
    if tensor.data_location == TensorProto.EXTERNAL:
        for entry in tensor.external_data:
            if entry.key == "length":
                return int(entry.value)
        return SET_ASIDE_BYTES  # the length is the rest of the file: treat it as large
    return tensor.ByteSize()


class WeightStore:
    """The initializers set aside from a model, by name, as loaded (in memory, or external-data references
    resolved against ``base``, the model's folder)."""

    def __init__(self, base: Optional[Path]) -> None:
        self.base = base
        self.tensors: Dict[str, TensorProto] = {}

    def set_aside(self, model: onnx.ModelProto) -> None:
        """Replace each large initializer of ``model``, and each whose data is in an external file, by a stub
        with its name, type and dims, and keep the original (moved out of the model, not copied)."""
        large = {t.name for t in model.graph.initializer
                 if t.data_location == TensorProto.EXTERNAL or _size(t) >= SET_ASIDE_BYTES}
        if not large:
            return
        initializers = model.graph.initializer
        originals = [initializers.pop() for _ in range(len(initializers))][::-1]
        for tensor in originals:
            if tensor.name in large:
                self.tensors[tensor.name] = tensor
                initializers.add(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims))
            else:
                initializers.append(tensor)  # a small tensor: copied back

    def alias(self, name: str, source: str) -> None:
        """Where ``source`` is set aside, keep its data under ``name`` too (a parameter made as a copy of it, whose
        stub holds no data): external data is referenced again, not read."""
        if source in self.tensors:
            copy = TensorProto()
            copy.CopyFrom(self.tensors[source])
            copy.name = name
            self.tensors[name] = copy

    def originals(self, tensors: Iterable[TensorProto]) -> List[TensorProto]:
        """``tensors`` (stubs or not) as loaded: what the checkpoint writer reads."""
        return [self.tensors.get(t.name, t) for t in tensors]

    def materialized(self, name: str) -> TensorProto:
        """The set-aside tensor ``name`` with its data in memory (read from its external file if there)."""
        tensor = TensorProto()
        tensor.CopyFrom(self.tensors[name])
        if tensor.data_location == TensorProto.EXTERNAL:
            external_data_helper.load_external_data_for_tensor(tensor, os.fspath(self.base or Path.cwd()))
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
        return tensor


def save_with_weights(model: onnx.ModelProto, path: Path, store: Optional[WeightStore]) -> None:
    """Write ``model`` to ``path`` with the data of its set-aside initializers put back for the write (and
    taken out again after it). A model past protobuf's 2 GB goes out with its data in ``<file>.data``."""
    restored: List[int] = []
    if store is not None:
        for index, tensor in enumerate(model.graph.initializer):
            if tensor.name in store.tensors:
                model.graph.initializer[index].CopyFrom(store.materialized(tensor.name))
                restored.append(index)
    try:
        if model.ByteSize() > (1 << 31) - (1 << 24):
            onnx.save(model, os.fspath(path), save_as_external_data=True, all_tensors_to_one_file=True,
                      location=path.name + ".data", size_threshold=1024)
        else:
            onnx.save(model, os.fspath(path))
    finally:
        for index in restored:
            tensor = model.graph.initializer[index]
            model.graph.initializer[index].CopyFrom(
                TensorProto(name=tensor.name, data_type=tensor.data_type, dims=list(tensor.dims)))
