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
# Said from the first second: a fresh .venv takes half a minute before anything else prints. pip's -q hides
# its per-package lines but not its download bars, which show where a package is fetched.
if [ -x .venv/bin/python ]; then
  echo "demo: updating ort_cffi in .venv (a few seconds) ..."
else
  echo "demo: creating .venv and installing ort_cffi with its CPU runtime (about 30 s the first time, longer"
  echo "      where pip downloads) ..."
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --progress-bar on -e ".[cpu,artifacts,demo]"
echo "demo: installed; training the embedded example (runs/demo), then fine-tuning its export (runs/finetune)"
# Where pip cannot install the training wheel (CPython 3.13 and later), fetch the nearest build: its runtime,
# and its Python layer, with which ort-cffi-artifacts generates in this interpreter (install keeps a runtime
# that is complete, and completes one an older ort_cffi fetched).
if ! .venv/bin/ort-cffi-runtime path >/dev/null 2>&1 \
   || { [ -z "${ORT_CFFI_ARTIFACTS_PYTHON:-}" ] && ! .venv/bin/ort-cffi-artifacts --check-generator >/dev/null 2>&1; }; then
  .venv/bin/ort-cffi-runtime install
fi

# The first run's folder (runs/demo unless "$@" names another), which the fine-tuning reads; --help and
# --version only print. runs/demo and runs/finetune are the demo's own: running it again replaces them
# (--overwrite); an --out you name is yours, and ort-cffi-train refuses to replace a run there unasked.
OUT=runs/demo
REPLACE=(--overwrite)
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -h | --help | --version) exec .venv/bin/ort-cffi-train "$@" ;;
    --out) OUT=${args[i + 1]:-$OUT}; REPLACE=() ;;
    --out=*) OUT=${args[i]#--out=}; REPLACE=() ;;
    --resume* | --overwrite) REPLACE=() ;;
  esac
done
.venv/bin/ort-cffi-train --out "$OUT" "${REPLACE[@]}" "$@"  # an --out in "$@" comes last and is the same

echo
# ort_cffi says whether a generator can run: this interpreter's training layer (3.8-3.12), the runtime store's
# (3.13 and later), or the interpreter $ORT_CFFI_ARTIFACTS_PYTHON names.
if ! generator=$(.venv/bin/ort-cffi-artifacts --check-generator 2>&1); then
  echo "== not fine-tuning: no generator of training artifacts here =="
  echo "$generator"
  exit 0
fi
echo "$generator"
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
  --trainable 'fc2.*' --out runs/finetune --overwrite
