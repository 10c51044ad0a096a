#!/usr/bin/env python3
"""Write tests/golden/tiny_losses_100.json: 100 training losses of the tiny MLP, computed by ONNX
Runtime's own Python training layer (the oracle child of tests/test_oracle.py), as float32 bits.

Every interpreter leg of the tests must reproduce them through ort_cffi (tests/test_cross_interpreter.py).
Run it with an interpreter where the training wheel imports (CPython 3.8-3.12):

    .venv/bin/python scripts/make_golden_losses.py
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_oracle import CHILD, make_data, programs  # type: ignore[import-not-found]  # noqa: E402

OUT = ROOT / "tests" / "golden" / "tiny_losses_100.json"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        make_data(tmp / "data.npz")
        plan = {"data": str(tmp / "data.npz"), "out": str(tmp), "programs": {"losses_tiny": programs("oracle", tmp)["losses_tiny"]}}
        (tmp / "plan.json").write_text(json.dumps(plan))
        subprocess.run([sys.executable, str(CHILD), str(tmp / "plan.json")], check=True, cwd=str(ROOT))
        with np.load(tmp / "losses_tiny.npz") as npz:
            losses = npz["t.0"].astype(np.float32)
    record = {
        "about": "100 train-step losses of tests/artifacts/tiny on tests/test_oracle.py's data (seed 12), "
        "optimizer step and lazy reset after each, one intra-op thread: float32 bit patterns",
        "python": platform.python_version(),
        "source": f"ONNX Runtime's Python training layer, onnxruntime-training-cpu {metadata.version('onnxruntime-training-cpu')}",
        "loss_bits": [f"{bits:08x}" for bits in losses.view(np.uint32).tolist()],
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}: {losses[0]:.7f} ... {losses[-1]:.7f}")


if __name__ == "__main__":
    main()
