"""Denormal numbers: ort_cffi's applications flush them to zero by default, the Java facade keeps ONNX Runtime's
default (docs/guides/performance.md, "Denormal numbers").

Float32 values below 1.2e-38 (denormals) take a slow path in x86 CPUs: a model whose activations or gradients
drift there (a causal LM trained at a small learning rate) can step 2-3 times slower. ONNX Runtime flushes them
when a session's options hold ``session.set_denormal_as_zero`` = ``1``. Two things about how it applies that
shape this module:

- The intra-op worker threads of a session follow that session's options. The thread that calls ``Run`` (the
  only one at one intra-op thread) is set once per process, by the **first** session the process makes, and
  that also holds for numpy in that thread. So an application that flushes asks for it before its first session
  (``request``), and every session ort_cffi makes for it while the request holds carries the entry (``apply``),
  the artifacts' load check included.
- Flushing is the user's to refuse: ``$ORT_CFFI_FLUSH_DENORMALS=0``, an explicit ``flush=False``, or options
  that already hold the entry (either value) win over the default.
"""
from __future__ import annotations

import os
from typing import Any, Optional

CONFIG_KEY = "session.set_denormal_as_zero"
ENVIRONMENT_VARIABLE = "ORT_CFFI_FLUSH_DENORMALS"
_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")

_requested = False  # an application flushes in this process (``request``)


def wanted(flush: Optional[bool] = None) -> bool:
    """Whether an application flushes: ``flush`` if given, else ``$ORT_CFFI_FLUSH_DENORMALS`` (unset: yes)."""
    if flush is not None:
        return bool(flush)
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"${ENVIRONMENT_VARIABLE} is {value!r}: use 1 (flush denormals to zero, the default of "
                     "ort_cffi's trainer, Flower and ort_cffi.api) or 0 (keep them, as ONNX Runtime does)")


def request(flush: Optional[bool] = None) -> bool:
    """An application that flushes says so before it makes sessions; later ``apply(options)`` calls (the
    artifacts' check among them) add the entry. Returns whether it flushes."""
    global _requested
    _requested = wanted(flush)
    return _requested


def requested() -> bool:
    return _requested


def apply(options: Any, flush: Optional[bool] = None) -> bool:
    """Add ``session.set_denormal_as_zero`` = 1 to ``options`` (an ``ort_cffi.SessionOptions``) where flushing is
    wanted (``flush``, else this process's ``request``) and the options do not set the entry already. Returns
    whether sessions made with them flush."""
    entries = options.getConfigEntries()
    if CONFIG_KEY in entries:
        return entries[CONFIG_KEY] == "1"
    if not (wanted(flush) if flush is not None else _requested):
        return False
    options.addConfigEntry(CONFIG_KEY, "1")
    return True
