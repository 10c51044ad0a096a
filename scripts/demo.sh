#!/usr/bin/env bash
# The day-one command: creates (or reuses) .venv, installs ort_cffi with the CPU training runtime and
# the trainer's progress bar and plots, then trains the embedded example (an MLP on scikit-learn's
# 8x8 digits) into runs/demo. Extra arguments go to ort-cffi-train (see ort-cffi-train --help).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cpu,demo]"
# Where pip cannot install the training wheel (CPython 3.13 and later), fetch the nearest build's runtime.
if ! .venv/bin/ort-cffi-runtime path >/dev/null 2>&1; then
  .venv/bin/ort-cffi-runtime install
fi

# --out first, so that an --out among "$@" wins (argparse keeps the last one).
exec .venv/bin/ort-cffi-train --out runs/demo "$@"
