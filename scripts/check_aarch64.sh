#!/usr/bin/env bash
# Check ort_cffi's loader on aarch64 with qemu-user and Debian's arm64 CPython 3.11 (see
# scripts/check_aarch64.py for what is checked and why the training test cannot run there).
# Needs root: it installs qemu-user and adds Debian's arm64 architecture to apt. Works in $WORK.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/ort_cffi_aarch64}
mkdir -p "$WORK/debs" "$WORK/root"
command -v qemu-aarch64 >/dev/null || apt-get install -y -q qemu-user
dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update -q; }
cd "$WORK/debs"
apt-get download python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64 python3.11:arm64 \
  libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64 libssl3:arm64 \
  libbz2-1.0:arm64 liblzma5:arm64 libsqlite3-0:arm64 libuuid1:arm64 libncursesw6:arm64 libtinfo6:arm64 \
  libreadline8:arm64 libcrypt1:arm64 libnsl2:arm64 libtirpc3:arm64 libdb5.3:arm64 libgdbm6:arm64
for deb in *.deb; do dpkg-deb -x "$deb" "$WORK/root"; done
python3 -m pip install -q --target "$WORK/site" --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
  --python-version 3.11 --only-binary=:all: numpy cffi pyelftools platformdirs filelock
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_aarch64 \
  --dest "$WORK" onnxruntime==1.19.2
(cd "$WORK" && python3 -m zipfile -e onnxruntime-1.19.2-*aarch64*.whl ort)
for file in "$WORK"/ort/onnxruntime/capi/libonnxruntime.so.1.19.2 "$WORK"/ort/onnxruntime/capi/onnxruntime_pybind11_state*.so; do
  ORT_CFFI_CACHE_DIR="$WORK/cache" PYTHONPATH="$WORK/site:$ROOT" \
    qemu-aarch64 -L "$WORK/root" "$WORK/root/usr/bin/python3.11" "$ROOT/scripts/check_aarch64.py" "$file"
done
