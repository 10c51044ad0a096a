"""The loader on aarch64, under qemu-user: run by scripts/check_aarch64.sh with an arm64 CPython.

No Linux aarch64 training build of ONNX Runtime was ever published, so the Java TrainingTest port
cannot run there. What this checks instead, in a real aarch64 process, on ONNX Runtime 1.19.2's
aarch64 inference wheel:

- ``libonnxruntime.so``: ``OrtGetApiBase()`` called at run time returns the table the static finder
  found (``adrp; add; ret`` decoding, ``R_AARCH64_RELATIVE`` relocations);
- ``onnxruntime_pybind11_state*.so`` (which exports no C API): the loader's whole path, a private
  image examined statically and mapped, whose ``OrtApiBase`` answers ``GetVersionString() ==
  "1.19.2"`` and a non-NULL ``GetApi(19)``; then ``TrainingApiUnavailableError`` (an inference build).

    python check_aarch64.py PATH   # a library or an extension of the aarch64 inference wheel
"""
import json, platform, sys, time
from ort_cffi import TrainingApiUnavailableError
from ort_cffi.capi import load_runtime, ffi
path = sys.argv[1]
t = time.perf_counter()
try:
    load_runtime(path)
    print("loaded?!")
except TrainingApiUnavailableError as error:
    print(platform.machine(), "error as expected:", str(error)[:160])
from ort_cffi._native import loader as _loader
from ort_cffi._native import elf as _elf
# What the loader did, step by step, in this aarch64 process:
from ort_cffi._native.loader import RuntimeFile, prepare_image, _dlopen, _dlsym
from pathlib import Path
if "pybind11" in path:
    image, record = prepare_image(RuntimeFile(Path(path), "extension", None, "aarch64 check"))
    handle = _dlopen(str(image))
    loc = record["location"]
    base = _dlsym(handle, loc["anchor"]) - loc["anchor_address"]
    api_base = ffi.cast("const OrtApiBase*", base + loc["api_base"])
    print("static answer: OrtApiBase at load base +", hex(loc["api_base"]), "->", ffi.string(api_base.GetVersionString()).decode(),
          "GetApi(19) NULL?", api_base.GetApi(19) == ffi.NULL, "renamed:", record["renames"])
else:
    handle = _dlopen(path)
    loc = _elf.find_api_base(path, "1.19.2", anchors=["OrtGetApiBase"])
    get = _dlsym(handle, "OrtGetApiBase")
    called = int(ffi.cast("uintptr_t", ffi.cast("const OrtApiBase*(*)(void)", get)()))
    print("OrtGetApiBase() returns load base +", hex(called - (get - loc.anchor_address)), "; static finder:", hex(loc.api_base),
          "agree:", called - (get - loc.anchor_address) == loc.api_base)
print(f"{time.perf_counter() - t:.1f} s under qemu")
