"""``ort-cffi-runtime``: fetch, list and remove ONNX Runtime builds (``ort_cffi.runtime``).

    ort-cffi-runtime install [--cuda] [--python-version X.Y] [--wheel FILE] [--force]
    ort-cffi-runtime install --inference [--cuda] [--version 1.31.1] [--wheel FILE] [--force]
    ort-cffi-runtime list
    ort-cffi-runtime path
    ort-cffi-runtime remove NAME... | --all
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

from filelock import Timeout

from ort_cffi._facade.runtimes import StoredRuntime
from ort_cffi.artifacts import ArtifactsError, check_generator
from ort_cffi.runtime import (
    RuntimeInstallError,
    check_loads,
    describe_choice,
    has_training_build,
    install,
    loader_choice,
    machine,
    prepare_generator,
    prepared_changes,
    store_dir,
    stored_runtimes,
)


def python_version_arg(text: str) -> Tuple[int, int]:
    """``--python-version``: "3.12" -> (3, 12)."""
    match = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPython version like 3.12")
    return int(match[1]), int(match[2])


def wheel_arg(text: str) -> Path:
    """``--wheel``: a wheel file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return path


def folder_size(folder: Path) -> int:
    """The bytes of the files directly in ``folder``."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def command_list() -> int:
    """``ort-cffi-runtime list``: the store's runtimes, the one the loader uses marked ``*`` (none
    when it uses an installed wheel or ``$ORT_CFFI_LIBRARY``)."""
    choice = loader_choice()
    used = choice[1]
    runtimes = stored_runtimes()
    print(f"runtime store: {store_dir()}")
    if not runtimes:
        print("  (empty: `ort-cffi-runtime install` fetches one)")
    for runtime in runtimes:
        marker = "*" if used is not None and used.kind == "fetched" and used.path == runtime.extension_path else " "
        print(f" {marker} {runtime.name:32} {folder_size(runtime.folder) / 2**20:7.1f} MB  from {runtime.wheel}")
    print(f"the loader uses: {describe_choice(*choice)}")
    return 0


def command_path() -> int:
    """``ort-cffi-runtime path``: print the runtime file the loader would use (exit 1 when none)."""
    explicit, source, tried = loader_choice()
    if explicit:
        print(explicit)
        return 0
    if source is None:
        print("no training runtime found:\n  - " + "\n  - ".join(tried), file=sys.stderr)
        return 1
    print(source.path)
    return 0


def report_generator(runtime: StoredRuntime) -> None:
    """After an install: whether ort-cffi-artifacts can run ONNX Runtime's generator here with what was kept.
    Only said, never an install failure: the runtime itself trains without it."""
    try:
        layer = prepare_generator(runtime)
    except RuntimeInstallError as error:
        print(f"generator: not from this runtime: {error}")
        return
    changes = prepared_changes(runtime)
    print(f"generator: ONNX Runtime's Python layer kept in {layer}, its extension copied for this interpreter"
          + (f" ({'; '.join(changes)})" if changes else ""))
    try:
        found = check_generator()
    except ArtifactsError as error:
        print(f"generator: {error}")
        return
    print(f"generator: ort-cffi-artifacts runs ONNX Runtime {found['onnxruntime']} with onnx {found['onnx']} in "
          f"Python {found['version']} ({found['layer']})")


def command_remove(names: Sequence[str], remove_all: bool) -> int:
    """``ort-cffi-runtime remove``: delete runtimes from the store (exit 1 for an unknown name)."""
    runtimes = {r.name: r for r in stored_runtimes()}
    if remove_all:
        names = list(runtimes)
    unknown = [n for n in names if n not in runtimes]
    if unknown:
        print(f"not installed: {', '.join(unknown)} (installed: {', '.join(runtimes) or 'none'})", file=sys.stderr)
        return 1
    for name in names:
        shutil.rmtree(runtimes[name].folder)
        print(f"removed {name}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ort-cffi-runtime`` command; its exit status (2 when installing failed)."""
    parser = argparse.ArgumentParser(
        prog="ort-cffi-runtime", description="Fetch, list and remove ONNX Runtime builds for ort_cffi: the 1.19.2 training build, or the current inference build (--inference)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    install_parser = commands.add_parser(
        "install", help="fetch the 1.19.2 training build for this interpreter (on a machine it was not published for, "
        "and with --inference: the current inference build's C library, which ort_cffi's engine trains on)"
    )
    install_parser.add_argument("--cuda", action="store_true", help="the CUDA build (onnxruntime-training; with --inference, onnxruntime-gpu)")
    install_parser.add_argument(
        "--inference", action="store_true",
        help="the C library of the current inference build (onnxruntime), for any interpreter: ort_cffi's engine trains on it",
    )
    install_parser.add_argument("--version", help="with --inference: the onnxruntime version (default: the newest ort_cffi surveyed)")
    install_parser.add_argument(
        "--python-version", type=python_version_arg, help="the CPython whose build to fetch, e.g. 3.12 (default: the nearest to this one)"
    )
    install_parser.add_argument("--wheel", type=wheel_arg, help="install from a wheel file already downloaded (checked by hash)")
    install_parser.add_argument("--force", action="store_true", help="reinstall even if it is installed")
    commands.add_parser("list", help="the installed runtimes, and which one the loader uses")
    commands.add_parser("path", help="print the runtime file the loader would use")
    remove_parser = commands.add_parser("remove", help="remove installed runtimes")
    remove_parser.add_argument("names", nargs="*", help="runtime names, as `list` shows them")
    remove_parser.add_argument("--all", action="store_true", help="remove every installed runtime")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            inference = args.inference
            if not inference and args.wheel is None and not has_training_build(machine()):
                # No training build was published for this machine (aarch64): the engine's runtime is the one to fetch.
                print(f"ONNX Runtime published no training build for Linux {machine()}: fetching the inference build, "
                      "which ort_cffi's engine trains on")
                inference = True
            if inference and args.python_version is not None:
                parser.error("install: --python-version picks a training build; the inference library serves every interpreter")
            if args.version is not None and not inference:
                parser.error("install: --version goes with --inference (the training build is 1.19.2)")
            flavour = ("inference-gpu" if args.cuda else "inference") if inference else ("cuda" if args.cuda else "cpu")
            runtime = install(flavour, args.python_version, args.wheel, args.force, args.version)
            print(f"installed {runtime.name} in {runtime.folder}")
            print(check_loads(runtime))
            if runtime.form == "extension":  # an inference build has no Python layer, and needs none
                report_generator(runtime)
            return 0
        if args.command == "list":
            return command_list()
        if args.command == "path":
            return command_path()
        if not args.names and not args.all:
            parser.error("remove: name a runtime, or pass --all")
        return command_remove(args.names, args.all)
    except RuntimeInstallError as error:
        print(f"ort-cffi-runtime: {error}", file=sys.stderr)
        return 2
    except subprocess.TimeoutExpired as error:
        print(f"ort-cffi-runtime: {error.cmd[0]} did not finish within {error.timeout:g} s", file=sys.stderr)
        return 2
    except Timeout as error:  # the store's lock: another install has held it for an hour
        print(f"ort-cffi-runtime: another ort-cffi-runtime holds {error.lock_file}; try again when it is done", file=sys.stderr)
        return 2
    except OSError as error:  # the store or a temporary folder: not writable, full
        print(f"ort-cffi-runtime: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # an install unpacks into a temporary folder and moves it in whole
        print("\nort-cffi-runtime: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
