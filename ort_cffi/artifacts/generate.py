"""Training artifacts for any ONNX model, without torch: ``generate_artifacts`` mirrors ONNX Runtime's
``onnxruntime.training.artifacts.generate_artifacts`` with Pythonic defaults.

From an inference model it writes the four files a training session needs: ``checkpoint`` (the
parameters), ``training_model.onnx`` (forward, loss and gradient graphs), ``eval_model.onnx`` (forward and
loss) and ``optimizer_model.onnx``, plus ``artifacts.json``, which records what they were made from.

ort_cffi's own gradient builder (``builder/``) does the work by default, in this process, with ``onnx`` only
(ort_cffi's ``[artifacts]`` extra), on every interpreter; its checkpoint, eval and optimizer models are ONNX
Runtime's files byte for byte, and its training model trains bit-identically wherever ONNX Runtime's generator
would emit the same gradient kernels. ``generator="onnxruntime"`` runs ONNX Runtime's own generator instead,
in a child process (``_child.py``), with the package inits that import torch bypassed: it needs ONNX Runtime's
Python training layer (``[onnxruntime-generator]``), the training wheel's on Python 3.8-3.12, on 3.13 the one
``ort-cffi-runtime install`` keeps in the runtime store, run by this same interpreter (``runner``); ``python=``
or ``ORT_CFFI_ARTIFACTS_PYTHON`` name another interpreter.

This is an application on top of the facade: it uses ``OrtEnvironment`` only to check that what it wrote
loads in the runtime.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

from ort_cffi import OrtException, RuntimeLoadError, __version__
from ort_cffi._facade import denormals
from ort_cffi._facade.files import atomic_write, file_sha256
from ort_cffi.artifacts.definitions import (
    ArtifactsError,
    ArtifactsInputError,
    GeneratedArtifacts,
    LossType,
    ModelLike,
    OptimType,
    Parameter,
    TensorSpec,
)
from ort_cffi.artifacts.load_check import checkpoint_mismatch
from ort_cffi.artifacts.manifest import MANIFEST, read_manifest
from ort_cffi.artifacts.options import (
    ONNX_RUNTIME,
    confine_external_data,
    model_bytes_or_path,
    request_options,
    writable_folder,
)
from ort_cffi.artifacts.runner import find_generator, run_child, run_here

_FILE_NAMES = {
    "checkpoint": "checkpoint",
    "training_model": "training_model.onnx",
    "eval_model": "eval_model.onnx",
    "optimizer_model": "optimizer_model.onnx",
    "nominal_checkpoint": "nominal_checkpoint",
}


def _check_loads(files: Dict[str, Path]) -> None:
    """Check the artifacts as a trainer will meet them, at a cost far below training's: what the runtime
    refuses fails here.

    Opening them as they are would load the checkpoint (the runtime reads the file whole, then copies each
    tensor out of it: twice the parameters), allocate the gradients and the optimizer's two moments: 4.3x
    the model's size in peak memory on a 100M-parameter model, more than checking should ever take on a
    device (docs/guides/performance.md). So the runtime opens the training, eval and optimizer models over the
    shapes-only nominal checkpoint, which holds the same names, element types and trainable flags (no
    parameter is allocated there), and the real checkpoint is then held against what the training model
    declares, read through a memory map (only its tables are touched): the same names, trainable flags,
    element types, shapes and data sizes."""
    from ort_cffi import OrtCheckpointState, OrtEnvironment, OrtLoggingLevel, SessionOptions

    try:
        env = OrtEnvironment.getEnvironment()
    except RuntimeLoadError as exc:
        reason = re.sub(r"[.:]?\s*Tried:$", "", str(exc).splitlines()[0])
        raise ArtifactsError(
            f"cannot check the generated artifacts: ONNX Runtime does not load in this interpreter "
            f"({reason}); nothing was written. Generate them with check=False (--no-check) to "
            "skip the check, and check them where they will train"
        ) from None
    try:
        with SessionOptions() as options:  # errors only: the runtime warns about unused initializers and such
            options.setSessionLogLevel(OrtLoggingLevel.ORT_LOGGING_LEVEL_ERROR)
            denormals.apply(options)  # an application that flushes does so from its first session on
            with OrtCheckpointState.loadCheckpoint(files["nominal_checkpoint"]) as nominal:
                with env.createTrainingSession(nominal, files["training_model"], files["eval_model"],
                                               files.get("optimizer_model"), options):
                    pass
    except OrtException as exc:
        raise ArtifactsError(f"the generated artifacts do not load in ONNX Runtime {env.getVersion()}: {exc}") from None
    problem = checkpoint_mismatch(files["checkpoint"], files["nominal_checkpoint"], files["training_model"])
    if problem is not None:
        raise ArtifactsError(f"the generated artifacts do not load in ONNX Runtime {env.getVersion()}: {problem}")


def _refuse_other_artifacts(folder: Path, prefix: str, options: Dict[str, Any], model_sha: str) -> None:
    """Artifacts are a user's results too: generating into a folder that holds those of another model, or
    of other options, would replace them unasked. The same model with the same options may be generated
    again (it gives the same bytes)."""
    manifest = read_manifest(folder, prefix)
    if manifest is None:
        found = [prefix + name for name in _FILE_NAMES.values() if (folder / (prefix + name)).exists()]
        if found:
            raise ArtifactsInputError(
                f"artifacts folder {str(folder)!r} holds {', '.join(found)}, which no {prefix + MANIFEST} describes: "
                "they are not replaced unless asked. Pass overwrite=True (--overwrite) to replace them, or write "
                "the artifacts to another folder")
        return
    recorded: Dict[str, Any] = manifest["model"] if isinstance(manifest.get("model"), dict) else {}
    stored: Dict[str, Any] = manifest["options"] if isinstance(manifest.get("options"), dict) else {}
    if recorded.get("sha256") != model_sha:
        what = f"another model ({recorded.get('path') or 'one given as bytes'})"
    else:
        changed = [f"{key} {stored.get(key)!r} -> {options.get(key)!r}" for key in sorted(set(options) | set(stored))
                   if stored.get(key) != options.get(key)]
        if not changed:
            return
        what = f"the same model with other options ({'; '.join(changed)})"
    raise ArtifactsInputError(
        f"artifacts folder {str(folder)!r} holds the artifacts of {what}: they are not replaced unless asked. "
        "Pass overwrite=True (--overwrite) to replace them, or write the artifacts to another folder")


def _parameters(records: Sequence[Dict[str, Any]]) -> Tuple[Parameter, ...]:
    return tuple(Parameter(r["name"], r["dtype"], tuple(r["shape"]), r["size"], r.get("module_name")) for r in records)


def _specs(records: Sequence[Dict[str, Any]]) -> Tuple[TensorSpec, ...]:
    return tuple(TensorSpec(r["name"], r["dtype"], None if r["shape"] is None else tuple(r["shape"])) for r in records)


def generate_artifacts(
    model: ModelLike,
    requires_grad: Optional[Union[str, Iterable[str]]] = None,
    frozen_params: Optional[Union[str, Iterable[str]]] = None,
    loss: Any = LossType.CrossEntropyLoss,
    optimizer: Any = OptimType.AdamW,
    artifact_directory: Optional[Union[str, os.PathLike[str]]] = None,
    prefix: str = "",
    *,
    additional_output_names: Optional[Union[str, Iterable[str]]] = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Optional[Union[str, Iterable[str]]] = None,
    python: Optional[Union[str, os.PathLike[str]]] = None,
    check: bool = True,
    overwrite: bool = False,
    prepare: bool = True,
    generator: Optional[str] = None,
    class_axis: Optional[int] = None,
    external_data_anywhere: bool = False,
    frozen_rows: Optional[Mapping[str, Union[int, Iterable[int]]]] = None,
) -> GeneratedArtifacts:
    """Write the training artifacts of ``model`` into ``artifact_directory`` (created if missing; default:
    the current folder) and return what was written and made trainable.

    ort_cffi's own gradient builder does the work, in this process (``generator``, below). The parameters are
    those of ONNX Runtime's ``onnxruntime.training.artifacts.generate_artifacts``, with these defaults and
    additions:

    - ``model``: a path, bytes or an ``onnx.ModelProto``. A model saved by a newer ``onnx`` (IR version
      above 10, opset above 21) is brought down to what ONNX Runtime 1.19 accepts, or refused with a reason.
    - ``requires_grad``: names or glob patterns (``"fc2.*"``) of the initializers to train; default: every
      floating-point initializer that a gradient reaches, less ``frozen_params``. Patterns skip tensors no
      gradient reaches (a dropout ratio, batch-norm statistics; listed in ``left_out``); a plain name of
      one is refused. A floating-point Constant node that a name or pattern matches becomes a parameter
      (weights some exporters write as Constant nodes; a note says which).
    - ``frozen_params``: names or patterns of parameters kept in the checkpoint but not trained. Other
      initializers stay constants of the graphs.
    - ``loss``: ``LossType`` or its value: ``"cross-entropy"`` (default; adds an int64 ``labels`` input),
      ``"mse"``, ``"bce-with-logits"``, ``"l1"`` (these add a ``target`` input like the output); None when
      the model's first output already is the loss; or an ``ort_cffi.onnxblock.Block``, a custom loss called
      on the model's outputs (or ``loss_input_names``), whose first output is the loss.
    - ``optimizer``: ``"adamw"`` (default), ``"sgd"``, or None for no optimizer model.
    - ``additional_output_names``: outputs the training and eval models give next to the loss; default (None):
      the model's own outputs, so that an inference model can be exported from the eval model. ``[]``: none.
    - ``loss_input_names``: the output the loss reads (needed when the model has several), and optionally
      the name of the input the loss adds.
    - ``nominal_checkpoint``: also write ``nominal_checkpoint`` (shapes only). ``prefix``: file-name prefix.
    - ``generator``: ``"ort_cffi"`` (its own builder, the default) or ``"onnxruntime"`` (ONNX Runtime's own
      generator, in a child process; the default when ``python`` is given).
    - ``python``: the interpreter that runs ONNX Runtime's generator (default ``$ORT_CFFI_ARTIFACTS_PYTHON``,
      else this one); it needs ``onnxruntime-training-cpu==1.19.2`` and ``onnx``. This one, on Python 3.13,
      uses the Python layer of the runtime ``ort-cffi-runtime install`` fetched.
    - ``class_axis``: the axis of the scores that holds the classes, for cross-entropy (default: found from the
      operator that computes them); recorded with the options.
    - ``frozen_rows``: {parameter: row indices along its first axis} that training leaves as they are, while
      the rest of the parameter trains: an embedding's padding row (``nn.Embedding(padding_idx=k)``, which the
      export does not record; docs/guides/models.md). ort_cffi's builder only; recorded with the options.
    - ``check``: check that the written artifacts load, through ort_cffi (needs the runtime here): the runtime
      opens the training, eval and optimizer models over a nominal checkpoint (made for the check, kept only
      when asked), and the checkpoint is held against the training model's parameters (names, trainable flags,
      element types, shapes, sizes). It costs a few MiB, not the parameters (docs/guides/performance.md).
    - ``overwrite``: replace artifacts of another model or other options. Without it, a folder whose
      ``artifacts.json`` records another model or other options, or that holds artifact files no
      ``artifacts.json`` describes, is refused before anything is written; generating the same model with
      the same options again is allowed.
    - ``prepare``: fit what would train wrongly first (the loss's reading, BatchNorm's running statistics;
      for ONNX Runtime's generator also its missing gradients, ``ort_cffi.artifacts.rewrites``); listed in
      ``preparation`` and ``artifacts.json``. A model that needs nothing is handed over unchanged. False:
      every model as it is.
    - ``external_data_anywhere``: by default a model's external data must be a regular file inside the
      model's folder (symlinks resolved), within the file's size, and a model given as bytes may have none:
      anything else is refused before any of it is read (docs/guides/guarantees.md). True lets a trusted
      model's data lie anywhere (still a regular file, read within its size).

    ONNX Runtime's ``ort_format`` and ``custom_op_library`` are not offered: ort_cffi loads ONNX files, and
    its sessions register no custom-op libraries.

    Files are generated in a temporary folder and moved into place once complete (and checked), with
    ``artifacts.json`` last. Artifact files of an earlier generation that this one does not write are removed.

    Raises ArtifactsInputError (a ValueError) naming what was wrong with the model or the options,
    GeneratorUnavailableError when no interpreter can run the generator, ArtifactsError when the generator
    fails or its output does not load (ArtifactsInputError also for a folder holding other artifacts, without
    ``overwrite``), TypeError for arguments of the wrong type.
    """
    if callable(getattr(loss, "build", None)):  # an onnxblock.Block: ONNX Runtime's custom loss
        model = _with_loss_block(model, loss, loss_input_names, additional_output_names)
        loss = loss_input_names = additional_output_names = None  # the model's first output is the loss now
    options = request_options(requires_grad, frozen_params, loss, optimizer, prefix, additional_output_names,
                              nominal_checkpoint, loss_input_names, prepare, generator, python, class_axis,
                              frozen_rows)
    path, data, label = model_bytes_or_path(model)
    confine_external_data(path, data, label, external_data_anywhere)
    folder = Path(os.fsdecode(os.fspath(artifact_directory))) if artifact_directory is not None else Path.cwd()
    if not overwrite:
        _refuse_other_artifacts(folder, prefix, options, file_sha256(path) if path is not None else hashlib.sha256(data or b"").hexdigest())
    created = not folder.exists()
    writable_folder(folder)
    try:
        return _generate(folder, path, data, label, options, prefix, python, check)
    except BaseException:
        if created:  # a failed generation leaves no trace: not even the folder it made, if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _with_loss_block(model: ModelLike, block: Any, loss_input_names: Any, additional_output_names: Any) -> Any:
    """``model`` with the loss block stacked on its outputs (``ort_cffi.onnxblock.stacking``): its outputs
    are the block's, then ``additional_output_names`` (None: the model's own outputs, ort_cffi's default)."""
    import onnx

    from ort_cffi.onnxblock.blocks import Block
    from ort_cffi.onnxblock.stacking import stack_loss

    if not isinstance(block, Block):
        raise TypeError(f"loss {type(block).__name__} has a build method but is no onnxblock.Block")
    path, data, _ = model_bytes_or_path(model)
    loaded = onnx.load(str(path)) if path is not None else onnx.load_from_string(data or b"")
    kept = [o.name for o in loaded.graph.output] if additional_output_names is None else (
        [additional_output_names] if isinstance(additional_output_names, str) else list(additional_output_names))
    reads = [loss_input_names] if isinstance(loss_input_names, str) else loss_input_names
    return stack_loss(loaded, block, reads, kept, None if path is None else str(path))


def _generate(folder: Path, path: Optional[Path], data: Optional[bytes], label: str, options: Dict[str, Any],
              prefix: str, python: Optional[Union[str, os.PathLike[str]]], check: bool) -> GeneratedArtifacts:
    generator = find_generator(python) if options["generator"] == ONNX_RUNTIME else None
    source = path
    work = Path(tempfile.mkdtemp(dir=folder, prefix=".ort_cffi-artifacts-"))
    try:
        if path is None:
            path = work / "model.onnx"
            path.write_bytes(data or b"")
        staging = work / "out"
        staging.mkdir()
        # The check opens the models over a nominal checkpoint (_check_loads): it is made, and dropped unless asked.
        request = dict(options, model=str(path), model_label=label, out=str(staging),
                       nominal_checkpoint=options["nominal_checkpoint"] or check)
        request["loss"] = None if options["loss"] is None else LossType(options["loss"]).name
        request["optimizer"] = None if options["optimizer"] is None else OptimType(options["optimizer"]).name
        result = run_child(request, generator, work) if generator is not None else run_here(request)
        staged = {key: staging / name for key, name in result["files"].items()}
        if check:
            _check_loads(staged)
        if not options["nominal_checkpoint"]:
            staged.pop("nominal_checkpoint", None)
        manifest = {
            "ort_cffi": __version__,
            "generator": dict(result["versions"], python=result["python"]["version"]),
            "model": {"sha256": file_sha256(path), "path": None if source is None else str(source.resolve()),
                      "ir_version": result["model"]["ir_version"], "opset": result["model"]["opset"]},
            "options": options,
            "trainable": [p["name"] for p in result["trainable"]],
            "frozen": [p["name"] for p in result["frozen"]],
            # the torch names of the parameters torch's default exporter renamed (module_names.py)
            "module_names": {p["name"]: p["module_name"] for key in ("trainable", "frozen", "constants")
                             for p in result[key] if "module_name" in p},
            "left_out": result["left_out"],
            "notes": result["notes"],
            "preparation": result["preparation"],
            "loss_reading": result["loss_reading"],
            "added_inputs": result["added_inputs"],
            "batchnorm_statistics": result["batchnorm_statistics"],
            "files": {key: {"name": p.name, "sha256": file_sha256(p)} for key, p in staged.items()},
        }
        files: Dict[str, Path] = {}
        for key, staged_file in staged.items():
            files[key] = folder / staged_file.name
            os.replace(staged_file, files[key])
        for key, name in _FILE_NAMES.items():  # an earlier generation's files that no longer belong
            stale = folder / (prefix + name)
            if key not in files and stale.is_file():
                stale.unlink()
        def write_manifest(tmp: str) -> None:
            Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n")

        atomic_write(str(folder / (prefix + MANIFEST)), write_manifest, "artifacts manifest")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    return GeneratedArtifacts(
        folder=folder,
        files=files,
        trainable=_parameters(result["trainable"]),
        frozen=_parameters(result["frozen"]),
        constants=_parameters(result["constants"]),
        left_out=dict(result["left_out"]),
        loss=None if options["loss"] is None else LossType(options["loss"]),
        loss_input=result["loss_input"],
        optimizer=None if options["optimizer"] is None else OptimType(options["optimizer"]),
        model_inputs=_specs(result["model"]["inputs"]),
        model_outputs=_specs(result["model"]["outputs"]),
        training_inputs=_specs(result["training_inputs"]),
        added_inputs=tuple(result["added_inputs"]),
        eval_outputs=tuple(result["eval_outputs"]),
        model_ir_version=result["model"]["ir_version"],
        model_opset=result["model"]["opset"],
        ir_version=result["ir_version"],
        notes=tuple(result["notes"]),
        versions=dict(result["versions"], python=result["python"]["version"], executable=result["python"]["executable"]),
        manifest=manifest,
        preparation=tuple(result["preparation"]),
        loss_reading=result["loss_reading"],
    )
