#!/usr/bin/env bash
# The aarch64 leg: ort_cffi's engine on ONNX Runtime 1.31.1's aarch64 wheel, in Debian's arm64 CPython 3.11,
# under qemu-user on a Linux x86_64 machine. No aarch64 training build of ONNX Runtime exists, so this is how
# training on ARM is checked here. CI runs it after scripts/newest_pythons.sh has made its Debian sid root.
#
#   scripts/check_aarch64.sh            # get what is missing, then run the five parts below
#
# What it gets (each kept under .cache/aarch64, or $ORT_CFFI_AARCH64_CACHE; a second run downloads nothing):
# - qemu-aarch64 from Debian sid's qemu-user (11.x, statically linked): downloaded with the apt of the sid
#   root of scripts/newest_pythons.sh (made if missing) and run from the host. Bookworm's qemu 7.2 crashes in
#   libonnxruntime's initialisation. $ORT_CFFI_QEMU_AARCH64 names another qemu-aarch64 instead.
# - CPython 3.11 for arm64: Debian bookworm's packages, downloaded with the host's apt-get under a private
#   configuration (the host's own apt and dpkg are left alone) and unpacked with dpkg-deb: no chroot.
# - The aarch64 wheels (pip download for manylinux aarch64, cp311), installed into a folder on PYTHONPATH:
#   onnxruntime==1.31.1, ort_cffi's dependencies, and pytest and hypothesis for the tests.
#
# What it runs under qemu, with ORT_CFFI_LIBRARY and ORT_CFFI_BACKEND unset, so that the loader finds the
# onnxruntime wheel and chooses the engine by itself (scripts/check_aarch64.py says what each check is):
# 1. loader: the installed wheel found; the static finder against OrtGetApiBase(); the extension's private
#    image; an inference session.
# 2. training: the embedded example (the digits MLP) for two epochs through the facade: the parameters change,
#    the validation loss falls and its accuracy rises to 0.9, the exported model gives the eval model's logits.
# 3. compare: the same run on the host's training build (x86_64, 1.19.2, in .venv), step by step: the losses
#    and the final parameters agree within 1e-5 relative (measured: 4e-7).
# 4. trainer: ort-cffi-train on the embedded example for 3 epochs (the demo's code path: a linear schedule with
#    warm-up, checkpoints, the inference export), here and on the host's training build: every step's loss
#    agrees within 1e-5 relative, the learning rates are the same, the exported model's accuracy is 0.9 or more.
# 5. tests: tests/facade/test_facade.py, the Java ports in tests/java (TrainingTest with ONNX Runtime's Java
#    test data: $ORT_CFFI_JAVA_TESTDATA, else ../shared/testdata/ort-java-training; OnnxTensorTest and the
#    others) and tests/native/test_raw_capi.py. Left out: the tests marked needs_onnxruntime_python, which
#    need ONNX Runtime's training Python layer (none in these files today), and needs_training_build, which
#    check what only the training build has (here the raw layer's two tests of its OrtTrainingApi table);
#    for time, the Java port's two exhaustive fp16/bf16 round trips, pure Python that the x86_64 legs run.
# The rest of the suite is left out for time: under emulation a training step of the digits MLP takes 30-40 ms
# (1-2 ms natively), and these tests take about 10 times as long as natively. Measured on a 2-core machine
# shared with other work (2026-12-07), the whole leg with .cache/aarch64 filled: 4 min 30 s at load average 5
# (loader 13 s, training 25 s, compare 1 s, trainer 35 s, tests 194 s for 109 tests); filling the cache adds
# 30-60 s. At load average 11, 80 of these tests took 184-267 s: on a busy machine expect up to about 8 minutes.
# CI's budget for the leg is 10 minutes.
#
# Needs root (the sid root), Debian's package archive and PyPI; exits non-zero when anything fails, after
# running every part, with each part's time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${ORT_CFFI_AARCH64_CACHE:-$ROOT/.cache/aarch64}
MIRROR=${ORT_CFFI_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${ORT_CFFI_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
ORT_VERSION=1.31.1
JAVA_DATA=${ORT_CFFI_JAVA_TESTDATA:-$(cd "$ROOT/.." && pwd)/shared/testdata/ort-java-training}

# Debian bookworm's CPython 3.11 and the libraries it and the wheels load (libmpdec3 is not in bookworm:
# its _decimal carries its own).
PYTHON_PACKAGES=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1 libstdc++6 zlib1g
  libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libdb5.3
  libgdbm6 libnsl2 libtirpc3 libcrypt1)
# onnx as the 3.11 leg has it (setup.py's test extras); pytest and hypothesis for the tests.
REQUIREMENTS=("onnxruntime==$ORT_VERSION" "onnx>=1.14,<1.17" "numpy>=1.22" "cffi>=1.16" "pyelftools>=0.29"
  "platformdirs>=3" "filelock>=3.12" protobuf "pytest>=7" "hypothesis>=6")
# Each older manylinux tag must be named too, or pip finds no cffi wheel.
PIP_TARGET=(--only-binary=:all: --implementation cp --python-version 3.11 --platform manylinux_2_28_aarch64
  --platform manylinux_2_27_aarch64 --platform manylinux_2_26_aarch64 --platform manylinux_2_17_aarch64
  --platform manylinux2014_aarch64)
TESTS=(tests/facade/test_facade.py tests/java tests/native/test_raw_capi.py)
# What cannot run on the engine, by marker (pytest.ini says what each means).
LEFT_OUT_MARKERS="not needs_onnxruntime_python and not needs_training_build"
# For time: every 16-bit pattern through ort_cffi's pure-Python conversions (130 s under qemu, no runtime call).
LEFT_OUT=(tests/java/test_onnx_tensor_java.py::test_fp16_round_trip tests/java/test_onnx_tensor_java.py::test_bf16_round_trip)

QEMU_DIR=$CACHE/qemu
PYTHON_ROOT=$CACHE/python3.11-arm64
SITE=$CACHE/site-cp311-aarch64
WRAPPER=$CACHE/bin/python3.11

die() { echo "check_aarch64.sh: $*" >&2; exit 1; }
say() { echo "=== $* ===" >&2; }

# --- qemu-aarch64 ---------------------------------------------------------------------------------------

qemu_usable() {  # qemu_usable PATH: it runs, and is not the 7.x that crashes in libonnxruntime
  local major
  [ -x "$1" ] || return 1
  major=$("$1" --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\)\..*/\1/p')
  [ -n "$major" ] && [ "$major" -ge 8 ]
}

fetch_qemu() {
  local newest=$ROOT/scripts/newest_pythons.sh sid inside=/tmp/ort_cffi-qemu-user deb
  say "qemu-aarch64: Debian sid's qemu-user, through the sid root's apt"
  sid=$(bash "$newest" path)
  # `run` makes the root first where it is missing, and enters it with the host's DNS configuration (under a
  # shared lock: `make` would wait for every other run to end). The package is only downloaded, not
  # installed, so the root stays as newest_pythons.sh made it (apt's lists aside).
  bash "$newest" run python3.14 -- bash -c "apt-get -q update >/dev/null && rm -rf $inside && mkdir -p $inside \
    && cd $inside && apt-get -q download qemu-user" >&2 || die "could not download qemu-user in the sid root ($sid)"
  deb=$(ls "$sid$inside"/qemu-user_*.deb) || die "no qemu-user package in $sid$inside"
  mkdir -p "$QEMU_DIR"
  dpkg-deb --fsys-tarfile "$deb" | tar -x -O ./usr/bin/qemu-aarch64 >"$QEMU_DIR/qemu-aarch64.part"
  chmod +x "$QEMU_DIR/qemu-aarch64.part"
  mv "$QEMU_DIR/qemu-aarch64.part" "$QEMU_DIR/qemu-aarch64"
  basename "$deb" >"$QEMU_DIR/from"
  rm -rf "${sid:?}$inside"
}

# --- CPython 3.11 for arm64 -----------------------------------------------------------------------------

debian_apt() {  # apt-get with a private state under $CACHE/apt: bookworm's arm64 packages, nothing installed
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg apt=$CACHE/apt
  [ -f "$keyring" ] || die "Debian's archive keyring ($keyring) is missing: apt-get install debian-archive-keyring"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d"
  touch "$apt/status"
  cat >"$apt/sources.list" <<EOF
deb [signed-by=$keyring] $MIRROR bookworm main
deb [signed-by=$keyring] $MIRROR bookworm-updates main
deb [signed-by=$keyring] $SECURITY_MIRROR bookworm-security main
EOF
  apt-get -q -o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/sources.list.d" \
    -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status" -o Dir::Cache="$apt/cache" \
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Acquire::Check-Valid-Until=false "$@"
}

fetch_python() {
  local debs=$CACHE/debs deb
  say "CPython 3.11 for arm64: Debian bookworm's packages"
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || die "needs apt-get and dpkg-deb (a Debian host)"
  debian_apt update >/dev/null || die "apt-get update failed for bookworm arm64 (see above)"
  rm -rf "$debs" "$PYTHON_ROOT.part"
  mkdir -p "$debs" "$PYTHON_ROOT.part"
  (cd "$debs" && debian_apt download "${PYTHON_PACKAGES[@]/%/:arm64}" >/dev/null) \
    || die "apt-get download failed for one of: ${PYTHON_PACKAGES[*]} (arm64)"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$PYTHON_ROOT.part"; done
  printf '%s\n' "${PYTHON_PACKAGES[@]}" >"$PYTHON_ROOT.part/.packages"
  (cd "$debs" && ls) >"$PYTHON_ROOT.part/.debs"  # which versions
  rm -rf "$PYTHON_ROOT"
  mv "$PYTHON_ROOT.part" "$PYTHON_ROOT"
  rm -rf "$debs"
}

# --- the wheels -----------------------------------------------------------------------------------------

fetch_wheels() {
  local pip_python=python3
  [ -x "$ROOT/.venv/bin/python" ] && pip_python=$ROOT/.venv/bin/python
  say "the aarch64 wheels: ${REQUIREMENTS[*]}"
  mkdir -p "$CACHE/wheels"
  "$pip_python" -m pip download -q --disable-pip-version-check -d "$CACHE/wheels" "${PIP_TARGET[@]}" \
    "${REQUIREMENTS[@]}" || die "pip download of the aarch64 wheels failed"
  rm -rf "$SITE.part"
  "$pip_python" -m pip install -q --disable-pip-version-check --no-index --find-links "$CACHE/wheels" \
    --no-warn-conflicts --target "$SITE.part" "${PIP_TARGET[@]}" "${REQUIREMENTS[@]}" 2> >(grep -v "Running pip as the 'root' user" >&2) \
    || die "installing the aarch64 wheels into $SITE failed"
  printf '%s\n' "${REQUIREMENTS[@]}" >"$SITE.part/.requirements"
  rm -rf "$SITE"
  mv "$SITE.part" "$SITE"
}

# --- getting it all -------------------------------------------------------------------------------------

started=$SECONDS
QEMU=${ORT_CFFI_QEMU_AARCH64:-$QEMU_DIR/qemu-aarch64}
if ! qemu_usable "$QEMU"; then
  [ -z "${ORT_CFFI_QEMU_AARCH64:-}" ] || die "\$ORT_CFFI_QEMU_AARCH64=$QEMU does not run, or is older than qemu 8"
  fetch_qemu
  qemu_usable "$QEMU" || die "$QEMU, from Debian sid, does not run or is older than qemu 8"
fi
[ -x "$PYTHON_ROOT/usr/bin/python3.11" ] \
  && [ "$(cat "$PYTHON_ROOT/.packages" 2>/dev/null)" = "$(printf '%s\n' "${PYTHON_PACKAGES[@]}")" ] || fetch_python
[ "$(cat "$SITE/.requirements" 2>/dev/null)" = "$(printf '%s\n' "${REQUIREMENTS[@]}")" ] || fetch_wheels
# The interpreter as the tests see it (sys.executable): a script that runs the arm64 python under qemu. qemu-user
# hands an execve to the host kernel, which cannot run an aarch64 file where binfmt_misc has no qemu entry,
# but runs this script; so the tests' child interpreters run under qemu too. (-0 sets the argv[0] CPython
# takes sys.executable from.)
mkdir -p "$(dirname "$WRAPPER")"
cat >"$WRAPPER" <<EOF
#!/bin/sh
PYTHONHOME='$PYTHON_ROOT/usr' exec '$QEMU' -L '$PYTHON_ROOT' -0 '$WRAPPER' '$PYTHON_ROOT/usr/bin/python3.11' "\$@"
EOF
chmod +x "$WRAPPER"
say "ready in $((SECONDS - started)) s: $("$QEMU" --version | head -n1), $("$WRAPPER" -c 'import platform, sys; print(
  f"CPython {platform.python_version()} on {platform.machine()}")' 2>&1 | tail -n1)"

# --- the three parts, under qemu --------------------------------------------------------------------------

export PYTHONPATH=$ROOT:$SITE
export ORT_CFFI_CACHE_DIR=$CACHE/ort-cffi  # the loader's private images, apart from the host's
export ORT_CFFI_JAVA_TESTDATA=$JAVA_DATA
export OMP_NUM_THREADS=1
unset ORT_CFFI_LIBRARY ORT_CFFI_BACKEND
cd "$ROOT"
RUNS=$(mktemp -d)
trap 'rm -rf "$RUNS"' EXIT
failed=()
summary=()
part() {  # part NAME COMMAND...: run it, time it, and go on to the next part when it fails
  local name=$1 began=$SECONDS status=0
  shift
  say "$name"
  "$@" || status=$?
  summary+=("$(printf '%-9s %4d s  %s' "$name" $((SECONDS - began)) "$([ $status = 0 ] && echo passed || echo "FAILED (exit $status)")")")
  [ $status = 0 ] || failed+=("$name")
}
deselected=()
for test in "${LEFT_OUT[@]}"; do deselected+=(--deselect "$test"); done
part loader timeout 600 "$WRAPPER" scripts/check_aarch64.py loader "$ORT_VERSION"
part training timeout 600 "$WRAPPER" scripts/check_aarch64.py train "$RUNS/aarch64.npz"
# The same run on the host's training build (CI's 3.11 leg made .venv), and the two runs compared.
compare_with_training_build() {
  [ -x "$ROOT/.venv/bin/python" ] || { echo "no .venv with the training build here: run scripts/test.sh first" >&2; return 1; }
  env -u PYTHONPATH -u ORT_CFFI_CACHE_DIR ORT_CFFI_BACKEND=training-api "$ROOT/.venv/bin/python" \
    scripts/check_aarch64.py reference "$RUNS/x86_64.npz" 2> >(grep -v "CleanUnusedInitializers" >&2) \
    && env -u PYTHONPATH "$ROOT/.venv/bin/python" scripts/check_aarch64.py compare "$RUNS/aarch64.npz" "$RUNS/x86_64.npz"
}
part compare compare_with_training_build
# ort-cffi-train on the embedded example, as scripts/demo.sh runs it, here and on the host's training build
# (through the command's entry point: ort_cffi is on PYTHONPATH here, not installed).
TRAIN=('import sys, ort_cffi_commands; sys.argv[0] = "ort-cffi-train"; sys.exit(ort_cffi_commands.train())'
  --epochs 3 --no-plot --no-progress)
trainer_alike() {
  [ -x "$ROOT/.venv/bin/python" ] || { echo "no .venv with the training build here: run scripts/test.sh first" >&2; return 1; }
  timeout 600 "$WRAPPER" -c "${TRAIN[@]}" --out "$RUNS/aarch64-train" || return
  env -u PYTHONPATH -u ORT_CFFI_CACHE_DIR ORT_CFFI_BACKEND=training-api "$ROOT/.venv/bin/python" -c "${TRAIN[@]}" \
    --out "$RUNS/x86_64-train" >/dev/null 2> >(grep -v "CleanUnusedInitializers" >&2) || return
  env -u PYTHONPATH "$ROOT/.venv/bin/python" scripts/check_aarch64.py compare-trainer "$RUNS/aarch64-train" "$RUNS/x86_64-train"
}
part trainer trainer_alike
part tests timeout 900 "$WRAPPER" -m pytest -q -p no:cacheprovider -m "$LEFT_OUT_MARKERS" \
  "${deselected[@]}" "${TESTS[@]}"
say "aarch64 under qemu, engine on onnxruntime $ORT_VERSION: $((SECONDS - started)) s in all"
printf '%s\n' "${summary[@]}" >&2
[ ${#failed[@]} = 0 ] || die "failed: ${failed[*]}"
