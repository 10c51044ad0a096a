"""Layer 1: find a training-enabled ONNX Runtime and hand back the address of its ``OrtApiBase``.

Two sources, tried in this order:

1. **An explicit shared library** (``load_runtime(path)`` or the ``ORT_CFFI_LIBRARY`` variable): a
   real ``libonnxruntime.so`` built with the training API. ``dlopen`` + ``OrtGetApiBase``.
2. **The installed training wheel** (``onnxruntime-training-cpu`` or ``onnxruntime-training``). Its
   C API is linked into ``onnxruntime_pybind11_state*.so`` but not exported, and the image that
   ``import onnxruntime`` loads cannot create an ``OrtEnv`` (runtime-notes §1–2). So:

   - a short child process imports ``onnxruntime``, hands our hook library (``ort_cffi._hook``) to
     the runtime's custom-op hook, receives the ``OrtApiBase*`` and reports its offset from the
     exported ``PyInit_onnxruntime_pybind11_state``. That offset depends only on the file, so it
     is cached, keyed by the file's identity, and remeasured when stale or unreadable;
   - the user's process loads a *private copy* of the file (a different inode, so the dynamic
     loader does not hand back an image that ``import onnxruntime`` may load; ``PyInit`` never
     runs there), finds ``PyInit_…`` with ``dlsym`` and adds the offset. Before anything is called
     through that address, the address and the two function pointers it holds are checked to lie
     inside the private image. ``onnxruntime`` and ``torch`` are never imported in the user's process.

The version checks that need the declared tables are made one layer up, in ``capi.py``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Optional

from cffi import FFI

from ._errors import RuntimeLoadError, RuntimeNotFoundError, StaleProbeError
from ._ffi import ffi

LIBRARY_ENV = "ORT_CFFI_LIBRARY"
CACHE_ENV = "ORT_CFFI_CACHE_DIR"
TRAINING_WHEELS = ("onnxruntime-training-cpu", "onnxruntime-training")
PYINIT = "PyInit_onnxruntime_pybind11_state"
INSTALL_HINT = (
    "install the training runtime with `pip install 'ort_cffi[cpu]'` (onnxruntime-training-cpu==1.19.2; "
    "`[cuda]` for onnxruntime-training), or point ORT_CFFI_LIBRARY at a libonnxruntime.so built with "
    "--enable_training_apis"
)
_PROBE_FORMAT = 1  # bump when the cached probe's content changes

_dl = FFI()
_dl.cdef(
    """
    void* dlopen(const char* filename, int flags);
    void* dlsym(void* handle, const char* symbol);
    char* dlerror(void);
    """
)
_RTLD_NOW = 2
_RTLD_LOCAL = 0


def _open_libdl() -> Any:
    try:
        libc = _dl.dlopen(None)  # glibc >= 2.34 has dlopen in libc itself
        libc.dlopen  # noqa: B018 - raises AttributeError when absent
        return libc
    except (OSError, AttributeError):
        return _dl.dlopen("libdl.so.2")


_libdl = _open_libdl()


def _dlerror() -> str:
    err = _libdl.dlerror()
    return _dl.string(err).decode(errors="replace") if err != _dl.NULL else "unknown error"


def _dlopen(path: str) -> Any:
    handle = _libdl.dlopen(path.encode(), _RTLD_NOW | _RTLD_LOCAL)
    if handle == _dl.NULL:
        raise RuntimeLoadError(f"cannot load {path}: {_dlerror()}")
    return handle


def _dlsym(handle: Any, name: str) -> int:
    _libdl.dlerror()
    address = _libdl.dlsym(handle, name.encode())
    return int(_dl.cast("uintptr_t", address))


@dataclasses.dataclass(frozen=True)
class LoadedImage:
    """A runtime image mapped into this process, and where its ``OrtApiBase`` lies."""

    api_base_address: int
    library: str  # the file the runtime came from (the wheel's extension, or the explicit library)
    image: str  # the file actually dlopened (a private copy for the wheel)
    kind: str  # "wheel" or "library"
    expected_version: Optional[str]  # the wheel's version from its metadata; None for a library
    handle: object = dataclasses.field(repr=False, compare=False)  # the dlopen handle, kept alive


# --- explicit library -------------------------------------------------------------------------


def load_library(path: "str | os.PathLike[str]") -> LoadedImage:
    """dlopen a real ONNX Runtime shared library and call its exported ``OrtGetApiBase``."""
    path = os.fspath(path)
    if os.sep in path or os.path.exists(path):
        if not os.path.exists(path):
            raise RuntimeNotFoundError(f"ONNX Runtime library {path!r} does not exist; {INSTALL_HINT}")
        path = os.path.abspath(path)  # dlopen would search the library path for a name without a slash
    handle = _dlopen(path)  # a bare soname ("libonnxruntime.so.1.19.2") is searched where dlopen looks
    get_api_base = _dlsym(handle, "OrtGetApiBase")
    if not get_api_base:
        hint = ""
        if "pybind11_state" in os.path.basename(path):
            hint = " (that is the Python wheel's extension: unset ORT_CFFI_LIBRARY and ort_cffi finds the wheel itself)"
        raise RuntimeLoadError(f"{path} exports no OrtGetApiBase: it is not an ONNX Runtime shared library{hint}")
    api_base = ffi.cast("const OrtApiBase*(*)(void)", get_api_base)()
    return LoadedImage(
        api_base_address=int(ffi.cast("uintptr_t", api_base)),
        library=os.path.realpath(path),
        image=os.path.realpath(path),
        kind="library",
        expected_version=None,
        handle=handle,
    )


# --- the training wheel ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WheelRuntime:
    distribution: str  # onnxruntime-training-cpu or onnxruntime-training
    version: str
    extension: Path  # onnxruntime/capi/onnxruntime_pybind11_state*.so


def find_training_wheel() -> "tuple[Optional[WheelRuntime], list[str]]":
    """The installed training wheel (without importing it), and what was tried on the way."""
    tried: list[str] = []
    spec = find_spec("onnxruntime")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        tried.append("the onnxruntime-training-cpu / onnxruntime-training wheel: no `onnxruntime` package on sys.path")
        return None, tried
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    for name in TRAINING_WHEELS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        extensions = sorted((package_dir / "capi").glob("onnxruntime_pybind11_state*.so"))
        if not extensions:
            tried.append(f"the {name} wheel: no onnxruntime_pybind11_state*.so in {package_dir / 'capi'}")
            continue
        return WheelRuntime(name, dist.version, extensions[0]), tried
    others = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            others.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    found = f" (found {', '.join(others)} at {package_dir}: an inference-only build)" if others else ""
    tried.append(f"the onnxruntime-training-cpu / onnxruntime-training wheel: not installed{found}")
    return None, tried


def cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("ort_cffi", appauthor=False))


def _identity(wheel: WheelRuntime) -> dict:
    st = wheel.extension.stat()
    return {
        "format": _PROBE_FORMAT,
        "file": str(wheel.extension.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
        "version": wheel.version,
    }


def _entry_dir(identity: dict) -> Path:
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / f"runtime-{key}"


_PROBE_SCRIPT = r"""
import ctypes, json, sys
import ort_cffi._hook as hook  # loaded (and held) before the runtime dlopens it by path
import onnxruntime
from onnxruntime.capi import onnxruntime_pybind11_state as extension
options = onnxruntime.SessionOptions()
options.register_custom_ops_library(hook.__file__)
api_base = int(hook.ffi.cast("uintptr_t", hook.lib.ort_cffi_received_api_base()))
if not api_base:
    sys.exit("the custom-op hook did not receive an OrtApiBase")
image = ctypes.CDLL(extension.__file__)  # the image already loaded by the import
pyinit = ctypes.cast(getattr(image, sys.argv[1]), ctypes.c_void_p).value
version = ctypes.cast(ctypes.cast(api_base + ctypes.sizeof(ctypes.c_void_p),
                                  ctypes.POINTER(ctypes.CFUNCTYPE(ctypes.c_char_p)))[0], ctypes.CFUNCTYPE(ctypes.c_char_p))()
print(json.dumps({"offset": api_base - pyinit, "file": extension.__file__, "version": version.decode()}))
"""


def measure_offset(wheel: WheelRuntime) -> dict:
    """Run the probe in a child process: the offset of ``OrtApiBase`` from ``PyInit_…``."""
    env = dict(os.environ)
    env.pop(LIBRARY_ENV, None)
    package_parent = str(Path(__file__).resolve().parent.parent)  # the child imports this very ort_cffi
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, PYINIT],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeLoadError(f"measuring where the C API lies in {wheel.extension} failed: {error}") from error
    if proc.returncode != 0:
        raise RuntimeLoadError(
            f"measuring where the C API lies in {wheel.extension} failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError) as error:
        raise RuntimeLoadError(f"the probe of {wheel.extension} printed no result: {proc.stdout[-500:]!r}") from error
    if Path(result["file"]).resolve() != wheel.extension.resolve():
        raise RuntimeLoadError(
            f"the probe imported onnxruntime from {result['file']}, not {wheel.extension}: "
            "two onnxruntime installations are on the path"
        )
    return {"offset": int(result["offset"]), "probed_version": result["version"]}


def _read_entry(entry: Path, identity: dict) -> Optional[dict]:
    """The cached probe if it is readable, complete and for this very file; else None."""
    try:
        cached = json.loads((entry / "probe.json").read_text())
        image = entry / wheel_image_name(identity)
        if cached.get("identity") != identity or image.stat().st_size != identity["size"]:
            return None
        int(cached["offset"])
        return dict(cached)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def wheel_image_name(identity: dict) -> str:
    return Path(identity["file"]).name


def _write_entry(entry: Path, wheel: WheelRuntime, identity: dict, probe: dict) -> None:
    """Copy the extension privately (with links to its sibling libraries) and store the probe."""
    entry.mkdir(parents=True, exist_ok=True)
    source_dir = wheel.extension.resolve().parent
    for sibling in source_dir.glob("*.so*"):  # provider libraries are found beside the runtime
        if sibling.name == wheel.extension.name:
            continue
        link = entry / sibling.name
        if not link.is_symlink() or os.readlink(link) != str(sibling):
            tmp_link = entry / f".{sibling.name}.{os.getpid()}"
            tmp_link.unlink(missing_ok=True)
            tmp_link.symlink_to(sibling)
            os.replace(tmp_link, link)
    image = entry / wheel.extension.name
    if not image.is_file() or image.stat().st_size != identity["size"]:
        with tempfile.NamedTemporaryFile(dir=entry, prefix=".image.", delete=False) as tmp:
            with open(wheel.extension, "rb") as src:
                shutil.copyfileobj(src, tmp, 1 << 20)
        os.replace(tmp.name, image)
    record = {"identity": identity, **probe}
    with tempfile.NamedTemporaryFile("w", dir=entry, prefix=".probe.", delete=False) as probe_file:
        json.dump(record, probe_file)
    os.replace(probe_file.name, entry / "probe.json")


def prepare_wheel_image(wheel: WheelRuntime, *, refresh: bool = False) -> "tuple[Path, dict]":
    """The private image of the wheel's extension and its probe, measured now or taken from the cache."""
    identity = _identity(wheel)
    entry = _entry_dir(identity)
    cached = None if refresh else _read_entry(entry, identity)
    if cached is not None:
        return entry / wheel.extension.name, cached
    from filelock import FileLock

    from filelock import Timeout

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(entry) + ".lock", timeout=600):
            cached = None if refresh else _read_entry(entry, identity)  # another process may have just written it
            if cached is None:
                probe = measure_offset(wheel)
                _write_entry(entry, wheel, identity, probe)
                _prune_stale_entries(entry)
                cached = _read_entry(entry, identity)
                if cached is None:
                    raise RuntimeLoadError(f"the runtime cache at {entry} could not be written or read back")
    except (OSError, Timeout) as error:
        raise RuntimeLoadError(
            f"the runtime cache at {entry.parent} is not usable ({error}); set {CACHE_ENV} to a writable folder"
        ) from error
    return entry / wheel.extension.name, cached


def _prune_stale_entries(keep: Path) -> None:
    """Remove cached images whose runtime file no longer exists as it was (a reinstalled or deleted
    wheel): each holds a copy of a large library. Entries of other live installations stay."""
    for entry in keep.parent.glob("runtime-*"):
        if entry == keep or not entry.is_dir():
            continue
        try:
            identity = json.loads((entry / "probe.json").read_text())["identity"]
            source = Path(identity["file"])
            if source.is_file() and source.stat().st_size == identity["size"] and source.stat().st_mtime_ns == identity["mtime_ns"]:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: stale too
        shutil.rmtree(entry, ignore_errors=True)


def _image_ranges(image: str) -> "list[tuple[int, int, str]]":
    """The mappings of ``image`` in this process: (start, end, permissions)."""
    ranges = []
    real = os.path.realpath(image)
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            # A mapped file replaced on disk since shows as "<path> (deleted)": still the image.
            if len(fields) == 6 and fields[5].strip().removesuffix(" (deleted)") == real:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end, fields[1]))
    return ranges


def check_inside_image(image: str, api_base_address: int) -> None:
    """Refuse an ``OrtApiBase`` address (and its two function pointers) outside the loaded image."""
    ranges = _image_ranges(image)

    def inside(address: int, permission: str) -> bool:
        return any(start <= address < end and permission in perms for start, end, perms in ranges)

    pointer_size = ffi.sizeof("void*")
    if not inside(api_base_address, "r") or not inside(api_base_address + 2 * pointer_size - 1, "r"):
        raise StaleProbeError(
            f"the measured OrtApiBase address 0x{api_base_address:x} is not inside {image}: refusing to call through it"
        )
    slots = ffi.cast("void**", api_base_address)
    for index, name in enumerate(("GetApi", "GetVersionString")):
        target = int(ffi.cast("uintptr_t", slots[index]))
        if not inside(target, "x"):
            raise StaleProbeError(
                f"OrtApiBase.{name} (0x{target:x}) does not point into the code of {image}: refusing to call it"
            )


def load_wheel(wheel: WheelRuntime, *, refresh: bool = False) -> LoadedImage:
    image, probe = prepare_wheel_image(wheel, refresh=refresh)
    handle = _dlopen(str(image))
    pyinit = _dlsym(handle, PYINIT)
    if not pyinit:
        raise RuntimeLoadError(f"{image} has no {PYINIT}: not the onnxruntime wheel's extension")
    api_base_address = pyinit + int(probe["offset"])
    check_inside_image(str(image), api_base_address)
    return LoadedImage(
        api_base_address=api_base_address,
        library=str(wheel.extension.resolve()),
        image=str(image),
        kind="wheel",
        expected_version=wheel.version,
        handle=handle,
    )


def find_and_load(library: "str | os.PathLike[str] | None" = None) -> LoadedImage:
    """Load the runtime: ``library`` if given, else ``$ORT_CFFI_LIBRARY``, else the training wheel."""
    if library is not None:
        return load_library(library)
    from_env = os.environ.get(LIBRARY_ENV)
    if from_env:
        return load_library(from_env)
    wheel, tried = find_training_wheel()
    if wheel is None:
        tried.insert(0, f"${LIBRARY_ENV}: not set")
        raise RuntimeNotFoundError(
            "no training-enabled ONNX Runtime found. Tried:\n  - " + "\n  - ".join(tried) + f"\nTo fix: {INSTALL_HINT}."
        )
    return load_wheel(wheel)
