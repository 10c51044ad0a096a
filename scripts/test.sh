#!/usr/bin/env bash
# The test command: creates (or reuses) a virtual environment, installs ort_cffi with everything its
# tests need, type-checks the package and runs the test suite. Extra arguments go to pytest.
#
#   scripts/test.sh                       # CPython 3.11, the whole suite, in .venv (python3 where
#                                         # there is no python3.11)
#   PYTHON=python3.13 scripts/test.sh     # another interpreter, in .venv-3.13: every test that can
#                                         # run there; on 3.13 and later the runtime is fetched with
#                                         # `ort-cffi-runtime install`, which also keeps the Python
#                                         # layer the artifact generator runs there
#   PYTHON=python3.14 scripts/test.sh     # 3.14 or 3.15 where the machine lacks them: in the Debian
#                                         # sid root of scripts/newest_pythons.sh (needs root)
#   ORT_CFFI_TEST_SCOPE=core ...          # the loader, raw-layer, facade, Java-port and artifact tests
#
# On 3.11 and on 3.13 and later it then runs the suite again on ort_cffi's engine, over onnxruntime 1.31.1 (no
# training build loaded): the interpreter's own wheel, installed by pip into a folder of its own (3.11, 3.13,
# 3.14), or where pip has none (3.15) the C library `ort-cffi-runtime install --inference` fetches. The whole
# suite, less the tests marked needs_training_build (and those this interpreter leaves out above); with
# ORT_CFFI_TEST_SCOPE=core, the facade, Java-port, Python-API, misuse, artifact and trainer tests only.
# ORT_CFFI_ENGINE_TESTS=0 leaves that run out.
#
# It ends by saying which interpreter ran and which tests were left out on it, and why.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
if ! "$PYTHON" -c "" 2>/dev/null; then  # pyenv's interpreters are not all on PATH: find the named one
  for candidate in "$HOME"/.pyenv/versions/"${PYTHON#python}"*/bin/"$PYTHON"; do
    if [ -x "$candidate" ]; then PYTHON=$candidate; break; fi
  done
fi
# CPython 3.14 and 3.15 where the machine lacks them: Debian's builds, in the Debian sid root that
# scripts/newest_pythons.sh makes (once) and runs this script in, with the checkout at its own path.
if ! "$PYTHON" -c "" 2>/dev/null && [ -z "${ORT_CFFI_IN_SID_ROOT:-}" ]; then
  case $PYTHON in
    python3.14|python3.15) exec bash scripts/newest_pythons.sh run "$PYTHON" -- bash scripts/test.sh "$@" ;;
  esac
fi
if ! "$PYTHON" -c "" 2>/dev/null && [ "$PYTHON" = python3.11 ]; then PYTHON=python3; fi
PY_VERSION=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# At the end, pass or fail: which interpreter ran, and what was left out on it, and why.
REASONS=()
report() {
  local status=$?
  echo "=== scripts/test.sh: $("$PYTHON" -c 'import sys; print("Python", sys.version.split()[0], "at", sys.executable)')${ORT_CFFI_IN_SID_ROOT:+, in the Debian sid root of scripts/newest_pythons.sh}: exit $status ==="
  if [ ${#REASONS[@]} -eq 0 ]; then
    echo "left out on this interpreter: nothing"
  else
    printf 'left out on this interpreter: %s\n' "${REASONS[@]}"
  fi
}
trap report EXIT
# What runs: every test this interpreter can run (pytest.ini's testpaths), less what the markers below
# leave out; or, with ORT_CFFI_TEST_SCOPE=core, the core tests only: the loader, raw-layer, facade,
# Java-port and artifact tests. CI runs the core tests on the interpreters besides 3.11 (to stay within
# its time); CPython 3.9 and 3.10, which Flower does not support, run them always.
CORE_TESTS=(
  tests/native/test_loader.py tests/native/test_static_finder.py tests/apps/test_runtime_cli.py tests/native/test_raw_capi.py
  tests/facade/test_facade.py tests/facade/test_tensor_types.py tests/facade/test_input_signatures.py tests/java/test_java_additions.py
  tests/java/test_training_java.py tests/java/test_onnx_tensor_java.py tests/guarantees/test_cross_interpreter.py
  tests/apps/test_artifacts.py tests/apps/test_train_model.py tests/apps/test_python_api.py
  tests/apps/test_python_api_semantics.py tests/apps/test_python_map.py tests/builder tests/apps/test_zoo.py
)
SCOPE=${ORT_CFFI_TEST_SCOPE:-all}
SCOPE_WHY="ORT_CFFI_TEST_SCOPE=core"
case $PY_VERSION in 3.9|3.10) SCOPE=core; SCOPE_WHY="Flower, which they need, supports CPython 3.11 and later" ;; esac
case $SCOPE in all|core) ;; *) echo "ORT_CFFI_TEST_SCOPE is all or core, not $SCOPE" >&2; exit 2 ;; esac
FULL_SUITE_VERSION=3.11  # the interpreter whose environment is .venv (the scripts' and benchmarks')
if [ "$PY_VERSION" = "$FULL_SUITE_VERSION" ]; then
  VENV=.venv; EXTRA=test
elif [ "$SCOPE" = all ]; then
  VENV=.venv-$PY_VERSION; EXTRA=test,artifacts,onnxruntime-generator  # what the stored generator imports on 3.13+
else
  VENV=.venv-$PY_VERSION; EXTRA=test-core,artifacts,onnxruntime-generator
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
VENV_PY=$VENV/bin/python
pip_install() { "$VENV_PY" -m pip install -q --disable-pip-version-check "$@"; }
pip_install --upgrade pip
pip_install -e ".[$EXTRA]"

# What every interpreter's run shares under .cache (the runtimes and the survey below) is fetched by one run at a
# time: CI runs two interpreters at once (.ci/run), and a folder half made by one must not be read by the other.
mkdir -p .cache
exec 9>.cache/shared-downloads.lock
flock 9
# Inference-only runtimes (real libraries with OrtGetApiBase exported): 1.19.2 and 1.20.1 for the loader's
# reading of inference builds, 1.31.1 (the current release) for ort_cffi's engine (tests/engine), 1.20.1 and
# 1.25.1 for the engine on releases between (tests/engine/test_versions.py; every release:
# scripts/check_versions.py). They are the `onnxruntime` package too, so each goes into a folder of its own,
# never on sys.path.
for version in 1.19.2 1.20.1 1.25.1 1.31.1; do
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
flock -u 9

# ONNX Runtime's own Java test data, read in place (never copied into the repository).
if [ -z "${ORT_CFFI_JAVA_TESTDATA:-}" ] && [ -d ../shared/testdata/ort-java-training ]; then
  ORT_CFFI_JAVA_TESTDATA=$(cd ../shared/testdata/ort-java-training && pwd)
fi
export ORT_CFFI_JAVA_TESTDATA

# Where pip cannot install the training wheel (3.13 and later), the runtime comes from the store
# (ort-cffi-runtime), with the Python layer the artifact generator runs in this interpreter; the tests that
# need ONNX Runtime's Python layer imported beside ort_cffi (the hook oracle, the oracle run in-process)
# cannot run, and the bit-identity tests use the numbers an oracle computed on this machine instead.
LEFT_OUT=()  # markers of the tests that cannot run here
if ! "$VENV_PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('onnxruntime') is None)"; then
  # A store of the tests' own: what the user fetched (another build, --cuda) cannot change what is tested.
  export ORT_CFFI_RUNTIME_DIR=$PWD/.cache/runtime-store-$PY_VERSION
  "$VENV/bin/ort-cffi-runtime" install
  LEFT_OUT+=(needs_onnxruntime_python)
  REASONS+=("the tests marked needs_onnxruntime_python: ONNX Runtime's Python layer cannot be imported beside ort_cffi on Python $PY_VERSION (no training wheel installs there)")
  # ONNX Runtime's generator (ort_cffi's own builder is the default) is that stored Python layer, run in a
  # child: on 3.14 and later its extension crashes while it initialises, so the tests that compare with it
  # cannot run there.
  if ! generator_check=$("$VENV/bin/ort-cffi-artifacts" --check-generator --generator onnxruntime 2>&1); then
    LEFT_OUT+=(needs_onnxruntime_generator)
    REASONS+=("the tests marked needs_onnxruntime_generator: $(echo "$generator_check" | grep -m1 "^error:" | sed 's/^error: //; s/:$//' || true)")
  fi
fi
if [ "$SCOPE" = all ] && ! "$VENV_PY" -c "import ray" 2>/dev/null; then
  LEFT_OUT+=(needs_ray)
  REASONS+=("the tests marked needs_ray: Flower's simulation engine, Ray, has no build for Python $PY_VERSION (pip installs flwr[simulation] without it)")
fi
SELECT=()
if [ ${#LEFT_OUT[@]} -gt 0 ]; then
  SELECT=(-m "$(printf 'not %s and ' "${LEFT_OUT[@]}" | sed 's/ and $//')")
fi
if [ "$SCOPE" = all ]; then
  "$VENV_PY" -m mypy ort_cffi
  # the same code as Windows and macOS see it: no machine of either runs here, so this is their static check
  "$VENV_PY" -m mypy --platform win32 ort_cffi
  "$VENV_PY" -m mypy --platform darwin ort_cffi
  "$VENV_PY" -m pytest "${SELECT[@]}" "$@"  # no arguments: every test (pytest.ini's testpaths)
else
  REASONS+=("everything outside the core tests (the federated, trainer, docs and guarantees tests among them): $SCOPE_WHY")
  "$VENV_PY" -m pytest "${SELECT[@]}" "${CORE_TESTS[@]}" "$@"
fi

# ort_cffi's engine on the current inference build, as where no training wheel installs (3.13 and later): the
# whole suite (pytest.ini's testpaths), or with ORT_CFFI_TEST_SCOPE=core the tests below, less what only the
# training build can run.
CURRENT_ORT=1.31.1
ENGINE_TESTS=(
  tests/facade/test_facade.py tests/facade/test_tensor_types.py tests/facade/test_input_signatures.py tests/facade/test_beyond_java.py
  tests/java/test_java_additions.py tests/java/test_training_java.py tests/java/test_onnx_tensor_java.py
  tests/apps/test_runtime_inference.py tests/apps/test_artifacts.py tests/apps/test_train_model.py tests/apps/test_python_map.py
  tests/apps/test_python_api.py tests/apps/test_python_api_semantics.py tests/guarantees/test_bad_input.py
)
case $PY_VERSION in
  # 3.11 runs the engine too, after its whole suite on the training build (which takes in tests/engine, the
  # engine against the training build step by step): the same tests on both backends. 3.12 and older have the
  # training wheel and no engine run.
  3.9|3.10|3.12) ENGINE=0 ;;
  *) ENGINE=${ORT_CFFI_ENGINE_TESTS:-1}
     [ "$ENGINE" = 1 ] || REASONS+=("the tests on the engine over onnxruntime $CURRENT_ORT: ORT_CFFI_ENGINE_TESTS=$ENGINE") ;;
esac
if [ "$ENGINE" = 1 ]; then
  # The interpreter's own onnxruntime wheel, installed by pip into a folder of its own (it would replace the
  # stored training build's Python layer in the venv) and put on PYTHONPATH: the loader finds it as an installed
  # wheel. Where pip has none for this interpreter, the C library is fetched into a store of the run's own.
  engine_env=(ORT_CFFI_BACKEND= ORT_CFFI_LIBRARY= ORT_CFFI_RUNTIME= ORT_CFFI_RUNTIME_DIR="$PWD/.cache/runtime-store-$PY_VERSION-engine")
  target=.cache/ort-inference-$CURRENT_ORT-py$PY_VERSION
  if [ -f "$target/.complete" ] || { rm -rf "$target"; pip_install --no-deps --only-binary=:all: --target "$target" "onnxruntime==$CURRENT_ORT" && touch "$target/.complete"; }; then
    engine_env+=(PYTHONPATH="$PWD/$target")
    ENGINE_RUNTIME="the onnxruntime $CURRENT_ORT wheel pip installs for Python $PY_VERSION"
  else
    rm -rf "$target"
    env "${engine_env[@]}" "$VENV/bin/ort-cffi-runtime" install --inference --version "$CURRENT_ORT"
    engine_env+=(ORT_CFFI_RUNTIME=inference)
    ENGINE_RUNTIME="the onnxruntime $CURRENT_ORT C library fetched by ort-cffi-runtime install --inference (pip has no wheel for Python $PY_VERSION)"
  fi
  echo "=== the engine tests on $ENGINE_RUNTIME ==="
  env "${engine_env[@]}" "$VENV_PY" -c "
import sys, ort_cffi
from ort_cffi.capi import get_runtime
runtime = get_runtime()
print(f'ONNX Runtime {runtime.version} ({runtime.kind}) from {runtime.library}; backend: {ort_cffi.backend()}')
sys.exit(0 if ort_cffi.backend() == 'engine' and runtime.version == '$CURRENT_ORT' and not runtime.renamed else 'not the engine on $CURRENT_ORT')"
  # Left out on the engine: what needs the training build (it ran above, on the training build), ONNX Runtime's
  # Python layer or its generator (their wheel is the training build's), and what this interpreter lacks.
  engine_left_out=(needs_training_build needs_onnxruntime_python needs_onnxruntime_generator)
  for marker in "${LEFT_OUT[@]}"; do
    case " ${engine_left_out[*]} " in *" $marker "*) ;; *) engine_left_out+=("$marker") ;; esac
  done
  engine_select=(-m "$(printf 'not %s and ' "${engine_left_out[@]}" | sed 's/ and $//')")
  if [ "$SCOPE" = all ]; then
    env "${engine_env[@]}" "$VENV_PY" -m pytest "${engine_select[@]}" "$@"  # every test (pytest.ini's testpaths)
    REASONS+=("on the engine (onnxruntime $CURRENT_ORT): the tests marked $(printf '%s, ' "${engine_left_out[@]}" | sed 's/, $//') (the training build's own: it is not loaded there; they ran on the training build above where this interpreter has it)")
  else
    env "${engine_env[@]}" "$VENV_PY" -m pytest "${engine_select[@]}" "${ENGINE_TESTS[@]}" "$@"
    REASONS+=("on the engine (onnxruntime $CURRENT_ORT): all but the facade, Java-port, Python-API, misuse, artifact and trainer tests ($SCOPE_WHY), and the tests marked $(printf '%s, ' "${engine_left_out[@]}" | sed 's/, $//')")
  fi
fi
