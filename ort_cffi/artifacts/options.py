"""The generation options in the normal form ``artifacts.json`` records, and the model and folder checks
made before the generator runs.
"""
from __future__ import annotations

import enum
import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ort_cffi import OrtErrorCode, OrtException
from ort_cffi._facade.external_data import check_external_data
from ort_cffi._facade.files import file_sha256, probe_writes
from ort_cffi.artifacts.definitions import ArtifactsInputError, LossType, ModelLike, OptimType


def enum_option(value: Any, kind: Any, what: str) -> Any:
    """A LossType/OptimType member from a member, ONNX Runtime's value (``LossType(2)``'s 2), ort_cffi's name
    (``"cross-entropy"``) or the member's name (any case), or an ONNX Runtime enum of the same name; None and
    "none" give None."""
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    if isinstance(value, kind):
        return value
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        try:
            return kind(value)
        except ValueError:
            pass
    name = getattr(value, "name", None)  # onnxruntime.training.artifacts.LossType.MSELoss and the like
    if isinstance(value, enum.Enum) and isinstance(name, str) and name in kind.__members__:
        return kind[name]
    choices = ", ".join(m.option for m in kind)
    if callable(getattr(value, "build", None)):  # an onnxblock.Block: only generate_artifacts stacks it
        raise ArtifactsInputError(
            f"{what} {type(value).__name__} is an onnxblock block: generate_artifacts takes blocks; this takes "
            f"{choices} (or None)")
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


ORT_CFFI, ONNX_RUNTIME = "ort_cffi", "onnxruntime"
GENERATORS = (ORT_CFFI, ONNX_RUNTIME)  # ort_cffi's own gradient builder; ONNX Runtime's, where it runs


def request_options(
    requires_grad: Any = None,
    frozen_params: Any = None,
    loss: Any = LossType.CrossEntropyLoss,
    optimizer: Any = OptimType.AdamW,
    prefix: str = "",
    additional_output_names: Any = None,
    nominal_checkpoint: bool = False,
    loss_input_names: Any = None,
    prepare: bool = True,
    generator: Optional[str] = None,
    python: Any = None,
    class_axis: Optional[int] = None,
    frozen_rows: Any = None,
    standard_forms: bool = True,
) -> Dict[str, Any]:
    """The generation options in the normal form ``artifacts.json`` records (JSON types only), so that two
    requests compare equal when they ask for the same artifacts. Raises what ``generate_artifacts`` does."""
    if not isinstance(prefix, str) or os.sep in prefix:
        raise ArtifactsInputError(f"prefix must be a file-name prefix without {os.sep!r}, not {prefix!r}")
    loss_type = enum_option(loss, LossType, "loss")
    optim_type = enum_option(optimizer, OptimType, "optimizer")
    if class_axis is not None:
        if isinstance(class_axis, bool) or not isinstance(class_axis, int):
            raise TypeError(f"class_axis must be an int, not {type(class_axis).__name__}")
        if loss_type is not LossType.CrossEntropyLoss:
            raise ArtifactsInputError("class_axis says where the classes are for the cross-entropy loss; the loss "
                                      f"here is {'none' if loss_type is None else loss_type.option}")
        if not prepare:
            raise ArtifactsInputError("class_axis needs the loss's reading fitted (prepare=True, no --no-prepare)")
    chosen = chosen_generator(generator, python)
    rows = _rows(frozen_rows)
    if rows and chosen != ORT_CFFI:
        raise ArtifactsInputError("frozen_rows is ort_cffi's builder's (generator='ort_cffi'): ONNX Runtime's "
                                  "generator trains every row of a parameter")
    options = {
        "requires_grad": _names(requires_grad, "requires_grad"),
        "frozen_params": _names(frozen_params, "frozen_params") or [],
        "loss": None if loss_type is None else loss_type.option,
        "optimizer": None if optim_type is None else optim_type.option,
        "additional_output_names": _names(additional_output_names, "additional_output_names"),
        "loss_input_names": _names(loss_input_names, "loss_input_names"),
        "nominal_checkpoint": bool(nominal_checkpoint),
        "prefix": prefix,
        "prepare": bool(prepare),
        "generator": chosen,
        "class_axis": class_axis,
    }
    if rows:  # recorded only when given: the options of artifacts made without it compare as before
        options["frozen_rows"] = rows
    if not isinstance(standard_forms, bool):
        raise TypeError(f"standard_forms must be True or False, not {type(standard_forms).__name__}")
    if not standard_forms:  # recorded only when turned off, as frozen_rows (run_here's builder reads it)
        options["standard_forms"] = False
    return options


def _rows(value: Any) -> Dict[str, List[int]]:
    """``frozen_rows`` in its normal form: {name: sorted distinct row indices}; {} for None or empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"frozen_rows must map parameter names to row indices, not {type(value).__name__}")
    found: Dict[str, List[int]] = {}
    for name, rows in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"frozen_rows' keys must be parameter names, not {name!r}")
        listed = [rows] if isinstance(rows, int) else rows
        try:
            indices = list(listed)
        except TypeError:
            raise TypeError(f"frozen_rows[{name!r}] must be a row index or a list of them, not "
                            f"{type(rows).__name__}") from None
        bad = [i for i in indices if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0]
        if bad or not indices:
            raise ArtifactsInputError(f"frozen_rows[{name!r}] must be row indices (ints from 0), not {rows!r}")
        found[name] = sorted({int(i) for i in indices})
    return found


def chosen_generator(generator: Optional[str], python: Optional[Union[str, os.PathLike[str]]]) -> str:
    """Which generator runs: ``generator`` as given, else ONNX Runtime's when ``python`` names its interpreter,
    else ort_cffi's own builder."""
    if generator is None:
        return ONNX_RUNTIME if python is not None else ORT_CFFI
    if not isinstance(generator, str):
        raise TypeError(f"generator must be a str ({ORT_CFFI!r} or {ONNX_RUNTIME!r}), not {type(generator).__name__}")
    if generator not in GENERATORS:
        raise ArtifactsInputError(f"generator {generator!r} is none of {', '.join(map(repr, GENERATORS))}")
    if generator == ORT_CFFI and python is not None:
        raise ArtifactsInputError("python= (--python) names the interpreter of ONNX Runtime's generator; ort_cffi's own "
                                  "builder runs in this process: pass generator='onnxruntime' (--generator onnxruntime) "
                                  "with it, or leave python out")
    return generator


# --- the model and the folder -------------------------------------------------------------------------------

def model_bytes_or_path(model: ModelLike) -> Tuple[Optional[Path], Optional[bytes], str]:
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


def confine_external_data(path: Optional[Path], data: Optional[bytes], label: str, anywhere: bool) -> None:
    """Refuse a model whose external data is not a regular file inside the model's folder (symlinks resolved),
    or lies past the file's end, before onnx reads any of it (``ort_cffi._facade.external_data``): whatever
    generator runs, it never sees such a model. Bytes onnx cannot read at all are left to onnx, which names them."""
    if not isinstance(anywhere, bool):
        raise TypeError(f"external_data_anywhere must be a bool, not {type(anywhere).__name__}")
    try:
        check_external_data(str(path) if path is not None else (data or b""), label, anywhere=anywhere,
                            escape="external_data_anywhere=True")
    except OrtException as exc:
        if exc.getCode() != OrtErrorCode.ORT_INVALID_PROTOBUF:
            raise ArtifactsInputError(str(exc)) from None


def model_sha256(model: ModelLike) -> str:
    """The identity of a model as ``artifacts.json`` records it: the sha256 of its file or its bytes."""
    path, data, _ = model_bytes_or_path(model)
    return file_sha256(path) if path is not None else hashlib.sha256(data or b"").hexdigest()


def writable_folder(folder: Path) -> None:
    """Create ``folder`` if missing and make sure a file can be written into it (the error names it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ArtifactsInputError(f"artifacts folder {str(folder)!r} exists and is not a folder") from None
    except OSError as exc:
        raise ArtifactsInputError(f"cannot create the artifacts folder {str(folder)!r}: {exc.strerror}") from None
    try:  # os.access is no answer for root or read-only file systems: try
        probe_writes(str(folder))
    except OSError as exc:
        raise ArtifactsInputError(f"cannot write into the artifacts folder {str(folder)!r}: {exc.strerror}") from None
