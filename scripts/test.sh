#!/usr/bin/env bash
# The test command: creates (or reuses) .venv, installs ort_cffi with everything its tests need,
# type-checks the package and runs the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
VENV_PY=.venv/bin/python
"$VENV_PY" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV_PY" -m pip install -q --disable-pip-version-check -e ".[test]"

# Inference-only runtimes (real libraries with OrtGetApiBase exported) for the loader's error tests.
# They are the `onnxruntime` package too, so each goes into a folder of its own, never on sys.path.
for version in 1.19.2 1.20.1; do
  target=.cache/ort-inference-$version
  if [ ! -f "$target/.complete" ]; then
    rm -rf "$target"
    "$VENV_PY" -m pip install -q --disable-pip-version-check --no-deps --target "$target" "onnxruntime==$version"
    touch "$target/.complete"
  fi
done

# ONNX Runtime's own Java test data, read in place (never copied into the repository).
if [ -z "${ORT_CFFI_JAVA_TESTDATA:-}" ] && [ -d ../shared/testdata/ort-java-training ]; then
  ORT_CFFI_JAVA_TESTDATA=$(cd ../shared/testdata/ort-java-training && pwd)
fi
export ORT_CFFI_JAVA_TESTDATA

"$VENV_PY" -m mypy ort_cffi
"$VENV_PY" -m pytest tests "$@"
