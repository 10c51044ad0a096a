"""Find an ONNX Runtime and hand back the address of its ``OrtApiBase``.

Sources, tried in this order:

1. **An explicit file** (``load_runtime(path)`` or ``$ORT_CFFI_LIBRARY``): a real
   ``libonnxruntime.so`` (``dlopen`` + its exported ``OrtGetApiBase``), with or without the training API,
   or a training wheel's ``onnxruntime_pybind11_state*.so`` (read as in 2).
2. **A runtime fetched by ``ort-cffi-runtime install``**, when ``$ORT_CFFI_RUNTIME`` names one.
3. **The installed training wheel** (``onnxruntime-training-cpu`` or ``onnxruntime-training``).
4. **An installed inference wheel** (``onnxruntime`` or ``onnxruntime-gpu``, 1.19 or later): the C library it
   ships beside its extension (``capi/libonnxruntime.so.*``, ``.dylib`` or ``.dll``), a plain C library that
   exports ``OrtGetApiBase`` and links no CPython. ort_cffi's engine trains on it (``ort_cffi._backends``).
5. **The runtime store**: the most recently fetched runtime (``ort-cffi-runtime install``). A stored
   training build is an extension, loaded as in 3; a stored inference build (``install --inference``) is the C
   library of 4, dlopened from the store.

A wheel's C API is linked into its Python extension but not exported, and the image that
``import onnxruntime`` loads cannot create an ``OrtEnv`` (docs/internals/runtime.md §1–2). So the loader maps a
*private copy* of the file (another inode: the dynamic loader never hands back an image that
``import onnxruntime`` may load; ``PyInit`` never runs there) and finds ``OrtApiBase`` in it
statically (``elf.find_api_base``: no child process, no ``import onnxruntime``, no compiled code).
The copy is made once per file and interpreter and kept in the image cache with what was found:

- its sha256 is looked up in the survey of published wheels (``data/runtimes.json``, written by the
  same finder when the wheels were surveyed); a known file whose static answer now differs from the
  survey's is refused;
- CPython imports the running interpreter no longer exports are renamed to their successors in the
  copy (``elf.CPYTHON_SUCCESSORS``), so that e.g. the cp312 runtime loads in CPython 3.13;
- before anything is called through the address, it and the two function pointers it holds are
  checked to lie inside the mapped image.

The version checks that need the declared tables are made in ``tables``, which loads them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any, List, Optional, Tuple

from ort_cffi._native.dynlib import find_symbol, interpreter_exports, open_library
from ort_cffi._native.errors import RuntimeLoadError, RuntimeNotFoundError, StaleCacheError
from ort_cffi._native.ffi import ffi
from ort_cffi._native.files import file_sha256
from ort_cffi._native.store import (
    CACHE_ENV,
    SELECT_ENV,
    StoredRuntime,
    cache_dir,
    known_extension,
    selected_runtime,
    store_dir,
    stored_runtimes,
)

LIBRARY_ENV = "ORT_CFFI_LIBRARY"
TRAINING_WHEELS = ("onnxruntime-training-cpu", "onnxruntime-training")
EXTENSION_GLOB = "onnxruntime_pybind11_state*.so"
# The C library of an inference wheel, by platform (Linux, macOS, Windows).
INFERENCE_LIBRARY_GLOBS = ("libonnxruntime.so.*", "libonnxruntime.*.dylib", "onnxruntime.dll")
INFERENCE_WHEELS = ("onnxruntime", "onnxruntime-gpu")
INSTALL_HINT = (
    "`pip install onnxruntime` (any current CPython and platform: ort_cffi's engine trains on it; ort_cffi's "
    "`[onnxruntime]` extra); on CPython 3.9-3.12, `pip install onnxruntime-training-cpu==1.19.2` (ort_cffi's `[cpu]` extra; "
    "onnxruntime-training==1.19.2 for CUDA); on any interpreter, `ort-cffi-runtime install --inference` fetches the current "
    "build's C library, and `ort-cffi-runtime install` (add --cuda for the CUDA build) the training build, into ort_cffi's "
    "cache; or point ORT_CFFI_LIBRARY at a libonnxruntime.so"
)
_IMAGE_FORMAT = 3  # bump when what the image cache records changes

# The dynamic loader's own calls, through ctypes: three libc functions do not justify parsing C
# declarations at every start (cffi's parser costs tens of milliseconds; see _ffi.py).
def interpreter_name() -> str:
    return f"CPython {sys.version.split()[0]}" if sys.implementation.name == "cpython" else sys.version.split()[0]


@dataclasses.dataclass(frozen=True)
class LoadedImage:
    """A runtime image mapped into this process, and where its ``OrtApiBase`` lies."""

    api_base_address: int
    library: str  # the file the runtime came from (a wheel's extension, a fetched one, or a library)
    image: str  # the file actually dlopened (a private copy, except for a real library)
    kind: str  # "wheel" (installed), "fetched" (ort-cffi-runtime), "extension" (explicit) or "library"
    expected_version: Optional[str]  # the version its wheel or manifest claims; None when unknown
    handle: object = dataclasses.field(repr=False, compare=False)  # the dlopen handle, kept alive
    renamed: Tuple[str, ...] = ()  # CPython imports renamed in the private copy ("old->new")
    known_as: Optional[str] = None  # the published wheel the file is known from (the survey), if any


@dataclasses.dataclass(frozen=True)
class RuntimeFile:
    """A runtime file: a wheel extension to load through a private image, or a C library to dlopen ("library",
    or a fetched one with ``plain_library``)."""

    path: Path
    kind: str  # "wheel", "fetched", "extension" or "library"
    version: Optional[str]
    description: str  # for messages: "the onnxruntime-training-cpu 1.19.2 wheel", ...
    plain_library: bool = False  # a C library exporting OrtGetApiBase (dlopened as it is), not an extension

    @property
    def dlopened(self) -> bool:
        """Whether the file is loaded as it is (a C library), rather than through a private image."""
        return self.kind == "library" or self.plain_library


# --- explicit library ---------------------------------------------------------------------------


def load_library(path: str | os.PathLike[str], *, refresh: bool = False) -> LoadedImage:
    """Load an explicit file: a real ONNX Runtime shared library (``OrtGetApiBase`` exported), or a
    training wheel's extension (read statically, through a private image)."""
    path = os.fspath(path)
    if os.sep in path or os.path.exists(path):
        if not os.path.exists(path):
            raise RuntimeNotFoundError(f"ONNX Runtime library {path!r} does not exist; {INSTALL_HINT}")
        path = os.path.abspath(path)  # dlopen would search the library path for a name without a slash
        if os.path.basename(path).startswith("onnxruntime_pybind11_state"):
            return load_extension(RuntimeFile(Path(path), "extension", None, f"the runtime extension {path}"), refresh=refresh)
    handle = open_library(path)  # a bare soname ("libonnxruntime.so.1.19.2") is searched where dlopen looks
    get_api_base = find_symbol(handle, "OrtGetApiBase")
    if not get_api_base:
        raise RuntimeLoadError(f"{path} exports no OrtGetApiBase: it is not an ONNX Runtime shared library")
    api_base = ffi.cast("const OrtApiBase*(*)(void)", get_api_base)()
    return LoadedImage(
        api_base_address=int(ffi.cast("uintptr_t", api_base)),
        library=os.path.realpath(path),
        image=os.path.realpath(path),
        kind="library",
        expected_version=None,
        handle=handle,
    )


# --- where a training runtime file is -----------------------------------------------------------


def find_training_wheel() -> tuple[Optional[RuntimeFile], list[str]]:
    """The installed training wheel's extension (without importing it), and what was tried on the way."""
    tried: list[str] = []
    spec = find_spec("onnxruntime")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        tried.append("the onnxruntime-training-cpu / onnxruntime-training wheel: no `onnxruntime` package on sys.path")
        return None, tried
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    for name in TRAINING_WHEELS:
        version = installed_version(package_dir.parent, name)
        if version is None:
            continue
        extensions = sorted((package_dir / "capi").glob(EXTENSION_GLOB))
        if not extensions:
            tried.append(f"the {name} wheel: no {EXTENSION_GLOB} in {package_dir / 'capi'}")
            continue
        return RuntimeFile(extensions[0], "wheel", version, f"the installed {name} {version} wheel"), tried
    from importlib import metadata

    others = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            others.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    found = f" (found {', '.join(others)} at {package_dir}: an inference-only build)" if others else ""
    tried.append(f"the onnxruntime-training-cpu / onnxruntime-training wheel: not installed{found}")
    return None, tried


def find_inference_wheel() -> tuple[Optional[RuntimeFile], list[str]]:
    """The C library of an installed ``onnxruntime`` / ``onnxruntime-gpu`` wheel (without importing it)."""
    spec = find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None, ["the onnxruntime / onnxruntime-gpu wheel: no `onnxruntime` package on sys.path"]
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    for name in INFERENCE_WHEELS:
        version = installed_version(package_dir.parent, name)
        if version is None:
            continue
        for pattern in INFERENCE_LIBRARY_GLOBS:
            libraries = sorted((package_dir / "capi").glob(pattern))
            if libraries:
                return RuntimeFile(libraries[0], "library", version, f"the installed {name} {version} wheel"), []
        older = _older_than_1_19(version)
        why = (" (it is older than 1.19, the oldest release ort_cffi can use: `pip install -U onnxruntime`)"
               if older else "")
        return None, [f"the {name} {version} wheel: no ONNX Runtime C library in {package_dir / 'capi'}{why}"]
    return None, ["the onnxruntime / onnxruntime-gpu wheel: not installed"]


def _older_than_1_19(version: str) -> bool:
    """Whether a wheel's version is a 1.x release before 1.19 (its wheels ship no separate C library, and
    their C API tables predate the layout ort_cffi declares: docs/guides/runtime.md, versions)."""
    parts = version.split(".")
    try:
        return int(parts[0]) == 1 and int(parts[1]) < 19
    except (IndexError, ValueError):
        return False


def installed_version(site_dir: Path, name: str) -> Optional[str]:
    """The version of distribution ``name`` installed in ``site_dir``: from its ``.dist-info`` folder's
    name (``{name}-{version}.dist-info``, with ``-`` written ``_``, as wheels install it), else from
    importlib.metadata, which is slower to import (tens of milliseconds) and finds other layouts. A
    distribution of that name installed elsewhere does not count: an ``onnxruntime`` folder put first on the
    path (another build than the environment's) is not the environment's distribution."""
    found = sorted(site_dir.glob(f"{name.replace('-', '_')}-*.dist-info"))
    if len(found) == 1:
        return found[0].name[len(name) + 1 : -len(".dist-info")]
    from importlib import metadata

    try:
        distribution = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    try:
        here = Path(str(distribution.locate_file(""))).resolve() == site_dir.resolve()
    except OSError:
        here = False
    return distribution.version if here else None


def _fetched(runtime: StoredRuntime) -> RuntimeFile:
    return RuntimeFile(
        runtime.extension_path, "fetched", runtime.version, f"the fetched runtime {runtime.name} ({runtime.folder})",
        plain_library=runtime.form == "library",
    )


def find_fetched() -> tuple[Optional[RuntimeFile], list[str]]:
    """The runtime from the store that the loader would use, and what was tried."""
    runtimes = stored_runtimes()
    chosen = selected_runtime(runtimes)
    if chosen is not None:
        return _fetched(chosen), []
    if os.environ.get(SELECT_ENV):
        names = ", ".join(r.name for r in runtimes) or "none"
        return None, [f"${SELECT_ENV}={os.environ[SELECT_ENV]!r}: no such runtime in {store_dir()} (installed: {names})"]
    return None, [f"runtimes fetched by `ort-cffi-runtime install`: none in {store_dir()}"]


# --- the private image --------------------------------------------------------------------------


def _identity(source: RuntimeFile) -> dict:
    st = source.path.stat()
    return {
        "format": _IMAGE_FORMAT,
        "file": str(source.path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "inode": st.st_ino,
        "device": st.st_dev,
        "version": source.version,
        # the renames depend on what the interpreter exports: one private copy per interpreter version
        "interpreter": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
    }


def _entry_dir(identity: dict) -> Path:
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / f"image-{key}"


def _read_entry(entry: Path, identity: dict) -> Optional[dict]:
    """The cached record if it is readable, complete and for this very file; else None."""
    try:
        record = json.loads((entry / "image.json").read_text())
        image = entry / record["image"]
        if record.get("identity") != identity or image.parent != entry or image.stat().st_size != identity["size"]:
            return None
        int(record["location"]["api_base"]), int(record["location"]["anchor_address"]), str(record["location"]["anchor"])
        return dict(record)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def examine(source: RuntimeFile, content: Optional[bytes] = None) -> dict:
    """Everything the loader needs to know about a runtime file before mapping it: its sha256, the
    survey's row for it, where its ``OrtApiBase`` lies, and the renames this interpreter needs.
    ``content`` is the file's bytes when the caller has read them already. Raises
    ``RuntimeLoadError`` for a file that cannot be used here, saying why."""
    from ort_cffi._native import elf as _elf

    sha256 = hashlib.sha256(content).hexdigest() if content is not None else file_sha256(source.path)
    known = known_extension(sha256)
    location = _elf.find_api_base(source.path, source.version)
    if known is not None:
        surveyed = {key: known[key] for key in ("api_base", "get_api", "get_version_string", "anchor", "anchor_address")}
        found = {key: getattr(location, key) for key in surveyed}
        if found != surveyed:
            raise RuntimeLoadError(
                f"{source.path} is the runtime of {known['wheel']} (sha256 {sha256[:16]}…), but the OrtApiBase found in it "
                f"({found}) differs from the survey's ({surveyed}): refusing to use it"
            )
    renames = _elf.plan_renames(source.path, interpreter_exports, interpreter_name())
    return {"sha256": sha256, "known": known, "location": location.as_record(), "renames": [dataclasses.asdict(r) for r in renames]}


def _write_entry(entry: Path, source: RuntimeFile, identity: dict, record: dict, content: bytes) -> None:
    """Copy the file (``content``) privately, with its renames applied and links to its sibling
    libraries, and store what was found in it."""
    from ort_cffi._native.elf import Rename, apply_renames

    entry.mkdir(parents=True, exist_ok=True)
    source_dir = source.path.resolve().parent
    for sibling in source_dir.glob("*.so*"):  # provider libraries are found beside the runtime ($ORIGIN)
        if sibling.name == source.path.name:
            continue
        link = entry / sibling.name
        if not link.is_symlink() or os.readlink(link) != str(sibling):
            tmp_link = entry / f".{sibling.name}.{os.getpid()}"
            tmp_link.unlink(missing_ok=True)
            tmp_link.symlink_to(sibling)
            os.replace(tmp_link, link)
    data = bytearray(content)
    apply_renames(data, [Rename(**r) for r in record["renames"]])
    # Each copy gets a new name: the dynamic loader hands back the image already mapped under a path,
    # so a copy rewritten in place (a refresh after a stale record) would never be mapped anew.
    # Copies that the new record no longer names are removed; a process that maps one keeps it.
    image = Path(_write_new_file(entry, f"{source.path.stem}.", ".so", bytes(data), 0o755))
    _write_new_file(entry, ".record.", ".json", json.dumps({"identity": identity, "image": image.name, **record}).encode(), 0o644, entry / "image.json")
    for old in entry.glob(f"{source.path.stem}.*.so"):
        if old != image and not old.is_symlink():
            old.unlink(missing_ok=True)


def _write_new_file(folder: Path, prefix: str, suffix: str, content: bytes, mode: int, target: Optional[Path] = None) -> str:
    """Write ``content`` to a new file in ``folder`` (renamed over ``target`` if given) and return its
    path; nothing is left behind when writing fails (a full disk). Not ``files.atomic_write``: this is
    a cache, checked when read (identity, size), so it skips the fsyncs that would slow a cold load."""
    with tempfile.NamedTemporaryFile(dir=folder, prefix=prefix, suffix=suffix, delete=False) as tmp:
        try:
            tmp.write(content)
            tmp.flush()
            os.chmod(tmp.name, mode)
            if target is not None:
                os.replace(tmp.name, target)
                return str(target)
        except BaseException:
            os.unlink(tmp.name)
            raise
    return tmp.name


def prepare_image(source: RuntimeFile, *, refresh: bool = False) -> tuple[Path, dict]:
    """The private image of a runtime file and its record, examined now or taken from the cache."""
    identity = _identity(source)
    entry = _entry_dir(identity)
    record = None if refresh else _read_entry(entry, identity)
    if record is not None:
        return entry / record["image"], record
    from filelock import FileLock, Timeout

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(entry) + ".lock", timeout=600):
            record = None if refresh else _read_entry(entry, identity)  # another process may have just written it
            if record is None:
                content = source.path.read_bytes()  # read once: hashed, examined, copied
                _write_entry(entry, source, identity, examine(source, content), content)
                _prune_stale_entries(entry)
                record = _read_entry(entry, identity)
                if record is None:
                    raise RuntimeLoadError(f"the image cache at {entry} could not be written or read back")
    except (OSError, Timeout) as error:
        raise RuntimeLoadError(
            f"the image cache at {entry.parent} is not usable ({error}); set {CACHE_ENV} to a writable folder"
        ) from error
    return entry / record["image"], record


def _prune_stale_entries(keep: Path) -> None:
    """Remove cached images whose runtime file no longer exists as it was (a reinstalled, removed or
    deleted runtime) or that another format of this cache wrote: each holds a copy of a large
    library. Entries of other live files stay, and so does any entry another process holds the lock
    of (it is writing it). Lock files stay too: removing one another process waits on would let two
    processes hold "the" lock at once; they are empty."""
    from filelock import FileLock, Timeout

    for entry in keep.parent.glob("image-*"):
        if entry == keep or not entry.is_dir():
            continue
        try:
            with FileLock(str(entry) + ".lock", timeout=0):
                if _is_stale(entry):
                    shutil.rmtree(entry, ignore_errors=True)
        except Timeout:
            continue
    for old in keep.parent.glob("runtime-*"):  # the probe cache of ort_cffi 0.1 (format 1), folders and locks
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def _is_stale(entry: Path) -> bool:
    try:
        identity = json.loads((entry / "image.json").read_text())["identity"]
        source = Path(identity["file"])
        return not (
            identity["format"] == _IMAGE_FORMAT
            and source.is_file()
            and source.stat().st_size == identity["size"]
            and source.stat().st_mtime_ns == identity["mtime_ns"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return True  # unreadable, or left half-written by a process that died: nobody holds its lock


def _image_ranges(image: str) -> list[tuple[int, int, str]]:
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
        raise StaleCacheError(
            f"the OrtApiBase address 0x{api_base_address:x} is not inside {image}: refusing to call through it"
        )
    slots = ffi.cast("void**", api_base_address)
    for index, name in enumerate(("GetApi", "GetVersionString")):
        target = int(ffi.cast("uintptr_t", slots[index]))
        if not inside(target, "x"):
            raise StaleCacheError(
                f"OrtApiBase.{name} (0x{target:x}) does not point into the code of {image}: refusing to call it"
            )


def load_extension(source: RuntimeFile, *, refresh: bool = False) -> LoadedImage:
    """Map the private image of a wheel extension and locate its ``OrtApiBase``."""
    image, record = prepare_image(source, refresh=refresh)
    location = record["location"]
    handle = open_library(str(image))
    anchor = find_symbol(handle, location["anchor"])
    if not anchor:
        raise StaleCacheError(f"{image} has no {location['anchor']}: not the file the cache describes")
    api_base_address = anchor - int(location["anchor_address"]) + int(location["api_base"])
    check_inside_image(str(image), api_base_address)
    known = record.get("known")
    return LoadedImage(
        api_base_address=api_base_address,
        library=str(source.path.resolve()),
        image=str(image),
        kind=source.kind,
        expected_version=source.version,
        handle=handle,
        renamed=tuple(f"{r['old']}->{r['new']}" for r in record["renames"]),
        known_as=known["wheel"] if known else None,
    )


def find_runtime_file() -> tuple[Optional[RuntimeFile], List[str]]:
    """The runtime file the default search settles on (2-4 above), and every place it tried."""
    tried: List[str] = []
    if os.environ.get(SELECT_ENV):  # an explicit choice among fetched runtimes beats the installed wheel
        return find_fetched()
    wheel, wheel_tried = find_training_wheel()
    if wheel is not None:
        return wheel, []
    tried += wheel_tried
    inference, inference_tried = find_inference_wheel()
    if inference is not None:
        return inference, []
    tried += inference_tried
    fetched, fetched_tried = find_fetched()
    if fetched is not None:
        return fetched, []
    return None, tried + fetched_tried


def find_and_load(library: str | os.PathLike[str] | None = None, *, refresh: bool = False) -> LoadedImage:
    """Load the runtime: ``library`` if given, else ``$ORT_CFFI_LIBRARY``, else the default search."""
    if library is not None:
        return load_library(library, refresh=refresh)
    from_env = os.environ.get(LIBRARY_ENV)
    if from_env:
        return load_library(from_env, refresh=refresh)
    source, tried = find_runtime_file()
    if source is None:
        tried.insert(0, f"${LIBRARY_ENV}: not set")
        raise RuntimeNotFoundError(
            f"no ONNX Runtime found for {interpreter_name()}. Tried:\n  - "
            + "\n  - ".join(tried)
            + f"\nTo fix: {INSTALL_HINT}."
        )
    if source.kind == "library":
        return load_library(source.path, refresh=refresh)
    if source.plain_library:  # a fetched inference build: its manifest's version is checked against the library's
        loaded = load_library(source.path, refresh=refresh)
        return dataclasses.replace(loaded, kind=source.kind, expected_version=source.version)
    return load_extension(source, refresh=refresh)
