"""The loader's file reader: where ``OrtApiBase`` lies in an ONNX Runtime ELF file, found
statically, and the renames of CPython imports that let an extension load in a newer interpreter.

The training wheel links the whole C API into ``onnxruntime_pybind11_state*.so`` without exporting
``OrtGetApiBase`` (docs/internals/runtime.md §1, §6). Its ``OrtApiBase`` is a static table of two function
pointers, ``{GetApi, GetVersionString}``, and because the file is position-independent each of the
two slots carries an ``R_*_RELATIVE`` relocation whose addend is the function's address.
``GetVersionString`` is a three-instruction function returning a string constant:

- x86_64: ``[endbr64] lea rax,[rip+d]; ret``
- aarch64: ``[bti c] adrp x0,page; add x0,x0,#lo12; ret``

So the table is found without running anything: among the relative relocations, the one whose
addend is a function of that shape returning the runtime's version string (``"1.19.2"``) is slot 1
of ``OrtApiBase``; slot 0, just before it, must be relocated to code too (``GetApi``). Exactly one
such slot is accepted, anything else is refused with what was not found.

pyelftools reads the headers, sections, segments and symbols. The relocation tables (tens of
thousands of entries) are read as one numpy structured array: pyelftools parses entries one by one,
which costs about a second on these files, and the first load must stay well under that.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import mmap
import re
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import numpy as np

from ort_cffi._native.errors import RuntimeLoadError

# CPython functions that a newer interpreter exports under another name, with the same signature:
# (old name, new name, the first version without the old one, why). A private copy of an extension
# that imports the old name has its import renamed when the running interpreter lacks it.
CPYTHON_SUCCESSORS: Tuple[Tuple[str, str, str, str], ...] = (
    ("_PyThreadState_UncheckedGet", "PyThreadState_GetUnchecked", "3.13", "made public (PEP 689 era), same signature"),
)
SUCCESSOR_OF = {old: new for old, new, _, _ in CPYTHON_SUCCESSORS}

_RELATIVE = {"EM_X86_64": 8, "EM_AARCH64": 1027}  # R_X86_64_RELATIVE, R_AARCH64_RELATIVE
_MACHINE = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
_RELA_ENTRY = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
_SYM_ENTRY = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")])
_VERSION_PATTERN = re.compile(rb"\d+\.\d+\.\d+")  # what a version string looks like, when none is given
_X86_ENDBR64 = b"\xf3\x0f\x1e\xfa"
_ARM_BTI_C = 0xD503245F
_ARM_RET = 0xD65F03C0


@dataclasses.dataclass(frozen=True)
class ApiBaseLocation:
    """Where a file's static ``OrtApiBase`` lies, as virtual addresses relative to the load base."""

    machine: str  # "x86_64" or "aarch64"
    api_base: int  # the table itself
    get_api: int  # its slot 0
    get_version_string: int  # its slot 1
    version: str  # the string GetVersionString returns
    anchor: str  # an exported symbol, to find the load base once the file is mapped
    anchor_address: int

    @property
    def offset(self) -> int:
        """``api_base`` minus the anchor's address: what docs/internals/runtime.md §6 calls the fixed offset from PyInit."""
        return self.api_base - self.anchor_address

    def as_record(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def _damage_reported(path: Path, cleanup: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Turn what pyelftools and numpy raise on a truncated or damaged file (headers pointing past its
    end, sections of impossible sizes) into a ``RuntimeLoadError`` naming the file."""
    from elftools.common.exceptions import ELFError

    try:
        yield
    except (ELFError, ValueError, IndexError, OverflowError) as error:
        cleanup()
        raise RuntimeLoadError(f"{path} is truncated or damaged: not a readable ELF file ({error})") from error


@contextlib.contextmanager
def _opened(path: str | Path) -> Iterator[_Image]:
    """The mapped image of ``path``, closed afterwards; damage found while reading it is reported."""
    image = _Image(Path(path))
    try:
        with _damage_reported(image.path):
            yield image
    finally:
        image.close()


class _Image:
    """An ELF file mapped read-only, with its loadable segments for address translation."""

    def __init__(self, path: Path) -> None:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        self.path = path
        try:
            with open(path, "rb") as file:
                self.data: Any = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as error:  # ValueError: an empty file cannot be mapped
            raise RuntimeLoadError(f"cannot read {path}: {error}") from error
        self.bytes = np.frombuffer(self.data, dtype=np.uint8)
        try:
            self.elf = ELFFile(cast(IO[bytes], self.data))  # an mmap reads, seeks and tells like a file
        except ELFError as error:
            self.close()
            raise RuntimeLoadError(f"{path} is not an ELF file: {error}") from error
        machine = self.elf["e_machine"]
        if machine not in _MACHINE or self.elf.elfclass != 64 or not self.elf.little_endian:
            self.close()
            raise RuntimeLoadError(
                f"{path} is a {self.elf.elfclass}-bit {machine} file: ort_cffi reads x86_64 and aarch64 (64-bit, "
                "little-endian) runtimes only"
            )
        self.machine_tag = machine
        self.machine = _MACHINE[machine]
        with _damage_reported(path, self.close):
            self.loads = [
                (seg["p_vaddr"], seg["p_filesz"], seg["p_offset"], seg["p_flags"])
                for seg in self.elf.iter_segments()
                if seg["p_type"] == "PT_LOAD"
            ]

    def close(self) -> None:
        del self.bytes
        self.data.close()

    def file_offsets(self, addresses: np.ndarray, *, executable: bool) -> np.ndarray:
        """File offsets of virtual addresses (-1 where an address lies in no such segment's file bytes)."""
        result = np.full(addresses.shape, -1, dtype=np.int64)
        for vaddr, filesz, offset, flags in self.loads:
            if executable and not flags & 1:  # PF_X
                continue
            inside = (addresses >= vaddr) & (addresses < vaddr + filesz)
            result[inside] = addresses[inside] - vaddr + offset
        return result

    def read_string(self, address: int, limit: int = 64) -> Optional[bytes]:
        """The NUL-terminated bytes at a virtual address, if they lie in the file and end within ``limit``."""
        (offset,) = self.file_offsets(np.array([address], dtype=np.int64), executable=False)
        if offset < 0:
            return None
        chunk = bytes(self.data[int(offset) : int(offset) + limit])
        end = chunk.find(b"\0")
        return chunk[:end] if end >= 0 else None

    def relative_relocations(self) -> np.ndarray:
        """Every ``R_*_RELATIVE`` entry of the file's RELA tables, as (offset, info, addend) records."""
        from elftools.elf.sections import Section

        tables = []
        for section in self.elf.iter_sections():
            if isinstance(section, Section) and section["sh_type"] == "SHT_RELA" and section["sh_entsize"] == 24:
                count = section["sh_size"] // 24
                tables.append(np.frombuffer(self.data, dtype=_RELA_ENTRY, count=count, offset=section["sh_offset"]))
        if not tables:
            raise RuntimeLoadError(f"{self.path} has no RELA relocation section: not an ONNX Runtime build ort_cffi can read")
        entries = np.concatenate(tables)
        return entries[(entries["info"] & 0xFFFFFFFF) == _RELATIVE[self.machine_tag]]

    def dynstr_offset(self) -> int:
        section = self.elf.get_section_by_name(".dynstr")
        if section is None:
            raise RuntimeLoadError(f"{self.path} has no .dynstr section")
        return int(section["sh_offset"])

    @functools.cached_property
    def symbols(self) -> list[Tuple[str, np.void]]:
        """``.dynsym`` as (name, Elf64_Sym record) pairs, read in one piece (as the relocations are)."""
        section = self.elf.get_section_by_name(".dynsym")
        if section is None or section["sh_entsize"] != _SYM_ENTRY.itemsize:
            return []
        table = np.frombuffer(self.data, dtype=_SYM_ENTRY, count=section["sh_size"] // _SYM_ENTRY.itemsize,
                              offset=section["sh_offset"]).copy()  # a copy: the mapping closes before it goes
        strings = self.dynstr_offset()
        names = []
        for entry in table:
            start = strings + int(entry["name"])
            names.append(bytes(self.data[start : self.data.find(b"\0", start)]).decode(errors="replace"))
        return list(zip(names, table))

    def exported(self, name: str) -> Optional[int]:
        for symbol_name, entry in self.symbols:
            if symbol_name == name and entry["shndx"] != 0 and entry["value"]:  # 0: SHN_UNDEF
                return int(entry["value"])
        return None


def _returned_addresses(image: _Image, functions: np.ndarray) -> np.ndarray:
    """For each function address, the address its body returns if it is ``[endbr64|bti c] <load
    address of a constant into the return register>; ret``; -1 otherwise. Vectorized over all."""
    returned = np.full(functions.shape, -1, dtype=np.int64)
    offsets = image.file_offsets(functions, executable=True)
    usable = (offsets >= 0) & (offsets + 16 <= len(image.bytes))
    if not usable.any():
        return returned
    code = image.bytes[offsets[usable][:, None] + np.arange(16)]  # 16 bytes of each candidate body
    addresses = functions[usable]
    if image.machine == "x86_64":
        found = np.full(addresses.shape, -1, dtype=np.int64)
        for skip in (4, 0):  # with and without the endbr64 that CET builds start functions with
            has_prefix = (code[:, :4] == np.frombuffer(_X86_ENDBR64, np.uint8)).all(axis=1) if skip else True
            lea = (code[:, skip] == 0x48) & (code[:, skip + 1] == 0x8D) & (code[:, skip + 2] == 0x05)
            ret = code[:, skip + 7] == 0xC3
            match = has_prefix & lea & ret & (found < 0)
            displacement = code[:, skip + 3 : skip + 7].copy().view("<i4")[:, 0].astype(np.int64)
            found = np.where(match, addresses + skip + 7 + displacement, found)
        returned[usable] = found
    else:
        words = code.copy().view("<u4")  # four instructions
        found = np.full(addresses.shape, -1, dtype=np.int64)
        for skip in (1, 0):  # with and without the BTI landing pad
            has_prefix = words[:, 0] == _ARM_BTI_C if skip else True
            adrp, add, ret = words[:, skip], words[:, skip + 1], words[:, skip + 2]
            is_adrp = (adrp & 0x9F00001F) == 0x90000000  # adrp x0, page
            is_add = (add & 0xFFC003FF) == 0x91000000  # add x0, x0, #imm12 (64-bit, no shift)
            match = has_prefix & is_adrp & is_add & (ret == _ARM_RET) & (found < 0)
            immediate = (((adrp >> 5) & 0x7FFFF).astype(np.int64) << 2) | ((adrp >> 29) & 0x3).astype(np.int64)
            immediate = np.where(immediate & (1 << 20), immediate - (1 << 21), immediate)  # sign-extend 21 bits
            pc = addresses + 4 * skip
            target = (pc & ~0xFFF) + (immediate << 12) + ((add >> 10) & 0xFFF).astype(np.int64)
            found = np.where(match, target, found)
        returned[usable] = found
    return returned


def find_api_base(path: str | Path, version: Optional[str] = None, anchors: Sequence[str] = ()) -> ApiBaseLocation:
    """Find the static ``OrtApiBase`` of an ONNX Runtime ELF file without loading it.

    ``version`` is the string ``GetVersionString`` must return (any ``N.N.N`` when None); ``anchors``
    are exported symbols to tie the answer to once the file is mapped (the first one present is used;
    by default ``PyInit_onnxruntime_pybind11_state``, then ``OrtGetApiBase``). Raises
    ``RuntimeLoadError`` saying what was not found unless exactly one table matches."""
    with _opened(path) as image:
        return _find(image, version, tuple(anchors) or ("PyInit_onnxruntime_pybind11_state", "OrtGetApiBase"))


def _find(image: _Image, version: Optional[str], anchors: Tuple[str, ...]) -> ApiBaseLocation:
    path = image.path
    relocations = image.relative_relocations()
    addends = relocations["addend"].astype(np.int64)
    returned = _returned_addresses(image, addends)
    wanted = version.encode() if version is not None else None
    strings: Dict[int, Optional[bytes]] = {}
    slots: List[Tuple[int, int, str]] = []  # (slot address, function, version) of GetVersionString-like slots
    for index in np.flatnonzero(returned >= 0):
        target = int(returned[index])
        if target not in strings:
            strings[target] = image.read_string(target)
        returned_text = strings[target]
        if returned_text is None:
            continue
        if returned_text != wanted if wanted is not None else not _VERSION_PATTERN.fullmatch(returned_text):
            continue
        slots.append((int(relocations["offset"][index]), int(addends[index]), returned_text.decode()))
    what = f"the version string {version!r}" if version else "a version string"
    if not slots:
        raise RuntimeLoadError(
            f"no OrtApiBase found in {path}: no relocated function pointer leads to a function returning {what} "
            f"({len(relocations)} relative relocations, {int((returned >= 0).sum())} of them to constant-returning "
            "functions). Not an ONNX Runtime build, or one ort_cffi cannot read statically"
        )
    pointer = 8
    by_slot = dict(zip(relocations["offset"].tolist(), addends.tolist()))
    tables = []
    for slot, function, found_version in slots:
        get_api = by_slot.get(slot - pointer)
        if get_api is not None and image.file_offsets(np.array([get_api], dtype=np.int64), executable=True)[0] >= 0:
            tables.append(ApiBaseLocation(image.machine, slot - pointer, get_api, function, found_version, "", 0))
    if len(tables) != 1:
        found = ", ".join(f"0x{t.api_base:x}" for t in tables) or "none"
        raise RuntimeLoadError(
            f"no unique OrtApiBase in {path}: {len(slots)} relocated pointer(s) to a function returning {what}, "
            f"{len(tables)} of them preceded by a pointer to code (candidates: {found}); refusing to guess"
        )
    for anchor in anchors:
        address = image.exported(anchor)
        if address is not None:
            return dataclasses.replace(tables[0], anchor=anchor, anchor_address=address)
    raise RuntimeLoadError(f"{path} exports none of {', '.join(anchors)}: nothing to find its load address by")


# --- renaming CPython imports in a private copy ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rename:
    """One undefined dynamic symbol of a file renamed to its successor."""

    old: str
    new: str
    dynstr_offset: int  # file offset of the name in .dynstr


def cpython_imports(path: str | Path) -> List[str]:
    """The CPython symbols (``Py…``, ``_Py…``) a file imports, in ``.dynsym`` order."""
    with _opened(path) as image:
        return [name for name, _, _ in _undefined(image) if name.startswith(("Py", "_Py"))]


_BINDINGS = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}


def _undefined(image: _Image) -> Iterator[Tuple[str, int, str]]:
    """(name, st_name, binding) of each undefined symbol in ``.dynsym``."""
    for name, entry in image.symbols:
        if entry["shndx"] == 0 and name:
            yield name, int(entry["name"]), _BINDINGS.get(int(entry["info"]) >> 4, "STB_OTHER")


def plan_renames(path: str | Path, exported: Any, interpreter: str) -> List[Rename]:
    """The renames a private copy of ``path`` needs to load in this interpreter.

    ``exported(name)`` tells whether the running interpreter provides a symbol. A CPython import
    it lacks is renamed to its successor (``CPYTHON_SUCCESSORS``); a missing import with no known
    successor, a successor the interpreter lacks too, or a name that cannot be rewritten in place
    raises ``RuntimeLoadError`` naming the symbol and ``interpreter``: never a failed ``dlopen``."""
    with _opened(path) as image:
        dynstr = image.dynstr_offset()
        renames = []
        missing = []
        for name, st_name, binding in _undefined(image):
            if not name.startswith(("Py", "_Py")) or binding == "STB_WEAK" or exported(name):
                continue
            successor = SUCCESSOR_OF.get(name)
            if successor is None or not exported(successor) or len(successor) > len(name):
                missing.append((name, successor))
                continue
            renames.append(Rename(name, successor, dynstr + st_name))
        if missing:
            described = "; ".join(
                f"{name} (no known successor)" if successor is None else f"{name} (its successor {successor} is missing too)"
                for name, successor in missing
            )
            raise RuntimeLoadError(
                f"{path} needs CPython symbols that {interpreter} does not export: {described}. This runtime file "
                "cannot load in this interpreter; use one built for a closer CPython (ort-cffi-runtime install picks "
                "the nearest) or another interpreter"
            )
        _check_not_shared(image, renames)
        return renames


def _string_references(image: _Image) -> List[int]:
    """Every ``.dynstr`` offset the dynamic linker reads a name from: symbols, needed libraries,
    soname, run paths and version names."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection

    references: List[int] = [int(entry["name"]) for _, entry in image.symbols]
    for section in image.elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag in ("DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH"):
                    references.append(tag.entry.d_val)
        elif isinstance(section, GNUVerNeedSection):
            for version, auxiliaries in section.iter_versions():
                references.append(version.entry["vn_file"])
                references += [aux.entry["vna_name"] for aux in auxiliaries]
        elif isinstance(section, GNUVerDefSection):
            for _, auxiliaries in section.iter_versions():
                references += [aux.entry["vda_name"] for aux in auxiliaries]
    return references


def _check_not_shared(image: _Image, renames: List[Rename]) -> None:
    """Refuse to rewrite a name whose bytes another name reuses (linkers merge string tails)."""
    if not renames:
        return
    base = image.dynstr_offset()
    references = _string_references(image)
    for rename in renames:
        start = rename.dynstr_offset - base
        starts_inside = any(start < r <= start + len(rename.old) for r in references)  # a name that is its tail
        is_a_tail = start > 0 and image.bytes[rename.dynstr_offset - 1] != 0  # a longer name ends with it
        if starts_inside or is_a_tail:
            raise RuntimeLoadError(
                f"cannot rename {rename.old} in {image.path}: another dynamic name shares its bytes"
            )


def apply_renames(data: bytearray, renames: Sequence[Rename]) -> None:
    """Rewrite each old name in place with its successor, padded with NUL bytes."""
    for rename in renames:
        old = rename.old.encode() + b"\0"
        start = rename.dynstr_offset
        if bytes(data[start : start + len(old)]) != old:
            raise RuntimeLoadError(f"{rename.old} is not where the plan found it: the file changed while it was copied")
        new = rename.new.encode()
        data[start : start + len(old)] = new + b"\0" * (len(old) - len(new))


def returned_by_export(path: str | Path, name: str) -> Optional[int]:
    """The constant address an exported three-instruction function returns (e.g. ``OrtGetApiBase``,
    which is ``return &ort_api_base;``), decoded statically; None if the symbol or shape is absent.
    An independent check of ``find_api_base`` on libraries that export ``OrtGetApiBase``."""
    with _opened(path) as image:
        address = image.exported(name)
        if address is None:
            return None
        (target,) = _returned_addresses(image, np.array([address], dtype=np.int64))
        return int(target) if target >= 0 else None


# --- pybind11's interpreter check, for importing an extension as a Python module ------------------


def find_version_check(path: str | Path, compiled_for: str) -> Optional[int]:
    """The file offset of the string pybind11's interpreter check compares ``Py_GetVersion()`` with, or None.

    pybind11's ``PYBIND11_CHECK_PYTHON_VERSION`` (run first by ``PyInit_<module>``) refuses an interpreter
    whose version does not start with the ``"3.12"`` it was compiled for (docs/internals/runtime.md §7). The
    answer is the offset of ``compiled_for`` only when the file holds it exactly once as a whole NUL-delimited
    string and ``PyInit``'s own code loads its address (x86_64: ``lea reg,[rip+d]``); anything else is None,
    so that nothing is ever patched on a guess."""
    wanted = b"\0" + compiled_for.encode() + b"\0"
    with _opened(path) as image:
        if image.machine != "x86_64":
            return None  # no training wheel was published for another machine; aarch64's adrp+add is not decoded
        starts = []
        found = image.data.find(wanted)
        while found >= 0:
            starts.append(found + 1)
            found = image.data.find(wanted, found + 1)
        if len(starts) != 1:
            return None
        offset = starts[0]
        init = next(((name, entry) for name, entry in image.symbols
                     if name.startswith("PyInit_") and entry["shndx"] != 0 and entry["value"]), None)
        if init is None:
            return None
        start, size = int(init[1]["value"]), int(init[1]["size"])
        (code_offset,) = image.file_offsets(np.array([start], dtype=np.int64), executable=True)
        if code_offset < 0 or size <= 0:
            return None
        code = bytes(image.data[int(code_offset) : int(code_offset) + size])
        for i in range(len(code) - 6):  # lea r64,[rip+disp32]: REX.W (48 or 4c), 8d, ModRM with mod 00 and rm 101
            if code[i] in (0x48, 0x4C) and code[i + 1] == 0x8D and code[i + 2] & 0xC7 == 0x05:
                target = start + i + 7 + int.from_bytes(code[i + 3 : i + 7], "little", signed=True)
                (target_offset,) = image.file_offsets(np.array([target], dtype=np.int64), executable=False)
                if target_offset == offset:
                    return offset
        return None


def patch_version_check(data: bytearray, offset: int, compiled_for: str, running: str) -> None:
    """Rewrite, in a private copy's bytes, the version string pybind11's check compares with (found by
    ``find_version_check`` when the file was surveyed) to the running interpreter's ``running`` ("3.13").
    The bytes at ``offset`` must be exactly ``compiled_for`` between NUL bytes and the new string as long:
    otherwise ``RuntimeLoadError``, and ``data`` is left as it was."""
    old, new = compiled_for.encode(), running.encode()
    if len(new) != len(old):
        raise RuntimeLoadError(f"cannot patch pybind11's version check from {compiled_for} to {running}: "
                               "the strings differ in length")
    if not 0 < offset <= len(data) - len(old) - 1 or bytes(data[offset - 1 : offset + len(old) + 1]) != b"\0" + old + b"\0":
        raise RuntimeLoadError(f"the bytes at offset 0x{offset:x} are not pybind11's version string {compiled_for!r}: "
                               "not the file the survey describes; nothing was patched")
    data[offset : offset + len(old)] = new
