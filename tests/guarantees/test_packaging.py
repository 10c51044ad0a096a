"""ort_cffi installs with no C compiler: the wheel ``pip`` builds from a checkout is pure Python
(``py3-none-any``) and carries the declarations and the survey the loader reads."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT


def test_the_wheel_is_pure_python_and_builds_without_a_compiler(tmp_path):
    bin_dir = tmp_path / "bin"  # PATH holds the interpreter and nothing else: no cc, gcc, ld
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "LDSHARED")}
    env.update(PATH=str(bin_dir), CC="/nonexistent/cc", CXX="/nonexistent/c++")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))]
    for needed in ("ort_cffi/include/ort_c_api.h", "ort_cffi/include/ort_training_c_api.h",
                   "ort_cffi/data/runtimes.json", "ort_cffi/_native/elf.py", "ort_cffi/runtime/installer.py", "ort_cffi/py.typed"):
        assert needed in names, needed
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    with zipfile.ZipFile(wheel) as archive:
        assert "ort-cffi-runtime = ort_cffi_commands:runtime" in archive.read(entry_points).decode()
    assert "ort_cffi_commands.py" in names  # the commands' entry points, outside the package
