"""Run many small test cases in child interpreters, so that a crash fails one case, not the test run.

A test module registers plain functions with ``@case``; its parametrized pytest test asks
``outcome(module, name)``, which runs every registered case of the module once (in as few children
as possible) and caches what happened to each:

- ``"ok"``: the case passed, and it left no native handle alive (``live_handles()`` after
  ``gc.collect()`` is compared with what was alive before the case);
- a traceback: the case failed (an assertion, an unexpected exception, a leaked handle);
- ``"CRASH ..."``: the child died while running this case (a signal: SIGSEGV, SIGABRT, SIGFPE...);
  the cases after it are run again in a fresh child;
- ``"TIMEOUT ..."``: the case hung;
- ``"SKIP ..."``: the case called ``pytest.skip`` (the parent test is skipped too).

In the child the module is imported under its own name (conftest's ``SEARCH_PATH`` is on ``sys.path``), its optional
``child_setup()`` runs once before the first case (what it creates is not counted as a leak), then
the cases run in registration order.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional

from conftest import SEARCH_PATH

_REGISTRY: Dict[str, List[str]] = {}
_OUTCOMES: Dict[str, Dict[str, str]] = {}
_MARK = "@@CASE "


def case(func: Callable[[], None]) -> Callable[[], None]:
    """Register ``func`` (no arguments) as a child-process case of its module."""
    _REGISTRY.setdefault(func.__module__, []).append(func.__name__)
    return func


def cases(module: str) -> List[str]:
    return list(_REGISTRY.get(module, []))


def _describe_rc(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc > 128:  # a shell-style status for a signal
        try:
            return f"exit status {rc} ({signal.Signals(rc - 128).name}?)"
        except ValueError:
            pass
    return f"exit status {rc}"


def _tail(text: "str | bytes | None", n: int = 3000) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text[-n:]


def run_cases(module: str, names: List[str], timeout: float = 240, env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Run ``names`` of ``module`` in children; every name gets an outcome."""
    results: Dict[str, str] = {}
    remaining = list(names)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONFAULTHANDLER", "1")
    # A use-after-free can make the runtime write files with garbage names (a freed SessionOptions'
    # profiling prefix, for one): the children run in a scratch folder, not in the repository.
    scratch = tempfile.mkdtemp(prefix="ort_cffi_child_")
    while remaining:
        code = (
            "import sys; sys.path[:0] = {paths!r}; import _childcases; "
            "_childcases.child_main({module!r}, {names!r})"
        ).format(paths=SEARCH_PATH, module=module, names=remaining)
        timed_out = False
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=scratch
            )
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout, stderr, rc, timed_out = _tail(exc.stdout, 10**9), _tail(exc.stderr), None, True
        started: Optional[str] = None
        for line in stdout.splitlines():
            if not line.startswith(_MARK):
                continue
            kind, name, detail = json.loads(line[len(_MARK):])
            if kind == "start":
                started = name
            elif kind == "done":
                results[name] = detail
                started = None
            elif kind == "setup-failed":
                for n in remaining:
                    results.setdefault(n, f"child_setup() failed:\n{detail}")
                shutil.rmtree(scratch, ignore_errors=True)
                return results
        remaining = [n for n in remaining if n not in results]
        if not remaining:
            break
        if started is None:  # died before the first case: nothing more can run
            why = "TIMEOUT" if timed_out else f"CRASH ({_describe_rc(rc)})"  # type: ignore[arg-type]
            for n in remaining:
                results[n] = f"{why} before the case started\n--- stderr\n{_tail(stderr)}"
            break
        why = f"TIMEOUT after {timeout}s" if timed_out else f"CRASH: the child died ({_describe_rc(rc)})"  # type: ignore[arg-type]
        results[started] = f"{why} while running this case\n--- stderr\n{_tail(stderr)}"
        remaining = [n for n in remaining if n != started]
    shutil.rmtree(scratch, ignore_errors=True)
    return results


def _selected(module: str, request: object) -> List[str]:
    """The module's cases that pytest selected (all of them without a request)."""
    registered = cases(module)
    if request is None:
        return registered
    chosen = set()
    for item in getattr(getattr(request, "session", None), "items", []):
        callspec = getattr(item, "callspec", None)
        if callspec is not None and getattr(item, "module", None) is not None and item.module.__name__ == module:
            value = callspec.params.get("name")
            if value in registered:
                chosen.add(value)
    return [n for n in registered if n in chosen] or registered


def outcome(module: str, name: str, timeout: float = 240, env: Optional[Dict[str, str]] = None, request: object = None) -> str:
    """The cached outcome of one case: on the first call, every selected case of the module runs."""
    done = _OUTCOMES.setdefault(module, {})
    if name not in done:
        todo = [n for n in _selected(module, request) if n not in done]
        if name not in todo:
            todo.append(name)
        done.update(run_cases(module, todo, timeout=timeout, env=env))
    return done[name]


def check(module: str, name: str, **kwargs: object) -> None:
    """Fail unless the case ``name`` of ``module`` passed in its child process. Pass the test's
    ``request`` to run only the cases pytest selected."""
    result = outcome(module, name, **kwargs)  # type: ignore[arg-type]
    if result.startswith("SKIP "):
        import pytest

        pytest.skip(result[5:])
    if result != "ok":
        raise AssertionError(f"case {name} (run in a child process):\n{result}")


# --- the child side ----------------------------------------------------------------------------


def _emit(kind: str, name: str, detail: str = "") -> None:
    sys.stdout.write(_MARK + json.dumps([kind, name, detail]) + "\n")
    sys.stdout.flush()


def child_main(module: str, names: List[str]) -> None:
    import gc
    import importlib
    import traceback

    mod = importlib.import_module(module)
    from ort_cffi._native.handles import live_handles

    setup = getattr(mod, "child_setup", None)
    if setup is not None:
        try:
            setup()
        except BaseException:  # noqa: BLE001
            _emit("setup-failed", "", traceback.format_exc())
            return
    for name in names:
        func = getattr(mod, name)
        gc.collect()
        before = {id(h) for h in live_handles()}
        _emit("start", name)
        try:
            func()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            skipped = type(exc).__name__ == "Skipped"  # pytest.skip() in the child
            detail = f"SKIP {exc}" if skipped else traceback.format_exc()
        else:
            gc.collect()
            leaked = [h for h in live_handles() if id(h) not in before]
            detail = "ok" if not leaked else f"leaked native handles after the case: {leaked}"
        _emit("done", name, detail)


__all__ = ["artifact_session", "case", "cases", "check", "child_main", "outcome", "rss_bytes", "run_cases"]


# --- helpers shared by the issue-4 test modules (usable in the parent and in children) ----------


def artifact_session(name: str = "tiny", eval: bool = True, optim: bool = True, checkpoint: object = None, options: object = None):  # noqa: A002
    """A training session over ``tests/artifacts/<name>`` (its own checkpoint unless one is given)."""
    from conftest import ARTIFACTS
    from ort_cffi import OrtEnvironment

    folder = ARTIFACTS / name
    return OrtEnvironment.getEnvironment().createTrainingSession(
        checkpoint if checkpoint is not None else str(folder / "checkpoint"),
        str(folder / "training_model.onnx"),
        str(folder / "eval_model.onnx") if eval else None,
        str(folder / "optimizer_model.onnx") if optim else None,
        options,
    )


def rss_bytes() -> int:
    """Resident memory of this process, from /proc/self/statm, after giving freed heap back to the OS."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")
