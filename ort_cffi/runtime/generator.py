"""ONNX Runtime's Python layer from a stored runtime: what ``ort_cffi.artifacts`` runs the generator with on
interpreters the training wheel does not install into (CPython 3.13 and later).

``ort-cffi-runtime install`` keeps, next to the native runtime, the wheel's own ``onnxruntime`` package (the
same hash-checked file; its native libraries are not copied twice) in the runtime's ``generator/`` folder.
To import it, an interpreter needs its own copy of the extension, named with its own suffix
(``onnxruntime_pybind11_state.cpython-313-x86_64-linux-gnu.so``) so that each interpreter finds only its
copy, with two changes (docs/internals/runtime.md §7):

- the CPython imports the interpreter no longer exports renamed to their successors, as the loader does;
- pybind11's interpreter check patched: ``PyInit`` refuses any interpreter whose version does not start
  with the ``"3.12"`` it was compiled for. The string is rewritten only at the offset the survey of published
  wheels recorded for that very file (``pybind11_version_check`` in ``data/runtimes.json``), after checking
  the bytes there; a file the survey does not know, or one whose location it did not record, is refused.

The copy is made once per interpreter, by ``install`` or at the first generation, and written under a
temporary name then renamed, so it is complete or absent.
"""
from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import List, Optional

from ort_cffi import RuntimeLoadError
from ort_cffi._facade.files import file_sha256
from ort_cffi._facade.runtimes import (
    StoredRuntime,
    apply_renames,
    interpreter_exports,
    interpreter_name,
    known_extension,
    patch_version_check,
    plan_renames,
    selected_runtime,
    stored_runtimes,
)
from ort_cffi.runtime.errors import RuntimeInstallError

GENERATOR_FOLDER = "generator"  # in a stored runtime's folder: the folder to put first on the child's sys.path
PACKAGE_PREFIX = "onnxruntime/"
NATIVE_PREFIX = "onnxruntime/capi/"
EXTENSION_STEM = "onnxruntime_pybind11_state"
# The oldest build whose Python layer imports in a newer CPython once patched: pybind11 compiled for CPython
# 3.11 or older reads interpreter internals that changed in 3.12, and such a copy crashes in PyInit (measured:
# the cp311 CPU and CUDA builds in 3.12 and 3.13; docs/internals/runtime.md §7). cp312 in 3.13 works.
OLDEST_PATCHABLE = (3, 12)


def running_version() -> str:
    """This interpreter's version as pybind11 checks it: "3.13"."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def extension_name() -> str:
    """The file name this interpreter imports the extension under (its own suffix, no other interpreter's)."""
    return EXTENSION_STEM + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def generator_folder(runtime: StoredRuntime) -> Path:
    return runtime.folder / GENERATOR_FOLDER


def has_generator(runtime: StoredRuntime) -> bool:
    """Whether ``install`` kept the wheel's Python training layer in this runtime's folder (older ort_cffi
    versions kept only the native libraries)."""
    return (generator_folder(runtime) / "onnxruntime" / "training" / "artifacts.py").is_file()


def keep_generator(archive: zipfile.ZipFile, staging: Path) -> None:
    """Unpack the wheel's ``onnxruntime`` package into ``staging/generator``, without its native libraries:
    the runtime's own are in ``staging`` already, and the sibling libraries are linked to them (relative
    links, which survive the folder's rename); the extension is copied per interpreter later."""
    target_root = staging / GENERATOR_FOLDER
    for member in archive.namelist():
        if not member.startswith(PACKAGE_PREFIX) or member.endswith("/"):
            continue
        name = member.rsplit("/", 1)[-1]
        target = target_root / member
        target.parent.mkdir(parents=True, exist_ok=True)
        if member.startswith(NATIVE_PREFIX) and ".so" in name:
            if not name.startswith(EXTENSION_STEM):
                target.symlink_to(os.path.relpath(staging / name, target.parent))
            continue
        with archive.open(member) as source, open(target, "wb") as out:
            out.write(source.read())


def prepare_generator(runtime: StoredRuntime) -> Path:
    """The folder to put first on ``sys.path`` to import the stored runtime's Python layer in this
    interpreter; its copy of the extension is made now if missing. Raises ``RuntimeInstallError`` for a
    runtime kept without that layer, a file the survey does not know (truncated, another build) or whose
    version check it did not locate, an interpreter older than the build, and a build older than CPython 3.12
    in a newer interpreter: nothing is patched then."""
    folder = generator_folder(runtime)
    if not has_generator(runtime):
        raise RuntimeInstallError(
            f"{runtime.name} in {runtime.folder} was installed without ONNX Runtime's Python layer (by an older "
            "ort_cffi): run `ort-cffi-runtime install --force` to keep it"
        )
    target = folder / "onnxruntime" / "capi" / extension_name()
    if target.is_file():
        return folder
    source = runtime.extension_path
    content = bytearray(source.read_bytes())  # read once: hashed, planned against, copied
    row = known_extension(file_sha256(source))
    if row is None:
        raise RuntimeInstallError(
            f"{source} is not a runtime file the survey of published wheels knows (truncated, changed, or another "
            "build): ort_cffi patches only files whose layout was surveyed; reinstall it with "
            "`ort-cffi-runtime install --force`"
        )
    check = row.get("pybind11_version_check")
    if not check:
        raise RuntimeInstallError(
            f"the survey did not locate pybind11's version check in {row['extension']} of {row['wheel']}: ort_cffi "
            f"does not patch an unsurveyed layout. Generate with an interpreter that has ONNX Runtime's Python "
            f"layer (--python), or install the CPU build (`ort-cffi-runtime install`)"
        )
    compiled_for, running = check["compiled_for"], running_version()
    if tuple(map(int, running.split("."))) < tuple(map(int, compiled_for.split("."))):
        raise RuntimeInstallError(
            f"{runtime.name} was built for CPython {compiled_for}; as a Python module it imports in that CPython "
            f"and later ones only, not in {interpreter_name()}: install the build for this interpreter "
            f"(`ort-cffi-runtime install --python-version {running}`)"
        )
    if running != compiled_for and tuple(map(int, compiled_for.split("."))) < OLDEST_PATCHABLE:
        raise RuntimeInstallError(
            f"{runtime.name} was built for CPython {compiled_for}, whose Python layer crashes in newer interpreters "
            f"(pybind11 reads CPython internals that changed in 3.12): it generates in CPython {compiled_for} only. "
            "Here, install the CPU build for CPython 3.12 (`ort-cffi-runtime install --python-version 3.12`), or "
            "name an interpreter with ONNX Runtime's Python layer (--python)"
        )
    try:
        renames = plan_renames(source, interpreter_exports, interpreter_name())
        if running != compiled_for:
            patch_version_check(content, int(check["offset"]), compiled_for, running)
        apply_renames(content, renames)
    except RuntimeLoadError as error:
        raise RuntimeInstallError(f"cannot prepare {source} for {interpreter_name()}: {error}") from error
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as tmp:
        try:
            tmp.write(content)
            tmp.flush()
            os.chmod(tmp.name, 0o755)
            os.replace(tmp.name, target)
        except BaseException:
            os.unlink(tmp.name)
            raise
    return folder


def prepared_changes(runtime: StoredRuntime) -> List[str]:
    """What this interpreter's copy changes, in words (for ``ort-cffi-runtime install``)."""
    row = known_extension(file_sha256(runtime.extension_path)) or {}
    check = row.get("pybind11_version_check") or {}
    changes = [f"{r.old} -> {r.new}" for r in plan_renames(runtime.extension_path, interpreter_exports, interpreter_name())]
    if check and check["compiled_for"] != running_version():
        changes.append(f"pybind11's version check {check['compiled_for']} -> {running_version()} at 0x{check['offset']:x}")
    return changes


def stored_generator() -> Optional[Path]:
    """The folder of the stored Python layer this interpreter generates with, prepared: the runtime the loader
    would use if it can serve, else the most recently installed one that can. None when no stored runtime
    has that layer; ``RuntimeInstallError`` (the first one's reason) when none of those can be prepared here."""
    runtimes = stored_runtimes()
    chosen = selected_runtime(runtimes)
    ordered = ([chosen] if chosen is not None else []) + [r for r in runtimes if r is not chosen]
    refusals: List[RuntimeInstallError] = []
    for runtime in (r for r in ordered if has_generator(r)):
        try:
            return prepare_generator(runtime)
        except RuntimeInstallError as refusal:  # another stored build (the CPU one beside a CUDA one) may serve
            refusals.append(refusal)
    if refusals:
        raise refusals[0]
    return None
