"""The static finder (``ort_cffi._native.elf``): where ``OrtApiBase`` lies in a runtime file, read from the
ELF file alone, checked against two independent answers and a record:

- ONNX Runtime's own custom-op hook, in a child that imports onnxruntime (``hook_oracle.py``), on
  every interpreter where the training wheel imports (the cp310-cp312 wheels);
- ``OrtGetApiBase`` of the inference library, which exports it: called on x86_64, decoded from its
  code on aarch64 (no Linux aarch64 training wheel was ever published);
- the survey of every published training wheel (``ort_cffi/data/runtimes.json``), for each of those
  files that is present (scripts/test.sh fetches the CPU wheels into .cache/survey). The survey was
  written by this finder (scripts/survey_runtimes.py), so for the wheels no oracle loads here (cp38,
  cp39, CUDA) it guards against regressions, not against a finder that was wrong from the start.

And the renames of CPython imports that let an older interpreter's build load in this one.
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, run_child
from hook_oracle import build, onnxruntime_importable, probe
from ort_cffi import RuntimeLoadError
from ort_cffi._native import elf as _elf
from ort_cffi._native.loader import find_training_wheel, interpreter_exports, interpreter_name
from ort_cffi._native.store import known_runtimes

SURVEY_WHEELS = ROOT / ".cache" / "survey"
FIELDS = ("machine", "api_base", "get_api", "get_version_string", "version", "anchor", "anchor_address")


def extract(wheel: Path, member: str, folder: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        return Path(archive.extract(member, folder))


def present_wheel(filename: str) -> Path:
    path = SURVEY_WHEELS / filename
    if not path.is_file():
        pytest.fail(f"{filename} is missing from {SURVEY_WHEELS}: scripts/test.sh fetches it")
    return path


@pytest.mark.needs_onnxruntime_python
def test_static_answer_equals_the_custom_op_hook(tmp_path):
    """Where ONNX Runtime itself hands over its OrtApiBase, the finder must have found the same table."""
    assert onnxruntime_importable(), "the training wheel must be installed for this interpreter"
    hook = build(tmp_path)
    told = probe(hook)
    wheel, _ = find_training_wheel()
    assert wheel is not None and Path(told["file"]).resolve() == wheel.path.resolve()
    found = _elf.find_api_base(wheel.path, "1.19.2")
    print(f"{interpreter_name()}: hook says PyInit + {told['offset']}, static finder says PyInit + {found.offset}")
    assert found.anchor == "PyInit_onnxruntime_pybind11_state"
    assert found.offset == told["offset"]


@pytest.mark.parametrize("flavour", ["cpu"])
def test_static_finder_reproduces_the_survey(tmp_path, flavour):
    """Every surveyed CPU wheel (cp38-cp312) is present; the finder's answer equals its row."""
    rows = [row for row in known_runtimes()["files"] if row["flavour"] == flavour]
    assert {row["python_tag"] for row in rows} == {"cp38", "cp39", "cp310", "cp311", "cp312"}
    for row in rows:
        extension = extract(present_wheel(row["wheel"]), row["extension"], tmp_path / row["python_tag"])
        found = _elf.find_api_base(extension, row["version"])
        assert {f: getattr(found, f) for f in FIELDS} == {f: row[f] for f in FIELDS}, row["wheel"]
        assert found.offset == row["offset_from_anchor"]


def test_the_survey_covers_every_published_linux_wheel():
    survey = known_runtimes()
    files = {row["wheel"] for row in survey["files"]}
    assert len(files) == 9  # 5 CPU (cp38-cp312) + 4 CUDA (cp38-cp311), Linux x86_64
    assert {row["machine"] for row in survey["files"]} == {"x86_64"}
    assert any("aarch64" in line for line in survey["absent"])
    assert all("not a Linux wheel" in entry["why"] for entry in survey["not_surveyed"])
    cp312 = next(row for row in survey["files"] if row["python_tag"] == "cp312" and row["flavour"] == "cpu")
    assert cp312["offset_from_anchor"] == 16989520  # docs/internals/runtime.md §6: OrtApiBase = PyInit + 16989520


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_static_finder_agrees_with_the_exported_OrtGetApiBase(tmp_path, machine):
    """The inference library exports OrtGetApiBase (``return &ort_api_base;``): decoded from its
    code, it names the table the finder found, on both machines."""
    (reference,) = [row for row in known_runtimes()["reference"] if row["machine"] == machine]
    library = extract(present_wheel(reference["wheel"]), reference["library"]["extension"], tmp_path)
    found = _elf.find_api_base(library, "1.19.2", anchors=["OrtGetApiBase"])
    assert found.machine == machine
    assert _elf.returned_by_export(library, "OrtGetApiBase") == found.api_base == reference["library"]["api_base"]


def test_on_x86_64_the_finder_agrees_with_calling_OrtGetApiBase(tmp_path):
    (reference,) = [row for row in known_runtimes()["reference"] if row["machine"] == "x86_64"]
    library = extract(present_wheel(reference["wheel"]), reference["library"]["extension"], tmp_path)
    found = _elf.find_api_base(library, "1.19.2", anchors=["OrtGetApiBase"])
    out = run_child(
        """
        import ctypes, json, sys
        lib = ctypes.CDLL(sys.argv[1])
        function = lib.OrtGetApiBase
        function.restype = ctypes.c_void_p
        address = ctypes.cast(function, ctypes.c_void_p).value
        print(json.dumps({"api_base": function(), "OrtGetApiBase": address}))
        """.replace("sys.argv[1]", repr(str(library))),
    ).stdout
    called = json.loads(out.strip().splitlines()[-1])
    load_base = called["OrtGetApiBase"] - found.anchor_address
    assert called["api_base"] == load_base + found.api_base


def test_what_is_not_an_onnx_runtime_is_refused_saying_what_was_not_found(tmp_path):
    (row, *_) = known_runtimes()["files"]
    wheel = present_wheel(row["wheel"])
    with zipfile.ZipFile(wheel) as archive:
        shared = next(n for n in archive.namelist() if n.endswith("libonnxruntime_providers_shared.so"))
    not_runtime = extract(wheel, shared, tmp_path)
    with pytest.raises(RuntimeLoadError, match="no OrtApiBase found in .*providers_shared.so: no relocated function"):
        _elf.find_api_base(not_runtime)
    extension = extract(wheel, row["extension"], tmp_path)
    with pytest.raises(RuntimeLoadError, match="returning the version string '9.9.9'"):
        _elf.find_api_base(extension, "9.9.9")
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file at all")
    with pytest.raises(RuntimeLoadError, match="is not an ELF file"):
        _elf.find_api_base(text)
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(RuntimeLoadError, match="cannot read .*empty.so"):
        _elf.find_api_base(empty)
    with pytest.raises(RuntimeLoadError, match="exports none of NoSuchSymbol"):
        _elf.find_api_base(extension, anchors=["NoSuchSymbol"])


# --- renames for newer interpreters --------------------------------------------------------------

# What each surveyed CPU build needs in each interpreter, measured (docs/internals/runtime.md §7): CPython 3.13
# dropped _PyThreadState_UncheckedGet (made public as PyThreadState_GetUnchecked) and
# _PyObject_NextNotImplemented, which only the cp38 and cp39 builds import and which has no successor.
# 3.14 and 3.15 (Debian's 3.14.10 and 3.15.2) drop nothing more that any build imports.
SINCE_3_13 = {
    "cp310": ["_PyThreadState_UncheckedGet->PyThreadState_GetUnchecked"],
    "cp311": ["_PyThreadState_UncheckedGet->PyThreadState_GetUnchecked"],
    "cp312": ["_PyThreadState_UncheckedGet->PyThreadState_GetUnchecked"],
    "cp38": "_PyObject_NextNotImplemented (no known successor)",
    "cp39": "_PyObject_NextNotImplemented (no known successor)",
}
EXPECTED_RENAMES = {(3, 13): SINCE_3_13, (3, 14): SINCE_3_13, (3, 15): SINCE_3_13}


def test_renames_this_interpreter_needs_for_each_build(tmp_path):
    if sys.version_info[:2] > max(EXPECTED_RENAMES):
        pytest.fail(f"no measured renames for CPython {sys.version_info[0]}.{sys.version_info[1]}: run this test's "
                    "loop there and record what it finds in EXPECTED_RENAMES and docs/internals/runtime.md")
    expected = EXPECTED_RENAMES.get(sys.version_info[:2], {})  # 3.10-3.12 load every build unchanged
    for row in (r for r in known_runtimes()["files"] if r["flavour"] == "cpu"):
        extension = extract(present_wheel(row["wheel"]), row["extension"], tmp_path / row["python_tag"])
        outcome = expected.get(row["python_tag"], [])
        if isinstance(outcome, str):
            with pytest.raises(RuntimeLoadError) as error:
                _elf.plan_renames(extension, interpreter_exports, interpreter_name())
            assert outcome in str(error.value) and interpreter_name() in str(error.value)
            assert "cannot load in this interpreter" in str(error.value)
        else:
            renames = _elf.plan_renames(extension, interpreter_exports, interpreter_name())
            assert [f"{r.old}->{r.new}" for r in renames] == outcome, row["wheel"]


def test_a_missing_cpython_symbol_is_a_clear_error_never_a_failed_dlopen(tmp_path):
    """A runtime file importing a CPython function this interpreter lacks, with no successor: the
    loader names the symbol and the interpreter before anything is mapped. The file is real (the
    surveyed cp312 build); the interpreter is asked about a symbol no CPython has."""
    row = next(r for r in known_runtimes()["files"] if r["python_tag"] == "cp312" and r["flavour"] == "cpu")
    extension = extract(present_wheel(row["wheel"]), row["extension"], tmp_path)
    imports = _elf.cpython_imports(extension)
    assert "PyLong_FromLong" in imports and len(imports) == row["cpython_imports"]
    dropped = "PyLong_FromLong"
    with pytest.raises(RuntimeLoadError, match=f"does not export: {dropped} \\(no known successor\\)"):
        _elf.plan_renames(extension, lambda name: name != dropped and interpreter_exports(name), "CPython 9.9")


def test_renaming_rewrites_only_the_names_and_the_finder_reads_the_copy_the_same(tmp_path):
    """Applied to a copy of the cp312 build: the renamed import reads as its successor, every other
    byte is unchanged, and the file is still a runtime the finder reads the same. (That the renamed
    copy loads and trains is proved on CPython 3.13 by tests/guarantees/test_cross_interpreter.py.)"""
    row = next(r for r in known_runtimes()["files"] if r["python_tag"] == "cp312" and r["flavour"] == "cpu")
    extension = extract(present_wheel(row["wheel"]), row["extension"], tmp_path)
    renames = _elf.plan_renames(
        extension, lambda name: name != "_PyThreadState_UncheckedGet" and (interpreter_exports(name) or name == "PyThreadState_GetUnchecked"),
        "CPython 3.13 (as this test asks)",
    )
    assert [(r.old, r.new) for r in renames] == [("_PyThreadState_UncheckedGet", "PyThreadState_GetUnchecked")]
    original = extension.read_bytes()
    data = bytearray(original)
    _elf.apply_renames(data, renames)
    changed = [i for i, (a, b) in enumerate(zip(original, data)) if a != b]
    start = renames[0].dynstr_offset
    assert changed and all(start <= i < start + len("_PyThreadState_UncheckedGet") + 1 for i in changed)
    renamed = tmp_path / "renamed.so"
    renamed.write_bytes(bytes(data))
    assert "PyThreadState_GetUnchecked" in _elf.cpython_imports(renamed)
    assert "_PyThreadState_UncheckedGet" not in _elf.cpython_imports(renamed)
    assert _elf.find_api_base(renamed, "1.19.2") == _elf.find_api_base(extension, "1.19.2")


def _cp312_extension(tmp_path: Path) -> Path:
    row = next(r for r in known_runtimes()["files"] if r["python_tag"] == "cp312" and r["flavour"] == "cpu")
    return extract(present_wheel(row["wheel"]), row["extension"], tmp_path)


def test_a_name_that_is_the_tail_of_a_longer_one_is_not_renamed(tmp_path):
    """Linkers may store a name as the tail of a longer one ("…X_PyThreadState_UncheckedGet"):
    rewriting it in place would change the longer name too, so the rename is refused."""
    extension = _cp312_extension(tmp_path)
    renames = _elf.plan_renames(
        extension, lambda name: name != "_PyThreadState_UncheckedGet" and (interpreter_exports(name) or name == "PyThreadState_GetUnchecked"),
        "CPython 3.13 (as this test asks)",
    )
    data = bytearray(extension.read_bytes())
    start = renames[0].dynstr_offset
    assert data[start - 1] == 0  # in the real file the name stands alone
    data[start - 1] = ord("X")  # now the name before runs on into it
    merged = tmp_path / "merged.so"
    merged.write_bytes(bytes(data))
    with _elf._opened(merged) as image, pytest.raises(RuntimeLoadError, match="shares its bytes"):
        _elf._check_not_shared(image, renames)


def test_a_truncated_runtime_file_is_a_clear_error(tmp_path, monkeypatch):
    """Cut to half its size, the file's section headers point past its end: pyelftools' own error
    leaked before; now the loader refuses the file, naming it, with a RuntimeLoadError."""
    from ort_cffi._native.loader import CACHE_ENV, load_library

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    extension = _cp312_extension(tmp_path)
    cut = tmp_path / "cut" / extension.name
    cut.parent.mkdir()
    cut.write_bytes(extension.read_bytes()[: extension.stat().st_size // 2])
    with pytest.raises(RuntimeLoadError, match="truncated or damaged"):
        _elf.find_api_base(cut, "1.19.2")
    with pytest.raises(RuntimeLoadError, match=f"{cut}.*truncated or damaged"):
        load_library(cut)


def test_the_version_check_locations_reproduce_the_survey(tmp_path):
    """Where pybind11's interpreter check keeps the version it was compiled for, per surveyed CPU file: the
    one NUL-delimited "3.X" that PyInit loads (docs/internals/runtime.md §7). The cp312 file's is the
    measured 0x10757ce."""
    rows = [row for row in known_runtimes()["files"] if row["flavour"] == "cpu"]
    for row in rows:
        extension = extract(present_wheel(row["wheel"]), row["extension"], tmp_path / row["python_tag"])
        compiled_for = f"{row['python_tag'][2]}.{row['python_tag'][3:]}"
        assert row["pybind11_version_check"] == {"compiled_for": compiled_for,
                                                 "offset": _elf.find_version_check(extension, compiled_for)}, row["wheel"]
    (cp312,) = [row for row in rows if row["python_tag"] == "cp312"]
    assert cp312["pybind11_version_check"]["offset"] == 0x10757CE


def test_every_surveyed_build_records_its_version_check():
    """The generator patches only a check the survey located, so a build whose row lacks it cannot generate on
    CPython 3.13+ (ort_cffi/runtime/generator.py). The CUDA rows once had none (their ~300 MB wheels were not
    downloaded when the field was added); scripts/survey_runtimes.py located it in each, read from the wheels.
    CI fetches only the CPU wheels, so the CUDA rows are checked here as data: each names its own CPython, at
    the offset the survey measured (the NUL-delimited "3.X" that PyInit loads, docs/internals/runtime.md §7)."""
    rows = known_runtimes()["files"]
    assert {row["flavour"] for row in rows} == {"cpu", "cuda"}
    for row in rows:
        compiled_for = f"{row['python_tag'][2]}.{row['python_tag'][3:]}"
        check = row["pybind11_version_check"]
        assert check is not None and check["compiled_for"] == compiled_for, row["wheel"]
        assert 0 < check["offset"] < row["extension_size"] - len(compiled_for), row["wheel"]
    cuda = {row["python_tag"]: row["pybind11_version_check"]["offset"] for row in rows if row["flavour"] == "cuda"}
    assert cuda == {"cp38": 0x1400B54, "cp39": 0x1400C54, "cp310": 0x1400C54, "cp311": 0x1401CD4}


def test_the_version_check_is_not_found_on_a_guess(tmp_path):
    """A version the file does not hold, or holds in more than one place, is no location."""
    extension = _cp312_extension(tmp_path)
    assert _elf.find_version_check(extension, "3.11") is None
    data = bytearray(extension.read_bytes())
    data[-6:] = b"\x003.12\x00"  # a second NUL-delimited "3.12", outside PyInit's reach
    doubled = tmp_path / "doubled.so"
    doubled.write_bytes(bytes(data))
    assert _elf.find_version_check(doubled, "3.12") is None


def test_the_version_check_is_patched_only_where_the_bytes_are_expected():
    data = bytearray(b"..\x003.12\x00..")
    before = bytes(data)
    for offset, compiled_for, running, message in (
        (2, "3.12", "3.13", "are not pybind11's version string"),  # off by one: the NUL before it
        (3, "3.11", "3.13", "are not pybind11's version string"),  # another version there
        (3, "3.12", "3.100", "differ in length"),
        (len(data), "3.12", "3.13", "are not pybind11's version string"),  # past the end (a truncated file)
    ):
        with pytest.raises(RuntimeLoadError, match=message):
            _elf.patch_version_check(data, offset, compiled_for, running)
        assert bytes(data) == before
    _elf.patch_version_check(data, 3, "3.12", "3.13")
    assert bytes(data) == b"..\x003.13\x00.."
