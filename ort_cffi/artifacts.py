"""Training artifacts for any ONNX model, without torch: ``generate_artifacts`` mirrors ONNX Runtime's
``onnxruntime.training.artifacts.generate_artifacts`` with Pythonic defaults.

From an inference model it writes the four files a training session needs: ``checkpoint`` (the
parameters), ``training_model.onnx`` (forward, loss and gradient graphs), ``eval_model.onnx`` (forward and
loss) and ``optimizer_model.onnx``, plus ``artifacts.json``, which records what they were made from.

ONNX Runtime's own generator does the work, byte for byte: it runs in a child process
(``_artifacts_child.py``), with the package inits that import torch bypassed, so this process imports
neither ``onnxruntime`` nor torch. The child needs ONNX Runtime's Python training layer and ``onnx``
(ort_cffi's ``[artifacts]`` extra: ``pip install onnxruntime-training-cpu==1.19.2 onnx``); on an interpreter that has no such layer (Python 3.13 and later),
name one that has it with ``python=`` or ``ORT_CFFI_ARTIFACTS_PYTHON``.

This is an application on top of the facade: it uses ``OrtEnvironment`` only to check that what it wrote
loads in the runtime.
"""
from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import __version__
from ._errors import OrtException, RuntimeLoadError
from ._files import atomic_write, file_sha256

ENV_PYTHON = "ORT_CFFI_ARTIFACTS_PYTHON"
MANIFEST = "artifacts.json"
GENERATOR_PACKAGES = "onnxruntime-training-cpu==1.19.2 onnx"
_CHILD = Path(__file__).with_name("_artifacts_child.py")
_FILE_NAMES = {
    "checkpoint": "checkpoint",
    "training_model": "training_model.onnx",
    "eval_model": "eval_model.onnx",
    "optimizer_model": "optimizer_model.onnx",
    "nominal_checkpoint": "nominal_checkpoint",
}

ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Any]  # Any: an onnx.ModelProto


class ArtifactsError(Exception):
    """Training artifacts could not be made; the message says why. Base of the two below."""


class ArtifactsInputError(ArtifactsError, ValueError):
    """The model or the options cannot make training artifacts: the message names what was wrong (a
    pattern that matches nothing, a parameter that is not floating-point, a model without a usable output
    for the loss, a folder that cannot be written, ...)."""


class GeneratorUnavailableError(ArtifactsError, RuntimeError):
    """No interpreter with ONNX Runtime's Python training layer (where the gradient builder lives) and
    ``onnx`` to run the generator: the message says which interpreter lacked what and how to name another."""


class LossType(enum.Enum):
    """The loss added on top of the model's output; the member names are ONNX Runtime's ``LossType``."""

    CrossEntropyLoss = "cross-entropy"
    MSELoss = "mse"
    BCEWithLogitsLoss = "bce-with-logits"
    L1Loss = "l1"


class OptimType(enum.Enum):
    """The optimizer of the optimizer model; the member names are ONNX Runtime's ``OptimType``."""

    AdamW = "adamw"
    SGD = "sgd"


@dataclass(frozen=True)
class Parameter:
    """One initializer of the model: its name, element type (a numpy dtype name), shape and element count."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    size: int


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, element type and shape (ints, symbolic names, or None when unknown)."""

    name: str
    dtype: str
    shape: Optional[Tuple[Union[int, str, None], ...]]

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.name} {self.dtype}"
        return f"{self.name} {self.dtype} [{', '.join('?' if d is None else str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class GeneratedArtifacts:
    """What ``generate_artifacts`` wrote and made trainable. The files belong to the caller."""

    folder: Path
    files: Dict[str, Path]  # checkpoint, training_model, eval_model[, optimizer_model][, nominal_checkpoint]
    trainable: Tuple[Parameter, ...]
    frozen: Tuple[Parameter, ...]
    constants: Tuple[Parameter, ...]  # floating-point initializers that stay constants of the graphs
    left_out: Dict[str, str]  # name -> why a pattern's match was not made trainable (no gradient reaches it)
    loss: Optional[LossType]
    loss_input: Optional[str]  # the model output the loss reads (with no loss: the output that is the loss)
    optimizer: Optional[OptimType]
    model_inputs: Tuple[TensorSpec, ...]
    model_outputs: Tuple[TensorSpec, ...]
    training_inputs: Tuple[TensorSpec, ...]  # the data inputs of the training model, labels included
    added_inputs: Tuple[str, ...]  # those the loss added (labels, target)
    eval_outputs: Tuple[str, ...]
    model_ir_version: int
    model_opset: Optional[int]
    ir_version: int
    notes: Tuple[str, ...]  # what was brought down for ONNX Runtime 1.19 (IR version, opset)
    versions: Dict[str, str]  # onnx, onnxruntime and python of the generator
    manifest: Dict[str, Any] = field(repr=False)

    @property
    def checkpoint(self) -> Path:
        """The checkpoint with the parameters' initial values."""
        return self.files["checkpoint"]

    @property
    def training_model(self) -> Path:
        """The training model: forward graph, loss and gradients."""
        return self.files["training_model"]

    @property
    def eval_model(self) -> Path:
        """The eval model: forward graph and loss, and the outputs kept next to the loss."""
        return self.files["eval_model"]

    @property
    def optimizer_model(self) -> Optional[Path]:
        """The optimizer model, or None when generated with ``optimizer=None``."""
        return self.files.get("optimizer_model")

    @property
    def nominal_checkpoint(self) -> Optional[Path]:
        """The shapes-only checkpoint, or None unless generated with ``nominal_checkpoint=True``."""
        return self.files.get("nominal_checkpoint")

    @property
    def trainable_parameters(self) -> int:
        """Elements of the trainable tensors."""
        return sum(p.size for p in self.trainable)

    @property
    def total_parameters(self) -> int:
        """Elements of all floating-point initializers of the model: trainable, frozen and constant."""
        return sum(p.size for p in self.trainable + self.frozen + self.constants)


# --- options ----------------------------------------------------------------------------------------------

def _enum_option(value: Any, kind: Any, what: str) -> Any:
    """A LossType/OptimType member from a member, its value or name (any case), or an ONNX Runtime enum of
    the same name; None and "none" give None."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    if isinstance(value, kind):
        return value
    name = getattr(value, "name", value)  # onnxruntime.training.artifacts.LossType.MSELoss and the like
    if isinstance(name, str):
        for member in kind:
            if name.lower() in (member.value, member.name.lower()):
                return member
    choices = ", ".join(m.value for m in kind)
    raise ArtifactsInputError(f"unknown {what} {value!r}: choose {choices} (or None)")


def _names(value: Any, what: str) -> Optional[List[str]]:
    """A list of names or patterns from a string or an iterable of strings (None stays None)."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        raise TypeError(f"{what} must be a name, or a list of names, not {type(value).__name__}") from None
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise TypeError(f"{what} must hold non-empty strings, not {bad[0]!r}")
    return names


def request_options(
    requires_grad: Any = None,
    frozen_params: Any = None,
    loss: Any = LossType.CrossEntropyLoss,
    optimizer: Any = OptimType.AdamW,
    prefix: str = "",
    additional_output_names: Any = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Any = None,
) -> Dict[str, Any]:
    """The generation options in the normal form ``artifacts.json`` records (JSON types only), so that two
    requests compare equal when they ask for the same artifacts. Raises what ``generate_artifacts`` does."""
    if not isinstance(prefix, str) or os.sep in prefix:
        raise ArtifactsInputError(f"prefix must be a file-name prefix without {os.sep!r}, not {prefix!r}")
    loss_type = _enum_option(loss, LossType, "loss")
    optim_type = _enum_option(optimizer, OptimType, "optimizer")
    return {
        "requires_grad": _names(requires_grad, "requires_grad"),
        "frozen_params": _names(frozen_params, "frozen_params") or [],
        "loss": None if loss_type is None else loss_type.value,
        "optimizer": None if optim_type is None else optim_type.value,
        "additional_output_names": _names(additional_output_names, "additional_output_names"),
        "loss_input_names": _names(loss_input_names, "loss_input_names"),
        "nominal_checkpoint": bool(nominal_checkpoint),
        "prefix": prefix,
    }


# --- the model and the folder -------------------------------------------------------------------------------

def _model_bytes_or_path(model: ModelLike) -> Tuple[Optional[Path], Optional[bytes], str]:
    """(path, None, label) for a model file, (None, bytes, label) for bytes or an onnx.ModelProto."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if not data:
            raise ArtifactsInputError("the model bytes are empty")
        return None, data, "the model (given as bytes)"
    if isinstance(model, (str, os.PathLike)):
        path = Path(os.fsdecode(os.fspath(model)))
        if path.is_dir():
            raise ArtifactsInputError(f"model {str(path)!r} is a folder, not an ONNX file")
        if not path.is_file():
            raise ArtifactsInputError(f"model {str(path)!r} does not exist")
        return path, None, f"model {str(path)!r}"
    serialize = getattr(model, "SerializeToString", None)
    if type(model).__name__ == "ModelProto" and callable(serialize):  # onnx is not imported here
        return None, serialize(), "the model (an onnx.ModelProto)"
    raise TypeError(f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def model_sha256(model: ModelLike) -> str:
    """The identity of a model as ``artifacts.json`` records it: the sha256 of its file or its bytes."""
    path, data, _ = _model_bytes_or_path(model)
    return file_sha256(path) if path is not None else hashlib.sha256(data or b"").hexdigest()


def _writable_folder(folder: Path) -> None:
    """Create ``folder`` if missing and make sure a file can be written into it (the error names it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ArtifactsInputError(f"artifacts folder {str(folder)!r} exists and is not a folder") from None
    except OSError as exc:
        raise ArtifactsInputError(f"cannot create the artifacts folder {str(folder)!r}: {exc.strerror}") from None
    try:  # os.access is no answer for root or read-only file systems: try
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".ort_cffi-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ArtifactsInputError(f"cannot write into the artifacts folder {str(folder)!r}: {exc.strerror}") from None


# --- the generator's interpreter ----------------------------------------------------------------------------

def generator_python(python: Optional[Union[str, os.PathLike[str]]] = None) -> Tuple[str, str]:
    """(interpreter, how it was chosen): ``python``, else ``$ORT_CFFI_ARTIFACTS_PYTHON``, else this one.
    Raises GeneratorUnavailableError when the named interpreter does not exist."""
    if python is not None:
        chosen, how = os.fspath(python), "python= (--python)"
    elif os.environ.get(ENV_PYTHON):
        chosen, how = os.environ[ENV_PYTHON], ENV_PYTHON
    else:
        return sys.executable, "this interpreter"
    found = shutil.which(chosen) if os.sep not in chosen else (chosen if os.access(chosen, os.X_OK) and os.path.isfile(chosen) else None)
    if found is None:
        raise GeneratorUnavailableError(f"the interpreter named by {how}, {chosen!r}, does not exist or cannot be run")
    return found, how


def _unavailable(message: str, python: str, how: str, version: str) -> GeneratorUnavailableError:
    if how == "this interpreter":
        return GeneratorUnavailableError(
            f"cannot generate training artifacts with this interpreter (Python {version}, {python}): {message}. "
            "The gradient builder exists only in ONNX Runtime's Python training layer, which "
            f"onnxruntime-training-cpu 1.19.2 ships for Python 3.8 to 3.12. Generate the artifacts with an "
            f"interpreter that has it: run ort-cffi-artifacts there, or name it here with --python PATH (python=PATH) "
            f"or {ENV_PYTHON}=PATH, after `PATH -m pip install {GENERATOR_PACKAGES}`. The artifacts it writes "
            "train with ort_cffi on any interpreter."
        )
    return GeneratorUnavailableError(
        f"cannot generate training artifacts with the interpreter named by {how} (Python {version}, {python}): "
        f"{message}. Install the generator there (`{python} -m pip install {GENERATOR_PACKAGES}`; ONNX Runtime's "
        "training layer has wheels for Python 3.8 to 3.12), or name another interpreter."
    )


def _run_child(request: Dict[str, Any], python: str, how: str, work: Path) -> Dict[str, Any]:
    request_path, result_path = work / "request.json", work / "result.json"
    request["result"] = str(result_path)
    request_path.write_text(json.dumps(request))
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    proc = subprocess.run([python, str(_CHILD), str(request_path)], capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not result_path.is_file():
        # The generator's graph transformers log each pass at INFO level from their own logger: leave those out.
        lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if "[I:onnxruntime" not in line]
        tail = "\n".join(lines[-12:])
        if proc.returncode < 0:
            raise ArtifactsError(f"ONNX Runtime's generator crashed (signal {-proc.returncode}, {python}):\n{tail}")
        if not tail or "SyntaxError" in tail or "No such file" in tail:
            who = "this interpreter" if how == "this interpreter" else f"the interpreter named by {how}"
            raise GeneratorUnavailableError(
                f"{who}, {python}, cannot run the generator (exit code {proc.returncode}"
                f"{', no output: is it a Python interpreter?' if not tail else ''})" + (f":\n{tail}" if tail else ""))
        raise ArtifactsError(f"ONNX Runtime's generator failed (exit code {proc.returncode}, {python}):\n{tail}")
    result: Dict[str, Any] = json.loads(result_path.read_text())
    if not result["ok"]:
        if result["kind"] == "unavailable":
            raise _unavailable(result["message"], result["python"]["executable"] or python, how, result["python"]["version"])
        raise ArtifactsInputError(result["message"])
    return result


# --- checking and describing what was written ---------------------------------------------------------------

def _check_loads(files: Dict[str, Path]) -> None:
    """Open the artifacts in a training session, as a trainer will: what the runtime refuses fails here."""
    from .environment import OrtEnvironment
    from .options import OrtLoggingLevel, SessionOptions
    from .checkpoint import OrtCheckpointState

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
            with env.createTrainingSession(files["checkpoint"], files["training_model"], files["eval_model"],
                                           files.get("optimizer_model"), options):
                pass
        if "nominal_checkpoint" in files:
            with OrtCheckpointState.loadCheckpoint(files["nominal_checkpoint"]):
                pass
    except OrtException as exc:
        raise ArtifactsError(f"the generated artifacts do not load in ONNX Runtime {env.getVersion()}: {exc}") from None


def _parameters(records: Sequence[Dict[str, Any]]) -> Tuple[Parameter, ...]:
    return tuple(Parameter(r["name"], r["dtype"], tuple(r["shape"]), r["size"]) for r in records)


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
) -> GeneratedArtifacts:
    """Write the training artifacts of ``model`` into ``artifact_directory`` (created if missing; default:
    the current folder) and return what was written and made trainable.

    ONNX Runtime's ``onnxruntime.training.artifacts.generate_artifacts`` does the work, in a child process
    (this one imports neither onnxruntime nor torch), and its files are byte for byte what it writes when
    called directly. The parameters are ONNX Runtime's, with these defaults and additions:

    - ``model``: a path, bytes or an ``onnx.ModelProto``. A model saved by a newer ``onnx`` (IR version
      above 10, opset above 21) is brought down to what ONNX Runtime 1.19 accepts, or refused with a reason.
    - ``requires_grad``: names or glob patterns (``"fc2.*"``) of the initializers to train; default: every
      floating-point initializer that a gradient reaches, less ``frozen_params``. Patterns skip tensors no
      gradient reaches (a dropout ratio, batch-norm statistics; listed in ``left_out``); a plain name of
      one is refused.
    - ``frozen_params``: names or patterns of parameters kept in the checkpoint but not trained. Other
      initializers stay constants of the graphs.
    - ``loss``: ``LossType`` or its value: ``"cross-entropy"`` (default; adds an int64 ``labels`` input),
      ``"mse"``, ``"bce-with-logits"``, ``"l1"`` (these add a ``target`` input like the output); None when
      the model's first output already is the loss.
    - ``optimizer``: ``"adamw"`` (default), ``"sgd"``, or None for no optimizer model.
    - ``additional_output_names``: outputs the training and eval models give next to the loss; default (None):
      the model's own outputs, so that an inference model can be exported from the eval model. ``[]``: none.
    - ``loss_input_names``: the output the loss reads (needed when the model has several), and optionally
      the name of the input the loss adds.
    - ``nominal_checkpoint``: also write ``nominal_checkpoint`` (shapes only). ``prefix``: file-name prefix.
    - ``python``: the interpreter that runs the generator (default ``$ORT_CFFI_ARTIFACTS_PYTHON``, else this
      one); it needs ``onnxruntime-training-cpu==1.19.2`` and ``onnx``.
    - ``check``: open the written artifacts in a training session through ort_cffi (needs the runtime here).

    ONNX Runtime's ``ort_format`` and ``custom_op_library`` are not offered: ort_cffi loads ONNX files, and
    its sessions register no custom-op libraries.

    Files are generated in a temporary folder and moved into place once complete (and checked), with
    ``artifacts.json`` last. Artifact files of an earlier generation that this one does not write are removed.

    Raises ArtifactsInputError (a ValueError) naming what was wrong with the model or the options,
    GeneratorUnavailableError when no interpreter can run the generator, ArtifactsError when the generator
    fails or its output does not load, TypeError for arguments of the wrong type.
    """
    options = request_options(requires_grad, frozen_params, loss, optimizer, prefix, additional_output_names,
                              nominal_checkpoint, loss_input_names)
    path, data, label = _model_bytes_or_path(model)
    folder = Path(os.fsdecode(os.fspath(artifact_directory))) if artifact_directory is not None else Path.cwd()
    created = not folder.exists()
    _writable_folder(folder)
    try:
        return _generate(folder, path, data, label, options, prefix, python, check)
    except BaseException:
        if created:  # a failed generation leaves no trace: not even the folder it made, if still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _generate(folder: Path, path: Optional[Path], data: Optional[bytes], label: str, options: Dict[str, Any],
              prefix: str, python: Optional[Union[str, os.PathLike[str]]], check: bool) -> GeneratedArtifacts:
    interpreter, how = generator_python(python)
    source = path
    work = Path(tempfile.mkdtemp(dir=folder, prefix=".ort_cffi-artifacts-"))
    try:
        if path is None:
            path = work / "model.onnx"
            path.write_bytes(data or b"")
        staging = work / "out"
        staging.mkdir()
        request = dict(options, model=str(path), model_label=label, out=str(staging))
        request["loss"] = None if options["loss"] is None else LossType(options["loss"]).name
        request["optimizer"] = None if options["optimizer"] is None else OptimType(options["optimizer"]).name
        result = _run_child(request, interpreter, how, work)
        staged = {key: staging / name for key, name in result["files"].items()}
        if check:
            _check_loads(staged)
        manifest = {
            "ort_cffi": __version__,
            "generator": dict(result["versions"], python=result["python"]["version"]),
            "model": {"sha256": file_sha256(path), "path": None if source is None else str(source.resolve()),
                      "ir_version": result["model"]["ir_version"], "opset": result["model"]["opset"]},
            "options": options,
            "trainable": [p["name"] for p in result["trainable"]],
            "frozen": [p["name"] for p in result["frozen"]],
            "left_out": result["left_out"],
            "notes": result["notes"],
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
    )


# --- reuse --------------------------------------------------------------------------------------------------

def read_manifest(folder: Union[str, os.PathLike[str]], prefix: str = "") -> Optional[Dict[str, Any]]:
    """The ``artifacts.json`` that ``generate_artifacts`` wrote into ``folder``, or None (missing, unreadable)."""
    try:
        manifest = json.loads((Path(os.fspath(folder)) / (prefix + MANIFEST)).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def artifacts_match(folder: Union[str, os.PathLike[str]], model: ModelLike, options: Dict[str, Any]) -> bool:
    """Whether ``folder`` holds artifacts that ``generate_artifacts`` made from ``model`` with ``options``
    (as ``request_options`` gives them), with every file as it was written."""
    manifest = read_manifest(folder, options.get("prefix", ""))
    if manifest is None or manifest.get("options") != options:
        return False
    if manifest.get("model", {}).get("sha256") != model_sha256(model):
        return False
    return files_intact(folder, manifest)


def files_intact(folder: Union[str, os.PathLike[str]], manifest: Dict[str, Any]) -> bool:
    """Whether each file ``manifest`` lists is in ``folder`` with the recorded sha256."""
    try:
        return all(file_sha256(Path(os.fspath(folder)) / entry["name"]) == entry["sha256"]
                   for entry in manifest["files"].values())
    except (OSError, KeyError, TypeError):
        return False


if __name__ == "__main__":
    from .artifacts_cli import main

    sys.exit(main())
