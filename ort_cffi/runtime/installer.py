"""Fetch ONNX Runtime's training build where pip cannot install it (the ``ort-cffi-runtime`` command's work).
With ``--inference`` it fetches the C library of the current inference build instead (``inference.py``).

ONNX Runtime published its last training build, 1.19.2, for CPython 3.8-3.12 (CUDA: 3.8-3.11) on
Linux x86_64, and will publish no other. The loader never runs the wheel's Python code, only its
native runtime, which it reads statically and loads privately (see ``_native/loader.py``), so the build of
the nearest CPython serves any newer interpreter. This command fetches that wheel with pip itself
(``pip download --only-binary=:all: --no-deps --python-version … --platform …``, which checks
PyPI's hash; the hash is checked once more against ort_cffi's survey of the published wheels). It keeps
the wheel's native libraries in the runtime store, where the loader looks after ``$ORT_CFFI_LIBRARY`` and
an installed wheel, and its ``onnxruntime`` Python package, with which ``ort_cffi.artifacts`` runs ONNX
Runtime's generator in this interpreter (``generator.py``). It writes the store the loader reads (the
facade's ``runtimes`` module names both), and checks what it installed by loading it through the facade in
a child process.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ort_cffi._facade.files import file_sha256
from ort_cffi._facade.runtimes import (
    LIBRARY_ENV,
    SELECT_ENV,
    StoredRuntime,
    find_runtime_file,
    known_runtimes,
    store_dir,
    stored_runtimes,
)
from ort_cffi.runtime.errors import RuntimeInstallError
from ort_cffi.runtime.store_entry import publish
from ort_cffi.runtime.generator import has_generator, keep_generator
from ort_cffi.runtime.inference import (
    INFERENCE_FLAVOURS,
    MANYLINUX_GLIBC,
    choose_inference_wheel,
    install_library,
    row_of_inference_wheel,
)

__all__ = ["main", "install", "choose_wheel", "RuntimeInstallError"]

FLAVOURS = {"cpu": "onnxruntime-training-cpu", "cuda": "onnxruntime-training"}
NATIVE_PREFIX = "onnxruntime/capi/"


def machine() -> str:
    """This machine's architecture as wheel tags spell it."""
    arch = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def published_wheels(flavour: str) -> List[Dict[str, Any]]:
    """The survey's rows of one flavour (what ONNX Runtime published for Linux)."""
    return [row for row in known_runtimes()["files"] if row["flavour"] == flavour]


def choose_wheel(flavour: str, python_version: tuple[int, int], arch: str) -> Dict[str, Any]:
    """The published wheel for the CPython nearest to ``python_version`` on ``arch``: the same
    version if there is one, else the newest older one, else the oldest newer one."""
    if sys.platform != "linux":
        raise RuntimeInstallError(f"ort_cffi loads ELF runtimes on Linux only, not on {sys.platform}")
    rows = [row for row in published_wheels(flavour) if row["machine"] == arch]
    if not rows:
        built = sorted({row["machine"] for row in published_wheels(flavour)})
        raise RuntimeInstallError(
            f"ONNX Runtime published no {FLAVOURS[flavour]} {known_runtimes()['version']} wheel for Linux {arch} "
            f"(only for {', '.join(built)}). Build ONNX Runtime 1.19 from source with --build_shared_lib "
            "--enable_training_apis and set ORT_CFFI_LIBRARY to its libonnxruntime.so"
        )

    def version_of(row: Dict[str, Any]) -> tuple[int, int]:
        tag = row["python_tag"]  # cp312
        return int(tag[2]), int(tag[3:])

    older = [row for row in rows if version_of(row) <= python_version]
    if older:
        return max(older, key=version_of)
    return min(rows, key=version_of)


def has_training_build(arch: str) -> bool:
    """Whether ONNX Runtime published a training build for Linux ``arch`` (x86_64 only)."""
    return any(row["machine"] == arch for row in known_runtimes()["files"])


def glibc_version() -> tuple[int, int]:
    """This system's glibc version; ``RuntimeInstallError`` on a system without glibc."""
    no_glibc = RuntimeInstallError("ONNX Runtime's Linux wheels are manylinux builds and need glibc; this system has none")
    # Windows has no os.confstr, and macOS knows no CS_GNU_LIBC_VERSION (os.confstr would raise ValueError)
    if sys.platform == "win32" or "CS_GNU_LIBC_VERSION" not in os.confstr_names:
        raise no_glibc
    name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    if name != "glibc":
        raise no_glibc
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def download_wheel(row: Dict[str, Any], folder: Path) -> Path:
    """Fetch the wheel of ``row`` into ``folder`` with pip, which checks PyPI's hash."""
    python_version = f"{row['python_tag'][2]}.{row['python_tag'][3:]}"
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "--python-version", python_version, "--dest", str(folder), f"{row['distribution']}=={row['version']}",
    ]
    for tag in row["platform"].split("."):
        command += ["--platform", tag]
    print(f"fetching {row['wheel']} ({row['wheel_size'] / 2**20:.0f} MB) with pip", flush=True)  # also an inference row
    try:
        subprocess.run(command, check=True)
    except FileNotFoundError as error:
        raise RuntimeInstallError(f"cannot run pip ({error})") from error
    except subprocess.CalledProcessError as error:
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            raise RuntimeInstallError(
                f"{sys.executable} has no pip: run `{sys.executable} -m ensurepip`, or download {row['wheel']} "
                "elsewhere and pass it with --wheel"
            ) from error
        raise RuntimeInstallError(f"pip could not download {row['wheel']} (exit {error.returncode}; see above)") from error
    path = folder / row["wheel"]
    if not path.is_file():
        raise RuntimeInstallError(f"pip reported success but {path} is not there")
    return path


def row_of_wheel(wheel: Path) -> Dict[str, Any]:
    """The survey's row for a wheel file, checked by hash: only published files are installed."""
    digest = file_sha256(wheel)
    for row in known_runtimes()["files"]:
        if row["wheel_sha256"] == digest:
            return row
    raise RuntimeInstallError(
        f"{wheel} (sha256 {digest}) is not one of the published 1.19.2 Linux training wheels ort_cffi knows; "
        "for another build, set ORT_CFFI_LIBRARY to its runtime file instead"
    )


def install_wheel(wheel: Path, row: Dict[str, Any]) -> StoredRuntime:
    """Unpack the native libraries and the Python package of a checked wheel into a new store folder, atomically."""
    name = f"{row['flavour']}-{row['version']}-{row['python_tag']}-{row['machine']}"
    root = store_dir()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(NATIVE_PREFIX) and ".so" in m.rsplit("/", 1)[-1]]
            for member in members:
                target = staging / member[len(NATIVE_PREFIX):]
                with archive.open(member) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
                os.chmod(target, 0o755)
            keep_generator(archive, staging)
        extension = Path(row["extension"]).name
        if file_sha256(staging / extension) != row["extension_sha256"]:
            raise RuntimeInstallError(f"{extension} in {wheel} differs from the survey's: refusing it")
        runtime = StoredRuntime(
            folder=root / name, name=name, flavour=row["flavour"], distribution=row["distribution"],
            version=row["version"], wheel=row["wheel"], wheel_sha256=row["wheel_sha256"], extension=extension,
            installed_ns=time.time_ns(),
        )
        return publish(staging, runtime)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_loads(runtime: StoredRuntime) -> str:
    """Load the installed runtime in a child process through ort_cffi's facade; what it reports."""
    code = (
        "from ort_cffi import OrtEnvironment, backend; from ort_cffi.capi import get_runtime\n"
        "env = OrtEnvironment.getEnvironment(); rt = get_runtime()\n"
        "print(f'ONNX Runtime {rt.version} loads here, training API {\"present\" if rt.training_api is not None else \"absent\"}'"
        " + (f', CPython imports renamed: {\", \".join(rt.renamed)}' if rt.renamed else '') + f'; backend: {backend()}')\n"
    )
    env = dict(os.environ, **{SELECT_ENV: runtime.name, "ORT_CFFI_LIBRARY": ""})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeInstallError(
            f"the runtime was installed in {runtime.folder} but does not load in {sys.executable}:\n{proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout.strip()


def install(
    flavour: str, python_version: Optional[Tuple[int, int]], wheel: Optional[Path], force: bool, version: Optional[str] = None
) -> StoredRuntime:
    """Fetch (or take ``wheel``) and install a runtime into the store; what was installed.

    ``flavour`` is "cpu" or "cuda" (the 1.19.2 training build), or "inference" or "inference-gpu" (the C
    library of an ``onnxruntime``/``onnxruntime-gpu`` wheel, of ``version`` or the newest surveyed one);
    ``python_version`` ((3, 12)) picks a training build other than the nearest one. An installed identical
    runtime is kept unless ``force``. Raises ``RuntimeInstallError``."""
    if flavour in INFERENCE_FLAVOURS or (wheel is not None and is_inference_wheel(wheel)):
        return install_inference(flavour, version, wheel, force)
    from filelock import FileLock

    arch = machine()
    if wheel is not None:
        row = row_of_wheel(wheel)
    else:
        wanted = python_version or (sys.version_info[0], sys.version_info[1])
        row = choose_wheel(flavour, wanted, arch)
        glibc = glibc_version()
        if glibc < (2, 27):
            raise RuntimeInstallError(f"the training wheels need glibc 2.27 or newer; this system has {glibc[0]}.{glibc[1]}")
    store_dir().mkdir(parents=True, exist_ok=True)
    with FileLock(str(store_dir() / ".install.lock"), timeout=3600):
        for runtime in stored_runtimes():
            if runtime.wheel_sha256 == row["wheel_sha256"] and not force:
                if has_generator(runtime):
                    print(f"{runtime.name} is already installed in {runtime.folder} (--force reinstalls it)")
                    return runtime
                print(f"{runtime.name} is installed without ONNX Runtime's Python layer, which ort-cffi-artifacts "
                      "runs the generator with: installing it again")
        if wheel is not None:
            return install_wheel(wheel, row)
        with tempfile.TemporaryDirectory(prefix="ort-cffi-runtime-") as tmp:
            downloaded = download_wheel(row, Path(tmp))
            if file_sha256(downloaded) != row["wheel_sha256"]:
                raise RuntimeInstallError(f"{downloaded.name} differs from the published file ort_cffi surveyed")
            return install_wheel(downloaded, row)


def is_inference_wheel(wheel: Path) -> bool:
    """Whether a wheel file is one of the surveyed inference wheels (by hash)."""
    try:
        row_of_inference_wheel(wheel)
    except RuntimeInstallError:
        return False
    return True


def install_inference(flavour: str, version: Optional[str], wheel: Optional[Path], force: bool) -> StoredRuntime:
    """``install`` for an inference build (``inference.py``)."""
    from filelock import FileLock

    if wheel is not None:
        row = row_of_inference_wheel(wheel)
    else:
        row = choose_inference_wheel(flavour, version, machine())
        glibc = glibc_version()
        if glibc < MANYLINUX_GLIBC:
            raise RuntimeInstallError(
                f"{row['wheel']} needs glibc {MANYLINUX_GLIBC[0]}.{MANYLINUX_GLIBC[1]} or newer; this system has {glibc[0]}.{glibc[1]}"
            )
    store_dir().mkdir(parents=True, exist_ok=True)
    with FileLock(str(store_dir() / ".install.lock"), timeout=3600):
        for runtime in stored_runtimes():
            if runtime.wheel_sha256 == row["wheel_sha256"] and not force:
                print(f"{runtime.name} is already installed in {runtime.folder} (--force reinstalls it)")
                return runtime
        if wheel is not None:
            return install_library(wheel, row)
        with tempfile.TemporaryDirectory(prefix="ort-cffi-runtime-") as tmp:
            downloaded = download_wheel(row, Path(tmp))
            if file_sha256(downloaded) != row["wheel_sha256"]:
                raise RuntimeInstallError(f"{downloaded.name} differs from the published file ort_cffi surveyed")
            return install_library(downloaded, row)


def loader_choice() -> Tuple[Optional[str], Any, List[str]]:
    """What the loader would load in this environment, without loading it: ``$ORT_CFFI_LIBRARY`` if
    set, else the runtime file the default search settles on (a ``RuntimeFile``, or None) and the
    places it tried."""
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return explicit, None, []
    source, tried = find_runtime_file()
    return None, source, tried


def describe_choice(explicit: Optional[str], source: Any, tried: List[str]) -> str:
    """`loader_choice`'s answer in words."""
    if explicit:
        return f"${LIBRARY_ENV} = {explicit}"
    if source is None:
        return "none found:\n  - " + "\n  - ".join(tried)
    return f"{source.description}: {source.path}"
