"""100 training steps give the same losses, bit for bit, on every interpreter ort_cffi runs on.

The golden losses (tests/golden/tiny_losses_100.json) are ONNX Runtime's own: written by
scripts/make_golden_losses.py through its Python training layer (``onnxruntime.capi._pybind_state``,
CPython 3.11, the cp311 wheel). Every interpreter leg of scripts/test.sh trains the same 100 steps
through ort_cffi's facade, whatever runtime file it loads (the cp310/cp311/cp312 wheel, or the
cp312 build fetched and renamed for CPython 3.13), and must reproduce them exactly; where the
Python layer imports, it is run again and compared too, so the golden file cannot drift.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_oracle import CHILD, ROOT, STEPS, make_data, programs, run_cffi

GOLDEN = Path(__file__).resolve().parent / "golden" / "tiny_losses_100.json"


def facade_losses(tmp: Path) -> np.ndarray:
    make_data(tmp / "data.npz")
    with np.load(tmp / "data.npz") as npz:
        data = {k: npz[k] for k in npz.files}
    records = run_cffi(programs("cffi", tmp)["losses_tiny"], data)
    return records["t.0"].astype(np.float32)


def golden() -> "tuple[dict, np.ndarray]":
    record = json.loads(GOLDEN.read_text())
    return record, np.array([int(h, 16) for h in record["loss_bits"]], dtype=np.uint32).view(np.float32)


def test_100_training_steps_are_bit_identical_to_onnx_runtimes_own(tmp_path):
    from ort_cffi.capi import get_runtime

    record, expected = golden()
    ours = facade_losses(tmp_path)
    assert len(expected) == STEPS == len(ours)
    runtime = get_runtime()
    print(f"{sys.version.split()[0]} with {Path(runtime.library).name} (renamed: {runtime.renamed or 'nothing'}): "
          f"losses {ours[0]:.7f} ... {ours[-1]:.7f}; golden from {record['python']} ({record['source']})")
    mismatched = np.flatnonzero(ours.view(np.uint32) != expected.view(np.uint32))
    assert mismatched.size == 0, f"steps {mismatched.tolist()[:10]} differ: {ours[mismatched][:5]} vs {expected[mismatched][:5]}"


@pytest.mark.needs_onnxruntime_python
def test_the_golden_losses_are_what_onnx_runtimes_python_layer_computes(tmp_path):
    record, expected = golden()
    make_data(tmp_path / "data.npz")
    plan = {"data": str(tmp_path / "data.npz"), "out": str(tmp_path),
            "programs": {"losses_tiny": programs("oracle", tmp_path)["losses_tiny"]}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    subprocess.run([sys.executable, str(CHILD), str(tmp_path / "plan.json")], check=True, cwd=str(ROOT), timeout=600)
    with np.load(tmp_path / "losses_tiny.npz") as npz:
        theirs = npz["t.0"].astype(np.float32)
    assert theirs.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
