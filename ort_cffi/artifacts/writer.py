"""How ``generate_artifacts`` writes the artifacts, its options in their normal form: the generator run (ort_cffi's
own builder in this process, or ONNX Runtime's in a child), the load check, ``artifacts.json``.

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


def write_artifacts(
    model: ModelLike,
    requires_grad: Optional[Union[str, Iterable[str]]],
    frozen_params: Optional[Union[str, Iterable[str]]],
    loss: Any,
    optimizer: Any,
    artifact_directory: Optional[Union[str, os.PathLike[str]]],
    prefix: str,
    *,
    additional_output_names: Optional[Union[str, Iterable[str]]],
    nominal_checkpoint: bool,
    loss_input_names: Optional[Union[str, Iterable[str]]],
    python: Optional[Union[str, os.PathLike[str]]],
    check: bool,
    overwrite: bool,
    prepare: bool,
    generator: Optional[str],
    class_axis: Optional[int],
    external_data_anywhere: bool,
    frozen_rows: Optional[Mapping[str, Union[int, Iterable[int]]]],
    standard_forms: bool = True,
) -> GeneratedArtifacts:
    """Write the training artifacts of ``model`` into ``artifact_directory`` (the current folder for None),
    the options in the normal form ``artifacts.json`` records (``options.request_options``): there
    ``requires_grad=None`` is every floating-point parameter a gradient reaches and ``additional_output_names=None``
    the model's own outputs (with a loss), the meanings ``generate_artifacts`` (ONNX Runtime's defaults) gives
    ``ALL_PARAMETERS`` and ``MODEL_OUTPUTS``. What each option does: ``generate_artifacts``' docstring.

    Files are generated in a temporary folder and moved into place once complete (and checked), with
    ``artifacts.json`` last. Artifact files of an earlier generation that this one does not write are removed.
    """
    options = request_options(requires_grad, frozen_params, loss, optimizer, prefix, additional_output_names,
                              nominal_checkpoint, loss_input_names, prepare, generator, python, class_axis,
                              frozen_rows, standard_forms)
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
