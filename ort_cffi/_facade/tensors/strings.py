"""String tensors through the C API (below ``tensor.py``): made with ``CreateTensorAsOrtValue`` and
filled with ``FillStringTensor``; read with ``GetStringTensorDataLength`` and
``GetStringTensorContent``.

The runtime keeps each element as a ``std::string`` (any bytes). ``str`` elements go in as UTF-8;
``bytes`` elements go in as they are. ``FillStringTensor`` takes NUL-terminated C strings, so an
element holding a NUL byte is written with ``GetResizedStringTensorElementBuffer`` instead (the
length given, nothing cut). Reading gives every element's bytes, decoded as UTF-8 (``raw=True``:
the bytes themselves).
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from ort_cffi._facade.tensors.element_types import STRING
from ort_cffi._native.errors import OrtException
from ort_cffi._native.handles import process
from ort_cffi._native.tables import check_status, ffi, get_runtime


def encode_elements(elements: np.ndarray, what: str = "tensor data") -> List[bytes]:
    """The UTF-8 bytes of each ``str`` element (``bytes`` elements as they are), in C order."""
    encoded = []
    for index, element in enumerate(elements.reshape(-1)):
        if isinstance(element, bytes):
            encoded.append(element)
            continue
        try:
            encoded.append(element.encode("utf-8"))
        except UnicodeEncodeError as exc:
            where = tuple(int(i) for i in np.unravel_index(index, elements.shape)) if elements.ndim else ()
            raise OrtException.invalid_argument(f"{what}: the string at index {where} is not valid Unicode ({exc.reason})") from None
    return encoded


def new_string_tensor(shape: Sequence[int]) -> Any:
    """A new ``OrtValue*`` string tensor of ``shape`` (elements empty), allocated by the runtime's
    default allocator. The caller owns it (wrap it at once)."""
    rt = get_runtime()
    out = ffi.new("OrtValue**")
    dims = ffi.new("int64_t[]", list(shape)) if shape else ffi.NULL
    check_status(rt.api.CreateTensorAsOrtValue(process.allocator(), dims, len(shape), STRING, out), "CreateTensorAsOrtValue")
    return out[0]


def fill_string_tensor(value: Any, encoded: List[bytes]) -> None:
    """Write ``encoded`` (one bytes object per element, C order) into a new string tensor."""
    if not encoded:
        return
    api = get_runtime().api
    if not any(b"\0" in element for element in encoded):
        # One call for all: the elements back to back, NUL-terminated, and an array of pointers into them.
        joined = b"\0".join(encoded) + b"\0"
        base = ffi.from_buffer(joined)
        lengths = np.fromiter((len(e) + 1 for e in encoded), dtype=np.uint64, count=len(encoded))
        starts = np.zeros(len(encoded), np.uint64)
        np.cumsum(lengths[:-1], out=starts[1:])
        starts += np.uint64(int(ffi.cast("uintptr_t", base)))
        pointers = ffi.from_buffer("char*[]", starts)
        check_status(api.FillStringTensor(value, pointers, len(encoded)), "FillStringTensor")
        return
    out = ffi.new("char**")
    for index, element in enumerate(encoded):  # a NUL inside: write each element with its length
        check_status(api.GetResizedStringTensorElementBuffer(value, index, len(element), out), "GetResizedStringTensorElementBuffer")
        if element:
            ffi.memmove(out[0], element, len(element))


def read_strings(value: Any, count: int) -> List[bytes]:
    """The ``count`` elements of a string tensor, as bytes, in C order."""
    if count == 0:
        return []
    api = get_runtime().api
    total = ffi.new("size_t*")
    check_status(api.GetStringTensorDataLength(value, total), "GetStringTensorDataLength")
    content = ffi.new("char[]", max(total[0], 1))
    offsets = ffi.new("size_t[]", count)
    check_status(api.GetStringTensorContent(value, content, total[0], offsets, count), "GetStringTensorContent")
    data = ffi.buffer(content, total[0])[:]
    ends = list(offsets[1:count]) + [total[0]]
    return [data[start:end] for start, end in zip(offsets[0:count], ends)]


def decode_strings(elements: List[bytes], shape: Sequence[int], raw: bool = False) -> np.ndarray:
    """An object array of ``shape`` holding each element as ``str`` (UTF-8), or as bytes with ``raw``."""
    if raw:
        values: List[Any] = list(elements)
    else:
        values = []
        for index, element in enumerate(elements):
            try:
                values.append(element.decode("utf-8"))
            except UnicodeDecodeError:
                where = tuple(int(i) for i in np.unravel_index(index, tuple(shape))) if shape else ()
                raise OrtException.invalid_argument(
                    f"the string at index {where} is not valid UTF-8: read it with getStringTensor(raw=True)"
                ) from None
    result = np.empty(len(values), dtype=object)
    result[:] = values
    return result.reshape(tuple(shape))
