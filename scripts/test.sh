#!/usr/bin/env bash
# The test command: creates (or reuses) a virtual environment, installs ort_cffi with everything its
# tests need, type-checks the package and runs the test suite. Extra arguments go to pytest.
#
#   scripts/test.sh                       # CPython 3.11, the whole suite, in .venv (python3 where
#                                         # there is no python3.11: the whole suite if it is 3.11)
#   PYTHON=python3.13 scripts/test.sh     # another interpreter, in .venv-3.13: the loader, raw-layer,
#                                         # facade, Java-port and artifact tests (what does not need
#                                         # Flower); on 3.13 the runtime is fetched with
#                                         # `ort-cffi-runtime install`, which also keeps the Python
#                                         # layer the artifact generator runs there
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
if ! "$PYTHON" -c "" 2>/dev/null; then  # pyenv's interpreters are not all on PATH: find the named one
  for candidate in "$HOME"/.pyenv/versions/"${PYTHON#python}"*/bin/"$PYTHON"; do
    if [ -x "$candidate" ]; then PYTHON=$candidate; break; fi
  done
fi
if ! "$PYTHON" -c "" 2>/dev/null && [ "$PYTHON" = python3.11 ]; then PYTHON=python3; fi
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
FULL_SUITE_VERSION=3.11  # the interpreter the whole suite (federated, oracle, benchmarks' helpers) runs on
if [ "$PY_VERSION" = "$FULL_SUITE_VERSION" ]; then
  VENV=.venv; EXTRA=test
else
  VENV=.venv-$PY_VERSION; EXTRA=test-core,artifacts
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
VENV_PY=$VENV/bin/python
pip_install() { "$VENV_PY" -m pip install -q --disable-pip-version-check "$@"; }
pip_install --upgrade pip
pip_install -e ".[$EXTRA]"

# Inference-only runtimes (real libraries with OrtGetApiBase exported) for the loader's error tests.
# They are the `onnxruntime` package too, so each goes into a folder of its own, never on sys.path.
for version in 1.19.2 1.20.1; do
  target=.cache/ort-inference-$version
  if [ ! -f "$target/.complete" ]; then
    rm -rf "$target"
    pip_install --no-deps --only-binary=:all: --target "$target" --python-version 3.11 \
      --platform manylinux_2_28_x86_64 "onnxruntime==$version"
    touch "$target/.complete"
  fi
done

# The published training wheels the static finder is checked against (the survey's CPU rows), and the
# inference wheels whose exported OrtGetApiBase checks it on x86_64 and aarch64: about 70 MB, once.
if [ ! -f .cache/survey/.complete ]; then
  fetch() { "$VENV_PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
              --dest .cache/survey "$@"; }
  for python in 3.8 3.9 3.10 3.11 3.12; do
    fetch --python-version "$python" --platform manylinux_2_28_x86_64 onnxruntime-training-cpu==1.19.2
  done
  for machine in x86_64 aarch64; do
    fetch --python-version 3.11 --platform "manylinux_2_28_$machine" onnxruntime==1.19.2
  done
  touch .cache/survey/.complete
fi

# ONNX Runtime's own Java test data, read in place (never copied into the repository).
if [ -z "${ORT_CFFI_JAVA_TESTDATA:-}" ] && [ -d ../shared/testdata/ort-java-training ]; then
  ORT_CFFI_JAVA_TESTDATA=$(cd ../shared/testdata/ort-java-training && pwd)
fi
export ORT_CFFI_JAVA_TESTDATA

if [ "$EXTRA" = test ]; then
  "$VENV_PY" -m mypy ort_cffi
  "$VENV_PY" -m pytest "$@"  # no arguments: every test (pytest.ini's testpaths)
else
  # Where pip cannot install the training wheel, the runtime comes from the store (ort-cffi-runtime), with
  # the Python layer the artifact generator runs in this interpreter; the tests that need ONNX Runtime's
  # Python layer imported beside ort_cffi (the hook oracle) cannot run.
  SELECT=()
  if ! "$VENV_PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('onnxruntime') is None)"; then
    # A store of the tests' own: what the user fetched (another build, --cuda) cannot change what is tested.
    export ORT_CFFI_RUNTIME_DIR=$PWD/.cache/runtime-store-$PY_VERSION
    "$VENV/bin/ort-cffi-runtime" install
    SELECT=(-m "not needs_onnxruntime_python")
  fi
  "$VENV_PY" -m pytest "${SELECT[@]}" \
    tests/native/test_loader.py tests/native/test_static_finder.py tests/apps/test_runtime_cli.py tests/native/test_raw_capi.py \
    tests/facade/test_facade.py tests/facade/test_tensor_types.py tests/facade/test_input_signatures.py tests/java/test_java_additions.py \
    tests/java/test_training_java.py tests/java/test_onnx_tensor_java.py tests/guarantees/test_cross_interpreter.py \
    tests/apps/test_artifacts.py tests/apps/test_train_model.py tests/apps/test_python_api.py \
    tests/apps/test_python_api_semantics.py tests/apps/test_python_map.py "$@"
fi
