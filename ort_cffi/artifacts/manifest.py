"""``artifacts.json``: what a folder of artifacts was made from, and whether it still holds them intact.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Union

from ort_cffi._facade.files import file_sha256
from ort_cffi.artifacts.definitions import ModelLike
from ort_cffi.artifacts.options import model_sha256

MANIFEST = "artifacts.json"


def read_manifest(folder: Union[str, os.PathLike[str]], prefix: str = "") -> Optional[Dict[str, Any]]:
    """The ``artifacts.json`` that ``generate_artifacts`` wrote into ``folder``, or None (missing, unreadable)."""
    try:
        manifest = json.loads((Path(os.fspath(folder)) / (prefix + MANIFEST)).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def artifacts_match(folder: Union[str, os.PathLike[str]], model: ModelLike, options: Dict[str, Any]) -> bool:
    """Whether ``folder`` holds artifacts that ``generate_artifacts`` made from ``model`` with ``options``
    (as ``request_options`` gives them), with every file as it was written."""
    manifest = read_manifest(folder, options.get("prefix", ""))
    if manifest is None or manifest.get("options") != options:
        return False
    if manifest.get("model", {}).get("sha256") != model_sha256(model):
        return False
    return files_intact(folder, manifest)


def files_intact(folder: Union[str, os.PathLike[str]], manifest: Dict[str, Any]) -> bool:
    """Whether each file ``manifest`` lists is in ``folder`` with the recorded sha256."""
    try:
        return all(file_sha256(Path(os.fspath(folder)) / entry["name"]) == entry["sha256"]
                   for entry in manifest["files"].values())
    except (OSError, KeyError, TypeError):
        return False
