"""ONNX Runtime's ``onnxruntime.training.artifacts`` on ort_cffi, default for default and argument for
argument: ``from onnxruntime.training import artifacts`` ports as ``from ort_cffi.training import artifacts``.

``generate_artifacts`` here is ONNX Runtime's signature with ONNX Runtime's defaults (no loss, no optimizer
model, the loss alone as output), its ``LossType`` and ``OptimType`` with ONNX Runtime's values, a custom loss
as an ``onnxblock.Block``, and ``frozen_params`` taken as ONNX Runtime takes them. It runs
``ort_cffi.artifacts.generate_artifacts`` (ort_cffi's own builder), which keeps ort_cffi's friendlier defaults
for those who call it directly (docs/guides/porting-python.md says what differs).
"""
from __future__ import annotations

import dataclasses
import enum
import fnmatch
import glob
import json
import logging
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import helper

from ort_cffi._facade.files import atomic_write, file_sha256
from ort_cffi.artifacts import MANIFEST, ArtifactsInputError, GeneratedArtifacts, read_manifest
from ort_cffi.artifacts import generate_artifacts as _generate
from ort_cffi.onnxblock import blocks, model_accessor, optim
from ort_cffi.onnxblock.stacking import stack_loss

_log = logging.getLogger(__name__)
# onnx's floating-point element types: FLOAT, FLOAT16, DOUBLE, BFLOAT16
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
_MAX_OPSET = 21  # the newest default-domain opset ONNX Runtime 1.19 knows


class LossType(enum.Enum):
    """The loss ``generate_artifacts`` adds, with ONNX Runtime's values."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    """The optimizer of the optimizer model, with ONNX Runtime's values."""

    AdamW = 1
    SGD = 2


def generate_artifacts(
    model: Union[onnx.ModelProto, str, "os.PathLike[str]"],
    requires_grad: Optional[List[str]] = None,
    frozen_params: Optional[List[str]] = None,
    loss: Optional[Union[LossType, blocks.Block]] = None,
    optimizer: Optional[Union[OptimType, blocks.Block]] = None,
    artifact_directory: Optional[Union[str, bytes, "os.PathLike[str]"]] = None,
    prefix: str = "",
    ort_format: bool = False,
    custom_op_library: Optional[Union[str, bytes, "os.PathLike[str]"]] = None,
    additional_output_names: Optional[List[str]] = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[List[str]] = None,
    **extra_options: Any,
) -> GeneratedArtifacts:
    """Write the training, eval and optimizer models and the checkpoint of ``model`` into
    ``artifact_directory`` (default: the current folder), as ONNX Runtime's ``generate_artifacts`` does.

    - ``loss``: None (the model's outputs are kept and the first is the loss), a ``LossType``, or an
      ``onnxblock.Block`` called on the model's outputs (or on ``loss_input_names``), whose first output is
      the loss.
    - ``optimizer``: None (no optimizer model), an ``OptimType``, or ``onnxblock.optim.AdamW(...)`` /
      ``onnxblock.optim.SGD(...)``, whose settings (betas, weight decay, ``clip_grad``) write the model.
    - ``additional_output_names``: outputs kept after the loss; None keeps the loss alone.
    - ``requires_grad``: the initializers to train; None trains nothing, as in ONNX Runtime (eval-only
      artifacts; with an optimizer it is refused, where ONNX Runtime fails with an IndexError). Initializers
      that are not floating-point, or that no gradient reaches (a dropout ratio), are left out, named in
      ``notes`` and ``left_out``: code that lists every initializer of a model ports as it is.
    - ``frozen_params``: initializers kept in the checkpoint, not trained. Names that are no initializer (a
      buffer the exporter computes) and initializers that are not floating-point are left as they are (the
      graphs keep them as constants), as ONNX Runtime leaves them untrained; ``notes`` says which.
    - ``ort_format`` and ``custom_op_library`` are refused: ort_cffi loads ONNX files and no custom-op library.
    - ``extra_options``: ONNX Runtime 1.15 and 1.16 took the options after ``artifact_directory`` as keywords
      of ``**extra_options`` and passed over the ones they did not know; code written then (Microsoft's iOS
      example passes ``artifacts_dir=``) ports: ``artifacts_dir`` is taken for ``artifact_directory``, with a
      note; any other name is a TypeError, as in ONNX Runtime 1.19.

    Existing artifacts in the folder are replaced, as ONNX Runtime replaces them. Returns what was written
    (ONNX Runtime returns None). Raises ``ArtifactsInputError`` (a ValueError) for what cannot be trained,
    RuntimeError where ONNX Runtime raises it (a parameter both trained and frozen, a model of another type).
    """
    notes: List[str] = []
    if "artifacts_dir" in extra_options:
        if artifact_directory is not None:
            raise TypeError("generate_artifacts() got artifact_directory and artifacts_dir (ONNX Runtime 1.15's "
                            "spelling of it): pass one")
        artifact_directory = extra_options.pop("artifacts_dir")
        notes.append("artifacts_dir= taken for artifact_directory= (ONNX Runtime 1.15's generator passed it over)")
    if extra_options:
        raise TypeError(f"generate_artifacts() got unexpected keyword argument(s) {', '.join(sorted(extra_options))}")
    if ort_format:
        raise NotImplementedError("ort_format=True: ort_cffi trains from ONNX files and writes no ORT-format "
                                  "models; generate with ort_format=False (the ONNX files load in every runtime)")
    if custom_op_library is not None:
        raise NotImplementedError(f"custom_op_library={os.fsdecode(custom_op_library)!r}: ort_cffi's gradient builder "
                                  "and sessions load no custom-op libraries; build the model from standard operators")
    if requires_grad is not None and frozen_params is not None and set(requires_grad) & set(frozen_params):
        raise RuntimeError("A parameter cannot be frozen and require gradient computation at the same time "
                           f"{set(requires_grad) & set(frozen_params)}")
    if additional_output_names is not None and not isinstance(additional_output_names, list):
        raise RuntimeError(f"Unknown type provided for additional output names {type(additional_output_names)}. "
                           "Expected additional output names to be a list of strings.")
    source, path = _model(model)
    if requires_grad is None:  # ONNX Runtime's default: nothing is trained
        if optimizer is not None:
            raise ArtifactsInputError("requires_grad=None trains nothing (ONNX Runtime's default), and an optimizer "
                                      "model needs trainable parameters: name them in requires_grad")
        notes.append("requires_grad=None: nothing is trained, as in ONNX Runtime")
        requires_grad = []
    requires_grad = _trainable(source, list(requires_grad), notes)
    frozen = None if frozen_params is None else _frozen(source, list(frozen_params), notes)
    optimizer_name, optimizer_block = _optimizer(optimizer)
    if isinstance(loss, blocks.Block):
        _log.info("Custom loss block provided: %s", type(loss).__name__)
        full = onnx.load(path) if path is not None else source  # the block's model is handed over whole
        stacked = stack_loss(full, loss, loss_input_names, additional_output_names, path)
        made = _generate(stacked, requires_grad, frozen, None, optimizer_name, _folder(artifact_directory), prefix,
                         additional_output_names=[], nominal_checkpoint=nominal_checkpoint, overwrite=True)
    else:
        loss_name = _loss(loss)
        target: Any = path if path is not None else source
        kept = list(additional_output_names or [])
        made = _generate(target, requires_grad, frozen, loss_name, optimizer_name, _folder(artifact_directory), prefix,
                         additional_output_names=kept if loss_name is not None or kept else None,
                         nominal_checkpoint=nominal_checkpoint, loss_input_names=loss_input_names, overwrite=True)
    if optimizer_block is not None:
        _write_optimizer_block(made, optimizer_block, prefix)
        notes.append(f"optimizer_model.onnx written by {type(optimizer_block).__name__} with its own settings")
    for note in notes:
        _log.info(note)
    return dataclasses.replace(made, notes=made.notes + tuple(notes)) if notes else made


def _model(model: Any) -> Tuple[onnx.ModelProto, Optional[str]]:
    """The model (its external data left on disk) and the path it came from."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    if isinstance(model, (str, os.PathLike)):
        path = os.fsdecode(os.fspath(model))
        if not os.path.isfile(path):
            raise ArtifactsInputError(f"model {path!r} does not exist")
        return onnx.load(path, load_external_data=False), path
    raise RuntimeError("Please pass in either a string or an ONNX ModelProto for the model.")


def _folder(directory: Any) -> Optional[str]:
    return None if directory is None else os.fsdecode(directory)


def _exactly(name: str) -> str:
    """A pattern that matches ``name`` alone: a pattern (unlike a plain name) may match a tensor no gradient
    reaches, which is then left out rather than refused."""
    escaped = glob.escape(name)
    return escaped if escaped != name else f"[{name[0]}]{glob.escape(name[1:])}"


def _trainable(model: onnx.ModelProto, names: Sequence[str], notes: List[str]) -> List[str]:
    """``requires_grad`` as ort_cffi's generator takes it from a port: initializers that are not floating-point
    are left out (code that lists every initializer lists the exporter's int64 shapes too), and the others are
    asked for as patterns, so that one no gradient reaches (a dropout ratio) is left out (``left_out``) where a
    plain name would be refused. Other names (torch's names of renamed parameters) go as they are."""
    initializers = {i.name: i for i in model.graph.initializer}
    kept, skipped = [], []
    for name in names:
        initializer = initializers.get(name)
        if initializer is not None and initializer.data_type not in _FLOAT_TYPES:
            skipped.append(f"{name} ({onnx.TensorProto.DataType.Name(initializer.data_type).lower()})")
        else:
            kept.append(_exactly(name) if initializer is not None else name)
    if skipped:
        notes.append(f"requires_grad: {', '.join(skipped)}: not floating-point; kept as constants of the graphs")
    return kept


def _frozen(model: onnx.ModelProto, names: Sequence[str], notes: List[str]) -> List[str]:
    """The names of ``frozen_params`` that freeze a floating-point initializer; the others noted."""
    initializers = {i.name: i for i in model.graph.initializer}
    kept, buffers, constants = [], [], []
    for name in names:
        initializer = initializers.get(name)
        if initializer is None and any(c in name for c in "*?[") and any(
                fnmatch.fnmatchcase(n, name) for n in initializers):
            kept.append(name)  # a pattern, as ort_cffi's generator takes them
        elif initializer is None:
            buffers.append(name)
        elif initializer.data_type not in _FLOAT_TYPES:
            constants.append(f"{name} ({onnx.TensorProto.DataType.Name(initializer.data_type).lower()})")
        else:
            kept.append(_exactly(name) if any(c in name for c in "*?[") else name)
    if buffers:
        notes.append(f"frozen_params: {', '.join(buffers)}: no initializer of the model (a value it computes); "
                     "nothing to freeze")
    if constants:
        notes.append(f"frozen_params: {', '.join(constants)}: not floating-point; kept as constants of the graphs")
    return kept


def _loss(loss: Any) -> Optional[str]:
    if loss is None:
        return None
    name = getattr(loss, "name", None)  # this LossType, ort_cffi.artifacts' or ONNX Runtime's
    if isinstance(loss, enum.Enum) and name in LossType.__members__:
        return str(name)
    raise RuntimeError(f"Unknown loss provided {type(loss)}. Expected loss to be either one of "
                       "ort_cffi.training.artifacts.LossType or ort_cffi.onnxblock.Block.")


def _optimizer(optimizer: Any) -> Tuple[Optional[str], Optional[blocks.Block]]:
    """The optimizer's name for ort_cffi's generator, and the block that writes the optimizer model instead
    where its settings are not the defaults (None where the generator's own model is that block's)."""
    if optimizer is None:
        return None, None
    name = getattr(optimizer, "name", None)
    if isinstance(optimizer, enum.Enum) and name in OptimType.__members__:
        return str(name), None
    for kind, block_name in ((optim.AdamW, "AdamW"), (optim.SGD, "SGD")):
        if isinstance(optimizer, kind):
            return block_name, None if _default_settings(optimizer) else optimizer
    if isinstance(optimizer, blocks.Block):
        raise NotImplementedError(
            f"optimizer {type(optimizer).__name__}: ONNX Runtime's training session runs the AdamW and SGD "
            "optimizer models; pass onnxblock.optim.AdamW(...) or onnxblock.optim.SGD(...), or an OptimType")
    raise TypeError(f"Unknown optimizer provided {type(optimizer)}. Expected optimizer to be either one of "
                    "ort_cffi.training.artifacts.OptimType or ort_cffi.onnxblock.Block.")


def _default_settings(block: blocks.Block) -> bool:
    if type(block) not in (optim.AdamW, optim.SGD) or getattr(block, "_clip_grad", None) is not None:
        return False
    if isinstance(block, optim.SGD):
        return True
    settings = vars(getattr(block, "_adamw"))
    return (settings["_bias_correction"], tuple(settings["_betas"]), settings["_eps"], settings["_weight_decay"]) == (
        True, (0.9, 0.999), 1e-6, 0.0)


def _write_optimizer_block(made: GeneratedArtifacts, block: blocks.Block, prefix: str) -> None:
    """Write ``block``'s optimizer model over the one generated, and record its digest in ``artifacts.json``
    (the files stay intact to ``ort_cffi.artifacts.files_intact``)."""
    path = made.optimizer_model
    if path is None or not made.trainable:
        raise RuntimeError("an optimizer model needs trainable parameters")
    like = onnx.TensorProto(name=made.trainable[0].name,
                            data_type=helper.np_dtype_to_tensor_dtype(np.dtype(made.trainable[0].dtype)))
    with model_accessor.empty_base(opset_version=min(made.model_opset or _MAX_OPSET, _MAX_OPSET)):
        block(([like], []))
        written = block.to_model_proto()  # type: ignore[attr-defined]
    written.ir_version = min(written.ir_version, model_accessor.MAX_IR_VERSION)
    atomic_write(str(path), lambda tmp: onnx.save(written, tmp), "optimizer model")
    manifest = read_manifest(made.folder, prefix)
    if manifest is not None and isinstance(manifest.get("files"), dict) and "optimizer_model" in manifest["files"]:
        manifest["files"]["optimizer_model"]["sha256"] = file_sha256(path)
        manifest["optimizer_block"] = type(block).__name__
        def write_manifest(tmp: str) -> None:
            Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n")

        atomic_write(str(made.folder / (prefix + MANIFEST)), write_manifest, "artifacts manifest")
