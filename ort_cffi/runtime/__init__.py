"""The runtime installer: fetch ONNX Runtime's 1.19.2 training build for this interpreter into ort_cffi's
runtime store, where pip cannot install it (CPython 3.13 and later), and say which runtime the loader
would use. It also keeps the wheel's Python layer, with which ``ort_cffi.artifacts`` generates training artifacts in
this interpreter (``generator``). ``ort-cffi-runtime`` is its command (``ort_cffi.cli.runtime``); the work is in
``installer``.
"""
from ort_cffi._facade.runtimes import store_dir, stored_runtimes
from ort_cffi.runtime.errors import RuntimeInstallError
from ort_cffi.runtime.generator import has_generator, prepare_generator, prepared_changes, stored_generator
from ort_cffi.runtime.installer import (
    FLAVOURS,
    NATIVE_PREFIX,
    check_loads,
    choose_wheel,
    describe_choice,
    download_wheel,
    glibc_version,
    has_training_build,
    install,
    install_wheel,
    loader_choice,
    machine,
    published_wheels,
    row_of_wheel,
)

__all__ = [
    "check_loads",
    "choose_wheel",
    "describe_choice",
    "download_wheel",
    "FLAVOURS",
    "glibc_version",
    "has_training_build",
    "has_generator",
    "install",
    "install_wheel",
    "loader_choice",
    "machine",
    "NATIVE_PREFIX",
    "prepare_generator",
    "prepared_changes",
    "published_wheels",
    "row_of_wheel",
    "RuntimeInstallError",
    "store_dir",
    "stored_generator",
    "stored_runtimes",
]
