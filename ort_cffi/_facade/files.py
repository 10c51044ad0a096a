"""File helpers the applications share with the facade: a file's sha256 (identities of models, datasets and
artifacts), crash-safe writes (a temporary file beside the target, flushed, then renamed over it), and the probe
that a folder takes such writes."""
from ort_cffi._native.files import atomic_write, file_sha256, probe_writes

__all__ = ["atomic_write", "file_sha256", "probe_writes"]
