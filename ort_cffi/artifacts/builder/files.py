"""ort_cffi's generator, file by file: the call ``_child.generate`` makes of a generator, with the
parameters of ONNX Runtime's ``artifacts.generate_artifacts`` (losses and optimizers by their names), writing
the same files: ``training_model.onnx``, ``eval_model.onnx``, ``checkpoint`` (and ``nominal_checkpoint``)
and ``optimizer_model.onnx``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import onnx

from ort_cffi.artifacts.builder.checkpoint import write_checkpoint
from ort_cffi.artifacts.builder.context import BuilderError
from ort_cffi.artifacts.builder.engine import UnreachedError
from ort_cffi.artifacts.builder.optimizer import optimizer_model
from ort_cffi.artifacts.builder.registry import registered
from ort_cffi.artifacts.builder.training_model import build_models
from ort_cffi.artifacts.builder.weights import WeightStore, save_with_weights

NAME = "ort_cffi"
MAX_IR_VERSION = 10  # what ONNX Runtime 1.19 loads


def _save(model: onnx.ModelProto, path: Path, weights: Optional[WeightStore] = None) -> None:
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    save_with_weights(model, path, weights)


def generate_artifacts(model: onnx.ModelProto, requires_grad: Sequence[str], frozen_params: Optional[Sequence[str]],
                       loss: Optional[str], optimizer: Optional[str], artifact_directory: Union[str, Path],
                       prefix: str = "", additional_output_names: Optional[Sequence[str]] = None,
                       nominal_checkpoint: bool = False, loss_input_names: Optional[Sequence[str]] = None,
                       weights: Optional[WeightStore] = None,
                       frozen_rows: Optional[Mapping[str, Sequence[int]]] = None,
                       standard_forms: bool = True) -> Dict[str, Any]:
    """Write the artifacts of ``model`` into ``artifact_directory``; ``loss`` and ``optimizer`` are ONNX
    Runtime's enum member names (``"CrossEntropyLoss"``, ``"AdamW"``) or None. Returns what was built.
    ``weights``: where the large initializers of ``model`` (stubs in it) were set aside as loaded.
    ``frozen_rows``: {trainable parameter: rows along its first axis that training leaves as they are}.
    ``standard_forms``: the training operators measured faster in standard operators written so
    (``standard_forms.py``); False: ONNX Runtime's kernels everywhere, the files its generator writes.
    Raises NoGradientError naming a node without a gradient, UnreachedError (a NoGradientError) listing the
    parameters no gradient reaches."""
    folder = Path(artifact_directory)
    built = build_models(model, list(requires_grad), list(frozen_params or []), loss,
                         list(loss_input_names) if loss_input_names else None, list(additional_output_names or []),
                         frozen_rows=frozen_rows, standard_forms=standard_forms)
    _save(built.training, folder / f"{prefix}training_model.onnx", weights)
    _save(built.eval, folder / f"{prefix}eval_model.onnx", weights)
    trainable, frozen = (built.trainable, built.frozen) if weights is None else (
        weights.originals(built.trainable), weights.originals(built.frozen))
    base = None if weights is None or weights.base is None else str(weights.base)
    write_checkpoint(folder / f"{prefix}checkpoint", trainable, frozen, external_data_dir=base)
    if nominal_checkpoint:
        write_checkpoint(folder / f"{prefix}nominal_checkpoint", trainable, frozen, nominal=True,
                         external_data_dir=base)
    if optimizer is not None:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        # Named on from the loss block's names, as ONNX Runtime's generator names it.
        _save(optimizer_model(optimizer, opset=opset or 17, name_counter=built.names_drawn + 1),
              folder / f"{prefix}optimizer_model.onnx")
    return {"outputs": built.outputs, "standard_forms": built.standard_forms}


class BuilderBackend:
    """ort_cffi's builder with the face ``_child.generate`` calls a generator by (as its
    ``OnnxRuntimeBackend`` does ONNX Runtime's): runs in this process."""

    name = NAME

    def __init__(self, standard_forms: bool = True) -> None:
        from ort_cffi import __version__

        self.onnx = onnx
        self.versions = {"onnx": onnx.__version__, "ort_cffi": __version__}
        # What the builder differentiates itself: graph preparation leaves those operators as they are.
        self.native_ops = frozenset(r.op for r in registered() if r.domain in ("", "ai.onnx"))
        self.weights: Optional[WeightStore] = None
        self.standard_forms = standard_forms  # the faster standard forms of training operators (standard_forms.py)

    def load_model(self, path: str, check: Optional[Callable[[onnx.ModelProto], None]] = None) -> onnx.ModelProto:
        """The model at ``path`` with its large initializers set aside (external data left on disk): the
        graph work copies no weights. ``check`` sees the model as loaded, before that (its external data
        references are still there)."""
        model = onnx.load(path, load_external_data=False)
        if check is not None:
            check(model)
        self.weights = WeightStore(Path(path).resolve().parent)
        self.weights.set_aside(model)
        return model

    def generate(self, model: onnx.ModelProto, requires_grad: Sequence[str], frozen_params: Optional[Sequence[str]],
                 loss: Optional[str], optimizer: Optional[str], out: str, prefix: str,
                 additional_output_names: Optional[Sequence[str]], nominal_checkpoint: bool,
                 loss_input_names: Optional[Sequence[str]],
                 frozen_rows: Optional[Mapping[str, Sequence[int]]] = None) -> None:
        generate_artifacts(model, requires_grad, frozen_params, loss, optimizer, out, prefix, additional_output_names,
                           nominal_checkpoint, loss_input_names, self.weights, frozen_rows, self.standard_forms)

    def unreached(self, error: BaseException) -> List[str]:
        """The parameters a failed generation could drop and retry without (no gradient reaches them)."""
        return list(error.parameters) if isinstance(error, UnreachedError) else []

    def explain(self, error: BaseException) -> str:
        if isinstance(error, BuilderError):
            return f"ort_cffi's gradient builder cannot build the training graph: {error}"
        return f"ort_cffi's gradient builder failed: {type(error).__name__}: {error}"
