"""The trainer's own errors."""
from __future__ import annotations

from pathlib import Path


class SetupError(Exception):
    """A run cannot start as asked: a folder, file, dataset or option the user gave is wrong. The message
    names it and what would work; ``ort-cffi-train`` prints it as ``error: ...`` and exits 2."""


class OutputError(Exception):
    """Writing one of the run's files failed once training had begun (a full disk, a folder made read-only
    meanwhile): the file, the reason, and what of the run was kept (``kept``, filled in by the job, which
    knows the last epoch saved). ``ort-cffi-train`` prints it as ``error: ...`` and exits 1."""

    def __init__(self, path: Path, reason: str, kept: str = "") -> None:
        super().__init__(path, reason, kept)
        self.path, self.reason, self.kept = path, reason, kept

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}" + (f". {self.kept}" if self.kept else "")
