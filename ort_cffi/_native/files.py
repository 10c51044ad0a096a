"""Paths and files, beside the errors at the bottom of the facade: path arguments checked and
encoded once, models given as paths or bytes, and crash-safe writes."""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from ort_cffi._native.errors import OrtErrorCode, OrtException, OrtFileNotFoundException

PathLike = Union[str, "os.PathLike[str]"]
PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


def fspath(path: Any, what: str) -> str:
    """A path argument as ``str`` (refusing other types and the empty path)."""
    if not isinstance(path, (str, os.PathLike)):
        raise OrtException.invalid_argument(f"the {what} must be a str or os.PathLike, not {type(path).__name__}")
    result = os.fspath(path)
    if not isinstance(result, str):
        result = os.fsdecode(result)
    if not result:
        raise OrtException.invalid_argument(f"the {what} is empty")
    return result


def native_path(path: str) -> bytes:
    """A path as the C API takes it: the file system's bytes (also for names that are not UTF-8)."""
    return os.fsencode(path)


def existing_file(path: Any, what: str) -> str:
    """``fspath`` of a file that must exist (the message names the path, since the runtime's may not)."""
    result = fspath(path, what)
    if os.path.isdir(result):
        raise OrtException.invalid_argument(f"{what} {result!r} is a folder, not a file")
    if not os.path.isfile(result):
        raise OrtFileNotFoundException(f"{what} {result!r} does not exist", OrtErrorCode.ORT_NO_SUCHFILE)
    return result


def read_model(model: PathOrBytes, what: str) -> Tuple[Optional[str], Optional[bytes]]:
    """(path, None) for a path, after checking the file exists; (None, bytes) for model bytes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        if not data:
            raise OrtException.invalid_argument(f"the {what} bytes are empty")
        return None, data
    if isinstance(model, (str, os.PathLike)):
        return existing_file(model, what), None
    raise OrtException.invalid_argument(f"the {what} must be a path or bytes, not {type(model).__name__}")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's content (hex), read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would, for every thread)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def mode_for(target: str) -> int:
    """The permissions a saved file gets: the replaced file's, or 0666 less the umask for a new one."""
    try:
        return os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def probe_writes(directory: str) -> None:
    """Do in ``directory`` what a crash-safe save does (create a file, write it, fsync it, rename it), then
    remove the probe; raises the OSError of the step that failed. ``os.access`` is no answer: it says yes to
    root in an immutable folder and knows nothing of read-only mounts."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ort_cffi-probe.", suffix=".tmp")
    renamed = tmp[:-len(".tmp")]
    try:
        try:
            os.write(fd, b"ort_cffi write probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, renamed)
    finally:
        for path in (tmp, renamed):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _fsync_file(path: str) -> None:
    written = os.open(path, os.O_RDONLY)  # read-only: fsync needs no write access
    try:
        os.fsync(written)
    finally:
        os.close(written)


def atomic_write(target: str, write: Callable[[str], None], what: str, companions: Sequence[str] = ()) -> None:
    """Have ``write(tmp_path)`` produce the file beside ``target``, fsync it, then rename it over
    ``target`` and fsync the folder. On any failure the temporary file is removed and ``target``
    is untouched: a crash at any moment leaves the old file or the new one, never a partial one.

    ``companions``: suffixes of files whose name the reader derives from the file's own (a checkpoint's
    ``<checkpoint>.data``). One that ``write`` made beside the temporary file is fsynced and renamed to
    ``target + suffix`` just before ``target`` itself; a stale one of the old ``target`` that the new file
    does not have is removed after. Two renames cannot be one: a crash between them leaves the new companion
    beside the old file."""
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise OrtFileNotFoundException(
            f"cannot write the {what} {target!r}: folder {directory!r} does not exist", OrtErrorCode.ORT_NO_SUCHFILE
        )
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    os.close(fd)
    made: List[str] = []
    try:
        write(tmp)
        _fsync_file(tmp)
        os.chmod(tmp, mode_for(target))  # mkstemp makes 0600; keep what a plain open() would give
        made = [suffix for suffix in companions if os.path.exists(tmp + suffix)]
        for suffix in made:
            _fsync_file(tmp + suffix)
            os.chmod(tmp + suffix, mode_for(target + suffix))
            os.replace(tmp + suffix, target + suffix)
        os.replace(tmp, target)
    except BaseException:
        for path in [tmp] + [tmp + suffix for suffix in companions]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        raise
    for suffix in companions:
        if suffix not in made:
            try:
                os.unlink(target + suffix)
            except FileNotFoundError:
                pass
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
