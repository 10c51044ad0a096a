"""The generator's interpreter and the child process that runs ONNX Runtime's generator in it
(``_child.py``): a failure there can never take this process down.

The interpreter is the one named (``python=``, ``--python``, ``$ORT_CFFI_ARTIFACTS_PYTHON``), else this one.
This one runs the generator with its own ONNX Runtime Python layer when pip installed the training wheel
(CPython 3.8-3.12); elsewhere (3.13 and later) with the layer ``ort-cffi-runtime install`` kept in the
runtime store, put first on the child's ``sys.path`` (``ort_cffi.runtime.generator``): no second interpreter.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from ort_cffi.artifacts.definitions import ArtifactsError, ArtifactsInputError, GeneratorUnavailableError
from ort_cffi.runtime import RuntimeInstallError, stored_generator

ENV_PYTHON = "ORT_CFFI_ARTIFACTS_PYTHON"
GENERATOR_PACKAGES = "onnxruntime-training-cpu==1.19.2 onnx"
CHILD = Path(__file__).with_name("_child.py")
# What ONNX Runtime's Python package imports besides itself, on interpreters where it comes from the runtime
# store (setup.py's GENERATOR_DEPENDENCIES: the [onnxruntime-generator] extra installs them there).
STORED_LAYER_PACKAGES = "onnx flatbuffers protobuf sympy packaging coloredlogs"
NEWEST_WHEEL = (3, 12)  # the newest CPython onnxruntime-training-cpu 1.19.2 was published for


@dataclass(frozen=True)
class Generator:
    """Who runs ONNX Runtime's generator: the interpreter, how it was chosen, and the folder of the runtime
    store's Python layer put first on its ``sys.path`` (None: the interpreter's own installed layer)."""

    python: str
    how: str  # "this interpreter", "python= (--python)" or ENV_PYTHON
    layer: Optional[str] = None

    def describe(self) -> str:
        """In words, for messages: which interpreter, and how it was chosen."""
        return "this interpreter" if self.how == "this interpreter" else f"the interpreter named by {self.how}"


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


def has_own_training_layer() -> bool:
    """Whether this interpreter has ONNX Runtime's Python training layer installed (found, not imported)."""
    spec = find_spec("onnxruntime")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(folder) / "training" / "artifacts.py").is_file() for folder in spec.submodule_search_locations)


def find_generator(python: Optional[Union[str, os.PathLike[str]]] = None) -> Generator:
    """Who runs the generator (see ``Generator``): ``python``, else ``$ORT_CFFI_ARTIFACTS_PYTHON``, else this
    interpreter, with its own ONNX Runtime Python layer or the runtime store's (prepared for it now if needed).
    Nothing runs here: ``check_generator`` runs it. Raises GeneratorUnavailableError when the named interpreter
    does not exist, or when this one has no layer to run and the store has none it can use."""
    interpreter, how = generator_python(python)
    # This interpreter named by its own path is this interpreter: it may use the store's layer too.
    itself = how == "this interpreter" or os.path.abspath(interpreter) == os.path.abspath(sys.executable)
    if not itself or has_own_training_layer():
        return Generator(interpreter, how)
    version = ".".join(map(str, sys.version_info[:3]))
    try:
        layer = stored_generator()
    except RuntimeInstallError as error:
        raise GeneratorUnavailableError(
            f"cannot generate training artifacts with this interpreter (Python {version}, {interpreter}): {error}"
        ) from None
    if layer is not None:
        return Generator(interpreter, how, str(layer))
    if sys.version_info[:2] <= NEWEST_WHEEL or how != "this interpreter":
        return Generator(interpreter, how)  # the child says what is missing: pip can install the wheel here
    raise GeneratorUnavailableError(
        f"cannot generate training artifacts with this interpreter (Python {version}, {interpreter}): ONNX "
        "Runtime's Python training layer, where the gradient builder lives, was published for Python 3.8 to 3.12 "
        "only, and the runtime store holds none. Run `ort-cffi-runtime install`: it keeps that layer from the "
        "training wheel it fetches, and ort_cffi runs it in this interpreter (with ort_cffi's [onnxruntime-generator] extra "
        f"installed: {STORED_LAYER_PACKAGES}). Or name an interpreter that has it with --python PATH (python=PATH) "
        f"or {ENV_PYTHON}=PATH."
    )


def _unavailable(message: str, generator: Generator, version: str) -> GeneratorUnavailableError:
    python, how = generator.python, generator.how
    if generator.layer is not None:
        return GeneratorUnavailableError(
            f"cannot generate training artifacts with this interpreter (Python {version}, {python}) and ONNX "
            f"Runtime's Python layer from the runtime store ({generator.layer}): {message}. Install what that layer "
            f"imports: ort_cffi's [onnxruntime-generator] extra (`{python} -m pip install {STORED_LAYER_PACKAGES}`)."
        )
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


def run_child(request: Dict[str, Any], generator: Generator, work: Path) -> Dict[str, Any]:
    """Run ``_child.py`` with ``request`` under ``generator``; its result. Raises GeneratorUnavailableError,
    ArtifactsInputError (a refused request) or ArtifactsError (a failed or crashed generator)."""
    python, how = generator.python, generator.how
    request_path, result_path = work / "request.json", work / "result.json"
    request["result"] = str(result_path)
    request["layer"] = generator.layer
    request_path.write_text(json.dumps(request))
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    proc = subprocess.run([python, str(CHILD), str(request_path)], capture_output=True, text=True, env=env)
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
            reported = Generator(result["python"]["executable"] or python, how, generator.layer)
            raise _unavailable(result["message"], reported, result["python"]["version"])
        raise ArtifactsInputError(result["message"])
    return result


def run_here(request: Dict[str, Any]) -> Dict[str, Any]:
    """Generate what ``request`` asks with ort_cffi's own builder, in this process; the result has the form
    ``run_child`` returns. Raises ArtifactsInputError for a refused request."""
    from ort_cffi.artifacts import _child
    from ort_cffi.artifacts.builder.files import BuilderBackend

    try:
        # standard_forms: the request's options hold it only where it was turned off (options.request_options)
        result: Dict[str, Any] = _child.generate(request, BuilderBackend(bool(request.get("standard_forms", True))))
    except _child.Refusal as refusal:
        raise ArtifactsInputError(str(refusal)) from None
    result["python"] = {"version": ".".join(str(v) for v in sys.version_info[:3]), "executable": sys.executable}
    return result


def check_generator(python: Optional[Union[str, os.PathLike[str]]] = None) -> Dict[str, str]:
    """Import ONNX Runtime's generator the way ``generate_artifacts`` would (``python`` as there), in a child
    process, and say who would run it: {"python", "version", "onnxruntime", "onnx", "layer" (the folder of the
    ``onnxruntime`` package it imported), "description" (how the interpreter was chosen)}.
    Raises GeneratorUnavailableError saying what is missing."""
    import tempfile

    generator = find_generator(python)
    with tempfile.TemporaryDirectory(prefix="ort_cffi-generator-") as work:
        result = run_child({"probe": True}, generator, Path(work))
    return {"python": result["python"]["executable"] or generator.python, "version": result["python"]["version"],
            "onnxruntime": result["versions"]["onnxruntime"], "onnx": result["versions"]["onnx"],
            "layer": result["onnxruntime_path"], "description": generator.describe()}
