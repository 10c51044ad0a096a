"""The console scripts' entry points (setup.py): Ctrl-C at any moment of a command, its start-up included,
ends with one line and exit status 130.

A module inside ``ort_cffi`` could not do this: the wrapper pip writes for a console script imports the
module it names, and importing ``ort_cffi.cli.train`` runs ``ort_cffi/__init__.py`` (numpy, cffi, the
facade; a third of a second) before any line of the command. Python's own handler turns a SIGINT there into
a ``KeyboardInterrupt`` traceback and a death by the signal. So this module stands outside the package and
imports nothing heavy: its first statement installs a handler that ends the process at once with one line
(nothing has been done yet, so nothing is left behind), and each entry point imports its command only then.
Once the command is imported, Python's handler is back: the command's own ``except KeyboardInterrupt``
removes what it was writing and says what was kept (docs/guides/guarantees.md).

What remains outside any Python code is the interpreter's own start-up before this module (about 30 ms),
where the signal ends the process as Python's default does.
"""
import signal
import sys


def _command_name() -> str:
    name = sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else ""
    return name if name.startswith("ort-cffi-") else "ort-cffi"


_running = _command_name()


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # os is imported here so that the handler costs nothing before it is needed; os is already loaded.
    import os

    os.write(2, f"\n{_running}: interrupted while starting: nothing was done\n".encode())
    os._exit(130)


signal.signal(signal.SIGINT, _interrupted_while_starting)


def _run(module: str, command: str) -> int:
    """Import ``module`` (the command line, ``ort_cffi.cli.*``) under the start-up handler, run its ``main``
    with Python's handler back, so that the command's own clean-up sees the ``KeyboardInterrupt``, then end
    the process (``_end``): this function does not return."""
    global _running
    _running = command
    import importlib

    main = importlib.import_module(module).main
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        status = main()
    except KeyboardInterrupt:  # before the command's own handling begins (its arguments), or after it
        status = 130
        print(f"\n{command}: interrupted", file=sys.stderr)
    except SystemExit as exit_request:  # argparse: --help, --version, a usage error
        status = exit_request.code
    finally:
        signal.signal(signal.SIGINT, _interrupted_while_ending)
    _end(status)
    return 130  # not reached: _end ends the process


_interrupted_late = False


def _interrupted_while_ending(signum: int, frame: object) -> None:
    """Ctrl-C once the command's work is done: noted, so that what still runs (threads the command left,
    atexit callbacks such as temporary folders' removal) finishes; a second one ends the process at once."""
    global _interrupted_late
    if _interrupted_late:
        _exit_interrupted()
    _interrupted_late = True


def _exit_interrupted() -> None:
    import os

    os.write(2, f"\n{_running}: interrupted as it ended, its work done\n".encode())
    os._exit(130)


def _end(status: object) -> None:
    """End the process as the interpreter's shutdown would where it matters (non-daemon threads joined,
    atexit callbacks run, the standard streams flushed), but without the teardown of every module after
    it, where Python has given SIGINT back to the system and Ctrl-C would kill the process by the signal."""
    import atexit
    import os
    import threading

    if isinstance(status, str):  # SystemExit("message"): Python prints it and exits 1
        print(status, file=sys.stderr)
        status = 1
    code = 0 if status is None else status if isinstance(status, int) else 1
    # What the interpreter's exit does first, in its order: threading's exit callbacks (which stop thread
    # pools), the join of non-daemon threads, then the atexit callbacks.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # an interpreter without it: the joins alone
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    if _interrupted_late:
        _exit_interrupted()
    os._exit(code)


def train() -> int:
    """``ort-cffi-train`` (``ort_cffi.cli.train``)."""
    return _run("ort_cffi.cli.train", "ort-cffi-train")


def artifacts() -> int:
    """``ort-cffi-artifacts`` (``ort_cffi.cli.artifacts``)."""
    return _run("ort_cffi.cli.artifacts", "ort-cffi-artifacts")


def runtime() -> int:
    """``ort-cffi-runtime`` (``ort_cffi.cli.runtime``)."""
    return _run("ort_cffi.cli.runtime", "ort-cffi-runtime")


def federated() -> int:
    """``ort-cffi-federated`` (``ort_cffi.cli.federated``)."""
    return _run("ort_cffi.cli.federated", "ort-cffi-federated")


def predict() -> int:
    """``ort-cffi-predict`` (``ort_cffi.cli.predict``)."""
    return _run("ort_cffi.cli.predict", "ort-cffi-predict")
