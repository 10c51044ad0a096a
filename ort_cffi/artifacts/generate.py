"""``generate_artifacts``: ONNX Runtime's ``onnxruntime.training.artifacts.generate_artifacts``, default for
default and argument for argument, on ort_cffi's own gradient builder, with ort_cffi's options as keywords.

ONNX Runtime's defaults: ``requires_grad=None`` trains nothing, ``loss=None`` (the model's first output is the
loss), ``optimizer=None`` (no optimizer model), ``additional_output_names=None`` (the loss alone). ort_cffi's
conveniences are asked for explicitly: ``requires_grad=ALL_PARAMETERS``, ``loss="cross-entropy"``,
``optimizer="adamw"``, ``additional_output_names=MODEL_OUTPUTS`` (the commands, the trainer and Flower pass
them; docs/guides/artifacts.md). The files are written by ``writer``, the options in their normal form.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ort_cffi._facade.files import atomic_write, file_sha256
from ort_cffi.artifacts.definitions import (
    ArtifactsInputError,
    GeneratedArtifacts,
    LossType,
    ModelLike,
    OptimType,
    Selection,
)
from ort_cffi.artifacts.manifest import MANIFEST, read_manifest
from ort_cffi.artifacts.options import confine_external_data, enum_option, model_bytes_or_path

from ort_cffi.artifacts.writer import write_artifacts

_log = logging.getLogger(__name__)
_MAX_OPSET = 21  # the newest default-domain opset ONNX Runtime 1.19 knows

Names = Optional[Union[str, Iterable[str], Selection]]


def generate_artifacts(
    model: ModelLike,
    requires_grad: Names = None,
    frozen_params: Optional[Union[str, Iterable[str]]] = None,
    loss: Any = None,
    optimizer: Any = None,
    artifact_directory: Optional[Union[str, bytes, "os.PathLike[str]"]] = None,
    prefix: str = "",
    ort_format: bool = False,
    custom_op_library: Optional[Union[str, bytes, "os.PathLike[str]"]] = None,
    additional_output_names: Names = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[Union[str, Iterable[str]]] = None,
    *,
    python: Optional[Union[str, "os.PathLike[str]"]] = None,
    check: bool = True,
    overwrite: bool = True,
    prepare: bool = True,
    generator: Optional[str] = None,
    class_axis: Optional[int] = None,
    external_data_anywhere: bool = False,
    frozen_rows: Optional[Mapping[str, Union[int, Iterable[int]]]] = None,
    standard_forms: bool = True,
    **extra_options: Any,
) -> GeneratedArtifacts:
    """Write the training artifacts of ``model`` into ``artifact_directory`` (created if missing; default: the
    current folder): ``checkpoint``, ``training_model.onnx``, ``eval_model.onnx``, ``optimizer_model.onnx``
    (with an optimizer), and ``artifacts.json`` (what they were made from). Returns what was written and made
    trainable (ONNX Runtime returns None).

    The arguments and their defaults are ONNX Runtime's (``onnxruntime.training.artifacts``): code written for
    it ports with the import changed. ort_cffi's own gradient builder does the work, in this process.

    - ``model``: a path, bytes or an ``onnx.ModelProto``. A model saved by a newer ``onnx`` (IR version above
      10, opset above 21) is brought down to what ONNX Runtime 1.19 accepts, or refused with a reason.
    - ``requires_grad``: the initializers to train, by name; ort_cffi also takes glob patterns (``"fc2.*"``)
      and the torch names of parameters torch's default exporter renamed. Default None: nothing is trained,
      as in ONNX Runtime (eval-only artifacts; with an optimizer it is refused). ``ALL_PARAMETERS`` (ort_cffi's
      former default): every floating-point initializer a gradient reaches, less ``frozen_params``. A named
      initializer that is not floating-point is passed over with a note (``notes``); one no gradient reaches
      (a dropout ratio) is left out (``left_out``). A floating-point Constant node that a name or pattern
      matches becomes a parameter (weights some exporters write as Constant nodes; a note says which).
    - ``frozen_params``: initializers kept in the checkpoint, not trained (the others stay constants of the
      graphs). Names ONNX Runtime passes over are passed over, with a note naming them: a name that is no
      initializer (a buffer the model computes), an initializer that is not floating-point.
    - ``loss``: None (default: the model's outputs are kept and the first is the loss), a ``LossType``
      (``LossType.CrossEntropyLoss``, ``LossType(2)``, or ort_cffi's name: ``"cross-entropy"`` adds an int64
      ``labels`` input; ``"mse"``, ``"bce-with-logits"``, ``"l1"`` add a ``target`` input like the output), or an
      ``onnxblock.Block`` called on the model's outputs (or ``loss_input_names``), whose first output is the loss.
    - ``optimizer``: None (default: no optimizer model), an ``OptimType`` (or ``"adamw"``, ``"sgd"``), or
      ``onnxblock.optim.AdamW(...)`` / ``onnxblock.optim.SGD(...)``, whose settings write the optimizer model.
    - ``additional_output_names``: outputs the training and eval models give after the loss; None (default):
      the loss alone. ``MODEL_OUTPUTS`` (ort_cffi's former default): the model's own outputs, so that an
      inference model can be exported from the eval model and accuracy read.
    - ``loss_input_names``: the output the loss reads (needed when the model has several), and optionally the
      name of the input the loss adds.
    - ``nominal_checkpoint``: also write ``nominal_checkpoint`` (shapes only). ``prefix``: file-name prefix.
    - ``ort_format`` and ``custom_op_library`` are refused (NotImplementedError): ort_cffi trains from ONNX
      files, and its builder and sessions load no custom-op library.
    - ``artifacts_dir=``: ONNX Runtime 1.15's keyword for ``artifact_directory`` (its iOS example passes it),
      taken with a note; any other unknown keyword is a TypeError.

    ort_cffi's options, keywords only:

    - ``generator``: ``"ort_cffi"`` (its own builder, the default) or ``"onnxruntime"`` (ONNX Runtime's own
      generator, in a child process; the default when ``python`` is given). ``python``: the interpreter that runs
      it (default ``$ORT_CFFI_ARTIFACTS_PYTHON``, else this one; it needs ``onnxruntime-training-cpu==1.19.2``).
    - ``class_axis``: the axis of the scores that holds the classes, for cross-entropy (default: found from the
      operator that computes them).
    - ``frozen_rows``: {parameter: row indices along its first axis} that training leaves as they are while the
      rest trains: an embedding's padding row (docs/guides/models.md). ort_cffi's builder only.
    - ``standard_forms`` (True): where ONNX Runtime's training kernel of an operator is measured slower than the
      operator written in standard ONNX operators (the LSTM and GRU backward, the embedding's gradient; the
      table ``ort_cffi/data/standard_forms.json``, docs/guides/performance.md), ort_cffi's builder writes that
      form; losses then agree with ONNX Runtime's artifacts within float32 rounding, not bit for bit. False:
      ONNX Runtime's kernels everywhere, the training model its generator writes. ort_cffi's builder only.
    - ``check`` (True): check that the artifacts load in the runtime, over a nominal checkpoint, and hold the
      checkpoint against the training model (a few MiB, not the parameters; docs/guides/performance.md).
    - ``overwrite`` (True, as ONNX Runtime replaces them): False refuses a folder whose ``artifacts.json``
      records another model or other options, or that holds artifact files no ``artifacts.json`` describes.
    - ``prepare`` (True): fit what would train wrongly first (the loss's reading, BatchNorm's running
      statistics; for ONNX Runtime's generator its missing gradients), listed in ``preparation``.
    - ``external_data_anywhere`` (False): a model's external data must be a regular file inside its folder
      (docs/guides/guarantees.md); True lets a trusted model's data lie anywhere.

    ort_cffi's former convenience, asked for: ``generate_artifacts(model, ALL_PARAMETERS, loss="cross-entropy",
    optimizer="adamw", additional_output_names=MODEL_OUTPUTS, artifact_directory=...)``.

    Raises ArtifactsInputError (a ValueError) naming what was wrong with the model or the options,
    GeneratorUnavailableError when no interpreter can run ONNX Runtime's generator, ArtifactsError when the
    generator fails or its output does not load, TypeError for arguments of the wrong type, RuntimeError where
    ONNX Runtime raises it (a parameter both trained and frozen, additional_output_names not a list).
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
    if isinstance(requires_grad, Selection) and requires_grad is not Selection.ALL_PARAMETERS:
        raise TypeError(f"requires_grad={requires_grad!r}: ALL_PARAMETERS is the selection it takes")
    if isinstance(additional_output_names, Selection) and additional_output_names is not Selection.MODEL_OUTPUTS:
        raise TypeError(f"additional_output_names={additional_output_names!r}: MODEL_OUTPUTS is the selection it takes")
    if (isinstance(requires_grad, (list, tuple)) and isinstance(frozen_params, (list, tuple))
            and set(requires_grad) & set(frozen_params)):
        raise RuntimeError("A parameter cannot be frozen and require gradient computation at the same time "
                           f"{set(requires_grad) & set(frozen_params)}")
    if additional_output_names is not None and not isinstance(additional_output_names, (list, tuple, Selection)):
        raise RuntimeError(f"Unknown type provided for additional output names {type(additional_output_names)}. "
                           "Expected additional output names to be a list of strings.")
    if not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview)) and type(model).__name__ != "ModelProto":
        raise RuntimeError("Please pass in either a string or an ONNX ModelProto for the model (ort_cffi also takes "
                           f"a path or the model's bytes), not {type(model).__name__}")
    trained: Any = requires_grad
    if requires_grad is None:  # ONNX Runtime's default: nothing is trained
        if optimizer is not None:
            raise ArtifactsInputError("requires_grad=None trains nothing (ONNX Runtime's default), and an optimizer "
                                      "model needs trainable parameters: name them in requires_grad, or pass "
                                      "ort_cffi.artifacts.ALL_PARAMETERS to train every parameter")
        notes.append("requires_grad=None: nothing is trained, as in ONNX Runtime")
        trained = []
    elif requires_grad is Selection.ALL_PARAMETERS:
        trained = None  # the normal form's "every parameter"
    optimizer_name, optimizer_block = _optimizer(optimizer)
    folder = None if artifact_directory is None else os.fsdecode(artifact_directory)
    keywords: Dict[str, Any] = dict(nominal_checkpoint=nominal_checkpoint, python=python, check=check, overwrite=overwrite,
                    prepare=prepare, generator=generator, class_axis=class_axis,
                    external_data_anywhere=external_data_anywhere, frozen_rows=frozen_rows,
                    standard_forms=standard_forms)
    if callable(getattr(loss, "build", None)):  # an onnxblock.Block: a custom loss, stacked on the model
        _log.info("Custom loss block provided: %s", type(loss).__name__)
        stacked = _with_loss_block(model, loss, loss_input_names, additional_output_names, external_data_anywhere)
        made = write_artifacts(stacked, trained, frozen_params, None, optimizer_name, folder, prefix,
                               additional_output_names=[], loss_input_names=None, **keywords)
    else:
        loss_name = _loss(loss)
        if additional_output_names is Selection.MODEL_OUTPUTS:
            outputs: Any = None  # the normal form's "the model's outputs"
        else:  # with no loss the model's outputs are kept anyway (its first is the loss), as in ONNX Runtime
            outputs = list(additional_output_names or ())  # type: ignore[arg-type]  # a list here
            outputs = outputs if loss_name is not None or outputs else None
        made = write_artifacts(model, trained, frozen_params, loss_name, optimizer_name, folder, prefix,
                               additional_output_names=outputs, loss_input_names=loss_input_names, **keywords)
    if optimizer_block is not None:
        _write_optimizer_block(made, optimizer_block, prefix)
        notes.append(f"optimizer_model.onnx written by {type(optimizer_block).__name__} with its own settings")
    for note in made.notes + tuple(notes):
        _log.info(note)
    return dataclasses.replace(made, notes=made.notes + tuple(notes)) if notes else made


def _with_loss_block(model: ModelLike, block: Any, loss_input_names: Any, additional_output_names: Any,
                     external_data_anywhere: bool) -> Any:
    """``model`` with the loss block stacked on its outputs (``ort_cffi.onnxblock.stacking``): its outputs are
    the block's, then ``additional_output_names`` (``MODEL_OUTPUTS``: the model's own outputs). The model's
    external data is held to the same rules as for any generation before any of it is read."""
    import onnx

    from ort_cffi.onnxblock.blocks import Block
    from ort_cffi.onnxblock.stacking import stack_loss

    if not isinstance(block, Block):
        raise TypeError(f"loss {type(block).__name__} has a build method but is no onnxblock.Block")
    path, data, label = model_bytes_or_path(model)
    confine_external_data(path, data, label, external_data_anywhere)
    loaded = onnx.load(str(path)) if path is not None else onnx.load_from_string(data or b"")
    if additional_output_names is Selection.MODEL_OUTPUTS:
        kept = [o.name for o in loaded.graph.output]
    else:
        kept = list(additional_output_names or [])
    reads = [loss_input_names] if isinstance(loss_input_names, str) else loss_input_names
    return stack_loss(loaded, block, reads, kept, None if path is None else str(path))


def _loss(loss: Any) -> Optional[str]:
    """The loss's name for the writer: a LossType (this one or ONNX Runtime's), its value or ort_cffi's name.
    Anything else is ONNX Runtime's RuntimeError."""
    try:
        chosen = enum_option(loss, LossType, "loss")
    except ArtifactsInputError:
        names = ", ".join(repr(m.option) for m in LossType)
        raise RuntimeError(f"Unknown loss provided {loss!r}. Expected loss to be either one of "
                           f"ort_cffi.artifacts.LossType (or ort_cffi's names: {names}) or "
                           "ort_cffi.onnxblock.Block.") from None
    return None if chosen is None else str(chosen.name)


def _optimizer(optimizer: Any) -> Tuple[Optional[str], Any]:
    """The optimizer's name for the writer, and the block that writes the optimizer model instead where its
    settings are not the defaults (None where the writer's own model is that block's)."""
    if optimizer is None or isinstance(optimizer, (str, int, enum.Enum)):
        try:
            chosen = enum_option(optimizer, OptimType, "optimizer")
        except ArtifactsInputError:
            names = ", ".join(repr(m.option) for m in OptimType)
            raise RuntimeError(f"Unknown optimizer provided {optimizer!r}. Expected optimizer to be either one of "
                               f"ort_cffi.artifacts.OptimType (or ort_cffi's names: {names}) or "
                               "ort_cffi.onnxblock.Block.") from None
        return (None if chosen is None else str(chosen.name)), None
    if not callable(getattr(optimizer, "build", None)):
        raise TypeError(f"Unknown optimizer provided {type(optimizer)}. Expected optimizer to be either one of "
                        "ort_cffi.artifacts.OptimType or ort_cffi.onnxblock.Block.")
    from ort_cffi.onnxblock import optim

    for kind, block_name in ((optim.AdamW, "AdamW"), (optim.SGD, "SGD")):
        if isinstance(optimizer, kind):
            return block_name, None if _default_settings(optimizer) else optimizer
    raise NotImplementedError(
        f"optimizer {type(optimizer).__name__}: ONNX Runtime's training session runs the AdamW and SGD "
        "optimizer models; pass onnxblock.optim.AdamW(...) or onnxblock.optim.SGD(...), or an OptimType")


def _default_settings(block: Any) -> bool:
    from ort_cffi.onnxblock import optim

    if type(block) not in (optim.AdamW, optim.SGD) or getattr(block, "_clip_grad", None) is not None:
        return False
    if isinstance(block, optim.SGD):
        return True
    settings = vars(getattr(block, "_adamw"))
    return (settings["_bias_correction"], tuple(settings["_betas"]), settings["_eps"], settings["_weight_decay"]) == (
        True, (0.9, 0.999), 1e-6, 0.0)


def _write_optimizer_block(made: GeneratedArtifacts, block: Any, prefix: str) -> None:
    """Write ``block``'s optimizer model over the one generated, and record its digest in ``artifacts.json``
    (the files stay intact to ``ort_cffi.artifacts.files_intact``)."""
    import numpy as np
    import onnx
    from onnx import helper

    from ort_cffi.onnxblock import model_accessor

    path = made.optimizer_model
    if path is None or not made.trainable:
        raise RuntimeError("an optimizer model needs trainable parameters")
    like = onnx.TensorProto(name=made.trainable[0].name,
                            data_type=helper.np_dtype_to_tensor_dtype(np.dtype(made.trainable[0].dtype)))
    with model_accessor.empty_base(opset_version=min(made.model_opset or _MAX_OPSET, _MAX_OPSET)):
        block(([like], []))
        written = block.to_model_proto()
    written.ir_version = min(written.ir_version, model_accessor.MAX_IR_VERSION)
    atomic_write(str(path), lambda tmp: onnx.save(written, tmp), "optimizer model")
    manifest = read_manifest(made.folder, prefix)
    if manifest is not None and isinstance(manifest.get("files"), dict) and "optimizer_model" in manifest["files"]:
        manifest["files"]["optimizer_model"]["sha256"] = file_sha256(path)
        manifest["optimizer_block"] = type(block).__name__

        def write_manifest(tmp: str) -> None:
            Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n")

        atomic_write(str(made.folder / (prefix + MANIFEST)), write_manifest, "artifacts manifest")
