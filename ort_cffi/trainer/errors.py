"""The trainer's own error."""


class SetupError(Exception):
    """A run cannot start as asked: a folder, file, dataset or option the user gave is wrong. The message
    names it and what would work; ``ort-cffi-train`` prints it as ``error: ...`` and exits 2."""
