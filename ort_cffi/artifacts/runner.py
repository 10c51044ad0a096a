"""The generator's interpreter and the child process that runs ONNX Runtime's generator in it
(``_child.py``): a failure there can never take this process down.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from ort_cffi.artifacts.definitions import ArtifactsError, ArtifactsInputError, GeneratorUnavailableError

ENV_PYTHON = "ORT_CFFI_ARTIFACTS_PYTHON"
GENERATOR_PACKAGES = "onnxruntime-training-cpu==1.19.2 onnx"
CHILD = Path(__file__).with_name("_child.py")


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


def run_child(request: Dict[str, Any], python: str, how: str, work: Path) -> Dict[str, Any]:
    request_path, result_path = work / "request.json", work / "result.json"
    request["result"] = str(result_path)
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
            raise _unavailable(result["message"], result["python"]["executable"] or python, how, result["python"]["version"])
        raise ArtifactsInputError(result["message"])
    return result
