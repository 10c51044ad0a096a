#!/usr/bin/env bash
# The day-one command: creates (or reuses) .venv, installs ort_cffi with the CPU training runtime, the
# artifacts generator and the trainer's progress bar and plots, then
#   1. trains the embedded example (an MLP on scikit-learn's 8x8 digits) into runs/demo, and
#   2. fine-tunes on device what it exported: only the last layer of its inference_model.onnx, on
#      digits shifted one pixel right and down (a task the model has not seen), into runs/finetune.
# Extra arguments go to the first ort-cffi-train (see ort-cffi-train --help); the second reads its output.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cpu,artifacts,demo]"
# Where pip cannot install the training wheel (CPython 3.13 and later), fetch the nearest build's runtime.
if ! .venv/bin/ort-cffi-runtime path >/dev/null 2>&1; then
  .venv/bin/ort-cffi-runtime install
fi

# The first run's folder (runs/demo unless "$@" names another), which the fine-tuning reads; --help and
# --version only print.
OUT=runs/demo
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -h | --help | --version) exec .venv/bin/ort-cffi-train "$@" ;;
    --out) OUT=${args[i + 1]:-$OUT} ;;
    --out=*) OUT=${args[i]#--out=} ;;
  esac
done
.venv/bin/ort-cffi-train --out "$OUT" "$@"  # an --out in "$@" comes last and is the same

echo
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('onnxruntime') is None)"; then
  echo "== not fine-tuning: generating training artifacts needs ONNX Runtime's Python layer, which this interpreter"
  echo "   lacks (its training wheel stops at CPython 3.12); see ort-cffi-artifacts --help for --python =="
  exit 0
fi
echo "== fine-tuning the exported model's last layer on shifted digits =="
.venv/bin/python - <<'EOF'
import numpy as np
from ort_cffi.trainer.data import DEFAULT_ARTIFACTS
with np.load(DEFAULT_ARTIFACTS / "digits.npz") as data:
    arrays = dict(data)
for split in ("train", "val"):  # every image moved one pixel right and down
    images = arrays[f"{split}_input"].reshape(-1, 8, 8)
    shifted = np.zeros_like(images)
    shifted[:, 1:, 1:] = images[:, :-1, :-1]
    arrays[f"{split}_input"] = shifted.reshape(-1, 64)
np.savez("runs/shifted_digits.npz", **arrays)
EOF
exec .venv/bin/ort-cffi-train --model "$OUT/inference_model.onnx" --data runs/shifted_digits.npz \
  --trainable 'fc2.*' --out runs/finetune
