"""Putting a runtime into the store: the manifest written into its staging folder, then the folder renamed into
place (an entry of the same name set aside first and removed after), so that a reader sees the old entry or the
new one, never half of one. Both installers, the training build's and the inference build's, use it."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ort_cffi._facade.runtimes import MANIFEST, StoredRuntime


def publish(staging: Path, runtime: StoredRuntime) -> StoredRuntime:
    """Move ``staging`` (the runtime's files) to ``runtime.folder``, with its manifest; returns ``runtime``."""
    (staging / MANIFEST).write_text(json.dumps(runtime.manifest(), indent=1) + "\n")
    old = runtime.folder.parent / f".{runtime.name}.old.{os.getpid()}"
    if runtime.folder.exists():
        os.replace(runtime.folder, old)
    os.replace(staging, runtime.folder)
    shutil.rmtree(old, ignore_errors=True)
    return runtime
