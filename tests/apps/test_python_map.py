"""The porting guide's map (docs/guides/porting-python.md, "The map") checked against ONNX Runtime's names and
ort_cffi's code, as tests/java/test_java_map.py checks the Java map.

Each ``### `Name` `` section of the map is a table ``| ONNX Runtime | ort_cffi | Difference |``. Checked:

- every public member of ONNX Runtime 1.19.2's class (listed below from its sources, since its layer cannot
  be imported on every interpreter these tests run on) has a row;
- every code span of the ort_cffi column names something that exists on the ort_cffi class;
- every public member of the ort_cffi class appears in the ort_cffi column;
- for ``generate_artifacts``, every parameter of ONNX Runtime's has a row, and every parameter named in the
  ort_cffi column is one of ``ort_cffi.training.artifacts.generate_artifacts``'s (ONNX Runtime's signature and
  defaults; ``ort_cffi.artifacts.generate_artifacts`` keeps ort_cffi's own).
"""
from __future__ import annotations

import inspect
import re
from typing import Dict, List, Optional, Set, Tuple

from conftest import ROOT

from ort_cffi import api
from ort_cffi.training import artifacts

GUIDE = ROOT / "docs" / "guides" / "porting-python.md"

# ONNX Runtime 1.19.2's public members, from onnxruntime/training/api/*.py and
# onnxruntime/capi/onnxruntime_inference_collection.py (OrtValue, InferenceSession, NodeArg; SessionOptions:
# the members of onnxruntime.SessionOptions a port of the examples meets).
ONNX_RUNTIME: Dict[str, Set[str]] = {
    "CheckpointState": {"__init__", "load_checkpoint", "save_checkpoint", "parameters", "properties"},
    "Parameters": {"__getitem__", "__setitem__", "__contains__", "__iter__", "__len__", "__repr__"},
    "Parameter": {"name", "data", "grad", "requires_grad", "__repr__"},
    "Properties": {"__getitem__", "__setitem__", "__contains__", "__iter__", "__len__", "__repr__"},
    "Module": {"__init__", "__call__", "train", "eval", "training", "lazy_reset_grad", "get_contiguous_parameters",
               "get_parameters_size", "copy_buffer_to_parameters", "export_model_for_inferencing", "input_names",
               "output_names"},
    "Optimizer": {"__init__", "step", "set_learning_rate", "get_learning_rate"},
    "LinearLRScheduler": {"__init__", "step"},
    "InferenceSession": {"__init__", "get_inputs", "get_outputs", "get_overridable_initializers", "get_providers",
                         "get_provider_options", "get_session_options", "get_modelmeta", "set_providers", "run",
                         "run_with_ort_values", "run_with_iobinding", "io_binding", "end_profiling"},
    "NodeArg": {"name", "type", "shape"},
    "SessionOptions": {"__init__", "intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level",
                       "execution_mode", "log_severity_level", "log_verbosity_level", "logid", "enable_mem_pattern",
                       "enable_cpu_mem_arena", "optimized_model_filepath", "use_deterministic_compute",
                       "add_session_config_entry", "get_session_config_entry", "add_free_dimension_override_by_name",
                       "register_custom_ops_library", "enable_profiling"},
    "OrtValue": {"__init__", "ortvalue_from_numpy", "ortvalue_from_shape_and_type", "ort_value_from_sparse_tensor",
                 "as_sparse_tensor", "data_ptr", "device_name", "shape", "data_type", "element_type", "has_value",
                 "is_tensor", "is_sparse_tensor", "is_tensor_sequence", "numpy", "update_inplace"},
}
GENERATE_ARTIFACTS = {"model", "requires_grad", "frozen_params", "loss", "optimizer", "artifact_directory", "prefix",
                      "ort_format", "custom_op_library", "additional_output_names", "nominal_checkpoint",
                      "loss_input_names"}
SPECIAL = [  # the span forms that are operators, and the dunder they stand for
    (re.compile(r"^\w+\[\w+\] = \w+$"), "__setitem__"),
    (re.compile(r"^\w+\[\w+\]$"), "__getitem__"),
    (re.compile(r"^\w+ in \w+$"), "__contains__"),
    (re.compile(r"^iter\(\w+\)$"), "__iter__"),
    (re.compile(r"^len\(\w+\)$"), "__len__"),
    (re.compile(r"^repr\(\w+\)$"), "__repr__"),
    (re.compile(r"^module\(\*\w+\)$"), "__call__"),
]


def sections() -> Dict[str, List[Tuple[List[str], List[str]]]]:
    """Section name → rows, each (code spans of the ONNX Runtime column, code spans of the ort_cffi column)."""
    text = GUIDE.read_text().split("## The map", 1)[1].split("\n## ", 1)[0]
    found: Dict[str, List[Tuple[List[str], List[str]]]] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        heading = re.match(r"^### `([\w.]+)`$", line)
        if heading:
            current = heading.group(1)
            found[current] = []
        elif current and line.startswith("| ") and not line.startswith("| ONNX Runtime |"):
            cells = line.split(" | ")
            if len(cells) >= 3:
                found[current].append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[1])))
    return found


def member(span: str, class_name: str) -> Optional[str]:
    """The member a code span names: `Class(...)` is __init__, `Class.name(...)` or `name(...)` is name,
    `name = value` is the property name, the operator forms their dunders; None for anything else."""
    for pattern, dunder in SPECIAL:
        if pattern.match(span):
            return dunder
    call = re.match(r"^(?:([A-Za-z]\w*)\.)?(\w+)\(.*\)$", span)
    if call:
        return "__init__" if call.group(2) == class_name else call.group(2)
    setter = re.match(r"^(\w+) = \w+$", span)
    if setter:
        return setter.group(1)
    return span if re.fullmatch(r"\w+", span) else None


def public_members(cls: type) -> Set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")} | (
        {"training"} if cls is api.Module else set())


def test_every_class_of_onnx_runtime_and_of_ort_cffi_api_has_its_section():
    assert set(sections()) == set(ONNX_RUNTIME) | {"artifacts.generate_artifacts"}
    assert set(api.__all__) == set(ONNX_RUNTIME) | {"get_available_providers"}  # a function: the import table maps it


def test_every_onnx_runtime_member_has_a_row_and_every_ort_cffi_name_exists():
    problems = []
    for class_name, rows in sections().items():
        if class_name not in ONNX_RUNTIME:
            continue
        cls = getattr(api, class_name)
        mapped = {member(span, class_name) for ort, _ in rows for span in ort[:1]}
        problems += [f"{class_name}: no row for ONNX Runtime's {name}" for name in sorted(ONNX_RUNTIME[class_name] - mapped)]
        ours: Set[str] = set()
        for _, spans in rows:
            for span in spans:
                name = member(span, class_name)
                if name is None:
                    problems.append(f"{class_name}: cannot read the ort_cffi span {span!r}")
                    continue
                ours.add(name)
                if not hasattr(cls, name) and not (cls is api.Module and name == "training"):
                    problems.append(f"{class_name}: the map names {span!r}, which ort_cffi.api.{class_name} lacks")
        problems += [f"{class_name}: ort_cffi's {name} has no row" for name in sorted(public_members(cls) - ours)]
    assert not problems, "\n".join(problems)


def test_generate_artifacts_rows_match_both_signatures():
    rows = sections()["artifacts.generate_artifacts"]
    ort_names = {spans[0] for spans, _ in rows if spans}
    assert GENERATE_ARTIFACTS <= ort_names, sorted(GENERATE_ARTIFACTS - ort_names)
    ours = set(inspect.signature(artifacts.generate_artifacts).parameters)
    named = {span for _, spans in rows for span in spans if re.fullmatch(r"\w+", span)}
    assert named <= ours, sorted(named - ours)
    for enum_row in (spans for _, spans in rows for spans in [spans] if spans and spans[0].startswith("artifacts.")):
        for span in enum_row:
            if span.startswith("artifacts.") and "(" not in span:
                _, enum_name, member_name = span.split(".")
                assert hasattr(getattr(artifacts, enum_name), member_name), span
